"""Errors raised while a statement with PREDICTs runs, as the user's modelsql errors.

DuckDB re-raises an exception from inside a Python function as its own
``InvalidInputException`` carrying the text; the operator keeps the original
object (:attr:`~modelsql.operators.predict.PredictFunction.error`), so the
error the user gets is that object (a modelsql error raised by the operator), or
is built from its type (:class:`~modelsql.operators.predict.NullInput`,
``KeyboardInterrupt``): never recognised from a message.
"""

from __future__ import annotations

import re
from typing import Optional, Sequence

import duckdb

from modelsql.duckdb_errors import translate
from modelsql.errors import DataError, Error, InternalError, OperationalError
from modelsql.operators.base import Operator
from modelsql.operators.predict import NullInput
from modelsql.engine.query.bind_predict import Binding, array_not_null_sql, quote
from modelsql.engine.query.plan import PredictScan

Operators = Sequence[Operator[PredictScan]]
"""The operators of the statement that raised."""


def predict_error(exc: BaseException, operators: Operators, duck: duckdb.DuckDBPyConnection) -> Error:
    """The modelsql error for ``exc``, raised while the statement of ``operators`` ran on ``duck``."""
    if isinstance(exc, Error) and not isinstance(exc, NullInput):
        return exc
    for op in operators:
        fn = op.function
        err, fn.error = fn.error, None
        if err is None:
            continue
        if isinstance(err, NullInput):
            return null_error(op, duck, err.counts)
        if isinstance(err, Error):
            return err
        if isinstance(err, KeyboardInterrupt):
            return OperationalError("The statement was interrupted.", code="interrupted")
        return InternalError(f"PREDICT over {op.scan.label} failed: {type(err).__name__}: {err}", code="predict_failed")
    return wrong_length(str(exc), operators) or translate(exc)


def null_error(op: Operator[PredictScan], duck: duckdb.DuckDBPyConnection,
               chunk_counts: Optional[dict[str, int]] = None) -> DataError:
    """The DataError for NULLs fed to a model: names each column with NULLs and its row count.

    The counts come from a query over the PREDICT's input. Outside autocommit mode the failed
    statement has aborted the transaction (DuckDB, like PostgreSQL, refuses further statements until
    ROLLBACK), so the count then runs on a second DuckDB cursor, which sees the committed data; if that
    is not possible, or it sees fewer NULLs than the chunk that failed (the input was changed in this
    transaction), the counts of the failing chunk are reported as lower bounds.
    """
    scan = op.scan
    b = scan.binding
    chunk_counts = dict(chunk_counts or {})
    counted = _count_nulls(duck, _null_tests(b), op.input_sql, op.params, chunk_counts)

    def rows(n: int) -> str:
        return f"{n} row{'' if n == 1 else 's'}"

    if counted is not None:
        counts, rows_with_null = counted
        where = ", ".join(f'"{c}" ({rows(n)})' for c, n in counts.items())
        total = f"; in all, {rows(rows_with_null)} with a NULL input"
    elif chunk_counts:
        where = ", ".join(f'"{c}" (at least {rows(n)})' for c, n in chunk_counts.items())
        total = ""
    else:
        where = ", ".join(f'"{c}"' for c in b.fed_columns)
        total = ""
    return DataError(f"PREDICT({scan.model.ref_sql}): NULL in input column(s) {where}{total}{NULL_HINT}",
                     code="null_input")


NULL_HINT = (". NULLs are never fed to a model: add on_null = 'skip' to leave those rows out, or on_null = 'null' to "
             "return NULL predictions for them.")
"""How PREDICT's ``null_input`` error ends (a statement that runs a PREDICT of its own may say it its way)."""


def _null_tests(b: Binding) -> list[tuple[str, str]]:
    """``(column, SQL true where it holds a NULL)`` for each column fed to the model (an array or list column:
    NULL or holding one at any depth) but those whose NULLs the model imputes."""
    types = {c.name: c.type for c in b.columns}
    preds: list[tuple[str, str]] = []
    for a in b.args:
        if a.imputed:
            continue
        if a.kind == "array":
            preds.append((a.columns[0], f"NOT {array_not_null_sql(a.columns[0], types[a.columns[0]])}"))
        else:
            preds.extend((col, f"{quote(col)} IS NULL") for col in a.columns)
    return preds


def _count_nulls(duck: duckdb.DuckDBPyConnection, preds: list[tuple[str, str]], input_sql: str, params: list[object],
                 chunk_counts: dict[str, int]) -> Optional[tuple[dict[str, int], int]]:
    """Per column, the input's rows with a NULL there, and the rows with any; None if unknown."""
    if not preds or not input_sql:
        return None
    sql = (
        "SELECT " + ", ".join(f"count(*) FILTER (WHERE {p})" for _, p in preds)
        + f", count(*) FILTER (WHERE {' OR '.join(p for _, p in preds)})"
        + f' FROM ({input_sql}) AS "__msql_in"'
    )
    for fresh in (False, True):
        cur = None
        try:
            cur = duck.cursor() if fresh else duck
            row = cur.execute(sql, params or None).fetchall()[0]
        except Exception:
            continue
        finally:
            if fresh and cur is not None:
                try:
                    cur.close()
                except Exception:
                    pass
        found = {col: int(n) for (col, _), n in zip(preds, row) if n}
        if all(found.get(c, 0) >= n for c, n in chunk_counts.items()) and found:
            return found, int(row[-1])
    return None


_LIST_TO_ARRAY = re.compile(
    r"Cannot cast list with length (\d+) to array with length (\d+) when casting from source column \"?([^\"\n]+?)\"?$", re.M
)


def wrong_length(text: str, operators: Operators) -> Optional[DataError]:
    """The DataError for list rows of another length than the model input takes (DuckDB's cast of the
    column to the input's ``T[k]`` failed), naming the column, the lengths and the input; else None.

    (DuckDB raises this cast error itself, before any model runs: its message is all there is.)
    """
    m = _LIST_TO_ARRAY.search(text)
    if not m:
        return None
    got, want, column = int(m.group(1)), int(m.group(2)), m.group(3)
    for op in operators:
        for a in op.scan.binding.args:
            if a.kind == "array" and a.columns[0].lower() == column.lower():
                return DataError(
                    f'PREDICT({op.scan.model.ref_sql}): column "{a.columns[0]}" holds rows of {got} values, but '
                    f'model input "{a.input_name}" takes {want} values per row (per-row shape {list(a.shape)}).',
                    code="wrong_input_shape",
                )
    return None
