"""Binding ``PREDICT(MODEL m, TABLE t | (query) [, option = value ...])``.

Binding resolves the model (name, version) in the catalog, describes the input
relation (column names and DuckDB types), and decides which columns feed
which model input. The rules, in order:

1. ``features = (a, b, ...)`` given in the PREDICT, else the feature names the
   catalog knows for the model (scikit-learn's ``feature_names_in_`` or
   ``WITH (features = (...))`` at import): a single input whose per-row shape
   has ``F`` elements is fed the ``F`` named columns, in that order. Every other
   column passes through.
2. Otherwise each ONNX input binds to the column of its own name
   (case-insensitive): a scalar column for an input of shape ``[N]`` or
   ``[N, 1]``, an array or list column for wider inputs.
3. Otherwise, for a single input of ``F`` elements per row, the query's numeric
   columns, in order, must number exactly ``F`` (never for a model trained in
   SQL, whose inputs are its training columns, one each: a column of another
   name is not its feature, and a missing one is ``column_not_found``, as rule 2
   says of several inputs). Key-like columns (``id``,
   ``*_id``, ``key``, and primary-key or unique columns of the table) are never
   fed to a model: they only pass through.

Types follow the rule every peer uses: any numeric column (integers, DECIMAL,
FLOAT, DOUBLE; BOOLEAN only when named) is cast by DuckDB to the input's element
type, so DOUBLE feeds a float32 input. Text, dates, lists and structs where
numbers are expected are a :class:`~modelsql.errors.ProgrammingError` naming
the column. An array or list column (numbers or booleans; nested too, e.g.
``FLOAT[224][224][3]`` or ``FLOAT[][][]``) feeds an input whose rows have as
many values, read row-major; see :func:`_array_target`.

Outputs come back after the input columns: ``[N]``/``[N, 1]`` outputs as scalar
columns, ``[N, k]`` as ``T[k]`` arrays, anything else as ``T[]`` lists. An
output whose name equals an input column is returned as ``predicted_<name>``
(BigQuery ML's convention).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Optional, Sequence, Union

from modelsql.catalog.entries import ModelVersion, PipelineVersion, RoutedModels, TensorSpec
from modelsql.converters.python_program import is_ragged
from modelsql.errors import NotSupportedError, ProgrammingError, did_you_mean
from modelsql.operators.predict import ONNX_TO_DUCKDB, ONNX_TO_NUMPY, InputArg, OutputCol, row_fit
from modelsql.operators.backends import devices
from modelsql.operators.scan import quote
from modelsql.engine.options.declared import PREDICT as PREDICT_OPTIONS
from modelsql.engine.options.schema import column_names

NUMERIC_TYPES = {
    "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT",
    "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT", "UHUGEINT",
    "FLOAT", "DOUBLE", "REAL",
}
ON_NULL_MODES = PREDICT_OPTIONS["on_null"].choices
ON_ERROR_MODES = PREDICT_OPTIONS["on_error"].choices
KNOWN_OPTIONS = PREDICT_OPTIONS.names
"""PREDICT's options, declared in :data:`modelsql.engine.options.declared.PREDICT`."""
EXECUTION_MODES = PREDICT_OPTIONS["execution"].choices
MERGE_MODES = PREDICT_OPTIONS["merge"].choices
"""``merge``: whether models of one family run as one NetFuse-merged graph (routed PREDICTs, and
PREDICTs of one statement over one input): where the measured rule expects a gain, always, or never."""
BACKENDS = PREDICT_OPTIONS["backend"].choices
MAX_ARRAY = 100_000
"""DuckDB's largest fixed ``ARRAY`` size: a wider flat input row is passed as a list."""

PredictModel = Union[ModelVersion, PipelineVersion, RoutedModels]
"""What a PREDICT runs: a model version, a pipeline version, or routed models (``MODELS (...) ROUTE BY c``);
each has ``inputs``, ``outputs``, ``features``, ``label`` and ``ref_sql``, and binds alike."""


@dataclass(frozen=True)
class Column:
    """A column of the PREDICT's input relation: name and DuckDB type text."""

    name: str
    type: str

    @property
    def is_numeric(self) -> bool:
        # "DECIMAL(2,1)[]" is a list, not a number.
        # A column of only NULL literals or NULL parameters has type "NULL": it casts to any
        # number, and its NULLs then meet the on_null rule like any other.
        return not self.is_array and (
            self.type in NUMERIC_TYPES or self.type.startswith("DECIMAL") or self.type.strip('"') == "NULL"
        )

    @property
    def is_array(self) -> bool:
        return self.type.endswith("]")


