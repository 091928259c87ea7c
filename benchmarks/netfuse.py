"""NetFuse (Jeong et al., 2020) on ONNX Runtime: one merged graph of N same-architecture models with
different weights against the N models run separately, and the planner's rule for choosing between them.

Claim: merging N members into one graph (``modelsql.netfuse.merge_models``) removes N - 1
runtime calls, which pays for small models and few rows per instance; once each instance has real
work the merged operators (batched MatMul, grouped Conv) are no faster than N dense ones, so the
merge can lose. ``modelsql.engine.artifacts.merge_gain.estimate`` has to tell the two apart.

Workload: ``modelsql.datasets.architectures`` families with random weights (member ``i`` seeded
``--seed + i``), torch's legacy exporter, dynamic batch: ``mlp_tiny`` (MLP 32-64-64-4), ``mlp``
(784-256-256-10), ``bert`` (the builder's defaults), ``resnet18``, ``resnet50``, ``resnext50``
(width 64, images 3 x ``--image-size`` x ``--image-size``, 32 by default); N in ``--n``
(1, 2, 4, 8, 16, 32), ``--batch`` rows per instance (1, 8). Every member gets its own input rows;
the merged graph is fed their ``np.stack`` (``[N, B, ...]``).

Measured side by side for each (arch, N, batch), in ms per call (one call = all N members answered):

* ``separate_seq``: the N sessions run in turn, each with ``t`` intra-op threads, best of t in {1, 2};
* ``separate_concurrent``: the same N sessions (1 intra-op thread each) run from a 2-worker thread
  pool, each worker running half of them in turn (static split: no per-call task overhead);
* the baseline is the better of the two (``baseline_ms``, ``baseline``: which);
* ``merged_matmul`` and ``merged_conv``: the merged graph with ``dense="matmul"`` / ``dense="conv"``
  lowering, best of t in {1, 2}; ``speedup`` = baseline_ms / the better lowering, and per lowering.

Every session is configured as the baseline is at its best on this machine: CPUExecutionProvider,
``inter_op_num_threads = 1``, sequential execution, ``session.intra_op.allow_spinning = 0`` (no
spinning: the threads do not burn a core between calls), all graph optimizations, log level 3.
Before timing, the merged outputs are checked against the separate ones (max |diff| / max |ref| at
most 1e-4, recorded as ``max_rel_diff``; the run aborts otherwise).

Timing: the variants are interleaved, one timed sample of each per repeat (their order rotated
from repeat to repeat), after 2 warm-up calls of each; a sample is ``k`` back-to-back calls divided
by ``k``, with ``k`` chosen from the warm-up so a sample lasts at least ``--min-sample-ms`` (k = 1 for
anything slower: the CNNs). Each figure is the median over ``--repeats`` samples, with min/max and
p25/p75 as spread. The big points get fewer repeats automatically: repeats are cut (to no fewer
than 3) so a point's timed loop stays within ``--point-budget-s``; ``repeats`` in each row says what
each point got. Where all the sessions of a point do not fit in memory at once (six copies of the
weights: two separate sets and four merged sessions, and a merged session's load peaks at about 2.7
copies of its weights; the budget is ``--mem-budget-gb``, by default 40% of MemAvailable at start,
the machine being shared), the point is timed in phases, one per thread count or, for the biggest
(ResNet-50 and ResNeXt-50 at N = 32), one per (thread count, lowering) with the separate set
reloaded and its samples pooled; the variants are interleaved within each phase, and ``phases``
in each row says how many there were (``times`` keeps every sample and each phase's median, so a
phase that ran under another load shows).

Also per (arch, N):

* memory: the process's resident-set growth (VmRSS, after ``gc.collect()`` and ``malloc_trim(0)``)
  over creating the N separate sessions (``rss_separate_mb``) and over creating the merged session
  (``rss_merged_mb`` for matmul, ``rss_merged_conv_mb``), each with 1 intra-op thread, from the
  model files on disk (``rss_anon_*``: the anonymous part, without file pages). The merged graph
  references the members' weights combined by Concat/Reshape nodes that ONNX Runtime folds at load,
  so the merged session holds one copy of the weights, as the N separate sessions do together;
  ``peak_growth_mb``: the growth of the process's peak resident set (VmHWM) over the whole point
  (merging, loading, timing);
* merge time: ``merge_<lowering>_s`` (``merge_models`` over the members as the store keeps them:
  each member's graph with its weights in a data file of its own, which the merge does not read;
  member 0 in full as the reference for shapes; the merged graph is written beside them and
  references their data files) and ``merged_session_<lowering>_s`` (creating the merged session, which
  reads the weights and folds their concatenation), beside ``separate_sessions_s`` (the N sessions).

Planner: for each (arch, N >= 2, batch) a query of ``merge_gain.estimate`` for N members like
member 0 (its static features and weight bytes), each with ``batch`` rows; its time is the measured
merged time with the lowering it picks if it merges, else ``separate_seq_ms`` (the planner's separate
execution runs the models in turn). Totals over the queries: ``planner_total_ms``,
``always_merge_total_ms`` (merged, with the lowering the estimate picks for that batch),
``never_merge_total_ms`` (separate in turn) and ``planner_vs_best_fixed`` = planner_total /
min(always, never) (1 or less: the planner does at least as well as the better of the two fixed
policies); ``planner_right`` counts the queries where it picked the faster of the two, and
``planner_wrong`` lists the others with what they cost. ``planner_rule`` records the rule's
constants. Those constants are fitted to this file, so the planner's figures here are in-sample;
``--replan FILE`` recomputes them for a results file with the rule now in the tree, measuring nothing.

Writes ``benchmarks/results/netfuse.json``: top-level ``speedup_n32`` (the best merged speedup over
the baseline at N = 32, over archs and batches) and ``speedup_n32_at``, ``planner_vs_best_fixed``, the
totals, ``host``, ``settings`` and ``rows`` (one per (arch, N, batch)); prints a markdown table.

Run: ``python benchmarks/netfuse.py`` (about 20 minutes on 2 cores, most of it in the big CNNs at
N = 16 and 32: exporting, merging and loading 32 copies of ResNet-50); ``--quick`` for a smoke run
(3 repeats, N in 1, 8, 32, only mlp_tiny, mlp and resnet18); ``--arch``, ``--n``, ``--batch`` for a subset.

On a CUDA device (``--device cuda``; issue 24 part 4; writes ``benchmarks/results/gpu_netfuse.json``):
archs ``small_resnet`` (ResNet-18 width 16, 32x32), ``bert_small`` (d 256, 4 layers, 4 heads, ff 1024, seq 64,
vocab 30522) and ``resnet50_224``; member 0 exported once, member ``i`` its float weights rotated by
``7919 i`` places (no N exports). Per (arch, N in 1 ... 32, batch 1 and 8) three policies, interleaved, 2
warm-up calls and ``--repeats`` timed calls each (medians, min/max/p25/p75): ``members`` (plain ONNX Runtime
CUDA sessions in turn, uncaptured), ``members_captured`` (each member a ``CudaModel``, a captured CUDA graph
per batch, in turn on one stream), ``merged`` (the merged graph as a ``CudaModel`` captured for N instances,
both lowerings, the better kept; checked against the captured members, relative ``GPU_TOLERANCE``). Members
on parallel CUDA streams are not measured: ONNX Runtime's Python API takes no stream per run. Each row has the
planner's pick (``merge_gain.estimate`` on the device) and what it cost; ``planner_vs_best_fixed`` is its
total over the points with all three measured against the best fixed policy's. Top level:
``small_resnet_n32_b1_speedup``, ``bert_n32_b1_speedup``, ``resnet50_n32_b1_speedup`` (merged over members in
turn at N = 32, one row). Every variant's failure is recorded in its row's ``errors``. N is run from the
largest down and points past ``--budget-s`` are skipped (and said so). ``--gpu-quick`` (about 2 minutes on an
H200): ResNet-50 at N 8 and 32 with one row, one lowering (matmul; its dense layer is one FC) for it and below
N = 32 (each architecture gets an equal share of the budget left; merging 32 ResNet-50s and loading 3.2 GB of merged weights twice -- the plain session and the
captured one -- dominates its time). ``--gpu-dry`` runs this code on CPU sessions (a check of the code path).
"""

