"""The PREDICT operators: a model run over every row of an input relation.

* :class:`StreamPredict` runs inside DuckDB's pipeline: a vectorized Arrow
  function (:class:`~modelsql.operators.predict.PredictFunction`) registered on
  the connection, called once per DuckDB chunk from its worker threads, so the
  scan of one chunk overlaps inference on another (PRETZEL's stage pipelining on
  DuckDB's scheduler) and a table larger than memory is never materialized.
  Several streaming PREDICTs over one input may share one scan of it
  (:func:`shared_scan_sql`, rule ``predict_share_input``).
* :class:`BatchPredict` reads its input first, to Arrow record batches of up to
  :data:`~modelsql.engine.query.cost.BATCH_ROWS` rows, runs the model on each (a
  ``matrix`` argument column-major into a transposed copy of the model), and
  registers the kept columns and outputs as one Arrow table for the statement.

Each produces the SQL the statement reads it through (:meth:`StreamPredict.sql`,
:meth:`BatchPredict.run`) and implements :class:`~modelsql.operators.base.Operator`.
"""

from __future__ import annotations

import itertools
import re
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Generator, Iterator, Optional, Sequence

import duckdb
from duckdb.func import FunctionNullHandling, PythonUDFType
import pyarrow as pa

from modelsql.errors import InternalError
from modelsql.operators.predict import ColumnBlock, PredictFunction

if TYPE_CHECKING:
    from modelsql.operators.base import StreamOperator

_COUNTER = itertools.count()


def quote(name: str) -> str:
    """Quote an identifier for DuckDB."""
    return '"' + name.replace('"', '""') + '"'


def struct_name(columns, base: str = "__msql_p") -> str:
    """A column name for a PREDICT's result struct that no input column has (those pass through untouched)."""
    taken = {c.name.lower() for c in columns}
    while base in taken:
        base += "_"
    return base


class StreamPredict:
    """A PREDICT run by DuckDB chunk by chunk through a registered vectorized function.

    Args:
        scan: the logical :class:`~modelsql.engine.query.plan.PredictScan`.
        model: the loaded backend model.
        duck: the connection to register the function on.
    """

    name = "StreamPredict"

    def __init__(self, scan, model, duck: duckdb.DuckDBPyConnection) -> None:
        b, o = scan.binding, scan.options
        self.scan = scan
        self.duck = duck
        self.children: list = []
        self.schema = [(c.name, c.type) for c in b.columns] + [(x.column, x.duckdb_type) for x in b.outputs]
        self.function = PredictFunction(model, b.args, b.outputs, o.on_null, scan.id, batch_size=o.batch_size,
                                        on_error=o.on_error, model_name=scan.model.ref_sql)
        self.function_name = f"__modelsql_predict_{next(_COUNTER)}"
        self.input_sql = ""
        self.params: list = []
        self.param_numbers: list = []
        self.execution = "stream"

    def register(self) -> str:
        """Register the function on the connection; its name (the caller's :class:`Result` unregisters it).

        Raises:
            InternalError: DuckDB refused the registration (code ``"udf_register"``).
        """
        b = self.scan.binding
        struct = "STRUCT(" + ", ".join(f"{quote(x.column)} {x.duckdb_type}" for x in b.outputs) + ")"
        try:
            self.duck.create_function(
                self.function_name, self.function, [duckdb.sqltype(t) for t in b.arg_types],
                duckdb.sqltype(struct), type=PythonUDFType.ARROW, null_handling=FunctionNullHandling.SPECIAL,
                side_effects=True,
            )
        except Exception as exc:
            raise InternalError(f"Cannot register PREDICT for {self.scan.label}: {exc}", code="udf_register") from exc
        return self.function_name

    def call_sql(self) -> str:
        """The function call over the input's columns."""
        return f"{self.function_name}({', '.join(self.scan.binding.arg_sql)})"

    def sql(self, source_sql: str) -> str:
        """The PREDICT as a DuckDB subquery over ``source_sql`` (a table name or a parenthesised query)."""
        b, o = self.scan.binding, self.scan.options
        where = f" WHERE {b.null_filter}" if o.on_null == "skip" and b.null_filter else ""
        p = struct_name(b.columns)
        skip = f" WHERE {quote(p)} IS NOT NULL" if o.on_error == "skip" else ""  # rows the model failed on
        return (
            f"SELECT * EXCLUDE ({quote(p)}), unnest({quote(p)}) FROM "
            f'(SELECT *, {self.call_sql()} AS {quote(p)} FROM {source_sql} AS "__msql_in"{where}) AS "__msql_q"'
            + skip
        )

    def reset(self, params: list) -> None:
        """Before another execution of a cached plan: new input parameter values, counters from zero."""
        self.params = params
        f = self.function
        f.error, f.rows, f.calls, f.seconds = None, 0, 0, 0.0

    def execute(self) -> Iterator[pa.RecordBatch]:
        """Run alone over :attr:`input_sql` (set by the planner) and yield the rows (registers the function)."""
        self.register()
        try:
            reader = self.duck.sql(self.sql(f"({self.input_sql})"), params=self.params or None).to_arrow_reader(8192)
            yield from reader
        finally:
            self.duck.remove_function(self.function_name)

    def explain(self) -> dict[str, str]:
        return {"execution": self.execution}

    def measured(self) -> dict[str, str]:
        f = self.function
        return {"rows": str(f.rows), "calls": str(f.calls), "time": f"{f.seconds * 1000:.3f} ms"}


