"""EVALUATE MODEL | PIPELINE: the metrics of a version's predictions against a TARGET column, as one row,
recorded in the catalog (``modelsql.evaluations``).

Binding resolves the version, reads the options (:data:`~modelsql.engine.options.declared.EVALUATE`) and
builds the PREDICT of the input: the features are PREDICT's (a model fed by position gets every column but the
TARGET and the keys, :func:`~modelsql.engine.training_features.training_features`). The task follows the
model's prediction column: a class label (integer, text, boolean) is classification, a number regression.
Then one query (:mod:`.queries`) computes everything the metrics need, and :mod:`modelsql.metrics` the
metrics, as scikit-learn defines them (BigQuery ML's ``ML.EVALUATE`` names).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from sqlglot import exp

import onnx

from modelsql import sql as msql
from modelsql.analyses.class_labels import class_labels, label_table
from modelsql.catalog.entries import ModelVersion
from modelsql.catalog.evaluations import EvaluationRow
from modelsql.errors import DataError, ProgrammingError, did_you_mean
from modelsql.onnxformat.split import initializer_value
from modelsql.metrics import classification_metrics, default_positive, regression_metrics
from modelsql.sql.evaluate import EvaluateModel
from modelsql.sql.predict import PredictTable
from modelsql.engine.evaluate import queries
from modelsql.engine.handlers import catalog_record, handles
from modelsql.engine.options.declared import EVALUATE
from modelsql.engine.options.schema import OptionValues, option_error
from modelsql.engine.query_handler import run_query
from modelsql.engine.result import Result
from modelsql.engine.training_features import feature_option, input_keys, training_features

if TYPE_CHECKING:
    from modelsql.engine.session import Session

__all__ = ["EvaluatePlan", "bind_evaluate"]

_INTEGER = re.compile(r"^(TINYINT|SMALLINT|INTEGER|BIGINT|HUGEINT|UTINYINT|USMALLINT|UINTEGER|UBIGINT|UHUGEINT)$")
_NUMBER = re.compile(r"^(FLOAT|DOUBLE|DECIMAL.*|" + _INTEGER.pattern[2:-2] + r")$")
_VECTOR = re.compile(r"^(FLOAT|DOUBLE)\[(\d*)\]$")


@dataclass(frozen=True)
class EvaluatePlan:
    """A bound EVALUATE: the version (``kind`` ``"model"`` / ``"pipeline"``), the task, the columns read and
    the options after defaults (``average`` and ``positive`` decided once the classes are known), and the
    classes the model's graph names, in its probabilities' order (None when it names none)."""

    kind: str
    name: str
    version: int
    task: str
    target: str
    input_text: str
    predicted: queries.Predicted
    options: OptionValues
    classes: Optional[list[Any]] = None


def _where(stmt: EvaluateModel) -> str:
    ref = stmt.this
    return f"EVALUATE {'PIPELINE' if ref.args.get('pipeline') else 'MODEL'} {ref.model_name}"


def _columns(session: Session, sql: str, params: list) -> list[tuple[str, str]]:
    """``(name, DuckDB type)`` of each column of ``sql`` (planned and described, nothing run)."""
    out, _, _ = run_query(msql.parse(f"SELECT * FROM ({sql}) LIMIT 0")[0], session, params)
    try:
        return [(str(d[0]), str(d[1])) for d in out.description or []]
    finally:
        session.duck.fetchall()
        out.release()


def _target(stmt: EvaluateModel, columns: list[tuple[str, str]], session: Session) -> tuple[str, str]:
    """The TARGET column as the input spells it, and its type."""
    node = stmt.args["target"]
    found = [(n, t) for n, t in columns if n.lower() == node.name.lower()]
    if not found:
        names = [n for n, _ in columns]
        raise session.pointed(ProgrammingError(
            f'{_where(stmt)}: TARGET column "{node.name}" not found.{did_you_mean(node.name, names)} Columns: '
            f"{', '.join(names)}.", code="column_not_found"), exp.Column(this=node.copy()))
    return found[0]


def _predict_node(stmt: EvaluateModel, version: int, features: Optional[list[str]]) -> PredictTable:
    ref = stmt.this.copy()
    ref.set("version", exp.Literal.number(version))  # the version bound, whatever is added meanwhile
    options = None
    if features is not None:
        options = [exp.EQ(this=exp.to_identifier("features"),
                          expression=exp.Tuple(expressions=[exp.to_identifier(f, quoted=True) for f in features]))]
    return PredictTable(this=ref, expression=stmt.args["source"].copy(), options=options)


def _features(stmt: EvaluateModel, entry: Any, columns: list[tuple[str, str]], target: str,
              options: OptionValues, session: Session) -> Optional[list[str]]:
    """The ``features`` PREDICT is given: the option's; for a model of one input whose feature names are
    unknown (fed by position), every column but the TARGET and the keys; else None (bound by name)."""
    given = feature_option(options["features"], target, _where(stmt))
    names = [n for n, _ in columns]
    if given is not None:
        return training_features(names, target, given, statement=_where(stmt))
    if isinstance(entry, ModelVersion) and not entry.features and len(entry.inputs) == 1:
        return training_features(names, target, None, input_keys(session, stmt.args["source"]), _where(stmt))
    return None


def _prediction(stmt: EvaluateModel, outputs: list[tuple[str, str]],
                target_type: str) -> tuple[str, str, Optional[str], str]:
    """``(task, prediction SQL, probabilities SQL or None, the target's cast)`` from the PREDICT's output
    columns (a BOOLEAN target of a classifier of integer labels is read as 0 / 1, as scikit-learn fitted on
    booleans predicts).

    Raises:
        ProgrammingError: ``invalid_target``: a prediction of no class and no number, or a TARGET whose type
            does not fit the task.
    """
    named = dict(outputs)
    name, kind = ("label", named["label"]) if "label" in named else outputs[0]
    column = exp.to_identifier(name, quoted=True).sql("duckdb")
    vector = _VECTOR.match(kind)
    if kind in ("FLOAT", "DOUBLE") or (vector and vector.group(2) == "1"):
        if not _NUMBER.match(target_type):
            raise _bad_target(stmt, f"the model predicts numbers ({name} {kind}), but TARGET is {target_type}")
        return "regression", column + ("[1]" if vector else ""), None, ""
    if not (_INTEGER.match(kind) or kind in ("VARCHAR", "BOOLEAN")):
        raise _bad_target(stmt, f"the model's prediction {name} is {kind}: neither a class label nor a number")
    cast = "::BIGINT" if _INTEGER.match(kind) and target_type == "BOOLEAN" else ""
    if _family(kind) != _family(target_type) and not cast:
        raise _bad_target(stmt, f"the model predicts class labels of type {kind} ({name}), but TARGET is "
                                f"{target_type}")
    probabilities = next((n for n, t in outputs if n != name and _VECTOR.match(t)), None)
    return "classification", column, (exp.to_identifier(probabilities, quoted=True).sql("duckdb")
                                      if probabilities else None), cast


def _family(sql_type: str) -> str:
    return "integer" if _INTEGER.match(sql_type) else sql_type


def _bad_target(stmt: EvaluateModel, why: str) -> ProgrammingError:
    return ProgrammingError(f"{_where(stmt)}: {why}.", code="invalid_target")


def bind_evaluate(stmt: EvaluateModel, session: Session, params: list) -> EvaluatePlan:
    """The plan of an EVALUATE (nothing runs but DuckDB's description of the input and of the PREDICT).

    Raises:
        ProgrammingError: the options (``unknown_option``, ``invalid_option``), the model
            (``model_not_found``, ``version_not_found``), the TARGET (``column_not_found``, ``invalid_target``),
            the features (``column_not_found``, ``invalid_feature``) and PREDICT's binding errors.
    """
    ref = stmt.this
    options = EVALUATE.parse(stmt, params, where=_where(stmt))
    pipeline = bool(ref.args.get("pipeline"))
    entry = session.get_model(ref.model_name, ref.version_number, ref, pipeline=pipeline)
    source = stmt.args["source"]
    input_sql = f"SELECT * FROM {source.sql(dialect=msql.DIALECT)}"
    columns = _columns(session, input_sql, params)
    target, target_type = _target(stmt, columns, session)
    predict = _predict_node(stmt, entry.version, _features(stmt, entry, columns, target, options, session))
    predict_sql = predict.sql(dialect=msql.DIALECT)
    predicted_columns = _columns(session, f"SELECT * FROM {predict_sql}", params)
    inputs = {n for n, _ in columns}
    task, prediction, probabilities, cast = _prediction(stmt, [c for c in predicted_columns if c[0] not in inputs],
                                                        target_type)
    _check_task_options(stmt, task, options)
    quoted = [exp.to_identifier(n, quoted=True).sql("duckdb") for n, _ in columns]
    predicted = queries.Predicted(predict_sql, exp.to_identifier(target, quoted=True).sql("duckdb"), prediction,
                                  probabilities, quoted, cast)
    text = source.sql(dialect=msql.DIALECT)
    classes = _model_classes(session, entry) if task == "classification" else None
    return EvaluatePlan("pipeline" if pipeline else "model", entry.name, entry.version, task, target,
                        f"TABLE {text}" if isinstance(source, exp.Table) else text, predicted, options, classes)


def _check_task_options(stmt: EvaluateModel, task: str, options: OptionValues) -> None:
    """A classifier's options given to a regressor are an error, not silently ignored."""
    if task == "regression":
        given = next((k for k in ("average", "positive", "threshold") if options[k] is not None), None)
        if given is not None:
            raise option_error(given, f"{_where(stmt)} option {given} applies to a classifier; the model predicts "
                                      "numbers.")


def _model_classes(session: Session, entry: Any) -> Optional[list[Any]]:
    """The classes a classifier names in its graph, in its probabilities' order: a classifier node's labels,
    else the table its label is gathered from (one tensor read from the store); None when it names none."""
    if not isinstance(entry, ModelVersion) or entry.kind == "python":
        return None
    graph = session.store.get(entry.graph_digest)
    proto = onnx.ModelProto.FromString(graph)
    named = class_labels(proto)
    table = label_table(proto) if named is None else None
    stored = next((t for t in entry.tensors if t.name == table), None) if table is not None else None
    if stored is None:
        return named
    values = initializer_value(graph, stored.name, session.store.get(stored.digest))
    return [v.decode("utf-8") if isinstance(v, bytes) else v.item() for v in values.ravel()]


# ---------------------------------------------------------------- running


def _run(plan: EvaluatePlan, session: Session, params: list) -> tuple[Any, ...]:
    """The one row of the EVALUATE's query."""
    if plan.task == "regression":
        sql = queries.regression_sql(plan.predicted)
    else:
        sql = queries.classification_sql(plan.predicted, plan.options["threshold"])
    out, _, _ = run_query(msql.parse(sql)[0], session, params)
    try:
        row = session.duck.fetchone()
    finally:
        session.duck.fetchall()
        out.release()
    assert row is not None  # an aggregate query has one row
    return tuple(row)


def _check_rows(stmt: EvaluateModel, plan: EvaluatePlan, rows: int, null_targets: int, not_numbers: int) -> None:
    if not_numbers:
        what = "the TARGET or the prediction" if plan.task == "regression" else "the model's probabilities"
        raise DataError(f"{_where(stmt)}: {what} is NaN or infinite in {not_numbers} of {rows} rows (a NaN or "
                        "infinite feature gives a NaN prediction): filter them out in the input.",
                        code="not_a_number")
    if null_targets:
        raise DataError(f"{_where(stmt)}: TARGET {plan.target} is NULL in {null_targets} of {rows} rows: every "
                        "row evaluated needs its true value (filter them out in the input).", code="null_target")
    if rows == 0:
        raise DataError(f"{_where(stmt)}: the input has no rows to evaluate.", code="too_few_rows")


def _classes(stmt: EvaluateModel, plan: EvaluatePlan, labels: list[Any]) -> tuple[str, Any]:
    """The ``average`` and the positive class, the options' or their defaults (from the model's classes when
    its graph names them, else the rows'), checked against the classes."""
    known = plan.classes if plan.classes is not None else labels
    average = plan.options["average"] or ("binary" if len(known) <= 2 and len(labels) <= 2 else "macro")
    if average == "binary" and len(labels) > 2:
        raise option_error("average", f"{_where(stmt)} option average is 'binary' but the rows have {len(labels)} "
                                      f"classes: use 'macro', 'weighted' or 'micro'.")
    positive = plan.options["positive"]
    if positive is None:
        positive = default_positive(known)
    elif not any(type(label) is type(positive) and label == positive for label in labels):
        raise option_error("positive", f"{_where(stmt)} option positive is {positive!r}, not a class of the rows "
                                       f"(classes: {', '.join(map(repr, labels))}).")
    if plan.options["threshold"] is not None and len(labels) != 2:
        raise option_error("threshold", f"{_where(stmt)} option threshold applies to two classes; the rows have "
                                        f"{len(labels)}.")
    return average, positive


def _classification(stmt: EvaluateModel, plan: EvaluatePlan, row: tuple[Any, ...]) -> dict[str, Any]:
    confusion, positions, ranks = (queries.as_dicts(v) for v in row[4:7])
    labels = queries.labels_of(confusion)
    average, positive = _classes(stmt, plan, labels)
    width = max((int(e["i"]) for e in ranks), default=0)
    lowest, highest = row[8], row[9]
    probabilities = bool(ranks) and lowest is not None and lowest >= 0.0 and highest <= 1.0
    where = queries.positions_of(labels, positions, width, plan.classes) if probabilities else None
    if plan.options["threshold"] is not None:
        if where is None:
            raise option_error("threshold", f"{_where(stmt)} option threshold needs the model's probabilities of "
                                            "each class (values in [0, 1], each class's column known).")
        confusion = queries.thresholded_confusion(queries.as_dicts(row[7]), labels, positive, where)
    matrix = queries.confusion_matrix(confusion, labels)
    metrics: dict[str, Any] = classification_metrics(matrix, labels, average, positive)
    rows = int(row[0])
    metrics["log_loss"] = queries.log_loss(ranks, where, rows) if where is not None else None
    metrics["roc_auc"] = queries.roc_auc(ranks, where, labels, positive, average) if where is not None else None
    metrics.update(labels=labels, confusion_matrix=matrix, average=average,
                   positive=positive if average == "binary" else None)
    return metrics


def _regression(row: tuple[Any, ...]) -> dict[str, Any]:
    rows, _, _, _, abs_sum, squared_sum, median_abs, target_var, error_var = row
    return regression_metrics(rows=int(rows), abs_error_sum=float(abs_sum), squared_error_sum=float(squared_sum),
                              median_abs_error=float(median_abs), target_var_pop=float(target_var),
                              error_var_pop=float(error_var))


_CLASSIFICATION_COLUMNS = (("accuracy", "DOUBLE"), ("precision", "DOUBLE"), ("recall", "DOUBLE"),
                           ("f1_score", "DOUBLE"), ("log_loss", "DOUBLE"), ("roc_auc", "DOUBLE"),
                           ("average", "VARCHAR"), ("positive", "VARCHAR"), ("labels", "VARCHAR[]"),
                           ("confusion_matrix", "BIGINT[][]"))
_REGRESSION_COLUMNS = (("mean_absolute_error", "DOUBLE"), ("mean_squared_error", "DOUBLE"),
                       ("root_mean_squared_error", "DOUBLE"), ("median_absolute_error", "DOUBLE"),
                       ("r2_score", "DOUBLE"), ("explained_variance", "DOUBLE"))


def _result(session: Session, record: EvaluationRow) -> Result:
    columns = _REGRESSION_COLUMNS if record.task == "regression" else _CLASSIFICATION_COLUMNS
    head = (("evaluation", "BIGINT"), ("model", "VARCHAR"), ("version", "INTEGER"), ("task", "VARCHAR"),
            ("rows", "BIGINT"))
    values = [record.evaluation, record.name, record.version, record.task, record.rows]
    for name, _ in columns:
        value = record.metrics.get(name)
        if name == "labels":
            value = [str(v) for v in value or []]
        elif name == "positive" and value is not None:
            value = str(value)
        values.append(value)
    description = [(name, kind, None, None, None, None, True) for name, kind in (*head, *columns)]
    return Result(session.duck, description=description, rows=[tuple(values)])


@handles(EvaluateModel)
def _evaluate(stmt: EvaluateModel, session: Session, params: list) -> Result:
    plan = bind_evaluate(stmt, session, params)
    row = _run(plan, session, params)
    rows, null_targets, fingerprint = int(row[0]), int(row[1]), int(row[2])
    _check_rows(stmt, plan, rows, null_targets, int(row[3]))
    metrics = _regression(row) if plan.task == "regression" else _classification(stmt, plan, row)
    options = {k: v for k, v in plan.options.items() if v is not None}
    with catalog_record(session) as catalog:  # in the user's transaction: their ROLLBACK discards it too
        record = catalog.evaluations.add(EvaluationRow(
            plan.kind, plan.name, plan.version, plan.task, plan.target, plan.input_text,
            f"{rows}:{fingerprint:016x}", rows, metrics, options))
    return _result(session, record)
