"""When a NetFuse merge pays: the measured rule the planner and the server use.

Merging N models of one architecture (NetFuse, Jeong et al., 2020) removes N - 1
runtime calls, each of which costs ONNX Runtime a fixed amount plus a little per
node; it does not remove work, and on a CPU its general operators (batched MatMul,
grouped Conv) can be slower than N separate dense ones once each instance has real
work. So, for N members each given ``b_i`` rows (a merged run pads every member to
the largest ``b``)::

    separate = sum_i (CALL_MS + NODE_MS * nodes + work(b_i))
    merged   = MERGED_CALL_MS + MERGED_NODE_MS * nodes + N * work(max b) * penalty

with ``work(b)`` = ``flops * b / FLOPS_PER_MS + weight bytes / BYTES_PER_MS`` and
``penalty`` the merged operators' measured slowdown (:data:`PENALTY`: by the kind of
network, :attr:`MemberCost.kind`, and by rows per member). The
merge is chosen when ``separate / merged`` is at least :data:`MIN_GAIN`. The
constants are least-squares fits (of log times) to ``benchmarks/netfuse.py``'s
measurements (``benchmarks/results/netfuse.json``: ONNX Runtime 1.32 on 2 cores,
spinning off, the best of 1 and 2 intra-op threads; five architectures, N from 1 to
32, 1 and 8 rows per member); the profiling issue's learned cost model (Mantis)
replaces them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

__all__ = ["MemberCost", "MergeEstimate", "estimate", "member_cost", "work_ms", "MIN_GAIN", "CONV_MAX_ROWS"]

CALL_MS = 0.00714
"""Fixed cost of one ONNX Runtime ``run()`` of a separate member from Python, ms."""
NODE_MS = 0.00106
"""Cost per graph node of one run (kernel dispatch, allocation), ms."""
MERGED_CALL_MS = 0.0150
"""Fixed cost of one run of the merged graph, ms."""
MERGED_NODE_MS = 0.00041
"""Cost per node of the member graph in one merged run, ms."""
FLOPS_PER_MS = 8.11e7
"""FLOPs per millisecond of the separate members' kernels (81 GFLOP/s: both cores where they help)."""
BYTES_PER_MS = 2.84e7
"""Weight bytes read per millisecond (28 GB/s: a one-row product reads every weight)."""
PENALTY = {("dense", True): 1.009, ("dense", False): 2.079, ("conv", True): 0.929, ("conv", False): 1.408,
           ("other", True): 2.519, ("other", False): 2.272}
"""Slowdown of a merged run's work against the members' own: ``(kind, at most CONV_MAX_ROWS rows per member)``.
The fit puts much of what "other" networks (attention: batched products over 3-D activations) gain on the
per-node term, hence its large work penalty; it is a fit over five architectures, not a law."""
CONV_MAX_ROWS = 2
"""Rows per member up to which per-instance dense layers are written as a grouped 1x1 Conv (faster than a
batched MatMul for one or two rows in the benchmark; slower for eight)."""
MIN_GAIN = 1.1
"""The smallest estimated speedup for which the planner merges (below it the estimate is within noise)."""


@dataclass(frozen=True)
class MemberCost:
    """What the rule reads of one member (the catalog's static features).

    Attributes:
        flops: FLOPs per input row; ``conv_flops``: the part in Conv nodes; ``gemm_flops``: in 2-D products.
        nodes: nodes of the graph.
        param_bytes: weight bytes.
    """

    flops: float
    conv_flops: float
    gemm_flops: float
    nodes: int
    param_bytes: int

    @property
    def kind(self) -> str:
        """``"conv"`` when most FLOPs are in Conv nodes, ``"dense"`` when most are in 2-D products (an MLP),
        else ``"other"`` (e.g. attention: products over 3-D activations)."""
        if self.flops > 0 and self.conv_flops / self.flops > 0.5:
            return "conv"
        return "dense" if self.flops > 0 and self.gemm_flops / self.flops > 0.5 else "other"


@dataclass(frozen=True)
class MergeEstimate:
    """The planner's decision for one merged run.

    Attributes:
        merge: whether to run the merged graph.
        dense: the lowering of dense layers (:data:`modelsql.formats.netfuse.DENSE_LOWERINGS`).
        separate_ms, merged_ms: the estimates (ms) of the separate runs and of one merged run.
        reason: the decision in words, for EXPLAIN.
    """

    merge: bool
    dense: str
    separate_ms: float
    merged_ms: float
    reason: str


def member_cost(model) -> MemberCost:
    """The :class:`MemberCost` of a catalog model version (a version imported before catalog schema 4
    has no static features: twice its parameters stand for its FLOPs, and 10 nodes)."""
    flops = model.flops if model.flops is not None else 2.0 * model.param_count
    gemm = model.gemm_flops if model.gemm_flops is not None else flops
    return MemberCost(float(flops), float(model.conv_flops or 0.0), float(gemm), int(model.nodes or 10),
                      sum(t.nbytes for t in model.tensors))


def work_ms(cost: MemberCost, rows: float) -> float:
    """Estimated ms of one member's kernels on ``rows`` rows."""
    return cost.flops * max(rows, 1.0) / FLOPS_PER_MS + cost.param_bytes / BYTES_PER_MS


def estimate(cost: MemberCost, n: int, rows: Sequence[float]) -> MergeEstimate:
    """Whether merging ``n`` members pays for a run with ``rows[i]`` rows for member ``i``.

    Args:
        cost: one member's static features (:func:`member_cost`).
        n: members in the merged graph (instances run, present or padded).
        rows: the rows each member gets (expected, from the plan's estimate, or actual, in the server).
    """
    if n < 2:
        return MergeEstimate(False, "matmul", 0.0, 0.0, "one model: nothing to merge")
    present = [r for r in rows if r > 0]
    separate = sum(CALL_MS + NODE_MS * cost.nodes + work_ms(cost, r) for r in present)
    widest = max(present, default=1.0)
    small = widest <= CONV_MAX_ROWS
    dense = "conv" if small else "matmul"
    merged = (MERGED_CALL_MS + MERGED_NODE_MS * cost.nodes
              + n * work_ms(cost, widest) * PENALTY[(cost.kind, small)])
    gain = separate / merged if merged > 0 else math.inf
    verdict = gain >= MIN_GAIN
    reason = (f"estimated {separate:.3f} ms for {len(present)} separate runs against {merged:.3f} ms merged "
              f"({n} instances x {widest:g} rows, dense layers as {dense}): "
              + (f"merge ({gain:.2f}x)" if verdict else f"run separately (merging would give {gain:.2f}x, "
                                                        f"under {MIN_GAIN}x)"))
    return MergeEstimate(verdict, dense, separate, merged, reason)