from __future__ import annotations

import argparse
import gc
import inspect
import json
import math
import os
import platform
import shutil
import signal
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402

from modelsql.datasets.architectures import example_input, family  # noqa: E402
from modelsql.netfuse import merge_models  # noqa: E402
from modelsql.engine.artifacts import merge_gain  # noqa: E402
import proc_memory  # noqa: E402  (benchmarks/proc_memory.py)

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "netfuse.json"
GPU_RESULTS = HERE / "results" / "gpu_netfuse.json"

ARCHS: dict[str, tuple[str, dict]] = {
    "mlp_tiny": ("mlp", {"sizes": (32, 64, 64, 4)}),
    "mlp": ("mlp", {"sizes": (784, 256, 256, 10)}),
    "bert": ("bert", {}),
    "resnet18": ("resnet18", {}),
    "resnet50": ("resnet50", {}),
    "resnext50": ("resnext50", {}),
}
CNNS = ("resnet18", "resnet50", "resnext50")
THREADS = (1, 2)
MIB = 1 << 20
LOWERINGS = ("matmul", "conv")
TOLERANCE = 1e-4


# ---------------------------------------------------------------- helpers


def rss_mb() -> dict:
    """The process's VmRSS and RssAnon in MiB, after gc and malloc_trim."""
    proc_memory.settle()
    got = proc_memory.status("VmRSS", "RssAnon")
    return {"rss": got["VmRSS"] / MIB, "anon": got["RssAnon"] / MIB}


