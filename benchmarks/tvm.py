"""TVM (Relax, MetaSchedule-tuned) against ONNX Runtime per model and batch size, with the tuning time.

Claim (issue 11): TVM is a second backend the planner may choose only where it wins; untuned it loses
by 50-200x on this CPU, and minutes of tuning narrow the gap without closing it on MLAS's home ground.
This script measures where it stands, so the cost model's traces and the planner's choice can be
checked against it.

Workload (built in code, random init: ``modelsql.datasets.architectures``): ``mlp_tiny`` (32-64-64-4),
``mlp`` (784-256-256-10) and ``cnn`` (two Conv-BN-ReLU blocks of 16 and 32 channels on 3 x 32 x 32
images, global average pool, a dense layer), exported by torch's legacy exporter with a dynamic batch.

Per (model, batch size) in ``--batches``:

* ``ort_ms``: ONNX Runtime, the best of 1 and 2 intra-op threads (spinning off, all graph optimizations);
* ``tvm_untuned_ms``: TVM's default build (no schedules) of the model with a symbolic batch;
* ``tvm_tuned_ms``: MetaSchedule with ``--trials`` trials for that batch (evolutionary search, XGBoost
  cost model, in-process builder), ``tune_s`` the tuning wall time;
* every TVM build is checked against ONNX Runtime first (``check_max_abs``); a build that fails the
  check is reported as declined and not timed.

Timing: the variants of a point interleaved, ``--repeats`` samples after 3 warm-up runs each; a sample
is ``k`` back-to-back runs divided by ``k`` (``k`` from the warm-up so a sample lasts >= 2 ms); medians,
with min and max. Headlines in ``benchmarks/results/tvm.json``: per point ``tuned_vs_ort`` = ort_ms /
tvm_tuned_ms (above 1: TVM faster) and ``tuned_vs_untuned``; ``best_tuned_vs_ort`` over all points.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

# This script is named tvm.py, as the issue asks: keep its folder off the path so `import tvm` finds TVM.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != os.path.dirname(os.path.abspath(__file__))]

import numpy as np

RESULTS = Path(__file__).parent / "results" / "tvm.json"


def models() -> dict:
    """name -> (ONNX bytes, input shape without the batch)."""
    import torch
    from torch import nn

    from modelsql.datasets.architectures import export_onnx, mlp, randomize

    cnn = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))
    out = {}
    for name, module, shape in (("mlp_tiny", mlp((32, 64, 64, 4)), (32,)), ("mlp", mlp((784, 256, 256, 10)), (784,)),
                                ("cnn", cnn, (3, 32, 32))):
        module = randomize(module, 0).eval()
        example = torch.randn(2, *shape).numpy()
        out[name] = (export_onnx(module, example), shape)
    return out


def _samples(run, repeats: int, k: int) -> list[float]:
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(k):
            run()
        out.append((time.perf_counter() - start) / k * 1e3)
    return out


def time_point(variants: dict, repeats: int) -> dict:
    """Interleaved medians (ms) of ``variants`` (name -> zero-argument run)."""
    ks = {}
    for name, run in variants.items():
        start = time.perf_counter()
        for _ in range(3):
            run()
        per = (time.perf_counter() - start) / 3
        ks[name] = max(1, int(0.002 / max(per, 1e-7)))
    samples = {n: [] for n in variants}
    names = list(variants)
    for r in range(repeats):
        for n in names[r % len(names):] + names[:r % len(names)]:
            samples[n] += _samples(variants[n], 1, ks[n])
    return {n: {"median": statistics.median(v), "min": min(v), "max": max(v)} for n, v in samples.items()}


def point(name: str, data: bytes, shape: tuple, batch: int, trials: int, repeats: int, work: str) -> dict:
    import onnxruntime as ort

    from modelsql.operators.backends import tvm as tvm_backend
    from modelsql.operators.backends import tvm_check, tvm_tune

    feeds = {"input": np.random.default_rng(0).standard_normal((batch, *shape), dtype=np.float32)}
    sessions = {}
    for t in (1, 2):
        opts = ort.SessionOptions()
        opts.intra_op_num_threads, opts.inter_op_num_threads = t, 1
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        sessions[t] = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
    target = tvm_backend.cpu_target(os.cpu_count() or 1)
    row = {"model": name, "batch": batch, "trials": trials}
    untuned = tvm_backend.load_library(tvm_backend.compile_onnx(data, target=target),
                                       tvm_backend.Signature.from_onnx(data), name)
    start = time.perf_counter()
    lib = tvm_tune.tune(data, target=target, batch_size=batch, trials=trials, work_dir=os.path.join(work, name, str(batch)),
                        seed=0)
    row["tune_s"] = time.perf_counter() - start
    tuned = tvm_backend.load_library(lib, tvm_backend.Signature.from_onnx(data, batch), name)
    variants = {f"ort_{t}": (lambda s=s: s.run(None, feeds)) for t, s in sessions.items()}
    for label, model in (("tvm_untuned", untuned), ("tvm_tuned", tuned)):
        check = tvm_check.check_against_onnxruntime(data, model, batch_sizes=(batch,))
        row[f"{label}_check_max_abs"] = check.max_abs
        if check.ok:
            variants[label] = lambda m=model: m.run(feeds)
        else:
            row[f"{label}_declined"] = check.reason
    times = time_point(variants, repeats)
    row["times_ms"] = times
    row["ort_ms"] = min(times["ort_1"]["median"], times["ort_2"]["median"])
    for label in ("tvm_untuned", "tvm_tuned"):
        if label in times:
            row[f"{label}_ms"] = times[label]["median"]
    if "tvm_tuned_ms" in row:
        row["tuned_vs_ort"] = row["ort_ms"] / row["tvm_tuned_ms"]
        if "tvm_untuned_ms" in row:
            row["tuned_vs_untuned"] = row["tvm_untuned_ms"] / row["tvm_tuned_ms"]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=64, help="MetaSchedule trials per (model, batch)")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--models", nargs="+", default=["mlp_tiny", "mlp", "cnn"])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--quick", action="store_true", help="mlp_tiny at batch 1, 8 trials, 5 repeats")
    a = ap.parse_args()
    if a.quick:
        a.trials, a.batches, a.models, a.repeats = 8, [1], ["mlp_tiny"], 5
    built = models()
    rows = []
    with tempfile.TemporaryDirectory(prefix="modelsql-tvm-bench-") as work:
        for name in a.models:
            data, shape = built[name]
            for b in a.batches:
                row = point(name, data, shape, b, a.trials, a.repeats, work)
                rows.append(row)
                print(json.dumps({k: v for k, v in row.items() if k != "times_ms"}))
    import tvm

    ratios = [r["tuned_vs_ort"] for r in rows if "tuned_vs_ort" in r]
    result = {
        "best_tuned_vs_ort": max(ratios) if ratios else None,
        "median_tuned_vs_ort": statistics.median(ratios) if ratios else None,
        "points": rows,
        "trials_per_point": a.trials,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "tvm": tvm.__version__,
                    "mcpu": tvm.target.codegen.llvm_get_system_cpu()},
        "command": "python benchmarks/tvm.py" + (" --quick" if a.quick else f" --trials {a.trials}"),
    }
    if not a.quick:
        RESULTS.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "points"}, indent=1))


if __name__ == "__main__":
    main()
