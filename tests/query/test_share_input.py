"""Rule ``predict_share_input``: every query gives the same answer (or the same error) with
``connection.optimize`` on and off, and EXPLAIN ANALYZE shows what each model ran on.

With the rule, each model of a shared input runs on exactly the input's rows, once: the
table has fewer rows than one DuckDB chunk (2,048), so "once" is ``calls=1``.

The answers with optimize on and off are compared on two texts that differ by a trailing
comment, so each is planned afresh whatever the plan cache holds (it is keyed by ``optimize``
too: ``tests/engine/test_plan_cache.py::test_toggling_optimize_plans_again``).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from onnx import TensorProto, helper

import modelsql
from conftest import linear_model, make_model

N = 1000
"""Rows of table ``t``: under one DuckDB chunk, so a model that reads it once is called once."""


def two_outputs_model():
    """``y = a + b + c`` and ``z = 2(a + b + c)``."""
    return make_model(
        [helper.make_node("MatMul", ["x", "W"], ["y"]), helper.make_node("MatMul", ["x", "W2"], ["z"])],
        [("x", TensorProto.FLOAT, ["N", 3])],
        [("y", TensorProto.FLOAT, ["N", 1]), ("z", TensorProto.FLOAT, ["N", 1])],
        [("W", np.ones((3, 1), dtype=np.float32)), ("W2", np.full((3, 1), 2.0, dtype=np.float32))],
    )


def lookup_model():
    """``g = W[int(a)]`` with W = 0, 10, ..., 90: ONNX Runtime fails on a >= 10 (Gather out of bounds)."""
    return make_model(
        [helper.make_node("Cast", ["x"], ["i"], to=TensorProto.INT64), helper.make_node("Gather", ["W", "i"], ["g"], axis=0)],
        [("x", TensorProto.FLOAT, ["N"])],
        [("g", TensorProto.FLOAT, ["N"])],
        [("W", np.arange(10, dtype=np.float32) * 10)],
    )


@pytest.fixture
def shared(con):
    """Models ``m1`` (y = a+b+c), ``m2`` (y = 2(a+b+c)), ``two`` (y and z) over features a, b, c and
    ``lookup`` (g, over a); table ``t(id, a, b, c, tag)`` of N rows with a = id % 12, and table
    ``tn``: the same with a NULL in ``a`` on rows 3 and 7."""
    con.import_model("m1", linear_model(np.ones((3, 1), dtype=np.float32)), features=["a", "b", "c"])
    con.import_model("m2", linear_model(np.full((3, 1), 2.0, dtype=np.float32)), features=["a", "b", "c"])
    con.import_model("two", two_outputs_model(), features=["a", "b", "c"])
    con.import_model("lookup", lookup_model(), features=["a"])
    con.execute(f"CREATE TABLE t AS SELECT range AS id, (range % 12)::DOUBLE AS a, 1.0 AS b, 2 AS c, "
                f"'x' || (range % 3) AS tag FROM range({N})")
    con.execute("CREATE TABLE tn AS SELECT id, CASE WHEN id IN (3, 7) THEN NULL ELSE a END AS a, b, c FROM t WHERE id < 20")
    con.commit()
    return con


def _normalize(rows):
    return [tuple(round(v, 4) if isinstance(v, float) else v for v in row) for row in rows]


def answers(con, query: str, params=None):
    """The rows with optimize on, checked equal to those with optimize off."""
    got = {}
    for optimize in (True, False):
        con.optimize = optimize
        try:
            got[optimize] = _normalize(con.execute(f"{query} -- optimize={optimize}", params).fetchall())
        finally:
            con.optimize = True
    assert got[True] == got[False]
    return got[True]


def errors(con, query: str, params=None):
    """The error with optimize on, checked of the same class and code as with optimize off."""
    got = {}
    for optimize in (True, False):
        con.optimize = optimize
        try:
            with pytest.raises(modelsql.Error) as ei:
                con.execute(f"{query} -- optimize={optimize}", params).fetchall()
        finally:
            con.optimize = True
        con.rollback()
        got[optimize] = ei.value
    assert (type(got[True]), got[True].code) == (type(got[False]), got[False].code), (str(got[True]), str(got[False]))
    return got[True], got[False]


_SCAN = re.compile(r"^\s*\w+Predict (model \"\w+\" version \d+)")
_ACTUAL = re.compile(r"actual: rows=(\d+) calls=(\d+)")


def measured(con, query: str, optimize: bool, params=None) -> list[tuple[str, int, int, bool]]:
    """Per PREDICT, in plan order: (label, rows its model ran on, calls, whether its input is shared)."""
    con.optimize = optimize
    try:
        rows = con.execute("EXPLAIN ANALYZE " + query, params).fetchall()
    finally:
        con.optimize = True
    text = next(v for k, v in rows if k == "modelsql_plan")
    out, label, shared_input = [], None, False
    for line in text.splitlines():
        m = _SCAN.match(line)
        if m:
            label, shared_input = m.group(1), False
        if "shared input #" in line:
            shared_input = True
        a = _ACTUAL.search(line)
        if a:
            out.append((label, int(a.group(1)), int(a.group(2)), shared_input))
    return out


def plan(con, query: str, params=None) -> str:
    return next(v for k, v in con.execute("EXPLAIN " + query, params).fetchall() if k == "modelsql_plan")


def y1(i):
    return float(i % 12) + 3.0


# ---------------------------------------------------------------- applied


CHAMPION = ("SELECT p.id, p.y AS old, q.y AS new FROM PREDICT(MODEL m1, TABLE t) AS p "
            "JOIN PREDICT(MODEL m2, TABLE t) AS q USING (id) ORDER BY id")


def test_champion_challenger(shared):
    rows = answers(shared, CHAMPION)
    assert rows == [(i, y1(i), 2 * y1(i)) for i in range(N)]
    on = measured(shared, CHAMPION, True)
    assert on == [('model "m1" version 1', N, 1, True), ('model "m2" version 1', N, 1, True)]
    off = measured(shared, CHAMPION, False)
    assert [(r, c, s) for _, r, c, s in off] == [(N, 1, False), (N, 1, False)]


def test_same_subquery_input(shared):
    q = ("SELECT p.id, p.y AS old, q.y AS new FROM PREDICT(MODEL m1, (SELECT * FROM t WHERE id % 2 = 0)) AS p "
         "JOIN PREDICT(MODEL m2, (SELECT * FROM t WHERE id % 2 = 0)) AS q USING (id) ORDER BY id")
    assert answers(shared, q) == [(i, y1(i), 2 * y1(i)) for i in range(0, N, 2)]
    assert [(r, c, s) for _, r, c, s in measured(shared, q, True)] == [(N // 2, 1, True)] * 2


def test_filter_on_outputs_only_is_shared(shared):
    q = ("SELECT p.id, p.y AS old, q.y AS new FROM PREDICT(MODEL m1, TABLE t) AS p "
         "JOIN PREDICT(MODEL m2, TABLE t) AS q USING (id) WHERE p.y > 10 AND q.y < 26 ORDER BY id")
    assert answers(shared, q) == [(i, y1(i), 2 * y1(i)) for i in range(N) if y1(i) > 10 and 2 * y1(i) < 26]
    assert [(r, c, s) for _, r, c, s in measured(shared, q, True)] == [(N, 1, True)] * 2


def test_three_models_over_one_table(shared):
    q = ("SELECT p.id, p.y, q.y AS y2, r.z FROM PREDICT(MODEL m1, TABLE t) AS p "
         "JOIN PREDICT(MODEL m2, TABLE t) AS q USING (id) JOIN PREDICT(MODEL two, TABLE t) AS r USING (id) ORDER BY id")
    assert answers(shared, q) == [(i, y1(i), 2 * y1(i), 2 * y1(i)) for i in range(N)]
    on = measured(shared, q, True)
    assert [label for label, *_ in on] == ['model "m1" version 1', 'model "m2" version 1', 'model "two" version 1']
    assert [(r, c, s) for _, r, c, s in on] == [(N, 1, True)] * 3
    assert plan(shared, q).count("SharedInput #") == 1


def test_same_model_twice_over_one_table(shared):
    q = ("SELECT p.id, p.y, q.y AS y2 FROM PREDICT(MODEL m1, TABLE t) AS p "
         "JOIN PREDICT(MODEL m1, TABLE t) AS q USING (id) ORDER BY id")
    assert answers(shared, q) == [(i, y1(i), y1(i)) for i in range(N)]
    assert [(r, c, s) for _, r, c, s in measured(shared, q, True)] == [(N, 1, True)] * 2


def test_table_and_the_same_rows_as_a_subquery_are_one_input(shared):
    # TABLE t is bound as SELECT * FROM t: the same relation as the subquery (SELECT * FROM t).
    q = ("SELECT p.id, p.y, q.y AS y2 FROM PREDICT(MODEL m1, TABLE t) AS p "
         "JOIN PREDICT(MODEL m1, (SELECT * FROM t)) AS q USING (id) ORDER BY id")
    assert answers(shared, q) == [(i, y1(i), y1(i)) for i in range(N)]
    assert [(r, c, s) for _, r, c, s in measured(shared, q, True)] == [(N, 1, True)] * 2


def test_other_subquery_text_is_another_input(shared):
    q = ("SELECT p.id, p.y, q.y AS y2 FROM PREDICT(MODEL m1, TABLE t) AS p "
         "JOIN PREDICT(MODEL m2, (SELECT * FROM t WHERE true)) AS q USING (id) ORDER BY id")
    assert answers(shared, q) == [(i, y1(i), 2 * y1(i)) for i in range(N)]
    assert [(r, c, s) for _, r, c, s in measured(shared, q, True)] == [(N, 1, False)] * 2


def test_two_outputs_model_shared_with_another(shared):
    q = ("SELECT p.id, p.y, p.z, q.y AS y2 FROM PREDICT(MODEL two, TABLE t) AS p "
         "JOIN PREDICT(MODEL m2, TABLE t) AS q USING (id) ORDER BY id")
    assert answers(shared, q) == [(i, y1(i), 2 * y1(i), 2 * y1(i)) for i in range(N)]
    assert [(r, c, s) for _, r, c, s in measured(shared, q, True)] == [(N, 1, True)] * 2


# ---------------------------------------------------------------- a CTE read twice


CTE = "WITH p AS (SELECT * FROM PREDICT(MODEL m1, TABLE t)) SELECT x.id, x.y, z.y AS y2 FROM p AS x JOIN p AS z USING (id) ORDER BY id"


def test_cte_read_twice_runs_its_model_once(shared):
    assert answers(shared, CTE) == [(i, y1(i), y1(i)) for i in range(N)]
    assert "MaterializedCTE p" in plan(shared, CTE)
    assert measured(shared, CTE, True) == [('model "m1" version 1', N, 1, False)]
    # Without the rule: DuckDB 2.0 does not inline a CTE that the statement reads twice, it
    # materializes it on its own (its plan shows a CTE node and two CTE scans), so the model
    # runs on N rows, not 2N, with optimize off too.
    assert measured(shared, CTE, False) == [('model "m1" version 1', N, 1, False)]
    shared.optimize = False
    duck_plan = "\n".join(v for k, v in shared.execute("EXPLAIN " + CTE).fetchall() if k not in ("modelsql_predict", "modelsql_plan"))
    shared.optimize = True
    assert "CTE Scan" in duck_plan


def test_cte_not_materialized_as_written(shared):
    q = CTE.replace("WITH p AS (", "WITH p AS NOT MATERIALIZED (")
    assert answers(shared, q) == [(i, y1(i), y1(i)) for i in range(N)]
    # Written NOT MATERIALIZED, DuckDB inlines the CTE: without the rule the model runs once per reference.
    assert measured(shared, q, False) == [('model "m1" version 1', 2 * N, 2, False)]
    # The rule keeps what the user wrote: NOT MATERIALIZED runs the model once per reference either way.
    assert measured(shared, q, True) == [('model "m1" version 1', 2 * N, 2, False)]


def test_cte_read_by_two_scalar_subqueries(shared):
    q = "WITH p AS (SELECT * FROM PREDICT(MODEL m1, TABLE t)) SELECT (SELECT sum(y) FROM p), (SELECT max(y) FROM p)"
    assert answers(shared, q) == [(sum(y1(i) for i in range(N)), 14.0)]
    assert [(r, c) for _, r, c, _ in measured(shared, q, True)] == [(N, 1)]


# ---------------------------------------------------------------- declined


@pytest.mark.parametrize("query, why", [
    (CHAMPION + " LIMIT 5", "the statement has LIMIT"),
    (CHAMPION.replace("ORDER BY", "WHERE p.a > 5 ORDER BY"), "a filter on input columns"),
    (CHAMPION.replace("TABLE t) AS p", "TABLE t, on_null = 'skip') AS p"), "skips rows"),
    (CHAMPION.replace("TABLE t) AS q", "TABLE t, on_error = 'skip') AS q"), "skips rows"),
    (CHAMPION.replace("TABLE t) AS q", "TABLE t, execution = 'batch') AS q"), "execution = 'batch'"),
    (CHAMPION.replace("USING (id)", "USING (id) JOIN t AS u USING (id)"), "it also reads"),
    (CHAMPION.replace("ORDER BY", "WHERE p.id IN (SELECT id FROM t WHERE tag = 'x1') ORDER BY"), None),
])
def test_declined(shared, query, why):
    rows = answers(shared, query)
    assert rows, query
    text = plan(shared, query)
    assert "SharedInput" not in text and "shared input #" not in text
    assert "note: predict_share_input declined for m1, m2: " in text
    if why:
        assert why in text
    assert all(not s for *_, s in measured(shared, query, True))


def test_declined_input_filter_would_have_changed_what_a_model_reads(shared):
    q = CHAMPION.replace("ORDER BY", "WHERE p.a > 5 ORDER BY")
    assert answers(shared, q) == [(i, y1(i), 2 * y1(i)) for i in range(N) if i % 12 > 5]
    # DuckDB pushes p.a > 5 into m1's input: m1 never sees the other rows (why the rule declines).
    on = measured(shared, q, True)
    assert on[0][1] < N and on == measured(shared, q, False)


def test_declined_cte_with_limit(shared):
    q = CTE + " LIMIT 3"
    assert answers(shared, q) == [(i, y1(i), y1(i)) for i in range(3)]
    assert "declined to materialize CTE p: the statement has LIMIT" in plan(shared, q)


# ---------------------------------------------------------------- parameters


def test_qmark_parameters_in_two_inputs_are_two_inputs(shared):
    # Each ? is its own parameter, so the two inputs differ even when the values are equal.
    q = ("SELECT p.id, p.y, q.y AS y2 FROM PREDICT(MODEL m1, (SELECT * FROM t WHERE id < ?)) AS p "
         "JOIN PREDICT(MODEL m2, (SELECT * FROM t WHERE id < ?)) AS q USING (id) ORDER BY id")
    assert answers(shared, q, [10, 10]) == [(i, y1(i), 2 * y1(i)) for i in range(10)]
    assert answers(shared, q, [10, 5]) == [(i, y1(i), 2 * y1(i)) for i in range(5)]
    # Not shared; and DuckDB infers p.id < 5 from q.id < 5 and the join on id, so m1 too runs on 5 rows.
    assert [(r, s) for _, r, _, s in measured(shared, q, True, [10, 5])] == [(5, False), (5, False)]


def test_qmark_parameter_in_a_shared_cte_input(shared):
    q = ("WITH s AS (SELECT * FROM t WHERE id < ?) SELECT p.id, p.y, q.y AS y2 FROM PREDICT(MODEL m1, TABLE s) AS p "
         "JOIN PREDICT(MODEL m2, TABLE s) AS q USING (id) ORDER BY id")
    for n in (7, 3):
        assert answers(shared, q, [n]) == [(i, y1(i), 2 * y1(i)) for i in range(n)]
        assert [(r, c, s) for _, r, c, s in measured(shared, q, True, [n])] == [(n, 1, True)] * 2


DOLLAR = ("SELECT p.id, p.y, q.y AS y2 FROM PREDICT(MODEL m1, (SELECT * FROM t WHERE id < $1)) AS p "
          "JOIN PREDICT(MODEL m2, (SELECT * FROM t WHERE id < $1)) AS q USING (id) ORDER BY id")


def test_numbered_parameter_in_a_shared_subquery_input(shared):
    for n in (8, 2):
        assert answers(shared, DOLLAR, [n]) == [(i, y1(i), 2 * y1(i)) for i in range(n)]


def test_numbered_parameter_in_a_shared_subquery_input_explained(shared):
    assert [(r, c, s) for _, r, c, s in measured(shared, DOLLAR, True, [8])] == [(8, 1, True)] * 2


# ---------------------------------------------------------------- errors and failing rows


def test_null_in_a_shared_input_is_the_same_error(shared):
    q = ("SELECT p.id, p.y, q.y AS y2 FROM PREDICT(MODEL m1, TABLE tn) AS p "
         "JOIN PREDICT(MODEL m2, TABLE tn) AS q USING (id) ORDER BY id")
    assert "SharedInput #0" in plan(shared, q)
    on, off = errors(shared, q)
    assert isinstance(on, modelsql.DataError) and on.code == "null_input"
    # The model the message names may differ: with the rule the shared scan calls m1 first (statement
    # order); without it DuckDB runs the join's build side first, which here is m2.
    for err in (on, off):
        assert '"a" (2 rows)' in str(err), str(err)


def test_null_in_a_shared_input_with_on_null_null(shared):
    q = ("SELECT p.id, p.y, q.y AS y2 FROM PREDICT(MODEL m1, TABLE tn, on_null = 'null') AS p "
         "JOIN PREDICT(MODEL m2, TABLE tn, on_null = 'null') AS q USING (id) ORDER BY id")
    rows = answers(shared, q)
    assert [r[0] for r in rows if r[1] is None] == [3, 7] and [r[0] for r in rows if r[2] is None] == [3, 7]
    assert [(r, s) for _, r, _, s in measured(shared, q, True)] == [(20, True)] * 2


def test_failing_rows_in_a_shared_input_are_the_same_error(shared):
    q = ("SELECT p.id, p.g, q.y FROM PREDICT(MODEL lookup, TABLE t) AS p "
         "JOIN PREDICT(MODEL m1, TABLE t) AS q USING (id) ORDER BY id")
    on, off = errors(shared, q)
    assert on.code == "inference_failed" and 'column "a" value 10.0' in str(on)


def test_shared_input_with_on_error_null(shared):
    q = ("SELECT p.id, p.g, q.y FROM PREDICT(MODEL lookup, TABLE t, on_error = 'null') AS p "
         "JOIN PREDICT(MODEL m1, TABLE t) AS q USING (id) ORDER BY id")
    rows = answers(shared, q)
    assert rows == [(i, None if i % 12 >= 10 else 10.0 * (i % 12), y1(i)) for i in range(N)]
    assert [(r, s) for _, r, _, s in measured(shared, q, True)] == [(N, True)] * 2


def test_join_condition_on_an_input_column(shared):
    # Without the rule DuckDB pushes p.a IS NOT NULL into m1's input, so m1 never sees a NULL and q's NULL rows
    # (on_null = 'null') find no partner. With the rule both models run on every row of the shared scan: m1 fails.
    q = ("SELECT p.id, p.y, q.y AS y2 FROM PREDICT(MODEL m1, TABLE tn) AS p "
         "JOIN PREDICT(MODEL m2, TABLE tn, on_null = 'null') AS q ON p.id = q.id AND p.a IS NOT NULL ORDER BY p.id")
    assert len(answers(shared, q)) == 18
