"""The PREDICT operator: Arrow chunks in, model outputs out.

A bound ``PREDICT(MODEL m, ...)`` becomes one vectorized DuckDB function
(a Python UDF over Arrow arrays) that DuckDB calls once per chunk (about 2,048
rows) from its own worker threads. Each call turns the bound input columns
into NumPy arrays without copying where Arrow allows it, runs the model
through its backend, and returns one Arrow ``StructArray`` whose fields are the
model's outputs. DuckDB streams chunks through it, so a table larger than
memory is never materialized, and scanning of one chunk overlaps inference on
another (PRETZEL's stage pipelining, on DuckDB's scheduler).

Input arguments, one per model input (see :class:`InputArg`):

* ``matrix``: a DuckDB ``T[F]`` array packed in SQL from F scalar columns
  (already cast to the input's element type ``T`` by DuckDB), reshaped to the
  input's shape ``(n, *dims)``;
* ``column``: one scalar column, shaped ``(n,)`` or ``(n, 1)``;
* ``array``: one array or list column, flat or nested (``T[224][224][3]``,
  ``T[][][]``), its rows read row-major and reshaped to ``(n, *dims)`` (see
  :func:`row_fit`).

With ``execution = 'batch'`` the planner instead reads the input to Arrow in
large record batches and calls the same function once per batch; a ``matrix``
argument may then come as a :class:`ColumnBlock` (the F columns unpacked),
stacked column-major into an ``(F, n)`` array for a model whose input the
planner has transposed (see :func:`modelsql.onnxformat.column_major.column_major_inputs`).

Outputs (see :class:`OutputCol`): ``(n,)`` and ``(n, 1)`` become scalar
fields, ``(n, k)`` fixed-size arrays ``T[k]``, anything else a list ``T[]`` of
the flattened row.
"""

from __future__ import annotations

import inspect
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from modelsql.errors import DataError
from modelsql.estimators.transforms import NULL_CATEGORY, null_category_rows
from modelsql.operators import row_errors

if TYPE_CHECKING:
    from modelsql.progress import Meter

class NullInput(DataError):
    """Raised inside a PREDICT on a NULL fed to a model (``on_null = 'error'``).

    The planner turns it into the user's DataError, which counts the NULLs of the
    whole input; ``counts`` (column -> rows with a NULL, in the chunk that raised)
    are the lower bounds it falls back on.
    """

    def __init__(self, counts: dict[str, int], index: int) -> None:
        super().__init__(f"NULL input to PREDICT number {index}: " + ", ".join(counts), code="null_input")
        self.counts = counts

ONNX_TO_DUCKDB = {
    "FLOAT": "FLOAT",
    "DOUBLE": "DOUBLE",
    "FLOAT16": "FLOAT",
    "BFLOAT16": "FLOAT",
    "INT8": "TINYINT",
    "INT16": "SMALLINT",
    "INT32": "INTEGER",
    "INT64": "BIGINT",
    "UINT8": "UTINYINT",
    "UINT16": "USMALLINT",
    "UINT32": "UINTEGER",
    "UINT64": "UBIGINT",
    "BOOL": "BOOLEAN",
    "STRING": "VARCHAR",
}
"""ONNX element type -> the DuckDB type a PREDICT casts inputs to and returns outputs as."""

ONNX_TO_NUMPY = {
    "FLOAT": np.float32,
    "DOUBLE": np.float64,
    "FLOAT16": np.float16,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "BOOL": np.bool_,
    "STRING": np.object_,
}


class ColumnBlock:
    """The F scalar columns of one ``matrix`` argument, not packed into rows.

    Fed as one ``(F, n)`` array: each column is one contiguous row of the
    block, so building it is F memory copies instead of a transposition. Used by
    ``execution = 'batch'``, where the model's input was transposed to match.

    Args:
        columns: F Arrow arrays of ``n`` rows each, already cast by DuckDB to
            the input's element type.
    """

    def __init__(self, columns: list) -> None:
        self.columns = [_one_array(c) for c in columns]

    def __len__(self) -> int:
        return len(self.columns[0]) if self.columns else 0

    @property
    def null_count(self) -> int:
        return sum(c.null_count for c in self.columns)

    def take(self, indices) -> "ColumnBlock":
        return ColumnBlock([c.take(indices) for c in self.columns])

    def null_rows(self) -> np.ndarray:
        mask = np.zeros(len(self), dtype=bool)
        for c in self.columns:
            if c.null_count:
                mask |= c.is_null().to_numpy(zero_copy_only=False)
        return mask

    def to_numpy(self, dtype) -> np.ndarray:
        block = np.empty((len(self.columns), len(self)), dtype=dtype)
        for j, c in enumerate(self.columns):
            block[j] = c.to_numpy(zero_copy_only=False)
        return block


