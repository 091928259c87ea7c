"""The rows a model trained in SQL learns from: the query's columns bound as features and target, as arrays.

The feature columns are chosen by PREDICT's rules (:func:`~modelsql.engine.training_features.training_features`:
``features = (...)``, else every column but the target and the key-like ones), each encoded by its type
(:func:`modelsql.estimators.column_kind`); the target is read for the task: a classifier's class labels
(integers, text, booleans, or floats that are all whole numbers, read as integers), a regressor's
numbers. Features are numbers (finite, and exact enough as float32, the type PREDICT feeds) or text (VARCHAR,
ENUM); the names of the trained graph's outputs are refused as feature names. A NULL in a feature or the target
is an error naming the column (``on_null = 'skip'`` leaves those rows out), as PREDICT's and EVALUATE's are, but in
an imputed feature (``on_null = 'impute'``: every feature; or one an ``ML.IMPUTER`` reads), which the model's
preprocessing fills (:mod:`modelsql.estimators.preprocessing`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from modelsql.errors import DataError, NotSupportedError, ProgrammingError, did_you_mean
from modelsql.estimators import NULL_CATEGORY, ColumnKinds, column_kind
from modelsql.estimators.transforms import null_category_rows
from modelsql.estimators.preprocessing import MAX_CATEGORIES
from modelsql.engine.evaluate.recording import split_row_hash
from modelsql.engine.query_handler import run_query
from modelsql.engine.training_features import check_column_names, feature_option, training_features

if TYPE_CHECKING:
    from sqlglot import exp

    from modelsql.engine.session import Session

__all__ = ["TrainingRows", "query_rows", "training_rows", "find_column"]


@dataclass(frozen=True)
class TrainingRows:
    """The query's rows as an estimator takes them.

    Attributes:
        table: the feature columns, then the target (when there is one), NULL-free (Arrow, the query's order).
        kinds: the feature columns by encoding.
        target: the target column's name as the query spells it, or None (clustering).
        y: the target values (int64, float64 or object of ``str``), or None.
        skipped: rows left out for a NULL (``on_null = 'skip'``).
        imputed: the feature columns that may be NULL (imputed by the model), in the query's order.
        positions: the query's row (from 0) each row is, when rows were left out; None when every row is kept.
    """

    table: pa.Table
    kinds: ColumnKinds
    target: Optional[str]
    y: Optional[np.ndarray]
    skipped: int
    imputed: tuple[str, ...] = ()
    positions: Optional[np.ndarray] = None

    def query_rows(self, rows: np.ndarray) -> np.ndarray:
        """The query's rows (positions from 0) that ``rows`` (positions in :attr:`table`) are."""
        return rows if self.positions is None else self.positions[rows]

    @property
    def features(self) -> tuple[str, ...]:
        """The feature columns in the query's order (``kinds.columns`` has the numeric ones first)."""
        return tuple(c for c in self.table.column_names if c != self.target)

    def check_imputed(self, rows: np.ndarray, statement: str) -> None:
        """Each imputed column has a value in ``rows`` (positions: the rows the model is fitted on), the mean or
        category it learns.

        Raises:
            DataError: ``null_value``.
        """
        if not self.imputed:
            return
        part = self.table.select(list(self.imputed)).take(pa.array(rows, pa.int64()))
        empty = next((c for c in self.imputed if part.column(c).null_count == part.num_rows), None)
        if empty is not None:
            raise DataError(f'{statement}: column "{empty}" is NULL in every one of the {len(rows)} training rows: the '
                            "model has nothing to learn from it (nor a value to impute): leave it out of the "
                            "features (features = (...), or the TRANSFORM list) or filter the rows.", code="null_value")

    def features_frame(self, rows: np.ndarray) -> Any:
        """The feature columns of ``rows`` (positions) as a ``pandas.DataFrame``: numbers as float64 (NULL as NaN),
        text as ``str`` (NULL as :data:`~modelsql.estimators.NULL_CATEGORY`): what the pipeline is fitted on."""
        part = self.table.take(pa.array(rows, pa.int64()))
        columns = {c: pc.cast(part.column(c), pa.float64(), safe=False) for c in self.kinds.numeric}
        columns.update({c: pc.fill_null(part.column(c).cast(pa.string()), NULL_CATEGORY)
                        for c in self.kinds.categorical})
        frame = pa.table({c: columns[c] for c in self.kinds.columns}).to_pandas()
        for c in self.kinds.categorical:
            frame[c] = frame[c].astype(object)
        return frame


RESERVED = ("label", "probabilities", "prediction", "scores", "variable")
"""Names a feature column may not have: the trained graph's outputs and skl2onnx's inner values."""

_FLOAT32_MAX = float(np.finfo(np.float32).max)


def query_rows(session: Session, query: exp.Expression,
               params: list) -> tuple[pa.Table, dict[str, str], np.ndarray]:
    """The query's rows (PREDICT in it too), each column's DuckDB type and each row's hash over every column
    (uint64, :func:`~modelsql.engine.evaluate.recording.split_row_hash`: what the fingerprint of rows is summed
    from), read once in the connection's transaction (as a query is: a statement that trains commits only once it
    writes a version, as IMPORT MODEL does), written as Arrow by DuckDB
    (:func:`~modelsql.engine.query_handler.run_query` with ``arrow``)."""
    out, _, _ = run_query(query, session, params, arrow=True, row_hash=True)
    table, hashes = split_row_hash(out.table)
    return table, {str(d[0]): str(d[1]) for d in out.description or []}, hashes


def find_column(columns: Sequence[str], name: str, statement: str, what: str) -> str:
    """The column of ``columns`` named ``name`` (any case), as spelled there.

    Raises:
        ProgrammingError: ``column_not_found``, naming ``what`` (``"TARGET"``, ``"TRANSFORM"``) and the columns.
    """
    found = next((c for c in columns if c.lower() == name.lower()), None)
    if found is None:
        err = ProgrammingError(f'{statement}: {what} column "{name}" not found.{did_you_mean(name, columns)} '
                               f"Columns: {', '.join(columns)}.", code="column_not_found")
        err.option = "target" if what == "TARGET" else None  # (the statement's error points at its option)
        raise err
    return found


def _kind(table: pa.Table, name: str, sql_type: str, statement: str) -> str:
    """``"numeric"`` or ``"categorical"`` for a feature column of DuckDB type ``sql_type``.

    Raises:
        NotSupportedError: ``wrong_column_type`` (dates, lists, UUIDs, JSON ...).
        ProgrammingError: ``invalid_feature`` (a name of :data:`RESERVED`).
    """
    kind = column_kind(table.schema.field(name).type)
    if kind == "categorical" and not (sql_type == "VARCHAR" or sql_type.startswith("ENUM(")):
        kind = None  # UUID, JSON ... arrive as Arrow strings but are not categories PREDICT can feed
    if kind is None:
        raise NotSupportedError(
            f'{statement}: column "{name}" is {sql_type}, which no encoding takes (numbers, booleans, text and ENUMs '
            "do): compute a number or a category from it in the query (epoch(ts), len(list)) or leave it out of the "
            "features (features = (...), or the TRANSFORM list).", code="wrong_column_type")
    if name.lower() in RESERVED:
        raise ProgrammingError(f'{statement}: a feature column may not be named "{name}" (the trained model\'s '
                               f"outputs and inner values use {', '.join(RESERVED)}): rename it in the query (AS ...).",
                               code="invalid_feature")
    return kind


def _check_numbers(table: pa.Table, name: str, statement: str) -> None:
    """A numeric feature's values are finite and keep their differences as float32, the type PREDICT feeds the
    model (a value of 1.7e9, an epoch in seconds, is rounded to a multiple of 128): refused when the rounding
    exceeds a thousandth of the column's spread or merges more than 1% of its distinct values.

    Raises:
        DataError: ``invalid_value`` (NaN, infinite, past float32's range), ``precision_loss``.
    """
    values = _as_float64(pc.drop_null(table.column(name)))
    if not len(values):
        raise DataError(f'{statement}: column "{name}" is NULL in every row: the model has nothing to learn from it '
                        "(nor a value to impute): leave it out of the features (features = (...), or the TRANSFORM "
                        "list).", code="null_value")
    bad = ~np.isfinite(values) | (np.abs(values) > _FLOAT32_MAX)
    if bad.any():
        raise DataError(f'{statement}: column "{name}" is NaN, infinite or past float32\'s range in {int(bad.sum())} '
                        "rows: filter or fill them in the query.", code="invalid_value")
    loss = _float32_loss(values)
    if loss is not None:
        raise DataError(f'{statement}: column "{name}" loses precision as float32, the type the model reads ({loss}): '
                        f"subtract an offset or scale it in the query ({name} - {float(values.min()):.6g}).",
                        code="precision_loss")


def _float32_loss(values: np.ndarray, merges: bool = True) -> Optional[str]:
    """What rounding finite float64 ``values`` to float32 costs, for a message, when it exceeds a thousandth of their
    spread or (``merges``: a feature's values, each a distinct input) merges more than 1% of their distinct values;
    None when it does not."""
    single = values.astype(np.float32)
    spread = float(values.std())
    if spread <= 8 * np.finfo(np.float64).eps * float(np.abs(values).max()):
        spread = 0.0  # one value (std's own rounding of identical values, 2.8e-17 for 0.1, is no spread)
    error = float(np.abs(single.astype(np.float64) - values).max())
    if not ((spread > 0 and error > 1e-3 * spread) or (merges and error and _merges(values, single))):
        return None
    distinct, kept = _distinct_counts(values)
    return (f"values up to {float(np.abs(values).max()):.6g} round by up to {error:.3g}, against a spread of "
            f"{spread:.3g}; {distinct} distinct values become {kept}")


def _merges(values: np.ndarray, single: np.ndarray) -> bool:
    """Whether rounding to float32 (``single``, the values rounded) merges more than 1% of the distinct ``values``.
    The float32 values are counted first (a sort of half the bytes): when they keep 99% of the rows, they keep 99%
    of the distinct values, and the float64 values need no sort."""
    rounded = np.sort(single)
    if 1 + np.count_nonzero(rounded[1:] != rounded[:-1]) >= 0.99 * len(values):
        return False
    distinct, kept = _distinct_counts(values)
    return kept < 0.99 * distinct


def _distinct_counts(values: np.ndarray) -> tuple[int, int]:
    """(distinct values, distinct values once rounded to float32) of finite ``values``, with one sort: rounding is
    monotonic, so the sorted values stay sorted once rounded and equal values stay next to each other."""
    ordered = np.sort(values)
    rounded = ordered.astype(np.float32)
    return 1 + int(np.count_nonzero(ordered[1:] != ordered[:-1])), 1 + int(np.count_nonzero(rounded[1:] != rounded[:-1]))


def _kinds(table: pa.Table, features: list[str], types: dict[str, str], statement: str) -> ColumnKinds:
    numeric: list[str] = []
    categorical: list[str] = []
    for name in features:
        kind = _kind(table, name, types.get(name, str(table.schema.field(name).type)), statement)
        if kind == "numeric":
            _check_numbers(table, name, statement)
        (numeric if kind == "numeric" else categorical).append(name)
    for name in categorical:
        distinct = len(pc.unique(pc.drop_null(table.column(name))))
        if distinct > MAX_CATEGORIES:
            raise DataError(f'{statement}: text column "{name}" has {distinct} distinct values, more than the '
                            f"{MAX_CATEGORIES} one-hot encoding takes: it is free text or an identifier, not a category; "
                            "leave it out of the features (features = (...), or the TRANSFORM list).",
                            code="invalid_training_data")
    return ColumnKinds(tuple(numeric), tuple(categorical))


def _check_no_null_category(values: Any, column: str, where: str) -> None:
    """Text of an imputed column never is :data:`~modelsql.estimators.NULL_CATEGORY` itself, which stands for
    NULL there (the two would be one category).

    Raises:
        DataError: ``invalid_value``.
    """
    found = null_category_rows(values)
    if found:
        raise DataError(f'{where}: column "{column}" holds the text {NULL_CATEGORY!r} (U+2400) in {found} rows, which a '
                        "model that imputes the column reads as NULL: replace it in the query (replace(...)).",
                        code="invalid_value")


_NULL_HINTS = {"error": "write on_null = 'skip' to leave those rows out, on_null = 'impute' to impute them, or ",
               "refuse": "write WITH (on_null = 'impute') to impute them, filter them out or "}
"""What a NULL's error suggests, by ``on_null``: the statement's option (``'error'``), TUNE's (``'refuse'``);
otherwise (``'impute'``: a NULL target) to filter them out."""


def _drop_nulls(table: pa.Table, columns: list[str], on_null: str,
                statement: str) -> tuple[pa.Table, Optional[np.ndarray]]:
    """``table`` without the rows with a NULL in ``columns`` (``on_null = 'skip'``), and the positions of those kept
    (None: every row kept)."""
    nulls = {c: table.column(c).null_count for c in columns}
    bad = next((c for c in columns if nulls[c]), None)
    if bad is None:
        return table, None
    if on_null != "skip":
        hint = _NULL_HINTS.get(on_null, "filter them out or ")
        raise DataError(f'{statement}: column "{bad}" is NULL in {nulls[bad]} of {table.num_rows} rows: {hint}fill '
                        "them in the query (coalesce).", code="null_value")
    keep = pc.is_valid(table.column(columns[0]))
    for c in columns[1:]:
        keep = pc.and_(keep, pc.is_valid(table.column(c)))
    return table.filter(keep), np.flatnonzero(keep.to_numpy(zero_copy_only=False))


def _classes(values: pa.ChunkedArray, target: str, statement: str, sql_type: str = "") -> np.ndarray:
    """A classifier's TARGET as class labels (``sql_type``: its DuckDB type, as messages name it)."""
    arrow_type = values.type
    if pa.types.is_dictionary(arrow_type):
        values, arrow_type = values.cast(arrow_type.value_type), arrow_type.value_type
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type) or pa.types.is_string_view(arrow_type):
        return np.asarray(values.to_pylist(), dtype=object)
    if pa.types.is_boolean(arrow_type):  # the model then predicts BOOLEAN labels, as BigQuery ML's does
        return np.asarray(values.to_numpy(), dtype=bool)
    if pa.types.is_integer(arrow_type):
        return _int64_classes(values, target, statement)
    if pa.types.is_floating(arrow_type) or pa.types.is_decimal(arrow_type):
        numbers = _as_float64(values)
        fractional = numbers[~np.isfinite(numbers) | (numbers != np.round(numbers))]
        if fractional.size:
            raise DataError(f"{statement}: TARGET {target} has values that are not class labels ({fractional[0].item()} "
                            "is not a whole number): a classifier predicts classes; train a regressor "
                            "(model_type = 'linear_reg', ...) to predict numbers.", code="invalid_target")
        if pa.types.is_decimal(arrow_type):  # (a HUGEINT is read as DECIMAL(38, 0)): exactly, or refused
            return _int64_classes(values, target, statement)
        past = numbers[np.abs(numbers) >= 2.0 ** 63]
        if past.size:
            raise _past_int64(target, statement, past[0].item())
        return numbers.astype(np.int64)
    raise DataError(f"{statement}: TARGET {target} is {sql_type or arrow_type}; a classifier's classes are integers, text or "
                    "booleans.", code="invalid_target")


