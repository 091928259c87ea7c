"""Latency traces of an ONNX Runtime session: the measurements PROFILE records and a learned cost model
(Mantis: Chun et al., "Mantis: Predicting System Performance through Program Analysis and Modeling",
2010) trains on.

A configuration is (threads, batch size); for each, the session runs ``repeat`` times on synthetic
inputs after ``warmup`` untimed runs, and the trace keeps every run's wall time (a distribution, not
one number: on a shared machine two measurements of one point often differ by more than 10%). Runs
of the configurations are interleaved, round by round, so drift in the machine's load falls on all
of them alike. Sessions run with spin-waiting off, as PREDICT's do.
"""

from __future__ import annotations

import collections
import json
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np
import onnxruntime as ort

from modelsql.errors import NotSupportedError, ProgrammingError
from modelsql.operators.backends.cuda import CudaModel
from modelsql.operators.backends.onnxruntime import numpy_dtype

__all__ = ["LatencyTrace", "OperatorTime", "synthetic_feeds", "profile_latency", "operator_times"]


@dataclass(frozen=True)
class LatencyTrace:
    """The timed runs of one configuration.

    Attributes:
        backend: ``"onnxruntime"``.
        threads: the session's intra-op threads.
        batch_size: rows per run.
        seconds: wall time of each timed run, in seconds, in the order run.
    """

    backend: str
    threads: int
    batch_size: int
    seconds: tuple[float, ...]
    device: str = "cpu"
    """``"cpu"`` or ``"cuda:N"``."""

    def quantile(self, q: float) -> float:
        """The ``q`` quantile (0..1) of the run times, in seconds (nearest rank)."""
        ordered = sorted(self.seconds)
        return ordered[min(len(ordered) - 1, max(0, int(round(q * (len(ordered) - 1)))))]

    @property
    def median(self) -> float:
        """Median run time in seconds."""
        return statistics.median(self.seconds)

    @property
    def rows_per_second(self) -> float:
        """Rows per second at the median run time."""
        return self.batch_size / self.median if self.median > 0 else float("inf")


@dataclass(frozen=True)
class OperatorTime:
    """One operator type's kernel time in a profiled configuration.

    Attributes:
        op_type: the operator type in ONNX Runtime's optimised graph (a fused node carries the type it
            became, e.g. ``FusedConv``; an inserted one such as ``ReorderOutput`` appears too).
        provider: the execution provider that ran it.
        nodes: distinct nodes of that type that ran.
        runs: profiled runs.
        median_us: median over the runs of the type's summed kernel time in one run, microseconds.
    """

    op_type: str
    provider: str
    nodes: int
    runs: int
    median_us: float


def synthetic_feeds(session: ort.InferenceSession, batch_size: int, seed: int = 0,
                    dims: Optional[Mapping[str, int]] = None) -> dict[str, np.ndarray]:
    """Inputs for ``batch_size`` rows: standard normal floats, zeros for integers and booleans, empty strings.

    The first dimension of each input is the batch when it is symbolic; any other symbolic dimension must be
    given in ``dims`` (name -> size).

    Raises:
        NotSupportedError: ``symbolic_dimension`` naming the input and dimension left unsized; ``fixed_batch``
            for a fixed first dimension other than ``batch_size``;
            ``unsupported_type`` for an input type with no NumPy counterpart.
    """
    rng = np.random.default_rng(seed)
    feeds = {}
    for spec in session.get_inputs():
        shape = []
        for i, dim in enumerate(spec.shape):
            if isinstance(dim, int) and dim >= 0:
                if i == 0 and dim != batch_size:
                    raise NotSupportedError(f"input {spec.name!r} has a fixed batch of {dim} rows; it cannot be "
                                            f"profiled at {batch_size}", code="fixed_batch")
                shape.append(dim)
            elif i == 0:
                shape.append(batch_size)
            elif dims and isinstance(dim, str) and dim in dims:
                shape.append(int(dims[dim]))
            else:
                raise NotSupportedError(f"input {spec.name!r}: dimension {i} ({dim!r}) is symbolic; give its size to "
                                        "profile at a fixed shape", code="symbolic_dimension")
        dtype = numpy_dtype(spec.type)
        if dtype is None:
            raise NotSupportedError(f"input {spec.name!r} has type {spec.type}, which cannot be profiled",
                                    code="unsupported_type")
        if np.issubdtype(dtype, np.floating):
            feeds[spec.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype is np.object_:
            feeds[spec.name] = np.full(shape, "", dtype=object)
        else:
            feeds[spec.name] = np.zeros(shape, dtype=dtype)
    return feeds


def _session(model: bytes, threads: int) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])