def reset_peak() -> None:
    """Reset the process's VmHWM (peak resident set) to its current resident set."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def peak_mb() -> float:
    return proc_memory.status("VmHWM")["VmHWM"] / MIB


def mem_available_gb() -> float:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024 ** 2
    return 8.0


def options(threads: int) -> ort.SessionOptions:
    o = ort.SessionOptions()
    o.intra_op_num_threads = threads
    o.inter_op_num_threads = 1
    o.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    o.add_session_config_entry("session.intra_op.allow_spinning", "0")
    o.log_severity_level = 3
    return o


def session(path: Path, threads: int) -> ort.InferenceSession:
    return ort.InferenceSession(str(path), options(threads), providers=["CPUExecutionProvider"])


def param_bytes(model: onnx.ModelProto) -> int:
    total = 0
    for t in model.graph.initializer:
        itemsize = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.data_type)).itemsize
        total += int(np.prod(t.dims, dtype=np.int64)) * itemsize
    return total


def spread(samples: list[float]) -> dict:
    a = np.asarray(samples)
    return {"median_ms": float(np.median(a)), "min_ms": float(a.min()), "max_ms": float(a.max()),
            "p25_ms": float(np.percentile(a, 25)), "p75_ms": float(np.percentile(a, 75)), "samples": len(a)}


def rel_diff(got: np.ndarray, ref: np.ndarray) -> float:
    scale = float(np.max(np.abs(ref))) or 1.0
    return float(np.max(np.abs(got.astype(np.float64) - ref.astype(np.float64)))) / scale


# ---------------------------------------------------------------- members and merged models


def export_members(arch: str, n: int, args, folder: Path) -> list[Path]:
    """``n`` members of ``arch`` written to ``folder`` as ``m<i>.onnx`` with their weights in ``m<i>.data``
    (as the store keeps them: the graph apart from the weights); member i has seed ``args.seed + i``."""
    name, kw = ARCHS[arch]
    extra = {"image_size": args.image_size} if name in CNNS else {}
    blobs = family(name, n, exporter="legacy", dynamic_batch=True, seed=args.seed, **kw, **extra)
    paths = []
    for i in range(len(blobs)):
        proto = onnx.load_from_string(blobs[i])
        blobs[i] = b""
        p = folder / f"m{i}.onnx"
        onnx.save_model(proto, str(p), save_as_external_data=True, all_tensors_to_one_file=True,
                        location=f"m{i}.data", size_threshold=1024)
        paths.append(p)
    return paths


def inputs(arch: str, n: int, batch: int, args) -> list[np.ndarray]:
    name, kw = ARCHS[arch]
    extra = {"image_size": args.image_size} if name in CNNS else {}
    return [example_input(name, batch, seed=10_000 + 97 * batch + i, **kw, **extra) for i in range(n)]


def build_merged(members: list[Path], folder: Path) -> tuple[dict, dict]:
    """Both lowerings merged from the members as stored (graphs without their weights, which stay in
    the members' data files: the merge reads none; member 0 in full as the reference) and written beside
    them, referencing the members' data files; returns (paths, timings)."""
    protos = [onnx.load(str(p), load_external_data=False) for p in members]
    reference = onnx.load(str(members[0]))
    paths, info = {}, {}
    for dense in LOWERINGS:
        t0 = time.perf_counter()
        merged = merge_models(protos, reference=reference, dense=dense)
        info[f"merge_{dense}_s"] = time.perf_counter() - t0
        path = folder / f"merged_{len(protos)}_{dense}.onnx"
        path.write_bytes(merged.SerializeToString())
        paths[dense] = path
        del merged
    del protos, reference
    gc.collect()
    return paths, info


def plan_phases(weight_gib: float, budget_gib: float) -> tuple[list[tuple], float]:
    """How the 6 session sets of a point are grouped in time so the resident weights fit the budget, and
    the expected peak (GiB). A merged session's load peaks at about 2.7 copies of its weights (the
    members' weights read, their folded concatenation, the NCHWc reorder), then holds one; each phase
    loads its merged sessions first. Options: all at once (peak ~6 W), one phase per thread count
    (~3.7 W), one per (thread count, lowering) with its separate set reloaded (~2.7 W)."""
    options = [([(THREADS, LOWERINGS)], 6.0),
               ([((t,), LOWERINGS) for t in THREADS], 3.7),
               ([((t,), (d,)) for t in THREADS for d in LOWERINGS], 2.7)]
    for phases, factor in options:
        if factor * weight_gib <= budget_gib:
            return phases, factor * weight_gib
    phases, factor = options[-1]
    return phases, factor * weight_gib


# ---------------------------------------------------------------- the planner's rule


def planner_query(proto0: onnx.ModelProto, wbytes: int):
    """``(query, features)``: ``query(n, rows)`` is the planner's ``merge_gain.estimate`` for ``n`` members
    like ``proto0`` (weights ``wbytes``), whichever of its signatures this tree has (it reads the static
    features ``MemberCost``, or FLOPs per row and weight bytes before those); ``features`` what it read."""
    params = inspect.signature(merge_gain.estimate).parameters
    if "cost" in params:
        from modelsql.analyses.static_features import static_features

        f = static_features(proto0)
        cost = merge_gain.MemberCost(f.flops, f.conv_flops, f.gemm_flops, f.nodes, wbytes)
        return (lambda n, rows: merge_gain.estimate(cost, n, rows)), {
            "flops_per_row": f.flops, "conv_flops": f.conv_flops, "gemm_flops": f.gemm_flops, "nodes": f.nodes,
            "kind": cost.kind}
    try:
        from modelsql.analyses.static_features import graph_flops
    except ImportError:
        graph_flops = merge_gain.graph_flops
    flops = graph_flops(proto0)
    return (lambda n, rows: merge_gain.estimate(flops, wbytes, n, rows)), {"flops_per_row": flops}


def rule_constants() -> dict:
    """The rule's module-level constants (what the planner figures were computed with)."""
    return {k: (v if isinstance(v, (int, float)) else {str(kk): vv for kk, vv in v.items()})
            for k, v in vars(merge_gain).items()
            if k.isupper() and isinstance(v, (int, float, dict))}


def plan_row(row: dict, query) -> None:
    """Add the planner's pick for the row's (N, batch) and what it cost (rows with N >= 2)."""
    row.pop("planner", None)
    n, b = row["n"], row["batch"]
    if n < 2:
        return
    est = query(n, [float(b)] * n)
    merged_pick = row[f"merged_{est.dense}_ms"]
    planner_ms = merged_pick if est.merge else row["separate_seq_ms"]
    faster_merge = merged_pick < row["separate_seq_ms"]
    row["planner"] = {"merge": est.merge, "dense": est.dense, "estimated_separate_ms": est.separate_ms,
                      "estimated_merged_ms": est.merged_ms, "reason": est.reason,
                      "planner_ms": planner_ms, "merged_with_pick_ms": merged_pick,
                      "right": est.merge == faster_merge,
                      "loss_ms": planner_ms - min(merged_pick, row["separate_seq_ms"])}


# ---------------------------------------------------------------- timing


def make_variants(sets: dict, feeds: list[dict], merged_feed: dict, pool: ThreadPoolExecutor) -> dict:
    """The callables of one phase of one point: variant name -> fn() answering all N members."""
    fns = {}
    for key, obj in sets.items():
        kind, t = key
        if kind == "sep":
            def fn(s=obj):
                for sess, f in zip(s, feeds):
                    sess.run(None, f)
            fns[f"separate_seq_t{t}"] = fn
            if t == 1:
                chunks = [list(range(w, len(obj), 2)) for w in range(min(2, len(obj)))]

                def run_chunk(idx, s=obj):
                    for i in idx:
                        s[i].run(None, feeds[i])

                def conc(chunks=chunks, run_chunk=run_chunk):
                    futs = [pool.submit(run_chunk, c) for c in chunks]
                    for fu in futs:
                        fu.result()
                fns["separate_concurrent"] = conc
        else:
            def mfn(s=obj):
                s.run(None, merged_feed)
            fns[f"merged_{kind}_t{t}"] = mfn
    return fns


def time_variants(fns: dict, args, budget_s: float) -> tuple[dict, int]:
    """Interleaved samples of every variant; returns (name -> samples in ms per call, repeats)."""
    names = list(fns)
    warm = {}
    for nm in names:
        fns[nm]()
        t0 = time.perf_counter()
        fns[nm]()
        warm[nm] = (time.perf_counter() - t0) * 1000
    ks = {nm: max(1, math.ceil(args.min_sample_ms / max(warm[nm], 1e-4))) for nm in names}
    per_repeat_s = sum(warm[nm] * ks[nm] for nm in names) / 1000
    repeats = max(3, min(args.repeats, int(budget_s / max(per_repeat_s, 1e-9))))
    repeats = min(repeats, args.repeats)
    out = {nm: [] for nm in names}
    gc.collect()
    gc.disable()
    try:
        for r in range(repeats):
            order = names[r % len(names):] + names[:r % len(names)]
            for nm in order:
                fn, k = fns[nm], ks[nm]
                t0 = time.perf_counter()
                for _ in range(k):
                    fn()
                out[nm].append((time.perf_counter() - t0) * 1000 / k)
    finally:
        gc.enable()
    return out, repeats


# ---------------------------------------------------------------- one (arch, N) point


def run_point(arch: str, n: int, members: list[Path], folder: Path, args, pool: ThreadPoolExecutor) -> list[dict]:
    rss_mb()
    reset_peak()
    base_mb = peak_mb()
    proto0 = onnx.load(str(members[0]))
    wbytes = param_bytes(proto0)
    query, features = planner_query(proto0, wbytes)
    del proto0
    merged_paths, minfo = build_merged(members, folder)

    weight_gib = wbytes * n / 1024 ** 3
    phases, peak = plan_phases(weight_gib, args.mem_budget_gb)
    if peak > args.mem_budget_gb:
        print(f"  warning: {arch} N={n} may peak at {peak:.1f} GiB, over the {args.mem_budget_gb:.1f} GiB budget",
              flush=True)

    point = {"arch": arch, "n": n, "param_bytes": wbytes, **features,
             "phases": len(phases), "expected_peak_gib": peak, **minfo}
    batches = {b: {"feeds": None, "samples": {}, "repeats": {}, "max_rel_diff": {}, "phase_medians": {}}
               for b in args.batch}
    for b in args.batch:
        xs = inputs(arch, n, b, args)
        batches[b]["feeds"] = ([{"input": x} for x in xs], {"input": np.ascontiguousarray(np.stack(xs))})
    total_variants = len(THREADS) * (1 + len(LOWERINGS)) + 1

    for threads, lowerings in phases:
        sets = {}
        for t in threads:
            for dense in lowerings:
                before = rss_mb()
                t0 = time.perf_counter()
                sets[(dense, t)] = session(merged_paths[dense], t)
                if t == 1 and f"merged_session_{dense}_s" not in point:
                    point[f"merged_session_{dense}_s"] = time.perf_counter() - t0
                    after = rss_mb()
                    suffix = "" if dense == "matmul" else "_conv"
                    point[f"rss_merged{suffix}_mb"] = after["rss"] - before["rss"]
                    point[f"rss_anon_merged{suffix}_mb"] = after["anon"] - before["anon"]
        for t in threads:
            before = rss_mb()
            t0 = time.perf_counter()
            sets[("sep", t)] = [session(p, t) for p in members]
            if t == 1 and "separate_sessions_s" not in point:
                point["separate_sessions_s"] = time.perf_counter() - t0
                after = rss_mb()
                point["rss_separate_mb"] = after["rss"] - before["rss"]
                point["rss_anon_separate_mb"] = after["anon"] - before["anon"]
        for b in args.batch:
            feeds, mfeed = batches[b]["feeds"]
            # correctness: every merged session against this phase's separate sessions
            for t in threads:
                ref = [s.run(None, f)[0] for s, f in zip(sets[("sep", t)], feeds)]
                for dense in lowerings:
                    got = sets[(dense, t)].run(None, mfeed)[0]
                    if got.shape[0] != n or tuple(got.shape[1:]) != tuple(ref[0].shape):
                        raise SystemExit(f"ABORT {arch} N={n} batch={b} {dense} t={t}: merged output shape "
                                         f"{got.shape}, separate {ref[0].shape}")
                    d = max(rel_diff(got[i], ref[i]) for i in range(n))
                    key = f"{dense}_t{t}"
                    batches[b]["max_rel_diff"][key] = d
                    if not d <= TOLERANCE:
                        raise SystemExit(f"ABORT {arch} N={n} batch={b} {dense} t={t}: merged outputs differ "
                                         f"from the separate ones by {d:.3g} relative (> {TOLERANCE})")
            fns = make_variants(sets, feeds, mfeed, pool)
            samples, reps = time_variants(fns, args, args.point_budget_s * len(fns) / total_variants)
            for nm, xs in samples.items():  # a separate set timed in two phases pools its samples
                batches[b]["samples"].setdefault(nm, []).extend(xs)
                batches[b]["phase_medians"].setdefault(nm, []).append(float(np.median(xs)))
                batches[b]["repeats"][nm] = batches[b]["repeats"].get(nm, 0) + reps
            del fns, samples, ref, got
        del sets  # the phase's sessions go before the next phase loads its own
        gc.collect()

    point["peak_growth_mb"] = peak_mb() - base_mb
    rows = []
    for b in args.batch:
        st = {nm: {**spread(s), "samples_ms": [round(x, 5) for x in s],
                   "phase_medians_ms": batches[b]["phase_medians"][nm]}
              for nm, s in batches[b]["samples"].items()}
        best = {}
        for kind in ("separate_seq", "merged_matmul", "merged_conv"):
            t = min(THREADS, key=lambda t: st[f"{kind}_t{t}"]["median_ms"])
            best[kind] = (st[f"{kind}_t{t}"]["median_ms"], t)
        conc = st["separate_concurrent"]["median_ms"]
        baseline, which = ((best["separate_seq"][0], "separate_seq") if best["separate_seq"][0] <= conc
                           else (conc, "separate_concurrent"))
        mm, cv = best["merged_matmul"][0], best["merged_conv"][0]
        row = {"arch": arch, "n": n, "batch": b,
               "separate_seq_ms": best["separate_seq"][0], "separate_seq_threads": best["separate_seq"][1],
               "separate_concurrent_ms": conc,
               "baseline_ms": baseline, "baseline": which,
               "merged_matmul_ms": mm, "merged_matmul_threads": best["merged_matmul"][1],
               "merged_conv_ms": cv, "merged_conv_threads": best["merged_conv"][1],
               "merged_best_ms": min(mm, cv), "merged_best": "matmul" if mm <= cv else "conv",
               "speedup": baseline / min(mm, cv),
               "speedup_matmul": baseline / mm, "speedup_conv": baseline / cv,
               "max_rel_diff": max(batches[b]["max_rel_diff"].values()),
               "max_rel_diff_by_variant": batches[b]["max_rel_diff"],
               "repeats": batches[b]["repeats"], "times": st,
               "loadavg": os.getloadavg()[0],
               **{k: v for k, v in point.items() if k not in ("arch", "n")}}
        plan_row(row, query)
        rows.append(row)
    return rows


# ---------------------------------------------------------------- report


def summarize(rows: list[dict]) -> dict:
    q = [r for r in rows if "planner" in r]
    planner_total = sum(r["planner"]["planner_ms"] for r in q)
    always = sum(r["planner"]["merged_with_pick_ms"] for r in q)
    never = sum(r["separate_seq_ms"] for r in q)
    n32 = [r for r in rows if r["n"] == 32]
    top = max(n32, key=lambda r: r["speedup"]) if n32 else None
    wrong = [{"arch": r["arch"], "n": r["n"], "batch": r["batch"], "picked": "merge " + r["planner"]["dense"]
              if r["planner"]["merge"] else "separate", "planner_ms": r["planner"]["planner_ms"],
              "loss_ms": r["planner"]["loss_ms"],
              "loss_ratio": r["planner"]["planner_ms"] / (r["planner"]["planner_ms"] - r["planner"]["loss_ms"])}
             for r in q if not r["planner"]["right"]]
    return {"speedup_n32": top["speedup"] if top else None,
            "speedup_n32_at": {"arch": top["arch"], "batch": top["batch"], "lowering": top["merged_best"]}
            if top else None,
            "planner_vs_best_fixed": planner_total / min(always, never) if q else None,
            "planner_total_ms": planner_total, "always_merge_total_ms": always, "never_merge_total_ms": never,
            "planner_queries": len(q), "planner_right": sum(r["planner"]["right"] for r in q),
            "planner_wrong": wrong}


def table(rows: list[dict], order: list[str]) -> str:
    lines = ["| arch | N | batch | separate in turn | concurrent | merged matmul | merged conv | speedup | planner pick |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in sorted(rows, key=lambda r: (order.index(r["arch"]), r["batch"], r["n"])):
        if "planner" in r:
            p = r["planner"]
            pick = ("merge " + p["dense"]) if p["merge"] else "separate"
            pick += "" if p["right"] else f" (wrong, +{p['loss_ms']:.3g} ms)"
        else:
            pick = "-"
        lines.append(f"| {r['arch']} | {r['n']} | {r['batch']} | {r['separate_seq_ms']:.3f} (t{r['separate_seq_threads']}) "
                     f"| {r['separate_concurrent_ms']:.3f} | {r['merged_matmul_ms']:.3f} (t{r['merged_matmul_threads']}) "
                     f"| {r['merged_conv_ms']:.3f} (t{r['merged_conv_threads']}) | {r['speedup']:.2f}x "
                     f"({r['merged_best']}) | {pick} |")
    return "\n".join(lines)


def replan(args) -> None:
    """Recompute the planner's picks and totals of an existing results file with the rule now in the tree
    (the measurements are kept; member 0 of each architecture is rebuilt for its static features)."""
    result = json.loads(args.replan.read_text())
    rows = result["rows"]
    settings = result["settings"]
    order = list(dict.fromkeys(r["arch"] for r in rows))
    for arch in order:
        name, kw = ARCHS[arch]
        extra = {"image_size": settings["image_size"]} if name in CNNS else {}
        proto0 = onnx.load_from_string(family(name, 1, exporter=settings["exporter"], dynamic_batch=True,
                                              seed=settings["seed"], **kw, **extra)[0])
        query, features = planner_query(proto0, param_bytes(proto0))
        for r in rows:
            if r["arch"] == arch:
                r.update(features)
                plan_row(r, query)
    result.update(summarize(rows))
    result["planner_rule"] = rule_constants()
    result["replanned"] = {"command": "python " + " ".join([Path(sys.argv[0]).as_posix()] + sys.argv[1:]),
                           "at": time.strftime("%Y-%m-%d %H:%M:%S")}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    report(result, order)


def report(result: dict, order: list[str]) -> None:
    print()
    print(table(result["rows"], order))
    print()
    print(json.dumps({k: result[k] for k in ("speedup_n32", "speedup_n32_at", "planner_vs_best_fixed",
                                             "planner_total_ms", "always_merge_total_ms", "never_merge_total_ms",
                                             "planner_right", "planner_queries", "runtime_s")}, indent=2))



# ---------------------------------------------------------------- on a CUDA device (--device cuda)

GPU_ARCHS: dict[str, tuple[str, dict, dict]] = {
    "small_resnet": ("resnet18", {"width": 16, "num_classes": 10}, {"image_size": 32}),
    "bert_small": ("bert", {"vocab": 30522, "dim": 256, "layers": 4, "heads": 4, "ff": 1024, "seq": 64}, {}),
    "resnet50_224": ("resnet50", {"width": 64, "num_classes": 1000}, {"image_size": 224}),
}
GPU_POLICIES = ("members", "members_captured", "merged")
GPU_TOLERANCE = 1e-3


def gpu_members(arch: str, n: int, folder: Path) -> tuple[list[Path], onnx.ModelProto]:
    """``n`` members of ``arch``: member 0 exported once by torch, member ``i`` the same graph with each float
    initializer's values rotated by ``7919 * i`` places (distinct weights of the same distribution, without
    ``n`` exports); written as ``m<i>.onnx`` + ``m<i>.data`` (relative locations). Returns the paths and
    member 0 in full (for static features)."""
    name, kw, extra = GPU_ARCHS[arch]
    proto0 = onnx.load_from_string(family(name, 1, exporter="legacy", dynamic_batch=True, seed=0, **kw, **extra)[0])
    paths = []
    for i in range(n):
        m = onnx.ModelProto()
        m.CopyFrom(proto0)
        for t in m.graph.initializer:
            a = onnx.numpy_helper.to_array(t)
            if i and a.dtype == np.float32 and a.size > 1:
                t.CopyFrom(onnx.numpy_helper.from_array(np.roll(a.ravel(), 7919 * i % a.size).reshape(a.shape),
                                                        t.name))
        p = folder / f"m{i}.onnx"
        onnx.save_model(m, str(p), save_as_external_data=True, all_tensors_to_one_file=True,
                        location=f"m{i}.data", size_threshold=1024)
        paths.append(p)
    return paths, proto0


def gpu_inputs(arch: str, n: int, batch: int) -> list[np.ndarray]:
    name, kw, extra = GPU_ARCHS[arch]
    return [example_input(name, batch, seed=10_000 + 97 * batch + i, **kw, **extra) for i in range(n)]


class Deadline:
    """The run's time budget: ``left()`` seconds remain; points past it are skipped and said so."""

    def __init__(self, seconds: float) -> None:
        self.end = time.perf_counter() + seconds

    def left(self) -> float:
        return self.end - time.perf_counter()


def attempt(row: dict, key: str, fn):
    """``fn()``, or None with the error's last line kept in ``row["errors"][key]`` (one run shows what works)."""
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - every variant's failure is a result
        row.setdefault("errors", {})[key] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1][:400]}" \
            if str(exc).strip() else type(exc).__name__
        return None