def _int64_classes(values: pa.ChunkedArray, target: str, statement: str) -> np.ndarray:
    """Integer (or whole-number DECIMAL) class labels as int64, exactly (a UBIGINT past 2**63 or a HUGEINT past
    int64 cannot be one of the model's classes, which ONNX keeps as int64: it would become another class).

    Raises:
        DataError: ``invalid_target``, naming a label past the range.
    """
    try:
        return np.asarray(pc.cast(values, pa.int64()).to_numpy(), dtype=np.int64)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise _past_int64(target, statement, float(np.abs(_as_float64(values)).max())) from None


def _past_int64(target: str, statement: str, label: float) -> DataError:
    """The refusal of a class label past int64 (``label``: one, or the largest in magnitude, as float64)."""
    return DataError(f"{statement}: TARGET {target} has a class label past the 64-bit integer range ({label:.6g}), "
                     "which a classifier's classes cannot hold exactly (ONNX keeps them as int64): cast it to "
                     "VARCHAR in the query to train on text classes.", code="invalid_target")


def _as_float64(values: pa.ChunkedArray) -> np.ndarray:
    """Numbers as float64, rounded where they must be (an integer past 2**53, a wide DECIMAL), as NumPy rounds
    them: the checks that follow judge what the rounding does (pyarrow's checked cast raised its own error)."""
    return np.asarray(pc.cast(values, pa.float64(), safe=False).to_numpy(), dtype=np.float64)


