"""Plain SQL in texts that name models (issue 6, SQL items): RETURNING in plain SQL, definitions and a
``predict`` macro beside models, the names of unaliased columns, and the messages for an aborted transaction,
a correlated PREDICT and a malformed PREDICT. Real DuckDB files and real ONNX Runtime; DuckDB's own client is
the reference wherever modelsql should behave as it does."""

from __future__ import annotations

import duckdb
import numpy as np
import pytest

import modelsql
from conftest import linear_model
from modelsql.sql import mentions_models


@pytest.fixture
def lin(con):
    """``con`` with model ``m`` (y = a + b + c) and table ``t(id, a, b, c)`` of 3 rows."""
    con.import_model("m", linear_model(np.ones((3, 1), dtype=np.float32)))
    con.execute("CREATE TABLE t AS SELECT range::INTEGER AS id, range::DOUBLE AS a, 1.0::DOUBLE AS b, "
                "2.0::DOUBLE AS c FROM range(3)")
    con.commit()
    return con


def names(cur) -> list[str]:
    return [d[0] for d in cur.description]


# ------------------------------------------------------------ 1. RETURNING in plain SQL

RETURNING = [  # (statement, whether DuckDB returns rows)
    ("INSERT INTO r VALUES (3, 'x'), (4, 'RETURNING') RETURNING s, k", True),
    ("UPDATE r SET k = k + 10 WHERE k > 3 RETURNING *", True),
    ('INSERT INTO r VALUES (5, \'y\') RETURNING k AS "Count"', True),  # looks like a count
    ("DELETE FROM r WHERE k = 100 RETURNING k", True),  # no rows, but a result set
    ("DELETE FROM r WHERE k = 1 RETURNING 'gone: ' || s", True),
    ("INSERT INTO r VALUES (6, 'RETURNING') /* RETURNING k */", False),
    ("UPDATE r SET s = 'RETURNING' WHERE k = 2 -- RETURNING *", False),
]


def test_returning_in_plain_sql_gives_rows_description_and_rowcount_as_duckdb_does(con):
    ref = duckdb.connect()
    for c in (con, ref):
        c.execute("CREATE TABLE r (k INTEGER, s VARCHAR)")
        c.execute("INSERT INTO r VALUES (1, 'a'), (2, 'b')")
    for sql, returns in RETURNING:
        assert not mentions_models(sql)
        cur = con.execute(sql)
        ref.execute(sql)
        assert cur.rowcount == ref.rowcount == (-1 if returns else 1), sql
        if returns:
            assert [(d[0], d[1]) for d in cur.description] == [(d[0], str(d[1])) for d in ref.description], sql
            assert cur.fetchall() == ref.fetchall(), sql
        else:  # a count: PEP 249 gives no result set
            assert cur.description is None and ref.fetchall() == [(1,)], sql
    con.commit()
    assert con.execute("SELECT * FROM r ORDER BY k").fetchall() == ref.execute("SELECT * FROM r ORDER BY k").fetchall()


def test_returning_a_string_first_writes_the_row_once_and_returns_it(con):
    con.execute("CREATE TABLE r (k INTEGER, s VARCHAR)")
    cur = con.execute("INSERT INTO r VALUES (1, 'one') RETURNING s, k")
    assert cur.fetchall() == [("one", 1)]  # was a bare ValueError after the row was written
    con.commit()
    assert con.execute("SELECT * FROM r").fetchall() == [(1, "one")]


# --------------------------------------- 9. definitions beside models; a macro named predict

def test_definitions_without_predict_run_in_a_text_that_names_models(lin):
    cur = lin.execute(
        "CREATE MACRO add2(a, b) AS a + b; CREATE FUNCTION twice(x) AS 2 * x; "
        "CREATE VIEW v AS SELECT id, a FROM t; "
        "SELECT id, add2(y, 1) AS z FROM PREDICT(MODEL m, TABLE t) ORDER BY id"
    )
    assert cur.fetchall() == [(0, 4.0), (1, 5.0), (2, 6.0)]
    assert lin.execute("SELECT twice(a) FROM v ORDER BY id").fetchall() == [(0.0,), (2.0,), (4.0,)]
    for kind in ("VIEW w AS SELECT y", "MACRO mw() AS TABLE SELECT y", "FUNCTION fw() AS TABLE SELECT y"):
        with pytest.raises(modelsql.NotSupportedError) as info:
            lin.execute(f"CREATE {kind} FROM PREDICT(MODEL m, TABLE t)")
        assert info.value.code == "predict_in_view"
        lin.rollback()