@dataclass(frozen=True)
class PredictOptions:
    """The named arguments of one PREDICT (see module docstring)."""

    on_null: str = "error"
    features: Optional[tuple[str, ...]] = None
    backend: str = "onnxruntime"
    batch_size: Optional[int] = None
    execution: str = "auto"
    on_error: str = "error"
    isolate_rows: bool = True
    """Run a batch-dependent model (``ModelVersion.batch_dependence``) one row at a time, so each
    row gets the answer it gets alone; False lets such a model see whole batches."""
    merge: str = "auto"
    """One of :data:`MERGE_MODES`."""
    backend_given: bool = False
    """``backend`` was written; otherwise the cost function may run a checked artifact of another backend
    (TVM) where the learned cost model expects it faster."""
    device: str = "auto"
    """``"auto"`` (the cost function chooses among the devices present), ``"cpu"`` or ``"cuda:N"``
    (:mod:`modelsql.operators.backends.devices`)."""


@dataclass(frozen=True)
class Binding:
    """How one PREDICT's input columns feed the model and which outputs come back.

    The SQL fragments are expressions modelsql generates over the input's
    columns (never the user's text): casts to the inputs' element types and the
    NULL test of ``on_null = 'skip'``.

    Attributes:
        columns: the input relation's columns (name and DuckDB type), in order.
        args: how each argument of the PREDICT function feeds a model input.
        arg_sql: DuckDB SQL of each argument (casts included), over the input's columns.
        arg_types: DuckDB type text of each argument.
        outputs: the output columns, in order (after the input's columns).
        null_filter: SQL predicate keeping rows with no NULL in a fed column
            (used for ``on_null = 'skip'``), or None when nothing is fed.
    """

    columns: tuple[Column, ...]
    args: tuple[InputArg, ...]
    arg_sql: tuple[str, ...]
    arg_types: tuple[str, ...]
    outputs: tuple[OutputCol, ...]
    null_filter: Optional[str]

    @property
    def fed_columns(self) -> tuple[str, ...]:
        return tuple(c for a in self.args for c in a.columns)


def parse_options(options: dict[str, object], model_name: str) -> PredictOptions:
    """The named arguments of a PREDICT, read by its schema (:data:`modelsql.engine.options.declared.PREDICT`).

    Args:
        options: option name (lower case) -> Python value (str, int, float,
            bool, or tuple of str for ``features``).
        model_name: how the PREDICT names its model, ``MODEL m`` or ``PIPELINE p`` (messages quote it).

    Raises:
        ProgrammingError: ``unknown_option`` (with "did you mean"), ``invalid_option``.
        NotSupportedError: ``device_not_available``.
    """
    where = f"PREDICT({model_name})"
    opts = PREDICT_OPTIONS.parse(options, where=where)
    try:
        device = devices.require(opts["device"], where)
    except NotSupportedError as err:
        err.option = "device"  # (the statement points at the option)
        raise
    return PredictOptions(on_null=opts["on_null"], features=opts["features"], backend=opts["backend"],
                          batch_size=opts["batch_size"], execution=opts["execution"], on_error=opts["on_error"],
                          isolate_rows=opts["isolate_rows"], merge=opts["merge"],
                          backend_given="backend" in opts.given, device=device)


def check_feature_names(names: object, where: str) -> tuple[str, ...]:
    """Feature names as a tuple: at least one, each a non-empty string, no name twice
    (case-insensitive, as columns are matched).

    Raises:
        ProgrammingError: code ``"invalid_option"``, naming the offending entry.
    """
    if isinstance(names, Iterable) and not isinstance(names, (str, bytes)):
        return column_names(tuple(names), "features", where)
    return column_names(names, "features", where)


def row_shape(spec: TensorSpec) -> Optional[tuple[int, ...]]:
    """The per-row shape of an input (dims after the batch axis), -1 for unknown; None if rank unknown."""
    if spec.shape is None or len(spec.shape) == 0:
        return None
    return tuple(d if isinstance(d, int) and d > 0 else -1 for d in spec.shape[1:])


def row_width(shape: Optional[tuple[int, ...]]) -> Optional[int]:
    """Elements per row, or None when a dim is unknown."""
    if shape is None or any(d < 0 for d in shape):
        return None
    return math.prod(shape) if shape else 1


