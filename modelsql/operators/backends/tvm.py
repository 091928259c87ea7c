"""Apache TVM backend: an ONNX model compiled by TVM Relax into a shared library, loaded as a BackendModel.

The path (apache-tvm 0.27, the Relax API; Relay is gone)::

    tvm.relax.frontend.onnx.from_onnx(model)          # ONNX -> Relax IRModule
    relax.transform.DecomposeOpsForInference()(mod)   # batch norm etc. in their inference form
    ex = tvm.compile(mod, tvm.target.Target(target))  # LegalizeOps + FuseOps/FuseTIR, no schedules
    ex.export_library(path)                           # one .so; the weights are embedded constants
    relax.VirtualMachine(tvm.runtime.load_module(path), tvm.cpu())["main"](*inputs)

measured when the backend was built. Untuned code
is naive TIR loops on one thread, 50-200x slower than ONNX Runtime; :mod:`.tvm_tune` schedules it.

Shapes: ``from_onnx`` keeps a symbolic batch dimension as a symbolic variable, so one library built
without ``batch_size`` runs any number of rows; with ``batch_size`` the batch is bound first (static
shapes, what tuning needs) and :attr:`TvmModel.fixed_batch` is set.

Target: a JSON target that names the CPU (:func:`cpu_target`). LLVM 22 drops ``-mcpu=native`` to a
generic CPU without AVX2, and ``Target("llvm -mcpu=...")`` (the CLI string form) raises in 0.27. LLVM's name
of the CPU is remembered per machine (:func:`remembered_cpu_target`: the user's cache folder, keyed by what
``/proc/cpuinfo`` says of the CPU and the TVM versions), so a process that only weighs a compiled artifact
against ONNX Runtime (every PREDICT of a compiled model) need not import TVM, and the torch that ``tvm_ffi``
imports, to learn whether an artifact is this CPU's.

CUDA (:func:`cuda_target`, ``{"kind": "cuda", "arch": "sm_XY"}``): the build runs Relax's CUDA pipeline
(``relax.get_default_pipeline(target)``: LegalizeOps, FuseOps/FuseTIR, then DLight's default GPU schedules
``ApplyDefaultSchedule(gpu.Matmul, gpu.GEMV, gpu.Reduction, gpu.GeneralReduction, gpu.Fallback)`` under the
target; no tuning) and TVM compiles the kernels with NVRTC (``cuda-bindings``) or ``nvcc``
(``TVM_CUDA_COMPILE_MODE``, see :mod:`.tvm_build`, which runs the build in a child process under a
wall-clock limit). The apache-tvm wheel's ``libtvm_runtime_cuda.so`` loads only where the NVIDIA driver
(``libcuda.so.1``) and ``libcudart.so.13`` load (:func:`cuda_unavailable_reason`); without it a CUDA build
still runs the pipeline and code generation but keeps the kernels as CUDA source in a module that cannot
launch them (seen on a machine without a GPU), so kernels are compiled, and run, only where it loads. A :class:`TvmModel` with ``device="cuda:N"`` copies its inputs to
that GPU, runs there and copies the outputs back.

Trust: TVM imports some ONNX operators into wrong code without any error (measured on the onnx
package's own node test cases: SpaceToDepth in CRD mode, Expand with a changed dimension,
ConvTranspose with ``output_shape``, LayerNormalization's optional outputs), so a compiled library
is trusted only after :func:`.tvm_check.check_against_onnxruntime`.

Threads: TVM's CPU runtime keeps one thread pool per calling thread (``ThreadPool::ThreadLocal()``
in src/runtime/thread_pool.cc). A pool is created on a thread's first parallel run with
``TVM_NUM_THREADS`` workers, read from the environment at that moment (unset: half the hardware
threads on x86, TVM assumes hyper-threading: 1 on a 2-core VM), and the ``runtime.config_threadpool
(mode, n)`` global function can then lower the calling thread's count (never raise it past the
pool's size). This module sets ``TVM_NUM_THREADS`` (to all usable cores) and
``TVM_THREAD_POOL_SPIN_COUNT`` (to 0: workers sleep instead of spinning, as ONNX Runtime sessions
use ``allow_spinning = 0``, since DuckDB threads share the cores) when they are unset, before TVM
is imported, and :meth:`TvmModel.run` sets the calling thread's count to ``intra_op_threads``.
Only scheduled (tuned) code has parallel loops; untuned code runs on the calling thread alone.
"""

