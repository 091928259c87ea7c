"""The plan cache: a statement text run again is not planned again, and whatever changes what a
plan depends on (a model version, a table, a setting, a registered object, a transaction's end,
another connection's change) makes the next run answer as a fresh connection would.

"Served from the cache" is observed through DuckDB, not through the private session: a plan
whose PREDICTs stream keeps its functions registered on the connection (``duckdb_functions()``
lists them), so a run planned again registers a function of a new name and a cached run does not.
A fresh connection is ``modelsql.connect`` of the same file, opened after the change (and after
``con.commit()``, so it sees the change).
"""

from __future__ import annotations

import datetime as dt
import decimal

import numpy as np
import pyarrow as pa
import pytest

import modelsql
from conftest import linear_model, save

Q = "SELECT id, y FROM PREDICT(MODEL m, TABLE t) ORDER BY id"
FUNCTIONS = "SELECT function_name FROM duckdb_functions() WHERE function_name LIKE '__modelsql_predict_%' ORDER BY 1"


def weights(k: float):
    return linear_model(np.full((3, 1), k, dtype=np.float32))


@pytest.fixture
def cached(con):
    """Model ``m`` (y = a + b + c) over features a, b, c; table ``t(id, a, b, c)`` of 6 rows, committed."""
    con.import_model("m", weights(1.0), features=["a", "b", "c"])
    con.execute("CREATE TABLE t AS SELECT range AS id, range::DOUBLE AS a, 1.0 AS b, 2 AS c FROM range(6)")
    con.commit()
    return con


def functions(con) -> list[str]:
    return [r[0] for r in con.execute(FUNCTIONS).fetchall()]


def outcome(con, query: str, params=None):
    """What a statement gives: ("ok", rows, column types) or ("error", class, code, message)."""
    try:
        cur = con.execute(query, params)
        rows = cur.fetchall()
        return ("ok", rows, [d[1] for d in cur.description])
    except modelsql.Error as err:
        return ("error", type(err).__name__, err.code, str(err))


def fresh(db: str, query: str, params=None):
    """The outcome on a fresh connection to the same file."""
    other = modelsql.connect(db)
    try:
        return outcome(other, query, params)
    finally:
        other.close()


def expected(k: float, n: int = 6):
    return [(i, k * (i + 3.0)) for i in range(n)]


# ---------------------------------------------------------------- cached runs


def test_the_same_text_twice_is_served_from_the_cache(cached):
    first = cached.execute(Q).fetchall()
    names = functions(cached)
    assert len(names) == 1
    assert cached.execute(Q).fetchall() == first == expected(1.0)
    assert functions(cached) == names  # not planned again: the kept function ran
    cached.commit()
    # a COMMIT plans again (a plan made in the old snapshot may miss what others committed), same answer
    assert cached.execute(Q).fetchall() == first


def test_new_parameter_values_of_the_same_types_reuse_the_plan(cached):
    q = "SELECT id, y FROM PREDICT(MODEL m, (SELECT * FROM t WHERE id < ?)) ORDER BY id"
    assert cached.execute(q, [3]).fetchall() == expected(1.0, 3)
    names = functions(cached)
    assert cached.execute(q, [5]).fetchall() == expected(1.0, 5)
    assert cached.execute(q, [0]).fetchall() == []
    assert functions(cached) == names


def test_toggling_optimize_plans_again(cached):
    q = ("SELECT p.id, p.y, q.y AS y2 FROM PREDICT(MODEL m, TABLE t) AS p "
         "JOIN PREDICT(MODEL m, TABLE t) AS q USING (id) ORDER BY id")
    cached.optimize = False
    cached.execute(q).fetchall()
    names = functions(cached)
    cached.optimize = True
    cached.execute(q).fetchall()
    assert functions(cached) != names


# ---------------------------------------------------------------- model versions


def test_create_or_replace_model_is_used_by_the_next_run(cached, db, tmp_path):
    assert cached.execute(Q).fetchall() == expected(1.0)
    path = save(weights(3.0), tmp_path / "m3.onnx")
    cached.execute(f"CREATE OR REPLACE MODEL m FROM '{path}' WITH (features = (a, b, c))")
    assert cached.execute(Q).fetchall() == expected(3.0)
    cached.commit()
    assert outcome(cached, Q) == fresh(db, Q)


