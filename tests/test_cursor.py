"""PEP 249 edges beyond the dbapi20 suite, in the manner of CPython's sqlite3 tests:
every method after close(), interleaved streaming cursors, description and
rowcount after each kind of statement, type objects, transactions across two
connections to one file, and the context manager.

Attribute reads (``description``, ``rowcount``, ``arraysize``) stay possible on a
closed cursor, as in sqlite3 and psycopg: PEP 249 makes *operations* on a closed
cursor raise, and every method does.
"""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

import modelsql
from conftest import linear_model, load_table


def test_module_globals():
    assert modelsql.apilevel == "2.0"
    assert modelsql.threadsafety in (0, 1, 2, 3)
    assert modelsql.paramstyle == "qmark"
    for name in ("Warning", "Error", "InterfaceError", "DatabaseError", "DataError", "OperationalError",
                 "IntegrityError", "InternalError", "ProgrammingError", "NotSupportedError"):
        assert getattr(modelsql, name) is getattr(modelsql.Connection, name)
    assert issubclass(modelsql.ProgrammingError, modelsql.DatabaseError)
    assert issubclass(modelsql.DatabaseError, modelsql.Error)
    assert issubclass(modelsql.InterfaceError, modelsql.Error)
    assert issubclass(modelsql.Error, Exception) and issubclass(modelsql.Warning, Exception)


# ------------------------------------------------------------------ after close()


def _cursor_calls(cur):
    return {
        "execute": lambda: cur.execute("SELECT 1"),
        "execute_predict": lambda: cur.execute("SELECT * FROM PREDICT(MODEL m, TABLE t)"),
        "executemany": lambda: cur.executemany("INSERT INTO t VALUES (?, ?)", [(1.0, 2.0)]),
        "fetchone": cur.fetchone,
        "fetchmany": lambda: cur.fetchmany(2),
        "fetchmany_default": cur.fetchmany,
        "fetchall": cur.fetchall,
        "iter": lambda: iter(cur),
        "next": lambda: next(cur),
        "for": lambda: [r for r in cur],
        "close": cur.close,
        "setinputsizes": lambda: cur.setinputsizes([None]),
        "setoutputsize": lambda: cur.setoutputsize(10),
        "setoutputsize_col": lambda: cur.setoutputsize(10, 0),
    }


@pytest.mark.parametrize("state", ["fresh", "with_result", "streaming_predict", "exhausted"])
def test_every_cursor_method_after_close(con, state):
    con.import_model("m", linear_model(np.ones((2, 1))))
    con.execute("CREATE TABLE t (a DOUBLE, b DOUBLE)")
    con.execute("INSERT INTO t SELECT i, i FROM range(5000) r(i)")
    cur = con.cursor()
    if state == "with_result":
        cur.execute("SELECT * FROM t")
        cur.fetchone()
    elif state == "streaming_predict":
        cur.execute("SELECT * FROM PREDICT(MODEL m, TABLE t)")
        cur.fetchmany(10)
    elif state == "exhausted":
        cur.execute("SELECT 1")
        cur.fetchall()
    cur.close()
    for name, call in _cursor_calls(cur).items():
        with pytest.raises(modelsql.InterfaceError):
            call()
    # attribute reads do not raise; the connection is unharmed
    cur.description, cur.rowcount, cur.arraysize
    assert con.execute("SELECT count(*) FROM t").fetchone() == (5000,)
    # other cursors on the connection keep working after one was closed mid-stream
    assert con.execute("SELECT count(*) FROM PREDICT(MODEL m, TABLE t)").fetchone() == (5000,)


def test_cursor_context_manager_closes(con):
    with con.cursor() as cur:
        cur.execute("SELECT 1")
    with pytest.raises(modelsql.InterfaceError):
        cur.fetchall()


def test_every_connection_method_after_close(db):
    c = modelsql.connect(db)
    cur = c.cursor()
    cur.execute("SELECT 42")
    c.close()
    assert c.closed
    calls = {
        "cursor": c.cursor,
        "commit": c.commit,
        "rollback": c.rollback,
        "close": c.close,
        "execute": lambda: c.execute("SELECT 1"),
        "import_model": lambda: c.import_model("m", linear_model(np.ones((2, 1)))),
        "enter": lambda: c.__enter__(),
    }
    for name, call in calls.items():
        with pytest.raises(modelsql.InterfaceError):
            call()
    # the cursor of a closed connection
    for name, call in _cursor_calls(cur).items():
        if name == "close":
            continue
        with pytest.raises(modelsql.InterfaceError):
            call()
    cur.close()  # closing a cursor of a closed connection is allowed once (sqlite3 does the same)
    with pytest.raises(modelsql.InterfaceError):
        cur.close()
    # the file is released: it can be opened again
    with modelsql.connect(db) as again:
        assert again.execute("SELECT 1").fetchall() == [(1,)]