@dataclass(frozen=True)
class InputArg:
    """How one UDF argument feeds one model input.

    Attributes:
        input_name: the ONNX input it feeds.
        kind: ``"matrix"``, ``"column"``, ``"array"`` or ``"ragged"`` (a list column whose rows differ in
            length, fed as an object array of per-row arrays to a Python program; see module docstring).
        shape: the per-row shape the model expects (the input's dims after the
            batch axis, with unknown dims as -1).
        elem_type: ONNX element type name of the input.
        columns: the SQL columns it is built from (for error messages).
        imputed: the model fills a NULL of this ``"column"`` itself (a model trained in SQL that imputes): it is
            fed as NaN (numbers) or :data:`~modelsql.estimators.NULL_CATEGORY` (text), not treated as a NULL row.
        finite: the model was trained in SQL on finite numbers (its estimator refuses NaN and infinities): a NaN
            or infinite value of this ``"column"`` is refused, not fed (it would answer NaN, and a label of it).
    """

    input_name: str
    kind: str
    shape: tuple[int, ...]
    elem_type: str
    columns: tuple[str, ...]
    imputed: bool = False
    finite: bool = False


@dataclass(frozen=True)
class OutputCol:
    """One model output returned as one column.

    Attributes:
        output_name: the ONNX output name.
        column: the SQL column name it is returned as.
        elem_type: ONNX element type name.
        kind: ``"scalar"``, ``"fixed"`` (``T[width]``), ``"list"`` (``T[]``) or
            ``"map"`` (``MAP(K, T)``: one map per row, from a sequence of maps such
            as skl2onnx's ZipMap output, class label -> probability).
        width: the array width for ``"fixed"``.
        key_type: ONNX element type of a ``"map"`` output's keys (INT64 or STRING).
    """

    output_name: str
    column: str
    elem_type: str
    kind: str
    width: int = 0
    key_type: str = ""

    @property
    def duckdb_type(self) -> str:
        base = ONNX_TO_DUCKDB.get(self.elem_type, "FLOAT")
        if self.kind == "fixed":
            return f"{base}[{self.width}]"
        if self.kind == "list":
            return f"{base}[]"
        if self.kind == "map":
            return f"MAP({ONNX_TO_DUCKDB[self.key_type]}, {base})"
        return base


RUN_SAMPLES = 256
"""Model runs per PREDICT function whose wall time is kept (:attr:`PredictFunction.runs`)."""


