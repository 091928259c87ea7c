"""PROFILE MODEL: a real model in a real DuckDB file timed on ONNX Runtime, one trace per configuration in
``modelsql.traces`` with every run kept, and its errors."""

from __future__ import annotations

import numpy as np
import pytest

from modelsql.errors import ProgrammingError

from conftest import linear_model


def test_profile_records_one_trace_per_configuration(con):
    con.import_model("lin", linear_model(np.ones((8, 3), np.float32)))
    cur = con.cursor()
    cur.execute("PROFILE MODEL lin WITH (batch_sizes = (1, 32), threads = (1, 2), repeat = 7)")
    names = [d[0] for d in cur.description]
    rows = [dict(zip(names, r)) for r in cur.fetchall()]
    assert [(r["threads"], r["batch_size"]) for r in rows] == [(1, 1), (1, 32), (2, 1), (2, 32)]
    assert all(0 < r["median_ms"] <= r["p99_ms"] for r in rows)
    traces = cur.execute("SELECT model, version, backend, device, threads, batch_size, len(seconds), median_s, "
                         "seconds FROM modelsql.traces ORDER BY trace").fetchall()
    assert [t[:7] for t in traces] == [("lin", 1, "onnxruntime", "cpu", th, b, 7) for th, b in
                                       ((1, 1), (1, 32), (2, 1), (2, 32))]
    assert all(t[7] == pytest.approx(float(np.median(t[8]))) for t in traces)
    cur.execute("PROFILE MODEL lin VERSION 1")  # the defaults: batch 1, 8, 64, one thread
    assert cur.execute("SELECT count(*) FROM modelsql.traces").fetchone() == (7,)


@pytest.mark.parametrize("sql,code", [
    ("PROFILE MODEL nope", "model_not_found"),
    ("PROFILE MODEL lin WITH (batch_sizes = (0, 8))", "invalid_option"),
    ("PROFILE MODEL lin WITH (repeat = 'many')", "invalid_option"),
    ("PROFILE MODEL lin WITH (backends = ('tensorrt'))", "invalid_option"),
    ("PROFILE MODEL lin WITH (repeats = 3)", "unknown_option"),
    ("PROFILE MODEL lin WITH (batch_sizes = (4, 4))", "invalid_option"),
    ("PROFILE MODEL lin WITH (repeat = 100000000)", "invalid_option"),
    ("PROFILE MODEL lin WITH (batch_sizes = (100000000))", "invalid_option"),
    ("PROFILE MODEL lin WITH (backends = ('onnxruntime', 'onnxruntime'))", "invalid_option"),
])
def test_bad_profile_statements_change_nothing(con, sql, code):
    con.import_model("lin", linear_model(np.ones((8, 3), np.float32)))
    with pytest.raises(ProgrammingError) as ei:
        con.execute(sql)
    assert ei.value.code == code
    assert con.execute("SELECT count(*) FROM modelsql.traces").fetchone() == (0,)


def test_profile_records_features_and_operator_times(con):
    """Each trace carries its cost-model features, and ONNX Runtime's profiler gives per-operator kernel
    times (microseconds, shares summing to 1) unless operators = false."""
    import json

    con.import_model("lin", linear_model(np.ones((8, 3), np.float32)))
    con.execute("PROFILE MODEL lin WITH (batch_sizes = (4), repeat = 3)")
    trace, features = con.execute("SELECT trace, features FROM modelsql.traces").fetchone()
    features = json.loads(features)
    assert features["batch_size"] == 4 and features["threads"] == 1 and features["backend"] == "onnxruntime"
    assert features["params"] >= 24 and features["merge_factor"] == 1
    ops = con.execute("SELECT op_type, nodes, runs, median_us, share FROM modelsql.trace_operators "
                      "WHERE trace = ?", [trace]).fetchall()
    assert ops and all(n >= 1 and runs == 5 and us >= 0 for _, n, runs, us, _ in ops)
    assert sum(share for *_, share in ops) == pytest.approx(1.0)
    con.execute("PROFILE MODEL lin WITH (batch_sizes = (4), repeat = 3, operators = false)")
    assert con.execute("SELECT count(DISTINCT trace) FROM modelsql.trace_operators").fetchone() == (1,)
    with pytest.raises(ProgrammingError) as ei:
        con.execute("PROFILE MODEL lin WITH (operators = 'yes')")
    assert ei.value.code == "invalid_option"


