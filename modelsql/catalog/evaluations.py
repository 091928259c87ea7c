"""Recorded evaluations (``modelsql.evaluations``; see :mod:`modelsql.catalog.schema`): every EVALUATE of a model
or pipeline version, its metrics and what it read. :class:`Evaluations` is reached as ``Catalog.evaluations``;
it runs its SQL through :meth:`Catalog.query` and never begins or commits."""

from __future__ import annotations

import datetime as _dt
import json
from dataclasses import dataclass
from typing import Any, Optional

__all__ = ["Evaluations", "EvaluationRow", "latest_evaluation_sql"]

_EVALUATION_ORDER = ("accuracy", "precision", "recall", "f1_score", "log_loss", "roc_auc", "mean_absolute_error",
                     "mean_squared_error", "root_mean_squared_error", "median_absolute_error", "r2_score",
                     "explained_variance")
"""The metrics DESCRIBE MODEL shows of the latest evaluation, in this order."""

_LATEST_EVALUATION_SQL = (
    "SELECT 'evaluation', 3, list_position(" + repr(list(_EVALUATION_ORDER)).replace('"', "'") + ", k) - 1, k, "
    "NULL, NULL, (e.metrics ->> k) || ' on ' || e.input || ' (' || e.rows || ' rows, evaluation ' || e.evaluation "
    "|| ')' FROM (SELECT * FROM {s}.evaluations WHERE kind = '{kind}' AND name = ? AND version = ? "
    "ORDER BY evaluation DESC LIMIT 1) AS e, unnest(json_keys(e.metrics)) AS u(k) "
    "WHERE list_contains(" + repr(list(_EVALUATION_ORDER)).replace('"', "'") + ", k) AND e.metrics ->> k IS NOT NULL"
)
"""DESCRIBE MODEL's and DESCRIBE PIPELINE's rows of the latest evaluation of a version: (role, role order,
position, metric, NULL, NULL, detail) (parameters: name, version); see :func:`latest_evaluation_sql`."""


def latest_evaluation_sql(schema: str, kind: str) -> str:
    """:data:`_LATEST_EVALUATION_SQL` for the catalog schema ``schema`` and ``kind`` (``"model"`` / ``"pipeline"``)."""
    assert kind in ("model", "pipeline")
    return _LATEST_EVALUATION_SQL.replace("{s}", schema).replace("{kind}", kind)


@dataclass(frozen=True)
class EvaluationRow:
    """One evaluation of ``kind`` (``"model"`` / ``"pipeline"``) ``name`` version ``version``.

    ``metrics``: metric name -> value (floats; a confusion matrix as a list of lists, ``labels`` its classes);
    ``input``: the ``ON`` clause as written; ``fingerprint``: an order-independent digest of the rows read
    (their count and the sum of their hashes); ``options``: the statement's options."""

    kind: str
    name: str
    version: int
    task: str
    target: str
    input: str
    fingerprint: str
    rows: int
    metrics: dict[str, Any]
    options: dict[str, Any]
    evaluation: int = 0
    created_at: Optional[_dt.datetime] = None


class Evaluations:
    """The evaluations of one :class:`~modelsql.catalog.Catalog`."""

    def __init__(self, catalog: Any) -> None:
        self._catalog = catalog

    def add(self, row: EvaluationRow) -> EvaluationRow:
        """Record ``row``; returns it with its number (from a sequence: two connections recording at once never
        collide, and a rolled-back record's number is not given again) and time. Runs in the caller's
        transaction."""
        self._catalog.check_writable()
        sequence = f"{self._catalog.qualified_schema}.evaluation_numbers".replace("'", "''")
        number = self._catalog.query(f"SELECT nextval('{sequence}')")[0][0]
        now = _dt.datetime.now(_dt.timezone.utc)
        self._catalog.query(
            "INSERT INTO {s}.evaluations (evaluation, kind, name, version, task, target, input, fingerprint, rows, "
            "metrics, options, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [number, row.kind, row.name, row.version, row.task, row.target, row.input, row.fingerprint, row.rows,
             json.dumps(row.metrics, sort_keys=True, default=str), json.dumps(row.options, sort_keys=True,
                                                                              default=str), now])
        return EvaluationRow(**{**row.__dict__, "evaluation": number, "created_at": now})

    def number_after_rows(self) -> None:
        """Start the numbering after the highest evaluation recorded (after IMPORT DATABASE filled the table,
        whose sequence a new catalog starts at 1). Runs in the caller's transaction."""
        last = self._catalog.query("SELECT coalesce(max(evaluation), 0) FROM {s}.evaluations")[0][0]
        self._catalog.query("DROP SEQUENCE {s}.evaluation_numbers")
        self._catalog.query(f"CREATE SEQUENCE {{s}}.evaluation_numbers START {int(last) + 1}")

    def latest(self, kind: str, name: str, version: int) -> Optional[EvaluationRow]:
        """The last evaluation recorded of that version, or None."""
        rows = self._catalog.query(
            "SELECT evaluation, kind, name, version, task, target, input, fingerprint, rows, metrics, options, "
            "created_at FROM {s}.evaluations WHERE kind = ? AND name = ? AND version = ? "
            "ORDER BY evaluation DESC LIMIT 1", [kind, name, version])
        if not rows:
            return None
        (number, kind, name, version, task, target, text, fingerprint, count, metrics, options, created) = rows[0]
        return EvaluationRow(kind, name, version, task, target, text, fingerprint, count, json.loads(metrics),
                             json.loads(options), number, created)

    def forget(self, kind: str, name: str, version: Optional[int] = None) -> None:
        """Delete the evaluations of a dropped model or pipeline (every version, or ``version``)."""
        where, params = ("", []) if version is None else (" AND version = ?", [version])
        self._catalog.query("DELETE FROM {s}.evaluations WHERE kind = ? AND name = ?" + where, [kind, name, *params])