_KEY_NAME = re.compile(r"^(id|key|pk|rowid|uuid|index|.*_id|.*_key|.*_uuid)$", re.IGNORECASE)


def looks_like_key(name: str, key_columns: Sequence[str] = ()) -> bool:
    """True for columns that identify rows and must never be fed to a model silently."""
    return bool(_KEY_NAME.match(name)) or name.lower() in {k.lower() for k in key_columns}


def array_dims(type_text: str) -> tuple[str, tuple[Optional[int], ...]]:
    """The element type of an array or list column type and its sizes, outermost first (None for a list level).

    DuckDB writes the innermost size first: ``FLOAT[3][224][224]`` holds 224 arrays of 224 arrays of 3
    values, so its sizes are ``(224, 224, 3)``; ``FLOAT[224][224][3]`` holds rows of ``(3, 224, 224)``.
    """
    m = re.match(r"^(.*?)((?:\[\d*\])+)$", type_text)
    if m is None:
        raise ValueError(f"not an array or list type: {type_text}")
    sizes = re.findall(r"\[(\d*)\]", m.group(2))
    return m.group(1), tuple(int(k) if k else None for k in reversed(sizes))


def array_not_null_sql(column: str, type_text: str) -> str:
    """SQL predicate: the array or list ``column`` is not NULL and holds no NULL, at any depth."""
    x, parts = quote(column), [f"{quote(column)} IS NOT NULL"]
    for _ in array_dims(type_text)[1]:
        # list_count counts the non-NULL elements (no lambda: DuckDB 2 deprecates ``x -> ...``,
        # and a lambda parameter could shadow a column of the same name).
        parts.append(f"list_count({x}) = len({x})")
        x = f"flatten({x})"
    return "(" + " AND ".join(parts) + ")"


def _array_target(col: Column, spec: TensorSpec, shape: tuple[int, ...], width: Optional[int], where: str) -> str:
    """The DuckDB type an array or list column is cast to for model input ``spec`` (element type ``T``).

    A flat column becomes ``T[width]`` (``T[]`` past DuckDB's :data:`MAX_ARRAY` or for an unknown width),
    a nested one keeps its sizes (``T[224][224][3]``, ``T[][][]``).

    Raises:
        ProgrammingError: code ``"wrong_column_type"`` for elements that are not numbers or booleans
            (for a non-text input), or fixed sizes that do not fit the input (see :func:`row_fit`).
    """
    base, dims = array_dims(col.type)
    numeric = base in NUMERIC_TYPES or base.startswith("DECIMAL") or base == "BOOLEAN"
    if spec.elem_type != "STRING" and not numeric:
        takes = "booleans" if spec.elem_type == "BOOL" else "numbers"
        raise ProgrammingError(
            f'{where}: column "{col.name}" has type {col.type}, but model input "{spec.name}" takes {takes} '
            f"({spec.elem_type}); arrays of numbers or booleans are cast to {spec.elem_type}, other types are not.",
            code="wrong_column_type",
        )
    fixed = tuple(d for d in dims if d is not None)
    if len(fixed) == len(dims):  # no list level
        if width is not None and math.prod(fixed) != width:
            raise ProgrammingError(
                f'{where}: column "{col.name}" has type {col.type}, but model input "{spec.name}" takes '
                f"{width} values per row ({spec.elem_type}{_shape_text(spec)}).",
                code="wrong_column_type",
            )
        if row_fit(fixed, shape) is None:
            hint = f"store them as {base}{''.join(f'[{d}]' for d in reversed(shape))}, or" if -1 not in shape else "use"
            raise ProgrammingError(
                f'{where}: column "{col.name}" has type {col.type}, which holds rows of shape {list(dims)} (DuckDB '
                f'writes the innermost size first), but model input "{spec.name}" takes rows of shape '
                f"{list(shape)} (-1 = any); rows are read row-major, so {hint} a {base}[] list.",
                code="wrong_column_type",
            )
    duck = ONNX_TO_DUCKDB.get(spec.elem_type, "FLOAT")
    if len(dims) > 1:
        return duck + col.type[len(base):]
    if width is not None and width <= MAX_ARRAY:
        return f"{duck}[{width}]"
    return f"{duck}[{dims[0]}]" if dims[0] is not None else f"{duck}[]"