def gpu_sessions(members: list[Path], device: str, batches: list[int], row: dict) -> tuple[list, list]:
    """Each member as a CudaModel (captured, one bucket per batch size) and its base plain ONNX Runtime session
    on the device (uncaptured ``run``). On ``--device cpu`` (a dry run of this code) plain CPU sessions
    stand in for both."""
    from modelsql.operators.backends.cuda import CudaModel
    from modelsql.operators.backends.onnxruntime import OrtModel

    captured, plain = [], []
    for i, p in enumerate(members):
        data = p.read_bytes()
        if device == "cpu":
            m = OrtModel(data, f"member {i}", intra_op_threads=1)
            captured.append(m)
            plain.append(m.session)
        else:
            m = CudaModel(data, f"member {i}", device, buckets=tuple(sorted(set(batches))))
            captured.append(m)
            plain.append(m.base.session)
    return captured, plain


def gpu_merged(members: list[Path], device: str, dense: str, folder: Path, row: dict):
    """The merged graph of ``members`` with the ``dense`` lowering, as a CudaModel captured for exactly N
    instances (its instance axis made symbolic, as the planner loads it); merge and load times in ``row``."""
    from modelsql.operators.backends.cuda import CudaModel
    from modelsql.operators.backends.onnxruntime import OrtModel
    from modelsql.engine.artifacts.merged import symbolic_instances

    t0 = time.perf_counter()
    merged = merge_models([onnx.load(str(p), load_external_data=False) for p in members],
                          reference=onnx.load(str(members[0])), dense=dense)
    row[f"merge_{dense}_s"] = time.perf_counter() - t0
    symbolic_instances(merged)
    data = merged.SerializeToString()
    t0 = time.perf_counter()
    model = (OrtModel(data, "merged", intra_op_threads=1) if device == "cpu"
             else CudaModel(data, "merged", device, buckets=(len(members),)))
    row[f"merged_session_{dense}_s"] = time.perf_counter() - t0
    return model