def test_profile_merge_factors_time_netfuse_merges(con):
    """merge_factors = (1, 4) also times a 4-way NetFuse merge of the model (batch 1 lowered as a grouped Conv,
    batch 16 as a batched MatMul); the merged traces carry merge factor 4 and four members' work."""
    import json

    con.import_model("lin", linear_model(np.ones((8, 3), np.float32)))
    rows = con.execute("PROFILE MODEL lin WITH (batch_sizes = (1, 16), merge_factors = (1, 4), repeat = 3, "
                       "operators = false, train_cost_model = false)").fetchall()
    assert [(r[3], r[4]) for r in rows] == [(1, 1), (16, 1), (1, 4), (16, 4)]
    features = [json.loads(f) for (f,) in con.execute("SELECT features FROM modelsql.traces ORDER BY trace").fetchall()]
    assert [f["merge_factor"] for f in features] == [1, 1, 4, 4]
    assert features[2]["params"] == 4 * features[0]["params"]
    assert con.execute("SELECT count(*) FROM modelsql.cost_models").fetchone() == (0,)


def test_profile_trains_the_cost_model_once_there_are_enough_traces(con):
    """Eight traces train the cost model: catalog model modelsql_cost, a fit row, and EXPLAIN of a PREDICT
    names it as the source of its estimate."""
    con.import_model("lin", linear_model(np.ones((8, 3), np.float32)))
    con.execute("PROFILE MODEL lin WITH (batch_sizes = (1, 64), threads = (1, 2), repeat = 5, operators = false)")
    assert con.execute("SELECT count(*) FROM modelsql.cost_models").fetchone() == (0,)  # 4 traces: too few
    con.execute("PROFILE MODEL lin WITH (batch_sizes = (8, 256), threads = (1, 2), repeat = 5, operators = false)")
    version, traces, noise = con.execute("SELECT version, traces, noise_ceiling FROM modelsql.cost_models").fetchone()
    assert (version, traces) == (1, 8) and 0 <= noise <= 1
    assert con.execute("SELECT kind FROM modelsql.models WHERE name = 'modelsql_cost'").fetchone() == ("cost_model",)
    con.execute("CREATE TABLE t AS SELECT " + ", ".join(f"{i}::FLOAT AS c{i}" for i in range(8)) + " FROM range(100)")
    plan = dict(con.execute("EXPLAIN SELECT * FROM PREDICT(MODEL lin, TABLE t)").fetchall())["modelsql_plan"]
    assert "cost model modelsql_cost version 1 (8 traces" in plan


def test_explain_analyze_records_the_runs_it_made_as_traces(con):
    """EXPLAIN ANALYZE keeps what really ran: one trace per rows-per-run seen at least three times, with its
    features, source explain_analyze; a plain EXPLAIN records nothing."""
    import json

    con.import_model("lin", linear_model(np.ones((8, 3), np.float32)))
    con.execute("CREATE TABLE t AS SELECT " + ", ".join(f"{i}::FLOAT AS c{i}" for i in range(8)) + " FROM range(5000)")
    con.execute("EXPLAIN SELECT * FROM PREDICT(MODEL lin, TABLE t, batch_size = 100)").fetchall()
    assert con.execute("SELECT count(*) FROM modelsql.traces").fetchone() == (0,)
    con.execute("EXPLAIN ANALYZE SELECT * FROM PREDICT(MODEL lin, TABLE t, batch_size = 100)").fetchall()
    rows = con.execute("SELECT source, batch_size, len(seconds), backend, features FROM modelsql.traces").fetchall()
    assert [(r[0], r[1], r[3]) for r in rows] == [("explain_analyze", 100, "onnxruntime")]
    assert rows[0][2] == 20 + 20 + 9 and json.loads(rows[0][4])["batch_size"] == 100  # chunks of 2,048, 2,048 and 904 rows


