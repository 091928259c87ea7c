"""ONNX Runtime on a CUDA device: IOBinding, batch buckets and captured CUDA graphs (Nimble's ahead-of-time scheduling).

Nimble (Kwon et al., "Nimble: Lightweight and Parallel GPU Task Scheduling for Deep Learning", NeurIPS 2020)
removes the framework's per-operator scheduling from every run by recording the GPU work of a model once, for
fixed shapes, and replaying the record. ONNX Runtime's CUDA provider does this with ``enable_cuda_graph``: the
first run of a session bound with IOBinding to fixed device buffers captures a CUDA graph, later runs replay it.

:class:`CudaModel` (the :class:`~modelsql.operators.backends.BackendModel` of a model on ``cuda:N``):

* **Buckets.** A run of ``n`` rows is cut into pieces of at most :data:`MAX_BUCKET` rows, and each piece is
  padded (its last row repeated; the padding's outputs dropped) to the next bucket of :data:`BUCKETS`
  (1, 2, 4, ..., 256), so a handful of shapes covers every batch.
* **Capture.** For each ``(bucket, the other dims of each input)`` a :class:`CapturedGraph` is made on first
  use: its own session with ``enable_cuda_graph``, device buffers for inputs and outputs, warm-up runs until
  it captures, and two checks: a replay equals the session's own uncaptured first run of the same rows
  (:data:`REPLAY_RTOL`: the same kernels), and a replay of new inputs is close to another session's run of them
  (:data:`REFERENCE_RTOL`: it reads the buffers' new values). A model that cannot be
  captured (a node on the CPU provider, a string or sequence output, a failed check) is run uncaptured with
  IOBinding, and the reason is kept (:attr:`CudaModel.capture_declined`) for EXPLAIN and ``SHOW SERVERS``.
* **Copies.** Inputs are copied into the graph's device buffers with ``OrtValue.update_inplace`` (one copy
  per input per run, no Python per row); outputs come back with one device-to-host copy each.

Thread safety: a captured graph owns fixed buffers, so its runs are serialised by a lock; distinct buckets
run concurrently. Uncaptured runs make their own IOBinding per call.
"""

from __future__ import annotations

import threading
from typing import Optional, Sequence

import numpy as np
import onnxruntime as ort

from modelsql.errors import DataError, InternalError
from modelsql.operators.backends import devices
from modelsql.operators.backends.onnxruntime import OrtModel, first_line

__all__ = ["CudaModel", "CapturedGraph", "BUCKETS", "MAX_BUCKET", "bucket_of", "REPLAY_RTOL"]

BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
"""Batch sizes captured as CUDA graphs (rows per replay); a run is padded to the next one."""
MAX_BUCKET = BUCKETS[-1]
"""The largest run; longer inputs are cut into runs of this many rows."""
MAX_GRAPHS = 24
"""The most captured graphs one model keeps (one per bucket and input shape); past it, runs are uncaptured."""
CAPTURE_RUNS = 3
"""Runs before the checked replay: ONNX Runtime's CUDA provider makes regular runs (to allocate) before the run
that captures."""
REPLAY_RTOL = 1e-6
"""How far (relative to the output's largest magnitude) a replay may differ from an uncaptured run of the same
session on the same rows before capture is declined: a replay launches the same kernels, so it is bit-equal."""
REFERENCE_RTOL = 1e-2
"""How far a replay of new inputs may differ from another session's run of them (that session may pick other
cuDNN algorithms, and TF32): loose, since it only proves the replay reads its input buffers' new values."""


def bucket_of(rows: int, buckets: Sequence[int] = BUCKETS) -> int:
    """The smallest bucket holding ``rows`` (``rows`` itself past the largest)."""
    for b in buckets:
        if rows <= b:
            return b
    return rows


