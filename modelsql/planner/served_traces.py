"""Latency traces from served requests, sampled: what the server's model runs really took, kept in memory
while it serves and recorded in ``modelsql.traces`` (source ``serve``) when it stops.

The server's threads must not write the DuckDB file its owner's connection holds, so a
:class:`TraceSampler` keeps one in :data:`SAMPLE_EVERY` runs of each single-model stage (rows and seconds,
at most :data:`MAX_SAMPLES` per stage) and ``STOP SERVER`` writes them through the stopping session's
connection: one trace per (model version, rows per run) seen at least 3 times.
"""

from __future__ import annotations

import threading
from collections import defaultdict

from ..catalog.traces import TraceRow
from ..operators.backends.profiling import LatencyTrace

__all__ = ["SAMPLE_EVERY", "MAX_SAMPLES", "TraceSampler"]

SAMPLE_EVERY = 8
"""One served run in this many is kept (per stage)."""
MAX_SAMPLES = 2048
"""Samples kept per stage (later ones are dropped)."""


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

    def rows(self, features_of) -> list[TraceRow]:
        """The traces to record (``features_of(mv, rows) -> features`` gives each its cost-model features);
        the samples are handed over (a second call gives only newer ones)."""
        with self._lock:
            taken = {k: (self._models[k], v) for k, v in self._samples.items() if v}
            self._samples.clear()
        out = []
        for mv, samples in taken.values():
            by_rows: dict[int, list[float]] = defaultdict(list)
            for n, s in samples:
                by_rows[n].append(s)
            for n, times in sorted(by_rows.items()):
                if len(times) < 3:
                    continue
                t = LatencyTrace("onnxruntime", 1, n, tuple(times))
                out.append(TraceRow(mv.name, mv.version, "onnxruntime", "cpu", 1, n, t.seconds, t.median,
                                    t.quantile(0.9), t.quantile(0.99), source="serve",
                                    features=features_of(mv, n)))
        return out