def profile_latency(model: bytes, *, batch_sizes: Sequence[int], threads: Sequence[int], repeat: int,
                    warmup: int = 2, seed: int = 0, dims: Optional[Mapping[str, int]] = None,
                    others: Sequence[tuple[str, int, object]] = (), onnxruntime: bool = True,
                    cuda: Sequence[str] = (), progress: Optional[Callable[[int], None]] = None) -> list[LatencyTrace]:
    """One :class:`LatencyTrace` per (backend, threads, batch size) of ``model`` (serialized ONNX): ONNX Runtime
    for every thread count, then each of ``others``, all on the same inputs and interleaved.

    Args:
        others: ``(backend, threads, loaded model)`` of other backends' builds of the same model (a
            :class:`~modelsql.operators.backends.BackendModel`, e.g. a checked TVM artifact), timed alike.
        onnxruntime: time ONNX Runtime too (its session always gives the inputs' types and shapes).
        cuda: CUDA devices (``"cuda:N"``) to time ONNX Runtime on as well, each as PREDICT runs there: a
            :class:`~modelsql.operators.backends.cuda.CudaModel` (one thread, CUDA graphs captured per batch
            bucket, outputs copied back to the host).
        progress: called as ``progress(1)`` after each run, warm-up runs included (``len(batch_sizes)`` times
            ``warmup + repeat`` runs per runner: each thread count of each backend, each CUDA device), or None.

    Raises:
        ProgrammingError: ``invalid_option`` for an empty or non-positive batch size, thread count or repeat.
        NotSupportedError: as :func:`synthetic_feeds`.
    """
    for what, values in (("batch_sizes", batch_sizes), ("threads", threads), ("repeat", [repeat])):
        if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values):
            raise ProgrammingError(f"profile option {what} must be positive integers, got {values!r}",
                                   code="invalid_option")
    sessions = [("onnxruntime", t, _session(model, t)) for t in threads]
    feeds = {b: synthetic_feeds(sessions[0][2], b, seed, dims) for b in batch_sizes}
    runners: list[tuple[str, int, Any, str]] = [(b, t, r, "cpu") for b, t, r in (sessions if onnxruntime else [])]
    runners += [(backend, t, _Runner(m), "cpu") for backend, t, m in others]
    runners += [("onnxruntime", 1, _Runner(CudaModel(model, "the profiled model", d)), d) for d in cuda]
    counted = progress or (lambda n: None)
    configs: list[tuple[str, int, int, Any, dict[str, np.ndarray], list[float], str]] = []
    for backend, t, runner, device in runners:
        for b in batch_sizes:
            for _ in range(warmup):
                runner.run(None, feeds[b])
                counted(1)
            configs.append((backend, t, b, runner, feeds[b], [], device))
    for _ in range(repeat):  # interleaved: each round times every configuration once
        for _, _, _, runner, batch, times, _ in configs:
            start = time.perf_counter()
            runner.run(None, batch)
            times.append(time.perf_counter() - start)
            counted(1)
    return [LatencyTrace(backend, t, b, tuple(times), device) for backend, t, b, _, _, times, device in configs]


class _Runner:
    """A BackendModel called as an ONNX Runtime session is (``run(None, feeds)``)."""

    def __init__(self, model) -> None:
        self.model = model

    def run(self, outputs, feeds):
        return self.model.run(feeds)


def operator_times(model: bytes, *, threads: int, batch_size: int, runs: int = 5, seed: int = 0,
                   dims: Optional[Mapping[str, int]] = None) -> list[OperatorTime]:
    """Per operator type, the kernel time ONNX Runtime's profiler reports for ``model`` at ``batch_size`` rows.

    A separate session with profiling on (``SessionOptions.enable_profiling``; its Chrome-trace events of
    category ``Node``, named ``<node>_kernel_time``, carry ``dur`` in microseconds and ``args.op_name``)
    runs one untimed warm-up and ``runs`` profiled runs; profiling slows runs, so these are never the
    latency trace's runs. Sorted by time, largest first.

    Raises:
        NotSupportedError: as :func:`synthetic_feeds`.
    """
    with tempfile.TemporaryDirectory(prefix="modelsql-profile-") as tmp:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        opts.enable_profiling = True
        opts.profile_file_prefix = os.path.join(tmp, "ort")
        session = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
        feeds = synthetic_feeds(session, batch_size, seed, dims)
        for _ in range(runs + 1):
            session.run(None, feeds)
        with open(session.end_profiling()) as f:
            events = json.load(f)
    return _per_operator(events, runs)


def _per_operator(events: list, runs: int) -> list[OperatorTime]:
    """Sum each run's kernel events by (type, provider), skipping the warm-up run (the first ``model_run``)."""
    starts = sorted(e["ts"] for e in events if e.get("cat") == "Session" and e.get("name") == "model_run")
    timed = starts[-runs:] if runs else []
    per_run: dict = collections.defaultdict(lambda: [0.0] * len(timed))
    nodes: dict = collections.defaultdict(set)
    for e in events:
        if e.get("cat") != "Node" or not e.get("name", "").endswith("_kernel_time") or not timed:
            continue
        run = sum(1 for t in timed if t <= e["ts"]) - 1
        if run < 0:
            continue  # the warm-up run
        key = (e["args"].get("op_name", "?"), e["args"].get("provider", "?"))
        per_run[key][run] += float(e["dur"])
        nodes[key].add(e["name"])
    out = [OperatorTime(k[0], k[1], len(nodes[k]), len(timed), statistics.median(v)) for k, v in per_run.items()]
    return sorted(out, key=lambda o: -o.median_us)
