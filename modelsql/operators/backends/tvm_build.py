"""Building a TVM library in a child process under a wall-clock limit (used for CUDA targets).

TVM compiles in C++ inside the calling process: a build cannot be interrupted, and a crash in a code
generator would take the process (a DuckDB connection) with it. :func:`build_with_limit` runs
:func:`.tvm.compile_onnx` in ``python -m modelsql.operators.backends.tvm_build`` (a fresh interpreter,
not a fork: the parent may hold CUDA contexts and DuckDB threads), kills it at the limit, and turns
every outcome into bytes or a :class:`~modelsql.errors.NotSupportedError` with the reason.

CUDA kernels are compiled by NVRTC (through the ``cuda-bindings`` package) or by ``nvcc`` on the PATH,
TVM's ``TVM_CUDA_COMPILE_MODE`` choosing. Unless that variable is set, the child tries NVRTC first
where ``cuda-bindings`` is installed, then ``nvcc`` where it is on the PATH, each with what is left of
the limit; the decline names every compiler's error.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

from modelsql.errors import NotSupportedError

__all__ = ["BUILD_TIMEOUT_S", "build_with_limit", "cuda_compilers"]

BUILD_TIMEOUT_S = 300.0
"""Default wall-clock limit of one build, in seconds (``MODELSQL_TVM_BUILD_TIMEOUT_S`` overrides it): an
untuned CUDA build of a small model takes seconds, so the limit only stops a build that hangs."""


def cuda_compilers() -> list[str]:
    """The CUDA compilers TVM may use here, in the order tried: ``TVM_CUDA_COMPILE_MODE`` alone when set;
    else ``"nvrtc"`` when ``cuda.bindings`` imports, then ``"nvcc"`` when it is on the PATH (may be empty)."""
    forced = os.environ.get("TVM_CUDA_COMPILE_MODE")
    if forced:
        return [forced.lower()]
    found = []
    try:
        if importlib.util.find_spec("cuda.bindings") is not None:
            found.append("nvrtc")
    except (ImportError, ValueError):  # no "cuda" package at all
        pass
    if shutil.which("nvcc"):
        found.append("nvcc")
    return found


def build_with_limit(model_bytes: bytes, *, target: dict, batch_size: Optional[int] = None,
                     timeout_s: Optional[float] = None) -> bytes:
    """:func:`.tvm.compile_onnx` of ``model_bytes`` in a child process, killed after ``timeout_s`` seconds.

    Args:
        model_bytes: a serialized ONNX ModelProto.
        target: a TVM target dict (:func:`.tvm.cuda_target` or :func:`.tvm.cpu_target`).
        batch_size: as :func:`.tvm.compile_onnx`.
        timeout_s: wall-clock limit of all tries together (default :data:`BUILD_TIMEOUT_S`, or the environment's
            ``MODELSQL_TVM_BUILD_TIMEOUT_S``).

    Returns:
        The library's bytes, as :func:`.tvm.compile_onnx` returns them.

    Raises:
        NotSupportedError: ``tvm_import_failed`` (TVM cannot import or compile the model, or no CUDA compiler
            is present; the message says which, per compiler tried); ``tvm_build_timeout`` (the limit passed);
            ``fixed_batch`` as :func:`.tvm.bind_batch`.
        DataError: ``invalid_onnx``.
    """
    limit = float(timeout_s if timeout_s is not None else os.environ.get("MODELSQL_TVM_BUILD_TIMEOUT_S",
                                                                        BUILD_TIMEOUT_S))
    modes = cuda_compilers() if target.get("kind") == "cuda" else [None]
    if not modes:
        raise NotSupportedError("TVM has no CUDA compiler here: install cuda-bindings (NVRTC) or put nvcc on "
                                "the PATH", code="tvm_import_failed")
    deadline = time.monotonic() + limit
    failures = []
    for mode in modes:
        try:
            return _build_once(model_bytes, target, batch_size, mode, deadline - time.monotonic(), limit)
        except NotSupportedError as exc:
            if exc.code != "tvm_import_failed" or mode is None or "cannot import" in exc.message:
                raise  # the frontend's refusal does not depend on the CUDA compiler
            failures.append(f"with {mode}: {exc.message}")
    raise NotSupportedError("; ".join(failures), code="tvm_import_failed")


def _build_once(model_bytes: bytes, target: dict, batch_size: Optional[int], mode: Optional[str],
                seconds: float, limit: float) -> bytes:
    from modelsql.errors import DataError

    if seconds <= 0:
        raise NotSupportedError(f"TVM did not build the model for {target.get('kind')} within {limit:g} s",
                                code="tvm_build_timeout")
    with tempfile.TemporaryDirectory(prefix="modelsql-tvm-build-") as folder:
        src, out, err = (os.path.join(folder, n) for n in ("model.onnx", "model.so", "error.json"))
        Path(src).write_bytes(model_bytes)
        args = [sys.executable, "-m", __name__, src, out, err, json.dumps(target), str(batch_size or 0)]
        try:
            proc = subprocess.run(args, env=_child_env(mode), capture_output=True, text=True, timeout=seconds)
        except subprocess.TimeoutExpired:
            raise NotSupportedError(f"TVM did not build the model for {target.get('kind')} within {limit:g} s "
                                    "(the build was stopped)", code="tvm_build_timeout") from None
        if os.path.exists(err):
            e = json.loads(Path(err).read_text())
            cls = DataError if e["kind"] == "DataError" else NotSupportedError
            raise cls(e["message"], code=e["code"])
        if proc.returncode != 0 or not os.path.exists(out):
            tail = (proc.stderr or proc.stdout or "").strip().splitlines()[-1:] or [f"exit status {proc.returncode}"]
            raise NotSupportedError(f"TVM's build process failed: {tail[0][:300]}", code="tvm_import_failed")
        return Path(out).read_bytes()


def _child_env(mode: Optional[str]) -> dict:
    """This process's environment, with the folder holding ``modelsql`` on ``PYTHONPATH`` and the CUDA compiler."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[3])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    if mode is not None:
        env["TVM_CUDA_COMPILE_MODE"] = mode
    return env


def _main(argv: list[str]) -> int:
    """Child: ``src out err target_json batch`` -> the library in ``out``, or the error as JSON in ``err``."""
    from modelsql.errors import Error
    from modelsql.operators.backends import tvm as tvm_backend

    src, out, err, target, batch = argv
    try:
        lib = tvm_backend.compile_onnx(Path(src).read_bytes(), target=json.loads(target),
                                       batch_size=int(batch) or None)
    except Error as exc:
        Path(err).write_text(json.dumps({"kind": type(exc).__name__, "code": exc.code, "message": exc.message}))
        return 1
    Path(out).write_bytes(lib)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