def test_import_model_replace_is_used_by_the_next_run(cached, db):
    assert cached.execute(Q).fetchall() == expected(1.0)
    cached.import_model("m", weights(2.0), features=["a", "b", "c"], replace=True)
    assert cached.execute(Q).fetchall() == expected(2.0)
    q1 = "SELECT id, y FROM PREDICT(MODEL m VERSION 1, TABLE t) ORDER BY id"
    assert cached.execute(q1).fetchall() == expected(1.0)
    cached.execute("DROP MODEL m VERSION 2")
    assert cached.execute(Q).fetchall() == expected(1.0)
    assert outcome(cached, Q) == fresh(db, Q)


def test_another_connection_importing_a_version(cached, db):
    cached.autocommit = True
    assert cached.execute(Q).fetchall() == expected(1.0)
    other = modelsql.connect(db)
    other.import_model("m", weights(5.0), features=["a", "b", "c"], replace=True)
    other.close()
    assert cached.execute(Q).fetchall() == expected(5.0)
    assert outcome(cached, Q) == fresh(db, Q)


def test_another_connection_importing_a_version_while_a_transaction_is_open(cached, db):
    assert cached.execute(Q).fetchall() == expected(1.0)  # opens the PEP 249 transaction
    other = modelsql.connect(db)
    other.import_model("m", weights(5.0), features=["a", "b", "c"], replace=True)
    other.close()
    assert cached.execute(Q).fetchall() == expected(1.0)  # its snapshot: the version it began with
    cached.commit()
    assert cached.execute(Q).fetchall() == expected(5.0)  # a fresh connection's answer


# ---------------------------------------------------------------- tables


def test_alter_table_add_column(cached, db):
    q = "SELECT * FROM PREDICT(MODEL m, TABLE t) ORDER BY id"
    before = outcome(cached, q)
    cached.execute("ALTER TABLE t ADD COLUMN note VARCHAR DEFAULT 'n'")
    after = outcome(cached, q)
    assert after[2] == before[2][:4] + ["VARCHAR", "FLOAT"]
    cached.commit()
    assert after == fresh(db, q)


def test_alter_table_add_column_that_breaks_binding(con, db):
    # No feature names: the model takes exactly the table's 3 numeric non-key columns.
    con.import_model("m", weights(1.0))
    con.execute("CREATE TABLE t AS SELECT range AS id, range::DOUBLE AS a, 1.0 AS b, 2 AS c FROM range(6)")
    con.commit()
    assert con.execute(Q).fetchall() == expected(1.0)
    con.execute("ALTER TABLE t ADD COLUMN d DOUBLE DEFAULT 0")
    con.commit()
    got = outcome(con, Q)
    assert got[:3] == ("error", "ProgrammingError", "feature_mismatch")
    con.rollback()
    assert got == fresh(db, Q)


def test_drop_and_create_table_with_other_types(cached, db):
    q = "SELECT * FROM PREDICT(MODEL m, TABLE t) ORDER BY id"
    assert outcome(cached, q)[2] == ["BIGINT", "DOUBLE", "DECIMAL(2,1)", "INTEGER", "FLOAT"]
    cached.execute("DROP TABLE t")
    cached.execute("CREATE TABLE t AS SELECT range::INTEGER AS id, range::FLOAT AS a, 1::TINYINT AS b, "
                   "2::DOUBLE AS c FROM range(3)")
    cached.commit()
    got = outcome(cached, q)
    assert got[2] == ["INTEGER", "FLOAT", "TINYINT", "DOUBLE", "FLOAT"]
    assert got == fresh(db, q)
    cached.execute("DROP TABLE t")
    cached.execute("CREATE TABLE t AS SELECT range AS id, range::VARCHAR AS a, 1.0 AS b, 2 AS c FROM range(3)")
    cached.commit()
    got = outcome(cached, q)
    assert got[:3] == ("error", "ProgrammingError", "wrong_column_type")
    cached.rollback()
    assert got == fresh(db, q)