class PredictFunction:
    """The callable DuckDB runs per chunk for one bound PREDICT.

    Args:
        model: a backend model with ``run(feeds, outputs) -> list[np.ndarray]``.
        args: one :class:`InputArg` per UDF argument, in argument order.
        outputs: the :class:`OutputCol`s, in result order.
        on_null: ``"error"`` (raise, naming the columns), ``"null"`` (outputs are
            NULL for rows with a NULL input) or ``"skip"`` (the planner filtered
            such rows out before this operator; treated as ``"error"`` here).
        index: the PREDICT's position in its statement, for error messages.
        batch_size: at most this many rows per model run.
        on_error: rows ONNX Runtime fails on: ``"error"`` (raise a DataError naming the
            column, value and row count), ``"null"`` (NULL outputs) or ``"skip"`` (NULL
            structs, which the planner filters out).
        model_name: how the PREDICT names its model (``MODEL m`` or ``PIPELINE p``), for error messages.

    Calling it with one Arrow array per argument (each ``n`` rows) returns a
    ``pyarrow.StructArray`` of ``n`` rows.
    """

    def __init__(
        self,
        model,
        args: tuple[InputArg, ...],
        outputs: tuple[OutputCol, ...],
        on_null: str,
        index: int = 0,
        *,
        batch_size: Optional[int] = None,
        on_error: str = "error",
        model_name: str = "?",
    ):
        self.model = model
        self.on_error = on_error
        self.model_name = model_name
        self.batch_size = batch_size
        self.error: Optional[BaseException] = None
        self.args = args
        self.outputs = outputs
        self.on_null = on_null
        self.index = index
        # DuckDB counts a UDF's parameters from its signature; ``*arrays`` would
        # count as one, so a multi-input model needs one named parameter per argument.
        self.__signature__ = inspect.Signature(
            [inspect.Parameter(f"arg{i}", inspect.Parameter.POSITIONAL_ONLY) for i in range(len(args))]
        )
        fields = [pa.field(o.column, _arrow_type(o)) for o in outputs]
        self.struct_type = pa.struct(fields)
        self.output_names = [o.output_name for o in outputs]
        self.calls = 0
        self.rows = 0
        self.seconds = 0.0
        """Time spent inside the function (EXPLAIN ANALYZE prints it)."""
        self.runs: list[tuple[int, float]] = []
        """``(rows, seconds)`` of the model's first :data:`RUN_SAMPLES` runs (EXPLAIN ANALYZE records them as
        latency traces for the cost model)."""
        self.progress: Optional[Meter] = None
        """The :class:`~modelsql.progress.Meter` counting the rows scored (None: no progress hook), set by the
        planner for each execution; :meth:`end_progress` sends its final message."""

    def __call__(self, *arrays) -> pa.StructArray:
        start = time.perf_counter()
        try:
            out = self._call(*arrays)
            if self.progress is not None:
                self.progress.advance(len(out))
            return out
        except BaseException as exc:
            # DuckDB re-raises a function's error as text: the planner reads the original object here.
            self.error = exc
            raise
        finally:
            self.seconds += time.perf_counter() - start

    def end_progress(self, ok: bool = True) -> None:
        """Send the progress meter's final message (``ok``: the statement did not fail, nor did this function)."""
        if self.progress is not None:
            self.progress.finish(ok=ok and self.error is None)

    def _timed(self, feeds: dict[str, np.ndarray], n: int) -> list[np.ndarray]:
        if len(self.runs) >= RUN_SAMPLES:
            return self.model.run(feeds, self.output_names)
        start = time.perf_counter()
        out = self.model.run(feeds, self.output_names)
        self.runs.append((n, time.perf_counter() - start))
        return out

    def _run_all(self, feeds: dict[str, np.ndarray], n: int) -> list[np.ndarray]:
        b = self.batch_size
        if not b or n <= b:
            return self._timed(feeds, n)
        parts = [
            self._timed({k: v[i : i + b] for k, v in feeds.items()}, min(b, n - i)) for i in range(0, n, b)
        ]
        for start, part in zip(range(0, n, b), parts):
            for res, o in zip(part, self.outputs):
                if o.kind != "map" and (np.ndim(res) == 0 or len(res) != min(b, n - start)):
                    # not one row per input row: raise the error naming the output before concatenating
                    _to_arrow(res, o, min(b, n - start), f"PREDICT over {getattr(self.model, 'label', 'the model')}")
        return [np.concatenate([p[j] for p in parts], axis=0) for j in range(len(self.output_names))]

    def _run(self, feeds: dict[str, np.ndarray], n: int, column_major: frozenset = frozenset()
             ) -> tuple[Optional[list], np.ndarray]:
        """The outputs for the rows the model does not fail on, and the mask of those it fails on.

        A failing run is bisected (:mod:`~modelsql.operators.row_errors`); under ``on_error =
        'error'`` the first failing row's column and value are named in the DataError raised.
        ``column_major`` names feeds laid out ``(F, n)`` (a :class:`ColumnBlock`): the search
        reads them by row through a transposed view and hands the model its own layout.
        """
        try:
            return self._run_all(feeds, n), np.zeros(n, dtype=bool)
        except DataError as exc:
            if exc.code != "inference_failed":
                raise
            first = exc

        def laid_out(f):
            return {k: np.ascontiguousarray(v.T) if k in column_major else v for k, v in f.items()}

        def run(f):
            return self._run_all(laid_out(f), len(next(iter(f.values()))))

        rows = {k: v.T if k in column_major else v for k, v in feeds.items()}  # every feed row-first
        bad = row_errors.failing_rows(run, rows, n)
        if not len(bad):
            raise first  # no row fails alone: the batch as a whole does
        failed = np.zeros(n, dtype=bool)
        failed[bad] = True
        if self.on_error == "error":
            good = int(np.flatnonzero(~failed)[0]) if (~failed).any() else None
            who = row_errors.culprit(run, rows, self.args, int(bad[0]), good)
            raise row_errors.row_error(self.model_name, first, bad, n, who) from None
        if failed.all():
            return None, failed
        return run({k: v[~failed] for k, v in rows.items()}), failed

    def _call(self, *inputs: Any) -> pa.StructArray:
        self.calls += 1
        arrays = [a if isinstance(a, ColumnBlock) else _filled(_one_array(a), spec, self.model_name)
                  for a, spec in zip(inputs, self.args)]
        n = len(arrays[0]) if arrays else 0
        self.rows += n
        null_rows = None
        for spec, arr in zip(self.args, arrays):
            mask = _null_rows(arr, spec)
            if mask is not None:
                null_rows = mask if null_rows is None else (null_rows | mask)
        computed = np.arange(n)
        if null_rows is not None and null_rows.any():
            if self.on_null != "null":
                raise NullInput(_null_counts(self.args, arrays), self.index)
            computed = np.flatnonzero(~null_rows)
            arrays = [a.take(pa.array(computed)) for a in arrays]
        if not len(computed):
            return self._scatter([], computed, n, np.zeros(0, dtype=bool))
        where = f"PREDICT over {getattr(self.model, 'label', 'the model')}"
        feeds = {spec.input_name: _to_numpy(arr, spec, where) for spec, arr in zip(self.args, arrays)}
        column_major = frozenset(spec.input_name for spec, arr in zip(self.args, arrays) if isinstance(arr, ColumnBlock))
        results, failed = self._run(feeds, len(computed), column_major)
        ok_n = int((~failed).sum())
        columns = [] if results is None else [_to_arrow(res, o, ok_n, where) for res, o in zip(results, self.outputs)]
        return self._scatter(columns, computed, n, failed)

    def _scatter(self, columns: list, computed: np.ndarray, n: int, failed: np.ndarray) -> pa.StructArray:
        """The ``n``-row result: ``columns`` hold the rows ``computed[~failed]``; other rows get NULL outputs.

        Rows the model failed on are NULL structs under ``on_error = 'skip'`` (the planner filters
        them out); every other row is a struct, with NULL fields where nothing was computed.
        """
        fields = list(self.struct_type)
        rows = computed[~failed]
        if len(rows) == n:
            return pa.StructArray.from_arrays(columns, fields=fields)
        positions = np.full(n, -1, dtype=np.int64)
        positions[rows] = np.arange(len(rows))
        take = pa.array(positions, mask=positions < 0)
        if columns:
            columns = [c.take(take) for c in columns]
        else:
            columns = [pa.nulls(n, f.type) for f in fields]
        mask = None
        if self.on_error == "skip" and failed.any():
            dropped = np.zeros(n, dtype=bool)
            dropped[computed[failed]] = True
            mask = pa.array(dropped)
        return pa.StructArray.from_arrays(columns, fields=fields, mask=mask)


