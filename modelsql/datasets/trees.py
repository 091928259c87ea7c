"""Random trees with a structural label, made in code: the data of the recursive-model tests and benchmark.

:func:`random_trees` draws ``n`` trees of ``min_nodes``..``max_nodes`` nodes (each node's parent uniform
among the earlier nodes of a random order, so shapes vary from chains to bushes) with one float value per
node. :func:`labelled_trees` adds a label a recursive model can learn and a bag of values cannot: 1 when the
depth-weighted sum of the values (deeper nodes count less) is positive.
"""

from __future__ import annotations

import numpy as np

__all__ = ["random_trees", "labelled_trees"]


def random_trees(n: int, min_nodes: int = 19, max_nodes: int = 49, seed: int = 0) -> tuple[list, list]:
    """(values, parents): per tree float32 (nodes,) and int64 (nodes,), -1 marking the root."""
    rng = np.random.default_rng(seed)
    values, parents = [], []
    for _ in range(n):
        size = int(rng.integers(min_nodes, max_nodes + 1))
        order = rng.permutation(size)
        p = np.empty(size, np.int64)
        p[order[0]] = -1
        for k in range(1, size):
            p[order[k]] = order[rng.integers(0, k)]
        parents.append(p)
        values.append(rng.standard_normal(size).astype(np.float32))
    return values, parents


def _depths(parents: np.ndarray) -> np.ndarray:
    depth = np.full(len(parents), -1)
    for i in range(len(parents)):
        chain, j = [], i
        while depth[j] < 0 and parents[j] >= 0:
            chain.append(j)
            j = parents[j]
        base = depth[j] if depth[j] >= 0 else 0
        depth[j] = base
        for k, node in enumerate(reversed(chain)):
            depth[node] = base + k + 1
    return depth


def labelled_trees(n: int, seed: int = 0, min_nodes: int = 5, max_nodes: int = 15) -> tuple[list, list, np.ndarray]:
    """(values, parents, labels int64 (n,)): label 1 when sum(value / (1 + depth)) > 0."""
    values, parents = random_trees(n, min_nodes, max_nodes, seed)
    labels = np.array([int((v / (1 + _depths(p))).sum() > 0) for v, p in zip(values, parents)], np.int64)
    return values, parents, labels
