"""PEP 249 edges beyond the dbapi20 suite, in the manner of CPython's sqlite3 tests:
every method after close(), interleaved streaming cursors, description and
rowcount after each kind of statement, type objects, transactions across two
connections to one file, the context manager, how parameters are read and what
``rowcount`` counts.

Parameters (issue 6, item 11): a sequence is read by index ``0 .. len - 1``, as sqlite3 and psycopg read
one, so a sequence whose iteration differs from its indexing binds what indexing gives, and an exception
from its own ``__len__`` or ``__getitem__`` reaches the caller unchanged (sqlite3 lets it propagate too).

``rowcount`` (issue 22, item 3) is the number of rows a statement changed, as DuckDB, sqlite3 and psycopg
give it: after INSERT, UPDATE, DELETE, ``CREATE TABLE ... AS``, ``COPY`` and ``EXECUTE`` of a prepared one
of them, also when the statement reads a PREDICT, and summed over ``executemany``. A statement that returns
rows (a query, ``... RETURNING``) has rowcount -1 and keeps every row; each is compared with DuckDB's own
client.

Attribute reads (``description``, ``rowcount``, ``arraysize``) stay possible on a
closed cursor, as in sqlite3 and psycopg: PEP 249 makes *operations* on a closed
cursor raise, and every method does.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import duckdb
import numpy as np
import pytest

import modelsql
from conftest import linear_model, load_table, save, scale_model


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
    assert cur.description is not None and len([r for r in cur.fetchall() if r[0] in ("input", "output")]) == 2
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


class ReversedIteration(Sequence):
    """Indexing gives ``values``; iteration gives them backwards."""

    def __init__(self, values) -> None:
        self.values = list(values)

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, i):
        return self.values[i]

    def __iter__(self):
        return iter(reversed(self.values))


class LengthFails(Sequence):
    """``__len__`` raises; indexing alone would give one value, then IndexError."""

    class Boom(Exception):
        pass

    def __len__(self) -> int:
        raise self.Boom("no length today")

    def __getitem__(self, i):
        if i >= 1:
            raise IndexError(i)
        return 1


class ItemFails(Sequence):
    """Two values long; reading the second raises."""

    def __len__(self) -> int:
        return 2

    def __getitem__(self, i):
        if i == 1:
            raise KeyError("second value unreadable")
        return 1


def test_sequence_is_read_by_index(con):
    assert con.execute("SELECT ?, ?", ReversedIteration([1, 2])).fetchall() == [(1, 2)]
    assert con.execute("SELECT $1 || $2", ReversedIteration(["a", "b"])).fetchone() == ("ab",)


def test_executemany_reads_each_sequence_by_index(con):
    cur = con.cursor()
    cur.execute("CREATE TABLE t (id INTEGER, s VARCHAR)")
    cur.executemany("INSERT INTO t VALUES (?, ?)", [ReversedIteration([1, "a"]), ReversedIteration([2, "b"])])
    assert cur.rowcount == 2
    assert cur.execute("SELECT id, s FROM t ORDER BY id").fetchall() == [(1, "a"), (2, "b")]


def test_error_from_len_or_getitem_reaches_the_user(con):
    cur = con.cursor()
    with pytest.raises(LengthFails.Boom, match="no length today"):
        cur.execute("SELECT ?", LengthFails())
    with pytest.raises(KeyError, match="second value unreadable"):
        cur.execute("SELECT ?, ?", ItemFails())
    with pytest.raises(LengthFails.Boom):
        cur.executemany("SELECT ?", [[1], LengthFails()])
    assert cur.execute("SELECT ?", [7]).fetchone() == (7,)  # the cursor still works


def test_parameters_that_cannot_be_indexed_or_are_a_mapping(con):
    with pytest.raises(modelsql.ProgrammingError, match="must be a sequence") as exc:
        con.execute("SELECT ?", {"a": 1}.values())  # sized and iterable, not indexable
    assert exc.value.code == "invalid_argument"
    with pytest.raises(modelsql.NotSupportedError, match="qmark") as exc:
        con.execute("SELECT ?", {"a": 1})
    assert exc.value.code == "paramstyle"


def test_numpy_scalars_and_arrays_as_parameters(con):
    values = np.array([3, 4], dtype=np.int64)  # an array is a sequence of NumPy scalars
    assert con.execute("SELECT ? + ?", values).fetchone() == (7,)
    assert con.execute("SELECT ?, ?", (np.float32(0.5), np.bool_(True))).fetchone() == (0.5, True)


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



def test_one_connection_shared_by_threads_runs_their_statements_one_at_a_time(db):
    """threadsafety = 1 says not to share a connection; one shared anyway (a cursor per thread, as with DuckDB's
    own cursor()) gives each statement its own rows: they came back as another thread's, empty, or as raw
    IndexError / TypeError, about a third of them (a helper's finding)."""
    import threading

    con = modelsql.connect(db)
    con.import_model("m", linear_model(np.array([[1.0], [1000.0]])))
    con.execute("CREATE TABLE t AS SELECT i::DOUBLE AS a, (i % 7)::DOUBLE AS b FROM range(2000) r(i)")
    con.commit()
    wrong: list = []

    def work(k: int) -> None:
        for _ in range(25):
            try:
                cur = con.cursor()
                cur.execute(f"SELECT {k}, count(*) FROM PREDICT(MODEL m, (SELECT * FROM t WHERE a < {k * 100}))")
                rows = cur.fetchall()
                if rows != [(k, k * 100)]:
                    wrong.append(rows)
            except Exception as exc:  # noqa: BLE001 - reported below
                wrong.append(repr(exc))

    threads = [threading.Thread(target=work, args=(k,)) for k in (1, 2, 3, 4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    con.close()
    assert wrong == []


# ------------------------------------------------------------------ rowcount: the rows a statement changed


@pytest.fixture
def ref():
    c = duckdb.connect()
    yield c
    c.close()


def counts(con, ref, statements: list[str]) -> list[tuple[int, int]]:
    """``(modelsql's rowcount, DuckDB's)`` of each statement, run on both."""
    out = []
    for sql in statements:
        cur = con.execute(sql)
        ref.execute(sql)
        out.append((cur.rowcount, ref.rowcount))
    return out


def test_create_table_as_copy_and_dml_give_the_rows_changed(con, ref, tmp_path):
    f = tmp_path / "t.csv"
    statements = [
        "CREATE TABLE t AS SELECT range::INTEGER AS k FROM range(4)",
        "CREATE OR REPLACE TABLE u AS SELECT * FROM t WHERE k > 0",
        "INSERT INTO u VALUES (7), (8)",
        "UPDATE u SET k = k + 1 WHERE k > 2",
        "DELETE FROM u WHERE k = 1",
        f"COPY t TO '{f}'",
        f"COPY u FROM '{f}'",
        "CREATE TABLE empty AS SELECT * FROM t WHERE false",
    ]
    assert counts(con, ref, statements) == [(4, 4), (3, 3), (2, 2), (3, 3), (1, 1), (4, 4), (4, 4), (0, 0)]
    cur = con.execute(f"COPY t TO '{f}'")
    assert cur.description is None  # a count, not a result set (PEP 249)


def test_execute_of_a_prepared_statement_counts_dml_and_returns_a_querys_rows(con, ref):
    for c in (con, ref):
        c.execute("CREATE TABLE t (k INTEGER)")
        c.execute("PREPARE add_two AS INSERT INTO t VALUES ($1), ($1 + 1)")
        c.execute('PREPARE read_all AS SELECT k AS "Count" FROM t ORDER BY k')
    assert counts(con, ref, ["EXECUTE add_two(10)", "EXECUTE add_two(20)"]) == [(2, 2), (2, 2)]
    cur = con.execute("EXECUTE read_all")
    assert cur.rowcount == -1  # a query whose column looks like a count is still a query
    assert cur.fetchall() == [(10,), (11,), (20,), (21,)]


def test_executemany_sums_the_rows_changed(con):
    con.execute("CREATE TABLE t (k INTEGER)")
    cur = con.cursor()
    cur.executemany("INSERT INTO t SELECT range FROM range(?)", [(2,), (3,), (0,)])
    assert cur.rowcount == 5
    cur.executemany("CREATE OR REPLACE TABLE c AS SELECT range FROM range(?)", [(2,), (3,)])
    assert cur.rowcount == 2 + 3
    con.execute("PREPARE bump AS UPDATE t SET k = k + 1 WHERE k < 2")
    cur.executemany("EXECUTE bump", [(), ()])
    assert cur.rowcount == 4 + 2  # t is 0, 1, 0, 1, 2: four rows below 2, then two


def test_statements_reading_a_predict_give_the_rows_written(con, tmp_path):
    path = save(scale_model(3.0), tmp_path / "s.onnx")
    con.execute(f"CREATE MODEL triple FROM '{path}'")
    con.execute("CREATE TABLE t AS SELECT i::FLOAT AS x FROM range(5) r(i)")
    cur = con.execute("CREATE TABLE out AS SELECT * FROM PREDICT(MODEL triple, TABLE t)")
    assert cur.rowcount == 5 and cur.description is None
    cur = con.execute("INSERT INTO out SELECT * FROM PREDICT(MODEL triple, (SELECT * FROM t WHERE x > 2))")
    assert cur.rowcount == 2
    cur.executemany("INSERT INTO out SELECT * FROM PREDICT(MODEL triple, (SELECT * FROM t WHERE x < ?))",
                    [(1,), (3,)])
    assert cur.rowcount == 1 + 3
    assert con.execute("SELECT count(*) FROM out").fetchall() == [(11,)]


def test_a_query_keeps_rowcount_minus_one_and_all_its_rows(con):
    cur = con.execute("SELECT range AS k FROM range(100000) WHERE range % 3 = 0")
    assert cur.rowcount == -1
    assert len(cur.fetchall()) == 33334
    con.execute("CREATE TABLE r (k INTEGER)")
    cur = con.execute("INSERT INTO r VALUES (1), (2) RETURNING k")
    assert cur.rowcount == -1 and cur.fetchall() == [(1,), (2,)]
    cur = con.execute("CREATE TABLE r2 AS SELECT * FROM r")
    assert cur.rowcount == 2
