"""Pipelines in the catalog (issue 8): CREATE / OR REPLACE / DROP / SHOW / DESCRIBE / EXPORT PIPELINE,
PREDICT(PIPELINE ...), and import_pipeline splitting scikit-learn pipelines into shared steps.

Real DuckDB files, real ONNX Runtime sessions, models trained on scikit-learn's shipped data sets.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pyarrow as pa
import pytest
from sklearn.compose import ColumnTransformer
from sklearn.datasets import load_diabetes, load_iris
from sklearn.decomposition import PCA
from sklearn.ensemble import RandomForestRegressor
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.pipeline import FeatureUnion, Pipeline
from sklearn.preprocessing import MinMaxScaler, StandardScaler

import modelsql
from modelsql import errors
from modelsql.converters import from_sklearn
from modelsql.onnxformat import content_digest, split_model
from modelsql.operators.backends import SESSIONS
from modelsql.engine.artifacts import sessions as artifacts

IRIS_X, IRIS_Y = load_iris(return_X_y=True)
DIA_X, DIA_Y = load_diabetes(return_X_y=True)
IRIS_COLS = ["sl", "sw", "pl", "pw"]


@pytest.fixture
def con(tmp_path):
    c = modelsql.connect(str(tmp_path / "pipes.duckdb"))
    c.register("iris", pa.table({n: IRIS_X[:, i].astype(np.float32) for i, n in enumerate(IRIS_COLS)}))
    yield c
    c.close()


def _scaled_iris(con):
    sc = StandardScaler().fit(IRIS_X)
    lr = LogisticRegression(max_iter=1000).fit(sc.transform(IRIS_X), IRIS_Y)
    con.import_model("scale", sc, example_input=IRIS_X, features=IRIS_COLS)
    con.import_model("head", lr, example_input=sc.transform(IRIS_X))
    return sc, lr


def _labels(cur, sql):
    cur.execute(sql)
    return np.array([r[0] for r in cur.fetchall()])


@pytest.mark.parametrize("execution", ["stream", "batch"])
@pytest.mark.parametrize("optimize", [True, False])
def test_create_pipeline_predicts_as_the_chained_models(con, execution, optimize):
    sc, lr = _scaled_iris(con)
    con.optimize = optimize
    cur = con.cursor()
    cur.execute("CREATE PIPELINE iris_p AS (scale, head)")
    got = _labels(cur, f"SELECT label FROM PREDICT(PIPELINE iris_p, TABLE iris, execution = '{execution}')")
    assert (got == lr.predict(sc.transform(IRIS_X))).all()
    # the head alone over raw rows gives other labels: the pipeline really feeds it the scaled rows
    raw = _labels(cur, "SELECT label FROM PREDICT(MODEL head, (SELECT sl, sw, pl, pw FROM iris))")
    assert (raw != got).any()


def test_pipeline_in_subqueries_ctes_and_joins(con):
    sc, lr = _scaled_iris(con)
    cur = con.cursor()
    cur.execute("CREATE PIPELINE iris_p AS (scale, head)")
    want = lr.predict(sc.transform(IRIS_X))
    cur.execute("WITH p AS (SELECT label FROM PREDICT(PIPELINE iris_p, TABLE iris)) "
                "SELECT label, count(*) FROM p GROUP BY label ORDER BY label")
    assert cur.fetchall() == [(k, int((want == k).sum())) for k in sorted(set(want))]
    cur.execute("SELECT count(*) FROM PREDICT(PIPELINE iris_p, (SELECT * FROM iris WHERE pl > ?)) AS p", [4.0])
    assert cur.fetchall() == [(int((IRIS_X[:, 2].astype(np.float32) > 4.0).sum()),)]
    cur.execute("SELECT a.label = b.label FROM PREDICT(PIPELINE iris_p, TABLE iris) AS a "
                "POSITIONAL JOIN PREDICT(MODEL head, (SELECT variable AS input FROM PREDICT(MODEL scale, TABLE iris))) AS b")
    assert all(r[0] for r in cur.fetchall())


def test_replace_adds_a_version_and_old_versions_stay_addressable(con):
    sc, lr = _scaled_iris(con)
    cur = con.cursor()
    cur.execute("CREATE PIPELINE p AS (scale, head)")
    lr2 = LogisticRegression(C=0.01, max_iter=1000).fit(sc.transform(IRIS_X), IRIS_Y)
    con.import_model("head2", lr2, example_input=sc.transform(IRIS_X))
    with pytest.raises(errors.IntegrityError) as ei:
        cur.execute("CREATE PIPELINE p AS (scale, head2)")
    assert ei.value.code == "duplicate_pipeline"
    cur.execute("CREATE PIPELINE IF NOT EXISTS p AS (scale, head2)")
    cur.execute("CREATE OR REPLACE PIPELINE p AS (scale, head2)")
    cur.execute("SELECT name, version, versions, steps FROM modelsql.pipelines")
    assert cur.fetchall() == [("p", 2, 2, 2)]
    v1 = _labels(cur, "SELECT probabilities[1] FROM PREDICT(PIPELINE p VERSION 1, TABLE iris)")
    v2 = _labels(cur, "SELECT probabilities[1] FROM PREDICT(PIPELINE p, TABLE iris)")
    np.testing.assert_allclose(v1, lr.predict_proba(sc.transform(IRIS_X))[:, 0], atol=1e-5)
    np.testing.assert_allclose(v2, lr2.predict_proba(sc.transform(IRIS_X))[:, 0], atol=1e-5)
    with pytest.raises(errors.ProgrammingError) as ei:
        cur.execute("SELECT * FROM PREDICT(PIPELINE p VERSION 7, TABLE iris)")
    assert ei.value.code == "version_not_found" and "1, 2" in str(ei.value)


def test_drop_pipeline_and_models_in_use(con):
    _scaled_iris(con)
    cur = con.cursor()
    cur.execute("CREATE PIPELINE p AS (scale, head)")
    with pytest.raises(errors.IntegrityError) as ei:
        cur.execute("DROP MODEL head")
    assert ei.value.code == "model_in_use" and "p version 1" in str(ei.value)
    cur.execute("SELECT count(*) FROM modelsql.models")
    assert cur.fetchall() == [(2,)]  # nothing was lost
    cur.execute("DROP PIPELINE p VERSION 1")
    assert cur.rowcount == 1
    cur.execute("DROP PIPELINE IF EXISTS p")
    assert cur.rowcount == 0
    with pytest.raises(errors.ProgrammingError) as ei:
        cur.execute("DROP PIPELINE p")
    assert ei.value.code == "pipeline_not_found"
    cur.execute("DROP MODEL head")  # no pipeline uses it now
    cur.execute("SELECT count(*) FROM modelsql.models")
    assert cur.fetchall() == [(1,)]


def test_show_and_describe_pipeline(con):
    _scaled_iris(con)
    cur = con.cursor()
    cur.execute("CREATE PIPELINE p AS (scale AS prep, head) WITH (description = 'iris')")
    cur.execute("SHOW PIPELINES")
    rows = cur.fetchall()
    assert [d[0] for d in cur.description][:5] == ["name", "version", "versions", "steps", "step_list"]
    assert rows[0][:5] == ("p", 1, 1, 2, "prep (scale v1) -> head (head v1)")
    cur.execute("DESCRIBE PIPELINE p")
    rows = cur.fetchall()
    assert rows[0] == ("input", 0, "input", "FLOAT", "[N, 4]", None)
    assert rows[1][:3] == ("step", 0, "prep") and "pipeline input input" in rows[1][5]
    assert rows[2][:3] == ("step", 1, "head") and "input <- prep.variable" in rows[2][5]
    assert [r[2] for r in rows if r[0] == "output"] == ["label", "probabilities"]


def test_bad_pipelines_are_refused_and_change_nothing(con):
    _scaled_iris(con)
    cur = con.cursor()
    cases = [
        ("CREATE PIPELINE p AS (scale, nope)", errors.ProgrammingError, "model_not_found", 'Model "nope"'),
        ("CREATE PIPELINE p AS (scale, head VERSION 4)", errors.ProgrammingError, "version_not_found", "head"),
        ("CREATE PIPELINE p AS (scale, scale)", errors.ProgrammingError, "duplicate_step", "AS"),
        ("CREATE PIPELINE p AS (scale, head) WITH (colour = 1)", errors.ProgrammingError, "unknown_option", "colour"),
        ("CREATE PIPELINE p AS ()", errors.ProgrammingError, None, "at least one step"),
    ]
    for sql, cls, code, text in cases:
        with pytest.raises(cls) as ei:
            cur.execute(sql)
        assert code is None or ei.value.code == code, (sql, ei.value)
        assert text in str(ei.value), (sql, ei.value)
        if code in ("model_not_found", "version_not_found"):  # pointing at the step as written
            assert (ei.value.line, ei.value.column) == (1, sql.rindex("nope" if "nope" in sql else "head") + 1)
    cur.execute("SELECT count(*) FROM modelsql.pipeline_versions")
    assert cur.fetchall() == [(0,)]
    with pytest.raises(errors.ProgrammingError) as ei:
        cur.execute("SELECT * FROM PREDICT(PIPELINE scal, TABLE iris)")
    assert ei.value.code == "pipeline_not_found"


def test_steps_whose_types_do_not_meet_are_refused(con):
    """A step after the first is fed by the previous step's output, never silently by the raw input
    (skl2onnx names every input "input"): an output that does not fit is a type_mismatch naming both
    ends, and nothing is created."""
    sc, lr = _scaled_iris(con)
    two = StandardScaler().fit(IRIS_X[:, :2])
    con.import_model("scale2", two, example_input=IRIS_X[:, :2])
    cur = con.cursor()
    for sql, both in (("CREATE PIPELINE p AS (scale, scale2)", ('step "scale2" input "input" takes FLOAT[N, 2]',
                                                                'step "scale" output "variable"')),
                      ("CREATE PIPELINE p AS (head, scale)", ('step "scale" input "input" takes FLOAT[N, 4]',
                                                              'step "head" output "label", which is INT64'))):
        with pytest.raises(errors.ProgrammingError) as ei:
            cur.execute(sql)
        assert ei.value.code == "type_mismatch" and all(b in str(ei.value) for b in both), str(ei.value)
    cur.execute("SELECT count(*) FROM modelsql.pipeline_versions")
    assert cur.fetchall() == [(0,)]


def test_pipeline_survives_reopening(tmp_path):
    path = str(tmp_path / "reopen.duckdb")
    con = modelsql.connect(path)
    _scaled_iris(con)
    con.cursor().execute("CREATE PIPELINE p AS (scale, head)")
    con.close()
    con = modelsql.connect(path)
    con.register("iris", pa.table({n: IRIS_X[:, i].astype(np.float32) for i, n in enumerate(IRIS_COLS)}))
    cur = con.cursor()
    cur.execute("SELECT count(*) FROM PREDICT(PIPELINE p, TABLE iris)")
    assert cur.fetchall() == [(150,)]
    con.close()


def test_explain_names_the_pipeline(con):
    _scaled_iris(con)
    cur = con.cursor()
    cur.execute("CREATE PIPELINE p AS (scale, head)")
    cur.execute("EXPLAIN SELECT * FROM PREDICT(PIPELINE p, TABLE iris)")
    text = "\n".join(str(r[-1]) for r in cur.fetchall())
    assert 'pipeline "p" version 1' in text


# ---------------------------------------------------------------- import_pipeline


def _diabetes_pipelines():
    front = Pipeline([("scale", StandardScaler()), ("pca", PCA(5, random_state=0))]).fit(DIA_X)
    z = front.transform(DIA_X)
    ridge = Pipeline([("front", front), ("ridge", Ridge().fit(z, DIA_Y))])
    forest = Pipeline([("front", front), ("rf", RandomForestRegressor(20, max_depth=5, random_state=0).fit(z, DIA_Y))])
    return ridge, forest


def test_import_pipeline_shares_identical_steps(con):
    ridge, forest = _diabetes_pipelines()
    cols = [f"f{i}" for i in range(10)]
    con.register("dia", pa.table({c: DIA_X[:, i] for i, c in enumerate(cols)}))
    p1 = con.import_pipeline("ridge_p", ridge, example_input=DIA_X[:100], features=cols)
    p2 = con.import_pipeline("forest_p", forest, example_input=DIA_X[:100], features=cols)
    assert [s.name for s in p1.steps] == ["front.scale", "front.pca", "ridge"]
    # the front is one catalog model, reused by the second pipeline
    assert [s.model for s in p1.steps[:2]] == [s.model for s in p2.steps[:2]]
    assert p1.steps[0].model.name == "ridge_p__front__scale"
    cur = con.cursor()
    cur.execute("SELECT count(*) FROM modelsql.models")
    assert cur.fetchall() == [(4,)]
    for name, est in (("ridge_p", ridge), ("forest_p", forest)):
        cur.execute(f"SELECT prediction FROM PREDICT(PIPELINE {name}, TABLE dia)")
        got = np.array([r[0] for r in cur.fetchall()], dtype=np.float64).ravel()
        np.testing.assert_allclose(got, est.predict(DIA_X), rtol=1e-4, atol=1e-3)


def test_identical_models_under_two_names_share_one_session(con):
    """Two conversions of one fitted scaler (skl2onnx gives each graph a random name) are two catalog
    models with one content digest: PREDICT loads one session for both."""
    sc = StandardScaler().fit(IRIS_X)
    pa_, pb_ = from_sklearn(sc, name="one")[0], from_sklearn(sc, name="two")[0]
    pb_.graph.node[0].name = "renamed"
    pb_.producer_version = "0.0"
    a = con.import_model("scale_a", pa_, features=IRIS_COLS)
    b = con.import_model("scale_b", pb_, features=IRIS_COLS)
    assert a.graph_digest != b.graph_digest and a.content_digest == b.content_digest
    assert artifacts.artifact_digest(a) == artifacts.artifact_digest(b)
    SESSIONS.clear()
    cur = con.cursor()
    for m in ("scale_a", "scale_b"):
        cur.execute(f"SELECT * FROM PREDICT(MODEL {m}, TABLE iris)")
        cur.fetchall()
    keys = [k for k, _ in SESSIONS.items() if k.artifact == artifacts.artifact_digest(a)]
    assert len(keys) == 1, keys


def test_a_pipeline_fitted_on_float_class_labels_imports_as_the_model_does(con):
    """A classifier fitted on 0.0 / 1.0 / 2.0 predicts those; its converted graph the int64 0 / 1 / 2: the same
    classes by value (import_model held them so; the pipeline's checks compared their text, "0" with "0.0")."""
    est = Pipeline([("std", StandardScaler()), ("clf", LogisticRegression(max_iter=1000))]).fit(
        IRIS_X, IRIS_Y.astype(float))
    con.import_pipeline("float_labels", est, example_input=IRIS_X, features=IRIS_COLS)
    got = _labels(con.cursor(), "SELECT label FROM PREDICT(PIPELINE float_labels, TABLE iris)")
    assert (got == est.predict(IRIS_X)).all()


@pytest.mark.parametrize("kind", ["union", "columns"])
def test_import_union_and_column_transformer(con, kind, tmp_path):
    if kind == "union":
        front = FeatureUnion([("std", StandardScaler()), ("minmax", MinMaxScaler())])
    else:
        front = ColumnTransformer([("a", StandardScaler(), [0, 1]), ("b", "passthrough", [2])], remainder="drop")
    est = Pipeline([("front", front), ("clf", LogisticRegression(max_iter=1000))]).fit(IRIS_X, IRIS_Y)
    pv = con.import_pipeline("p", est, example_input=IRIS_X, features=IRIS_COLS)
    assert pv.steps[-2].name == "front.concat" and pv.steps[-1].name == "clf"
    cur = con.cursor()
    got = _labels(cur, "SELECT label FROM PREDICT(PIPELINE p, TABLE iris)")
    assert (got == est.predict(IRIS_X)).all()
    out = str(tmp_path / "p.onnx")
    cur.execute("EXPORT PIPELINE p TO ?", [out])
    sess = ort.InferenceSession(out, providers=["CPUExecutionProvider"])
    labels = sess.run(["label"], {"input": IRIS_X.astype(np.float32)})[0]
    assert (labels == est.predict(IRIS_X)).all()
    onnx.checker.check_model(onnx.load(out))
    # the file carries what the catalog knows: imported again, it binds the same columns by name
    again = con.import_model("p_again", out)
    assert again.features == tuple(IRIS_COLS)


def test_content_digest_ignores_skl2onnx_uuids_but_not_vocabularies():
    sc = StandardScaler().fit(IRIS_X)
    a, _ = from_sklearn(sc, name="a")
    b, _ = from_sklearn(sc, name="b")
    assert a.graph.name != b.graph.name
    ga, gb = split_model(a)[0], split_model(b)[0]
    assert ga != gb and content_digest(ga) == content_digest(gb)
    other, _ = from_sklearn(StandardScaler().fit(IRIS_X[:100]), name="a")
    assert content_digest(split_model(other)[0]) != content_digest(ga)


def test_import_pipeline_refuses_what_it_cannot_split(con):
    est = Pipeline([("clf", LogisticRegression(max_iter=1000))]).fit(IRIS_X, IRIS_Y)
    with pytest.raises(errors.ProgrammingError) as ei:
        con.import_pipeline("p", est, example_input=[])
    assert ei.value.code == "example_missing"
    ct = ColumnTransformer([("a", StandardScaler(), [0])], transformer_weights={"a": 2.0})
    fu = Pipeline([("u", FeatureUnion([("s", StandardScaler())], transformer_weights={"s": 2.0})),
                   ("clf", LogisticRegression(max_iter=1000))]).fit(IRIS_X, IRIS_Y)
    with pytest.raises(errors.NotSupportedError) as ei:
        con.import_pipeline("p", fu, example_input=IRIS_X)
    assert "transformer_weights" in str(ei.value)
    unfitted = Pipeline([("ct", ColumnTransformer([("a", StandardScaler(), [0])])),
                         ("clf", LogisticRegression())])
    bad = [
        (dict(pipeline=unfitted, example_input=IRIS_X), errors.ProgrammingError, "not_fitted", 'step "ct"'),
        (dict(pipeline=est, example_input=["some text", "more"]), errors.ProgrammingError, "bad_sample", "clf"),
        (dict(pipeline=est, example_input=IRIS_X, input_name=""), errors.ProgrammingError, "invalid_name", "input_name"),
        (dict(pipeline=est, example_input=IRIS_X, features=["a", "a", "b", "c"]), errors.ProgrammingError,
         "duplicate_feature", "'a'"),
    ]
    for kwargs, cls, code, text in bad:
        with pytest.raises(cls) as ei:
            con.import_pipeline("p", kwargs.pop("pipeline"), **kwargs)
        assert ei.value.code == code and text in str(ei.value), str(ei.value)
    cur = con.cursor()
    cur.execute("SELECT count(*) FROM modelsql.pipeline_versions")
    assert cur.fetchall() == [(0,)]
    del ct


def test_import_pipeline_checks_the_split_end_to_end(con):
    """Each step is checked on scikit-learn's float64 output of the step before; the whole split, run in
    ONNX Runtime with float32 between steps, is checked against the estimator too, and the result is in
    DESCRIBE PIPELINE (a forest's votes can move when a split threshold meets float32 rounding)."""
    est = Pipeline([("ct", ColumnTransformer([("a", StandardScaler(), [0, 1]), ("b", MinMaxScaler(), [2, 3])])),
                    ("clf", RandomForestRegressor(10, random_state=0))]).fit(IRIS_X, IRIS_Y)
    con.import_pipeline("p", est, example_input=IRIS_X)
    cur = con.cursor()
    cur.execute("DESCRIBE PIPELINE p")
    props = {r[2]: r[5] for r in cur.fetchall() if r[0] == "property"}
    assert props["conversion_check"].startswith("150 rows, max abs diff "), props
    diff = float(props["conversion_check"].split("max abs diff ")[1].split(",")[0])
    got = _labels(cur, "SELECT prediction FROM PREDICT(PIPELINE p, TABLE iris)").astype(np.float64).ravel()
    assert abs(diff - float(np.max(np.abs(got - est.predict(IRIS_X))))) < 1e-6


@pytest.mark.parametrize("optimize", [True, False])
def test_pipelines_over_one_input_compute_their_shared_steps_once_per_chunk(tmp_path, optimize):
    """Champion and challenger pipelines over one table: with the rule on, the shared scaler and PCA run
    once per chunk (EXPLAIN ANALYZE counts the step runs the memo answered); answers equal the rule off."""
    ridge, forest = _diabetes_pipelines()
    con = modelsql.connect(str(tmp_path / "share.duckdb"))
    cols = [f"f{i}" for i in range(10)]
    rows = np.tile(DIA_X, (10, 1))  # 4,420 rows: several DuckDB chunks
    table = pa.table({"id": np.arange(len(rows)), **{c: rows[:, i] for i, c in enumerate(cols)}})
    con.register("dia", table)
    con.import_pipeline("ridge_p", ridge, example_input=DIA_X[:100], features=cols)
    con.import_pipeline("forest_p", forest, example_input=DIA_X[:100], features=cols)
    con.optimize = optimize
    cur = con.cursor()
    q = ("SELECT r.id, r.prediction AS ridge, f.prediction AS forest FROM PREDICT(PIPELINE ridge_p, TABLE dia) r "
         "JOIN PREDICT(PIPELINE forest_p, TABLE dia) f ON r.id = f.id ORDER BY r.id")
    cur.execute(q)
    got = np.array([(r[1], r[2]) for r in cur.fetchall()], dtype=np.float64).reshape(len(rows), 2)
    np.testing.assert_allclose(got[:, 0], ridge.predict(rows), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(got[:, 1], forest.predict(rows), rtol=1e-4, atol=1e-3)
    cur.execute("EXPLAIN ANALYZE " + q)
    plan = "\n".join(str(r[1]) for r in cur.fetchall() if r[0] == "modelsql_plan")
    if optimize:
        assert "SharedSteps #0: 4 distinct steps for 6 pipeline steps" in plan, plan
        assert "step front.scale" in plan and "step front.pca" in plan
        hits = int(plan.split("measured: ")[1].split(" step runs")[0].replace(",", ""))
        assert hits >= 4, plan  # two shared steps, at least two chunks
    else:
        assert "SharedSteps" not in plan
    con.close()


def test_closing_the_connection_stops_its_servers(tmp_path):
    from modelsql.engine.serve.statements import SERVERS

    con = modelsql.connect(str(tmp_path / "close.duckdb"))
    _scaled_iris(con)
    cur = con.cursor()
    cur.execute("CREATE PIPELINE p AS (scale, head)")
    cur.execute("SERVE PIPELINE p ON PORT 0")
    port = int(cur.fetchall()[0][0].rsplit(":", 1)[1])
    assert port in SERVERS
    con.close()
    assert port not in SERVERS


def test_a_text_input_without_its_column_says_so(con):
    from sklearn.feature_extraction.text import TfidfVectorizer

    from modelsql.datasets import reviews

    texts, labels = reviews(200)
    est = Pipeline([("tfidf", TfidfVectorizer()), ("clf", LogisticRegression(max_iter=200))]).fit(texts, labels)
    con.import_pipeline("words", est, example_input=texts[:20], input_name="text")
    cur = con.cursor()
    with pytest.raises(errors.ProgrammingError) as ei:
        cur.execute("SELECT * FROM PREDICT(PIPELINE words, (SELECT 'great food' AS body))")
    assert ei.value.code == "column_not_found" and 'column named "text"' in str(ei.value) and "body" in str(ei.value)
    cur.execute("SELECT label FROM PREDICT(PIPELINE words, (SELECT 'great food' AS text))")
    assert cur.fetchall()[0][0] == est.predict(["great food"])[0]
