"""The evaluation table functions: ``EVALUATE(...)`` (the statement's row), ``CONFUSION_MATRIX(...)`` (one row per
pair of true and predicted classes, BigQuery ML's ``ML.CONFUSION_MATRIX`` in long form) and ``ROC_CURVE(...)``
(a binary classifier's curve, one row per distinct probability of the positive class, highest first: BigQuery
ML's ``ML.ROC_CURVE`` columns). Each is computed before the query is planned (registered with
:func:`~modelsql.engine.handlers.computes`) and records nothing: a query reads, the statement records.
``EXPLAIN`` computes none: it shows the columns and the plan of the evaluation's query
(:func:`~modelsql.engine.handlers.explains`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
from sqlglot import exp

from modelsql import sql as msql
from modelsql.catalog.evaluations import EvaluationRow
from modelsql.errors import Error, ProgrammingError
from modelsql.metrics import as_positive, default_positive
from modelsql.sql.evaluate import EvaluateModel, EvaluationTable
from modelsql.sql.scopes import with_enclosing_ctes
from modelsql.engine.evaluate.binding import EvaluatePlan, bind_evaluate
from modelsql.engine.evaluate.measure import Measured, about_the_input, evaluation_query, measure
from modelsql.engine.evaluate.roc_points import ROC_SCHEMA, roc_points
from modelsql.engine.evaluate.statement import result_row
from modelsql.engine.explain import render_plan
from modelsql.engine.handlers import computes, explains
from modelsql.engine.query_handler import run_query
from modelsql.engine.options.schema import option_error, option_of

if TYPE_CHECKING:
    from modelsql.engine.session import Session

__all__ = ["evaluation_table", "explain_evaluation_table"]

_ARROW = {"BIGINT": pa.int64(), "INTEGER": pa.int32(), "DOUBLE": pa.float64(), "VARCHAR": pa.string(),
          "VARCHAR[]": pa.list_(pa.string()), "BIGINT[][]": pa.list_(pa.list_(pa.int64()))}
_INTEGERS = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT",
             "UHUGEINT")


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
    try:
        stmt = _as_statement(node)
        plan = bind_evaluate(stmt, session, params)
        function = node.args["function"]
        _check_task(function, plan)
        done = measure(stmt, plan, session, params, keep=function == "ROC_CURVE")
        if function == "CONFUSION_MATRIX":
            return _confusion_table(plan, done)
        if function == "ROC_CURVE":
            return _roc_table(plan, done)
    except Error as err:  # an error about an option points at it in the SQL
        raise session.pointed_at_option(err, option_of(node.args.get("options"), err)) from None
    columns, row = result_row(EvaluationRow(plan.kind, plan.name, plan.version, plan.task, plan.target,
                                            plan.input_text, done.fingerprint, done.rows, done.metrics, {}))
    return pa.table({name: pa.array([value], _ARROW[kind]) for (name, kind), value in zip(columns, row)})


@explains(EvaluationTable)
def explain_evaluation_table(node: EvaluationTable, session: Session, params: list) -> tuple[pa.Schema, str]:
    """What EXPLAIN shows of ``EVALUATE(...)``, ``CONFUSION_MATRIX(...)`` or ``ROC_CURVE(...)`` without computing
    it: the columns of its rows, and a note with the plan of the evaluation's query (bound as the statement is;
    nothing runs but DuckDB's description of the input and of the PREDICT).

    Raises:
        as :func:`evaluation_table`'s binding.
    """
    try:
        stmt = _as_statement(node)
        plan = bind_evaluate(stmt, session, params)
        _check_task(node.args["function"], plan)
    except Error as err:  # an error about an option points at it in the SQL
        raise session.pointed_at_option(err, option_of(node.args.get("options"), err)) from None
    query = evaluation_query(plan)
    with about_the_input(query, session, stmt):
        out, inner, phys = run_query(msql.parse(query.predictions)[0], session, params,
                                     prefix="EXPLAIN " + query.head, suffix=query.tail, dry=True)
    try:
        session.duck.fetchall()
    finally:
        out.release()
    function = node.args["function"]
    passes = "one pass over the input"
    plan_lines = render_plan(inner, phys).splitlines()
    note = (f"{function}({plan.kind.upper()} {plan.name} VERSION {plan.version}, {plan.input_text}) is computed "
            f"before the query when it runs (EXPLAIN computes nothing): {plan.task} against TARGET {plan.target}, "
            f"{passes}, by this plan of its predictions:\n"
            + "\n".join("      " + line for line in plan_lines))
    return _schema(function, plan), note


def _schema(function: str, plan: EvaluatePlan) -> pa.Schema:
    """The columns of a table function's rows."""
    if function == "ROC_CURVE":
        return ROC_SCHEMA
    if function == "CONFUSION_MATRIX":
        label = _label_type(plan)
        return pa.schema([("expected_label", label), ("predicted_label", label), ("rows", pa.int64())])
    columns, _ = result_row(EvaluationRow(plan.kind, plan.name, plan.version, plan.task, plan.target,
                                          plan.input_text, "", 0, {}, {}))
    return pa.schema([(name, _ARROW[kind]) for name, kind in columns])


