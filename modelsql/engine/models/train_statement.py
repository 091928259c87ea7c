"""``CREATE [OR REPLACE] MODEL [IF NOT EXISTS] m WITH (model_type = ..., target = y, ...) AS SELECT ...``: a
standard model trained in SQL (BigQuery ML's ``CREATE MODEL ... AS SELECT``, PostgresML's ``pgml.train``).

The query runs (PREDICT in it too); its rows are bound (:mod:`.training_rows`) and split
(:func:`modelsql.estimators.validation_rows`); the estimator of the model type
(:func:`modelsql.estimators.resolve_model_type`) is fitted inside the automatic preprocessing
(:func:`modelsql.estimators.build_pipeline`; a ``TRANSFORM`` clause's items instead, :mod:`.transform_clause`)
on the training rows; the pipeline is converted, checked and
stored as a new version (:func:`~modelsql.engine.models.statements.import_model`), and EVALUATE's metrics of it
on the validation rows (on the training rows when nothing is held out) are recorded in ``modelsql.evaluations``
(a classifier or regressor; a clusterer has no evaluation). The statement returns that evaluation's row, headed
by the version and the row counts. A failure at any step leaves the catalog as it was.
"""

from __future__ import annotations

import json
import re
import time
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

import numpy as np
import pyarrow as pa
from sqlglot import exp

from modelsql import sql as msql
from modelsql.catalog.evaluations import EvaluationRow
from modelsql.catalog.lineage import Origin
from modelsql.errors import DataError, Error, ProgrammingError, did_you_mean
from modelsql.estimators import (ModelType, Transform, build_pipeline, column_kind, conversion_tolerance, hyperparameters_text,
                                 imputed_columns, resolve_model_type, transform_columns, transforms_json,
                                 validation_rows)
from modelsql.sql.models import ImportModel
from modelsql.engine.evaluate.recording import hashes_fingerprint, lineage_digest, record_evaluation
from modelsql.engine.evaluate.statement import result_with_evaluation
from modelsql.engine.handlers import catalog_write_retrying
from modelsql.engine.models import statements as ddl
from modelsql.engine.models.training_rows import TrainingRows, query_rows, training_rows
from modelsql.engine.models.transform_clause import bind_transform, transform_text, with_parameters
from modelsql.engine.options.declared import CREATE_MODEL_AS
from modelsql.engine.options.schema import option_error, option_of
from modelsql.engine.result import Result

if TYPE_CHECKING:
    from modelsql.engine.session import Session

__all__ = ["TrainingPlan", "bind_training", "create_trained_model"]


@dataclass(frozen=True)
class TrainingPlan:
    """A bound ``CREATE MODEL ... AS``: the model, what to train and how to split, the query's text."""

    name: str
    replace: bool
    if_not_exists: bool
    model_type: ModelType
    hyperparameters: dict[str, Any]
    target: Optional[str]
    features: Optional[tuple[str, ...]]
    validation: Any
    fraction: float
    seed: int
    on_null: str
    description: Optional[str]
    query: str
    transform: Optional[tuple[exp.Expression, ...]] = None
    """The ``TRANSFORM`` clause's items (bound once the query's columns are known), or None."""
    accept_mismatch: bool = False
    """Keep a conversion that differs from the estimator (the option of that name)."""

    @property
    def where(self) -> str:
        return f"CREATE MODEL {self.name}"