def _one_array(a) -> pa.Array:
    """A plain Array from what DuckDB passes (usually a one-chunk ChunkedArray)."""
    if isinstance(a, pa.ChunkedArray):
        return a.chunk(0) if a.num_chunks == 1 else a.combine_chunks()
    return a


def _filled(arr: pa.Array, spec: InputArg, model_name: str) -> pa.Array:
    """``arr`` with its NULLs as the model that imputes them takes them (:attr:`InputArg.imputed`): NaN for
    numbers, :data:`~modelsql.estimators.NULL_CATEGORY` for text; any other ``arr`` as it is.

    Raises:
        DataError: ``invalid_value``: the text :data:`~modelsql.estimators.NULL_CATEGORY` itself in ``arr``.
    """
    if spec.finite and pa.types.is_floating(arr.type):
        _check_finite(arr, spec, model_name)
    if not spec.imputed:
        return arr
    text = pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type) or pa.types.is_string_view(arr.type)
    if text and null_category_rows(arr):
        raise DataError(f'PREDICT({model_name}): column "{spec.columns[0]}" holds the text {NULL_CATEGORY!r} (U+2400), which the model '
                        "reads as NULL in this column (it imputes it): replace it in the query (replace(...)).",
                        code="invalid_value")
    if not arr.null_count:
        return arr
    if pa.types.is_floating(arr.type):
        return pc.fill_null(arr, pa.scalar(float("nan"), arr.type))
    return pc.fill_null(arr.cast(pa.string()), NULL_CATEGORY) if text else arr


