"""The evaluation table functions: ``EVALUATE(...)`` (the statement's row), ``CONFUSION_MATRIX(...)`` (one row per
pair of true and predicted classes, BigQuery ML's ``ML.CONFUSION_MATRIX`` in long form) and ``ROC_CURVE(...)``
(a binary classifier's curve, one row per distinct probability of the positive class, highest first: BigQuery
ML's ``ML.ROC_CURVE`` columns). Each is computed before the query is planned (registered with
:func:`~modelsql.engine.handlers.computes`) and records nothing: a query reads, the statement records.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa
from sqlglot import exp

from modelsql.catalog.evaluations import EvaluationRow
from modelsql.errors import ProgrammingError
from modelsql.metrics import as_positive, default_positive
from modelsql.sql.evaluate import EvaluateModel, EvaluationTable
from modelsql.sql.scopes import with_enclosing_ctes
from modelsql.engine.evaluate import queries
from modelsql.engine.evaluate.binding import EvaluatePlan, bind_evaluate
from modelsql.engine.evaluate.measure import Measured, measure, run_sql
from modelsql.engine.evaluate.statement import result_row
from modelsql.engine.handlers import computes
from modelsql.engine.options.schema import option_error

if TYPE_CHECKING:
    from modelsql.engine.session import Session

__all__ = ["evaluation_table"]

_ARROW = {"BIGINT": pa.int64(), "INTEGER": pa.int32(), "DOUBLE": pa.float64(), "VARCHAR": pa.string(),
          "VARCHAR[]": pa.list_(pa.string()), "BIGINT[][]": pa.list_(pa.list_(pa.int64()))}


def _as_statement(node: EvaluationTable) -> EvaluateModel:
    """The EVALUATE statement a table function's arguments spell (its ``target`` option is the TARGET).

    Raises:
        ProgrammingError: ``invalid_option`` when ``target`` names no column (without it, the version's own
            target is read, as the statement's).
    """
    options = [o for o in node.args.get("options") or [] if o.this.name.lower() != "target"]
    if sum(1 for o in node.args.get("options") or [] if o.this.name.lower() == "target") > 1:
        raise option_error("target", f'{node.args["function"]}(...): option "target" is given twice.',
                           code="duplicate_option")
    if node.args["function"] == "ROC_CURVE":
        unused = next((o.this.name for o in options if o.this.name.lower() in ("average", "threshold")), None)
        if unused is not None:
            raise option_error(unused, f"ROC_CURVE(...) option {unused} does not apply: the curve is every "
                                       "threshold of the positive class.")
    target = node.option_values.get("target")
    if target is not None and (not isinstance(target, (exp.Identifier, exp.Column, exp.Literal)) or not target.name):
        raise option_error("target", f"{node.args['function']}(...) option target names the column of true values "
                                     f"(target = column), not {target.sql('duckdb')}")
    name = (None if target is None else
            exp.to_identifier(target.name, quoted=isinstance(target, exp.Identifier) and target.quoted))
    source = with_enclosing_ctes(node.expression, node).copy()  # the query's CTEs, as the query would read them
    stmt = EvaluateModel(this=node.this.copy(), source=source, target=name, options=options or None)
    stmt.meta["called_as"] = node.args["function"]  # messages name the function, not the statement
    return stmt


@computes(EvaluationTable)
def evaluation_table(node: EvaluationTable, session: Session, params: list) -> pa.Table:
    """The rows of ``EVALUATE(...)``, ``CONFUSION_MATRIX(...)`` or ``ROC_CURVE(...)``.

    Raises:
        as the EVALUATE statement; NotSupportedError ``not_binary`` for ROC_CURVE of other than two classes
        or a model without probabilities.
    """
    stmt = _as_statement(node)
    plan = bind_evaluate(stmt, session, params)
    done = measure(stmt, plan, session, params)
    function = node.args["function"]
    if function == "CONFUSION_MATRIX":
        return _confusion_table(plan, done)
    if function == "ROC_CURVE":
        return _roc_table(plan, done, session, params)
    columns, row = result_row(EvaluationRow(plan.kind, plan.name, plan.version, plan.task, plan.target,
                                            plan.input_text, done.fingerprint, done.rows, done.metrics, {}))
    return pa.table({name: pa.array([value], _ARROW[kind]) for (name, kind), value in zip(columns, row)})


def _confusion_table(plan: EvaluatePlan, done: Measured) -> pa.Table:
    if plan.task != "classification":
        raise ProgrammingError(f"CONFUSION_MATRIX(...): {plan.name} predicts numbers, not classes",
                               code="invalid_target")
    labels, matrix = done.metrics["labels"], done.metrics["confusion_matrix"]
    pairs = [(a, b, matrix[i][j]) for i, a in enumerate(labels) for j, b in enumerate(labels)]
    return pa.table({"expected_label": [p[0] for p in pairs], "predicted_label": [p[1] for p in pairs],
                     "rows": pa.array([p[2] for p in pairs], pa.int64())})


def _roc_table(plan: EvaluatePlan, done: Measured, session: Session, params: list) -> pa.Table:
    if plan.task != "classification":
        raise ProgrammingError(f"ROC_CURVE(...): {plan.name} predicts numbers, not classes", code="invalid_target")
    if done.where is None:
        raise ProgrammingError(f"ROC_CURVE(...): {plan.name} gives no probabilities of each class (scores outside "
                               "[0, 1], or none)", code="invalid_target")
    matrix, labels, where = done.metrics.get("confusion_matrix") or [], done.metrics.get("labels") or [], done.where
    true = [label for label, counts in zip(labels, matrix) if sum(counts)]  # the TARGET's classes
    if len(true) != 2:
        raise ProgrammingError(f"ROC_CURVE(...): the TARGET {plan.target} must have two classes; its rows have "
                               f"{', '.join(map(repr, true)) or 'none'}", code="invalid_target")
    positive = as_positive(plan.options["positive"], true)
    positive = positive if positive is not None else default_positive(true)
    if positive not in where:
        raise ProgrammingError(f"ROC_CURVE(...): the TARGET {plan.target} must have two classes and {plan.name} "
                               f"probabilities of each (classes: {', '.join(map(repr, true)) or 'none'})",
                               code="invalid_target")
    row = run_sql(queries.roc_sql(plan.predicted, where[positive], positive), session, params)
    points: list[dict[str, Any]] = queries.as_dicts(row[0])
    if points:  # scikit-learn's first point: above every probability (threshold infinity), nothing predicted positive
        positives = points[0]["true_positives"] + points[0]["false_negatives"]
        negatives = points[0]["false_positives"] + points[0]["true_negatives"]
        points.insert(0, {"threshold": float("inf"), "recall": 0.0 if positives else None,
                          "false_positive_rate": 0.0 if negatives else None, "true_positives": 0,
                          "false_positives": 0, "true_negatives": negatives, "false_negatives": positives})
    columns = ("threshold", "recall", "false_positive_rate", "true_positives", "false_positives",
               "true_negatives", "false_negatives")
    return pa.table({c: pa.array([p[c] for p in points], pa.float64() if c in columns[:3] else pa.int64())
                     for c in columns})