def test_insert_of_many_rows(cached, db):
    q = "SELECT id, y FROM PREDICT(MODEL m, TABLE t) ORDER BY id"
    explain = "EXPLAIN " + q

    def execution(con):
        text = next(v for k, v in con.execute(explain).fetchall() if k == "modelsql_plan")
        return next(line.strip() for line in text.splitlines() if line.strip().startswith("execution:"))

    assert execution(cached).startswith("execution: stream (auto)")
    assert cached.execute(q).fetchall() == expected(1.0)
    cached.execute("INSERT INTO t SELECT range AS id, range::DOUBLE, 1.0, 2 FROM range(6, 100000)")
    cached.commit()
    assert execution(cached).startswith("execution: batch")  # the cost function's choice changed
    got = outcome(cached, q)
    assert len(got[1]) == 100000 and got[1][-1] == (99999, 100002.0)
    assert got == fresh(db, q)


def test_rollback_of_a_create_table(cached, db):
    q = "SELECT id, y FROM PREDICT(MODEL m, TABLE t2) ORDER BY id"
    cached.execute("CREATE TABLE t2 AS SELECT range AS id, range::DOUBLE AS a, 1.0 AS b, 2 AS c FROM range(2)")
    assert cached.execute(q).fetchall() == expected(1.0, 2)
    cached.rollback()
    got = outcome(cached, q)
    assert got[0] == "error" and got[2] == "catalog_error", got
    assert got == fresh(db, q)
    cached.execute("CREATE TABLE t2 AS SELECT range AS id, range::DOUBLE AS a, 1.0 AS b, 2 AS c FROM range(4)")
    assert cached.execute(q).fetchall() == expected(1.0, 4)
    cached.commit()
    assert outcome(cached, q) == fresh(db, q)


def test_rollback_through_sql(cached):
    q = "SELECT id, y FROM PREDICT(MODEL m, TABLE t2) ORDER BY id"
    cached.execute("BEGIN; CREATE TABLE t2 AS SELECT range AS id, range::DOUBLE AS a, 1.0 AS b, 2 AS c FROM range(2)")
    assert cached.execute(q).fetchall() == expected(1.0, 2)
    cached.execute("ROLLBACK")
    assert outcome(cached, q)[2] == "catalog_error"


def test_register_replacing_a_name(cached):
    q = "SELECT * FROM PREDICT(MODEL m, TABLE src) ORDER BY id"
    cached.register("src", pa.table({"id": [0, 1], "a": [1.0, 2.0], "b": [0.0, 0.0], "c": [0.0, 0.0]}))
    assert cached.execute(q).fetchall() == [(0, 1.0, 0.0, 0.0, 1.0), (1, 2.0, 0.0, 0.0, 2.0)]
    cached.register("src", pa.table({"id": [5], "c": [1], "b": [2], "a": [3], "extra": ["e"]}))
    cur = cached.execute(q)
    assert cur.fetchall() == [(5, 1, 2, 3, "e", 6.0)]
    assert [d[0] for d in cur.description] == ["id", "c", "b", "a", "extra", "y"]
    cached.unregister("src")
    assert outcome(cached, q)[2] == "catalog_error"


def test_set_threads(cached, db):
    assert cached.execute(Q).fetchall() == expected(1.0)
    names = functions(cached)
    cached.execute("SET threads = 1")
    assert cached.execute(Q).fetchall() == expected(1.0)
    assert functions(cached) != names  # planned again: the model's thread count depends on DuckDB's
    cached.execute("SET threads = 2")
    assert cached.execute(Q).fetchall() == expected(1.0)


# ---------------------------------------------------------------- parameters


def test_parameters_of_other_python_types(cached, db):
    q = "SELECT id, y, k FROM PREDICT(MODEL m, (SELECT *, ? AS k FROM t)) ORDER BY id"
    one = outcome(cached, q, [1])
    assert one[2] == ["BIGINT", "FLOAT", "INTEGER"] and one[1][0] == (0, 3.0, 1)
    text = outcome(cached, q, ["one"])
    assert text[2] == ["BIGINT", "FLOAT", "VARCHAR"] and text[1][0] == (0, 3.0, "one")
    assert outcome(cached, q, [1.5])[2] == ["BIGINT", "FLOAT", "DOUBLE"]
    assert outcome(cached, q, [None])[1][0] == (0, 3.0, None)
    assert outcome(cached, q, [1]) == one
    assert text == fresh(db, q, ["one"])