def gpu_time(fns: dict, repeats: int) -> dict:
    """Interleaved timing (order rotated per repeat, 2 warm-up calls each; every call returns host arrays,
    so it includes the device's work): name -> spread in ms."""
    names = list(fns)
    for nm in names:
        fns[nm]()
        fns[nm]()
    out = {nm: [] for nm in names}
    for r in range(repeats):
        for nm in names[r % len(names):] + names[:r % len(names)]:
            t0 = time.perf_counter()
            fns[nm]()
            out[nm].append((time.perf_counter() - t0) * 1000)
    return {nm: spread(xs) for nm, xs in out.items()}


def gpu_point(arch: str, n: int, batch: int, sets: dict, merged: dict, query, args) -> dict:
    """One (arch, N, batch): the three policies side by side, the merged check, the planner's pick."""
    row = {"arch": arch, "n": n, "batch": batch}
    xs = gpu_inputs(arch, n, batch)
    stacked = np.ascontiguousarray(np.stack(xs))
    cap, plain = sets["captured"][:n], sets["plain"][:n]
    iname = cap[0].input_names[0]
    fns = {"members": lambda: [s.run(None, {iname: x}) for s, x in zip(plain, xs)],
           "members_captured": lambda: [m.run({iname: x}) for m, x in zip(cap, xs)]}
    ref = attempt(row, "members_captured", lambda: np.stack([m.run({iname: x})[0] for m, x in zip(cap, xs)]))
    for dense, model in merged.items():
        got = attempt(row, f"merged_{dense}", lambda model=model: model.run({iname: stacked})[0])
        if got is None:
            continue
        if ref is not None:
            row[f"max_rel_diff_{dense}"] = rel_diff(got, ref)
            if not row[f"max_rel_diff_{dense}"] <= GPU_TOLERANCE:
                row.setdefault("errors", {})[f"merged_{dense}"] = f"differs by {row[f'max_rel_diff_{dense}']:.2e}"
                continue
        fns[f"merged_{dense}"] = lambda model=model: model.run({iname: stacked})
    times = attempt(row, "timing", lambda: gpu_time(fns, args.repeats)) or {}
    row["times"] = times
    for nm, st in times.items():
        row[f"{nm}_ms"] = st["median_ms"]
    lowered = {d: row[f"merged_{d}_ms"] for d in merged if f"merged_{d}_ms" in row}
    if lowered:
        row["merged_best"] = min(lowered, key=lowered.get)
        row["merged_ms"] = lowered[row["merged_best"]]
        if "members_ms" in row:
            row["speedup"] = row["members_ms"] / row["merged_ms"]
        if "members_captured_ms" in row:
            row["speedup_over_captured"] = row["members_captured_ms"] / row["merged_ms"]
    for dense, model in merged.items():
        row[f"merged_{dense}_capture"] = getattr(model, "capture_declined", None) or "captured"
    row["members_capture"] = getattr(cap[0], "capture_declined", None) or "captured"
    est = query(n, [float(batch)] * n)
    row["planner"] = {"policy": est.policy, "reason": est.reason, "estimates_ms": dict(est.estimates),
                      "planner_ms": row.get(f"{est.policy}_ms")}
    return row


