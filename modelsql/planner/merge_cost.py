"""When a NetFuse merge pays: the measured rule the planner and the server use.

Merging N models of one architecture (NetFuse, Jeong et al., 2020) removes N - 1
runtime calls and lets one kernel launch cover N instances; it does not remove
work, and on a CPU its general operators (batched MatMul, grouped Conv) can be
slower than N separate dense ones once each instance has real work. So the
estimate is

    separate = N * (CALL_MS + work)          merged = CALL_MS + N * work * penalty

with ``work`` = :func:`instance_ms` (FLOPs at :data:`FLOPS_PER_MS`, or weight bytes at
:data:`BYTES_PER_MS` when that is slower: a one-row GEMV reads every weight) for one
instance's rows, and ``penalty`` the merged operators' measured slowdown
(:data:`MERGED_PENALTY`). The merge is chosen when ``separate / merged`` is at least
:data:`MIN_GAIN`. All constants are fitted to ``benchmarks/netfuse.py`` (ONNX Runtime
1.32, 2 cores, one intra-op thread per session, spinning off); the profiling issue's
learned cost model (Mantis) replaces them.

Every instance of a merged run gets the same number of rows (the largest member's:
the others are padded), so an uneven routing costs the merge padding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

__all__ = ["MergeEstimate", "estimate", "instance_ms", "member_cost", "CALL_MS", "MIN_GAIN"]

CALL_MS = 0.012
"""Fixed cost of one ONNX Runtime ``run()`` from Python (feeds, launch, fetch), ms."""
FLOPS_PER_MS = 1.5e7
"""Sustained FLOPs per millisecond of one intra-op thread on small dense kernels (15 GFLOP/s)."""
BYTES_PER_MS = 8.0e6
"""Weight bytes read per millisecond when a kernel is memory-bound (8 GB/s)."""
MERGED_PENALTY = {"matmul": 1.3, "conv": 1.0}
"""Slowdown of a merged graph's work against the separate models' (batched MatMul: no prepacked weights;
grouped 1x1 Conv: about even at one row per instance), measured in ``benchmarks/netfuse.py``."""
CONV_MAX_ROWS = 2
"""Per-instance rows up to which per-instance dense layers are written as a grouped 1x1 Conv (faster than a
batched MatMul for one or two rows in the benchmark; slower for eight and more)."""
MIN_GAIN = 1.1
"""The smallest estimated speedup for which the planner merges (below it the estimate is within noise)."""


@dataclass(frozen=True)
class MergeEstimate:
    """The planner's decision for one merged run.

    Attributes:
        merge: whether to run the merged graph.
        dense: the lowering of dense layers (:data:`modelsql.formats.netfuse.DENSE_LOWERINGS`).
        separate_ms, merged_ms: the estimates (ms) of N separate runs and of one merged run.
        reason: the decision in words, for EXPLAIN.
    """

    merge: bool
    dense: str
    separate_ms: float
    merged_ms: float
    reason: str


def member_cost(model) -> tuple[float, int]:
    """(FLOPs per row, weight bytes) of one catalog model version (FLOPs from its ``flops``, or twice its
    parameters for a version imported before catalog schema 4)."""
    flops = model.flops if model.flops is not None else 2.0 * model.param_count
    return float(flops), sum(t.nbytes for t in model.tensors)


def instance_ms(flops_per_row: float, param_bytes: int, rows: float) -> float:
    """Estimated ms of one instance's work on ``rows`` rows (no call overhead)."""
    return max(flops_per_row * max(rows, 1.0) / FLOPS_PER_MS, param_bytes / BYTES_PER_MS)


def estimate(flops_per_row: float, param_bytes: int, n: int, rows: Sequence[float]) -> MergeEstimate:
    """Whether merging ``n`` members pays for a run with ``rows[i]`` rows for member ``i``.

    Args:
        flops_per_row: one member's FLOPs per input row (:func:`graph_flops`).
        param_bytes: one member's weight bytes.
        n: members in the merged graph (instances run, present or padded).
        rows: the rows each member gets (expected, from the plan's estimate, or actual, in the server).
    """
    if n < 2:
        return MergeEstimate(False, "matmul", 0.0, 0.0, "one model: nothing to merge")
    present = [r for r in rows if r > 0]
    separate = sum(CALL_MS + instance_ms(flops_per_row, param_bytes, r) for r in present)
    widest = max(present, default=1.0)
    dense = "conv" if widest <= CONV_MAX_ROWS else "matmul"
    merged = CALL_MS + n * instance_ms(flops_per_row, param_bytes, widest) * MERGED_PENALTY[dense]
    gain = separate / merged if merged > 0 else math.inf
    verdict = gain >= MIN_GAIN
    reason = (f"estimated {separate:.3f} ms for {len(present)} separate runs against {merged:.3f} ms merged "
              f"({n} instances x {widest:g} rows, dense layers as {dense}): "
              + (f"merge ({gain:.2f}x)" if verdict else f"run separately (merging would give {gain:.2f}x, "
                                                        f"under {MIN_GAIN}x)"))
    return MergeEstimate(verdict, dense, separate, merged, reason)