def test_a_parameter_fed_to_the_model_int_then_str(cached, db):
    q = "SELECT id, y FROM PREDICT(MODEL m, (SELECT id, ? AS a, b, c FROM t)) ORDER BY id"
    assert cached.execute(q, [2]).fetchall() == [(i, 5.0) for i in range(6)]
    got = outcome(cached, q, ["2"])
    assert got[:3] == ("error", "ProgrammingError", "wrong_column_type")
    cached.rollback()
    assert got == fresh(db, q, ["2"])
    assert cached.execute(q, [2]).fetchall() == [(i, 5.0) for i in range(6)]


def test_list_parameters_of_other_element_types(con, db):
    con.import_model("v", weights(1.0))
    con.execute("CREATE TABLE t AS SELECT range AS id FROM range(2)")
    con.commit()
    q = "SELECT id, y FROM PREDICT(MODEL v, (SELECT id, ? AS x FROM t)) ORDER BY id"
    assert con.execute(q, [[1.0, 2.0, 3.0]]).fetchall() == [(0, 6.0), (1, 6.0)]
    got = outcome(con, q, [["a", "b", "c"]])
    con.rollback()
    assert got == fresh(db, q, [["a", "b", "c"]])  # fresh: ProgrammingError wrong_column_type


def test_decimal_parameters_of_other_precision_in_batch_execution(cached, db):
    q = "SELECT id, y, k FROM PREDICT(MODEL m, (SELECT *, ? AS k FROM t), execution = 'batch') ORDER BY id"
    assert cached.execute(q, [decimal.Decimal("1.5")]).fetchall()[0] == (0, 3.0, decimal.Decimal("1.5"))
    got = outcome(cached, q, [decimal.Decimal("123.456")])
    cached.rollback()
    assert got == fresh(db, q, [decimal.Decimal("123.456")])


def test_aware_then_naive_datetime_parameters_in_batch_execution(cached, db):
    q = "SELECT id, y, k FROM PREDICT(MODEL m, (SELECT *, ? AS k FROM t), execution = 'batch') ORDER BY id"
    cached.execute(q, [dt.datetime(2020, 1, 1, tzinfo=dt.timezone.utc)]).fetchall()
    got = outcome(cached, q, [dt.datetime(2020, 1, 1)])
    assert got == fresh(db, q, [dt.datetime(2020, 1, 1)])


# ---------------------------------------------------------------- errors on the cached path


NULLABLE = ("SELECT id, y FROM PREDICT(MODEL m, (SELECT id, CASE WHEN id = ? THEN NULL ELSE a END AS a, b, c FROM t), "
            "execution = '{}') ORDER BY id")


@pytest.mark.parametrize("execution", ["stream", "batch"])
def test_a_null_error_on_the_cached_path_names_the_column_and_the_rows(cached, db, execution):
    q = NULLABLE.format(execution)
    assert cached.execute(q, [-1]).fetchall() == expected(1.0)
    names = functions(cached)
    got = outcome(cached, q, [2])
    assert got[:3] == ("error", "DataError", "null_input")
    assert '"a" (1 row); in all, 1 row with a NULL input' in got[3], got[3]
    cached.rollback()
    assert got == fresh(db, q, [2])
    assert cached.execute(q, [-1]).fetchall() == expected(1.0)
    assert cached.execute(q, [-1]).fetchall() == expected(1.0)
    if execution == "stream":
        assert functions(cached) != names  # the rollback made it plan again


def _after_failure(con, q, params):
    """Run NULLABLE failing; then: where it failed, whether the transaction still takes a statement, and
    whether it takes one after rollback()."""
    cur = con.cursor()
    phase = "execute"
    try:
        cur.execute(q, params)
        phase = "fetch"
        cur.fetchall()
        phase = "none"
    except modelsql.DataError as err:
        assert err.code == "null_input"
    state = outcome(con, "SELECT 42")
    con.rollback()
    return phase, state[:3], outcome(con, "SELECT 42")


@pytest.mark.parametrize("execution", ["stream", "batch"])
@pytest.mark.parametrize("autocommit", [False, True])
def test_a_failure_on_the_cached_path_leaves_the_transaction_as_the_first_run_does(cached, db, autocommit, execution):
    q = NULLABLE.format(execution)
    first = modelsql.connect(db)
    first.autocommit = autocommit
    try:
        on_first_run = _after_failure(first, q, [2])
    finally:
        first.close()
    cached.autocommit = autocommit
    assert cached.execute(q, [-1]).fetchall() == expected(1.0)
    on_cached_run = _after_failure(cached, q, [2])
    assert on_cached_run == on_first_run
    assert on_cached_run[2] == ("ok", [(42,)], ["INTEGER"])
    if not autocommit:
        assert on_cached_run[1] == ("error", "OperationalError", "transaction_aborted")
    else:
        assert on_cached_run[1] == ("ok", [(42,)], ["INTEGER"])
    assert cached.execute(q, [-1]).fetchall() == expected(1.0)


