"""ONNX Runtime backend: session creation, caching and batched runs.

Only this module (and its siblings in ``operators/backends``) imports
onnxruntime. Sessions are cached in :data:`modelsql.operators.backends.SESSIONS`, keyed by
the artifact's digest, backend, device and options, so a model is parsed and
optimized once per process, however many queries use it.

Threading: a PREDICT runs inside DuckDB's worker threads, several of which may
call :meth:`OrtModel.run` at once on different chunks. Each session therefore
gets ``intra_op_num_threads = max(1, cores // duckdb_threads)`` and no
spin-waiting (``session.intra_op.allow_spinning = 0``), so concurrent sessions
share the cores instead of burning them.

Shared weights (PRETZEL's Object Store, Lee et al., OSDI 2018): :class:`OrtModel`
also takes initializers as ``ort.OrtValue`` objects handed to
``SessionOptions.add_initializer`` (zero copy: the session computes on the caller's
buffer), with ``session.disable_prepacking`` (else MatMul/Gemm/Conv keep a packed
per-session copy) and one process-wide arena (:func:`register_shared_allocator`,
``session.use_env_allocators``). :mod:`.shared_weights` builds such sessions.
"""

from __future__ import annotations

import os
import threading
from dataclasses import replace
from typing import Callable, Mapping, Optional, Sequence

import numpy as np
import onnxruntime as ort

from modelsql.errors import DataError, InternalError, NotSupportedError
from modelsql.operators.backends import SESSIONS, devices

__all__ = ["OrtModel", "get_model", "clear_cache", "default_threads", "register_shared_allocator", "numpy_dtype", "first_line"]

_ORT_TO_NUMPY = {
    "tensor(float)": np.float32,
    "tensor(double)": np.float64,
    "tensor(float16)": np.float16,
    "tensor(int8)": np.int8,
    "tensor(int16)": np.int16,
    "tensor(int32)": np.int32,
    "tensor(int64)": np.int64,
    "tensor(uint8)": np.uint8,
    "tensor(uint16)": np.uint16,
    "tensor(uint32)": np.uint32,
    "tensor(uint64)": np.uint64,
    "tensor(bool)": np.bool_,
    "tensor(string)": np.object_,
}


def numpy_dtype(ort_type: str):
    """The NumPy dtype of an ONNX Runtime type string (``"tensor(float)"`` -> ``np.float32``), or None."""
    return _ORT_TO_NUMPY.get(ort_type)


def providers(device: str = devices.CPU) -> list:
    """Execution providers for a new session on ``device`` (:func:`.devices.ort_providers`): the CPU provider
    alone for ``"cpu"``, so a CPU plan computes the same digits with onnxruntime-gpu installed or not."""
    return devices.ort_providers(device)