class CapturedGraph:
    """One model captured as a CUDA graph for fixed input shapes, replayed on each run.

    Args:
        model_bytes: the serialized ONNX model.
        label: ``'model "m" version v'`` for messages.
        device: ``"cuda:N"``.
        shapes: input name -> the full input shape captured (bucket rows first).
        dtypes: input name -> NumPy dtype.
        output_names: the outputs bound (all of the model's).
        reference: an uncaptured :class:`OrtModel` of the same model on the same device, used once to size
            the output buffers and to check the replay.

    Raises:
        DataError: code ``"capture_declined"`` when ONNX Runtime refuses the capture or the replay differs.
    """

    def __init__(self, model_bytes: bytes, label: str, device: str, shapes: dict, dtypes: dict,
                 output_names: Sequence[str], reference: OrtModel) -> None:
        self.label = label
        self.rows = next(iter(shapes.values()))[0]
        ordinal = devices.cuda_ordinal(device)
        assert ordinal is not None, f"a CUDA graph needs a CUDA device, not {device!r}"
        first, second = _probe(shapes, dtypes, 0), _probe(shapes, dtypes, 1)
        names = list(output_names)
        expected = reference.run(second, names)
        if any(not isinstance(e, np.ndarray) or e.dtype == object for e in expected):
            raise DataError(f"{label}: an output is not a numeric tensor", code="capture_declined")
        try:
            own, replayed, again = self._capture(model_bytes, device, ordinal, first, second, names, expected)
        except Exception as exc:  # onnxruntime raises its own Fail / RuntimeException classes
            raise DataError(f"{label}: ONNX Runtime cannot capture it as a CUDA graph: {first_line(exc)}",
                            code="capture_declined") from exc
        _check_replay(label, names, own, again, REPLAY_RTOL, "an uncaptured run of the same session")
        _check_replay(label, names, expected, replayed, REFERENCE_RTOL, "another session's run of new inputs")
        self.lock = threading.Lock()
        self.replays = 0

    def _capture(self, model_bytes: bytes, device: str, ordinal: int, first: dict, second: dict, names: list,
                 expected: list) -> tuple[list, list, list]:
        """Bind device buffers holding ``first``, run until ONNX Runtime has captured the graph, and return the
        outputs of the first (uncaptured) run, of a replay after the buffers took ``second``, and of a replay
        after they took ``first`` again."""
        opts = ort.SessionOptions()
        opts.log_severity_level = 4
        self.session = ort.InferenceSession(model_bytes, sess_options=opts,
                                            providers=devices.ort_providers(device, cuda_graph=True))
        self.inputs = {k: ort.OrtValue.ortvalue_from_numpy(v, "cuda", ordinal) for k, v in first.items()}
        self.outputs = [ort.OrtValue.ortvalue_from_numpy(np.empty_like(e), "cuda", ordinal) for e in expected]
        self.binding = self.session.io_binding()
        for k, v in self.inputs.items():
            self.binding.bind_ortvalue_input(k, v)
        for name, v in zip(names, self.outputs):
            self.binding.bind_ortvalue_output(name, v)
        self.session.run_with_iobinding(self.binding)
        own = [o.numpy() for o in self.outputs]
        for _ in range(CAPTURE_RUNS - 1):  # ONNX Runtime's warm-up runs, then the capture
            self.session.run_with_iobinding(self.binding)
        outs = []
        for feeds in (second, first):  # a replay must read the buffers' new values
            for k, v in feeds.items():
                self.inputs[k].update_inplace(v)
            self.session.run_with_iobinding(self.binding)
            outs.append([o.numpy() for o in self.outputs])
        return own, outs[0], outs[1]

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Replay on ``feeds`` (each exactly the captured shape); a copy of each output, on the host."""
        with self.lock:
            for k, v in feeds.items():
                self.inputs[k].update_inplace(np.ascontiguousarray(v))
            self.session.run_with_iobinding(self.binding)
            self.replays += 1
            return [o.numpy() for o in self.outputs]


class CudaModel:
    """A model on a CUDA device, run through IOBinding and, for fixed shapes, captured CUDA graphs.

    Args:
        model_bytes: a self-contained serialized ONNX model.
        label: ``'model "m" version v'``.
        device: ``"cuda:N"`` (checked with :func:`.devices.require`).
        capture: capture CUDA graphs per bucket (``False``: IOBinding runs only).
        buckets: the batch sizes captured (:data:`BUCKETS`).

    Attributes (the :class:`~modelsql.operators.backends.BackendModel` protocol): ``input_names``,
    ``input_shapes``, ``input_dtypes``, ``output_names``, ``fixed_batch``, ``intra_op_threads``, ``device``.

    Raises:
        NotSupportedError: ``device_not_available``.
        DataError: ``invalid_onnx`` when ONNX Runtime's CUDA provider rejects the model.
    """

    def __init__(self, model_bytes: bytes, label: str, device: str, *, capture: bool = True,
                 buckets: Sequence[int] = BUCKETS) -> None:
        devices.require(device, label)
        self.base = OrtModel(model_bytes, label, device=device, intra_op_threads=1)
        self.model_bytes = model_bytes
        self.label = label
        self.device = device
        self.buckets = tuple(buckets)
        self.input_names = self.base.input_names
        self.input_shapes = self.base.input_shapes
        self.input_dtypes = self.base.input_dtypes
        self.output_names = self.base.output_names
        self.fixed_batch = self.base.fixed_batch
        self.intra_op_threads = 1
        self.graphs: dict[tuple, CapturedGraph] = {}
        self.capture_declined: Optional[str] = None if capture else "capture = false was asked for"
        self._lock = threading.Lock()

    def explain(self) -> str:
        """What is captured: ``"captured as CUDA graphs: 1 x [1,3,224,224], ..."`` or why not."""
        if self.capture_declined:
            return f"not captured ({self.capture_declined})"
        with self._lock:
            keys = sorted(self.graphs)
        shapes = ", ".join(f"{k[0]} row{'s' if k[0] > 1 else ''}" for k in keys)
        return f"CUDA graphs per batch bucket ({', '.join(map(str, self.buckets))}); captured: {shapes or 'none yet'}"

    def run(self, feeds: dict[str, np.ndarray], outputs: Optional[Sequence[str]] = None) -> list[np.ndarray]:
        """Run over ``n`` rows (each feed's axis 0); the named outputs (default all), ``n`` rows each.

        Raises:
            DataError: ``inference_failed`` when ONNX Runtime fails on these values.
        """
        names = list(outputs) if outputs is not None else self.output_names
        n = len(next(iter(feeds.values()))) if feeds else 0
        if n == 0 or self.fixed_batch is not None:  # a fixed batch is padded by the session itself
            return self.base.run(feeds, names)
        if self.capture_declined:
            return self._bound(feeds, names)
        step = self.buckets[-1]
        parts = [self._piece({k: v[i:i + step] for k, v in feeds.items()}, names) for i in range(0, n, step)]
        if len(parts) == 1:
            return parts[0]
        return [np.concatenate([p[j] for p in parts], axis=0) for j in range(len(names))]

    def _piece(self, feeds: dict[str, np.ndarray], names: list[str]) -> list[np.ndarray]:
        n = len(next(iter(feeds.values())))
        bucket = bucket_of(n, self.buckets)
        graph = self._graph(bucket, {k: v.shape[1:] for k, v in feeds.items()})
        if graph is None:
            return self._bound(feeds, names)
        padded = {k: _pad(v, bucket) for k, v in feeds.items()}
        try:
            out = graph.run(padded)
        except Exception as exc:  # noqa: BLE001 - onnxruntime's own classes
            raise DataError(f"ONNX Runtime failed replaying {self.label}: {first_line(exc)}",
                            code="inference_failed") from exc
        by_name = dict(zip(self.output_names, out))
        return [by_name[name][:n] for name in names]

    def _graph(self, bucket: int, tails: dict) -> Optional[CapturedGraph]:
        key = (bucket,) + tuple((k, tuple(tails[k])) for k in sorted(tails))
        with self._lock:
            graph = self.graphs.get(key)
            if graph is not None or self.capture_declined or len(self.graphs) >= MAX_GRAPHS:
                return graph
            shapes = {k: (bucket, *tails[k]) for k in self.input_names if k in tails}
            try:
                graph = CapturedGraph(self.model_bytes, self.label, self.device, shapes, self.input_dtypes,
                                      self.output_names, self.base)
            except DataError as exc:
                if exc.code not in ("capture_declined", "inference_failed"):
                    raise
                self.capture_declined = str(exc).split(": ", 1)[-1]
                return None
            self.graphs[key] = graph
            return graph

    def _bound(self, feeds: dict[str, np.ndarray], names: list[str]) -> list[np.ndarray]:
        """One uncaptured run with IOBinding: inputs copied from the host, outputs left on the device until
        copied back once each."""
        try:
            binding = self.base.session.io_binding()
            for k, v in feeds.items():
                binding.bind_cpu_input(k, np.ascontiguousarray(v))
            for name in names:
                binding.bind_output(name, "cuda", devices.cuda_ordinal(self.device))
            self.base.session.run_with_iobinding(binding)
            return binding.copy_outputs_to_cpu()
        except (DataError, InternalError):
            raise
        except Exception:  # noqa: BLE001 - a sequence output or another IOBinding limit: plain run
            return self.base.run(feeds, names)

    def replays(self) -> int:
        """Replays of captured graphs so far (EXPLAIN ANALYZE, SHOW SERVERS)."""
        with self._lock:
            return sum(g.replays for g in self.graphs.values())


def _probe(shapes: dict, dtypes: dict, seed: int) -> dict[str, np.ndarray]:
    """Inputs to check a capture with: standard normal floats, zeros of other types."""
    rng = np.random.default_rng(seed)
    return {k: rng.standard_normal(s).astype(dtypes[k]) if np.issubdtype(dtypes[k], np.floating)
            else np.zeros(s, dtype=dtypes[k]) for k, s in shapes.items()}


def _check_replay(label: str, names: Sequence[str], expected: list, got: list, rtol: float, what: str) -> None:
    """Raise ``capture_declined`` when a replayed output differs from ``expected`` by more than ``rtol`` times the
    output's largest magnitude (at least 1)."""
    for name, e, g in zip(names, expected, got):
        scale = max(float(np.max(np.abs(e))) if e.size else 0.0, 1.0)
        if e.shape != g.shape or (e.size and float(np.max(np.abs(e.astype(np.float64) - g))) > rtol * scale):
            raise DataError(f'{label}: the CUDA-graph replay of output "{name}" differs from {what}',
                            code="capture_declined")


def _pad(v: np.ndarray, rows: int) -> np.ndarray:
    """``v`` with its last row repeated up to ``rows`` rows (a bucket's padding)."""
    n = len(v)
    if n == rows:
        return v
    return np.concatenate([v, np.repeat(v[-1:], rows - n, axis=0)], axis=0)

