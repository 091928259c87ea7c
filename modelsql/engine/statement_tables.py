"""``(SHOW MODELS)``, ``(DESCRIBE MODEL m)`` and the other listings of ours read as a relation
(:class:`~modelsql.sql.statement_tables.StatementTable`): the statement runs by its own handler before the query
around it is planned, and its rows are scanned where it was written (registered with
:func:`~modelsql.engine.handlers.computes`), as DuckDB reads ``(SHOW TABLES)``."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import pyarrow as pa

from modelsql.sql.statement_tables import StatementTable
from modelsql.engine.handlers import computes, run_statement

if TYPE_CHECKING:
    from modelsql.engine.session import Session

__all__ = ["statement_table"]


@computes(StatementTable)
def statement_table(node: StatementTable, session: Session, params: list) -> pa.Table:
    """The rows of the listing ``node`` holds, with the columns and types it gives as a statement.

    Raises:
        the statement's own errors (``model_not_found`` for ``(DESCRIBE MODEL nope)`` ...).
    """
    result = run_statement(node.this, session, params)
    try:
        if result.rows is None:  # run on the connection: DuckDB's result, its own types
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # DuckDB: "Arrow output on a DB-API result makes an extra copy"
                table = session.duck.to_arrow_table()
            session.duck.fetchall()  # DuckDB keeps the result open until a fetch returns nothing
            return table
        names = [str(d[0]) for d in result.description or []]
        types = [_arrow_type(session, str(d[1])) for d in result.description or []]
        columns = [pa.array([row[k] for row in result.rows], types[k]) for k in range(len(names))]
        return pa.table(columns, schema=pa.schema(list(zip(names, types))))
    finally:
        result.release()


def _arrow_type(session: Session, sql_type: str) -> pa.DataType:
    """The Arrow type DuckDB gives a column of ``sql_type`` (a statement's description names DuckDB types)."""
    return session.duck.cursor().sql(f"SELECT CAST(NULL AS {sql_type}) AS x").to_arrow_table().schema[0].type
