"""Running rows routed to several models: each row by the member its route value names, the
members of one family as one NetFuse-merged graph when that pays (Jeong et al., 2020).

:class:`MergedRunner` runs a merged graph (input ``[N, B, ...]``: member ``i``'s rows at index
``i``, each padded to the widest member's rows; output ``[N, B, ...]``). :class:`RoutedModel`
is the :class:`~modelsql.operators.backends.BackendModel` a routed PREDICT runs: it splits a
batch by route value, decides per batch (as dLoRA decides per batch whether merging pays) between
one merged run and one run per member present, and puts each row's outputs back in row order.

On a CUDA device the merged graph and the members are :class:`~modelsql.operators.backends.cuda.CudaModel`
sessions whose runs replay captured CUDA graphs (Nimble, Kwon et al., NeurIPS 2020): a merged run's rows per
member are then padded to a batch bucket (:data:`~modelsql.operators.backends.cuda.BUCKETS`, ``row_buckets``),
so a handful of captured shapes serves every batch.
"""

from __future__ import annotations

import threading
from typing import Callable, Optional, Sequence

import numpy as np

from modelsql.errors import DataError
from modelsql.operators.backends.cuda import BUCKETS, bucket_of

__all__ = ["MergedRunner", "RoutedModel", "SharedFamily", "FamilyMember"]