def shared_scan_sql(members: Sequence[StreamOperator[Any]], source_sql: str) -> tuple[str, list[str]]:
    """One scan of ``source_sql`` calling every member's function on the same chunks.

    Returns the scan's SQL and, per member, the name of its result struct column.
    """
    columns = members[0].scan.binding.columns
    names = []
    for m in members:
        name = struct_name(columns, f"__msql_p{m.scan.id}")
        names.append(name)
    calls = ", ".join(f"{m.call_sql()} AS {quote(n)}" for m, n in zip(members, names))
    return f'SELECT *, {calls} FROM {source_sql} AS "__msql_in"', names


def shared_member_sql(member: StreamOperator[Any], names: list[str], own: str, cte: str) -> str:
    """A member of a shared scan: the input's columns and its own outputs, read from the shared CTE."""
    excluded = ", ".join(quote(n) for n in names)
    return f"SELECT * EXCLUDE ({excluded}), unnest({quote(own)}) FROM {quote(cte)}"


class BatchPredict:
    """A PREDICT run to completion over large Arrow record batches before the statement reads it.

    Args:
        scan: the logical scan.
        model: the loaded model to run, using every core (DuckDB is not calling it from several threads);
            for ``column_major`` inputs, the transposed copy.
        duck: the connection.
        input_sql: the input relation's SQL (inner PREDICTs lowered), ``$1..$m`` parameters.
        params: their values.
        column_major: inputs fed transposed; ``original_inputs``: the untransposed model's input names.
        rows_per_batch, run_rows, memory_limit: record batch rows, rows per model run, and the bytes
            past which the run gives up (None: no limit), from :mod:`modelsql.engine.query.cost`.
    """

    name = "BatchPredict"

    def __init__(self, scan, model, duck, input_sql: str, params: list, *, column_major: tuple[str, ...] = (),
                 original_inputs: tuple[str, ...] = (), rows_per_batch: int, run_rows: int,
                 memory_limit: Optional[int]) -> None:
        b, o = scan.binding, scan.options
        self.scan = scan
        self.duck = duck
        self.children: list = []
        self.input_sql = input_sql
        self.params = params
        self.column_major = column_major
        self.rows_per_batch = rows_per_batch
        self.run_rows = run_rows
        self.memory_limit = memory_limit
        self.kept = list(scan.placement.kept_columns)
        self.schema = [(c.name, c.type) for c in self.kept] + [(x.column, x.duckdb_type) for x in b.outputs]
        args = b.args
        if column_major:  # the transposed copy's inputs, by position in the original's
            renamed = {n: model.input_names[original_inputs.index(n)] for n in column_major}
            args = tuple(replace(a, input_name=renamed.get(a.input_name, a.input_name)) for a in args)
        self.function = PredictFunction(model, args, b.outputs, o.on_null, scan.id, batch_size=o.batch_size,
                                        on_error=o.on_error, model_name=scan.model.ref_sql)
        self.execution = "batch" + (" (column-major input)" if column_major else "")
        self.read_types: list = []
        self.seconds = 0.0
        self.rows_read = 0
        self.read_once = False
        """The statement reads the result exactly once (the planner knows): registered as a stream."""

    def query(self, dry: bool) -> tuple[str, list]:
        """The input query: kept columns, then each argument (a column-major one as its separate columns)."""
        b, o = self.scan.binding, self.scan.options
        select = [quote(c.name) for c in self.kept]
        slots: list[Any] = []
        for i, (a, sql, t) in enumerate(zip(b.args, b.arg_sql, b.arg_types)):
            if a.input_name in self.column_major and a.kind == "matrix":
                base = t.rsplit("[", 1)[0]
                first = len(select)
                select.extend(f'CAST({quote(c)} AS {base}) AS "__msql_a{i}_{j}"' for j, c in enumerate(a.columns))
                slots.append(range(first, len(select)))
            else:
                slots.append(len(select))
                select.append(f'{sql} AS "__msql_a{i}"')
        where = f" WHERE {b.null_filter}" if o.on_null == "skip" and b.null_filter else ""
        q = f'SELECT {", ".join(select)} FROM ({self.input_sql}) AS "__msql_in"{where}' + (" LIMIT 0" if dry else "")
        return q, slots

    def execute(self, dry: bool = False) -> Generator[pa.RecordBatch, None, None]:
        """The kept columns and the outputs, one record batch per model run."""
        query, slots = self.query(dry)
        kept = len(self.kept)
        out_fields = list(self.function.struct_type)
        relation = self.duck.sql(query, params=self.params or None)
        self.read_types = list(relation.types)[:kept]
        reader = relation.to_arrow_reader(self.rows_per_batch)
        schema = pa.schema(list(reader.schema)[:kept] + out_fields)
        self.arrow_schema = schema
        try:
            for whole in reader:
                for start in range(0, whole.num_rows, self.run_rows):
                    batch = whole.slice(start, self.run_rows)
                    t0 = time.perf_counter()
                    fed = [ColumnBlock([batch.column(k) for k in s]) if isinstance(s, range) else batch.column(s)
                           for s in slots]
                    result = self.function(*fed)
                    self.seconds += time.perf_counter() - t0
                    self.rows_read += batch.num_rows
                    piece = pa.RecordBatch.from_arrays(
                        [batch.column(k) for k in range(kept)] + [result.field(k) for k in range(len(out_fields))],
                        schema=schema)
                    if self.scan.options.on_error == "skip" and result.null_count:
                        piece = piece.filter(result.is_valid())  # rows the model failed on
                    yield piece
        finally:
            reader.close()

    def run(self, register: Callable[[str, pa.Table], None], dry: bool = False) -> Optional[str]:
        """Run to completion and register the result; the SQL that reads it, or None when the kept
        rows outgrew :attr:`memory_limit` (the planner streams the PREDICT instead)."""
        batches, kept_bytes = [], 0
        pieces = self.execute(dry)
        try:
            for piece in pieces:
                batches.append(piece)
                kept_bytes += piece.nbytes
                if self.memory_limit is not None and kept_bytes > self.memory_limit:
                    return None
        finally:
            pieces.close()
        name = f"__modelsql_batch_{next(_COUNTER)}"
        if self.read_once:
            # DuckDB keeps a registered object until the transaction ends, even once unregistered: a stream
            # that hands over (and forgets) each batch as it is scanned leaves nothing behind
            register(name, pa.RecordBatchReader.from_batches(self.arrow_schema, _handed_over(batches)))
        else:
            register(name, pa.Table.from_batches(batches, schema=self.arrow_schema))
        return self._read_sql(name)

    def _read_sql(self, name: str) -> str:
        """Select the kept columns (collations and Arrow-changed types restored) and the outputs."""
        cols = []
        for c, collation in zip(self.kept, collations(self.read_types)):
            if collation:
                cols.append(f"{quote(c.name)} COLLATE {quote(collation)} AS {quote(c.name)}")
            elif _ARROW_SAFE.match(c.type):
                cols.append(quote(c.name))
            else:
                cols.append(f"CAST({quote(c.name)} AS {c.type}) AS {quote(c.name)}")
        cols += [quote(x.column) for x in self.scan.binding.outputs]
        return f'SELECT {", ".join(cols)} FROM "{name}"'

    def explain(self) -> dict[str, str]:
        return {"execution": self.execution}

    def measured(self) -> dict[str, str]:
        return {"rows": str(self.rows_read), "calls": str(self.function.calls), "time": f"{self.seconds * 1000:.3f} ms"}


def _handed_over(batches: list) -> Iterator[pa.RecordBatch]:
    """Yield ``batches`` in order, dropping each from the list as it goes."""
    batches.reverse()
    while batches:
        yield batches.pop()


_ARROW_SAFE = re.compile(
    r"^(BOOLEAN|TINYINT|SMALLINT|INTEGER|BIGINT|UTINYINT|USMALLINT|UINTEGER|UBIGINT|FLOAT|DOUBLE|VARCHAR|DATE|"
    r"TIMESTAMP|BLOB)(\[\d*\])*$"
)
"""DuckDB types that come back from an Arrow round trip as themselves; other passthrough columns are cast back."""


def collations(types) -> list[str]:
    """The collation each DuckDB type carries ('' for none), which an Arrow round trip drops."""
    try:
        import _duckdb

        return [_duckdb._collation(t) or "" for t in types]
    except Exception:
        return ["" for _ in types]
