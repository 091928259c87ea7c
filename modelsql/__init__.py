"""modelsql: SQL over models kept in a DuckDB catalog.

This module is a PEP 249 (DB-API 2.0) driver::

    import modelsql
    con = modelsql.connect("models.duckdb")
    con.import_model("digits_mlp", "digits_mlp.onnx")
    rows = con.execute(
        "SELECT label, count(*) FROM PREDICT(MODEL digits_mlp, TABLE digits) GROUP BY label"
    ).fetchall()
"""

from modelsql.client.dbapi import BINARY, DATETIME, NUMBER, ROWID, STRING, Binary, Connection, Cursor, Date, DateFromTicks, Time, TimeFromTicks, Timestamp, TimestampFromTicks, apilevel, connect, paramstyle, threadsafety
from modelsql.errors import DatabaseError, DataError, Error, IntegrityError, InterfaceError, InternalError, NotSupportedError, OperationalError, ProgrammingError, Warning

__version__ = "0.1.0"

__all__ = [
    "connect", "Connection", "Cursor", "apilevel", "threadsafety", "paramstyle",
    "Warning", "Error", "InterfaceError", "DatabaseError", "DataError", "OperationalError",
    "IntegrityError", "InternalError", "ProgrammingError", "NotSupportedError",
    "Date", "Time", "Timestamp", "DateFromTicks", "TimeFromTicks", "TimestampFromTicks", "Binary",
    "STRING", "BINARY", "NUMBER", "DATETIME", "ROWID", "__version__",
]