def test_profile_on_a_table_times_the_real_predict_runs(con):
    """PROFILE MODEL m ON TABLE t runs the PREDICT over t with each batch size as the planner plans it and
    records its model runs; options that only synthetic inputs have are refused."""
    con.import_model("lin", linear_model(np.ones((8, 3), np.float32)))
    con.execute("CREATE TABLE t AS SELECT " + ", ".join(f"{i}::FLOAT AS c{i}" for i in range(8)) + " FROM range(2000)")
    rows = con.execute("PROFILE MODEL lin ON TABLE t WITH (batch_sizes = (100, 500), repeat = 10)").fetchall()
    assert {(r[3], r[9]) for r in rows} >= {(100, "lin"), (500, "lin")}
    sizes = con.execute("SELECT batch_size, len(seconds), source FROM modelsql.traces ORDER BY batch_size").fetchall()
    assert all(n >= 10 and source == "profile" for b, n, source in sizes if b in (100, 500))
    with pytest.raises(ProgrammingError) as ei:
        con.execute("PROFILE MODEL lin ON TABLE t WITH (threads = (2))")
    assert ei.value.code == "invalid_option"
    with pytest.raises(ProgrammingError):
        con.execute("PROFILE MODEL lin ON TABLE nope")


def test_profile_pipeline_profiles_each_step(con):
    """PROFILE PIPELINE p times each distinct step model on synthetic inputs (one trace per step and
    configuration), and refuses ON (a pipeline's runs are not one graph's)."""
    from sklearn.datasets import load_iris
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from modelsql.errors import NotSupportedError

    x, y = load_iris(return_X_y=True)
    con.import_pipeline("p", make_pipeline(StandardScaler(), LogisticRegression(max_iter=300)).fit(x, y),
                        example_input=x[:2])
    rows = con.execute("PROFILE PIPELINE p WITH (batch_sizes = (1, 16), repeat = 3, operators = false)").fetchall()
    steps = con.execute("SELECT count(*) FROM modelsql.pipeline_steps").fetchone()[0]
    assert len(rows) == 2 * steps and len({r[9] for r in rows}) == steps
    con.execute("CREATE TABLE flowers AS SELECT 5.1::DOUBLE a, 3.5::DOUBLE b, 1.4::DOUBLE c, 0.2::DOUBLE d")
    with pytest.raises(NotSupportedError) as ei:
        con.execute("PROFILE PIPELINE p ON TABLE flowers")
    assert ei.value.code == "profile_not_supported"


def test_dropping_the_cost_model_lets_the_next_profile_fit_a_new_one(con):
    """DROP MODEL modelsql_cost takes its fits with it: the next PROFILE fits version 1 again, and EXPLAIN names
    that fit; with traces but no fit EXPLAIN says so."""
    con.import_model("lin", linear_model(np.ones((8, 3), np.float32)))
    con.execute("PROFILE MODEL lin WITH (batch_sizes = (1, 64), repeat = 4, operators = false)")
    con.execute("CREATE TABLE t AS SELECT " + ", ".join(f"{i}::FLOAT AS c{i}" for i in range(8)) + " FROM range(10)")
    plan = dict(con.execute("EXPLAIN SELECT * FROM PREDICT(MODEL lin, TABLE t)").fetchall())["modelsql_plan"]
    assert "defaults: 2 traces, no cost model fitted" in plan
    settings = "batch_sizes = (1, 8, 64, 256), threads = (1, 2), repeat = 4, operators = false"
    con.execute(f"PROFILE MODEL lin WITH ({settings})")
    assert con.execute("SELECT version FROM modelsql.cost_models").fetchall() == [(1,)]
    con.execute("DROP MODEL modelsql_cost")
    assert con.execute("SELECT count(*) FROM modelsql.cost_models").fetchone() == (0,)
    con.execute(f"PROFILE MODEL lin WITH ({settings})")
    # a new fit, numbered 2: a model's version numbers are never given twice, even after DROP MODEL
    assert con.execute("SELECT version, traces FROM modelsql.cost_models").fetchall() == [(2, 18)]
    plan = dict(con.execute("EXPLAIN SELECT * FROM PREDICT(MODEL lin, TABLE t)").fetchall())["modelsql_plan"]
    assert "cost model modelsql_cost version 2 (18 traces" in plan


def test_a_fixed_batch_model_is_profiled_at_its_batch_by_default(con):
    con.import_model("fixed4", linear_model(np.ones((8, 3), np.float32), batch=4))
    rows = con.execute("PROFILE MODEL fixed4 WITH (repeat = 3, operators = false)").fetchall()
    assert [r[3] for r in rows] == [4]