def _numbers(values: pa.ChunkedArray, target: str, statement: str, sql_type: str = "") -> np.ndarray:
    """A regressor's TARGET as float64 (``sql_type``: its DuckDB type, as messages name it)."""
    arrow_type = values.type
    if not (pa.types.is_integer(arrow_type) or pa.types.is_floating(arrow_type) or pa.types.is_decimal(arrow_type)):
        raise DataError(f"{statement}: TARGET {target} is {sql_type or arrow_type}; a regressor predicts numbers (train a "
                        "classifier for classes).", code="invalid_target")
    numbers = _as_float64(values)
    bad = ~np.isfinite(numbers) | (np.abs(numbers) > _FLOAT32_MAX)
    if bad.any():
        raise DataError(f"{statement}: TARGET {target} is NaN, infinite or past float32's range (the type the model "
                        f"predicts) in {int(bad.sum())} rows: filter or scale them in the query.", code="invalid_value")
    loss = _float32_loss(numbers, merges=False)  # (a prediction off by a thousandth of the spread is no loss)
    if loss is not None:  # the model's predictions are float32: they could not tell these values apart
        raise DataError(f"{statement}: TARGET {target} loses precision as float32, the type the model predicts "
                        f"({loss}): subtract an offset or scale it in the query ({target} - "
                        f"{float(numbers.min()):.6g}).", code="precision_loss")
    return numbers