def bind_predict(
    model: PredictModel,
    columns: Sequence[Column],
    options: PredictOptions,
    key_columns: Sequence[str] = (),
) -> Binding:
    """Bind one PREDICT (see module docstring for the rules): the strategy the columns and the model's
    signature call for (:func:`_bind_features`, :func:`_bind_by_name`, :func:`_bind_numeric_columns`), or the
    error saying why none applies.

    Raises:
        ProgrammingError: a missing or misnamed column (code ``"column_not_found"``),
            a column of the wrong type (``"wrong_column_type"``), unknown feature
            names or a width mismatch (``"feature_mismatch"``), an output name clash
            (``"duplicate_column"``).
    """
    inputs = model.inputs
    if not inputs:
        raise ProgrammingError(f'{model.label[0].upper()}{model.label[1:]} has no inputs to feed.', code="model_without_inputs")
    by_name = {c.name.lower(): c for c in columns}
    fed = _Arguments(f'PREDICT({model.ref_sql})', trained_in_sql(model))
    features = options.features or model.features
    if features is not None:
        _bind_features(inputs, features, columns, by_name, fed, imputed_inputs(model))
    elif all(i.name.lower() in by_name for i in inputs):
        _bind_by_name(inputs, by_name, fed, imputed_inputs(model))
    elif fed.finite:  # trained in SQL: its inputs are the columns it was trained on, one each, fed by name alone
        raise _missing_columns(inputs, columns, by_name, fed.where)
    elif len(inputs) == 1 and inputs[0].elem_type == "STRING":
        raise _no_text_column(inputs[0], columns, fed.where)
    elif len(inputs) == 1:
        _bind_numeric_columns(inputs[0], columns, key_columns, model.ref_sql, fed)
    else:
        raise _missing_columns(inputs, columns, by_name, fed.where)
    outputs = bind_outputs(model, [c.name for c in columns])
    return Binding(
        columns=tuple(columns),
        args=tuple(fed.args),
        arg_sql=tuple(fed.sql),
        arg_types=tuple(fed.types),
        outputs=outputs,
        null_filter=_null_filter(fed, by_name),
    )


@dataclass
class _Arguments:
    """The PREDICT function's arguments as a binding strategy adds them: how each feeds a model input
    (``args``), its DuckDB SQL over the input's columns (``sql``) and its type (``types``).
    ``where``: ``PREDICT(MODEL m)``, how messages name the PREDICT."""

    where: str
    finite: bool = False
    """The model was trained in SQL on finite numbers (:func:`trained_in_sql`)."""
    args: list[InputArg] = field(default_factory=list)
    sql: list[str] = field(default_factory=list)
    types: list[str] = field(default_factory=list)

    def add(self, arg: InputArg, sql: str, type_text: str) -> None:
        self.args.append(arg)
        self.sql.append(sql)
        self.types.append(type_text)

    def scalar(self, spec: TensorSpec, col: Column, shape: tuple[int, ...], imputed: bool = False) -> None:
        """Feed the scalar column ``col`` to ``spec``, cast to its type (``imputed``: NULLs included, for the
        model to fill; NaN and infinities refused for a model trained in SQL, :attr:`finite`)."""
        _need_numeric(col, spec, True, self.where)
        duck = ONNX_TO_DUCKDB.get(spec.elem_type, "FLOAT")
        self.add(InputArg(spec.name, "column", shape, spec.elem_type, (col.name,), imputed, self.finite),
                 f"CAST({quote(col.name)} AS {duck})", duck)

    def matrix(self, spec: TensorSpec, cols: Sequence[Column], shape: tuple[int, ...], allow_bool: bool) -> None:
        """Feed ``cols``, packed in order into one ``T[F]`` array, to ``spec``."""
        for col in cols:
            _need_numeric(col, spec, allow_bool, self.where)
        duck = ONNX_TO_DUCKDB.get(spec.elem_type, "FLOAT")
        items = ", ".join(quote(c.name) if c.type == duck else f"CAST({quote(c.name)} AS {duck})" for c in cols)
        self.add(InputArg(spec.name, "matrix", shape, spec.elem_type, tuple(c.name for c in cols)),
                 f"CAST([{items}] AS {duck}[{len(cols)}])", f"{duck}[{len(cols)}]")