from __future__ import annotations

import functools
import json
import os
import tempfile
import threading
import traceback
import warnings
from dataclasses import dataclass
from importlib import metadata
from typing import Optional, Sequence, Union

import numpy as np
import onnx

from modelsql.errors import DataError, NotSupportedError
from modelsql.operators.backends.onnxruntime import default_threads
from modelsql.xdg import cache_home

__all__ = [
    "REQUIRED_TVM", "REQUIRED_FFI", "unavailable_reason", "cpu_target", "cuda_target", "cuda_unavailable_reason",
    "is_gpu_target", "target_key", "versions", "remembered_cpu_target", "CPU_CACHE_FILE", "install_reason",
    "compile_onnx", "import_onnx", "bind_batch", "export_library", "TensorSpec", "Signature", "TvmModel",
    "load_library", "load_tvm", "parse_onnx", "error_text",
]

REQUIRED_TVM = "0.27.0.post1"
"""The apache-tvm release this backend is written against (its Relax ONNX frontend and MetaSchedule API)."""

REQUIRED_FFI = "0.1.14.post1"
"""The apache-tvm-ffi release that works: 0.1.15.post1/post2 segfault in ``tvm::ffi::ToJSONGraph``
(``tvm.ir.save_json``), which MetaSchedule's JSON database and workers call; apache-tvm 0.27 only
asks for ``>=0.1.14.post0``."""

_STANDARD_DOMAINS = ("", "ai.onnx")

CPU_CACHE_FILE = "modelsql/llvm_cpu.json"
"""Under ``$XDG_CACHE_HOME`` (by default ``~/.cache``): LLVM's name of this machine's CPU by CPU fingerprint."""


def _version(dist: str) -> Optional[str]:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=1)
def unavailable_reason() -> Optional[str]:
    """None when this backend can be used, else one sentence saying why not.

    Checks the installed distributions (:func:`install_reason`), then that ``tvm.relax`` imports. Cached: the
    answer does not change within a process.
    """
    reason = install_reason()
    if reason is not None:
        return reason
    tvm_version = _version("apache-tvm")
    try:
        load_tvm()
    except Exception as exc:  # a broken install raises anything (ImportError, OSError from dlopen)
        return f"Apache TVM {tvm_version} cannot be imported: {error_text(exc)}"
    return None


def install_reason() -> Optional[str]:
    """None when the distributions are installed (apache-tvm, apache-tvm-ffi == :data:`REQUIRED_FFI`), else
    one sentence saying why not; nothing is imported."""
    tvm_version, ffi_version = _version("apache-tvm"), _version("apache-tvm-ffi")
    if tvm_version is None or ffi_version is None:
        return "Apache TVM is not installed: install modelsql[tvm] (apache-tvm and apache-tvm-ffi)."
    if ffi_version != REQUIRED_FFI:
        return (f"apache-tvm-ffi {ffi_version} is installed but the TVM backend needs {REQUIRED_FFI} "
                "(0.1.15 crashes in tvm::ffi::ToJSONGraph): install modelsql[tvm].")
    return None


def load_tvm():
    """Import and return the ``tvm`` package, first setting this module's thread-pool defaults
    (``TVM_NUM_THREADS``, ``TVM_THREAD_POOL_SPIN_COUNT``) in the environment where unset."""
    os.environ.setdefault("TVM_NUM_THREADS", str(default_threads()))
    os.environ.setdefault("TVM_THREAD_POOL_SPIN_COUNT", "0")
    import tvm
    from tvm import relax  # noqa: F401 - loads the Relax VM and frontend registrations

    return tvm


def cpu_target(threads: int) -> dict:
    """The TVM target of this machine's CPU, as a JSON-able dict.

    Args:
        threads: cores MetaSchedule may schedule parallel loops for (``num-cores``).

    Returns:
        ``{"kind": "llvm", "mcpu": <this CPU, e.g. "znver3">, "num-cores": threads}``, where ``mcpu``
        is ``tvm.target.codegen.llvm_get_system_cpu()`` (``"native"`` gives a generic CPU: no AVX2).
    """
    tvm = load_tvm()
    mcpu = str(tvm.target.codegen.llvm_get_system_cpu())
    _remember_cpu(mcpu)
    return {"kind": "llvm", "mcpu": mcpu, "num-cores": int(threads)}


