"""FINETUNE's options and data: training, validation and test rows, with targets read as the pipeline's task.

The task is the pipeline's, not the target column's type: a pipeline whose last step has a label output
of known classes is a classifier, and the target's values (integers, text, or floating-point values that
are whole numbers) must be among those classes; any other pipeline is a one-output regressor. Features
are the ``features`` option's columns, else the pipeline's own feature columns when it has them, else the
training input's columns other than the target and the keys, by PREDICT's rules
(:mod:`~modelsql.engine.training_features`: ``id``, ``*_id``, a PRIMARY KEY ... are never fed); the
validation and test tables are read by those column names, and the fine-tuned model records them as its
features.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import numpy as np

from modelsql.errors import DataError, Error, ProgrammingError
from modelsql.engine.options.declared import FINETUNE
from modelsql.engine.training_features import check_query_columns, feature_option, input_keys
from modelsql.engine.tune.statements import relation_sql
from modelsql.engine.tune.checks import training_device
from modelsql.engine.tune.data import feature_columns, feature_matrix, read_table, split_rows, target_values

if TYPE_CHECKING:
    from modelsql.engine.session import Session

__all__ = ["OPTIONS", "FinetuneData", "finetune_options", "read_data", "read_test"]

OPTIONS = FINETUNE
"""Options of FINETUNE PIPELINE (:data:`modelsql.engine.options.declared.FINETUNE`)."""


@dataclass(frozen=True)
class FinetuneData:
    """Rows to fine-tune on.

    Attributes:
        x, x_val: float32 (N, F) / (M, F).
        y, y_val: class indices into the pipeline's classes (int64) or targets (float32).
        labels_val: the validation rows' label values (classification), else None.
        features: the feature columns, in order.
    """

    x: np.ndarray
    y: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    labels_val: Optional[np.ndarray]
    features: tuple


def renamed(err: Error) -> Error:
    """A data error of the shared TUNE readers, as FINETUNE's."""
    text = str(err)
    text = "FINETUNE" + text[4:] if text.startswith("TUNE") else text
    return type(err)(text, code=err.code)


def finetune_options(stmt, params: list) -> dict:
    """The WITH options (:data:`OPTIONS`), checked; ``device`` resolved (:func:`~modelsql.engine.tune.checks.
    training_device`), ``features`` column names or None, not the TARGET (see
    :func:`~modelsql.engine.training_features.feature_option`).

    Raises:
        ProgrammingError: ``duplicate_option``, ``unknown_option``, ``invalid_option``.
        NotSupportedError: ``parameter_not_supported`` (a ``?`` in an option), ``device_not_available``.
    """
    where = f"FINETUNE PIPELINE {stmt.this.model_name}"
    options = dict(OPTIONS.parse(stmt, params, where=where))
    options["device"] = training_device(options["device"], where)
    options["features"] = feature_option(options["features"], stmt.args["target"].name, where)
    return options


def _targets(values: np.ndarray, classes: Optional[list], what: str) -> np.ndarray:
    """Target values as class indices (classification) or float32 (regression)."""
    if classes is None:
        try:
            return np.asarray(values, dtype=np.float32)
        except (TypeError, ValueError):
            raise DataError(f"FINETUNE: the pipeline is a regressor but the {what} target holds "
                            f"{np.asarray(values).dtype} values", code="invalid_target") from None
    index = {c: i for i, c in enumerate(classes)}
    out = np.empty(len(values), np.int64)
    for row, v in enumerate(values.tolist()):
        key = int(v) if isinstance(v, float) and float(v).is_integer() else v
        if key not in index:
            raise DataError(f"FINETUNE: {what} row {row} has label {v!r}, not a class of the pipeline "
                            f"({', '.join(map(str, classes))})", code="unknown_label")
        out[row] = index[key]
    return out


def read_data(session: Session, stmt, pv, options: dict, params: list, classes: Optional[list]) -> FinetuneData:
    """Training and validation rows of ``FINETUNE ... ON ... [VALIDATE ON ...] TARGET y`` (``classes``: the
    pipeline's classes, None for a regressor).

    Raises:
        ProgrammingError: ``column_not_found``, ``feature_mismatch``, ``invalid_feature`` (no column but the
            target and keys). DataError: NULLs, labels that are not classes of the pipeline, too few rows.
    """
    target = stmt.args["target"].name
    try:
        train_sql = relation_sql(stmt.args["train"], "ON", "FINETUNE")  # (refuses a PREDICT in it first)
        check_query_columns(session, stmt.args["train"], params, "FINETUNE ON")
        train = read_table(session, train_sql, params, "ON")
        features = feature_columns(train, target, options["features"] or pv.steps[0].model.features,
                                   input_keys(session, stmt.args["train"]))
        x, raw = feature_matrix(train, features, "training"), target_values(train, target, "training")
        validate = stmt.args.get("validate")
        if validate is not None:
            validate_sql = relation_sql(validate, "VALIDATE ON", "FINETUNE")
            check_query_columns(session, validate, params, "FINETUNE VALIDATE ON")
            val = read_table(session, validate_sql, params, "VALIDATE ON")
            feature_columns(val, target, features)
            x_val, raw_val = feature_matrix(val, features, "validation"), target_values(val, target, "validation")
        else:
            x, raw, x_val, raw_val = split_rows(x, raw, options["validation_fraction"], options["seed"])
    except Error as err:
        raise renamed(err) from None
    _check_width(pv, x, features)
    y, y_val = _targets(raw, classes, "training"), _targets(raw_val, classes, "validation")
    labels_val = np.asarray([classes[i] for i in y_val]) if classes is not None else None
    return FinetuneData(x, y, x_val, y_val, labels_val, tuple(features))


def read_test(session: Session, table: Optional[str], features: tuple, target: str, classes: Optional[list]):
    """(x, targets, label values or None) of the ``test`` table, read by the training features, or None."""
    if table is None:
        return None
    try:
        rows = read_table(session, f'SELECT * FROM "{table}"', [], f"option test ({table})")
        feature_columns(rows, target, features)
        x, raw = feature_matrix(rows, list(features), "test"), target_values(rows, target, "test")
    except Error as err:
        raise renamed(err) from None
    y = _targets(raw, classes, "test")
    return x, y, (np.asarray([classes[i] for i in y]) if classes is not None else None)


def _check_width(pv, x: np.ndarray, features) -> None:
    shape = pv.inputs[0].shape
    width = shape[1] if shape and len(shape) > 1 else None
    if isinstance(width, int) and x.shape[1] != width:
        raise ProgrammingError(f'FINETUNE PIPELINE {pv.name}: the input has {x.shape[1]} feature columns '
                               f"({', '.join(features)}) but the pipeline takes {width}", code="feature_mismatch")