def _check_finite(arr: pa.Array, spec: InputArg, model_name: str) -> None:
    """Refuse a NaN or infinite number (:attr:`InputArg.finite`; a NaN an imputing model reads as NULL).

    Raises:
        DataError: ``invalid_value``, naming the column and the rows.
    """
    values = arr.to_numpy(zero_copy_only=False)
    bad = ~np.isfinite(values) & ~(np.isnan(values) & spec.imputed)
    bad &= ~np.asarray(arr.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    if bad.any():
        raise DataError(f'PREDICT({model_name}): column "{spec.columns[0]}" is NaN or infinite in {int(bad.sum())} '
                        "rows; the model was trained on finite numbers (training refuses them too): filter or fill "
                        "them in the query.", code="invalid_value")


def _arrow_type(o: OutputCol) -> pa.DataType:
    base = _arrow_scalar_type(o.elem_type)
    if o.kind == "fixed":
        return pa.list_(base, o.width)
    if o.kind == "list":
        return pa.list_(base)
    if o.kind == "map":
        return pa.map_(_arrow_scalar_type(o.key_type), base)
    return base


def _arrow_scalar_type(elem_type: str) -> pa.DataType:
    if elem_type == "STRING":
        return pa.string()
    if elem_type in ("FLOAT16", "BFLOAT16"):
        return pa.float32()
    return pa.from_numpy_dtype(ONNX_TO_NUMPY.get(elem_type, np.float32))


def _null_rows(arr: pa.Array, spec: InputArg) -> Optional[np.ndarray]:
    """Boolean mask of rows with any NULL (the row, an element, an inner list at any depth), or None if none."""
    if isinstance(arr, ColumnBlock):
        return arr.null_rows() if arr.null_count else None
    if not _has_nulls(arr):
        return None
    return _nested_null_mask(arr)


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_fixed_size_list(t) or pa.types.is_list(t) or pa.types.is_large_list(t)


def _children(arr: pa.Array) -> pa.Array:
    """The values of a list array's rows, every row's (NULL rows' too), in order."""
    if pa.types.is_fixed_size_list(arr.type):
        return _fsl_values(arr)
    offsets = np.asarray(arr.offsets)
    return arr.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))


def _has_nulls(arr: pa.Array) -> bool:
    return arr.null_count > 0 or (_is_list(arr.type) and _has_nulls(_children(arr)))


def _nested_null_mask(arr: pa.Array) -> np.ndarray:
    """Per row of ``arr``: True where it, or anything nested in it, is NULL."""
    mask = arr.is_null().to_numpy(zero_copy_only=False).copy() if arr.null_count else np.zeros(len(arr), dtype=bool)
    if not _is_list(arr.type):
        return mask
    child = _children(arr)
    if not _has_nulls(child):
        return mask
    inner = _nested_null_mask(child)
    if pa.types.is_fixed_size_list(arr.type):
        return mask | inner.reshape(len(arr), arr.type.list_size).any(axis=1)
    offsets = np.asarray(arr.offsets) - arr.offsets[0].as_py()
    seen = np.concatenate([[0], np.cumsum(inner)])
    return mask | (seen[offsets[1:]] > seen[offsets[:-1]])