def test_a_macro_named_predict_is_an_ordinary_function(lin):
    assert not mentions_models("SELECT predict(1, 2)")
    assert not mentions_models("SELECT predict(model, 2) FROM (SELECT 1 AS model)")
    assert mentions_models("SELECT * FROM PREDICT(MODEL m, TABLE t)")
    lin.execute("CREATE MACRO predict(a, b) AS a + b")
    assert lin.execute("SELECT predict(1, 2)").fetchall() == [(3,)]
    assert lin.execute("SELECT predict(model, 2) FROM (SELECT 1 AS model)").fetchall() == [(3,)]
    cur = lin.execute("SELECT id, predict(id, 10) AS p, y FROM PREDICT(MODEL m, TABLE t) ORDER BY id")
    assert cur.fetchall() == [(0, 10, 3.0), (1, 11, 4.0), (2, 12, 5.0)]
    lin.execute("CREATE MACRO predict(n) AS TABLE SELECT range AS i FROM range(n)")
    cur = lin.execute("SELECT count(*) FROM predict(4) AS q, PREDICT(MODEL m, TABLE t) AS p")
    assert cur.fetchall() == [(12,)]


# ------------------------------------------------- 10. unaliased columns keep DuckDB's name

EXPRESSIONS = [
    "today()", "1_000", "ARRAY[1, 2]", "[1,2]", "a+1", "a::INTEGER", "current_date", "count(*) OVER ()",
    "CASE WHEN a > 0 THEN 'p' END", "'x' || 'y'", "2 ** 3", "struct_pack(k := 1)", "upper('q')",
    "(a)", "p.a", "p.id", "DATE '2020-01-01'", "[x * 2 for x in [1, 2]]", "a /* note */ * 2",
    "(SELECT max(b) FROM t)",
]


def duckdb_names(sql: str, params=None) -> list[str]:
    """The column names DuckDB's own client gives ``sql`` over copies of ``t`` and of its predictions."""
    ref = duckdb.connect()
    ref.execute("CREATE TABLE t AS SELECT 1::INTEGER AS id, 0.5::DOUBLE AS a, 1.0::DOUBLE AS b, 2.0::DOUBLE AS c")
    ref.execute("CREATE TABLE pred AS SELECT *, 3.5::FLOAT AS y FROM t")
    return [d[0] for d in ref.execute(sql, params).description]


def test_unaliased_expressions_beside_predict_are_named_as_duckdb_names_the_users_text(lin):
    select = ", ".join(EXPRESSIONS)
    got = names(lin.execute(f"SELECT {select}, y FROM PREDICT(MODEL m, TABLE t) AS p"))
    want = duckdb_names(f"SELECT {select}, y FROM pred AS p")
    assert got == want
    assert got[:3] == ["today()", "1_000", "(ARRAY[1, 2])"]


def test_names_inside_ctas_insert_by_name_cte_and_the_predict_input(lin):
    lin.execute("CREATE TABLE ct AS SELECT today(), 1_000, y FROM PREDICT(MODEL m, TABLE t)")
    cols = [r[0] for r in lin.execute("SELECT column_name FROM duckdb_columns() WHERE table_name = 'ct' "
                                      "ORDER BY column_index").fetchall()]
    assert cols == ["today()", "1_000", "y"]
    lin.execute('CREATE TABLE bn ("1_000" INTEGER, y FLOAT)')
    lin.execute("INSERT INTO bn BY NAME SELECT y, 1_000 FROM PREDICT(MODEL m, TABLE t)")
    assert lin.execute('SELECT DISTINCT "1_000" FROM bn').fetchall() == [(1000,)]
    cur = lin.execute("WITH w AS (SELECT today(), y FROM PREDICT(MODEL m, TABLE t)) SELECT * FROM w")
    assert names(cur) == ["today()", "y"]
    cur = lin.execute("SELECT * FROM PREDICT(MODEL m, (SELECT a, b, c, [1,2], a+1 FROM t), features = (a, b, c))")
    assert names(cur) == ["a", "b", "c", "list_value(1, 2)", "(a + 1)", "y"]