def bind_training(stmt: ImportModel, params: list) -> TrainingPlan:
    """The plan of ``CREATE MODEL ... AS`` (nothing runs).

    Raises:
        ProgrammingError: ``parse_error`` (OR REPLACE with IF NOT EXISTS), ``missing_option`` (no model_type, or a
            classifier's or regressor's target), ``unknown_model_type``, ``unknown_hyperparameter``,
            ``invalid_option`` (a clusterer given a target) and the option schema's errors.
    """
    name = stmt.this.model_name.lower()
    where = f"CREATE MODEL {name}"
    if stmt.args.get("replace") and stmt.args.get("exists"):
        raise ProgrammingError("CREATE OR REPLACE MODEL and IF NOT EXISTS contradict each other; use one of them.",
                               code="parse_error")
    options = CREATE_MODEL_AS.parse(stmt, params, where=where, extra=_hyperparameter_names(stmt))
    if options["model_type"] is None:
        raise option_error("model_type", f"{where}: option model_type is required: what to train ('logistic_reg', "
                                         "'random_forest_classifier', ... or a scikit-learn estimator class name).",
                           code="missing_option")
    model_type = resolve_model_type(options["model_type"])
    target = _label_column(options, where)
    _check_target(model_type, target, where)
    if "validation_size" in options.given and options["validation"] not in ("random", "seq"):
        raise option_error("validation_size", f"{where}: option validation_size applies to validation = 'random' or "
                                              f"'seq', not {options['validation']!r}.")
    _misspelt_options(options.rest, model_type, where)
    hyperparameters = model_type.hyperparameters(options.rest)  # unknown ones fail before the query runs
    transform = stmt.args.get("transform")
    if transform and options["features"] is not None:
        raise option_error("features", f"{where}: option features and a TRANSFORM clause both choose the features; "
                                       "the TRANSFORM's columns are the model's features: leave features out.")
    return TrainingPlan(name, bool(stmt.args.get("replace")), bool(stmt.args.get("exists")), model_type,
                        hyperparameters, target, options["features"], options["validation"],
                        options["validation_size"], options["seed"], options["on_null"], options["description"],
                        _query_text(stmt.args["query"], params), with_parameters(transform, params) if transform else None,
                        options["accept_mismatch"])


def _misspelt_options(rest: dict, model_type: ModelType, where: str) -> None:
    """A name that is no hyper-parameter of the estimator but close to an option of the statement is that option
    misspelt (``on_nul``), not an unknown hyper-parameter.

    Raises:
        ProgrammingError: ``unknown_option``.
    """
    known = {k.lower() for k in model_type.parameters()}
    for name in rest:
        hint = did_you_mean(name, [o for o in CREATE_MODEL_AS.names if o not in known])
        if name.lower() not in known and hint:
            raise option_error(name, f"{where}: option {name} is neither an option of the statement nor a "
                                     f"hyper-parameter of {model_type.estimator.split(':')[1]}.{hint}",
                               code="unknown_option")


def _query_text(query: exp.Expression, params: list) -> str:
    """The training query as written, with its parameters' values after it (``-- parameters: [5.0]``)."""
    text = query.sql(dialect=msql.DIALECT)
    return f"{text} -- parameters: {json.dumps(list(params), default=str)}" if params else text


def _hyperparameter_names(stmt: ImportModel) -> list[str]:
    return [o.this.name.lower() for o in stmt.args.get("options") or [] if o.this.name.lower() not in CREATE_MODEL_AS]


def _label_column(options: Any, where: str) -> Optional[str]:
    """The target: option ``target``, or BigQuery ML's ``input_label_cols`` naming one column.

    Raises:
        ProgrammingError: ``invalid_option`` (both given, or not one column).
    """
    labels = options["input_label_cols"]
    if labels is None:
        return options["target"]
    if options["target"] is not None or len(labels) != 1:
        raise option_error("input_label_cols", f"{where}: option input_label_cols names the one column the model "
                                               "predicts, as target does: give one of them, with one column.")
    return str(labels[0])


def _check_target(model_type: ModelType, target: Optional[str], where: str) -> None:
    if model_type.task == "clustering" and target is not None:
        raise option_error("target", f"{where}: model_type {model_type.name!r} is a clusterer: it learns groups, not "
                                     "a target; leave target out.")
    if model_type.task != "clustering" and target is None:
        raise option_error("target", f"{where}: option target is required: the column the {model_type.task} model "
                                     "predicts (target = y).", code="missing_option")


def create_trained_model(stmt: ImportModel, session: Session, params: list) -> Result:
    """Carry out ``CREATE MODEL ... AS`` (see the module).

    Raises:
        the errors of :func:`bind_training`, of the query, of :func:`~.training_rows.training_rows`, of the split
        (``too_few_rows``), ``one_class`` (a classifier's training rows of one class), ``training_failed`` (the
        estimator's ``fit`` raised), the conversion's, and ``duplicate_model``.
    """
    try:
        return _create_trained_model(stmt, session, params)
    except Error as err:  # an error about an option or a hyper-parameter points at it in the SQL
        raise session.pointed_at_option(err, option_of(stmt.args.get("options"), err)) from None