def gpu_arch(arch: str, ns: list[int], batches: list[int], device: str, work: Path, args, deadline: Deadline) -> list:
    """Every (N, batch) of one architecture (N descending: the N = 32 point first, so a tight budget cuts the
    small N), its members' sessions made once and shared by every N."""
    folder = work / arch
    folder.mkdir()
    head = {"arch": arch}
    t0 = time.perf_counter()
    members, proto0 = gpu_members(arch, max(ns), folder)
    head["members_s"] = time.perf_counter() - t0
    _, features = planner_query(proto0, param_bytes(proto0))
    cost = _cost_of(features, param_bytes(proto0))
    estimate_on = "cuda:0" if device == "cpu" else device  # a dry run on the CPU still asks the GPU rule

    def gpu_query(n, rows):
        return merge_gain.estimate(cost, n, rows, device=estimate_on)
    del proto0
    cwd = os.getcwd()
    os.chdir(folder)  # the members' and merged graphs' data files are found relative to the working folder
    rows = []
    try:
        t0 = time.perf_counter()
        got = attempt(head, "member_sessions", lambda: gpu_sessions(members, device, batches, head))
        head["member_sessions_s"] = time.perf_counter() - t0
        if got is None:
            return [{**head, "n": n, "batch": b} for n in ns for b in batches]
        sets = {"captured": got[0], "plain": got[1]}
        for n in sorted(ns, reverse=True):
            lowerings = LOWERINGS if (not args.gpu_quick or n == max(ns)) and arch != "resnet50_224" else ("matmul",)
            if deadline.left() < 0:
                rows += [{**head, "n": n, "batch": b, "skipped": "over the run's time budget"} for b in batches]
                continue
            info: dict = {}
            merged = {}
            for dense in lowerings:
                m = attempt(info, f"merge_{dense}", lambda dense=dense: gpu_merged(members[:n], device, dense,
                                                                                  folder, info))
                if m is not None:
                    merged[dense] = m
            for b in batches:
                row = gpu_point(arch, n, b, sets, merged, gpu_query, args)
                row.update({k: v for k, v in {**head, **features, **info}.items()
                            if k != "errors" or "errors" not in row})
                if "errors" in info:
                    row.setdefault("errors", {}).update(info["errors"])
                rows.append(row)
                print(f"  {arch} N={n} b={b}: " + ", ".join(f"{p} {row.get(p + '_ms', float('nan')):.3f}"
                                                            for p in ("members", "members_captured", "merged"))
                      + f" ms; planner {row['planner']['policy']}" + (f"; errors {row['errors']}" if row.get(
                          "errors") else ""), flush=True)
            del merged
            gc.collect()
    finally:
        os.chdir(cwd)
        shutil.rmtree(folder, ignore_errors=True)
    return rows