def default_threads() -> int:
    """Number of CPU cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


_ALLOCATOR_LOCK = threading.Lock()
_ALLOCATOR_REGISTERED = False


def register_shared_allocator() -> None:
    """Register one process-wide CPU arena allocator with ONNX Runtime's environment (idempotent, thread safe).

    Sessions made with ``session.use_env_allocators = 1`` then all allocate from this one
    arena instead of each keeping its own (measured: 200 sessions with a 4 MiB output each
    retain 849 MiB in per-session arenas, 27 MiB in one shared arena). Uses
    ``ort.create_and_register_allocator(OrtMemoryInfo("Cpu", ORT_ARENA_ALLOCATOR, 0, DEFAULT),
    OrtArenaCfg(0, -1, -1, -1))`` (ORT's default arena settings).
    """
    global _ALLOCATOR_REGISTERED
    with _ALLOCATOR_LOCK:
        if _ALLOCATOR_REGISTERED:
            return
        info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
        ort.create_and_register_allocator(info, ort.OrtArenaCfg(0, -1, -1, -1))
        _ALLOCATOR_REGISTERED = True


class OrtModel:
    """One ONNX Runtime inference session for one model version.

    Args:
        model_bytes: a serialized ONNX ModelProto, self-contained except for the
            initializers given in ``initializers`` (see below).
        label: ``"model m version v"``, used in error messages.
        intra_op_threads: threads per run (default: all cores).
        spinning: let ORT's worker threads spin-wait between ops (fast for one
            session alone on a machine; harmful when sessions share cores).
        initializers: initializer name -> ``ort.OrtValue`` passed to
            ``SessionOptions.add_initializer``: the session uses the value's buffer
            as is (no copy), so the values are kept (:attr:`initializers`) as long as
            the session. Each name should be an initializer of the model, there an external-data
            reference to a file holding the same values: ONNX Runtime checks that the file exists,
            and graph optimizers that need the values (NCHWc reordering of Conv weights, constant
            folding) read them from it. (An embedded copy would still be parsed: a transient full
            copy per load.)
        disable_prepacking: set ``session.disable_prepacking = 1``, so MatMul/Gemm/Conv
            compute on the given weights instead of keeping a packed per-session copy.
            Runs get slower and round differently (another MLAS kernel): measured 1.3-1.6x slower
            at 1 and at 64 rows for a [2560, 2048] MatMul+Add (fused to Gemm); the planning notes
            measured no cost at 1 row and 24% at 64 for a plain MatMul.
        shared_allocator: allocate from the one process-wide arena
            (:func:`register_shared_allocator`, ``session.use_env_allocators = 1``).
        external_data_folder: folder that the external-data ``location`` entries of a model loaded
            from bytes resolve against (``session.model_external_initializers_file_folder_path``);
            without it ONNX Runtime resolves them against the current directory.
        disabled_optimizers: names of ONNX Runtime graph transformers to skip
            (``InferenceSession(..., disabled_optimizers=...)``, e.g. ``"NchwcTransformer"``).
        device: ``"cpu"`` or ``"cuda:N"`` (:mod:`.devices`): the execution providers of the session.

    Raises:
        DataError: ONNX Runtime rejects the model (code ``"invalid_onnx"``).
    """

    def __init__(
        self,
        model_bytes: bytes,
        label: str,
        *,
        intra_op_threads: Optional[int] = None,
        spinning: bool = False,
        initializers: Optional[Mapping[str, ort.OrtValue]] = None,
        disable_prepacking: bool = False,
        shared_allocator: bool = False,
        external_data_folder: Optional[str] = None,
        disabled_optimizers: Sequence[str] = (),
        device: str = devices.CPU,
    ) -> None:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = intra_op_threads or default_threads()
        self.intra_op_threads = opts.intra_op_num_threads
        """Threads one run uses."""
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
        opts.log_severity_level = 4  # failures are raised as DataError; ORT's own log line is noise
        shared = dict(initializers or {})
        _share_options(opts, shared, disable_prepacking, shared_allocator, external_data_folder)
        self.label = label
        self.device = device
        """Where the session computes: ``"cpu"`` or ``"cuda:N"``."""
        try:
            extra = {"disabled_optimizers": list(disabled_optimizers)} if disabled_optimizers else {}
            self.session = ort.InferenceSession(model_bytes, sess_options=opts, providers=providers(device), **extra)
        except Exception as exc:  # onnxruntime raises its own Fail/InvalidGraph classes
            raise DataError(f"ONNX Runtime cannot load {label}: {first_line(exc)}", code="invalid_onnx") from exc
        if device != devices.CPU and self.session.get_providers()[0] != "CUDAExecutionProvider":
            raise NotSupportedError(f"{label}: ONNX Runtime did not load its CUDA provider for {device} (its "
                                    f"providers: {self.session.get_providers()}); check the CUDA and cuDNN libraries "
                                    "onnxruntime-gpu needs.", code="device_not_available")
        self.initializers = shared
        """The ``add_initializer`` values, kept alive as long as the session computes on them
        (assigned after :attr:`session`, so when this object goes, the session goes first)."""
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.input_dtypes = {i.name: _ORT_TO_NUMPY.get(i.type, np.float32) for i in self.session.get_inputs()}
        self.input_shapes = {i.name: list(i.shape) for i in self.session.get_inputs()}
        self.output_names = [o.name for o in self.session.get_outputs()]
        # A fixed (integer) leading dimension means the model only accepts that many rows per run.
        fixed = {
            shape[0]
            for shape in self.input_shapes.values()
            if shape and isinstance(shape[0], int) and shape[0] > 0
        }
        self.fixed_batch: Optional[int] = min(fixed) if fixed else None

    def run(self, feeds: dict[str, np.ndarray], outputs: Optional[Sequence[str]] = None) -> list[np.ndarray]:
        """Run the model over ``n`` rows.

        Args:
            feeds: input name -> array whose first axis is the row axis (``n`` rows each).
            outputs: output names to compute (default: all).

        Returns:
            One array per output, each with ``n`` rows on axis 0.

        A model with a fixed batch dimension ``b`` is run in slices of ``b`` rows,
        the last slice padded by repeating its final row, and the padding dropped.

        Raises:
            DataError: ONNX Runtime fails on these values (code ``"inference_failed"``).
        """
        names = list(outputs) if outputs is not None else self.output_names
        n = len(next(iter(feeds.values()))) if feeds else 0
        b = self.fixed_batch
        try:
            if b is None or n == b:
                return self.session.run(names, feeds)
            parts: list[list[np.ndarray]] = []
            for start in range(0, n, b):
                stop = min(start + b, n)
                chunk = {}
                for k, v in feeds.items():
                    piece = v[start:stop]
                    if stop - start < b:
                        pad = np.repeat(piece[-1:], b - (stop - start), axis=0)
                        piece = np.concatenate([piece, pad], axis=0)
                    chunk[k] = piece
                outs = self.session.run(names, chunk)
                self._check_batch_rows(names, outs, b)
                parts.append([o[: stop - start] for o in outs])
            if not parts:
                return self._empty_outputs(names)
            return [np.concatenate([p[i] for p in parts], axis=0) for i in range(len(names))]
        except (DataError, InternalError):
            raise
        except Exception as exc:
            raise DataError(f"ONNX Runtime failed running {self.label}: {first_line(exc)}", code="inference_failed") from exc

    def _check_batch_rows(self, names: Sequence[str], outs: list, b: int) -> None:
        """Padding a fixed batch of ``b`` rows is only undone right when every output has ``b`` rows on axis 0.

        Raises:
            DataError: code ``"wrong_output_shape"``, naming the output.
        """
        for name, out in zip(names, outs):
            rows: Optional[int]
            if isinstance(out, list):
                rows = len(out)  # a sequence of maps: one per row
            else:
                rows = out.shape[0] if np.ndim(out) else None
            if rows != b:
                shape = list(np.shape(out)) if not isinstance(out, list) else [len(out)]
                raise DataError(
                    f'{self.label} has a fixed batch of {b} rows but returned output "{name}" of shape {shape}: '
                    "an output must have one row per input row, so PREDICT cannot split it back into rows.",
                    code="wrong_output_shape",
                )

    def _empty_outputs(self, names: Sequence[str]) -> list[np.ndarray]:
        out: list[np.ndarray] = []
        by_name = {o.name: o for o in self.session.get_outputs()}
        for name in names:
            o = by_name[name]
            dims = [d if isinstance(d, int) else 1 for d in (o.shape or [0])]
            dims[0] = 0 if dims else 0
            out.append(np.zeros(dims, dtype=_ORT_TO_NUMPY.get(o.type, np.float32)))
        return out


def _share_options(opts: ort.SessionOptions, initializers: Mapping[str, ort.OrtValue], disable_prepacking: bool,
                   shared_allocator: bool, external_data_folder: Optional[str]) -> None:
    """Apply :class:`OrtModel`'s weight-sharing arguments to ``opts``."""
    for name, value in initializers.items():
        opts.add_initializer(name, value)
    if disable_prepacking:
        opts.add_session_config_entry("session.disable_prepacking", "1")
    if shared_allocator:
        register_shared_allocator()
        opts.add_session_config_entry("session.use_env_allocators", "1")
    if external_data_folder is not None:
        opts.add_session_config_entry("session.model_external_initializers_file_folder_path", external_data_folder)


def first_line(exc: BaseException) -> str:
    """The first line of an ONNX Runtime error's text (at most 500 characters), for a PEP 249 error's message."""
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:500]


def get_model(key, loader: Callable[[], bytes], label: str, *, intra_op_threads: Optional[int] = None) -> OrtModel:
    """The cached session of ``key`` (a :class:`~modelsql.operators.backends.SessionKey` without the thread
    setting, which is added here), created from ``loader()`` bytes on a miss, on ``key.device``."""
    full = replace(key, options=tuple(sorted(key.options + (("intra_op_threads", intra_op_threads),))))
    model = SESSIONS.get(full, lambda: OrtModel(loader(), label, intra_op_threads=intra_op_threads, device=key.device))
    assert isinstance(model, OrtModel)  # what this key's entry was made as
    return model


def clear_cache() -> None:
    """Drop every cached session (used by tests)."""
    SESSIONS.clear()


def ort_version() -> str:
    """The installed onnxruntime version string."""
    return ort.__version__