def _create_trained_model(stmt: ImportModel, session: Session, params: list) -> Result:
    plan = bind_training(stmt, params)
    if plan.if_not_exists and session.catalog.exists(plan.name):
        return Result(session.duck, rowcount=0)
    session.check_writable()
    if ddl.existing_model(session, plan.name, plan.replace, plan.if_not_exists):
        return Result(session.duck, rowcount=0)
    started = time.perf_counter()
    table, types, hashes = query_rows(session, stmt.args["query"], params)
    transforms = _transforms(session, plan, table)
    features = transform_columns(transforms) if transforms else plan.features
    rows = training_rows(table, types=types, task=plan.model_type.task, target=plan.target, features=features,
                         on_null=plan.on_null, statement=plan.where,
                         imputed=imputed_columns(transforms) if transforms else ())
    digest = lineage_digest(hashes_fingerprint(hashes if rows.positions is None else hashes[rows.positions]))
    train, valid = validation_rows(rows.table.num_rows, plan.validation, plan.fraction, plan.seed)
    rows.check_imputed(train, plan.where)
    pipeline = _fit(plan, rows, train, transforms)
    fitted = time.perf_counter() - started
    sample = rows.features_frame(train[np.linspace(0, len(train) - 1, min(len(train), 256)).astype(np.int64)])
    options = _catalog_options(plan, rows, train, valid, fitted)
    if transforms is not None:
        options["transforms"] = transforms_json(transforms)  # TUNE and FROM STUDY fit the same preprocessing
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # skl2onnx reading deprecated attributes (SVC's probA_): not the user's
            version = ddl.import_model(session, plan.name, pipeline, example_input=sample, replace=plan.replace,
                                       options=options, accept_mismatch=plan.accept_mismatch,
                                       tolerance=conversion_tolerance(plan.model_type.task,
                                                                      None if rows.y is None else rows.y[train]),
                                       origin=Origin("query", plan.query, digest))
    except DataError as err:
        if err.code != "conversion_mismatch":
            raise
        text = f"{plan.where}: {err}".replace("of the Pipeline", f"of the {plan.model_type.name} model")
        raise DataError(text + _large_labels_hint(rows), code=err.code) from None
    try:
        record = _record_evaluation(session, plan, rows, hashes, version.version,
                                    valid if len(valid) else train, "validation" if len(valid) else "training")
    except BaseException:
        catalog_write_retrying(session, lambda: session.catalog.drop(plan.name, version.version, missing_ok=True))
        raise
    return _result(session, plan, version.version, len(train), len(valid), record)


def _large_labels_hint(rows: TrainingRows) -> str:
    """What a conversion mismatch of integer class labels past 2**24 says more (skl2onnx's graphs of some estimators,
    an MLP's or naive Bayes', carry the labels as 32-bit integers or floats, and predict other ones): the labels as
    text would convert, accepting the mismatch would store a model that predicts wrong labels."""
    y = rows.y
    if y is None or y.dtype.kind not in "iu" or not len(y) or int(np.abs(y).max()) < 2 ** 24:
        return ""
    return (f" (the converted graph cannot hold class labels as large as {int(np.abs(y).max())}: cast the TARGET to "
            "VARCHAR in the query to train on text classes; accepting the mismatch would store a model that "
            "predicts other labels)")


def _transforms(session: Session, plan: TrainingPlan, table: pa.Table) -> Optional[tuple[Transform, ...]]:
    """The ``TRANSFORM`` clause bound to the query's columns, or None without one."""
    if plan.transform is None:
        return None
    kinds = {f.name: column_kind(f.type) for f in table.schema}
    return bind_transform(plan.transform, table.column_names, kinds, plan.target, plan.where, session.text,
                          plan.model_type.tree_based)


def _fit(plan: TrainingPlan, rows: TrainingRows, train: np.ndarray,
         transforms: Optional[tuple[Transform, ...]] = None) -> Any:
    """The preprocessing and estimator fitted on the training rows.

    Raises:
        DataError: ``one_class``; ``training_failed`` with the estimator's message.
        ProgrammingError: ``invalid_hyperparameter`` (scikit-learn's parameter validation, naming the value).
    """
    y = rows.y[train] if rows.y is not None else None
    if plan.model_type.task == "classification" and y is not None and len(np.unique(y)) < 2:
        raise DataError(f"{plan.where}: TARGET {rows.target} has one class ({_text(y[0])}) in the {len(train)} training "
                        "rows: a classifier needs at least two.", code="one_class")
    pipeline = build_pipeline(rows.kinds, plan.model_type.build(plan.hyperparameters, plan.seed), plan.model_type,
                              transforms, rows.imputed)
    frame = rows.features_frame(train)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # convergence and deprecation notes: the evaluation tells the quality
            pipeline.fit(frame, y)
    except Exception as exc:
        raise _fit_error(plan, exc) from None
    return pipeline