def remembered_cpu_target(threads: int) -> Optional[dict]:
    """:func:`cpu_target` without importing TVM, when a process of this user on a CPU like this one, with these
    TVM versions, imported TVM and asked it before; else None."""
    fingerprint = _cpu_fingerprint()
    if fingerprint is None:
        return None
    try:
        with open(_cpu_cache_path(), encoding="utf-8") as fh:
            mcpu = json.load(fh).get(fingerprint)
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(mcpu, str) or not mcpu:
        return None
    return {"kind": "llvm", "mcpu": mcpu, "num-cores": int(threads)}


def _cpu_cache_path() -> str:
    return os.path.join(cache_home(), CPU_CACHE_FILE)


@functools.lru_cache(maxsize=1)
def _cpu_fingerprint() -> Optional[str]:
    """What LLVM reads to name the CPU (vendor, family, model, stepping, feature flags; their ARM counterparts),
    the machine and the TVM versions, hashed; None where ``/proc/cpuinfo`` cannot be read."""
    import hashlib
    import platform

    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            first = fh.read().split("\n\n")[0]
    except OSError:
        return None
    fields = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in first.splitlines())}
    names = ("vendor_id", "cpu family", "model", "stepping", "flags", "CPU implementer", "CPU architecture",
             "CPU variant", "CPU part", "Features")
    v = versions()
    parts = [platform.machine(), v["tvm"] or "", v["tvm_ffi"] or "", *(fields.get(n, "") for n in names)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _remember_cpu(mcpu: str) -> None:
    """Add this machine's CPU name to the cache file (a cache: failing to write it changes nothing)."""
    fingerprint = _cpu_fingerprint()
    if fingerprint is None:
        return
    path = _cpu_cache_path()
    try:
        with open(path, encoding="utf-8") as fh:
            known = json.load(fh)
        known = known if isinstance(known, dict) else {}
    except (OSError, ValueError):
        known = {}
    if known.get(fingerprint) == mcpu:
        return
    known[fingerprint] = mcpu
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".llvm_cpu.", dir=os.path.dirname(path))
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(known, fh)
        os.replace(tmp, path)
    except OSError:
        pass


def cuda_unavailable_reason(ordinal: int = 0) -> Optional[str]:
    """None when TVM can run code on CUDA device ``ordinal``, else what is missing (one sentence).

    TVM's CUDA runtime (``tvm/lib/libtvm_runtime_cuda.so``, loaded when ``tvm`` is imported, silently
    skipped when it cannot be) needs the NVIDIA driver (``libcuda.so.1``) and ``libcudart.so.13``. When it
    is not loaded, this loads it once more (after ONNX Runtime's ``preload_dlls`` may have loaded the CUDA
    libraries of the pip wheels) to report the loader's error text.
    """
    tvm = load_tvm()
    if not tvm.runtime.enabled("cuda"):
        error = _load_cuda_runtime(tvm)
        if not tvm.runtime.enabled("cuda"):
            return f"TVM's CUDA runtime is not loaded (libtvm_runtime_cuda.so: {error or 'not registered'})"
    try:
        exists = bool(tvm.cuda(ordinal).exist)
    except Exception as exc:  # a driver/runtime mismatch raises from cudaGetDeviceCount
        return f"TVM cannot query CUDA device {ordinal}: {error_text(exc)}"
    return None if exists else f"TVM sees no CUDA device {ordinal}"


def _load_cuda_runtime(tvm) -> Optional[str]:
    """Load ``libtvm_runtime_cuda.so`` (its static initializers register the CUDA device API); the error text
    when the loader refuses it."""
    import ctypes

    path = os.path.join(os.path.dirname(tvm.__file__), "lib", "libtvm_runtime_cuda.so")
    if not os.path.exists(path):
        return "this apache-tvm has no CUDA runtime library"
    try:
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    except OSError as exc:
        return str(exc).strip().splitlines()[0][:300]
    return None


