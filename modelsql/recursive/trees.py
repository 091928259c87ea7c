"""Trees as PREDICT and TUNE carry them, and the level schedule that executes a recursive model over them.

A tree is a parent-index list: node ``i``'s parent is ``parents[i]`` (-1 for the one root), with one value
row per node (``values``: float32, shape (nodes,) or (nodes, F)). In SQL that is two list columns of equal
length per row, e.g. ``values FLOAT[]`` and ``parents BIGINT[]``.

Jeong et al. (EuroSys 2018, "Improving the expressiveness of deep learning frameworks with recursion")
execute a recursive network's independent sub-calls in parallel instead of one after another. Over a batch
of trees that means: every node whose children are all computed can run now, so all nodes of one *height*
(leaves 0, a parent one more than its highest child) run as one batch. :class:`Schedule` computes that
order once per batch, in NumPy; :func:`level_batched` runs a cell level by level with gathers and
``index_copy`` (differentiable: gradients flow to every node), and :func:`naive_recursion` is the Python
recursion it replaces (the reference in tests and the baseline in ``benchmarks/recursion.py``).

A *cell* computes the state of ``m`` nodes from their values and their children's states:
``cell(x, child_states, child_parent, m) -> states``, with ``x`` (m, F), ``child_states`` a tuple of
(e, ...) tensors (one row per child edge), ``child_parent`` int64 (e,) the position in [0, m) of each
edge's parent, and ``states`` a tuple of (m, ...) tensors.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np

from modelsql.errors import DataError

__all__ = ["Trees", "Schedule", "schedule", "level_batched", "naive_recursion"]


class Trees:
    """A batch of trees: per tree a values array (nodes,) or (nodes, F) and a parents array (nodes,).

    Indexable like an array of rows (``trees[idx]`` with an int array, a tensor of indices or a slice gives
    the sub-batch), so TUNE's training loop draws minibatches of trees as it draws rows of a matrix.

    Raises:
        DataError: ``invalid_tree`` naming the row (lengths differ, not exactly one root, a parent out of
            range, a cycle).
    """

    def __init__(self, values: Sequence, parents: Sequence, *, check: bool = True) -> None:
        self.values = [np.asarray(v, np.float32) for v in values]
        self.parents = [np.asarray(p, np.int64) for p in parents]
        if len(self.values) != len(self.parents):
            raise DataError(f"{len(self.values)} value lists for {len(self.parents)} parent lists", code="invalid_tree")
        if check:
            for row, (v, p) in enumerate(zip(self.values, self.parents)):
                _check_tree(row, v, p)

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, idx) -> "Trees":
        if isinstance(idx, slice):
            return Trees(self.values[idx], self.parents[idx], check=False)
        rows = np.asarray(idx).reshape(-1).tolist()
        return Trees([self.values[i] for i in rows], [self.parents[i] for i in rows], check=False)

    @property
    def shape(self) -> tuple[int, int]:
        """(trees, values per node): what a factory gets as ``in_features``."""
        first = self.values[0] if self.values else np.zeros((0,))
        return len(self), (1 if first.ndim == 1 else int(first.shape[1]))

    @property
    def nodes(self) -> int:
        return int(sum(len(p) for p in self.parents))

    def digest(self) -> bytes:
        """SHA-256 of every array, in order (the stage-tree key of a study over trees)."""
        h = hashlib.sha256()
        for v, p in zip(self.values, self.parents):
            h.update(np.ascontiguousarray(v).tobytes())
            h.update(np.ascontiguousarray(p).tobytes())
        return h.digest()


def _check_tree(row: int, values: np.ndarray, parents: np.ndarray) -> None:
    n = len(parents)
    if len(values) != n:
        raise DataError(f"tree in row {row}: {len(values)} values for {n} parents", code="invalid_tree")
    if n == 0 or int((parents == -1).sum()) != 1:
        raise DataError(f"tree in row {row}: needs exactly one root (parent -1), has {int((parents == -1).sum())}",
                        code="invalid_tree")
    bad = np.flatnonzero((parents < -1) | (parents >= n) | (parents == np.arange(n)))
    if bad.size:
        raise DataError(f"tree in row {row}: node {int(bad[0])} has parent {int(parents[bad[0]])}, not a node of "
                        f"the tree (0..{n - 1}) or -1", code="invalid_tree")
    if _heights(parents) is None:
        raise DataError(f"tree in row {row}: the parent links form a cycle", code="invalid_tree")


def _heights(parents: np.ndarray):
    """Each node's height (leaves 0), or None when the links have a cycle."""
    n = len(parents)
    children_left = np.bincount(parents[parents >= 0], minlength=n)
    height = np.zeros(n, np.int64)
    ready = list(np.flatnonzero(children_left == 0))
    done = 0
    while ready:
        node = ready.pop()
        done += 1
        p = parents[node]
        if p >= 0:
            height[p] = max(height[p], height[node] + 1)
            children_left[p] -= 1
            if children_left[p] == 0:
                ready.append(p)
    return height if done == n else None