def _text(value: Any) -> str:
    """A value as a message shows it (a numpy scalar as its Python value)."""
    return repr(value.item() if isinstance(value, np.generic) else value)


def _fit_error(plan: TrainingPlan, exc: Exception) -> Error:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    estimator = plan.model_type.estimator.split(":")[1]
    if type(exc).__name__ == "InvalidParameterError":
        err = ProgrammingError(f"{plan.where}: {text}", code="invalid_hyperparameter")
        named = re.match(r"The '(\w+)' parameter", text)  # scikit-learn's wording: "The 'C' parameter of ..."
        err.option = named.group(1) if named else None
        return err
    if isinstance(exc, (OverflowError, TypeError)) and plan.hyperparameters:  # a value scikit-learn did not check:
        # the rows are numbers and text already (max_depth = 10**20, hidden_layer_sizes = (4, 'a'))
        err = ProgrammingError(f"{plan.where}: {estimator} cannot use the hyper-parameters "
                               f"{hyperparameters_text(plan.hyperparameters)}: {text}", code="invalid_hyperparameter")
        err.option = None
        return err
    return DataError(f"{plan.where}: {estimator} failed to fit: {text}", code="training_failed")


def _catalog_options(plan: TrainingPlan, rows: TrainingRows, train: np.ndarray, valid: np.ndarray,
                     seconds: float) -> dict[str, str]:
    """What the catalog keeps of the training (``DESCRIBE MODEL``'s options): the query, the estimator and its
    hyper-parameters, the target, the split, the row counts and the seconds to read and fit, the task (a
    classifier's ``classes`` are kept by the import itself, :func:`~.statements.estimator_classes`)."""
    out = {"model_type": plan.model_type.name, "estimator": plan.model_type.estimator.replace(":", "."),
           "task": plan.model_type.task,
           "hyperparameters": hyperparameters_text(plan.hyperparameters), "query": plan.query,
           "validation": str(plan.validation), "seed": str(plan.seed), "training_rows": str(len(train)),
           "validation_rows": str(len(valid)), "fit_seconds": f"{seconds:.3f}"}
    if plan.validation in ("random", "seq"):
        out["validation_size"] = str(plan.fraction)
    if rows.target is not None:
        out["target"] = rows.target
    if rows.skipped:
        out["rows_skipped"] = str(rows.skipped)
    if rows.imputed:
        out["imputed"] = json.dumps(list(rows.imputed))  # PREDICT feeds their NULLs to the model
    if plan.transform is not None:
        out["transform"] = transform_text(plan.transform)
    if plan.description is not None:
        out["description"] = plan.description
    return out


def _record_evaluation(session: Session, plan: TrainingPlan, rows: TrainingRows, hashes: np.ndarray,
                       version: int, part: np.ndarray, which: str) -> Optional[EvaluationRow]:
    """EVALUATE of the new version on ``part`` of the rows, recorded with the training query as its input,
    ``{"rows": which, ...}`` among its options and the fingerprint of those rows of the query, every column
    (``hashes``: each query row's hash), as an EVALUATE of them records it; None for a clusterer."""
    if rows.target is None:
        return None
    return record_evaluation(session, "model", plan.name, version, rows.table.take(pa.array(part, pa.int64())),
                             rows.target, input_text=plan.query,
                             options={"rows": which, "validation": plan.validation, "seed": plan.seed},
                             called_as=f"CREATE MODEL {plan.name}, evaluating its {which} rows with EVALUATE",
                             fingerprint=hashes_fingerprint(hashes[rows.query_rows(part)]))


def _result(session: Session, plan: TrainingPlan, version: int, trained: int, validated: int,
            record: Optional[EvaluationRow]) -> Result:
    """One row: model, version, model_type, training_rows, validation_rows, then the evaluation's columns
    (:func:`modelsql.engine.evaluate.statement.result_with_evaluation`)."""
    head = [("model", "VARCHAR"), ("version", "INTEGER"), ("model_type", "VARCHAR"), ("training_rows", "BIGINT"),
            ("validation_rows", "BIGINT")]
    return result_with_evaluation(session, head, [plan.name, version, plan.model_type.name, trained, validated],
                                  record)


ddl.TRAINABLE_HANDLERS["query"] = create_trained_model