def cuda_target(ordinal: int = 0) -> dict:
    """The TVM target of CUDA device ``ordinal``, as a JSON-able dict.

    Returns:
        ``{"kind": "cuda", "arch": "sm_XY"}`` from the device's compute capability (``"sm_90"`` on an H100/H200);
        code built for it runs on any device of that architecture.

    Raises:
        NotSupportedError: ``device_not_available`` (:func:`cuda_unavailable_reason`).
    """
    reason = cuda_unavailable_reason(ordinal)
    if reason is not None:
        raise NotSupportedError(reason, code="device_not_available")
    tvm = load_tvm()
    return {"kind": "cuda", "arch": "sm_" + str(tvm.cuda(ordinal).compute_version).replace(".", "")}


def is_gpu_target(target: dict) -> bool:
    """Whether a target dict compiles for a GPU (``kind`` ``cuda``)."""
    return target.get("kind") == "cuda"


def target_key(target) -> str:
    """Canonical JSON of a target (a dict, or a ``tvm.target.Target``): sorted keys, no spaces.

    Two targets with the same key compile the same code; use it in cache keys of compiled libraries.
    """
    if not isinstance(target, dict):
        target = {k: (list(v) if isinstance(v, tuple) else v) for k, v in dict(target.export()).items()}
    return json.dumps(target, sort_keys=True, separators=(",", ":"))


def versions() -> dict:
    """``{"tvm": <apache-tvm version>, "tvm_ffi": <apache-tvm-ffi version>}`` (None for one not installed).

    A compiled library is only valid for the versions that built it.
    """
    return {"tvm": _version("apache-tvm"), "tvm_ffi": _version("apache-tvm-ffi")}


# ------------------------------------------------------------------------------------- compiling


def compile_onnx(model_bytes: bytes, *, target: dict, batch_size: Optional[int] = None) -> bytes:
    """Compile an ONNX model with TVM (untuned) into shared-library bytes.

    Args:
        model_bytes: a serialized, self-contained ONNX ModelProto.
        target: a TVM target as a dict (:func:`cpu_target`, or :func:`cuda_target`: built with Relax's CUDA
            pipeline and DLight's default GPU schedules, see the module docstring).
        batch_size: bind the leading (batch) dimension of every input to this many rows first
            (static shapes); None keeps a symbolic batch, so the library runs any number of rows.

    Returns:
        The bytes of ``VMExecutable.export_library(path)`` (a Linux ``.so``; weights embedded, and for CUDA
        the kernels' cubin or fatbin), for :func:`load_library`.

    Raises:
        DataError: the bytes are not an ONNX model (``"invalid_onnx"``).
        NotSupportedError: TVM cannot import or compile the model (``"tvm_import_failed"``; the
            message names the first ONNX operator it could not import, when it is known);
            ``batch_size`` disagrees with a fixed batch of the model (``"fixed_batch"``).
    """
    model = parse_onnx(model_bytes)
    if batch_size is not None:
        model = bind_batch(model, batch_size)
    mod = import_onnx(model)
    tvm = load_tvm()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            executable = _build(tvm, mod, tvm.target.Target(target), is_gpu_target(target))
    except Exception as exc:  # TVM raises TVMError subclasses and Python built-ins alike
        raise NotSupportedError(f"TVM cannot compile the model for {target_key(target)}: {error_text(exc)}",
                                code="tvm_import_failed") from exc
    return export_library(executable)


def _build(tvm, mod, target, gpu: bool):
    """``tvm.compile``; for a GPU with Relax's default pipeline of that target (DLight's default schedules),
    named here rather than left to ``relax.build``'s own fallback to the generic pipeline."""
    if not gpu:
        return tvm.compile(mod, target)
    from tvm import relax

    return tvm.compile(mod, target, relax_pipeline=relax.get_default_pipeline(target))


def import_onnx(model: onnx.ModelProto):
    """The Relax IRModule of ``model`` (``from_onnx`` then ``DecomposeOpsForInference``).

    Raises:
        NotSupportedError: ``"tvm_import_failed"``, naming the first operator TVM could not import:
            a node outside the standard ONNX domain (every ``ai.onnx.ml`` operator: the frontend
            ignores domains, apache/tvm #10950), an operator it has no converter for, or the node
            whose conversion raised (e.g. Reshape to a shape computed at run time, apache/tvm #20174).
    """
    for node in model.graph.node:
        if node.domain not in _STANDARD_DOMAINS:
            raise NotSupportedError(
                f"TVM cannot import operator {node.op_type} (domain {node.domain}{_named(node)}): "
                "its ONNX frontend only converts the standard ai.onnx domain.", code="tvm_import_failed")
    load_tvm()
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return relax.transform.DecomposeOpsForInference()(from_onnx(model))
    except Exception as exc:  # the frontend raises OpNotImplemented, ValueError, KeyError, TVMError ...
        raise NotSupportedError(_import_failure(model, exc), code="tvm_import_failed") from exc


