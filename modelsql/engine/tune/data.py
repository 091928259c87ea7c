"""A study's training data, read from DuckDB: ``ON TABLE t | (query)``, ``VALIDATE ON ...``, ``TARGET c``.

Features are the columns PREDICT would feed (:mod:`~modelsql.engine.training_features`: the ``features``
option's, in order, else every column but the target and the keys: ``id``, ``*_id``, a PRIMARY KEY ...):
numeric columns, or one array column (``FLOAT[]`` / ``FLOAT[64]``) whose every row has the same length;
all become one float32 matrix (N, F). Or they are a table of trees: two list columns, node values and integer parent
indices (-1 for the root), which become a :class:`~modelsql.recursive.trees.Trees` the factory's network
takes whole (a recursive model, run by the level-batched executor). A target of integers, booleans or strings is a class label (classification:
the labels are the sorted distinct training values, fed to training as indices); a floating-point
target is regression. Without ``VALIDATE ON``, ``validation_fraction`` of the rows (default 0.2),
drawn with the study seed, are held out. The rows are read in the order DuckDB returns them (a
table's insertion order), and the arrays' digest is part of the stage-tree key: other data, or the
same rows in another order, train in another tree.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Sequence

import numpy as np
import pyarrow as pa

from modelsql import sql as msql
from modelsql.errors import DataError, ProgrammingError
from modelsql.engine.evaluate.recording import hashes_fingerprint, split_row_hash
from modelsql.engine.tune.columns import column_numpy
from modelsql.engine.query.bind_statement import renumber
from modelsql.recursive.trees import Trees
from modelsql.tuning.training import TrainData
from modelsql.engine.training_features import training_features

if TYPE_CHECKING:
    from modelsql.engine.session import Session

__all__ = ["StudyData", "load_study_data", "read_table", "read_rows", "feature_columns", "feature_matrix",
           "target_values", "split_rows", "held_out"]


@dataclass(frozen=True)
class StudyData:
    """The arrays and what they came from: ``features`` (column names, or the array column's name),
    ``labels`` (classification), ``digest`` (SHA-256 of every array, in the tree key), ``train_fingerprint`` and
    ``validate_fingerprint``: EVALUATE's fingerprint of the ON rows read and of the validation rows (VALIDATE ON's,
    or those held out of ON), every column (:func:`~modelsql.engine.evaluate.recording.hashes_fingerprint`)."""

    data: TrainData
    features: tuple[str, ...]
    labels: Optional[tuple]
    digest: str
    train_fingerprint: Optional[str] = None
    validate_fingerprint: Optional[str] = None


def read_table(session: Session, sql: str, params: Sequence, what: str) -> pa.Table:
    """The rows of ``sql`` (``$k``: the statement's ``params[k - 1]``, of which ON and VALIDATE ON each use some).

    Raises:
        the DuckDB error, translated and named for ``what`` (``ON``, ``VALIDATE ON``).
    """
    return read_rows(session, sql, params, what)[0]


def read_rows(session: Session, sql: str, params: Sequence, what: str,
              row_hash: bool = False) -> tuple[pa.Table, dict[str, str], np.ndarray]:
    """:func:`read_table`'s rows, each column's DuckDB type and (``row_hash``) each row's hash over every column,
    computed by DuckDB as it reads them (uint64; empty without ``row_hash``)."""
    values: list = []
    if params:
        sql, used = renumber(msql.parse(sql)[0])
        values = [params[k - 1] for k in used]

    def named(exc: BaseException):  # the DuckDB error, named for the clause it came from
        from modelsql.duckdb_errors import translate

        err = translate(exc)
        return type(err)(f"TUNE {what}: {err}", code=err.code)

    table, description = session.run_arrow(sql, values, named, row_hash=row_hash)
    types = {str(d[0]): str(d[1]) for d in description}
    if not row_hash:
        return table, types, np.zeros(0, dtype=np.uint64)
    rows, hashes = split_row_hash(table)
    return rows, types, hashes


def load_study_data(session: Session, train_sql: str, validate_sql: Optional[str], target: str,
                    features: Optional[Sequence[str]], validation_fraction: float, seed: int,
                    params: Sequence = (), keys: Sequence[str] = ()) -> StudyData:
    """Read and check the data of a study. ``features``: the ``features`` option's columns, or None for every
    column but the target and the key-like ones (``keys``: the ON table's PRIMARY KEY and UNIQUE columns).

    Raises:
        ProgrammingError: ``column_not_found`` (the target or a feature), ``invalid_feature`` (a column
            that is not numeric or an equal-length array).
        DataError: ``null_value`` (a NULL feature or target, naming the column and row),
            ``unknown_label`` (a validation label not among the training labels), ``too_few_rows``.
    """
    train, _, hashes = read_rows(session, train_sql, params, "ON", row_hash=True)
    if train.num_rows < 2:
        raise DataError(f"TUNE: ON gives {train.num_rows} row(s): too few to train on", code="too_few_rows")
    cols = feature_columns(train, target, features, keys)
    x, y = feature_matrix(train, cols, "training"), target_values(train, target, "training")
    if validate_sql is not None:
        val, _, validate_hashes = read_rows(session, validate_sql, params, "VALIDATE ON", row_hash=True)
        feature_columns(val, target, cols)
        if val.num_rows == 0:
            raise DataError("TUNE: VALIDATE ON gives no rows", code="too_few_rows")
        x_val, y_val = feature_matrix(val, cols, "validation"), target_values(val, target, "validation")
        if isinstance(x, Trees) and isinstance(x_val, Trees) and len(x_val) and x_val.shape[1] != x.shape[1]:
            raise DataError(f"TUNE: validation trees have {x_val.shape[1]} values per node, training trees "
                            f"{x.shape[1]}", code="invalid_feature")
    else:
        x, y, x_val, y_val = split_rows(x, y, validation_fraction, seed)
    labels = None
    if y.dtype.kind in "iubUO":
        labels = tuple(sorted(set(y.tolist())))
        unknown = sorted(set(y_val.tolist()) - set(labels), key=str)
        if unknown:
            raise DataError(f"TUNE: validation label {unknown[0]!r} of {target} is not among the training labels",
                            code="unknown_label")
        if len(labels) < 2:
            raise _about_target(DataError(f"TUNE: TARGET {target} has one class ({labels[0]!r}) in the training "
                                          "rows: there is nothing to learn", code="one_class"))
        index = {v: i for i, v in enumerate(labels)}
        y = np.array([index[v] for v in y.tolist()], np.int64)
        y_val = np.array([index[v] for v in y_val.tolist()], np.int64)
        task, n_outputs = "classification", len(labels)
    else:
        y, y_val = y.astype(np.float32), y_val.astype(np.float32)
        task, n_outputs = "regression", 1
    data = TrainData(x, y, x_val, y_val, task, n_outputs)
    held = validate_hashes if validate_sql is not None else hashes[held_out(len(hashes), validation_fraction, seed)[0]]
    return StudyData(data, tuple(cols), labels, _digest(data, labels), hashes_fingerprint(hashes),
                     hashes_fingerprint(held))


def _about_target(err):
    """``err``, marked as being about the TARGET column (``err.target``), so the statement's error points at it."""
    err.target = True
    return err


def feature_columns(table: pa.Table, target: str, features: Optional[Sequence[str]],
                    keys: Sequence[str] = ()) -> list[str]:
    """The TARGET checked, then the feature columns by PREDICT's rules
    (:func:`~modelsql.engine.training_features.training_features`: ``features``, else every column but the
    target and the keys).

    Raises:
        ProgrammingError: ``column_not_found`` (the target or a feature), ``invalid_feature`` (no column left).
    """
    names = {n.lower(): n for n in table.column_names}
    if target.lower() not in names:
        raise _about_target(ProgrammingError(f'TUNE: TARGET column "{target}" not found; columns are: '
                                             f"{', '.join(table.column_names)}", code="column_not_found"))
    return training_features(table.column_names, target, features, keys)


def _is_array(table: pa.Table, cols: list[str]) -> bool:
    return len(cols) == 1 and (pa.types.is_list(table.schema.field(cols[0]).type)
                               or pa.types.is_fixed_size_list(table.schema.field(cols[0]).type))


def _tree_columns(table: pa.Table, cols: list[str]) -> Optional[tuple[str, str]]:
    """(values column, parents column) when the features are a table of trees: two list columns, one of
    integers (the parent indices; named ``parents`` when both are), else None."""
    if len(cols) != 2 or not all(pa.types.is_list(table.schema.field(c).type) for c in cols):
        return None
    ints = [c for c in cols if pa.types.is_integer(table.schema.field(c).type.value_type)]
    if len(ints) == 2:
        ints = [c for c in cols if c.lower() == "parents"]
    if len(ints) != 1:
        return None
    return next(c for c in cols if c != ints[0]), ints[0]


def _trees(table: pa.Table, columns: tuple[str, str], what: str) -> Trees:
    """The rows of a table of trees (see :class:`~modelsql.recursive.trees.Trees`)."""
    values_col, parents_col = columns
    for name in columns:
        _no_nulls(table.column(name), name, what)
    values = table.column(values_col).to_pylist()
    parents = table.column(parents_col).to_pylist()
    for name, rows in ((values_col, values), (parents_col, parents)):
        for row, items in enumerate(rows):
            if any(v is None or (isinstance(v, list) and None in v) for v in items):
                raise DataError(f'TUNE: {what} row {row} has a NULL element in list column "{name}"',
                                code="null_value")
    try:
        trees = Trees(values, parents)
    except DataError as exc:
        raise DataError(f"TUNE: {what} {exc} (columns {values_col}, {parents_col})", code=exc.code) from None
    except ValueError as exc:  # nested node values of different lengths
        raise DataError(f'TUNE: {what} column "{values_col}" holds node values of different lengths ({exc})',
                        code="invalid_feature") from None
    widths = {v.shape[1:] for v in trees.values}
    if len(widths) > 1:
        row = next(k for k, v in enumerate(trees.values) if v.shape[1:] != trees.values[0].shape[1:])
        raise DataError(f'TUNE: {what} row {row} of column "{values_col}" has nodes of shape '
                        f"{list(trees.values[row].shape[1:])}, row 0 has {list(trees.values[0].shape[1:])}",
                        code="invalid_feature")
    for k, v in enumerate(trees.values):
        _finite(v.reshape(1, -1), values_col, f"{what} row {k}:")
    return trees


def feature_matrix(table: pa.Table, cols: list[str], what: str):
    if not cols:
        raise ProgrammingError("TUNE: no feature columns (the input has only the target)", code="invalid_feature")
    tree = _tree_columns(table, cols)
    if tree is not None:
        return _trees(table, tree, what)
    if _is_array(table, cols):
        return _array_column(table.column(cols[0]).combine_chunks(), cols[0], what)
    out = np.empty((table.num_rows, len(cols)), np.float32)
    for j, name in enumerate(cols):
        column = table.column(name)
        if not (pa.types.is_integer(column.type) or pa.types.is_floating(column.type)
                or pa.types.is_boolean(column.type) or pa.types.is_decimal(column.type)):
            raise ProgrammingError(f'TUNE: feature column "{name}" is {column.type}, not a number; name the '
                                   "numeric columns with WITH (features = (...))", code="invalid_feature")
        _no_nulls(column, name, what)
        out[:, j] = column_numpy(column).astype(np.float32)
        _finite(out[:, j], name, what)
    return out


def _finite(values: np.ndarray, name: str, what: str) -> None:
    bad = ~np.isfinite(values)
    if bad.any():
        row = int(np.argmax(bad.reshape(len(values), -1).any(axis=1)))
        raise DataError(f'TUNE: {what} row {row} of column "{name}" holds NaN or infinity (or a value past float32)',
                        code="invalid_value")


def _array_column(column, name: str, what: str) -> np.ndarray:
    _no_nulls(column, name, what)
    lengths = column_numpy(column.value_lengths()) if hasattr(column, "value_lengths") else None
    if lengths is not None and len(lengths) and (lengths != lengths[0]).any():
        row = int(np.argmax(lengths != lengths[0]))
        raise DataError(f'TUNE: {what} row {row} of array column "{name}" has {lengths[row]} values, row 0 has '
                        f"{lengths[0]}", code="invalid_feature")
    values = column.flatten()
    if values.null_count:
        raise DataError(f'TUNE: {what} array column "{name}" holds a NULL element', code="null_value")
    width = int(lengths[0]) if lengths is not None and len(lengths) else column.type.list_size
    out = column_numpy(values).astype(np.float32).reshape(len(column), width)
    _finite(out, name, what)
    return out


def _no_nulls(column, name: str, what: str) -> None:
    if column.null_count:
        row = int(np.argmax(np.asarray(column.is_null().to_numpy(zero_copy_only=False))))
        raise DataError(f'TUNE: {what} row {row} has a NULL in column "{name}"', code="null_value")


def target_values(table: pa.Table, target: str, what: str) -> np.ndarray:
    name = next(n for n in table.column_names if n.lower() == target.lower())
    column = table.column(name)
    kind = column.type
    if not (pa.types.is_integer(kind) or pa.types.is_boolean(kind) or pa.types.is_string(kind)
            or pa.types.is_large_string(kind) or pa.types.is_floating(kind) or pa.types.is_decimal(kind)):
        raise _about_target(ProgrammingError(
            f'TUNE: TARGET column "{name}" is {kind}: a target is a class label (integer, boolean or text) or a '
            "number to regress (floating point or decimal)", code="invalid_target"))
    _no_nulls(column, name, what)
    values = column_numpy(column)
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return values.astype(object)
    if pa.types.is_decimal(kind):
        values = values.astype(np.float64)
    if values.dtype.kind == "f" and not np.isfinite(values).all():
        row = int(np.argmax(~np.isfinite(values)))
        raise DataError(f'TUNE: {what} row {row} has {values[row]} in TARGET column "{name}"', code="invalid_value")
    return values


def split_rows(x, y, fraction: float, seed: int):
    """The rows ``x``, ``y`` split into training and validation rows (:func:`held_out`)."""
    val, train = held_out(len(x), fraction, seed)
    return x[train], y[train], x[val], y[val]


def held_out(n: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The positions of the validation rows and of the training rows among ``n``: ``fraction`` of them drawn with
    ``seed`` (NumPy's ``RandomState(seed).permutation``).

    Raises:
        ProgrammingError: ``invalid_option`` (a fraction outside (0, 1)); DataError: ``too_few_rows``.
    """
    if not 0 < fraction < 1:
        raise ProgrammingError(f"TUNE: validation_fraction must be in (0, 1), got {fraction}", code="invalid_option")
    n_val = int(round(n * fraction))
    if n_val < 1 or n - n_val < 1:
        raise DataError(f"TUNE: {n} rows cannot be split into training and validation rows", code="too_few_rows")
    order = np.random.RandomState(seed).permutation(n)
    return order[:n_val], order[n_val:]


def _digest(data: TrainData, labels) -> str:
    h = hashlib.sha256()
    for array in (data.x, data.y, data.x_val, data.y_val):
        if isinstance(array, Trees):
            h.update(b"trees" + array.digest())
            continue
        h.update(str((array.dtype.str, array.shape)).encode())
        h.update(np.ascontiguousarray(array).tobytes())
    h.update(repr((data.task, data.n_outputs, labels)).encode())
    return h.hexdigest()
