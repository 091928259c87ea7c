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

import statistics
import time
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import numpy as np
import onnxruntime as ort

from ...errors import NotSupportedError, ProgrammingError
from .onnxruntime import numpy_dtype

__all__ = ["LatencyTrace", "synthetic_feeds", "profile_latency"]


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
                    warmup: int = 2, seed: int = 0, dims: Optional[Mapping[str, int]] = None) -> list[LatencyTrace]:
    """One :class:`LatencyTrace` per (threads, batch size) of ``model`` (serialized ONNX), in that order.

    Raises:
        ProgrammingError: ``invalid_option`` for an empty or non-positive batch size, thread count or repeat.
        NotSupportedError: as :func:`synthetic_feeds`.
    """
    for what, values in (("batch_sizes", batch_sizes), ("threads", threads), ("repeat", [repeat])):
        if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values):
            raise ProgrammingError(f"profile option {what} must be positive integers, got {values!r}",
                                   code="invalid_option")
    configs = []
    for t in threads:
        session = _session(model, t)
        for b in batch_sizes:
            feeds = synthetic_feeds(session, b, seed, dims)
            for _ in range(warmup):
                session.run(None, feeds)
            configs.append((t, b, session, feeds, []))
    for _ in range(repeat):  # interleaved: each round times every configuration once
        for _, _, session, feeds, times in configs:
            start = time.perf_counter()
            session.run(None, feeds)
            times.append(time.perf_counter() - start)
    return [LatencyTrace("onnxruntime", t, b, tuple(times)) for t, b, _, _, times in configs]