def _import_failure(model: onnx.ModelProto, exc: BaseException) -> str:
    """A message naming the first operator the frontend failed on, found in the exception."""
    tvm = load_tvm()
    if isinstance(exc, tvm.error.OpNotImplemented):
        # "The following operators are not supported for frontend ONNX: A, B" (an unordered set)
        listed = {s.strip() for s in str(exc).split(":", 1)[-1].split(",")}
        first = next((n for n in model.graph.node if n.op_type in listed), None)
        if first is not None:
            return (f"TVM cannot import operator {first.op_type}{_named(first, ' (node ', ')')}: its ONNX frontend "
                    f"has no converter for it (unsupported: {', '.join(sorted(listed))}).")
    node = _failing_node(exc)
    if node is not None:
        return f"TVM cannot import operator {node.op_type}{_named(node, ' (node ', ')')}: {error_text(exc)}"
    return f"TVM cannot import the model: {error_text(exc)}"


def _named(node: onnx.NodeProto, before: str = ", node ", after: str = "") -> str:
    return f'{before}"{node.name}"{after}' if node.name else ""


def _failing_node(exc: BaseException):
    """The ONNX node the Relax frontend was converting when ``exc`` was raised, or None.

    ``ONNXGraphImporter._construct_nodes`` loops over ``graph.node`` with the current one in its
    local ``node``; the traceback keeps that frame.
    """
    for frame, _ in traceback.walk_tb(exc.__traceback__):
        if frame.f_code.co_name == "_construct_nodes" and isinstance(frame.f_locals.get("node"), onnx.NodeProto):
            return frame.f_locals["node"]
    return None


def bind_batch(model: onnx.ModelProto, batch_size: int) -> onnx.ModelProto:
    """A copy of ``model`` whose graph inputs have ``batch_size`` as their leading dimension.

    Inputs that are initializers, and scalar inputs, are left alone.

    Raises:
        NotSupportedError: an input already has a fixed leading dimension other than ``batch_size``
            (code ``"fixed_batch"``).
    """
    if batch_size < 1:
        raise NotSupportedError(f"batch_size must be at least 1, not {batch_size}", code="fixed_batch")
    bound = onnx.ModelProto()
    bound.CopyFrom(model)
    initializers = {i.name for i in bound.graph.initializer}
    for value in bound.graph.input:
        dims = value.type.tensor_type.shape.dim
        if value.name in initializers or not value.type.HasField("tensor_type") or len(dims) == 0:
            continue
        if dims[0].HasField("dim_value") and dims[0].dim_value not in (0, batch_size):
            raise NotSupportedError(f"input {value.name!r} has a fixed batch of {dims[0].dim_value} rows; it cannot "
                                    f"be compiled for {batch_size}", code="fixed_batch")
        dims[0].dim_value = batch_size  # clears dim_param (a oneof)
    return bound


def export_library(executable) -> bytes:
    """The bytes of ``executable.export_library(<tmp>/model.so)`` (TVM links it with the system C++ compiler).

    Raises:
        NotSupportedError: linking failed, e.g. no C++ compiler (code ``"tvm_import_failed"``).
    """
    with tempfile.TemporaryDirectory(prefix="modelsql-tvm-") as folder:
        path = os.path.join(folder, "model.so")
        try:
            executable.export_library(path)
        except Exception as exc:
            raise NotSupportedError(f"TVM cannot link the compiled model: {error_text(exc)}",
                                    code="tvm_import_failed") from exc
        with open(path, "rb") as f:
            return f.read()


def parse_onnx(model_bytes: bytes) -> onnx.ModelProto:
    """The ONNX ModelProto of ``model_bytes``.

    Raises:
        DataError: not an ONNX model (code ``"invalid_onnx"``).
    """
    try:
        return onnx.load_model_from_string(model_bytes)
    except Exception as exc:
        raise DataError(f"not an ONNX model: {error_text(exc)}", code="invalid_onnx") from exc