def test_connection_close_rolls_back(db):
    c = modelsql.connect(db)
    c.execute("CREATE TABLE t (x INTEGER)")
    c.commit()
    c.execute("INSERT INTO t VALUES (1)")
    c.close()
    with modelsql.connect(db) as c2:
        assert c2.execute("SELECT count(*) FROM t").fetchone() == (0,)


# ------------------------------------------------------------------ interleaved cursors


def test_two_cursors_interleave_streaming_results(con):
    con.execute("CREATE TABLE a AS SELECT i FROM range(30000) r(i)")
    con.execute("CREATE TABLE b AS SELECT i * 2 AS j, 'v' || i AS s FROM range(25000) r(i)")
    c1, c2 = con.cursor(), con.cursor()
    c1.execute("SELECT i FROM a ORDER BY i")
    first = c1.fetchmany(100)
    c2.execute("SELECT j, s FROM b ORDER BY j")
    got1, got2 = list(first), []
    while True:
        r1 = c1.fetchmany(997)
        r2 = c2.fetchmany(1009)
        got1 += r1
        got2 += r2
        if not r1 and not r2:
            break
    assert got1 == [(i,) for i in range(30000)]
    assert got2 == [(2 * i, f"v{i}") for i in range(25000)]
    assert c1.fetchone() is None and c2.fetchone() is None


def test_two_cursors_interleave_predict_results(con):
    con.import_model("m", linear_model(np.array([[1.0], [0.0]])))
    con.execute("CREATE TABLE t AS SELECT i::DOUBLE AS a, 0.0::DOUBLE AS b FROM range(20000) r(i)")
    c1, c2 = con.cursor(), con.cursor()
    c1.execute("SELECT a, y FROM PREDICT(MODEL m, TABLE t) ORDER BY a")
    c2.execute("SELECT a, y FROM PREDICT(MODEL m, TABLE t) ORDER BY a DESC")
    rows1, rows2 = [], []
    for _ in range(50):
        rows1 += c1.fetchmany(300)
        rows2.append(c2.fetchone())
        rows1.append(c1.fetchone())
    rows1 += c1.fetchall()
    rows2 += c2.fetchall()
    assert rows1 == [(float(i), float(i)) for i in range(20000)]
    assert rows2 == [(float(i), float(i)) for i in range(19999, -1, -1)]


def test_statement_on_a_cursor_replaces_its_own_stream(con):
    cur = con.cursor()
    cur.execute("SELECT i FROM range(10000) r(i)")
    assert cur.fetchone() == (0,)
    cur.execute("SELECT 'x'")
    assert cur.fetchall() == [("x",)]


def test_model_statement_while_another_cursor_streams(con, tmp_path):
    c1 = con.cursor()
    c1.execute("SELECT i FROM range(10000) r(i) ORDER BY i")
    assert c1.fetchone() == (0,)
    con.import_model("m", linear_model(np.ones((2, 1))))
    con.execute("SHOW MODELS").fetchall()
    rest = c1.fetchall()
    assert rest == [(i,) for i in range(1, 10000)]


# ------------------------------------------------------------------ description, rowcount


def test_description_and_rowcount(con, tmp_path):
    cur = con.cursor()
    assert cur.description is None and cur.rowcount == -1
    assert cur.arraysize == 1
    cur.execute("CREATE TABLE t (id INTEGER, x DOUBLE, s VARCHAR, ts TIMESTAMP, d DATE, b BLOB, m DECIMAL(10, 2))")
    assert cur.description is None and cur.rowcount == -1
    cur.execute(
        "INSERT INTO t VALUES (1, 1.5, 'a', TIMESTAMP '2024-01-01 10:00:00', DATE '2024-01-01', 'ab'::BLOB, 1.25), "
        "(2, 2.5, 'b', NULL, NULL, NULL, NULL), (3, 3.5, 'c', NULL, NULL, NULL, NULL)"
    )
    assert cur.description is None and cur.rowcount == 3
    with pytest.raises(modelsql.ProgrammingError):
        cur.fetchall()  # no result set
    cur.execute("UPDATE t SET x = x + 1 WHERE id >= 2")
    assert cur.description is None and cur.rowcount == 2
    cur.execute("DELETE FROM t WHERE id = 3")
    assert cur.description is None and cur.rowcount == 1
    cur.execute("UPDATE t SET x = 0 WHERE id > 100")
    assert cur.rowcount == 0
    cur.execute("SELECT * FROM t ORDER BY id")
    assert cur.rowcount == -1
    desc = cur.description
    assert [d[0] for d in desc] == ["id", "x", "s", "ts", "d", "b", "m"]
    assert all(len(d) == 7 for d in desc)
    codes = {d[0]: d[1] for d in desc}
    assert codes["id"] == modelsql.NUMBER and codes["x"] == modelsql.NUMBER and codes["m"] == modelsql.NUMBER
    assert codes["s"] == modelsql.STRING
    assert codes["ts"] == modelsql.DATETIME and codes["d"] == modelsql.DATETIME
    assert codes["b"] == modelsql.BINARY
    assert codes["s"] != modelsql.NUMBER and codes["id"] != modelsql.STRING and codes["ts"] != modelsql.NUMBER
    assert modelsql.NUMBER != modelsql.STRING
    row = cur.fetchone()
    assert row[0] == 1 and row[3] == dt.datetime(2024, 1, 1, 10, 0) and row[4] == dt.date(2024, 1, 1)
    cur.executemany("INSERT INTO t (id) VALUES (?)", [(10,), (11,), (12,)])
    assert cur.rowcount == 3 and cur.description is None
    cur.execute("DROP TABLE t")
    assert cur.description is None and cur.rowcount == -1