def _need_numeric(col: Column, spec: TensorSpec, allow_bool: bool, where: str) -> None:
    """Refuse a column that cannot feed ``spec``: text (VARCHAR, or an ENUM, cast to its text) for a STRING input,
    numbers (or, with ``allow_bool``, booleans) for any other (``wrong_column_type``)."""
    if spec.elem_type == "STRING":
        if col.type != "VARCHAR" and not col.type.startswith("ENUM("):  # an ENUM is cast to its text
            untyped = " (an untyped NULL: write NULL::VARCHAR)" if col.type.strip('"') == "NULL" else ""
            raise ProgrammingError(
                f'{where}: column "{col.name}" has type {col.type}, but model input "{spec.name}" takes text '
                f"(STRING){untyped}.",
                code="wrong_column_type",
            )
        return
    if not (col.is_numeric or (allow_bool and col.type == "BOOLEAN")):
        raise ProgrammingError(
            f'{where}: column "{col.name}" has type {col.type}, but model input "{spec.name}" takes numbers '
            f"({spec.elem_type}); numeric columns are cast to {spec.elem_type}, other types are not.",
            code="wrong_column_type",
        )


def _about_features(err: ProgrammingError) -> ProgrammingError:
    """``err``, about the ``features`` (its ``option`` names them: a statement points at its option)."""
    err.option = "features"
    return err


def _bind_features(inputs: Sequence[TensorSpec], features: Sequence[str], columns: Sequence[Column],
                   by_name: dict[str, Column], fed: _Arguments, imputed: frozenset[str] = frozenset()) -> None:
    """Rule 1: the named ``features`` (the PREDICT's, else the catalog's) feed the model's single input, in order
    (one scalar column feeding an input the model imputes is fed as the column it is, NULLs included)."""
    where = fed.where
    if len(inputs) != 1:
        raise _about_features(ProgrammingError(
            f"{where}: features = (...) applies to a model with one input; this model has "
            f"{len(inputs)} ({', '.join(i.name for i in inputs)}), which bind to columns of the same names.",
            code="feature_mismatch"))
    spec = inputs[0]
    shape = row_shape(spec)
    width = row_width(shape)
    if width is not None and width != len(features):
        raise _about_features(ProgrammingError(
            f'{where}: input "{spec.name}" takes {width} values per row, but {len(features)} features are named.',
            code="feature_mismatch"))
    cols = []
    for f in features:
        col = by_name.get(f.lower())
        if col is None:
            raise _about_features(ProgrammingError(
                f'{where}: feature column "{f}" is not in the input.{did_you_mean(f, [c.name for c in columns])}'
                f" Columns: {', '.join(c.name for c in columns)}.", code="column_not_found"))
        cols.append(col)
    if shape is None or width is None:
        shape = (len(cols),)
    if spec.name.lower() in imputed and len(cols) == 1 and not cols[0].is_array:
        fed.scalar(spec, cols[0], shape, imputed=True)
        return
    fed.matrix(spec, cols, shape, allow_bool=True)


def trained_in_sql(model: PredictModel) -> bool:
    """The model (a pipeline's first step, every routed member) was trained in SQL from a model type
    (``CREATE MODEL ... AS``, ``... FROM STUDY`` of an estimator study): its catalog options name one."""
    if isinstance(model, RoutedModels):
        return all(trained_in_sql(m) for m in model.members)
    return "model_type" in _first_options(model)


def imputed_inputs(model: PredictModel) -> frozenset[str]:
    """The lower-cased names of the inputs whose NULLs the model fills itself (trained in SQL with
    ``on_null = 'impute'`` or an ``ML.IMPUTER``: its catalog option ``imputed``); a pipeline's are its first
    step's, routed models' their members' (which must agree).

    Raises:
        NotSupportedError: ``not_supported``: routed models that impute different columns (one would read text
            another feeds as it is as NULL, or be fed NaN for a NULL it does not impute).
    """
    if isinstance(model, RoutedModels):
        each = [(m, imputed_inputs(m)) for m in model.members]
        odd = next(((m, cols) for m, cols in each if cols != each[0][1]), None)
        if odd is not None:
            first, seen = each[0]
            raise NotSupportedError(
                f"PREDICT({model.ref_sql}): {first.label} imputes NULLs in {sorted(seen) or 'no column'} and "
                f"{odd[0].label} in {sorted(odd[1]) or 'no column'}: route models that treat NULLs alike.",
                code="not_supported")
        return each[0][1]
    text = _first_options(model).get("imputed")
    return frozenset(str(name).lower() for name in json.loads(text)) if text else frozenset()


