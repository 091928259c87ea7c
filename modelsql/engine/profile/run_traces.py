"""Latency traces of what really ran: the model runs of a query's PREDICTs (EXPLAIN ANALYZE, PROFILE ... ON)
and, sampled, of a server's (recorded when it stops), as rows of ``modelsql.traces`` for the cost model.

Each PREDICT function keeps its first :data:`~modelsql.operators.predict.RUN_SAMPLES` runs' rows and
wall time; a :class:`TraceSampler` keeps one in :data:`SAMPLE_EVERY` runs of each single-model stage a
server runs (the server's threads must not write the DuckDB file its owner's connection holds, so
``STOP SERVER`` writes them through the stopping session's connection). :func:`run_trace_rows` turns
``(rows, seconds)`` samples into one trace per rows-per-run seen at least :data:`MIN_RUNS` times.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import TYPE_CHECKING, Optional

import onnx

from modelsql.catalog.traces import TraceRow
from modelsql.operators.backends.profiling import LatencyTrace
from modelsql.engine.profile.fit_cost_model import trace_features

if TYPE_CHECKING:
    from modelsql.engine.session import Session

__all__ = ["SAMPLE_EVERY", "MAX_SAMPLES", "MIN_RUNS", "TraceSampler", "run_trace_rows", "record_query_traces",
           "record_served_traces"]

SAMPLE_EVERY = 8
"""One served run in this many is kept (per stage)."""
MAX_SAMPLES = 2048
"""Samples kept per stage (later ones are dropped)."""
MIN_RUNS = 3
"""Runs of one size a trace needs."""


class TraceSampler:
    """Sampled ``(rows, seconds)`` of the model runs of stages that run one model version."""

    def __init__(self) -> None:
        self._models: dict[str, object] = {}
        self._seen: dict[str, int] = defaultdict(int)
        self._samples: dict[str, list[tuple[int, float]]] = defaultdict(list)
        self._lock = threading.Lock()

    def watch(self, stage_name: str, mv) -> None:
        """Sample the runs of the stage ``stage_name``, which runs ``mv`` alone."""
        with self._lock:
            self._models[stage_name] = mv

    def observe(self, stage_name: str, rows: int, seconds: float) -> None:
        """One run of a stage (the server's step callback)."""
        if stage_name not in self._models:
            return
        with self._lock:
            self._seen[stage_name] += 1
            kept = self._samples[stage_name]
            if self._seen[stage_name] % SAMPLE_EVERY == 1 and len(kept) < MAX_SAMPLES:
                kept.append((rows, seconds))

    def take(self) -> list[tuple[object, list[tuple[int, float]]]]:
        """``(model version, samples)`` of every watched stage with samples; they are handed over (a second
        call gives only newer ones)."""
        with self._lock:
            taken = [(self._models[k], v) for k, v in self._samples.items() if v]
            self._samples.clear()
        return taken


def run_trace_rows(session: Session, mv, runs: list, backend: str, threads: int, source: str,
                   sizes: Optional[int] = 4, device: str = "cpu") -> list[TraceRow]:
    """One :class:`~modelsql.catalog.traces.TraceRow` per rows-per-run of ``runs`` (``(rows, seconds)``) seen at
    least :data:`MIN_RUNS` times, the most frequent first, at most ``sizes`` of them (None: all), each with its
    cost-model features (read from ``mv``'s stored graph: shapes are all they need), on ``device``."""
    by_rows: dict[int, list[float]] = defaultdict(list)
    for n, seconds in runs:
        by_rows[n].append(seconds)
    kept = sorted(((n, t) for n, t in by_rows.items() if len(t) >= MIN_RUNS), key=lambda kv: (-len(kv[1]), kv[0]))
    if not kept:
        return []
    graph = onnx.load_from_string(session.store.get(mv.graph_digest))
    out = []
    for n, times in kept[:sizes]:
        t = LatencyTrace(backend, threads, n, tuple(times), device)
        out.append(TraceRow(mv.name, mv.version, backend, device, threads, n, t.seconds, t.median, t.quantile(0.9),
                            t.quantile(0.99), source=source,
                            features=trace_features(graph, n, backend=backend, threads=threads,
                                                    device=device.split(":")[0])))
    return out


def _record(session: Session, rows: list[TraceRow]) -> list[int]:
    if not rows:
        return []
    with session.catalog.transaction():
        return session.catalog.traces.add(rows)


def _writable(session: Session) -> bool:
    return not (session.read_only or session.catalog.read_only or not session.catalog.present)


def record_query_traces(session: Session, plan, phys, source: str = "explain_analyze") -> list[int]:
    """Record, as latency traces of ``source``, the model runs a query's PREDICTs made: :func:`run_trace_rows`
    per scan, for single models only (a pipeline's or a merged family's runs are not one graph's). Joins the
    session's transaction; nothing is recorded on a read-only catalog. Returns the trace numbers."""
    if not _writable(session):
        return []
    rows = []
    for scan in plan.scans:
        op, choice = phys.operators.get(scan.id), phys.choices.get(scan.id)
        function = getattr(op, "function", None)
        threads = getattr(getattr(function, "model", None), "intra_op_threads", None)
        if function is None or threads is None or scan.model.kind in ("pipeline", "models") or not function.runs:
            continue
        rows += run_trace_rows(session, scan.model, function.runs, choice.backend if choice else "onnxruntime",
                               int(threads), source, device=choice.device if choice else "cpu")
    return _record(session, rows)


def record_served_traces(session: Session, sampler: TraceSampler, device: str = "cpu") -> list[int]:
    """Record what a stopping server sampled as traces of source ``serve`` (its stage sessions run one
    thread on ONNX Runtime, on the server's ``device``), in the session's transaction; nothing on a read-only
    catalog."""
    if not _writable(session):
        return []
    rows = []
    for mv, samples in sampler.take():
        rows += run_trace_rows(session, mv, samples, "onnxruntime", 1, "serve", sizes=None, device=device)
    return _record(session, rows)