def test_description_and_rowcount_of_model_statements(con, tmp_path):
    from conftest import save

    p = save(linear_model(np.ones((2, 1))), tmp_path / "m.onnx")
    cur = con.cursor()
    cur.execute(f"IMPORT MODEL m FROM '{p}'")
    assert cur.description is None
    cur.execute(f"CREATE OR REPLACE MODEL m FROM '{p}'")
    assert cur.description is None
    cur.execute("SHOW MODELS")
    assert cur.description[0][0] == "name" and cur.rowcount == -1
    assert [r[0] for r in cur.fetchall()] == ["m"]
    cur.execute("DESCRIBE MODEL m")
    assert cur.description is not None and len([r for r in cur.fetchall() if r[0] != "property"]) == 2
    cur.execute("DROP MODEL m VERSION 1")
    assert cur.description is None and cur.rowcount == 1
    cur.execute("VACUUM MODELS")
    assert [d[0] for d in cur.description] == ["blobs_removed", "bytes_freed"]
    cur.fetchall()
    load_table(con, "t", {"a": ("DOUBLE", [1.0]), "b": ("DOUBLE", [2.0])})
    cur.execute("SELECT * FROM PREDICT(MODEL m, TABLE t)")
    assert cur.rowcount == -1 and cur.description[2][1] == modelsql.NUMBER


def test_fetch_before_execute_is_an_error(con):
    cur = con.cursor()
    with pytest.raises(modelsql.Error):
        cur.fetchone()


def test_fetchmany_uses_arraysize(con):
    cur = con.cursor()
    cur.execute("SELECT i FROM range(10) r(i) ORDER BY i")
    assert cur.fetchmany() == [(0,)]
    cur.arraysize = 4
    assert cur.fetchmany() == [(1,), (2,), (3,), (4,)]
    assert cur.fetchmany(100) == [(i,) for i in range(5, 10)]
    assert cur.fetchmany() == []
    assert cur.fetchone() is None


# ------------------------------------------------------------------ transactions


def test_uncommitted_changes_are_invisible_to_a_second_connection(db):
    c1 = modelsql.connect(db)
    c2 = modelsql.connect(db)  # same file, same process: DuckDB shares one database instance
    try:
        c1.execute("CREATE TABLE t (x INTEGER)")
        assert c2.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 't'").fetchone() == (0,)
        c2.rollback()
        c1.commit()
        c1.execute("INSERT INTO t VALUES (1), (2)")
        assert c2.execute("SELECT count(*) FROM t").fetchone() == (0,)
        c1.commit()
        # c2 still sees the snapshot of its own open transaction ...
        assert c2.execute("SELECT count(*) FROM t").fetchone() == (0,)
        c2.commit()
        # ... and the committed rows once it starts a new one
        assert c2.execute("SELECT count(*) FROM t").fetchone() == (2,)
        c1.execute("INSERT INTO t VALUES (3)")
        c1.rollback()
        c2.rollback()
        assert c2.execute("SELECT count(*) FROM t").fetchone() == (2,)
        assert c1.execute("SELECT count(*) FROM t").fetchone() == (2,)
    finally:
        c1.close()
        c2.close()


def test_model_import_is_visible_to_another_connection(db, tmp_path):
    c1 = modelsql.connect(db)
    c2 = modelsql.connect(db)
    try:
        c2.execute("CREATE TABLE t AS SELECT 1.0::DOUBLE AS a, 2.0::DOUBLE AS b")
        c2.commit()
        c1.import_model("m", linear_model(np.ones((2, 1))))
        c2.rollback()
        assert c2.execute("SELECT y FROM PREDICT(MODEL m, TABLE t)").fetchall() == [(3.0,)]
    finally:
        c1.close()
        c2.close()


