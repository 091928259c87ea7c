"""Edge cases of the PREDICT planner (shared inputs declined, refused statements, plans of files read by
name, recursive CTEs, batch results in a long transaction, multi-statement texts), found by review: each once gave a wrong answer, a stale plan or an
InternalError, and must now answer as a fresh plan would or refuse with the right PEP 249 class."""

from __future__ import annotations

import numpy as np
import pytest

import modelsql
from conftest import linear_model


@pytest.fixture
def two(con):
    con.import_model("m1", linear_model(np.ones((2, 1), dtype=np.float32)), features=["a", "b"])
    con.import_model("m2", linear_model(2 * np.ones((2, 1), dtype=np.float32)), features=["a", "b"])
    con.execute("CREATE TABLE t AS SELECT i AS id, i::DOUBLE AS a, 1.0::DOUBLE AS b FROM range(50) r(i)")
    con.commit()
    return con


def both(con, q):
    out = []
    for optimize in (True, False):
        con.optimize = optimize
        out.append(con.execute(q).fetchall())
    con.optimize = True
    return out


def test_a_volatile_input_is_not_shared(two):
    src = "(SELECT *, random() AS r FROM t)"
    q = (f"SELECT count(*), sum(p.y + q.y) FROM PREDICT(MODEL m1, {src}) p JOIN PREDICT(MODEL m2, {src}) q "
         "ON p.id = q.id AND p.r = q.r")
    on, off = both(two, q)
    assert on == off == [(0, None)]  # two reads of random() never agree
    plan = [v for k, v in two.execute("EXPLAIN " + q).fetchall() if k == "modelsql_plan"][0]
    assert "declined" in plan and "random()" in plan.lower()


def test_a_sampled_input_is_not_shared(two):
    src = "(SELECT * FROM t USING SAMPLE 50 PERCENT (bernoulli))"
    q = (f"SELECT count(*), sum(p.y + q.y) FROM PREDICT(MODEL m1, {src}) p "
         f"JOIN PREDICT(MODEL m2, {src}) q USING (id)")
    plan = [v for k, v in two.execute("EXPLAIN " + q).fetchall() if k == "modelsql_plan"][0]
    assert "declined" in plan and "sample" in plan and "SharedInput" not in plan


@pytest.mark.parametrize("stmt", ["SHOW MODELS", "DESCRIBE MODEL m1", "DROP MODEL m1", "VACUUM MODELS"])
def test_explain_of_a_model_statement_is_refused(two, stmt):
    with pytest.raises(modelsql.NotSupportedError) as info:
        two.execute("EXPLAIN " + stmt)
    assert info.value.code == "explain_not_supported"
    assert two.execute("SELECT count(*) FROM modelsql.models").fetchone() == (2,)  # nothing dropped


@pytest.mark.parametrize("sql", ["PREPARE p AS SELECT y FROM PREDICT(MODEL m1, TABLE t)",
                                 "PREPARE p AS SELECT y FROM PREDICT(MODEL m1, (SELECT * FROM t WHERE y > ?))"])
def test_prepare_of_a_predict_is_refused(two, sql):
    with pytest.raises(modelsql.NotSupportedError) as info:  # a ? is PREPARE's own, not a missing value
        two.execute(sql)
    assert info.value.code == "predict_in_command"


def test_a_prepares_placeholders_take_no_values_among_other_statements(two):
    """Values go to the statements that run now; a PREPARE's ? are bound when it is executed."""
    rows = two.execute("PREPARE q AS SELECT ? + 1; SELECT count(*) FROM PREDICT(MODEL m1, (SELECT * FROM t "
                       "WHERE a < ?))", [10.0]).fetchall()
    assert rows == [(10,)] and two.execute("EXECUTE q(41)").fetchall() == [(42,)]
    with pytest.raises(modelsql.ProgrammingError) as info:
        two.execute("PREPARE r AS SELECT ? + 1; SELECT y FROM PREDICT(MODEL m1, TABLE t)", [1])
    assert info.value.code == "parameter_count" and "PREPARE" in str(info.value)
    two.rollback()