def _null_counts(args: tuple[InputArg, ...], arrays) -> dict[str, int]:
    """Column -> number of rows of this chunk with a NULL in that column (only columns that have one).

    A ``matrix`` argument is a fixed-size array packed from its columns in order,
    so element ``j`` of a row is column ``j``; an ``array`` or ``column`` argument
    is one column (a row counts once, however many of its elements are NULL).
    """
    counts: dict[str, int] = {}
    for spec, arr in zip(args, arrays):
        if isinstance(arr, ColumnBlock):
            for col, c in zip(spec.columns, arr.columns):
                if c.null_count:
                    counts[col] = counts.get(col, 0) + int(c.null_count)
            continue
        if spec.kind == "matrix" and pa.types.is_fixed_size_list(arr.type) and len(spec.columns) == arr.type.list_size:
            width = arr.type.list_size
            values = _fsl_values(arr)
            per_col = np.zeros(width, dtype=np.int64)
            if values.null_count:
                per_col += values.is_null().to_numpy(zero_copy_only=False).reshape(len(arr), width).sum(axis=0)
            if arr.null_count:  # a whole row NULL: every column of it
                per_col += arr.null_count
            for col, k in zip(spec.columns, per_col):
                if k:
                    counts[col] = counts.get(col, 0) + int(k)
        else:
            mask = _null_rows(arr, spec)
            if mask is not None and mask.any():
                for col in spec.columns:
                    counts[col] = counts.get(col, 0) + int(mask.sum())
    return counts


def _fsl_values(arr: pa.FixedSizeListArray) -> pa.Array:
    width = arr.type.list_size
    return arr.values.slice(arr.offset * width, len(arr) * width)


