"""Issue 22, item 3: PEP 249 ``rowcount`` is the number of rows a statement changed, as DuckDB, sqlite3 and
psycopg give it: after INSERT, UPDATE, DELETE, ``CREATE TABLE ... AS``, ``COPY`` and ``EXECUTE`` of a prepared
one of them, also when the statement reads a PREDICT, and summed over ``executemany``. A statement that returns
rows (a query, ``... RETURNING``) has rowcount -1 and keeps every row.

Real DuckDB files through ``modelsql.connect``, compared with DuckDB's own client; nothing is mocked.
"""

from __future__ import annotations

import duckdb
import pytest

from conftest import save, scale_model


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