class MergedRunner:
    """A merged graph's session and how to feed it.

    Args:
        model: the merged graph's loaded session (a BackendModel).
        n: the number of members (instances) it runs.
        row_buckets: pad each run's rows per member up to one of these (a captured CUDA graph's shapes), or
            None (pad to the widest member's rows only).
    """

    def __init__(self, model, n: int, row_buckets: Optional[Sequence[int]] = None) -> None:
        self.model, self.n, self.row_buckets = model, n, row_buckets
        dims = [list(model.input_shapes.get(name) or []) for name in model.input_names]
        fixed = [d[1] for d in dims if len(d) > 1 and isinstance(d[1], int) and d[1] > 0]
        self.fixed_rows = min(fixed) if fixed else None
        """Rows per member of one run when the members have a fixed batch dimension, else None."""

    def run(self, parts: Sequence[Optional[dict[str, np.ndarray]]], outputs: Optional[Sequence[str]]) -> list:
        """One merged run: ``parts[i]`` are member ``i``'s feeds (None: no rows). Returns, per member, its
        outputs (a list of arrays, its own rows only) or None. Members with a fixed batch dimension ``b``
        run in rounds of ``b`` rows each."""
        rows = [0 if p is None else len(next(iter(p.values()))) for p in parts]
        b = self.fixed_rows
        if b is None and self.row_buckets:
            return self._run_once(parts, rows, outputs, bucket_of(max(rows), self.row_buckets))
        if b is None or max(rows) <= b:
            return self._run_once(parts, rows, outputs, b or max(rows))
        rounds = []
        for start in range(0, max(rows), b):
            sub = [None if p is None or r <= start else {k: v[start:start + b] for k, v in p.items()}
                   for p, r in zip(parts, rows)]
            rounds.append(self._run_once(sub, [0 if q is None else min(b, r - start) for q, r in zip(sub, rows)],
                                         outputs, b))
        n_outputs = len(outputs) if outputs is not None else len(self.model.output_names)  # None: all of them
        return [None if r == 0 else [np.concatenate([rd[i][k] for rd in rounds if rd[i] is not None], axis=0)
                                     for k in range(n_outputs)] for i, r in enumerate(rows)]

    def _run_once(self, parts, rows: list[int], outputs: Optional[Sequence[str]], widest: int) -> list:
        filler = next(p for p in parts if p is not None)
        feeds = {}
        for name in filler:
            blocks = []
            for p, r in zip(parts, rows):
                block = (p if p is not None else filler)[name]
                if len(block) < widest:  # pad with real rows: they are as valid as the member's own
                    reps = -(-widest // max(1, len(block)))
                    block = np.concatenate([block] * reps, axis=0)[:widest] if len(block) else block
                blocks.append(block[:widest])
            feeds[name] = np.stack(blocks)
        results = self.model.run(feeds, list(outputs) if outputs is not None else None)
        return [None if r == 0 else [res[i, :r] for res in results] for i, r in enumerate(rows)]


class RoutedModel:
    """The model of ``PREDICT(MODELS (...) ROUTE BY c, ...)``.

    Args:
        names: the members' names (lower case), in member order.
        members: each member's loaded session (BackendModel), same order.
        route_input: the feed holding each row's route value (text).
        label: ``models (a, b)`` for messages.
        merged: the family's :class:`MergedRunner`, or None (always run the members separately).
        choose: ``rows per member -> merge?``, asked per batch when ``merged`` is given.
    """

    def __init__(self, names: Sequence[str], members: Sequence, route_input: str, label: str,
                 merged: Optional[MergedRunner] = None,
                 choose: Optional[Callable[[list[int]], bool]] = None) -> None:
        self.names = list(names)
        self.members = list(members)
        self.route_input = route_input
        self.label = label
        self.merged, self.choose = merged, choose
        first = self.members[0]
        self.input_names = list(first.input_names) + [route_input]
        self.input_shapes = dict(first.input_shapes, **{route_input: []})
        self.fixed_batch: Optional[int] = None
        self.intra_op_threads = first.intra_op_threads
        self._index = {n: i for i, n in enumerate(self.names)}
        self._lock = threading.Lock()
        self.merged_runs = 0
        """Batches run as one merged graph (EXPLAIN ANALYZE prints it)."""
        self.separate_runs = 0
        """Member runs made one model at a time."""
        self.declined: Optional[str] = None
        """Why the merge the plan asked for was declined (the members run separately), set by the planner
        for EXPLAIN; None when it was not."""

    def _groups(self, routes: np.ndarray) -> list[Optional[np.ndarray]]:
        keys = np.array([str(r).lower() for r in routes], dtype=object)
        groups: list[Optional[np.ndarray]] = [None] * len(self.names)
        for value in dict.fromkeys(keys.tolist()):
            i = self._index.get(value)
            if i is None:
                row = int(np.flatnonzero(keys == value)[0])
                raise DataError(
                    f'PREDICT over {self.label}: a row routes to "{routes[row]}", which is not one of the models '
                    f"({', '.join(self.names)}); each ROUTE BY value must name one of them.", code="route_unknown")
            groups[i] = np.flatnonzero(keys == value)
        return groups

    def run(self, feeds: dict[str, np.ndarray], outputs: Optional[Sequence[str]] = None) -> list[np.ndarray]:
        """Each row's named outputs from the member its route value names, in row order.

        Raises:
            DataError: a route value names no member (``route_unknown``); a member's run failed.
        """
        feeds = dict(feeds)
        routes = feeds.pop(self.route_input)
        n = len(routes)
        groups = self._groups(routes)
        parts = [None if g is None else {k: v[g] for k, v in feeds.items()} for g in groups]
        rows = [0 if g is None else len(g) for g in groups]
        names = list(outputs) if outputs is not None else None
        if self.merged is not None and self.choose is not None and self.choose(rows):
            results = self.merged.run(parts, names)
            with self._lock:
                self.merged_runs += 1
        else:
            results = [None if p is None else self.members[i].run(p, names) for i, p in enumerate(parts)]
            with self._lock:
                self.separate_runs += sum(p is not None for p in parts)
        return _assemble(results, groups, n)


def _assemble(results: list, groups: list, n: int) -> list[np.ndarray]:
    """Each output's rows put back in the batch's order."""
    present = [r for r in results if r is not None]
    out = []
    for k, sample in enumerate(present[0]):
        sample = np.asarray(sample)
        dtype = np.result_type(*[np.asarray(r[k]).dtype for r in present])  # e.g. the widest string labels
        full = np.empty((n,) + sample.shape[1:], dtype=dtype)
        for res, g in zip(results, groups):
            if res is not None:
                full[g] = res[k]
        out.append(full)
    return out


class SharedFamily:
    """One merged graph with a shared input (``[B, ...]`` in, ``[N, B, ...]`` out) run once per chunk for
    N PREDICTs of one statement; each PREDICT's :class:`FamilyMember` takes its own outputs.

    DuckDB calls the PREDICTs of a shared scan one after another on each chunk in one thread; the first
    member to ask runs the merged graph and leaves every member's outputs in ``memo`` (a
    :class:`~modelsql.operators.backends.pipeline.StepMemo`: checked against the feeds, so another chunk
    is never answered from it).

    Args:
        model: the merged graph's session; ``key``: its memo key; ``memo``: the memo.
        instances: on a CUDA device, the members N: each chunk's ``B`` rows are then padded (the last row
            repeated) to the bucket of ``max(B, N)`` rows, since a :class:`~.cuda.CudaModel` captures per
            bucket of the first input axis and cuts its outputs' first axis (here the N instances) to the
            rows fed; None on the CPU (no padding).
    """

    def __init__(self, model, key: str, memo, instances: Optional[int] = None) -> None:
        self.model, self.key, self.memo, self.instances = model, key, memo, instances
        self.runs = 0
        self.output_names = list(model.output_names)

    def outputs_for(self, feeds: dict[str, np.ndarray], index: int, names: Sequence[str]) -> list[np.ndarray]:
        wanted = [f"{index}/{n}" for n in names]
        hit = self.memo.get(self.key, feeds, wanted)
        if hit is not None:
            return hit
        results = self._run(feeds)
        self.runs += 1
        n = results[0].shape[0] if results else 0
        flat = [f"{i}/{o}" for i in range(n) for o in self.output_names]
        values = [res[i] for i in range(n) for res in results]
        self.memo.put(self.key, feeds, flat, values)
        return [values[flat.index(w)] for w in wanted]

    def _run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """The merged graph on ``feeds`` (``[B, ...]`` each): outputs ``[N, B, ...]`` (on a CUDA device in
        slices of at most :data:`~.cuda.BUCKETS`' largest rows, each padded as the class docstring says)."""
        rows = len(next(iter(feeds.values()))) if feeds else 0
        if self.instances is None or rows == 0:
            return self.model.run(feeds, self.output_names)
        step = BUCKETS[-1]
        pieces = [self._padded_run({k: v[i:i + step] for k, v in feeds.items()}) for i in range(0, rows, step)]
        if len(pieces) == 1:
            return pieces[0]
        return [np.concatenate([p[j] for p in pieces], axis=1) for j in range(len(self.output_names))]

    def _padded_run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        rows = len(next(iter(feeds.values())))
        assert self.instances is not None  # _run pads only on a CUDA device
        padded = bucket_of(max(rows, self.instances), BUCKETS)
        grown = {k: np.concatenate([v, np.repeat(v[-1:], padded - rows, axis=0)]) if padded > rows else v
                 for k, v in feeds.items()}
        return [np.asarray(r)[:, :rows] for r in self.model.run(grown, self.output_names)]


class FamilyMember:
    """Member ``index`` of a :class:`SharedFamily`, as the BackendModel its PREDICT runs.

    Args:
        family: the shared merged run; ``index``: this member's position in it.
        own: the member's own session (input names and shapes; the outputs it would give).
        label: ``'model "m" version v'``.
    """

    def __init__(self, family: SharedFamily, index: int, own, label: str) -> None:
        self.family, self.index, self.own, self.label = family, index, own, label
        self.input_names = list(own.input_names)
        self.input_shapes = dict(own.input_shapes)
        self.fixed_batch = None
        self.intra_op_threads = own.intra_op_threads

    def run(self, feeds: dict[str, np.ndarray], outputs: Optional[Sequence[str]] = None) -> list[np.ndarray]:
        names = list(outputs) if outputs is not None else list(self.own.output_names)
        return self.family.outputs_for(feeds, self.index, names)