def test_returning_beside_predict_is_named_as_duckdb_names_it(lin):
    returning = "RETURNING today(), y + 1, id, 1_000, current_date, ARRAY[1]"
    lin.execute("CREATE TABLE r (id INTEGER, y FLOAT)")
    cur = lin.execute(f"INSERT INTO r SELECT id, y FROM PREDICT(MODEL m, TABLE t) {returning}")
    ref = duckdb.connect()
    ref.execute("CREATE TABLE r (id INTEGER, y FLOAT)")
    ref.execute(f"INSERT INTO r VALUES (0, 3) {returning}")
    assert names(cur) == [d[0] for d in ref.description]  # DuckDB names RETURNING columns by their bound form
    assert cur.rowcount == -1 and len(cur.fetchall()) == 3


def test_columns_by_position_still_read_the_right_column(lin):
    cur = lin.execute("SELECT #5, today(), count(*) OVER () FROM PREDICT(MODEL m, TABLE t) ORDER BY #1")
    assert names(cur) == ["y", "today()", "count() OVER ()"]
    assert [r[0] for r in cur.fetchall()] == [3.0, 4.0, 5.0]


def test_names_of_expressions_with_parameters_and_with_predict(lin):
    cur = lin.execute("SELECT ?, ? + 1, y FROM PREDICT(MODEL m, (SELECT * FROM t WHERE id = ?))", [7, 8, 1])
    assert names(cur) == duckdb_names("SELECT ?, ? + 1, y FROM pred WHERE id = ?", [7, 8, 1]) == ["$1", "($2 + 1)", "y"]
    assert cur.fetchall() == [(7, 9, 4.0)]
    cur = lin.execute("SELECT $2, y FROM PREDICT(MODEL m, (SELECT * FROM t WHERE id = $1))", [1, 5])
    assert names(cur) == ["$2", "y"]
    cur = lin.execute("SELECT 1; SELECT ? * 2, y FROM PREDICT(MODEL m, TABLE t) LIMIT 1", [4])
    assert names(cur) == ["($1 * 2)", "y"]
    cur = lin.execute("SELECT (SELECT max(y) FROM PREDICT(MODEL m, TABLE t)), today()")
    assert names(cur) == ["(SELECT max(y) FROM PREDICT(MODEL m, TABLE t))", "today()"]


# ----------------------------------------------------------------------- 13. messages

def test_an_aborted_transaction_says_so_and_to_roll_back(lin):
    with pytest.raises(modelsql.ProgrammingError):
        lin.execute("SELECT nope FROM t")
    failures = []
    for attempt in (
        lambda: lin.import_model("m2", linear_model(np.ones((3, 1), dtype=np.float32))),
        lambda: lin.execute("SELECT 1"),
        lambda: lin.execute("SELECT * FROM PREDICT(MODEL m, TABLE t)"),
        lambda: lin.execute("SHOW MODELS"),
        lambda: lin.execute("DESCRIBE MODEL m"),
        lambda: lin.execute("DROP MODEL m"),
    ):
        with pytest.raises(modelsql.OperationalError) as info:
            attempt()
        failures.append(info.value)
    for err in failures:
        assert err.code == "transaction_aborted", err
        assert "aborted" in str(err) and "rollback()" in str(err), err
        assert "TransactionContext" not in str(err) and "Catalog error" not in str(err), err
    lin.rollback()
    assert lin.execute("SELECT count(*) FROM t").fetchone() == (3,)
    assert lin.execute("SELECT count(*) FROM modelsql.models").fetchone() == (1,)