def row_fit(dims: tuple[int, ...], shape: tuple[int, ...]) -> Optional[tuple[int, ...]]:
    """The per-row shape rows of nested sizes ``dims`` (outermost first) are reshaped to, row-major, for an
    input of per-row ``shape`` (-1 = any); None when they do not fit.

    Rows fit when they have as many values as the input takes (one unknown dim takes the rest), or the
    same dims (filling unknown ones). Rows whose dims, sizes of 1 left out, are as many as the input's
    but differ from them are refused: ``[224, 224, 3]`` for ``[3, 224, 224]`` is another layout, not a
    regrouping of the same values.
    """
    if len(dims) == len(shape) and all(s in (-1, d) for s, d in zip(shape, dims)):
        return tuple(dims)
    got, want = [d for d in dims if d != 1], [s for s in shape if s != 1]
    if len(got) == len(want) > 1:
        if not all(s in (-1, d) for s, d in zip(want, got)):
            return None
        sizes = iter(got)
        return tuple(1 if s == 1 else next(sizes) for s in shape)
    size, known = math.prod(dims), math.prod(s for s in shape if s != -1)
    unknown = shape.count(-1)
    if unknown == 0:
        return tuple(shape) if known == size else None
    if unknown == 1 and known and size % known == 0:
        return tuple(size // known if s == -1 else s for s in shape)
    return None


def _nested_values(arr: pa.Array, spec: InputArg, where: str) -> tuple[pa.Array, tuple[int, ...]]:
    """The leaf values of a (nested) array or list column, row-major, and the sizes of each row's levels.

    Raises:
        DataError: code ``"ragged_input"`` when the lists of one level differ in length.
    """
    values, dims, depth = arr, [], 0
    while _is_list(values.type):
        depth += 1
        if pa.types.is_fixed_size_list(values.type):
            dims.append(values.type.list_size)
            values = _fsl_values(values)
            continue
        lengths = np.diff(np.asarray(values.offsets))
        if len(lengths) and (lengths != lengths[0]).any():
            # A batch is one tensor: ragged rows would be silently re-split across rows.
            level = f" at depth {depth}" if depth > 1 else ""
            raise DataError(
                f'{where}: column "{spec.columns[0]}" holds lists of different lengths ({int(lengths.min())} to '
                f'{int(lengths.max())} elements{level}); model input "{spec.input_name}" takes the same number of '
                "values in every row.",
                code="ragged_input",
            )
        dims.append(int(lengths[0]) if len(lengths) else 0)
        values = values.flatten()
    return values, tuple(dims)


def _to_numpy(arr: pa.Array, spec: InputArg, where: str = "PREDICT") -> np.ndarray:
    dtype = ONNX_TO_NUMPY.get(spec.elem_type, np.float32)
    n = len(arr)
    if isinstance(arr, ColumnBlock):
        return arr.to_numpy(dtype)
    if spec.kind == "column":
        if dtype is np.object_:
            flat = np.array(arr.to_pylist(), dtype=object)
        else:
            flat = np.asarray(arr.to_numpy(zero_copy_only=False), dtype=dtype)
        return flat.reshape((n,) + tuple(spec.shape))
    if spec.kind == "ragged":
        return _ragged_rows(arr, spec, dtype)
    values, dims = _nested_values(arr, spec, where)
    if dtype is np.object_:
        flat = np.array(values.to_pylist(), dtype=object)
    else:
        flat = np.asarray(values.to_numpy(zero_copy_only=False), dtype=dtype)
    shape = row_fit(dims, tuple(spec.shape)) if spec.kind == "array" else tuple(spec.shape)
    if shape is None or flat.size != n * math.prod(shape):
        sizes = " x ".join(map(str, dims))
        raise DataError(
            f'{where}: column "{spec.columns[0]}" has rows of {sizes} values, which do not fit model input '
            f'"{spec.input_name}" (per-row shape {list(spec.shape)}, -1 = any; rows are read row-major).',
            code="wrong_input_shape",
        )
    return flat.reshape((n,) + shape)


def _ragged_rows(arr: pa.Array, spec: InputArg, dtype) -> np.ndarray:
    """A list column whose rows differ in length, as an object array of per-row arrays (rows, *inner shape)."""
    inner = tuple(spec.shape[1:])
    out = np.empty(len(arr), dtype=object)
    try:
        rows = [np.asarray(r, dtype=dtype) for r in arr.to_pylist()]
        for r in rows:
            if r.ndim != 1 + len(inner) or tuple(r.shape[1:]) != inner:
                raise ValueError(f"a row of shape {list(r.shape)}")
        out[:] = rows
    except (ValueError, TypeError) as exc:
        raise DataError(f'PREDICT: column "{spec.columns[0]}" has a row that is not a list of values of per-node shape '
                        f'{list(inner)} for model input "{spec.input_name}" ({exc})', code="wrong_input_shape") from None
    return out


def _to_arrow(res: np.ndarray, o: OutputCol, n: int, where: str = "PREDICT") -> pa.Array:
    if o.kind == "map":
        return _maps_to_arrow(res, o, n, where)
    res = np.asarray(res)
    if res.ndim == 0 or res.shape[0] != n or (o.kind == "scalar" and res.size != n) or (
        o.kind == "fixed" and res.size != n * o.width
    ):
        raise DataError(
            f'{where}: the model returned output "{o.output_name}" of shape {list(res.shape)} for {n} input rows; '
            "an output must have one row per input row"
            + (f" of {o.width} values" if o.kind == "fixed" else "")
            + ".",
            code="wrong_output_shape",
        )
    if res.dtype == np.float16:
        res = res.astype(np.float32)
    flat: np.ndarray
    if o.kind == "scalar":
        flat = res.reshape(n)
        if o.elem_type == "STRING":
            return pa.array([str(v) for v in flat], type=pa.string())
        return pa.array(flat, type=_arrow_scalar_type(o.elem_type))
    flat = res.reshape(n, -1)
    if o.elem_type == "STRING":
        values = pa.array([str(v) for v in flat.reshape(-1)], type=pa.string())
    else:
        values = pa.array(np.ascontiguousarray(flat).reshape(-1), type=_arrow_scalar_type(o.elem_type))
    if o.kind == "fixed":
        return pa.FixedSizeListArray.from_arrays(values, o.width)
    width = flat.shape[1]
    offsets = pa.array(np.arange(0, (n + 1) * width, width, dtype=np.int32))
    return pa.ListArray.from_arrays(offsets, values)


def _maps_to_arrow(res, o: OutputCol, n: int, where: str) -> pa.Array:
    """A sequence of ``n`` maps (ONNX Runtime gives a list of dicts) as an Arrow ``MAP`` array."""
    maps = list(res)
    if len(maps) != n or not all(isinstance(m, dict) for m in maps):
        raise DataError(
            f'{where}: the model returned output "{o.output_name}" as {len(maps)} values for {n} input rows; '
            "a sequence-of-maps output must have one map per input row.",
            code="wrong_output_shape",
        )
    return pa.array([list(m.items()) for m in maps], type=_arrow_type(o))