def _cost_of(features: dict, wbytes: int) -> "merge_gain.MemberCost":
    return merge_gain.MemberCost(features["flops_per_row"], features.get("conv_flops", 0.0),
                                 features.get("gemm_flops", 0.0), features.get("nodes", 10), wbytes)


def gpu_summary(rows: list[dict]) -> dict:
    """Headline speedups at N = 32, one row (merged, the better lowering, over members in turn) and the planner
    against the best fixed policy over the points where all three were measured."""
    def at(arch):
        r = next((r for r in rows if r["arch"] == arch and r["n"] == 32 and r["batch"] == 1 and "speedup" in r), None)
        return r["speedup"] if r else None

    full = [r for r in rows if all(f"{p}_ms" in r for p in GPU_POLICIES) and r["planner"].get("planner_ms")]
    totals = {p: sum(r[f"{p}_ms"] for r in full) for p in GPU_POLICIES}
    planner = sum(r["planner"]["planner_ms"] for r in full)
    best = min(totals, key=totals.get) if full else None
    return {"resnet50_n32_b1_speedup": at("resnet50_224"), "small_resnet_n32_b1_speedup": at("small_resnet"),
            "bert_n32_b1_speedup": at("bert_small"),
            "planner_vs_best_fixed": planner / totals[best] if full and totals[best] > 0 else None,
            "planner_total_ms": planner, "fixed_totals_ms": totals, "best_fixed": best, "planner_points": len(full),
            "planner_right": sum(r["planner"]["planner_ms"] <= min(r[f"{p}_ms"] for p in GPU_POLICIES) * 1.0001
                                 for r in full)}