# ------------------------------------------------------------------------------------- signature


@dataclass(frozen=True)
class TensorSpec:
    """One input or output of a compiled model.

    Attributes:
        name: the ONNX name.
        dtype: NumPy dtype name (``"float32"``, ``"int64"``, ``"bool"``).
        shape: dims: an int, or a str / None for a symbolic dimension; None when the rank is unknown.
    """

    name: str
    dtype: str
    shape: Optional[tuple]


@dataclass(frozen=True)
class Signature:
    """The inputs (in call order) and outputs (in return order) of a compiled model.

    A Relax ``main`` takes the ONNX graph inputs (initializers excluded) positionally and returns the
    graph outputs in order, so the ONNX model that was compiled gives the signature
    (:meth:`from_onnx`); :meth:`to_json` / :meth:`from_json` keep it next to a cached library.
    """

    inputs: tuple
    outputs: tuple

    @staticmethod
    def from_onnx(model_bytes: Union[bytes, onnx.ModelProto], batch_size: Optional[int] = None) -> "Signature":
        """The signature of an ONNX model, its inputs' batch bound to ``batch_size`` as :func:`bind_batch` does.

        Raises:
            DataError: not an ONNX model (``"invalid_onnx"``).
            NotSupportedError: a tensor type with no NumPy counterpart (strings, sequences, maps:
                ``"unsupported_type"``); a fixed batch other than ``batch_size`` (``"fixed_batch"``).
        """
        model = parse_onnx(model_bytes) if isinstance(model_bytes, (bytes, bytearray)) else model_bytes
        if batch_size is not None:
            model = bind_batch(model, batch_size)
        initializers = {i.name for i in model.graph.initializer}
        inputs = tuple(_spec(v) for v in model.graph.input if v.name not in initializers)
        return Signature(inputs, tuple(_spec(v) for v in model.graph.output))

    def to_json(self) -> str:
        """The signature as JSON text."""
        return json.dumps({side: [[s.name, s.dtype, None if s.shape is None else list(s.shape)]
                                  for s in getattr(self, side)] for side in ("inputs", "outputs")})

    @staticmethod
    def from_json(text: str) -> "Signature":
        """The signature :meth:`to_json` wrote."""
        data = json.loads(text)
        return Signature(*(tuple(TensorSpec(n, d, None if s is None else tuple(s)) for n, d, s in data[side])
                           for side in ("inputs", "outputs")))


def _spec(value: onnx.ValueInfoProto) -> TensorSpec:
    if not value.type.HasField("tensor_type"):
        raise NotSupportedError(f"{value.name!r} is not a tensor; the TVM backend runs tensor models only",
                                code="unsupported_type")
    tensor = value.type.tensor_type
    try:
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type))
    except Exception as exc:
        raise NotSupportedError(f"{value.name!r} has ONNX element type {tensor.elem_type}, which the TVM backend "
                                "cannot feed", code="unsupported_type") from exc
    if dtype.kind not in "biuf":
        raise NotSupportedError(f"{value.name!r} has type {dtype}, which the TVM backend cannot feed",
                                code="unsupported_type")
    shape = None
    if tensor.HasField("shape"):
        shape = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tensor.shape.dim)
    return TensorSpec(value.name, dtype.name, shape)


# ------------------------------------------------------------------------------------- running


