"""Binding an evaluation (the statement's, or a table function's): the version, the options
(:data:`~modelsql.engine.options.declared.EVALUATE`), the PREDICT of the input. The features are PREDICT's (a
model fed by position gets every column but the TARGET and the keys,
:func:`~modelsql.engine.training_features.training_features`). The task follows the model's prediction column:
a class label (integer, text, boolean) is classification, a number regression.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

import numpy as np
import onnx
from sqlglot import exp

from modelsql import sql as msql
from modelsql.analyses.class_labels import class_labels, label_table
from modelsql.catalog.entries import ModelVersion
from modelsql.duckdb_errors import translate
from modelsql.errors import DataError, ProgrammingError, did_you_mean
from modelsql.onnxformat.split import initializer_value
from modelsql.sql.evaluate import EvaluateModel
from modelsql.sql.predict import PredictTable
from modelsql.engine.evaluate import queries
from modelsql.engine.options.declared import EVALUATE
from modelsql.engine.options.schema import OptionValues, option_error
from modelsql.engine.query.bind_predict import bind_outputs, row_shape, row_width, trained_in_sql
from modelsql.engine.query_handler import columns_of
from modelsql.engine.training_features import check_query_columns, feature_option, input_keys, training_features

if TYPE_CHECKING:
    from modelsql.engine.session import Session

__all__ = ["EvaluatePlan", "bind_evaluate", "input_text", "where_of"]

_INTEGER = re.compile(r"^(TINYINT|SMALLINT|INTEGER|BIGINT|HUGEINT|UTINYINT|USMALLINT|UINTEGER|UBIGINT|UHUGEINT)$")
_NUMBER = re.compile(r"^(FLOAT|DOUBLE|DECIMAL.*|" + _INTEGER.pattern[2:-2] + r")$")
_WHOLE_DECIMAL = re.compile(r"^DECIMAL\(\d+,\s*0\)$")
"""A DECIMAL of whole numbers: class labels read exactly as BIGINT (as DOUBLE, two past 2**53 would be one class;
training read them as int64, and refused what int64 cannot hold)."""
_DECIMAL = re.compile(r"^DECIMAL\((\d+),\s*(\d+)\)$")
"""Any DECIMAL (precision, scale): integer labels are compared with it as DECIMAL(38, its scale), exactly."""
_VECTOR = re.compile(r"^(FLOAT|DOUBLE)\[(\d*)\]$")
_MAP = re.compile(r"^MAP\((BIGINT|VARCHAR), (FLOAT|DOUBLE)\)$")
"""A classifier's probabilities as a map from each class to its probability (skl2onnx's ZipMap)."""
_PROBABILITY_NAMES = ("probabilities", "probability", "probs", "proba")
"""Names of a classifier's output of class probabilities, preferred to its other vectors (a network's logits)."""


@dataclass(frozen=True)
class EvaluatePlan:
    """A bound EVALUATE: the version (``kind`` ``"model"`` / ``"pipeline"``), the task, the columns read and
    the options after defaults (``average`` and ``positive`` decided once the classes are known), the
    classes the model's graph names, in its probabilities' order (None when it names none), and the DuckDB type
    of the TARGET's values as they are compared (after the cast a classifier's labels ask for)."""

    kind: str
    name: str
    version: int
    task: str
    target: str
    input_text: str
    predicted: queries.Predicted
    options: OptionValues
    classes: Optional[list[Any]] = None
    target_type: str = ""


def where_of(stmt: EvaluateModel) -> str:
    """How messages name the statement: ``EVALUATE MODEL m``, or the table function it stands for
    (``ROC_CURVE(MODEL m)``, kept in ``stmt.meta["called_as"]``)."""
    ref = stmt.this
    word = "PIPELINE" if ref.args.get("pipeline") else "MODEL"
    called = stmt.meta.get("called_as")
    return f"{called}({word} {ref.model_name})" if called else f"EVALUATE {word} {ref.model_name}"


def _input_columns(session: Session, source: exp.Expression, params: list) -> list[tuple[str, str]]:
    """``(name, DuckDB type)`` of each column of the input: a table named as DuckDB names one is described by
    DuckDB alone (nothing to plan); anything else as :func:`~modelsql.engine.query_handler.columns_of` does."""
    if not (isinstance(source, exp.Table) and isinstance(source.this, exp.Identifier)):
        return columns_of(f"SELECT * FROM {source.sql(dialect=msql.DIALECT)}", session, params)
    session.begin_if_needed()
    session.run(f"SELECT * FROM {source.sql(dialect='duckdb')} LIMIT 0", None,
                lambda exc: session.pointed(translate(exc), source))
    try:
        return _described(session.duck.description)
    finally:
        session.duck.fetchall()


def _described(description: Any) -> list[tuple[str, str]]:
    return [(str(d[0]), str(d[1])) for d in description or []]


def _target(stmt: EvaluateModel, entry: Any, columns: list[tuple[str, str]], session: Session) -> tuple[str, str]:
    """The TARGET column as the input spells it, and its type; without TARGET, the column the version was trained
    to predict (its ``target`` option: trained in SQL, made FROM STUDY or by FINETUNE).

    Raises:
        ProgrammingError: ``missing_option`` (no TARGET, and the version records none), ``column_not_found``.
    """
    node: Any = stmt.args.get("target")
    if node is None:
        recorded = dict(getattr(entry, "options", ()) or ()).get("target")
        if recorded is None:
            written = "target = column" if stmt.meta.get("called_as") else "TARGET column"
            raise ProgrammingError(
                f"{where_of(stmt)}: name the column of true values ({written}): {entry.name} version "
                f"{entry.version} records no target of its own (only a version trained in SQL or made FROM STUDY "
                "does).",
                code="missing_option")
        node = exp.to_identifier(recorded, quoted=True)
    found = [(n, t) for n, t in columns if n.lower() == node.name.lower()]
    if not found:
        names = [n for n, _ in columns]
        raise session.pointed(ProgrammingError(
            f'{where_of(stmt)}: TARGET column "{node.name}" not found.{did_you_mean(node.name, names)} Columns: '
            f"{', '.join(names)}.", code="column_not_found"), exp.Column(this=node.copy()))
    return found[0]


def _predict_node(stmt: EvaluateModel, version: int, features: Optional[list[str]], on_null: str,
                  hashed: list[str], row_hash: str, renamed: Optional[tuple[str, str]] = None) -> PredictTable:
    """The PREDICT of the evaluation: the version bound (whatever is added meanwhile), its features and
    ``on_null`` (PREDICT's: ``'skip'`` leaves rows with a NULL feature out); its input the statement's with each
    row's hash over the columns ``hashed`` added as column ``row_hash`` (:func:`.queries.hash_column`: a model bound
    by name ignores it, one fed by position is given its ``features``), unless there are none; ``renamed``: the
    TARGET column and the name it goes by (:func:`_target_column`)."""
    ref = stmt.this.copy()
    ref.set("version", exp.Literal.number(version))
    ref.set("alias", None)
    options = []
    if features is not None:
        options.append(exp.EQ(this=exp.to_identifier("features"), expression=exp.Tuple(
            expressions=[exp.to_identifier(f, quoted=True) for f in features])))
    if on_null != "error":
        options.append(exp.EQ(this=exp.to_identifier("on_null"), expression=exp.Literal.string(on_null)))
    source = stmt.args["source"].copy()
    if hashed:
        hashing = exp.Anonymous(this=queries.ROW_HASH, expressions=[exp.column(exp.to_identifier(n, quoted=True))
                                                          for n in hashed])
        star: list[Any] = [exp.Star()]
        if renamed is not None:
            star = [exp.Star(except_=[exp.column(exp.to_identifier(renamed[0], quoted=True))]),
                    exp.alias_(exp.column(exp.to_identifier(renamed[0], quoted=True)), renamed[1], quoted=True)]
        source = exp.Subquery(this=exp.select(*star, exp.alias_(hashing, row_hash, quoted=True)).from_(source))
    return PredictTable(this=ref, expression=source, options=options or None)


def _features(stmt: EvaluateModel, entry: Any, columns: list[tuple[str, str]], target: str,
              options: OptionValues, session: Session) -> Optional[list[str]]:
    """The ``features`` PREDICT is given: the option's; for a model of one input whose feature names are
    unknown and that no column names (fed by position), every column but the TARGET and the keys; else None
    (bound by name, as PREDICT binds a column named as the input: a model trained in SQL, whose inputs are its
    training columns, is never fed by position)."""
    given = feature_option(options["features"], target, where_of(stmt))
    names = [n for n, _ in columns]
    if given is not None:
        return training_features(names, target, given, statement=where_of(stmt))
    named = entry.inputs[0].name.lower() in {n.lower() for n in names} if len(entry.inputs) == 1 else True
    if not entry.features and not named and not trained_in_sql(entry):  # a model or pipeline fed by position
        chosen = training_features(names, target, None, input_keys(session, stmt.args["source"]), where_of(stmt))
        width = row_width(row_shape(entry.inputs[0])) if len(entry.inputs) == 1 else None
        if width is not None and width != len(chosen):
            raise ProgrammingError(
                f"{where_of(stmt)}: {entry.name} is fed by position and takes {width} values per row, but the input "
                f"has {len(chosen)} columns besides the TARGET and its keys ({', '.join(chosen)}): name the features "
                "(WITH (features = (...))) or leave the others out of the input.", code="feature_mismatch")
        return chosen
    return None


def _check_target_not_fed(stmt: EvaluateModel, entry: Any, features: Optional[list[str]], target: str) -> None:
    """The TARGET is never a column the model is fed (its feature names, else its inputs' names, bound by name).

    Raises:
        ProgrammingError: ``invalid_target``.
    """
    fed = features if features is not None else (getattr(entry, "features", None) or [i.name for i in entry.inputs])
    if target.lower() in {str(f).lower() for f in fed}:
        raise _bad_target(stmt, f"TARGET {target} is also a feature of {entry.name} version {entry.version}, which "
                                "would be fed the answer it is scored on: name the true values' column apart from the "
                                "model's features (SELECT ..., x AS truth)")


def _prediction(stmt: EvaluateModel, outputs: list[tuple[str, str, str]],
                target_type: str) -> tuple[str, str, Optional[str], str]:
    """``(task, prediction SQL, probabilities SQL or None, the target's cast)`` from the PREDICT's outputs
    ``(the model's output name, its column, its DuckDB type)``: the prediction is the output the model names
    ``label`` (any case), else its first; the probabilities the vector it names as such (:data:`_PROBABILITY_NAMES`),
    else its first other vector; by the model's names, whatever columns an input's clashing names made of them (a
    BOOLEAN target of a classifier of integer labels is read as 0 / 1, as scikit-learn fitted on
    booleans predicts; a DECIMAL of whole numbers as BIGINT, another DECIMAL as itself (the labels as its scale); a
    FLOAT or DOUBLE one as a number, so 1.0 is the class 1 and 0.5 a class the model never predicts, unless the
    model's labels pass 2**53; an ENUM or UUID target of a classifier of text labels as its text, as training read
    it).

    Raises:
        ProgrammingError: ``invalid_target``: a prediction of no class and no number, or a TARGET whose type
            does not fit the task.
    """
    _, name, kind = next((o for o in outputs if o[0].lower() == "label"), outputs[0])
    column = exp.to_identifier(name, quoted=True).sql("duckdb")
    vector = _VECTOR.match(kind)
    if kind in ("FLOAT", "DOUBLE") or (vector and vector.group(2) == "1"):
        if not _NUMBER.match(target_type):
            raise _bad_target(stmt, f"the model predicts numbers ({name} {kind}), but TARGET is {target_type}")
        return "regression", column + ("[1]" if vector else ""), None, ""
    if not (_INTEGER.match(kind) or kind in ("VARCHAR", "BOOLEAN")):
        raise _bad_target(stmt, f"the model's prediction {name} is {kind}: neither a class label nor a number")
    scale = _DECIMAL.match(target_type)
    cast = ("::BIGINT" if _INTEGER.match(kind) and (target_type == "BOOLEAN" or _WHOLE_DECIMAL.match(target_type)) else
            f"::DECIMAL(38,{scale.group(2)})" if _INTEGER.match(kind) and scale else  # (exact, as the target is)
            "::DOUBLE" if _INTEGER.match(kind) and _NUMBER.match(target_type) and not _INTEGER.match(target_type) else
            "::VARCHAR" if kind == "VARCHAR" and (target_type.startswith("ENUM(") or target_type == "UUID") else "")
    if _family(kind) != _family(target_type) and not cast:
        raise _bad_target(stmt, f"the model predicts class labels of type {kind} ({name}), but TARGET is "
                                f"{target_type}")
    # the vector named as probabilities, else the first
    vectors = [(o, n) for o, n, t in outputs if n != name and (_VECTOR.match(t) or _MAP.match(t))]
    probabilities = next((n for o, n in vectors if o.lower() in _PROBABILITY_NAMES), vectors[0][1] if vectors else None)
    return "classification", column, (exp.to_identifier(probabilities, quoted=True).sql("duckdb")
                                      if probabilities else None), cast


def _probabilities_read(probabilities: Optional[str], outputs: list[tuple[str, str]],
                        classes: Optional[list[Any]]) -> tuple[Optional[str], Optional[int]]:
    """How the probabilities column (quoted SQL) is read, and its width when fixed: a vector as it is; a map of
    each class's probability (ZipMap) as the list of its values in the order of the model's classes when it names
    them (integers or text: the map's keys), else in the map's own order."""
    if probabilities is None or not _MAP.match(_type_of(outputs, probabilities)):
        return probabilities, _width(outputs, probabilities)
    if classes and all(isinstance(c, str) or (isinstance(c, int) and not isinstance(c, bool)) for c in classes):
        keys = ["'" + c.replace("'", "''") + "'" if isinstance(c, str) else str(c) for c in classes]
        return f"list_value({', '.join(f'{probabilities}[{k}]' for k in keys)})", len(classes)
    return f"map_values({probabilities})", None


def _read_as(task: str, target_type: str) -> str:
    """How a classifier's TARGET of 128-bit integers is read: as a decimal of 38 digits (Arrow has no 128-bit
    integer; DuckDB would hand it over as one, or as raw bytes with ``arrow_lossless_conversion``)."""
    return "::DECIMAL(38,0)" if task == "classification" and target_type in ("HUGEINT", "UHUGEINT") else ""


def _width(outputs: list[tuple[str, str]], probabilities: Optional[str]) -> Optional[int]:
    """The probabilities' width when their type fixes it (``FLOAT[3]``), else None."""
    vector = _VECTOR.match(_type_of(outputs, probabilities))
    return int(vector.group(2)) if vector and vector.group(2) else None


def _type_of(outputs: list[tuple[str, str]], probabilities: Optional[str]) -> str:
    """The DuckDB type of the probabilities column (quoted SQL ``probabilities``), "" without one."""
    return next((t for n, t in outputs if exp.to_identifier(n, quoted=True).sql("duckdb") == probabilities), "")


def _family(sql_type: str) -> str:
    return "integer" if _INTEGER.match(sql_type) else sql_type


def _bad_target(stmt: EvaluateModel, why: str) -> ProgrammingError:
    return ProgrammingError(f"{where_of(stmt)}: {why}.", code="invalid_target")


def bind_evaluate(stmt: EvaluateModel, session: Session, params: list) -> EvaluatePlan:
    """The plan of an EVALUATE (nothing runs but DuckDB's description of the input and of the PREDICT).

    Raises:
        ProgrammingError: the options (``unknown_option``, ``invalid_option``), the model
            (``model_not_found``, ``version_not_found``), the TARGET (``column_not_found``, ``invalid_target``),
            the features (``column_not_found``, ``invalid_feature``) and PREDICT's binding errors.
    """
    ref = stmt.this
    options = EVALUATE.parse(stmt, params, where=where_of(stmt))
    pipeline = bool(ref.args.get("pipeline"))
    entry = session.get_model(ref.model_name, ref.version_number, ref, pipeline=pipeline)
    if _clusterer(entry):
        raise _bad_target(stmt, f"{entry.name} version {entry.version} is a clusterer: its labels number clusters, "
                                "not classes, so there is no TARGET to compare them with")
    source = stmt.args["source"]
    check_query_columns(session, source, params, where_of(stmt))  # a TARGET "A" beside a column a: which?
    columns = _input_columns(session, source, params)
    target, target_type = _target(stmt, entry, columns, session)
    if target_type.strip('"') == "NULL":
        raise DataError(f"{where_of(stmt)}: TARGET {target} is NULL in every row: every row evaluated needs its "
                        "true value.", code="null_target")
    features = _features(stmt, entry, columns, target, options, session)
    _check_target_not_fed(stmt, entry, features, target)
    names = [n for n, _ in columns]
    taken = [*names, *(i.name for i in entry.inputs), *(entry.features or ())]
    row_hash = queries.hash_column(taken)
    read_target = _target_column(entry, target, [*taken, row_hash])
    renamed = (target, read_target) if read_target != target else None
    predict = _predict_node(stmt, entry.version, features, options["on_null"], names, row_hash, renamed)
    predict_sql = predict.sql(dialect=msql.DIALECT)
    # the PREDICT's columns as its binding names them (nothing planned: the query plans it once, and raises its
    # binding errors then)
    bound = bind_outputs(entry, [read_target if n == target else n for n in names] + [row_hash])
    outputs = [(o.column, o.duckdb_type) for o in bound]
    named = [(o.output_name, o.column, o.duckdb_type) for o in bound]
    task, prediction, probabilities, cast = _prediction(stmt, named, target_type)
    _check_task_options(stmt, task, options)
    classes = _model_classes(session, entry) if task == "classification" else None
    if cast == "::DOUBLE" and any(isinstance(c, int) and abs(c) > 2 ** 53 for c in classes or ()):
        raise _bad_target(stmt, f"TARGET {target} is {target_type}, which cannot tell {entry.name}'s class labels "
                                f"apart (past 2**53: {next(c for c in classes or () if abs(c) > 2 ** 53)}); cast it "
                                "to BIGINT in the input")
    read, width = _probabilities_read(probabilities, outputs, classes)
    predicted = queries.Predicted(predict_sql, exp.to_identifier(read_target, quoted=True).sql("duckdb"), prediction,
                                  read, row_hash if names else "", cast or _read_as(task, target_type), width,
                                  task == "classification" and _type_of(outputs, prediction) == "VARCHAR")
    return EvaluatePlan("pipeline" if pipeline else "model", entry.name, entry.version, task, target,
                        input_text(source), predicted, options, classes, cast[2:] if cast else target_type)


def _target_column(entry: Any, target: str, taken: list[str]) -> str:
    """The name the TARGET goes by in the PREDICT's input: its own, unless a model output of that name (or
    ``predicted_<output>``, the name PREDICT gives an output whose name an input column has) would clash with it:
    then a free name (``__msql_t``). The TARGET is never fed to the model (:func:`_check_target_not_fed`), so a
    target named ``label`` beside a feature named ``predicted_label`` is evaluated as any other."""
    clashing = {n for o in entry.outputs for n in (o.name.lower(), f"predicted_{o.name}".lower())}
    return queries.hash_column(taken, base="__msql_t") if target.lower() in clashing else target


def input_text(source: exp.Expression) -> str:
    """An evaluation's input as it is recorded: ``TABLE t``, or the query as written."""
    text = source.sql(dialect=msql.DIALECT)
    return f"TABLE {text}" if isinstance(source, exp.Table) else text


def _clusterer(entry: Any) -> bool:
    """The model (a pipeline's last step) is a clusterer: trained in SQL as one, or converted from a scikit-learn
    clusterer (skl2onnx names a clusterer's outputs ``label`` and ``scores``; a classifier's are renamed
    ``label`` and ``probabilities`` by :mod:`modelsql.converters.sklearn`)."""
    model = entry.steps[-1].model if hasattr(entry, "steps") else entry
    if dict(getattr(model, "options", ()) or ()).get("task") == "clustering":
        return True
    outputs = tuple(o.name for o in getattr(model, "outputs", ()))
    return str(getattr(model, "source", "")).startswith("sklearn:") and outputs == ("label", "scores")


def _check_task_options(stmt: EvaluateModel, task: str, options: OptionValues) -> None:
    """A classifier's options given to a regressor are an error, not silently ignored."""
    if task == "regression":
        given = next((k for k in ("average", "positive", "threshold") if options[k] is not None), None)
        if given is not None:
            raise option_error(given, f"{where_of(stmt)} option {given} applies to a classifier; the model predicts "
                                      "numbers.")


def _model_classes(session: Session, entry: Any) -> Optional[list[Any]]:
    """The classes a classifier names in its graph, in its probabilities' order: a classifier node's labels,
    else the table its label is gathered from (one tensor read from the store); None when it names none."""
    if not isinstance(entry, ModelVersion) or entry.kind == "python":
        return None
    recorded = dict(entry.options).get("classes")  # an estimator's classes_, kept when it was converted
    if recorded is not None:
        return list(json.loads(recorded))
    graph = session.store.get(entry.graph_digest)
    proto = onnx.ModelProto.FromString(graph)
    named = class_labels(proto)
    table = label_table(proto) if named is None else None
    stored = next((t for t in entry.tensors if t.name == table), None) if table is not None else None
    if stored is None:
        return named
    values = initializer_value(graph, stored.name, session.store.get(stored.digest))
    return [v.decode("utf-8") if isinstance(v, bytes) else v.item() if isinstance(v, np.generic) else v
            for v in values.ravel()]