@pytest.mark.parametrize("sql", [
    "SELECT * FROM t, LATERAL (SELECT * FROM PREDICT(MODEL m, (SELECT t.a, t.b, t.c)))",
    "SELECT * FROM t AS o, LATERAL (SELECT y FROM PREDICT(MODEL m, (SELECT a, b, c FROM t WHERE id = o.id)))",
    "SELECT (SELECT y FROM PREDICT(MODEL m, (SELECT t.a, t.b, t.c))) FROM t",
])
def test_a_correlated_predict_is_named_a_known_limit_with_what_to_write(lin, sql):
    with pytest.raises(modelsql.NotSupportedError) as info:
        lin.execute(sql)
    err = info.value
    assert err.code == "correlated_predict"
    assert "Referenced table" not in str(err)
    assert "known limit" in str(err) and "join the predictions" in str(err).lower()
    lin.rollback()


def test_a_correlated_routed_predict_is_named_a_known_limit_too(lin):
    """A routed PREDICT over a correlated input: the same error (it raised AttributeError from inside the
    planner)."""
    lin.import_model("m2", linear_model(np.full((3, 1), 2.0, dtype=np.float32)))
    lin.commit()
    with pytest.raises(modelsql.NotSupportedError) as info:
        lin.execute("SELECT * FROM t, LATERAL (SELECT * FROM PREDICT(MODELS (m, m2) ROUTE BY r, "
                    "(SELECT t.a, t.b, t.c, 'm2' AS r)))")
    assert info.value.code == "correlated_predict" and "known limit" in str(info.value)
    lin.rollback()
    rows = lin.execute("SELECT id, y FROM PREDICT(MODELS (m, m2) ROUTE BY r, (SELECT id, a, b, c, 'm2' AS r FROM t)) "
                       "ORDER BY id").fetchall()
    assert rows == [(0, 6.0), (1, 8.0), (2, 10.0)]


def test_a_predict_typo_in_a_table_name_stays_a_binder_error(lin):
    with pytest.raises(modelsql.ProgrammingError) as info:
        lin.execute("SELECT * FROM PREDICT(MODEL m, (SELECT x.a, x.b, x.c FROM t))")
    assert info.value.code == "binder_error"


@pytest.mark.parametrize("sql", [
    "SELECT * FROM PREDICT(MODEL m)",
    "SELECT * FROM PREDICT(MODEL m t)",
    "SELECT * FROM PREDICT(MODEL m, t)",
    "SELECT * FROM PREDICT(TABLE t)",
    "SELECT * FROM PREDICT(m, TABLE t)",  # MODEL forgotten
    "SELECT * FROM PREDICT(m VERSION 2, TABLE t)",
])
def test_a_malformed_predict_shows_the_accepted_form(lin, sql):
    with pytest.raises(modelsql.ProgrammingError) as info:
        lin.execute(sql)
    assert info.value.code == "parse_error"
    assert ("PREDICT(MODEL name [VERSION n | ALIAS a] | PIPELINE name [VERSION n] | MODELS (name, ...) ROUTE BY column "
            "| MODELS FAMILY name ROUTE BY column, TABLE t | (SELECT ...)") in str(info.value)
    assert "Expected , TABLE" not in str(info.value)


def test_vacuum_models_in_an_aborted_transaction_says_so(tmp_path):
    con = modelsql.connect(str(tmp_path / "v.duckdb"))
    with pytest.raises(modelsql.Error):
        con.execute("SELECT error('boom')").fetchall()
    with pytest.raises(modelsql.OperationalError) as ei:
        con.execute("VACUUM MODELS")  # COMMIT would have ended the aborted transaction silently
    assert ei.value.code == "transaction_aborted" and "rollback()" in str(ei.value)
    con.rollback()
    assert con.execute("VACUUM MODELS").fetchall() == [(0, 0)]
    con.close()


def test_executemany_with_returning_keeps_every_executions_rows(tmp_path):
    con = modelsql.connect(str(tmp_path / "many.duckdb"))
    cur = con.cursor()
    cur.execute("CREATE TABLE t (x INTEGER)")
    cur.executemany("INSERT INTO t VALUES (?) RETURNING x * 10 AS y", [[1], [2], [3]])
    assert [d[0] for d in cur.description] == ["y"] and cur.rowcount == -1
    assert cur.fetchall() == [(10,), (20,), (30,)]
    cur.executemany("INSERT INTO t VALUES (?)", [[4], [5]])
    assert cur.rowcount == 2 and cur.description is None
    cur.execute("SELECT count(*) FROM t")
    assert cur.fetchall() == [(5,)]
    con.close()
