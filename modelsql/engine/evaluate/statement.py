"""EVALUATE MODEL | PIPELINE: the metrics of a version's predictions against a TARGET column, as one row,
recorded in the catalog (``modelsql.evaluations``) in the user's transaction.

Binding (:mod:`.binding`), then one query (:mod:`.queries`) whose result :mod:`.measure` reads into the metrics,
as scikit-learn defines them, with BigQuery ML's ``ML.EVALUATE`` names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from modelsql.catalog.evaluations import EvaluationRow
from modelsql.errors import Error
from modelsql.sql.evaluate import EvaluateModel
from modelsql.engine.evaluate.binding import bind_evaluate
from modelsql.engine.evaluate.measure import measure
from modelsql.engine.handlers import catalog_record, handles
from modelsql.engine.options import option_of
from modelsql.engine.result import Result

if TYPE_CHECKING:
    from modelsql.engine.session import Session

__all__ = ["CLASSIFICATION_COLUMNS", "REGRESSION_COLUMNS", "result_row", "result_with_evaluation"]


CLASSIFICATION_COLUMNS = (("accuracy", "DOUBLE"), ("precision", "DOUBLE"), ("recall", "DOUBLE"),
                           ("f1_score", "DOUBLE"), ("log_loss", "DOUBLE"), ("roc_auc", "DOUBLE"),
                           ("average", "VARCHAR"), ("positive", "VARCHAR"), ("labels", "VARCHAR[]"),
                           ("confusion_matrix", "BIGINT[][]"))
REGRESSION_COLUMNS = (("mean_absolute_error", "DOUBLE"), ("mean_squared_error", "DOUBLE"),
                       ("root_mean_squared_error", "DOUBLE"), ("median_absolute_error", "DOUBLE"),
                       ("r2_score", "DOUBLE"), ("explained_variance", "DOUBLE"))


def result_row(record: EvaluationRow) -> tuple[list[tuple[str, str]], tuple[Any, ...]]:
    """The columns ``(name, DuckDB type)`` and the one row of an evaluation: its number, model, version, task,
    rows, then the task's metrics (labels as text)."""
    columns = REGRESSION_COLUMNS if record.task == "regression" else CLASSIFICATION_COLUMNS
    head = (("evaluation", "BIGINT"), ("model", "VARCHAR"), ("version", "INTEGER"), ("task", "VARCHAR"),
            ("rows", "BIGINT"))
    values: list[Any] = [record.evaluation or None, record.name, record.version, record.task, record.rows]
    for name, _ in columns:
        value = record.metrics.get(name)
        if name == "labels":
            value = [str(v) for v in value or []]
        elif name == "positive" and value is not None:
            value = str(value)
        values.append(value)
    return [*head, *columns], tuple(values)


def result_with_evaluation(session: Session, head: list[tuple[str, str]], values: list[Any],
                           record: Optional[EvaluationRow]) -> Result:
    """One row: the ``head`` columns ``(name, DuckDB type)`` with their ``values``, then, when a version was evaluated,
    the evaluation's columns (:func:`result_row`) past its model and version: what the statements that make a version
    return (``CREATE MODEL ... AS``, ``... FROM STUDY``)."""
    head, values = list(head), list(values)
    if record is not None:
        columns, row = result_row(record)
        keep = [i for i, (n, _) in enumerate(columns) if n not in ("model", "version")]
        head += [columns[i] for i in keep]
        values += [row[i] for i in keep]
    description = [(n, kind, None, None, None, None, True) for n, kind in head]
    return Result(session.duck, description=description, rows=[tuple(values)])


def _result(session: Session, record: EvaluationRow) -> Result:
    columns, row = result_row(record)
    description = [(name, kind, None, None, None, None, True) for name, kind in columns]
    return Result(session.duck, description=description, rows=[row])


@handles(EvaluateModel)
def _evaluate(stmt: EvaluateModel, session: Session, params: list) -> Result:
    try:
        plan = bind_evaluate(stmt, session, params)
        done = measure(stmt, plan, session, params)
    except Error as err:  # an error about an option points at it in the SQL
        raise session.pointed_at_option(err, option_of(stmt.args.get("options"), err)) from None
    options = {k: v for k, v in plan.options.items() if v is not None}
    metrics = {k: v for k, v in done.metrics.items() if k != "positive_class"}
    with catalog_record(session) as catalog:  # in the user's transaction: their ROLLBACK discards it too
        record = catalog.evaluations.add(EvaluationRow(
            plan.kind, plan.name, plan.version, plan.task, plan.target, plan.input_text, done.fingerprint,
            done.rows, metrics, options))
    return _result(session, record)
