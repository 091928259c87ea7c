"""Probe of TVM on CUDA (issue 24): what builds, what runs, how it compares with ONNX Runtime CUDA, how fast.

Builds an MLP (16-32-4) and a small CNN (conv, batch norm, ReLU, max-pool, linear on 1x8x8; the models of
tests/tvm_fixtures.py) for CUDA with TVM's default GPU schedules (DLight, untuned), with each CUDA compiler
present (NVRTC through cuda-bindings, nvcc), loads them on cuda:0, checks them against ONNX Runtime's CUDA
provider, times TVM and ONNX Runtime CUDA (median of 50 runs, batch 1 and 64, numpy in and out), and runs
COMPILE MODEL ... FOR 'cuda' + PREDICT(..., backend = 'tvm') in a scratch catalog. Every step records its
error text instead of stopping, and the whole script stops itself after 120 s writing what it has, so one
run says what works. On a machine without CUDA it reports why and still runs the builds (without TVM's CUDA
runtime loaded, code generation keeps the kernels' CUDA source instead of compiling them, so there a build
passing says nothing about NVRTC or nvcc).

    python benchmarks/gpu/tvm_cuda_probe.py --out probe.json     # on the GPU machine:
    export PYTHONPATH=$HOME/site:$PWD PYTHONUNBUFFERED=1; python benchmarks/gpu/tvm_cuda_probe.py --out $OUT/tvm_cuda.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

LIMIT_S = 120.0
START = time.monotonic()
REPORT: dict = {"limit_s": LIMIT_S, "steps": {}}


def left() -> float:
    return LIMIT_S - (time.monotonic() - START)


def write(out: str) -> None:
    REPORT["elapsed_s"] = round(time.monotonic() - START, 2)
    text = json.dumps(REPORT, indent=2, default=str)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(text)
    print(text, flush=True)


def watchdog(out: str) -> None:
    """Stop the whole process at the limit (a TVM build or a CUDA call cannot be interrupted), writing the report."""
    def fire():
        REPORT["stopped"] = f"the whole-script limit of {LIMIT_S:g} s passed"
        write(out)
        os._exit(3)

    timer = threading.Timer(LIMIT_S, fire)
    timer.daemon = True
    timer.start()


def step(name: str, fn, *args, **kw):
    """Run ``fn``; record its result (or the error) under ``name``; return the result or None."""
    t = time.perf_counter()
    try:
        result = fn(*args, **kw)
        shown = {"bytes": len(result)} if isinstance(result, bytes) else result
        REPORT["steps"][name] = {"ok": True, "s": round(time.perf_counter() - t, 3), "result": shown}
        return result
    except BaseException as exc:  # noqa: BLE001 - the point is to record every failure
        REPORT["steps"][name] = {"ok": False, "s": round(time.perf_counter() - t, 3),
                                 "error": f"{type(exc).__name__}: {str(exc).strip()[:800]}",
                                 "where": traceback.format_exc().strip().splitlines()[-3:]}
        return None
    finally:
        print(f"[{time.monotonic() - START:6.1f}s] {name}: {'ok' if REPORT['steps'][name]['ok'] else 'FAILED'}",
              file=sys.stderr, flush=True)


def environment() -> dict:
    import shutil
    import subprocess
    from importlib import metadata

    info = {"python": sys.version.split()[0]}
    for dist in ("apache-tvm", "apache-tvm-ffi", "onnxruntime", "onnxruntime-gpu", "torch", "cuda-bindings", "onnx"):
        try:
            info[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            info[dist] = None
    info["nvcc"] = shutil.which("nvcc")
    if info["nvcc"]:
        info["nvcc_version"] = subprocess.run(["nvcc", "--version"], capture_output=True, text=True,
                                              timeout=20).stdout.strip().splitlines()[-1:]
    try:
        info["nvidia_smi"] = subprocess.run(["nvidia-smi", "--query-gpu=name,compute_cap,driver_version",
                                             "--format=csv,noheader"], capture_output=True, text=True,
                                            timeout=20).stdout.strip()
    except Exception as exc:  # noqa: BLE001
        info["nvidia_smi"] = f"none: {exc}"
    return info


def availability() -> dict:
    import onnxruntime

    from modelsql.operators.backends import devices, tvm as tvm_backend, tvm_build
    from modelsql.engine.artifacts import compiled

    tvm = tvm_backend.load_tvm()
    return {"ort_providers": onnxruntime.get_available_providers(), "devices": list(devices.available()),
            "tvm_unavailable": tvm_backend.unavailable_reason(),
            "tvm_cuda_unavailable": tvm_backend.cuda_unavailable_reason(0),
            "tvm_runtime_enabled_cuda": bool(tvm.runtime.enabled("cuda")),
            "cuda_missing_for_compile": compiled.cuda_missing(0), "cuda_compilers": tvm_build.cuda_compilers()}


def target_of(cuda_ok: bool) -> dict:
    from modelsql.operators.backends import tvm as tvm_backend

    return tvm_backend.cuda_target(0) if cuda_ok else {"kind": "cuda", "arch": "sm_90"}


def build(model: bytes, target: dict, mode: str) -> dict:
    from modelsql.operators.backends import tvm_build

    old = os.environ.get("TVM_CUDA_COMPILE_MODE")
    os.environ["TVM_CUDA_COMPILE_MODE"] = mode  # the child process compiles with this one alone
    try:
        lib = tvm_build.build_with_limit(model, target=target, timeout_s=max(5.0, min(45.0, left() - 30)))
    finally:
        if old is None:
            del os.environ["TVM_CUDA_COMPILE_MODE"]
        else:
            os.environ["TVM_CUDA_COMPILE_MODE"] = old
    LIBS.setdefault(id(model), lib)
    return {"bytes": len(lib)}


LIBS: dict = {}


def check(model: bytes, shape: tuple) -> dict:
    from modelsql.operators.backends import tvm as tvm_backend
    from modelsql.operators.backends.tvm_check import check_against_onnxruntime

    tvm_model = tvm_backend.load_library(LIBS[id(model)], tvm_backend.Signature.from_onnx(model), "probe",
                                         device="cuda:0")
    MODELS_ON_GPU[id(model)] = tvm_model
    result = check_against_onnxruntime(model, tvm_model, device="cuda:0")
    return {"ok": result.ok, "max_abs": result.max_abs, "max_rel": result.max_rel, "reason": result.reason,
            "batches": result.batches}


MODELS_ON_GPU: dict = {}


def median_ms(fn, n: int = 50) -> float:
    for _ in range(5):
        fn()
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return round(statistics.median(times), 4)


def timing(model: bytes, shape: tuple) -> dict:
    import numpy as np

    from modelsql.operators.backends.onnxruntime import OrtModel

    tvm_model = MODELS_ON_GPU[id(model)]
    ort_cuda = OrtModel(model, "probe", device="cuda:0")
    out = {"ort_providers": ort_cuda.session.get_providers()}
    for batch in (1, 64):
        x = np.random.default_rng(batch).standard_normal((batch, *shape)).astype(np.float32)
        feeds = {"x": x}
        diff = float(np.abs(tvm_model.run(feeds)[0] - ort_cuda.run(feeds)[0]).max())
        tvm_ms, ort_ms = median_ms(lambda: tvm_model.run(feeds)), median_ms(lambda: ort_cuda.run(feeds))
        out[f"batch_{batch}"] = {"tvm_ms": tvm_ms, "ort_cuda_ms": ort_ms, "tvm_over_ort": round(tvm_ms / ort_ms, 3),
                                 "max_abs_diff_vs_ort_cuda": diff}
    return out


def sql(name: str, model: bytes, shape: tuple) -> dict:
    import numpy as np

    import modelsql

    folder = tempfile.mkdtemp(prefix="tvm-cuda-probe-")
    con = modelsql.connect(os.path.join(folder, "probe.duckdb"))
    con.import_model(name, model)
    x = np.random.default_rng(0).uniform(-0.5, 0.5, (100, *shape)).astype(np.float32)
    typ = "FLOAT" + "".join(f"[{d}]" for d in reversed(shape if len(shape) == 1 else shape[1:]))
    con.execute(f"CREATE TABLE t (id INTEGER, x {typ})")
    con.executemany("INSERT INTO t VALUES (?, ?)", [(i, (r if len(shape) == 1 else r[0]).tolist())
                                                    for i, r in enumerate(x)])
    row = con.execute(f"COMPILE MODEL {name} FOR 'cuda'").fetchone()
    out = {"compile_row": list(row)}
    if row[5] == "checked":
        got = np.array([r[0] for r in con.execute(
            f"SELECT y FROM PREDICT(MODEL {name}, TABLE t, backend = 'tvm') ORDER BY id").fetchall()], np.float32)
        from modelsql.operators.backends.onnxruntime import OrtModel

        ref = OrtModel(model, "probe").run({"x": x})[0]
        out["predict_max_abs_diff_vs_ort_cpu"] = float(np.abs(got - ref).max())
        plan = dict(con.execute(f"EXPLAIN SELECT * FROM PREDICT(MODEL {name}, TABLE t, backend = 'tvm')").fetchall())
        out["explain_scan"] = [ln for ln in plan.get("modelsql_plan", "").splitlines() if "[" in ln][:2]
    con.close()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="tvm_cuda_probe.json", help="where the JSON report goes")
    out = parser.parse_args().out
    watchdog(out)
    step("environment", environment)
    avail = step("availability", availability) or {}
    cuda_ok = not avail.get("cuda_missing_for_compile", ["unknown"])
    REPORT["cuda"] = "available" if cuda_ok else f"no cuda: {avail.get('cuda_missing_for_compile')}"
    target = step("target", target_of, cuda_ok)
    import tvm_fixtures

    for name, shape in (("mlp", (16,)), ("cnn", (1, 8, 8))):
        model = step(f"{name}.onnx", getattr(tvm_fixtures, name))
        if model is None or target is None:
            continue
        for mode in (avail.get("cuda_compilers") or ["nvrtc", "nvcc"]):
            if left() > 35:
                step(f"{name}.build.{mode}", build, model, target, mode)
        if not cuda_ok or id(model) not in LIBS:
            continue
        if step(f"{name}.check_vs_ort_cuda", check, model, shape) is not None and left() > 20:
            step(f"{name}.timing", timing, model, shape)
        if left() > 25:
            step(f"{name}.sql", sql, name, model, shape)
    write(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
