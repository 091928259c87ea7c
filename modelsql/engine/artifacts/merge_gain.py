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

On a CUDA device (``device="cuda:N"``) the rule weighs three policies (:data:`GPU_POLICIES`)::

    members          = sum_i (GPU_CALL_MS + GPU_UNCAPTURED * gpu_work(b_i))   (each member a plain run)
    members_captured = sum_i (GPU_REPLAY_MS + gpu_work(b_i))                  (each a captured CUDA graph)
    merged           = GPU_REPLAY_MS + N * gpu_work(max b) * GPU_PENALTY[kind] (one captured merged graph)

with ``gpu_work(b)`` = ``flops * b / GPU_FLOPS_PER_MS + weight bytes / GPU_BYTES_PER_MS``. Capturing a graph
(Nimble, Kwon et al., NeurIPS 2020) removes the per-kernel launch work that makes a plain run cost about
1 ms whatever the model; merging (NetFuse) then removes the N - 1 remaining replays. The GPU constants come
from one H200 (ONNX Runtime 1.31 CUDA, batch 1): a plain run of a width-16 ResNet-18 took 1.0-1.1 ms, of a
4-layer BERT-style encoder 0.7-0.85 ms, of ResNet-50 at 224x224 2.3-2.4 ms; captured replays 0.25, 0.26 and
0.90 ms; 32 ResNet-50s merged 35 ms (so grouped convolutions run at about 1.7x the members' dense ones).
When the learned cost model has traces of the device (``learned``: :meth:`Costs.run_ms` with ``device``),
its per-run figures replace ``GPU_REPLAY_MS + gpu_work`` and, where it has seen merged runs, the merged one.
ONNX Runtime's Python API runs a session on its own CUDA stream with no per-run stream, so the members'
captured graphs are replayed one after another on one stream (``benchmarks/netfuse.py --device cuda``
measures members on several streams with ``user_compute_stream`` as an experiment, outside the planner).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

__all__ = ["MemberCost", "MergeEstimate", "estimate", "member_cost", "work_ms", "gpu_work_ms", "MIN_GAIN",
           "CONV_MAX_ROWS", "GPU_POLICIES"]

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

GPU_POLICIES = ("members", "members_captured", "merged")
"""How N members run on a CUDA device: in turn as plain runs, in turn as captured CUDA graphs, or merged (one
captured graph)."""
GPU_CALL_MS = 1.0
"""Fixed cost of one plain (uncaptured) ONNX Runtime CUDA run from Python, ms: kernel launches and copies."""
GPU_UNCAPTURED = 2.0
"""Slowdown of a plain run's work against a captured replay's (per-kernel launches: ResNet-50 2.3 ms
against 0.9 ms)."""
GPU_REPLAY_MS = 0.25
"""Fixed cost of one replay of a captured CUDA graph, ms (copies in and out included)."""
GPU_FLOPS_PER_MS = 1.26e10
"""FLOPs per millisecond of one captured run at batch 1 (12.6 TFLOP/s: ResNet-50's 8.2 GFLOP in 0.65 ms)."""
GPU_BYTES_PER_MS = 3.0e9
"""Weight bytes read per millisecond on the device (3 TB/s)."""
GPU_PENALTY = {"conv": 1.7, "dense": 0.5, "other": 0.5}
"""Work of a merged run against its members' own (grouped Conv is slower than N dense Convs; batched products
over small inputs fill the device better than N one-row ones)."""


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
        dense: the lowering of dense layers (:data:`modelsql.netfuse.DENSE_LOWERINGS`).
        separate_ms, merged_ms: the estimates (ms) of the separate runs and of one merged run.
        reason: the decision in words, for EXPLAIN.
        policy: ``"merged"`` or ``"members"`` on the CPU; on a CUDA device one of :data:`GPU_POLICIES`.
        device: ``"cpu"`` or ``"cuda:N"``: what the estimate is for.
        estimates: ``(policy, ms)`` for each policy weighed (the rejected ones included).
    """

    merge: bool
    dense: str
    separate_ms: float
    merged_ms: float
    reason: str
    policy: str = ""
    device: str = "cpu"
    estimates: tuple[tuple[str, float], ...] = ()


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


def gpu_work_ms(cost: MemberCost, rows: float) -> float:
    """Estimated ms of one member's kernels on ``rows`` rows in a captured run on a CUDA device."""
    return cost.flops * max(rows, 1.0) / GPU_FLOPS_PER_MS + cost.param_bytes / GPU_BYTES_PER_MS


Learned = Callable[[float, int], Optional[float]]
"""``(rows, merge factor) -> ms`` of one run on the device by the learned cost model, or None."""


def estimate(cost: MemberCost, n: int, rows: Sequence[float], device: str = "cpu",
             learned: Optional[Learned] = None) -> MergeEstimate:
    """Whether merging ``n`` members pays for a run with ``rows[i]`` rows for member ``i``, on ``device``.

    Args:
        cost: one member's static features (:func:`member_cost`).
        n: members in the merged graph (instances run, present or padded).
        rows: the rows each member gets (expected, from the plan's estimate, or actual, in the server).
        device: ``"cpu"`` (the measured CPU rule) or ``"cuda:N"`` (:func:`gpu_estimate`).
        learned: on a CUDA device, the learned cost model's runs on it, where it has traces of it.
    """
    if device != "cpu":
        return gpu_estimate(cost, n, rows, device, learned)
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
    return MergeEstimate(verdict, dense, separate, merged, reason, "merged" if verdict else "members", "cpu",
                         (("members", separate), ("merged", merged)))


def gpu_estimate(cost: MemberCost, n: int, rows: Sequence[float], device: str,
                 learned: Optional[Learned] = None) -> MergeEstimate:
    """The fastest of :data:`GPU_POLICIES` on ``device`` (``"cuda:N"``) for member ``i`` given ``rows[i]``
    rows (module docstring); merged only when :data:`MIN_GAIN` times faster than the better member policy.
    ``separate_ms`` is the chosen member policy's estimate (ms), ``merged_ms`` the merged one's."""
    present = [r for r in rows if r > 0]
    widest = max(present, default=1.0)
    dense = "matmul"  # on the H200 the batched MatMul was as fast (ResNet) or faster (BERT: 0.98 vs 1.37 ms)
    per_run = [_gpu_run(cost, r, learned) for r in present]
    captured = sum(per_run)
    plain = sum(GPU_CALL_MS + GPU_UNCAPTURED * max(0.0, t - GPU_REPLAY_MS) for t in per_run)
    merged = (learned(widest, n) if learned is not None and n > 1 else None)
    if merged is None:
        merged = GPU_REPLAY_MS + n * gpu_work_ms(cost, widest) * GPU_PENALTY[cost.kind]
    members = min((("members_captured", captured), ("members", plain)), key=lambda p: p[1])
    costs = {"members": plain, "members_captured": captured, "merged": merged}
    verdict = n >= 2 and merged > 0 and members[1] / merged >= MIN_GAIN
    policy = "merged" if verdict else members[0]
    others = ", ".join(f"{p} {costs[p]:.3f} ms" for p in GPU_POLICIES if p != policy)
    seen = learned is not None and learned(widest, 1) is not None
    source = f"the learned cost model's traces of {device}" if seen else f"the GPU rule ({device})"
    if n < 2:
        reason = f"one model on {device}: {policy} ({costs[policy]:.3f} ms, {source})"
    else:
        reason = (f"on {device}, {len(present)} members x {widest:g} rows: {policy} estimated "
                  f"{costs[policy]:.3f} ms, rejected {others} ({source}; dense layers as {dense})")
    return MergeEstimate(verdict, dense, members[1], merged, reason, policy, device,
                         tuple((p, costs[p]) for p in GPU_POLICIES))


def _gpu_run(cost: MemberCost, rows: float, learned: Optional[Learned]) -> float:
    """One member's captured run on ``rows`` rows, ms: the learned cost model's where it answers."""
    got = learned(rows, 1) if learned is not None else None
    return got if got is not None else GPU_REPLAY_MS + gpu_work_ms(cost, rows)