def test_a_failing_statement_is_not_cached_and_fails_again(cached, db):
    q = "SELECT id, y FROM PREDICT(MODEL m, (SELECT id, NULL::DOUBLE AS a, b, c FROM t)) ORDER BY id"
    first = outcome(cached, q)
    cached.rollback()
    again = outcome(cached, q)
    cached.rollback()
    assert first == again and first[2] == "null_input"


def test_evicting_old_plans_leaves_the_running_statement_alone(cached):
    # the 65th distinct text retires the oldest plan; removing its functions must not run a query on the
    # connection while the new statement's result is pending (that query would replace the result)
    from modelsql.engine.plan_cache import PLAN_CACHE_SIZE

    for i in range(PLAN_CACHE_SIZE + 16):
        rows = cached.execute(f"SELECT id, y FROM PREDICT(MODEL m, TABLE t) WHERE id < {i % 6 + 1} -- {i}").fetchall()
        assert len(rows) == i % 6 + 1, i
    assert len(functions(cached)) <= PLAN_CACHE_SIZE + 1  # retired plans' functions are removed


def test_a_file_read_by_a_table_function_is_planned_every_time(cached, tmp_path):
    # the file can change with no statement on this database: a plan over it is never kept
    f = str(tmp_path / "in.parquet")
    cached.execute(f"COPY (SELECT 1.0::DOUBLE AS a, 2.0::DOUBLE AS b, 3.0::DOUBLE AS c) TO '{f}'")
    q = f"SELECT y FROM PREDICT(MODEL m, (SELECT * FROM read_parquet('{f}')), features = (a, b, c))"
    assert cached.execute(q).fetchall() == [(6.0,)]
    import duckdb

    duckdb.connect().execute(f"COPY (SELECT 5.0::DOUBLE AS a, 2.0::DOUBLE AS b, 3.0::DOUBLE AS c) TO '{f}'")
    assert cached.execute(q).fetchall() == [(10.0,)]


def test_a_parameter_naming_the_file_plans_again_for_another_value(cached, tmp_path):
    f1, f2 = str(tmp_path / "one.parquet"), str(tmp_path / "two.parquet")
    cached.execute(f"COPY (SELECT 1.0::DOUBLE AS a, 2.0::DOUBLE AS b, 3.0::DOUBLE AS c) TO '{f1}'")
    cached.execute(f"COPY (SELECT 'x' AS a, 2.0::DOUBLE AS b, 3.0::DOUBLE AS c) TO '{f2}'")
    q = "SELECT y FROM PREDICT(MODEL m, (SELECT * FROM read_parquet(?)), features = (a, b, c))"
    assert cached.execute(q, [f1]).fetchall() == [(6.0,)]
    with pytest.raises(modelsql.ProgrammingError) as info:  # bound afresh: column a is text now
        cached.execute(q, [f2]).fetchall()
    assert info.value.code == "wrong_column_type"


def test_a_lists_signature_read_by_its_element_types_equals_the_one_read_element_by_element():
    """The plan cache's key of a list parameter: the shortcut for lists of plain scalars and int32 ints gives what
    reading every element gives, on random mixed lists (the edges of int32 and int64, None, nested values)."""
    import random

    from modelsql.engine.plan_cache import param_signature

    def by_element(values):
        return (type(values), tuple(sorted({repr(param_signature(v)) for v in values})))

    pool = [None, True, 0, 1, -(2**31), 2**31 - 1, 2**31, -(2**31) - 1, 2**63, 1.5, float("nan"), "a", b"b",
            bytearray(b"c"), [1.0], [1, None], {"a": 1}, (2,), decimal.Decimal("1.25"), dt.date(2026, 1, 1)]
    rng = random.Random(0)
    for _ in range(2000):
        values = [rng.choice(pool) for _ in range(rng.randint(0, 6))]
        for kind in (list, tuple):
            assert param_signature(kind(values)) == by_element(kind(values)), values
    assert param_signature([0.5] * 150_528) == (list, (repr(float),))