class TvmModel:
    """A TVM-compiled model, implementing :class:`~modelsql.operators.backends.BackendModel`.

    Args:
        module: the loaded library (``tvm.runtime.load_module``, or a ``VMExecutable``).
        signature: its inputs and outputs (:meth:`Signature.from_onnx` of the compiled model).
        label: ``"model m version v"``, used in error messages.
        intra_op_threads: threads of the calling thread's TVM pool during :meth:`run` (default: all
            cores; capped by the pool's size, see the module docstring).
        device: ``"cpu"``, or ``"cuda:N"`` for a library compiled for CUDA (:func:`cuda_target`): each run
            copies its inputs to that GPU and its outputs back.

    A Relax VM keeps its registers and frames in the object, so it is not safe to call from two
    threads at once: each calling thread (DuckDB runs PREDICT on several) gets its own VM over the
    one loaded library (constants shared).
    """

    def __init__(self, module, signature: Signature, label: str, *, intra_op_threads: Optional[int] = None,
                 device: str = "cpu") -> None:
        self.module = module
        self.device = device
        self.signature = signature
        self.label = label
        self.input_names = [s.name for s in signature.inputs]
        self.input_shapes = {s.name: list(s.shape) if s.shape is not None else None for s in signature.inputs}
        self.input_dtypes = {s.name: np.dtype(s.dtype) for s in signature.inputs}
        self.output_names = [s.name for s in signature.outputs]
        self.intra_op_threads = int(intra_op_threads or default_threads())
        fixed = {s.shape[0] for s in signature.inputs if s.shape and isinstance(s.shape[0], int) and s.shape[0] > 0}
        self.fixed_batch: Optional[int] = min(fixed) if fixed else None
        self._local = threading.local()
        self._vm()  # fails now, not on the first row, when the library does not match the signature

    def _vm(self):
        vm = getattr(self._local, "vm", None)
        if vm is None:
            tvm = load_tvm()
            from tvm import relax

            try:
                vm = relax.VirtualMachine(self.module, _tvm_device(tvm, self.device))
                arity = vm._get_function_arity("main")
            except Exception as exc:
                raise DataError(f"TVM cannot load {self.label}: {error_text(exc)}", code="invalid_library") from exc
            if arity != len(self.input_names):
                raise DataError(f"TVM library of {self.label} takes {arity} inputs but its signature names "
                                f"{len(self.input_names)}", code="invalid_library")
            self._local.vm = vm
        if getattr(self._local, "threads", None) != self.intra_op_threads:
            load_tvm().get_global_func("runtime.config_threadpool")(0, self.intra_op_threads)
            self._local.threads = self.intra_op_threads
        return vm

    def run(self, feeds: dict[str, np.ndarray], outputs: Optional[Sequence[str]] = None) -> list[np.ndarray]:
        """Run the model over ``n`` rows.

        Args:
            feeds: input name -> array whose first axis is the row axis (``n`` rows each), of exactly the
                input's dtype (no casting) and fixed dims.
            outputs: output names to return (default: all); every output is computed regardless.

        Returns:
            One array per output, each with ``n`` rows on axis 0. A model with a fixed batch ``b`` runs
            in slices of ``b`` rows, the last one padded by repeating its final row, the padding dropped
            (as :class:`~.onnxruntime.OrtModel` does).

        Raises:
            DataError: ``"model_run_failed"``, naming the model: a missing input, a wrong dtype or shape,
                an unknown output name, or TVM failing on the values.
        """
        names = list(outputs) if outputs is not None else self.output_names
        index = self._output_index(names)
        arrays = self._checked_feeds(feeds)
        n = len(arrays[0]) if arrays and arrays[0].ndim else None
        b = self.fixed_batch
        if b is None or n is None or n == b:
            return [self._call(arrays)[i] for i in index]
        if n == 0:
            return [self._empty(i) for i in index]
        parts = []
        for start in range(0, n, b):
            stop = min(start + b, n)
            chunk = [_pad(a[start:stop], b) for a in arrays]
            outs = self._call(chunk)
            parts.append([outs[i][: stop - start] for i in index])
        return [np.concatenate([p[j] for p in parts], axis=0) for j in range(len(index))]

    def _output_index(self, names: Sequence[str]) -> list[int]:
        unknown = [n for n in names if n not in self.output_names]
        if unknown:
            raise DataError(f"{self.label} has no output {unknown[0]!r} (outputs: {', '.join(self.output_names)})",
                            code="model_run_failed")
        return [self.output_names.index(n) for n in names]

    def _checked_feeds(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """The feeds in input order, checked against the signature (TVM's own checks abort with C++ text)."""
        arrays, rows = [], set()
        for spec in self.signature.inputs:
            if spec.name not in feeds:
                raise DataError(f"{self.label} needs input {spec.name!r}", code="model_run_failed")
            value = np.asarray(feeds[spec.name])
            if value.dtype != np.dtype(spec.dtype):
                raise DataError(f"{self.label}: input {spec.name!r} must be {spec.dtype}, not {value.dtype}",
                                code="model_run_failed")
            if spec.shape is not None and not _shape_fits(value.shape, spec.shape, self.fixed_batch):
                raise DataError(f"{self.label}: input {spec.name!r} has shape {list(value.shape)}, expected "
                                f"{_shape_text(spec.shape)}", code="model_run_failed")
            if value.ndim:
                rows.add(value.shape[0])
            arrays.append(np.ascontiguousarray(value))
        if len(rows) > 1:
            raise DataError(f"{self.label}: inputs have different row counts {sorted(rows)}", code="model_run_failed")
        return arrays

    def _call(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        tvm = load_tvm()
        vm = self._vm()
        try:
            dev = _tvm_device(tvm, self.device)
            result = vm["main"](*[tvm.runtime.tensor(a, dev) for a in arrays])
            outs = [result] if isinstance(result, tvm.runtime.Tensor) else list(result)
            outs = [o.numpy() for o in outs]
        except Exception as exc:  # TVM raises ValueError / RuntimeError / TVMError with C++ check text
            raise DataError(f"TVM failed running {self.label}: {error_text(exc)}", code="model_run_failed") from exc
        if len(outs) != len(self.output_names):
            raise DataError(f"TVM library of {self.label} returned {len(outs)} outputs, its signature names "
                            f"{len(self.output_names)}", code="model_run_failed")
        return outs

    def _empty(self, i: int) -> np.ndarray:
        spec = self.signature.outputs[i]
        dims = [d if isinstance(d, int) else 1 for d in (spec.shape or (0,))] or [0]
        dims[0] = 0
        return np.zeros(dims, dtype=spec.dtype)


def _tvm_device(tvm, device: str):
    """The TVM device of ``"cpu"`` or ``"cuda:N"``."""
    if device.startswith("cuda"):
        return tvm.cuda(int(device.partition(":")[2] or 0))
    return tvm.cpu()


def _shape_fits(shape: tuple, declared: tuple, fixed_batch: Optional[int]) -> bool:
    if len(shape) != len(declared):
        return False
    for i, (got, want) in enumerate(zip(shape, declared)):
        if i == 0 and fixed_batch is not None:
            continue  # any row count: run() slices and pads to the fixed batch
        if isinstance(want, int) and want > 0 and got != want:
            return False
    return True


def _shape_text(shape: tuple) -> str:
    return "[" + ", ".join(str(d) if d is not None else "?" for d in shape) + "]"


def _pad(piece: np.ndarray, b: int) -> np.ndarray:
    if len(piece) == b:
        return piece
    return np.ascontiguousarray(np.concatenate([piece, np.repeat(piece[-1:], b - len(piece), axis=0)], axis=0))


def load_library(data_or_path: Union[bytes, str, os.PathLike], signature: Signature, label: str, *,
                 intra_op_threads: Optional[int] = None, device: str = "cpu") -> TvmModel:
    """Load a library written by :func:`compile_onnx` / :func:`.tvm_tune.tune` as a :class:`TvmModel`.

    Args:
        data_or_path: the library's bytes, or the path of a ``.so`` file holding them.
        signature: the compiled model's inputs and outputs (:meth:`Signature.from_onnx`).
        label: ``"model m version v"``, used in error messages.
        intra_op_threads, device: see :class:`TvmModel` (``device`` ``"cuda:N"`` for a CUDA library).

    Bytes are written to a temporary file, loaded (``tvm.runtime.load_module``, a dlopen) and the
    file removed: the loaded library stays mapped.

    Raises:
        DataError: the file is not a TVM library, or it does not match ``signature`` (``"invalid_library"``).
    """
    tvm = load_tvm()
    try:
        if isinstance(data_or_path, (bytes, bytearray)):
            with tempfile.TemporaryDirectory(prefix="modelsql-tvm-") as folder:
                path = os.path.join(folder, "model.so")
                with open(path, "wb") as f:
                    f.write(data_or_path)
                module = tvm.runtime.load_module(path)
        else:
            module = tvm.runtime.load_module(os.fspath(data_or_path))
    except Exception as exc:
        raise DataError(f"TVM cannot load the library of {label}: {error_text(exc)}", code="invalid_library") from exc
    return TvmModel(module, signature, label, intra_op_threads=intra_op_threads, device=device)


def error_text(exc: BaseException) -> str:
    """The first line of an exception's message (at most 500 characters): TVM's carry C++ context after it."""
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:500]