@pytest.mark.parametrize("value", ["NULL", "0", "99999999999999999999"])
def test_batch_size_out_of_range_is_refused(two, value):
    with pytest.raises(modelsql.ProgrammingError) as info:
        two.execute(f"SELECT y FROM PREDICT(MODEL m1, TABLE t, batch_size = {value})").fetchall()
    assert info.value.code == "invalid_option" and "batch_size" in str(info.value)


def test_a_file_read_by_name_is_planned_every_time(two, tmp_path):
    f = str(tmp_path / "in.parquet")
    two.execute(f"COPY (SELECT 1.0::DOUBLE AS a, 2.0::DOUBLE AS b) TO '{f}'")
    q = f"SELECT y FROM PREDICT(MODEL m1, (SELECT * FROM '{f}'))"
    assert two.execute(q).fetchall() == [(3.0,)]
    import duckdb

    duckdb.connect().execute(f"COPY (SELECT 2.0::DOUBLE AS b, 5.0::DOUBLE AS a) TO '{f}'")  # columns swapped
    assert two.execute(q).fetchall() == [(7.0,)]


def test_a_predict_inside_a_recursive_cte_over_a_table(two):
    q = ("WITH RECURSIVE r(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM r "
         "WHERE n < (SELECT max(y) FROM PREDICT(MODEL m1, TABLE t WHERE id < 3))) SELECT max(n) FROM r")
    q = q.replace("TABLE t WHERE id < 3", "(SELECT * FROM t WHERE id < 3)")
    assert two.execute(q).fetchall() == [(3,)]  # max(y) = 2 + 1 = 3: n runs 0..3


def test_a_predict_reading_the_recursive_cte_that_holds_it_is_refused(two):
    q = ("WITH RECURSIVE r AS (SELECT id, a, b FROM t WHERE id = 0 UNION ALL "
         "SELECT id + 1, y, b FROM PREDICT(MODEL m1, (SELECT id, a, b FROM r)) WHERE id < 3) SELECT * FROM r")
    with pytest.raises(modelsql.NotSupportedError) as info:
        two.execute(q)
    assert info.value.code == "predict_in_recursive_cte"


def test_batch_results_do_not_pile_up_in_a_long_transaction(two):
    # DuckDB keeps a registered object until the transaction ends, even unregistered: a batch PREDICT
    # read once by its statement is registered as a stream that forgets each batch as it is scanned.
    # (Registered as a table, each execution below kept about 5 MB until commit: 150+ MB in all.)
    import gc

    def rss_mib() -> float:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024

    two.execute("CREATE TABLE big AS SELECT i AS id, (i % 7)::DOUBLE AS a, 1.0::DOUBLE AS b FROM range(200000) r(i)")
    q = "SELECT id, a, y FROM PREDICT(MODEL m1, TABLE big, execution = 'batch')"
    for _ in range(3):
        two.execute(q).fetchall()
    gc.collect()
    before = rss_mib()
    for _ in range(30):
        assert len(two.execute(q).fetchall()) == 200000
    gc.collect()
    assert rss_mib() - before < 60, f"grew {rss_mib() - before:.0f} MiB within one transaction"


def test_plain_statements_beside_a_model_statement_run_as_written(two):
    # sqlglot cannot regenerate a VIRTUAL generated column; as written, DuckDB runs it
    two.execute("CREATE TABLE tg (a INT, b INT GENERATED ALWAYS AS (a * 2) VIRTUAL); SHOW MODELS")
    rows = two.execute("INSERT INTO tg (a) VALUES (?); SELECT a, b, y FROM PREDICT(MODEL m1, "
                       "(SELECT a, b FROM tg WHERE a = ?), features = (a, b))", [3, 3]).fetchall()
    assert rows == [(3, 6, 9.0)]


