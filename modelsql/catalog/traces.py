"""Latency traces (``modelsql.traces``, ``modelsql.trace_operators``; see :mod:`modelsql.catalog.schema`): what
PROFILE, EXPLAIN ANALYZE and the server measured, the training data of the learned cost model, and each fit
of that model (``modelsql.cost_models``). :class:`Traces` is reached as ``Catalog.traces``; it runs its SQL
through :meth:`Catalog.query` and never begins or commits."""

from __future__ import annotations

import datetime as _dt
import json
from dataclasses import dataclass, field
from typing import Optional

__all__ = ["Traces", "TraceRow", "OperatorRow", "CostModelFit"]


@dataclass(frozen=True)
class OperatorRow:
    """One operator type's kernel time in a trace (ONNX Runtime's profiler), microseconds per run."""

    op_type: str
    provider: str
    nodes: int
    runs: int
    median_us: float
    share: float


@dataclass(frozen=True)
class TraceRow:
    """One configuration's timed runs: ``seconds`` is every run's wall time, in seconds.

    ``features``: the configuration's cost-model features (name -> value), or None;
    ``operators``: per operator type, the profiler's kernel times (may be empty)."""

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
    features: Optional[dict] = None
    operators: tuple[OperatorRow, ...] = field(default=())


@dataclass(frozen=True)
class CostModelFit:
    """One fit of the cost model: catalog model ``modelsql_cost`` version ``version``."""

    version: int
    traces: int
    last_trace: int
    spec: str
    within_10pct: Optional[float]
    median_rel_error: Optional[float]
    noise_ceiling: Optional[float]


class Traces:
    """The traces of one :class:`~modelsql.catalog.Catalog`."""

    def __init__(self, catalog) -> None:
        self._catalog = catalog

    def add(self, rows: list[TraceRow]) -> list[int]:
        """Record ``rows`` (and their operator rows); returns their trace numbers."""
        self._catalog.check_writable()
        first = self.last_trace() + 1
        now = _dt.datetime.now(_dt.timezone.utc)
        for i, r in enumerate(rows):
            features = json.dumps(r.features, sort_keys=True) if r.features is not None else None
            self._catalog.query(
                "INSERT INTO {s}.traces (trace, model, version, backend, device, threads, batch_size, seconds, "
                "median_s, p90_s, p99_s, source, created_at, features) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?::DOUBLE[], ?, ?, ?, ?, ?, ?)",
                [first + i, r.model, r.version, r.backend, r.device, r.threads, r.batch_size, list(r.seconds),
                 r.median_s, r.p90_s, r.p99_s, r.source, now, features])
            for op in r.operators:
                self._catalog.query("INSERT INTO {s}.trace_operators VALUES (?, ?, ?, ?, ?, ?, ?)",
                                    [first + i, op.op_type, op.provider, op.nodes, op.runs, op.median_us, op.share])
        return list(range(first, first + len(rows)))

    def count(self) -> int:
        """Traces recorded."""
        return self._catalog.query("SELECT count(*) FROM {s}.traces")[0][0]

    def last_trace(self) -> int:
        """The highest trace number recorded, or -1."""
        return self._catalog.query("SELECT coalesce(max(trace), -1) FROM {s}.traces")[0][0]

    def training_rows(self) -> list[tuple]:
        """``(trace, model, version, backend, threads, batch_size, seconds, median_s, features JSON or None)``
        of every trace, by trace number (a trace's features name its device: the cost model learns each
        device's times)."""
        return self._catalog.query(
            "SELECT trace, model, version, backend, threads, batch_size, seconds, median_s, features "
            "FROM {s}.traces ORDER BY trace")

    def merged_before(self, last_trace: int) -> bool:
        """Whether a trace numbered at most ``last_trace`` timed a merged graph (merge factor above 1)."""
        return bool(self._catalog.query(
            "SELECT count(*) FROM {s}.traces WHERE trace <= ? AND "
            "coalesce(TRY_CAST(json_extract(features, '$.merge_factor') AS INTEGER), 1) > 1", [last_trace])[0][0])

    def set_features(self, trace: int, features: dict) -> None:
        """Fill in a trace's features (traces of catalog schema 6 have none)."""
        self._catalog.query("UPDATE {s}.traces SET features = ? WHERE trace = ?",
                            [json.dumps(features, sort_keys=True), trace])

    def forget_fits(self, model: str, version: Optional[int] = None) -> None:
        """Delete the fit rows of dropped versions of the cost model's catalog model (``modelsql_cost``)."""
        if model != "modelsql_cost":
            return
        where, params = ("", []) if version is None else (" WHERE version = ?", [version])
        self._catalog.query("DELETE FROM {s}.cost_models" + where, params)

    def add_fit(self, fit: CostModelFit) -> None:
        """Record one fit of the cost model (replacing a stale row of that version, if any)."""
        self._catalog.check_writable()
        self._catalog.query("DELETE FROM {s}.cost_models WHERE version = ?", [fit.version])
        self._catalog.query("INSERT INTO {s}.cost_models VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                            [fit.version, fit.traces, fit.last_trace, fit.spec, fit.within_10pct,
                             fit.median_rel_error, fit.noise_ceiling, _dt.datetime.now(_dt.timezone.utc)])

    def latest_fit(self) -> Optional[CostModelFit]:
        """The newest fit whose catalog model version still exists, or None."""
        rows = self._catalog.query(
            "SELECT c.version, c.traces, c.last_trace, c.spec, c.within_10pct, c.median_rel_error, c.noise_ceiling "
            "FROM {s}.cost_models c JOIN {s}.model_versions v ON v.name = 'modelsql_cost' AND v.version = c.version "
            "ORDER BY c.version DESC LIMIT 1")
        return CostModelFit(*rows[0]) if rows else None