def _first_options(model: PredictModel) -> dict[str, str]:
    """The catalog options of the model version a PREDICT of ``model`` feeds first (a pipeline's first step);
    empty for routed models, whose members each have their own."""
    first = model.steps[0].model if isinstance(model, PipelineVersion) else model
    return dict(first.options or ()) if isinstance(first, ModelVersion) else {}


def _bind_by_name(inputs: Sequence[TensorSpec], by_name: dict[str, Column], fed: _Arguments,
                  imputed: frozenset[str] = frozenset()) -> None:
    """Rule 2: each input binds to the column of its own name: an array or list column for a wide input,
    a scalar column for an input of one value per row (fed NULL when it is one the model imputes)."""
    for spec in inputs:
        col = by_name[spec.name.lower()]
        shape = row_shape(spec) or ()
        width = row_width(shape)
        if col.is_array:
            target = _array_target(col, spec, shape, width, fed.where)
            kind = "ragged" if is_ragged(spec) else "array"
            fed.add(InputArg(spec.name, kind, shape, spec.elem_type, (col.name,)),
                    f"CAST({quote(col.name)} AS {target})", target)
            continue
        if width not in (1, None) or (width is None and shape):
            raise ProgrammingError(
                f'{fed.where}: model input "{spec.name}" takes {width or "several"} values per row, but column '
                f'"{col.name}" is a scalar ({col.type}); give an array column or name the features.',
                code="wrong_column_type",
            )
        fed.scalar(spec, col, shape, imputed=spec.name.lower() in imputed)


def _bind_numeric_columns(spec: TensorSpec, columns: Sequence[Column], key_columns: Sequence[str], ref_sql: str,
                          fed: _Arguments) -> None:
    """Rule 3: the input's numeric columns but key-like ones (:func:`looks_like_key`), in order, feed the single
    input, when they number exactly its width."""
    shape = row_shape(spec)
    width = row_width(shape)
    numeric = [c for c in columns if c.is_numeric]
    keys = [c for c in numeric if looks_like_key(c.name, key_columns)]
    candidates = [c for c in numeric if c not in keys]
    if shape is None or width is None or len(candidates) != width:  # (no width without a shape)
        seen = ", ".join(f"{c.name} {c.type}" for c in columns) or "none"
        key_note = (
            f" Key-like columns ({', '.join(c.name for c in keys)}) are never fed to a model." if keys else ""
        )
        want = f"{width} numeric columns" if width is not None else "a known number of features"
        raise ProgrammingError(
            f'{fed.where}: cannot bind input "{spec.name}" ({spec.elem_type}{_shape_text(spec)}): the model\'s feature '
            f"names are unknown, so it needs exactly {want}, and the query has {len(candidates)} usable "
            f"numeric columns. Columns seen: {seen}.{key_note} Name the features in the query, e.g. "
            f"PREDICT({ref_sql}, TABLE t, features = (col_a, col_b, ...)), or at import with "
            f"WITH (features = (...)), or select exactly the feature columns in a subquery.",
            code="feature_mismatch",
        )
    fed.matrix(spec, candidates, shape, allow_bool=False)


def _no_text_column(spec: TensorSpec, columns: Sequence[Column], where: str) -> ProgrammingError:
    """The error for a single text input that no column of its name feeds (text is never fed by position)."""
    seen = ", ".join(f"{c.name} {c.type}" for c in columns) or "none"
    return ProgrammingError(
        f'{where}: input "{spec.name}" takes text (STRING{_shape_text(spec)}), so it is fed by the '
        f'VARCHAR column named "{spec.name}", and the input has none. Columns seen: {seen}. Rename the '
        f'text column in a subquery, e.g. (SELECT body AS "{spec.name}" FROM t).',
        code="column_not_found",
    )


def _missing_columns(inputs: Sequence[TensorSpec], columns: Sequence[Column], by_name: dict[str, Column],
                     where: str) -> ProgrammingError:
    """The error for a model of several inputs some of which no column of their name feeds."""
    missing = [i.name for i in inputs if i.name.lower() not in by_name]
    names = [c.name for c in columns]
    return ProgrammingError(
        f"{where}: model inputs bind to columns of the same name; missing column(s) "
        + "; ".join(f'"{m}"' + (f" ({did_you_mean(m, names).strip()})" if did_you_mean(m, names) else "")
                    for m in missing)
        + f". Columns: {', '.join(names) or 'none'}.",
        code="column_not_found",
    )