def test_model_statements_commit_implicitly(db):
    with modelsql.connect(db) as c1:
        c1.execute("CREATE TABLE t (x INTEGER)")
        c1.execute("INSERT INTO t VALUES (1)")
        c1.import_model("m", linear_model(np.ones((2, 1))))  # commits the INSERT first, like DDL in MySQL
        c1.execute("INSERT INTO t VALUES (2)")
        c1.rollback()
        assert c1.execute("SELECT x FROM t").fetchall() == [(1,)]


def test_autocommit_mode(db):
    c1 = modelsql.connect(db)
    c1.autocommit = True
    c2 = modelsql.connect(db)
    c2.autocommit = True
    try:
        c1.execute("CREATE TABLE t (x INTEGER)")
        c1.execute("INSERT INTO t VALUES (1)")
        assert c2.execute("SELECT count(*) FROM t").fetchone() == (1,)
        c1.rollback()  # nothing to roll back
        assert c2.execute("SELECT count(*) FROM t").fetchone() == (1,)
    finally:
        c1.close()
        c2.close()


def test_explicit_begin_commit_statements(con):
    con.execute("CREATE TABLE t (x INTEGER)")
    con.execute("COMMIT")
    con.execute("INSERT INTO t VALUES (1)")
    con.execute("ROLLBACK")
    assert con.execute("SELECT count(*) FROM t").fetchone() == (0,)


def test_failed_statement_then_rollback_recovers(con):
    con.execute("CREATE TABLE t (x INTEGER)")
    con.commit()
    con.execute("INSERT INTO t VALUES (1)")
    with pytest.raises(modelsql.ProgrammingError):
        con.execute("SELECT nope FROM t")
    # like PostgreSQL/psycopg: the transaction is aborted until rollback
    with pytest.raises(modelsql.OperationalError):
        con.execute("SELECT 1")
    con.rollback()
    assert con.execute("SELECT count(*) FROM t").fetchone() == (0,)


def test_context_manager_commits_on_success(db):
    with modelsql.connect(db) as c:
        c.execute("CREATE TABLE t (x INTEGER)")
        c.execute("INSERT INTO t VALUES (1)")
    assert c.closed
    with modelsql.connect(db) as c:
        assert c.execute("SELECT x FROM t").fetchall() == [(1,)]


def test_context_manager_rolls_back_on_exception(db):
    with modelsql.connect(db) as c:
        c.execute("CREATE TABLE t (x INTEGER)")
    with pytest.raises(ZeroDivisionError):
        with modelsql.connect(db) as c:
            c.execute("INSERT INTO t VALUES (1)")
            1 / 0
    assert c.closed
    with pytest.raises(modelsql.ProgrammingError):
        with modelsql.connect(db) as c:
            c.execute("INSERT INTO t VALUES (2)")
            c.execute("SELECT * FROM PREDICT(MODEL nothere, TABLE t)")
    with modelsql.connect(db) as c:
        assert c.execute("SELECT count(*) FROM t").fetchone() == (0,)


def test_context_manager_after_manual_close(db):
    with modelsql.connect(db) as c:
        c.execute("SELECT 1")
        c.close()
    assert c.closed


def test_parameters_must_be_a_sequence(con):
    with pytest.raises(modelsql.ProgrammingError):
        con.execute("SELECT ?", "a")
    with pytest.raises((modelsql.ProgrammingError, modelsql.NotSupportedError)):
        con.execute("SELECT ?", {"a": 1})  # never the dict's keys
    with pytest.raises(modelsql.ProgrammingError):
        con.execute("SELECT ?", {1})  # a set has no order
    assert con.execute("SELECT ?, ?", (1, "x")).fetchall() == [(1, "x")]


def test_connections_in_threads(db):
    """threadsafety = 1: threads share the module, each with its own connection."""
    import threading

    with modelsql.connect(db) as c:
        c.import_model("m", linear_model(np.array([[1.0], [1000.0]])))
        c.execute("CREATE TABLE t AS SELECT i::DOUBLE AS a, (i % 7)::DOUBLE AS b FROM range(50000) r(i)")
    errors = []

    def work():
        try:
            with modelsql.connect(db) as c:
                for _ in range(3):
                    rows = c.execute("SELECT count(*), sum(y - a - 1000 * b) FROM PREDICT(MODEL m, TABLE t)").fetchall()
                    assert rows == [(50000, 0.0)], rows
        except Exception as exc:  # reported below
            errors.append(repr(exc))

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