@pytest.mark.parametrize("sql, column", [
    ("SELECT ?, y FROM PREDICT(MODEL m11, (SELECT ? AS a, 1.0 AS b))", 32),  # a ? before the name
    ("SELECT y FROM PREDICT(MODEL m1 VERSION 9, (SELECT ? AS a, 1.0 AS b))", 29),  # the name occurs twice (m1, m1)
    ("SELECT ?,?,?, y FROM PREDICT(MODEL m11, (SELECT ? AS a, 1.0 AS b))", 36),  # ?,? is numbered $1 ,$2
    ("SELECT ?,?, y FROM PREDICT(MODEL m1 VERSION 1 ALIAS a, TABLE t)", 47),  # a syntax error
])
def test_an_error_of_a_statement_with_parameters_points_into_the_text_as_written(two, sql, column):
    """The error is drawn over the text with its ? numbered $1, $2 ...; it points into the text the user wrote."""
    with pytest.raises(modelsql.ProgrammingError) as info:
        two.cursor().execute(sql, [1.0] * sql.count("?"))
    assert (info.value.line, info.value.column) == (1, column), str(info.value)
    assert sql in str(info.value)  # the excerpt is the user's text, ? and all
    two.rollback()


def test_numbered_qmark_placeholders_work_around_a_predict_as_duckdb_reads_them(two):
    """DuckDB's ``?1``, ``?2`` (its ``$1``, ``$2``) inside and outside a PREDICT's input, one value used twice."""
    sql = "SELECT ?2 AS tag, y FROM PREDICT(MODEL m1, (SELECT ?1 AS a, ?1 + 1.0 AS b))"
    assert two.execute(sql, [2.0, "x"]).fetchall() == two.execute(sql.replace("?", "$"), [2.0, "x"]).fetchall()
    assert two.execute(sql, [2.0, "x"]).fetchall()[0][0] == "x"
    with pytest.raises(modelsql.ProgrammingError) as info:
        two.execute("SELECT nope FROM PREDICT(MODEL m1, (SELECT ?1 AS a, 1.0 AS b))", [1.0])
    assert info.value.code == "binder_error" and info.value.column == 8  # the excerpt maps back, ?1 and all
    with pytest.raises(modelsql.ProgrammingError) as info:  # DuckDB reads ?1, ? as ?1, ?2: never guessed
        two.execute("SELECT ?1 AS x, ? AS z, y FROM PREDICT(MODEL m1, (SELECT ?1 AS a, 1.0 AS b))", [1.0, 2.0])
    assert info.value.code == "mixed_placeholders" and info.value.column == 17
    two.rollback()


def test_an_error_in_a_later_statement_points_into_the_whole_text(two):
    with pytest.raises(modelsql.ProgrammingError) as info:
        two.execute("SELECT 1;\nSELECT * FROM PREDICT(MODEL nope, TABLE t)")
    assert info.value.code == "model_not_found" and (info.value.line, info.value.column) == (2, 29)


@pytest.mark.parametrize("brk", ["\u2028", "\x85", "\f", "\r", "\r\n", "\n"])
def test_excerpts_count_lines_at_newlines_as_positions_do(two, brk):
    """Line breaks other than \\n (U+2028, NEL, form feed, a bare \\r) are shown as blanks, not taken as new lines
    the position does not count: the caret stays under the option."""
    sql = f"SELECT 'a{brk}b' AS z, y FROM PREDICT(MODEL m1, (SELECT 1.0 AS a, 1.0 AS b),{brk} batch_size => 'x')"
    with pytest.raises(modelsql.ProgrammingError) as info:
        two.execute(sql)
    lines = sql.split("\n")
    line, column = info.value.line, info.value.column
    assert lines[line - 1][column - 1:].startswith("batch_size")
    shown, carets = str(info.value).split(f"\nLINE {line}: ", 1)[1].split("\n")[:2]
    assert shown[carets.index("^") - len(f"LINE {line}: "):].startswith("batch_size")
    two.rollback()


def test_an_error_in_a_later_statement_with_parameters_points_into_the_whole_text(two):
    """The excerpt drawn over the later statement (its ? numbered) is drawn again over the whole text, even where
    the option's name also occurs earlier."""
    sql = "SELECT ? AS batch_size;\nSELECT 1; SELECT y FROM PREDICT(MODEL m1, (SELECT ? AS a, 1.0 AS b), batch_size => ?)"
    with pytest.raises(modelsql.ProgrammingError) as info:
        two.execute(sql, [1, 1.0, "x"])
    line = sql.split("\n")[1]
    assert (info.value.line, info.value.column) == (2, line.index("batch_size =>") + 1)
    assert f"LINE 2: {line}" in str(info.value)
    two.rollback()