def _null_filter(fed: _Arguments, by_name: dict[str, Column]) -> Optional[str]:
    """SQL keeping the rows with no NULL in a fed column (``on_null = 'skip'``), or None when nothing is fed."""
    if not any(a.columns for a in fed.args):
        return None
    parts = []
    for a in fed.args:
        if a.imputed:
            continue
        if a.kind == "array":
            parts.append(array_not_null_sql(a.columns[0], by_name[a.columns[0].lower()].type))
        else:
            parts.extend(f"{quote(c)} IS NOT NULL" for c in a.columns)
    return " AND ".join(parts) or None


_MAP_OUTPUT = re.compile(r"^SEQUENCE\(MAP\((INT64|STRING), (FLOAT|DOUBLE|INT64)\)\)$")
"""A sequence of maps, one per row (skl2onnx's ZipMap: class label -> probability): returned as a MAP column."""


def output_kind(spec: TensorSpec) -> Optional[tuple[str, int, str, str]]:
    """How an output comes back as a column: ``(kind, width, elem_type, key_type)`` (see
    :class:`~modelsql.operators.predict.OutputCol`), or None for a type no column can hold."""
    if spec.elem_type not in ONNX_TO_DUCKDB or spec.elem_type not in ONNX_TO_NUMPY:
        m = _MAP_OUTPUT.match(spec.elem_type)
        return ("map", 0, m.group(2), m.group(1)) if m else None  # BFLOAT16, FLOAT8...: no NumPy type
    shape = spec.shape
    if shape is not None and (len(shape) <= 1 or (len(shape) == 2 and shape[1] == 1)):
        return "scalar", 0, spec.elem_type, ""
    if shape is not None and len(shape) == 2 and isinstance(shape[1], int) and 0 < shape[1] <= MAX_ARRAY:
        return "fixed", shape[1], spec.elem_type, ""  # wider rows than DuckDB's arrays hold come as lists
    return "list", 0, spec.elem_type, ""


def check_signature(model_name: str, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec]) -> None:
    """Refuse, at import, a model with an input no column can feed or an output no column can hold
    (never drop an output silently, nor fail every row later).

    Raises:
        NotSupportedError: code ``"input_type_not_supported"`` / ``"output_type_not_supported"``,
            naming the input or output and its type.
    """
    for spec in inputs:
        if spec.elem_type not in ONNX_TO_NUMPY:
            raise NotSupportedError(
                f'Model "{model_name}": input "{spec.name}" has type {spec.elem_type}, which PREDICT cannot feed from '
                "a column (tensors of numbers, booleans or text can). Convert the model with that input as a "
                "tensor (for example FLOAT instead of BFLOAT16, or a tensor instead of a map).",
                code="input_type_not_supported",
            )
    for spec in outputs:
        if output_kind(spec) is None:
            raise NotSupportedError(
                f'Model "{model_name}": output "{spec.name}" has type {spec.elem_type}, which PREDICT cannot return '
                "as a column (tensors of numbers, booleans or text, and sequences of maps from INT64 or STRING "
                "keys to numbers, can). Remove the output from the graph, or convert the model without it "
                "(skl2onnx: options={'zipmap': False}).",
                code="output_type_not_supported",
            )


def bind_outputs(model: PredictModel, input_columns: Sequence[str]) -> tuple[OutputCol, ...]:
    """Decide the column name and type of each output (see :func:`output_kind`)."""
    taken = {c.lower() for c in input_columns}
    result = []
    for spec in model.outputs:
        kind = output_kind(spec)
        if kind is None:
            continue  # only versions imported before check_signature existed can have one
        name = spec.name
        if name.lower() in taken:
            name = f"predicted_{spec.name}"
        if name.lower() in taken:
            raise ProgrammingError(
                f'PREDICT({model.ref_sql}): output "{spec.name}" clashes with input columns "{spec.name}" '
                f'and "{name}"; rename one in a subquery.',
                code="duplicate_column",
            )
        taken.add(name.lower())
        result.append(OutputCol(spec.name, name, kind[2], kind[0], kind[1], kind[3]))
    if not result:
        raise NotSupportedError(
            f'Model "{model.name}" has no outputs that can be returned as columns.', code="no_tensor_outputs"
        )
    return tuple(result)


def _shape_text(spec: TensorSpec) -> str:
    if spec.shape is None:
        return "[?]"
    return "[" + ", ".join("?" if d is None else str(d) for d in spec.shape) + "]"