def training_rows(table: pa.Table, *, types: dict[str, str], task: str, target: Optional[str],
                  features: Optional[tuple[str, ...]], on_null: str, statement: str,
                  imputed: Sequence[str] = ()) -> TrainingRows:
    """Bind ``table`` (the query's rows; ``types`` their DuckDB types) for an estimator of ``task``. Keys are
    known by their names (as PREDICT's for a query: ``id``, ``*_id`` ...); the table's target column is
    replaced by the values read (a whole-number DOUBLE target becomes BIGINT), so an evaluation compares them
    with the model's classes. ``on_null``: ``'error'`` (the statement's option, which the message names),
    ``'skip'``, ``'impute'`` (every feature may be NULL) or ``'refuse'`` (a statement without the option);
    ``imputed``: features that may be NULL whatever ``on_null`` (those an ``ML.IMPUTER`` reads).

    Raises:
        ProgrammingError: ``duplicate_column``, ``column_not_found`` (the target, a feature), ``invalid_option``
            (features naming the target), ``invalid_feature`` (no feature left, or one of a reserved name).
        NotSupportedError: ``wrong_column_type`` (a feature of a type no encoding takes).
        DataError: ``null_value`` (a NULL, ``on_null = 'error'``), ``invalid_target`` (a target of the wrong type),
            ``invalid_value`` (a feature or a regressor's target NaN or infinite), ``precision_loss`` (a feature
            float32 would round), ``invalid_training_data`` (too many categories), ``too_few_rows`` (no row left).
    """
    columns = table.column_names
    check_column_names(columns, statement)
    target_name = find_column(columns, target, statement, "TARGET") if target is not None else None
    chosen = training_features(columns, target_name or "", feature_option(features, target_name or "", statement)
                               if features is not None else None, (), statement)
    nullable = tuple(c for c in chosen if on_null == "impute" or c in imputed)
    read = table.num_rows
    table, positions = _drop_nulls(table.select([*chosen, *([target_name] if target_name else [])]),
                                   [*(c for c in chosen if c not in nullable), *([target_name] if target_name else [])],
                                   on_null, statement)
    if table.num_rows == 0:
        raise DataError(f"{statement}: the query has no rows to train on.", code="too_few_rows")
    kinds = _kinds(table, chosen, types, statement)
    for name in nullable:
        if kinds.kind_of(name) == "categorical":
            _check_no_null_category(table.column(name), name, statement)
    y = None
    if target_name is not None:
        values = table.column(target_name)
        shown = types.get(target_name, "")
        y = (_classes(values, target_name, statement, shown) if task == "classification"
             else _numbers(values, target_name, statement, shown))
        if y.dtype != object:
            table = table.set_column(table.column_names.index(target_name), target_name, pa.array(y))
    return TrainingRows(table, kinds, target_name, y, read - table.num_rows, nullable, positions)
