"""Latency traces (``modelsql.traces``; see :mod:`modelsql.catalog.schema`): what PROFILE measured, the
training data of a learned cost model. :class:`Traces` is reached as ``Catalog.traces``; it runs its SQL
through :meth:`Catalog.query` and never begins or commits."""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass

__all__ = ["Traces", "TraceRow"]


@dataclass(frozen=True)
class TraceRow:
    """One configuration's timed runs: ``seconds`` is every run's wall time, in seconds."""

    model: str
    version: int
    backend: str
    device: str
    threads: int
    batch_size: int
    seconds: tuple[float, ...]
    median_s: float
    p90_s: float
    p99_s: float
    source: str = "profile"


class Traces:
    """The traces of one :class:`~modelsql.catalog.Catalog`."""

    def __init__(self, catalog) -> None:
        self._catalog = catalog

    def add(self, rows: list[TraceRow]) -> list[int]:
        """Record ``rows``; returns their trace numbers."""
        self._catalog.check_writable()
        first = self._catalog.query("SELECT coalesce(max(trace), -1) + 1 FROM {s}.traces")[0][0]
        now = _dt.datetime.now(_dt.timezone.utc)
        for i, r in enumerate(rows):
            self._catalog.query("INSERT INTO {s}.traces VALUES (?, ?, ?, ?, ?, ?, ?, ?::DOUBLE[], ?, ?, ?, ?, ?)",
                                [first + i, r.model, r.version, r.backend, r.device, r.threads, r.batch_size,
                                 list(r.seconds), r.median_s, r.p90_s, r.p99_s, r.source, now])
        return list(range(first, first + len(rows)))