def _label_type(plan: EvaluatePlan) -> pa.DataType:
    """The Arrow type of a classifier's labels as EVALUATE compares them (the TARGET's, after its cast)."""
    kind = plan.target_type.upper()
    if kind in ("FLOAT", "DOUBLE") or kind.startswith("DECIMAL"):
        return pa.float64()
    if kind == "BOOLEAN":
        return pa.bool_()
    if kind in ("UBIGINT", "HUGEINT", "UHUGEINT"):  # (past BIGINT, with a model's BIGINT predictions beside them)
        return pa.decimal128(38, 0)
    if kind in _INTEGERS:
        return pa.int64()
    return pa.string()


def _check_task(function: str, plan: EvaluatePlan) -> None:
    """CONFUSION_MATRIX(...) and ROC_CURVE(...) are of a classifier.

    Raises:
        ProgrammingError: ``invalid_target`` for a regressor.
    """
    if function != "EVALUATE" and plan.task != "classification":
        raise ProgrammingError(f"{function}(...): {plan.name} predicts numbers, not classes", code="invalid_target")


def _confusion_table(plan: EvaluatePlan, done: Measured) -> pa.Table:
    labels, matrix = done.metrics["labels"], done.metrics["confusion_matrix"]
    pairs = [(a, b, matrix[i][j]) for i, a in enumerate(labels) for j, b in enumerate(labels)]
    schema = _schema("CONFUSION_MATRIX", plan)
    return pa.table([pa.array([p[k] for p in pairs], schema.field(k).type) for k in range(3)], schema=schema)


def _roc_table(plan: EvaluatePlan, done: Measured) -> pa.Table:
    matrix, labels = done.metrics.get("confusion_matrix") or [], done.metrics.get("labels") or []
    true = [label for label, counts in zip(labels, matrix) if sum(counts)]  # the TARGET's classes
    unknown = [label for label in true if plan.classes is not None and label not in plan.classes]
    if done.where is None and unknown:
        raise ProgrammingError(f"ROC_CURVE(...): the TARGET {plan.target} has the class {unknown[0]!r}, which "
                               f"{plan.name} does not know (its classes: {', '.join(map(repr, plan.classes or []))})",
                               code="invalid_target")
    if done.where is None:
        raise ProgrammingError(f"ROC_CURVE(...): {plan.name} gives no probabilities of each class (scores outside "
                               "[0, 1], or none)", code="invalid_target")
    where = done.where
    if len(true) != 2:
        raise ProgrammingError(f"ROC_CURVE(...): the TARGET {plan.target} must have two classes; its rows have "
                               f"{', '.join(map(repr, true)) or 'none'}", code="invalid_target")
    positive = as_positive(plan.options["positive"], true)
    positive = positive if positive is not None else default_positive(true)
    if positive not in where:
        raise ProgrammingError(f"ROC_CURVE(...): the TARGET {plan.target} must have two classes and {plan.name} "
                               f"probabilities of each (classes: {', '.join(map(repr, true)) or 'none'})",
                               code="invalid_target")
    assert done.predictions is not None  # (measured with keep)
    return roc_points(done.predictions, where[positive], positive)