@dataclass(frozen=True)
class Schedule:
    """The level order of a batch of trees.

    Attributes:
        levels: per height (leaves first) the global node ids computed together (int64).
        child_ids: per height the global ids of those nodes' children, one per edge (int64).
        child_parent: per height each edge's parent as a position in that height's ``levels`` entry (int64).
        roots: the global id of each tree's root, in tree order (int64).
        nodes: total nodes.
    """

    levels: tuple
    child_ids: tuple
    child_parent: tuple
    roots: np.ndarray
    nodes: int


def schedule(parents: Sequence[np.ndarray]) -> Schedule:
    """The :class:`Schedule` of trees given as parent-index arrays (checked: see :class:`Trees`)."""
    offsets = np.concatenate([[0], np.cumsum([len(p) for p in parents])]).astype(np.int64)
    glob_parent = np.concatenate([np.where(p >= 0, p + o, -1) for p, o in zip(parents, offsets[:-1])]) \
        if parents else np.zeros(0, np.int64)
    heights = np.concatenate([_heights(np.asarray(p)) for p in parents]) if parents else np.zeros(0, np.int64)
    roots = np.flatnonzero(glob_parent == -1)
    levels, child_ids, child_parent = [], [], []
    position = np.empty(len(glob_parent), np.int64)
    for h in range(int(heights.max()) + 1 if len(heights) else 0):
        ids = np.flatnonzero(heights == h)
        position[ids] = np.arange(len(ids))
        kids = np.flatnonzero((glob_parent >= 0) & (heights[np.maximum(glob_parent, 0)] == h))
        levels.append(ids)
        child_ids.append(kids)
        child_parent.append(position[glob_parent[kids]])
    return Schedule(tuple(levels), tuple(child_ids), tuple(child_parent), roots, int(len(glob_parent)))


def _node_values(trees: Trees):
    import torch

    x = np.concatenate([v.reshape(len(v), -1) for v in trees.values]) if len(trees) else np.zeros((0, 1), np.float32)
    return torch.from_numpy(np.ascontiguousarray(x, np.float32))


def level_batched(cell: Callable, trees: Trees, state_shapes: Sequence[tuple], plan: Optional[Schedule] = None):
    """Run ``cell`` over every node of ``trees``, one height at a time; the root states, in tree order.

    Args:
        cell: see the module docstring.
        trees: the batch.
        state_shapes: the per-node shape of each state tensor (e.g. ``[(H,), (H,)]`` for a TreeLSTM's h, c).
        plan: a precomputed :func:`schedule` of ``trees.parents``.

    Returns:
        A tuple of tensors (trees, *shape), one per state.
    """
    import torch

    plan = plan or schedule(trees.parents)
    x = _node_values(trees)
    states = [torch.zeros((plan.nodes,) + tuple(s), dtype=x.dtype) for s in state_shapes]
    for ids, kids, where in zip(plan.levels, plan.child_ids, plan.child_parent):
        t_ids, t_kids = torch.from_numpy(ids), torch.from_numpy(kids)
        child = tuple(s.index_select(0, t_kids) for s in states)
        new = cell(x.index_select(0, t_ids), child, torch.from_numpy(where), len(ids))
        states = [s.index_copy(0, t_ids, n) for s, n in zip(states, new)]
    roots = torch.from_numpy(plan.roots)
    return tuple(s.index_select(0, roots) for s in states)


def naive_recursion(cell: Callable, trees: Trees, state_shapes: Sequence[tuple]):
    """The same computation by Python recursion, one node per cell call (the baseline)."""
    import torch

    out = []
    for values, parents in zip(trees.values, trees.parents):
        x = torch.from_numpy(np.ascontiguousarray(values.reshape(len(values), -1), np.float32))
        children = [np.flatnonzero(parents == i) for i in range(len(parents))]

        def visit(i: int):
            below = [visit(int(c)) for c in children[i]]
            child = tuple(torch.stack([b[k][0] for b in below]) if below else torch.zeros((0,) + tuple(s))
                          for k, s in enumerate(state_shapes))
            return cell(x[i:i + 1], child, torch.zeros(len(below), dtype=torch.int64), 1)

        out.append(visit(int(np.flatnonzero(parents == -1)[0])))
    return tuple(torch.cat([o[k] for o in out]) for k in range(len(state_shapes)))