def gpu_main(args) -> None:
    """``--device cuda`` (or ``--device cpu --gpu-dry``: this code on CPU sessions, a check of the code path)."""
    from modelsql.operators.backends import devices

    device = "cpu" if args.device == "cpu" else devices.parse(args.device, "--device")
    if device != "cpu":
        devices.require(device, "benchmarks/netfuse.py")
    start = time.perf_counter()
    deadline = Deadline(args.budget_s)
    archs = args.arch or list(GPU_ARCHS)
    quick_n = {"resnet50_224": [8, 32]}
    rows: list[dict] = []
    work = Path(tempfile.mkdtemp(prefix="netfuse-gpu-"))
    out = args.out if args.out != RESULTS else GPU_RESULTS
    settings = {"device": device, "archs": archs, "n": args.n, "batch": args.batch, "repeats": args.repeats,
                "gpu_quick": args.gpu_quick, "budget_s": args.budget_s, "tolerance": GPU_TOLERANCE,
                "members": "member 0 exported once; member i its float weights rotated by 7919 i places",
                "policies": {"members": "plain ONNX Runtime CUDA sessions run in turn (uncaptured)",
                             "members_captured": "each member a CudaModel (captured CUDA graph per batch), in turn",
                             "merged": "the merged graph as a CudaModel captured for N instances (better lowering)"},
                "streams": "not measured: ONNX Runtime's Python API takes no CUDA stream per run"}
    def write() -> dict:  # after every architecture: a run cut at its time limit keeps what it measured
        result = {**gpu_summary(rows), "host": {"platform": platform.platform(), "onnxruntime": ort.__version__,
                                                "providers": ort.get_available_providers()},
                  "settings": settings, "planner_rule": rule_constants(), "runtime_s": time.perf_counter() - start,
                  "rows": rows, "command": "python " + " ".join([Path(sys.argv[0]).as_posix()] + sys.argv[1:])}
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2, default=str))
        return result

    try:
        for arch in archs:
            ns = [n for n in (args.n or quick_n.get(arch, [1, 2, 4, 8, 16, 32])) if n >= 1]
            if args.gpu_quick and arch == "resnet50_224":
                batches = [1]
            else:
                batches = args.batch
            share = Deadline(deadline.left() / (len(archs) - archs.index(arch)))  # each arch its share, N = 32 first
            print(f"{arch}: N {ns}, batch {batches} ({share.left():.0f} s of {deadline.left():.0f} s left)", flush=True)
            rows += gpu_arch(arch, ns, batches, device, work, args, share)
            write()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = write()
    print(json.dumps({k: v for k, v in result.items() if k not in ("rows", "host", "settings", "planner_rule")},
                     indent=2, default=str))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", nargs="+", choices=list(ARCHS) + list(GPU_ARCHS), default=None,
                    help=f"CPU: {', '.join(ARCHS)}; GPU: {', '.join(GPU_ARCHS)}")
    ap.add_argument("--n", nargs="+", type=int, default=None, help="members merged (default 1 2 4 8 16 32)")
    ap.add_argument("--batch", nargs="+", type=int, default=[1, 8], help="rows per instance")
    ap.add_argument("--repeats", type=int, default=None, help="timed samples per variant (default 7; 3 with --quick)")
    ap.add_argument("--image-size", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--min-sample-ms", type=float, default=2.0, help="a sample is k calls lasting at least this")
    ap.add_argument("--point-budget-s", type=float, default=20.0,
                    help="repeats are cut (to no fewer than 3) so one (arch, N, batch) stays within this")
    ap.add_argument("--mem-budget-gb", type=float, default=None,
                    help="GiB the sessions of a point may peak at (default 40%% of MemAvailable at start)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 3 repeats, N 1 8 32, mlp_tiny mlp resnet18")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--replan", type=Path, default=None, metavar="RESULTS_JSON",
                    help="measure nothing: recompute the planner's picks in this results file with the current rule")
    ap.add_argument("--device", default="cpu", help="cpu (the CPU benchmark above) or cuda / cuda:N (the GPU one)")
    ap.add_argument("--gpu-quick", action="store_true",
                    help="GPU grid within about 2 minutes: ResNet-50 at N 8 and 32, one row; one lowering below N 32")
    ap.add_argument("--gpu-dry", action="store_true", help="run the GPU benchmark's code on CPU sessions (a check)")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="GPU run: points are skipped (and said so) past this many seconds (default 110 with "
                         "--gpu-quick, else 600)")
    args = ap.parse_args()
    if args.replan:
        replan(args)
        return
    if args.device != "cpu" or args.gpu_dry:
        args.repeats = args.repeats or (7 if args.gpu_quick else 15)
        args.budget_s = args.budget_s or (110.0 if args.gpu_quick else 600.0)
        gpu_main(args)
        return
    if args.quick:
        args.arch = args.arch or ["mlp_tiny", "mlp", "resnet18"]
        args.n = args.n or [1, 8, 32]
        args.repeats = args.repeats or 3
    args.arch = args.arch or list(ARCHS)
    args.n = sorted(args.n or [1, 2, 4, 8, 16, 32])
    args.repeats = args.repeats or 7
    args.mem_budget_gb = args.mem_budget_gb or 0.4 * mem_available_gb()

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a kill still removes the temporary folder
    start = time.perf_counter()
    host = {"cpu_count": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
            "onnxruntime": ort.__version__, "onnx": onnx.__version__,
            "torch": __import__("torch").__version__, "numpy": np.__version__,
            "loadavg_start": os.getloadavg(), "mem_available_gb_start": mem_available_gb()}
    settings = {"archs": args.arch, "n": args.n, "batch": args.batch, "repeats": args.repeats,
                "image_size": args.image_size, "seed": args.seed, "exporter": "legacy",
                "min_sample_ms": args.min_sample_ms, "point_budget_s": args.point_budget_s,
                "mem_budget_gb": args.mem_budget_gb, "threads_tried": list(THREADS),
                "concurrent_workers": 2, "tolerance": TOLERANCE, "quick": args.quick,
                "session": "CPUExecutionProvider, inter_op 1, sequential, allow_spinning 0, log level 3",
                "repeats_note": "repeats per variant are cut to no fewer than 3 where a point's timed loop would "
                                "exceed point_budget_s (the big CNNs at large N); each row's 'repeats' says what it got"}
    rows: list[dict] = []
    work = Path(tempfile.mkdtemp(prefix="netfuse-bench-"))
    pool = ThreadPoolExecutor(2)

    def write(done: bool) -> dict:
        result = {**summarize(rows), "host": {**host, "loadavg_end": os.getloadavg()}, "settings": settings,
                  "planner_rule": rule_constants(),
                  "runtime_s": time.perf_counter() - start, "complete": done, "rows": rows,
                  "command": "python " + " ".join([Path(sys.argv[0]).as_posix()] + sys.argv[1:])}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2))
        return result

    try:
        for arch in args.arch:
            folder = work / arch
            folder.mkdir()
            t0 = time.perf_counter()
            members = export_members(arch, max(args.n), args, folder)
            print(f"{arch}: exported {len(members)} members in {time.perf_counter() - t0:.1f} s", flush=True)
            for n in args.n:
                t0 = time.perf_counter()
                new = run_point(arch, n, members[:n], folder, args, pool)
                rows.extend(new)
                r = new[0]
                print(f"  N={n}: {time.perf_counter() - t0:.1f} s; merge {r['merge_matmul_s']:.2f}/"
                      f"{r['merge_conv_s']:.2f} s, merged session {r['merged_session_matmul_s']:.2f} s, "
                      f"rss separate {r['rss_separate_mb']:.0f} MB merged {r['rss_merged_mb']:.0f} MB "
                      f"(peak +{r['peak_growth_mb']:.0f} MB, {r['phases']} phases); "
                      + ", ".join(f"b{x['batch']} {x['baseline_ms']:.3f} -> {x['merged_best_ms']:.3f} ms "
                                  f"({x['speedup']:.2f}x)" for x in new), flush=True)
                for f in folder.glob("merged_*"):
                    f.unlink()
                write(False)
            shutil.rmtree(folder)
    finally:
        pool.shutdown()
        shutil.rmtree(work, ignore_errors=True)
    result = write(True)
    report(result, args.arch)


if __name__ == "__main__":
    main()
