"""``execution = 'batch'``: the PREDICT runs over large Arrow record batches before the statement.

Every query runs with ``execution = 'stream'`` (the model inside DuckDB's
pipeline) and ``'batch'`` and must give the same answer; then the transaction,
memory, type and EXPLAIN behaviour of batch execution, on real DuckDB files and
real ONNX Runtime sessions.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from conftest import linear_model, load_table

import modelsql
from modelsql.onnxformat.column_major import column_major_inputs
from modelsql.engine.query import cost as cost_mod

FEATURES = [f"c{i}" for i in range(64)]


@pytest.fixture
def wide_con(con, digits, digits_pipe):
    """``con`` with ``pixels(id, c0..c63 DOUBLE, target, note VARCHAR, amount DECIMAL(10,2))`` (the 1,797
    digits) and model ``lr`` (the digits pipeline, its features named c0..c63)."""
    X, y = digits
    cols = {"id": ("INTEGER", range(len(X)))}
    cols.update({c: ("DOUBLE", X[:, i].tolist()) for i, c in enumerate(FEATURES)})
    cols["target"] = ("BIGINT", y.tolist())
    cols["note"] = ("VARCHAR", [f"n{i % 13}" for i in range(len(X))])
    cols["amount"] = ("DECIMAL(10,2)", [f"{i / 7:.2f}" for i in range(len(X))])
    load_table(con, "pixels", cols)
    con.import_model("lr", digits_pipe, features=FEATURES)
    con.commit()
    return con


QUERIES = [
    "SELECT id, label FROM PREDICT(MODEL lr, TABLE pixels{o}) ORDER BY id",
    "SELECT label, count(*) AS n FROM PREDICT(MODEL lr, TABLE pixels{o}) GROUP BY label ORDER BY label",
    "SELECT * FROM PREDICT(MODEL lr, TABLE pixels{o}) ORDER BY id LIMIT 40",
    "SELECT p.* FROM PREDICT(MODEL lr, TABLE pixels{o}) AS p WHERE id % 5 = 0 ORDER BY id",
    "SELECT id, note, amount, probabilities FROM PREDICT(MODEL lr, (SELECT * FROM pixels WHERE id < ?){o}) ORDER BY id",
    "WITH p AS (SELECT * FROM PREDICT(MODEL lr, TABLE pixels{o})) "
    "SELECT target, avg((label = target)::INT) AS acc FROM p GROUP BY target ORDER BY target",
    "SELECT a.id, a.label, b.note FROM PREDICT(MODEL lr, TABLE pixels{o}) AS a JOIN pixels AS b USING (id) "
    "ORDER BY a.id LIMIT 50",
    "SELECT count(*) FROM PREDICT(MODEL lr, TABLE pixels{o})",
    "SELECT note, count(*) FROM PREDICT(MODEL lr, TABLE pixels{o}) WHERE label = target GROUP BY note ORDER BY note",
]


def _normalize(rows):
    return [tuple(tuple(np.round(v, 5)) if isinstance(v, (list, tuple)) else v for v in row) for row in rows]


def _execution(con, query: str, params=None) -> str:
    rows = con.execute("EXPLAIN " + query, params).fetchall()
    text = [value for key, value in rows if key == "modelsql_predict"][0]
    line = [ln for ln in text.splitlines() if ln.startswith("execution:")]
    return line[0].split(": ", 1)[1] if line else "stream"


@pytest.mark.parametrize("query", QUERIES)
def test_batch_gives_the_stream_answer(wide_con, query):
    params = [700] if "?" in query else None
    stream = wide_con.execute(query.format(o=", execution = 'stream'"), params)
    stream_desc = [d[:2] for d in stream.description]
    stream_rows = stream.fetchall()
    batch = wide_con.execute(query.format(o=", execution = 'batch'"), params)
    assert [d[:2] for d in batch.description] == stream_desc
    batch_rows = batch.fetchall()
    assert len(stream_rows) > 0
    assert _normalize(batch_rows) == _normalize(stream_rows)
    # a query that reads no output never runs the model: it streams (and DuckDB drops the call)
    expected = "stream" if query.startswith("SELECT count(*) FROM") else "batch (column-major input)"
    assert _execution(wide_con, query.format(o=", execution = 'batch'"), params) == expected


def test_accuracy_in_batch_mode_is_the_models(wide_con, digits, digits_pipe):
    X, y = digits
    (acc,) = wide_con.execute(
        "SELECT avg((label = target)::DOUBLE) FROM PREDICT(MODEL lr, TABLE pixels, execution = 'batch')"
    ).fetchone()
    assert acc == pytest.approx(float((digits_pipe.predict(X) == y).mean()), abs=1e-9)


def test_auto_picks_batch_only_for_large_inputs(wide_con, monkeypatch):
    small = "SELECT count(label) FROM PREDICT(MODEL lr, TABLE pixels)"
    assert _execution(wide_con, small) == "stream"  # 1,797 rows < BATCH_MIN_ROWS
    monkeypatch.setattr(cost_mod, "BATCH_MIN_ROWS", 1000)
    assert _execution(wide_con, small) == "batch (column-major input)"
    monkeypatch.setattr(cost_mod, "BATCH_MEMORY", 1000)  # the outputs alone need more
    assert _execution(wide_con, small) == "stream"
    monkeypatch.setattr(cost_mod, "BATCH_MEMORY", 256 << 20)
    monkeypatch.setattr(cost_mod, "BATCH_MAX_PARAMS", 100)  # a "heavy" model streams
    assert _execution(wide_con, small) == "stream"


def test_a_users_materialized_cte_streams_and_evaluates_predictions_run_in_batch(wide_con, monkeypatch):
    """DuckDB pushes a filter every reference shares into a MATERIALIZED CTE, drops one nothing reads, and PIVOT
    reads one twice: a user's CTE is never taken as read whole (batch would run the model on rows the query
    filters out, or hand a read-once result to two readers), while EVALUATE, which reads every row of its
    predictions, runs them in batch mode."""
    monkeypatch.setattr(cost_mod, "BATCH_MIN_ROWS", 1000)
    cte = "WITH p AS MATERIALIZED (SELECT id, target, label FROM PREDICT(MODEL lr, TABLE pixels{o})) "
    for tail in ("SELECT count(*), sum(label) FROM p WHERE id > 10", "SELECT 42",
                 "PIVOT p ON target % 2 USING sum(label) GROUP BY label",
                 "SELECT (SELECT count(*) FROM p WHERE label = target), (SELECT count(*) FROM p)"):
        assert _execution(wide_con, (cte + tail).format(o="")) == "stream", tail
        stream = sorted(wide_con.execute((cte + tail).format(o=", execution = 'stream'")).fetchall(), key=repr)
        assert sorted(wide_con.execute((cte + tail).format(o="")).fetchall(), key=repr) == stream
    from modelsql.operators.scan import BatchPredict

    runs = []
    real = BatchPredict.run
    monkeypatch.setattr(BatchPredict, "run", lambda self, *a, **k: runs.append(1) or real(self, *a, **k))
    row = wide_con.execute("EVALUATE MODEL lr ON TABLE pixels TARGET target").fetchone()
    wide_con.rollback()  # (the evaluation is recorded in the user's transaction)
    assert runs == [1] and row[4] == 1797


def test_auto_streams_a_predict_whose_columns_are_renamed_by_position(wide_con, monkeypatch):
    """``AS p(i)`` renames columns by position, so which outputs are read is unknown: streaming runs the model only
    where one is read (here none: DuckDB drops the call), batch would run it on every row."""
    monkeypatch.setattr(cost_mod, "BATCH_MIN_ROWS", 1000)
    query = "SELECT sum(i) FROM PREDICT(MODEL lr, TABLE pixels{o}) AS p(i)"
    assert _execution(wide_con, query.format(o="")) == "stream"
    assert wide_con.execute(query.format(o="")).fetchall() == [(sum(range(1797)),)]


def test_auto_falls_back_to_streaming_when_the_estimate_is_wrong(wide_con, monkeypatch):
    # DuckDB estimates a filter keeps a fraction of the rows; this one keeps them all
    query = "SELECT id, note, label FROM PREDICT(MODEL lr, (SELECT * FROM pixels WHERE id >= 0)) ORDER BY id"
    expected = wide_con.execute(query.replace("pixels WHERE", "pixels WHERE true AND") + "").fetchall()
    monkeypatch.setattr(cost_mod, "BATCH_MIN_ROWS", 1)
    monkeypatch.setattr(cost_mod, "BATCH_ROWS", 2048)
    monkeypatch.setattr(cost_mod, "BATCH_MEMORY", 12_000)  # the estimate fits; 2x is passed while running
    assert wide_con.execute(query).fetchall() == expected
    assert wide_con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name LIKE '__modelsql%'").fetchone() == (0,)


def test_batch_sees_uncommitted_rows_and_leaves_no_transaction_open(db, digits_pipe, digits):
    X, _ = digits
    con = modelsql.connect(db)
    con.import_model("lr", digits_pipe, features=FEATURES)
    load_table(con, "src", {c: ("DOUBLE", X[:10, i].tolist()) for i, c in enumerate(FEATURES)})
    con.commit()
    con.execute("CREATE TABLE px AS SELECT * FROM src")  # not committed
    # the batch input runs on the same connection, in the same transaction
    assert con.execute("SELECT count(*) FROM PREDICT(MODEL lr, TABLE px, execution = 'batch')").fetchone() == (10,)
    con.rollback()
    assert con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'px'").fetchone() == (0,)
    con.close()
    con = modelsql.connect(db)
    con.autocommit = True
    cur = con.execute("SELECT label FROM PREDICT(MODEL lr, TABLE src, execution = 'batch')")
    assert len(cur.fetchall()) == 10
    # the engine's own transaction ended with the result: BEGIN/COMMIT work and a write is durable
    con.execute("BEGIN")
    con.execute("INSERT INTO src SELECT * FROM src LIMIT 1")
    con.execute("COMMIT")
    cur = con.execute("SELECT label FROM PREDICT(MODEL lr, TABLE src, execution = 'batch')")
    cur.fetchone()  # a half-read batch result: the next statement settles it
    con.execute("INSERT INTO src SELECT * FROM src LIMIT 1")
    con.close()
    other = modelsql.connect(db)
    assert other.execute("SELECT count(*) FROM src").fetchone() == (12,)
    other.close()


def test_batch_passthrough_types_survive(con):
    con.import_model("lin", linear_model([[1.0], [2.0]], [0.5]))
    con.execute(
        "CREATE TABLE t AS SELECT i AS id, i::DOUBLE AS a, (i % 3)::DOUBLE AS b, "
        "gen_random_uuid() AS u, i::HUGEINT * 1000000000000 AS h, "
        "INTERVAL (i) DAY AS iv, TIMESTAMPTZ '2024-01-01 00:00:00+00' + INTERVAL (i) HOUR AS ts, "
        "{'k': i, 'v': [i, i + 1]} AS st, [i, NULL] AS li, (i / 3)::DECIMAL(18, 3) AS d, "
        "TIME '10:00:00' + INTERVAL (i) MINUTE AS tm FROM range(50) r(i)"
    )
    con.execute("CREATE TYPE mood AS ENUM ('even', 'odd')")
    con.execute("ALTER TABLE t ADD COLUMN m mood")
    con.execute("UPDATE t SET m = CASE WHEN id % 2 = 0 THEN 'even' ELSE 'odd' END")
    q = "SELECT * FROM PREDICT(MODEL lin, TABLE t, features = (a, b), execution = '{}') ORDER BY id"
    s = con.execute(q.format("stream"))
    s_desc, s_rows = [d[:2] for d in s.description], s.fetchall()
    b = con.execute(q.format("batch"))
    assert [d[:2] for d in b.description] == s_desc
    assert b.fetchall() == s_rows


@pytest.mark.parametrize("on_null", ["skip", "null"])
def test_batch_on_null_modes(con, on_null):
    con.import_model("lin", linear_model([[1.0], [2.0]], [0.5]))
    con.execute("CREATE TABLE t AS SELECT i AS id, CASE WHEN i % 4 = 0 THEN NULL ELSE i END::DOUBLE AS a, "
                "CASE WHEN i % 5 = 0 THEN NULL ELSE 1 END::DOUBLE AS b FROM range(100) r(i)")
    q = f"SELECT id, y FROM PREDICT(MODEL lin, TABLE t, features = (a, b), on_null = '{on_null}', execution = '{{}}') ORDER BY id"
    stream = con.execute(q.format("stream")).fetchall()
    assert con.execute(q.format("batch")).fetchall() == stream
    assert len(stream) == (100 if on_null == "null" else 60)


def test_batch_with_a_fixed_batch_dimension_and_batch_size(con):
    # a fixed batch dimension (3) is not transposed: the packed row layout is fed in slices, padded
    con.import_model("fixed", linear_model([[1.0], [2.0]], [0.5], batch=3))
    con.execute("CREATE TABLE t AS SELECT i AS id, i::DOUBLE AS a, 1.0::DOUBLE AS b FROM range(10) r(i)")
    q = "SELECT id, y FROM PREDICT(MODEL fixed, TABLE t, features = (a, b), execution = '{}'{}) ORDER BY id"
    stream = con.execute(q.format("stream", "")).fetchall()
    assert len(stream) == 10
    assert con.execute(q.format("batch", "")).fetchall() == stream
    assert _execution(con, q.format("batch", "")) == "batch"
    con.import_model("lin", linear_model([[1.0], [2.0]], [0.5]))
    q2 = q.replace("fixed", "lin")
    assert con.execute(q2.format("batch", ", batch_size = 3")).fetchall() == con.execute(q2.format("stream", "")).fetchall()


def test_nested_predict_in_batch_mode(wide_con, tmp_path):
    from conftest import argmax_model

    wide_con.import_model("argmax10", argmax_model(10))
    q = ("SELECT count(*) FROM PREDICT(MODEL argmax10, (SELECT probabilities FROM PREDICT(MODEL lr, TABLE pixels, "
         "execution = '{0}')), execution = '{0}') WHERE best >= 0")
    assert wide_con.execute(q.format("batch")).fetchone() == wide_con.execute(q.format("stream")).fetchone() == (1797,)


def test_plain_explain_reads_no_rows(con):
    con.import_model("lin", linear_model([[1.0], [2.0]], [0.5]))
    con.execute("CREATE TABLE t AS SELECT NULL::DOUBLE AS a, 1.0::DOUBLE AS b FROM range(10)")
    # a NULL would fail the model run; plain EXPLAIN must not run it
    rows = con.execute("EXPLAIN SELECT * FROM PREDICT(MODEL lin, TABLE t, features = (a, b), execution = 'batch')").fetchall()
    assert any("execution: batch" in v for k, v in rows if k == "modelsql_predict")


def test_bad_execution_option(con):
    con.import_model("lin", linear_model([[1.0], [2.0]], [0.5]))
    con.execute("CREATE TABLE t AS SELECT 1.0::DOUBLE AS a, 1.0::DOUBLE AS b")
    with pytest.raises(modelsql.ProgrammingError) as info:
        con.execute("SELECT * FROM PREDICT(MODEL lin, TABLE t, execution = 'fast')")
    assert info.value.code == "invalid_option" and "'auto', 'stream', 'batch'" in str(info.value)


def test_column_major_inputs_gives_the_same_outputs(digits, digits_pipe):
    from modelsql.converters.sklearn import from_sklearn

    X, _ = digits
    model, _ = from_sklearn(digits_pipe)
    data = model.SerializeToString()
    name = model.graph.input[0].name
    variant = column_major_inputs(data, [name])
    a = ort.InferenceSession(data).run(None, {name: X.astype(np.float32)})
    sess = ort.InferenceSession(variant)
    assert sess.get_inputs()[0].shape[0] == 64
    b = sess.run(None, {sess.get_inputs()[0].name: np.ascontiguousarray(X.T.astype(np.float32))})
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_allclose(a[1], b[1], rtol=1e-5, atol=1e-6)
    with pytest.raises(modelsql.ProgrammingError):
        column_major_inputs(data, ["no_such_input"])


def test_batch_keeps_a_struct_column_read_by_field(con):
    con.import_model("lin", linear_model([[1.0], [2.0]], [0.5]))
    con.execute("CREATE TABLE t AS SELECT i::DOUBLE AS a, 2.0::DOUBLE AS b, {'k': i} AS st FROM range(5) r(i)")
    q = "SELECT st.k, y FROM PREDICT(MODEL lin, TABLE t, features = (a, b), execution = '{}') ORDER BY 1"
    assert con.execute(q.format("batch")).fetchall() == con.execute(q.format("stream")).fetchall()


@pytest.fixture
def small(con):
    con.import_model("lin", linear_model([[1.0], [2.0]], [0.5]))
    con.execute("CREATE TABLE t AS SELECT i AS id, i::DOUBLE AS a, (i % 3)::DOUBLE AS b, {'k': i} AS st, "
                "'n' || i AS note FROM range(5) r(i)")
    con.commit()
    return con


SMALL = "PREDICT(MODEL lin, TABLE t, features = (a, b), execution = '{}')"


@pytest.mark.parametrize("query", [
    "SELECT #1, #5 FROM {p} ORDER BY 1",
    "SELECT sum(k0) FROM {p} AS q(k0)",
    "SELECT i2, y FROM {p} AS q(i2) ORDER BY 1",
    "SELECT id, st.k, y FROM {p} ORDER BY id",
    "SELECT q.id, q.st.k, y FROM {p} AS q ORDER BY 1",
    "SELECT id, note.upper(), y FROM {p} ORDER BY id",
])
def test_batch_reads_columns_however_they_are_named(small, query):
    stream = small.execute(query.format(p=SMALL.format("stream"))).fetchall()
    assert small.execute(query.format(p=SMALL.format("batch"))).fetchall() == stream


def test_types_arrow_would_change_stream_or_are_refused(con):
    con.import_model("lin", linear_model([[1.0], [2.0]], [0.5]))
    con.execute("CREATE TABLE tz AS SELECT i AS id, i::DOUBLE AS a, 1.0::DOUBLE AS b, '10:00:00+05:30'::TIMETZ AS t, "
                "'0101'::BIT AS bits, 340282366920938463463374607431768211455::UHUGEINT AS u, "
                "('Ab' || i)::VARCHAR COLLATE NOCASE AS coll FROM range(3) r(i)")
    q = "SELECT {} , y FROM PREDICT(MODEL lin, TABLE tz, features = (a, b), execution = '{}') ORDER BY id"
    for col in ("t", "bits", "u"):
        with pytest.raises(modelsql.NotSupportedError) as info:
            con.execute(q.format(f"id, {col}", "batch"))
        assert info.value.code == "batch_type_not_supported" and f'"{col}"' in str(info.value)
        assert con.execute(q.format(f"id, {col}", "auto")).fetchall() == con.execute(q.format(f"id, {col}", "stream")).fetchall()
    # a collation survives: the comparison below is case-insensitive in both modes
    cq = ("SELECT count(*) FROM PREDICT(MODEL lin, TABLE tz, features = (a, b), execution = '{}') "
          "WHERE coll = 'AB1' AND y > 0")
    assert con.execute(cq.format("batch")).fetchone() == con.execute(cq.format("stream")).fetchone() == (1,)


def test_batch_does_not_run_the_model_when_no_output_is_read(con):
    con.import_model("lin", linear_model([[1.0], [2.0]], [0.5]))
    con.execute("CREATE TABLE n AS SELECT i AS id, CASE WHEN i = 3 THEN NULL ELSE i END::DOUBLE AS a, 1.0::DOUBLE AS b "
                "FROM range(10) r(i)")
    for execution in ("batch", "auto", "stream"):
        q = f"SELECT count(*), max(id) FROM PREDICT(MODEL lin, TABLE n, features = (a, b), execution = '{execution}')"
        assert con.execute(q).fetchone() == (10, 9)


def test_auto_streams_under_a_filter_or_limit(wide_con, monkeypatch):
    monkeypatch.setattr(cost_mod, "BATCH_MIN_ROWS", 1000)
    base = "SELECT id, label FROM PREDICT(MODEL lr, TABLE pixels)"
    assert _execution(wide_con, base) == "batch (column-major input)"
    for tail in (" WHERE id < 10", " LIMIT 5", " JOIN pixels USING (id)"):
        assert _execution(wide_con, base + tail) == "stream", tail


def test_a_duckdb_error_mid_input_keeps_its_class(con):
    con.import_model("lin", linear_model([[1.0], [2.0]], [0.5]))
    con.execute("CREATE TABLE e AS SELECT i AS id, i::DOUBLE AS a, CASE WHEN i = 150000 THEN 'oops' ELSE '1' END AS bs "
                "FROM range(200000) r(i)")
    con.commit()
    q = ("SELECT count(y) FROM PREDICT(MODEL lin, (SELECT id, a, bs::DOUBLE AS b FROM e), features = (a, b), "
         "execution = '{}')")
    for execution in ("stream", "batch"):
        with pytest.raises(modelsql.DataError) as info:
            con.execute(q.format(execution)).fetchall()
        assert "oops" in str(info.value) and "OSError" not in str(info.value)
        con.rollback()


def test_a_streaming_null_error_inside_a_batch_predict(con):
    con.import_model("lin", linear_model([[1.0], [2.0]], [0.5]))
    con.import_model("lin2", linear_model([[1.0]], [0.0], input_name="y", output_name="z"))
    con.execute("CREATE TABLE n AS SELECT i AS id, CASE WHEN i = 3 THEN NULL ELSE i END::DOUBLE AS a, 1.0::DOUBLE AS b "
                "FROM range(10) r(i)")
    con.commit()
    q = ("SELECT sum(z) FROM PREDICT(MODEL lin2, (SELECT y FROM PREDICT(MODEL lin, TABLE n, features = (a, b), "
         "execution = 'stream')), execution = 'batch')")
    with pytest.raises(modelsql.DataError) as info:
        con.execute(q).fetchall()
    assert info.value.code == "null_input" and "modelsql-null-input" not in str(info.value)
    con.rollback()


def test_batch_after_an_untracked_begin(small):
    small.autocommit = True
    small.execute("BEGIN; SELECT 1")
    assert len(small.execute(f"SELECT y FROM {SMALL.format('batch')}").fetchall()) == 5
    small.execute("ROLLBACK")
    assert small.execute("SELECT 1").fetchone() == (1,)


def test_a_failed_batch_predict_leaves_the_transaction_as_a_streaming_one_does(con):
    con.import_model("lin", linear_model([[1.0], [2.0]], [0.5]))
    con.execute("CREATE TABLE n AS SELECT CASE WHEN i = 3 THEN NULL ELSE i END::DOUBLE AS a, 1.0::DOUBLE AS b "
                "FROM range(10) r(i)")
    con.commit()
    for execution in ("stream", "batch"):
        con.execute("CREATE TABLE w AS SELECT 1 AS x")
        with pytest.raises(modelsql.DataError):
            con.execute(f"SELECT y FROM PREDICT(MODEL lin, TABLE n, features = (a, b), execution = '{execution}')").fetchall()
        with pytest.raises(modelsql.Error):
            con.execute("SELECT 1").fetchall()  # aborted until rollback
        con.rollback()
        assert con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'w'").fetchone() == (0,)


def test_streaming_sessions_get_the_cores_a_small_scan_leaves_idle(con, monkeypatch):
    from modelsql.operators.backends.onnxruntime import default_threads
    from modelsql.operators.predict import PredictFunction

    seen: list[int] = []
    run = PredictFunction._run

    def spy(self, feeds, n, *rest):
        seen.append(self.model.intra_op_threads)
        return run(self, feeds, n, *rest)

    monkeypatch.setattr(PredictFunction, "_run", spy)
    con.import_model("lin", linear_model([[1.0], [2.0]], [0.5]))
    duck_threads = int(con.execute("SELECT current_setting('threads')").fetchone()[0])
    for rows in (1_000, 3 * cost_mod.ROW_GROUP_ROWS):
        con.execute(f"CREATE OR REPLACE TABLE t AS SELECT i::DOUBLE AS a, 1.0::DOUBLE AS b FROM range({rows}) r(i)")
        seen.clear()
        q = "SELECT sum(y) FROM PREDICT(MODEL lin, TABLE t, features = (a, b), execution = 'stream')"
        con.execute(q).fetchall()
        callers = max(1, min(duck_threads, -(-rows // cost_mod.ROW_GROUP_ROWS)))
        assert set(seen) == {max(1, default_threads() // callers)}, (rows, set(seen))


@pytest.fixture
def iris_con(con):
    from sklearn.datasets import load_iris
    from sklearn.linear_model import LogisticRegression

    X, y = load_iris(return_X_y=True)
    con.import_model("iris", LogisticRegression(max_iter=500).fit(X, y), features=["a", "b", "c", "d"])
    rows = 70_000
    con.execute(f"CREATE TABLE t AS SELECT i AS id, i % 7 AS g, 4 + (i % 30) / 10 AS a, 3.0::DOUBLE AS b, "
                f"1 + (i % 50) / 10 AS c, (i % 25) / 10 AS d FROM range({rows}) r(i)")
    con.execute("CREATE TABLE tn AS SELECT * REPLACE (CASE WHEN id = 69000 THEN NULL ELSE a END AS a) FROM t")
    con.commit()
    return con


def test_the_whole_row_of_a_predict_keeps_every_output(iris_con):
    for execution in ("auto", "stream", "batch"):
        q = f"PREDICT(MODEL iris, (SELECT * FROM t WHERE id < 3), execution = '{execution}') AS q"
        (row,) = iris_con.execute(f"SELECT q FROM {q} ORDER BY q.id LIMIT 1").fetchone()
        assert "probabilities" in row and "label" in row, row
        assert len(iris_con.execute(f"SELECT q['probabilities'] FROM {q}").fetchall()) == 3


def test_pivot_and_subquery_predicts_stream_under_auto(iris_con, monkeypatch):
    monkeypatch.setattr(cost_mod, "BATCH_MIN_ROWS", 1000)
    pivot = "PIVOT PREDICT(MODEL iris, (SELECT g, a, b, c, d FROM t){}) ON label USING count(*)"
    auto = sorted(iris_con.execute(pivot.format("")).fetchall())
    assert len(auto) > 1 and auto == sorted(iris_con.execute(pivot.format(", execution = 'stream'")).fetchall())
    # a streaming PREDICT here runs partly or not at all, so it never meets the NULL: auto must agree
    for q, expected in [
        ("SELECT EXISTS (SELECT label FROM PREDICT(MODEL iris, TABLE tn))", (True,)),
        ("WITH u AS (SELECT label FROM PREDICT(MODEL iris, TABLE tn)) SELECT 42", (42,)),
        ("SELECT CASE WHEN 1 = 0 THEN (SELECT max(label) FROM PREDICT(MODEL iris, TABLE tn)) ELSE 7 END", (7,)),
    ]:
        assert iris_con.execute(q).fetchone() == expected, q
    assert _execution(iris_con, "SELECT label, count(*) FROM PREDICT(MODEL iris, TABLE t) GROUP BY label") \
        == "batch (column-major input)"


def test_scalar_subquery_column_is_named_by_the_users_text(iris_con):
    for execution in ("stream", "batch"):
        cur = iris_con.execute(f"SELECT (SELECT max(label) FROM PREDICT(MODEL iris, TABLE t, execution = '{execution}'))")
        name = cur.description[0][0]
        assert "__msql" not in name and "__modelsql" not in name and "PREDICT(MODEL iris" in name, name


def test_explain_of_ctas_and_dml_with_predict(iris_con):
    for stmt in ("CREATE TABLE x AS SELECT label FROM PREDICT(MODEL iris, TABLE t)",
                 "INSERT INTO t SELECT * EXCLUDE (label, probabilities) FROM PREDICT(MODEL iris, TABLE t) LIMIT 1",
                 "DELETE FROM t WHERE id IN (SELECT id FROM PREDICT(MODEL iris, TABLE t) WHERE label = 9)"):
        rows = iris_con.execute("EXPLAIN " + stmt).fetchall()
        assert rows[0][0] == "modelsql_predict" and len(rows) >= 2, stmt
    assert iris_con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'x'").fetchone() == (0,)


def test_begin_inside_a_multi_statement_text(iris_con):
    con = iris_con
    con.commit()
    con.execute("CREATE TABLE log (x INTEGER)")
    con.commit()
    con.autocommit = True
    con.execute("BEGIN; INSERT INTO log VALUES (1);")
    con.rollback()
    assert con.execute("SELECT count(*) FROM log").fetchone() == (0,)
    con.execute("BEGIN; INSERT INTO log VALUES (2); COMMIT")
    assert con.execute("SELECT count(*) FROM log").fetchone() == (1,)
    con.autocommit = False
    con.execute("BEGIN; INSERT INTO log VALUES (3); COMMIT")
    con.execute("BEGIN; SELECT count(*) FROM PREDICT(MODEL iris, TABLE t)")
    con.rollback()
    assert con.execute("SELECT count(*) FROM log").fetchone() == (2,)


def test_enum_label_spelled_like_an_unsafe_type_is_fine(con):
    con.import_model("lin", linear_model([[1.0], [2.0]], [0.5]))
    con.execute("CREATE TYPE mood AS ENUM ('sad', 'ok', 'BIT')")
    con.execute("CREATE TABLE t AS SELECT i::DOUBLE AS a, 1.0::DOUBLE AS b, 'BIT'::mood AS m FROM range(3) r(i)")
    q = "SELECT m, y FROM PREDICT(MODEL lin, TABLE t, features = (a, b), execution = '{}') ORDER BY y"
    assert con.execute(q.format("batch")).fetchall() == con.execute(q.format("stream")).fetchall()


def test_execution_null_is_refused(con):
    con.import_model("lin", linear_model([[1.0], [2.0]], [0.5]))
    con.execute("CREATE TABLE t AS SELECT 1.0::DOUBLE AS a, 1.0::DOUBLE AS b")
    with pytest.raises(modelsql.ProgrammingError):
        con.execute("SELECT * FROM PREDICT(MODEL lin, TABLE t, execution = NULL)")
