"""EVALUATE MODEL | PIPELINE (issue 25): metrics equal scikit-learn's (float64, 1e-9) on the predictions PREDICT
gives for scikit-learn's shipped data sets, for every task and averaging; each evaluation is recorded in the
catalog and DESCRIBE MODEL shows the latest; bad input is a clear error that records nothing."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pyarrow as pa
import pytest
from sklearn import metrics as M
from sklearn.datasets import load_breast_cancer, load_diabetes, load_iris
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LogisticRegression, Ridge

import modelsql
from modelsql.engine.evaluate.queries import fingerprint_sql, fingerprint_text


def _table(con, name: str, x: np.ndarray, y: np.ndarray, target: str = "y") -> list[str]:
    features = [f"f{i}" for i in range(x.shape[1])]
    con.register(f"{name}_arrow", pa.table({**{f: x[:, i] for i, f in enumerate(features)}, target: y}))
    con.execute(f"CREATE TABLE {name} AS SELECT * FROM {name}_arrow")
    con.unregister(f"{name}_arrow")
    return features


@pytest.fixture(scope="module")
def con(tmp_path_factory):
    c = modelsql.connect(str(tmp_path_factory.mktemp("evaluate") / "e.duckdb"))
    x, y = load_iris(return_X_y=True)
    _table(c, "iris", x, y)
    c.import_model("iris_lr", LogisticRegression(max_iter=500).fit(x, y))
    x, y = load_breast_cancer(return_X_y=True)
    _table(c, "cancer", x[300:], y[300:], target="malignant")
    c.import_model("cancer_rf", RandomForestClassifier(n_estimators=20, max_depth=4, random_state=0)
                   .fit(x[:300], y[:300]))
    x, y = load_diabetes(return_X_y=True)
    _table(c, "diabetes", x[300:], y[300:])
    c.import_model("diabetes_ridge", Ridge().fit(x[:300], y[:300]))
    c.commit()
    yield c
    c.close()


def _evaluate(con, sql: str) -> dict:
    cur = con.execute(sql)
    got = dict(zip([d[0] for d in cur.description], cur.fetchone()))
    con.commit()  # the evaluation is recorded in the connection's transaction
    return got


def _predictions(con, model: str, table: str, target: str, columns: int) -> tuple[np.ndarray, ...]:
    features = ", ".join(f"f{i}" for i in range(columns))
    rows = con.execute(f"SELECT {target}, label, probabilities FROM PREDICT(MODEL {model}, TABLE {table}, "
                       f"features = ({features}))").fetchall()
    return (np.array([r[0] for r in rows]), np.array([r[1] for r in rows]),
            np.array([list(r[2]) for r in rows], dtype=np.float64))


def _close(got: dict, want: dict) -> None:
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key


@pytest.mark.parametrize("average", ["macro", "weighted", "micro"])
def test_multiclass_metrics_equal_scikit_learn(con, average):
    y, p, s = _predictions(con, "iris_lr", "iris", "y", 4)
    got = _evaluate(con, f"EVALUATE MODEL iris_lr ON TABLE iris TARGET y WITH (average = '{average}')")
    kw = dict(average=average, zero_division=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # float32 probabilities do not sum to 1 exactly
        log_loss = M.log_loss(y, s)
    _close(got, {"accuracy": M.accuracy_score(y, p), "precision": M.precision_score(y, p, **kw),
                 "recall": M.recall_score(y, p, **kw), "f1_score": M.f1_score(y, p, **kw), "log_loss": log_loss,
                 "roc_auc": M.roc_auc_score(y, s, multi_class="ovr", average=average)})  # (micro: pooled)
    assert got["confusion_matrix"] == M.confusion_matrix(y, p).tolist()
    assert got["labels"] == ["0", "1", "2"] and got["task"] == "classification" and got["rows"] == 150


def test_a_class_predicted_but_absent_from_the_rows_weighs_nothing_in_weighted_roc_auc(con):
    con.execute("CREATE TABLE iris_no1 AS SELECT * FROM iris WHERE y <> 1 OR f0 > 6.6")  # a few class-1 rows left
    con.execute("UPDATE iris_no1 SET y = 2 WHERE y = 1")  # now no row's target is 1, some are predicted 1
    y, p, s = _predictions(con, "iris_lr", "iris_no1", "y", 4)
    assert 1 in set(p) and 1 not in set(y)
    got = _evaluate(con, "EVALUATE MODEL iris_lr ON TABLE iris_no1 TARGET y WITH (average = 'weighted')")
    assert got["roc_auc"] == pytest.approx(M.roc_auc_score(y, s, multi_class="ovr", average="weighted",
                                                           labels=[0, 1, 2]), rel=1e-9)
    assert _evaluate(con, "EVALUATE MODEL iris_lr ON TABLE iris_no1 TARGET y")["roc_auc"] is None  # (macro: undefined)
    # micro pools every probability, a class of no row's counting as negatives (it was the macro mean, NULL here)
    got = _evaluate(con, "EVALUATE MODEL iris_lr ON TABLE iris_no1 TARGET y WITH (average = 'micro')")
    assert got["roc_auc"] == pytest.approx(M.roc_auc_score(y, s, multi_class="ovr", average="micro",
                                                           labels=[0, 1, 2]), rel=1e-9)
    con.rollback()


@pytest.mark.parametrize("positive", [None, 0, "'0'"])
def test_binary_metrics_equal_scikit_learn(con, positive):
    y, p, s = _predictions(con, "cancer_rf", "cancer", "malignant", 30)
    option = f" WITH (positive = {positive})" if positive is not None else ""
    got = _evaluate(con, f"EVALUATE MODEL cancer_rf ON TABLE cancer TARGET malignant{option}")
    label = 1 if positive is None else 0  # (the text '0', as EVALUATE's row shows the class, names it too)
    kw = dict(pos_label=label, zero_division=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        log_loss = M.log_loss(y, s)
    _close(got, {"accuracy": M.accuracy_score(y, p), "precision": M.precision_score(y, p, **kw),
                 "recall": M.recall_score(y, p, **kw), "f1_score": M.f1_score(y, p, **kw), "log_loss": log_loss,
                 "roc_auc": M.roc_auc_score(y == label, s[:, label])})
    assert got["average"] == "binary" and got["positive"] == str(label)


def test_a_threshold_decides_the_binary_class_by_probability(con):
    y, _, s = _predictions(con, "cancer_rf", "cancer", "malignant", 30)
    p = (s[:, 1] >= 0.8).astype(int)
    got = _evaluate(con, "EVALUATE MODEL cancer_rf ON TABLE cancer TARGET malignant WITH (threshold = 0.8)")
    _close(got, {"accuracy": M.accuracy_score(y, p), "precision": M.precision_score(y, p),
                 "recall": M.recall_score(y, p), "f1_score": M.f1_score(y, p)})
    assert got["confusion_matrix"] == M.confusion_matrix(y, p).tolist()


def test_a_networks_probabilities_are_read_not_its_logits(con):
    """A network's graph gives label, logits and probabilities (as modelsql's zoo and the quickstart's MLP do):
    log loss and ROC AUC read the output named probabilities, not the first vector."""
    import onnx
    from onnx import TensorProto, helper

    x, y = load_iris(return_X_y=True)
    fitted = LogisticRegression(max_iter=500).fit(x, y)
    w, b = fitted.coef_.T.astype(np.float32), fitted.intercept_.astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["logits"]),
         helper.make_node("Softmax", ["logits"], ["probabilities"]),
         helper.make_node("ArgMax", ["logits"], ["label"], axis=1, keepdims=0)], "net",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("label", TensorProto.INT64, ["N"]),
         helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3]),
         helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["N", 3])],
        [onnx.numpy_helper.from_array(w, "w"), onnx.numpy_helper.from_array(b, "b")])
    con.import_model("iris_net", helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
                     features=["f0", "f1", "f2", "f3"])
    rows = con.execute("SELECT y, probabilities FROM PREDICT(MODEL iris_net, TABLE iris)").fetchall()
    y, s = np.array([r[0] for r in rows]), np.array([list(r[1]) for r in rows], dtype=np.float64)
    got = _evaluate(con, "EVALUATE MODEL iris_net ON TABLE iris TARGET y")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # float32 probabilities do not sum to 1 exactly
        _close(got, {"log_loss": M.log_loss(y, s), "roc_auc": M.roc_auc_score(y, s, multi_class="ovr")})


def test_the_positive_class_is_shown_where_it_counts(con):
    """Macro averages do not depend on the positive class, but a threshold does: the row names it then."""
    y, _, s = _predictions(con, "cancer_rf", "cancer", "malignant", 30)
    p = (s[:, 0] >= 0.6).astype(int) ^ 1  # class 0 is the positive one: predicted where its probability reaches 0.6
    got = _evaluate(con, "EVALUATE MODEL cancer_rf ON TABLE cancer TARGET malignant WITH (threshold = 0.6, "
                         "positive = 0, average = 'macro')")
    _close(got, {"precision": M.precision_score(y, p, average="macro"), "f1_score": M.f1_score(y, p, average="macro")})
    assert got["positive"] == "0" and got["average"] == "macro"
    plain = _evaluate(con, "EVALUATE MODEL cancer_rf ON TABLE cancer TARGET malignant WITH (average = 'macro', "
                           "positive = 0)")
    assert plain["positive"] is None


def test_regression_metrics_equal_scikit_learn(con):
    rows = con.execute("SELECT y, prediction FROM PREDICT(MODEL diabetes_ridge, TABLE diabetes, features = "
                       "(f0, f1, f2, f3, f4, f5, f6, f7, f8, f9))").fetchall()
    y, p = np.array([r[0] for r in rows]), np.array([r[1] for r in rows], dtype=np.float64)
    got = _evaluate(con, "EVALUATE MODEL diabetes_ridge ON (SELECT * FROM diabetes) TARGET y")
    _close(got, {"mean_absolute_error": M.mean_absolute_error(y, p), "mean_squared_error": M.mean_squared_error(y, p),
                 "root_mean_squared_error": M.root_mean_squared_error(y, p),
                 "median_absolute_error": M.median_absolute_error(y, p), "r2_score": M.r2_score(y, p),
                 "explained_variance": M.explained_variance_score(y, p)})
    assert got["task"] == "regression" and got["rows"] == len(y)


def test_regression_metrics_of_targets_far_from_zero_stay_exact(con):
    """Targets near 1e14: the means and variances are exact sums (``math.fsum``) to 1e-9; DuckDB's plain ``avg``
    was off by 1e-3 there (NumPy's pairwise sums by 1e-8)."""
    source = "(SELECT * REPLACE (y + 1e14 AS y) FROM diabetes)"
    rows = con.execute(f"SELECT y, prediction FROM PREDICT(MODEL diabetes_ridge, {source}, features = "
                       "(f0, f1, f2, f3, f4, f5, f6, f7, f8, f9))").fetchall()
    y, p = [float(r[0]) for r in rows], [float(r[1]) for r in rows]
    d = [a - b for a, b in zip(y, p)]

    def variance(v: list) -> float:
        mean = math.fsum(v) / len(v)
        return math.fsum((x - mean) ** 2 for x in v) / len(v)

    got = _evaluate(con, f"EVALUATE MODEL diabetes_ridge ON {source} TARGET y")
    _close(got, {"mean_absolute_error": math.fsum(map(abs, d)) / len(d),
                 "mean_squared_error": math.fsum(x * x for x in d) / len(d),
                 "r2_score": 1 - math.fsum(x * x for x in d) / len(d) / variance(y),
                 "explained_variance": 1 - variance(d) / variance(y)})


def test_a_pipeline_is_evaluated_as_predict_runs_it(con):
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x, y = load_iris(return_X_y=True)
    features = [f"f{i}" for i in range(4)]
    con.import_pipeline("iris_scaled", make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)).fit(x, y),
                        example_input=x[:2].astype(np.float32), features=features)
    rows = con.execute("SELECT y, label FROM PREDICT(PIPELINE iris_scaled, TABLE iris)").fetchall()
    truth, predicted = np.array([r[0] for r in rows]), np.array([r[1] for r in rows])
    got = _evaluate(con, "EVALUATE PIPELINE iris_scaled ON TABLE iris TARGET y")
    _close(got, {"accuracy": M.accuracy_score(truth, predicted),
                 "f1_score": M.f1_score(truth, predicted, average="macro")})
    kind = con.execute("SELECT kind FROM modelsql.evaluations WHERE evaluation = ?", [got["evaluation"]]).fetchone()
    assert kind == ("pipeline",)
    shown = {r[2]: r[5] for r in con.execute("DESCRIBE PIPELINE iris_scaled").fetchall() if r[0] == "evaluation"}
    assert shown["accuracy"].startswith(f"{got['accuracy']} on TABLE iris (150 rows, evaluation {got['evaluation']})")
    con.execute("DROP PIPELINE iris_scaled")
    assert con.execute("SELECT count(*) FROM modelsql.evaluations WHERE name = 'iris_scaled'").fetchone() == (0,)


def test_each_evaluation_is_recorded_and_describe_model_shows_the_latest(con):
    before = con.execute("SELECT count(*) FROM modelsql.evaluations").fetchone()[0]
    got = _evaluate(con, "EVALUATE MODEL iris_lr ON (SELECT * FROM iris WHERE y < 2) TARGET y")
    row = con.execute("SELECT kind, name, version, task, target, input, rows, metrics->>'accuracy', fingerprint "
                      "FROM modelsql.evaluations WHERE evaluation = ?", [got["evaluation"]]).fetchone()
    assert con.execute("SELECT count(*) FROM modelsql.evaluations").fetchone()[0] == before + 1
    assert row[:7] == ("model", "iris_lr", 1, "classification", "y", "(SELECT * FROM iris WHERE y < 2)", 100)
    assert float(row[7]) == got["accuracy"] and row[8].startswith("100:")
    described = {r[2]: r[5] for r in con.execute("DESCRIBE MODEL iris_lr").fetchall() if r[0] == "evaluation"}
    assert described["accuracy"].startswith(repr(got["accuracy"])) and "(100 rows" in described["accuracy"]
    again = _evaluate(con, "EVALUATE MODEL iris_lr ON (SELECT * FROM iris WHERE y < 2) TARGET y")
    fingerprints = con.execute("SELECT DISTINCT fingerprint FROM modelsql.evaluations WHERE evaluation IN (?, ?)",
                               [got["evaluation"], again["evaluation"]]).fetchall()
    assert len(fingerprints) == 1  # the same rows, the same fingerprint
    # the fingerprint is the one every statement records of rows: the sum of the hashes of the input's rows
    columns = [f'"{d[0]}"' for d in con.execute("SELECT * FROM iris LIMIT 0").description]
    rows, digest = con.execute(fingerprint_sql(columns, "(SELECT * FROM iris WHERE y < 2)")).fetchone()
    assert row[8] == fingerprint_text(rows, digest)


def test_an_input_column_named_as_the_row_hash_changes_neither_fingerprint_nor_task(con):
    """The input's rows are hashed in a column EVALUATE adds to them: a column of the user's of that name is a
    column like any other (the hash gets a name of its own), and PREDICT's errors do not list the added one."""
    got = [_evaluate(con, f"EVALUATE MODEL iris_lr ON (SELECT *, 1 AS __msql_h, 'x' AS __MSQL_H_1 FROM iris WHERE "
                          f"{where}) TARGET y WITH (features = (f0, f1, f2, f3))") for where in ("y < 2", "y > 0")]
    fingerprints = con.execute("SELECT fingerprint FROM modelsql.evaluations WHERE evaluation IN (?, ?)",
                               [g["evaluation"] for g in got]).fetchall()
    columns = [f'"{n}"' for n in ("f0", "f1", "f2", "f3", "y", "__msql_h", "__MSQL_H_1")]
    expected = [fingerprint_text(*con.execute(fingerprint_sql(columns, f"(SELECT *, 1 AS __msql_h, 'x' AS __MSQL_H_1 "
                                                                       f"FROM iris WHERE {where})")).fetchone())
                for where in ("y < 2", "y > 0")]
    assert sorted(f[0] for f in fingerprints) == sorted(expected) and expected[0] != expected[1]
    regression = _evaluate(con, "EVALUATE MODEL diabetes_ridge ON (SELECT *, 1 AS __msql_h FROM diabetes) TARGET y "
                                "WITH (features = (f0, f1, f2, f3, f4, f5, f6, f7, f8, f9))")
    assert regression["task"] == "regression"
    with pytest.raises(modelsql.ProgrammingError) as err:
        con.execute("EVALUATE MODEL iris_lr ON (SELECT f0, y FROM iris) TARGET y WITH (features = (f0, f9))")
    assert "__msql_h" not in str(err.value)


def test_errors_of_the_evaluations_predict_point_at_its_input_not_into_generated_sql(tmp_path):
    c = modelsql.connect(str(tmp_path / "p.duckdb"))
    x, y = load_iris(return_X_y=True)
    _table(c, "iris", x, y)
    c.execute("CREATE TABLE narrow AS SELECT f0, f1, y FROM iris")
    c.import_model("lr", LogisticRegression(max_iter=500).fit(x, y), features=["f0", "f1", "f2", "f3"])
    c.commit()
    sql = "EVALUATE MODEL lr ON TABLE narrow TARGET y"
    with pytest.raises(modelsql.ProgrammingError) as err:
        c.execute(sql)
    assert err.value.code == "column_not_found" and "Columns: f0, f1, y." in str(err.value)
    assert (err.value.line, err.value.column) == (1, sql.index("narrow") + 1)
    c.rollback()
    sql = "SELECT * FROM EVALUATE(MODEL lr, (SELECT f0, f1, y FROM iris), target = y)"
    with pytest.raises(modelsql.ProgrammingError) as err:
        c.execute(sql)
    assert "Columns: f0, f1, y." in str(err.value) and "PREDICT(MODEL lr VERSION" not in str(err.value)
    assert err.value.column is None  # (no caret drawn under the user's text from offsets in the generated SQL)
    c.rollback()
    # a value of the input DuckDB fails to compute is about the input too, not the model
    c.execute("CREATE VIEW broken AS SELECT f0, f1, f2, f3, (CASE WHEN f0 > 7 THEN 'x' ELSE '1' END)::INT AS z, y "
              "FROM iris")
    sql = "EVALUATE MODEL lr ON TABLE broken TARGET y"
    with pytest.raises(modelsql.DataError) as err:
        c.execute(sql)
    assert err.value.code == "conversion_error" and "'x'" in str(err.value)
    assert (err.value.line, err.value.column) == (1, sql.index("broken") + 1)
    c.close()


def _two_class_net(outputs: list[tuple[str, str]]):
    """A two-class ONNX classifier of inputs (a, b): ``z = x W``, outputs named as ``outputs`` says from its
    tensors ``p`` (softmax of z), ``q`` (softmax of z / 5: another vector, not the probabilities) and ``am`` (the
    arg-max class)."""
    from onnx import TensorProto, helper, numpy_helper

    nodes = [helper.make_node("MatMul", ["input", "W"], ["z"]), helper.make_node("Softmax", ["z"], ["p"], axis=1),
             helper.make_node("Mul", ["z", "k"], ["zk"]), helper.make_node("Softmax", ["zk"], ["q"], axis=1),
             helper.make_node("ArgMax", ["z"], ["am"], axis=1, keepdims=0)]
    nodes += [helper.make_node("Identity", [tensor], [name]) for name, tensor in outputs]
    kinds = {"am": (TensorProto.INT64, ["N"]), "p": (TensorProto.FLOAT, ["N", 2]), "q": (TensorProto.FLOAT, ["N", 2])}
    graph = helper.make_graph(
        nodes, "net", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 2])],
        [helper.make_tensor_value_info(name, *kinds[tensor]) for name, tensor in outputs],
        [numpy_helper.from_array(np.array([[-2, 2], [0.1, -0.1]], np.float32), "W"),
         numpy_helper.from_array(np.array(0.2, np.float32), "k")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_the_prediction_and_probabilities_are_chosen_by_the_models_output_names(tmp_path):
    """Whatever order the model gives its outputs in, whatever case it names them, and whatever an input's clashing
    column names make of them (``predicted_label``), its ``label`` is the prediction and its ``probabilities`` the
    probabilities."""
    c = modelsql.connect(str(tmp_path / "n.duckdb"))
    rng = np.random.default_rng(0)
    a, b = rng.uniform(-0.5, 0.5, 300), rng.uniform(-0.5, 0.5, 300)
    y = (a + 0.1 * rng.normal(size=300) > 0).astype(np.int64)
    c.register("d_arrow", pa.table({"a": a, "b": b, "y": y}))
    c.execute("CREATE TABLE d AS SELECT * FROM d_arrow")
    c.import_model("rev", _two_class_net([("probabilities", "p"), ("label", "am")]), features=["a", "b"])
    c.import_model("caps", _two_class_net([("Probabilities", "p"), ("Label", "am")]), features=["a", "b"])
    c.import_model("two", _two_class_net([("label", "am"), ("calibrated", "q"), ("probabilities", "p")]),
                   features=["a", "b"])
    c.commit()
    p = c.execute("SELECT probabilities FROM PREDICT(MODEL two, TABLE d)").fetchall()
    want = M.log_loss(y, np.array([r[0] for r in p], dtype=np.float64))
    for sql in ("EVALUATE MODEL rev ON (SELECT a, b, y AS label FROM d) TARGET label",
                "EVALUATE MODEL caps ON TABLE d TARGET y",
                "EVALUATE MODEL two ON (SELECT a, b, y AS probabilities FROM d) TARGET probabilities"):
        got = _evaluate(c, sql)
        assert got["log_loss"] == pytest.approx(want, rel=1e-9), sql
    c.close()


@pytest.mark.parametrize("sql", [
    "EVALUATE MODEL net ON (SELECT a, b, label, 1 - label AS \"LABEL\" FROM d) TARGET \"LABEL\"",
    "SELECT * FROM EVALUATE(MODEL net, (SELECT a, b, label, 1 - label AS \"Label\" FROM d), target = label)",
])
def test_a_target_beside_a_column_of_its_name_in_another_case_is_refused(tmp_path, sql):
    """Read as SELECT * FROM (query), DuckDB renamed the second spelling (LABEL_1) and the TARGET "LABEL" bound to
    label: the metrics were those of the other column (accuracy 0.995 where the TARGET's is 0.005)."""
    c = modelsql.connect(str(tmp_path / "c.duckdb"))
    rng = np.random.default_rng(2)
    a, b = rng.uniform(-0.5, 0.5, 200), rng.uniform(-0.5, 0.5, 200)
    c.register("d_arrow", pa.table({"a": a, "b": b, "label": (a > 0).astype(np.int64)}))
    c.execute("CREATE TABLE d AS SELECT * FROM d_arrow")
    c.import_model("net", _two_class_net([("label", "am"), ("probabilities", "p")]), features=["a", "b"])
    c.commit()
    with pytest.raises(modelsql.ProgrammingError, match="the query has two columns named") as e:
        c.execute(sql)
    assert e.value.code == "duplicate_column"
    assert c.execute("SELECT count(*) FROM modelsql.evaluations").fetchone() == (0,)
    c.close()


def test_a_target_named_label_beside_a_column_named_predicted_label_is_evaluated(tmp_path):
    """A TARGET ``label`` in an input that also has a column ``predicted_label`` left both names of PREDICT's
    ``label`` output taken, and EVALUATE, its table functions and CREATE MODEL's evaluation of its validation rows
    failed with ``duplicate_column``; the TARGET is never fed to the model, so it goes by a free name inside the
    evaluation, and the metrics and the rows' fingerprint are those of the same rows under other names."""
    c = modelsql.connect(str(tmp_path / "l.duckdb"))
    c.autocommit = True
    rng = np.random.default_rng(1)
    a, b = rng.uniform(-0.5, 0.5, 300), rng.uniform(-0.5, 0.5, 300)
    y = (a + 0.1 * rng.normal(size=300) > 0).astype(np.int64)
    c.register("d_arrow", pa.table({"a": a, "b": b, "label": y, "predicted_label": y[::-1].copy()}))
    c.execute("CREATE TABLE d AS SELECT * FROM d_arrow")
    c.import_model("net", _two_class_net([("label", "am"), ("probabilities", "p")]), features=["a", "b"])
    got = _evaluate(c, "EVALUATE MODEL net ON TABLE d TARGET label")
    renamed = _evaluate(c, "EVALUATE MODEL net ON (SELECT a, b, label AS y, predicted_label AS z FROM d) TARGET y")
    assert got["accuracy"] == renamed["accuracy"] and got["log_loss"] == renamed["log_loss"]
    prints = c.execute("SELECT fingerprint FROM modelsql.evaluations ORDER BY evaluation").fetchall()
    assert prints[0] == prints[1]
    cells = c.execute("SELECT sum(rows) FROM CONFUSION_MATRIX(MODEL net, TABLE d, target = label)").fetchone()[0]
    assert cells == 300
    assert c.execute("SELECT count(*) FROM ROC_CURVE(MODEL net, TABLE d, target = label)").fetchone()[0] > 2
    row = c.execute("CREATE MODEL lr WITH (model_type = 'logistic_reg', target = label) "
                    "AS SELECT a, predicted_label, label FROM d").fetchone()
    assert row[0] == "lr" and c.execute("SELECT count(*) FROM modelsql.evaluations WHERE name = 'lr'").fetchone()[0] == 1
    c.close()


def test_a_model_feature_named_as_the_row_hash_is_never_fed_the_hash(tmp_path):
    """The hash column gets a name neither the input nor the model has: a feature missing from the input is the
    error PREDICT gives, not a model fed each row's hash."""
    c = modelsql.connect(str(tmp_path / "f.duckdb"))
    x, y = load_iris(return_X_y=True)
    _table(c, "iris", x, y)
    c.import_model("lr", LogisticRegression(max_iter=500).fit(x[:, :2], y), features=["f0", "__msql_h"])
    c.commit()
    with pytest.raises(modelsql.ProgrammingError) as err:
        c.execute("EVALUATE MODEL lr ON (SELECT f0, y FROM iris) TARGET y")
    assert err.value.code == "column_not_found" and '"__msql_h"' in str(err.value)
    assert "__msql_h_" not in str(err.value) and str(err.value).count("Columns: f0, y.") == 1
    c.rollback()
    with pytest.raises(modelsql.ProgrammingError) as err:  # a column of the user's is listed whatever its name
        c.execute("EVALUATE MODEL lr ON (SELECT f1 AS g, y, 1 AS __msql_hello FROM iris) TARGET y")
    assert "Columns: g, y, __msql_hello." in str(err.value)
    c.close()


@pytest.mark.parametrize("kind", ["TINYINT", "HUGEINT", "UHUGEINT", "DOUBLE", "DECIMAL(4,1)"])
def test_integer_targets_of_every_width_give_the_classes_as_integers(con, kind):
    """Labels far apart in a narrow type (a table of offsets must not wrap) and 128-bit ones (read as decimals);
    a target of numbers makes the integer predictions numbers too (a class only predicted, 1, among the rows'
    0.0 and 2.0), as scikit-learn's ``unique_labels`` does."""
    y, p, _ = _predictions(con, "iris_lr", "iris", "y", 4)
    got = _evaluate(con, f"EVALUATE MODEL iris_lr ON (SELECT * REPLACE (CASE WHEN y = 1 THEN 2 ELSE y END::{kind} "
                         "AS y) FROM iris) TARGET y")
    truth = np.where(y == 1, 2, y)
    assert got["labels"] == (["0.0", "1.0", "2.0"] if kind in ("DOUBLE", "DECIMAL(4,1)") else ["0", "1", "2"])
    assert got["confusion_matrix"] == M.confusion_matrix(truth, p, labels=[0, 1, 2]).tolist()


def test_explain_evaluate_shows_the_plan_of_its_predictions_and_records_nothing(con):
    before = con.execute("SELECT count(*) FROM modelsql.evaluations").fetchone()[0]
    rows = dict(con.execute("EXPLAIN EVALUATE MODEL iris_lr ON (SELECT * FROM iris WHERE y < 2) TARGET y "
                            "WITH (average = 'weighted')").fetchall())
    plan = rows["modelsql_plan"]
    assert "EVALUATE(MODEL iris_lr VERSION 1, (SELECT * FROM iris WHERE y < 2))" in plan
    assert "classification against TARGET y, one pass over the input" in plan and 'model "iris_lr" version 1' in plan
    assert con.execute("SELECT count(*) FROM modelsql.evaluations").fetchone()[0] == before
    with pytest.raises(modelsql.NotSupportedError) as err:
        con.execute("EXPLAIN ANALYZE EVALUATE MODEL iris_lr ON TABLE iris TARGET y")
    assert err.value.code == "explain_not_supported" and "EXPLAIN ANALYZE SELECT * FROM EVALUATE" in str(err.value)
    with pytest.raises(modelsql.ProgrammingError) as err:  # binding errors as EVALUATE's own
        con.execute("EXPLAIN EVALUATE MODEL iris_lr ON TABLE iris TARGET nope")
    assert err.value.code == "column_not_found"
    con.rollback()


def test_table_functions_of_wide_integer_classes_and_lossless_arrow_output(con):
    """A UBIGINT class past BIGINT in CONFUSION_MATRIX (its labels are DECIMAL(38,0)), and ROC_CURVE's counts
    under ``arrow_lossless_conversion`` (DuckDB hands 128-bit sums over as raw bytes there): answers, never a raw
    library error."""
    y, p, _ = _predictions(con, "iris_lr", "iris", "y", 4)
    got = con.execute("SELECT expected_label, predicted_label, rows FROM CONFUSION_MATRIX(MODEL iris_lr, (SELECT * "
                      "REPLACE ((CASE WHEN y = 2 THEN 18446744073709551615 ELSE y END)::UBIGINT AS y) FROM iris), "
                      "target = y)").fetchall()
    counts = {(int(a), int(b)): n for a, b, n in got}
    assert counts[(2**64 - 1, 2)] == int(((y == 2) & (p == 2)).sum()) and counts[(2, 2)] == 0
    assert sum(n for (a, _), n in counts.items() if a == 2**64 - 1) == 50
    expected = con.execute("SELECT * FROM ROC_CURVE(MODEL cancer_rf, TABLE cancer, target = malignant)").fetchall()
    con.execute("SET arrow_lossless_conversion = true")
    try:
        assert con.execute("SELECT * FROM ROC_CURVE(MODEL cancer_rf, TABLE cancer, target = malignant)").fetchall() \
            == expected
    finally:
        con.execute("RESET arrow_lossless_conversion")
    con.commit()


@pytest.mark.parametrize("text", [False, True])
def test_a_zipmap_classifiers_probabilities_give_log_loss_and_roc_auc(tmp_path, text):
    """skl2onnx's default conversion gives each row's probabilities as a map from class to probability (ZipMap):
    read in the order of the model's classes, they score as a vector's do."""
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import FloatTensorType

    c = modelsql.connect(str(tmp_path / "z.duckdb"))
    x, y = load_iris(return_X_y=True)
    labels = np.array(["setosa", "versicolor", "virginica"])[y] if text else y
    c.register("iris_arrow", pa.table({**{f"f{i}": x[:, i] for i in range(4)}, "y": labels}))
    c.execute("CREATE TABLE iris AS SELECT * FROM iris_arrow")
    fitted = LogisticRegression(max_iter=500).fit(x, labels)
    proto = convert_sklearn(fitted, initial_types=[("input", FloatTensorType([None, 4]))],
                            target_opset={"": 17, "ai.onnx.ml": 3})
    c.import_model("zm", proto, features=["f0", "f1", "f2", "f3"])
    c.commit()
    rows = c.execute("SELECT output_probability FROM PREDICT(MODEL zm, TABLE iris)").fetchall()
    s = np.array([[r[0][k] for k in fitted.classes_.tolist()] for r in rows], dtype=np.float64)
    got = _evaluate(c, "EVALUATE MODEL zm ON TABLE iris TARGET y")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # float32 probabilities do not sum to 1 exactly
        _close(got, {"log_loss": M.log_loss(labels, s, labels=fitted.classes_),
                     "roc_auc": M.roc_auc_score(labels, s, multi_class="ovr", labels=fitted.classes_)})
    c.close()


def test_the_predict_runs_once(con):
    seen: list[dict] = []
    con.progress = seen.append
    try:
        _evaluate(con, "EVALUATE MODEL iris_lr ON TABLE iris TARGET y")
    finally:
        con.progress = None
    final = [m for m in seen if m["kind"] == "predict" and m["final"]]
    assert final and sum(m["done"] for m in final) == 150  # the model saw each row once (the descriptions: none)


@pytest.mark.parametrize("sql, code, says", [
    ("EVALUATE MODEL nope ON TABLE iris TARGET y", "model_not_found", 'Model "nope"'),
    ("EVALUATE MODEL iris_lr ON TABLE iris TARGET yy", "column_not_found", 'Did you mean "y"'),
    ("EVALUATE MODEL iris_lr ON TABLE iris TARGET y WITH (average = 'binary')", "invalid_option",
     "3 classes (the TARGET's and the predicted ones together: 0, 1, 2)"),
    ("EVALUATE MODEL iris_lr ON TABLE iris TARGET y WITH (average = 'most')", "invalid_option", "average"),
    ("EVALUATE MODEL iris_lr ON TABLE iris TARGET y WITH (threshold = 0.5)", "invalid_option", "two classes"),
    ("EVALUATE MODEL cancer_rf ON TABLE cancer TARGET malignant WITH (positive = 'yes')", "invalid_option",
     "not a class"),
    ("EVALUATE MODEL iris_lr ON TABLE iris TARGET y WITH (averag = 'macro')", "unknown_option", "average"),
    ("EVALUATE MODEL diabetes_ridge ON (SELECT * REPLACE (y::VARCHAR AS y) FROM diabetes) TARGET y",
     "invalid_target", "predicts numbers"),
    ("EVALUATE MODEL iris_lr ON (SELECT * REPLACE (y::VARCHAR AS y) FROM iris) TARGET y", "invalid_target",
     "class labels"),
    ("EVALUATE MODEL iris_lr ON (SELECT * REPLACE (CASE WHEN f0 > 5 THEN y END AS y) FROM iris) TARGET y",
     "null_target", "NULL in"),
    ("EVALUATE MODEL iris_lr ON (SELECT * FROM iris WHERE false) TARGET y", "too_few_rows", "no rows"),
    ("EVALUATE MODEL cancer_rf ON (SELECT * REPLACE (malignant + 0.5 AS malignant) FROM cancer) TARGET malignant",
     "invalid_target", "no class"),
    ("EVALUATE MODEL iris_lr ON TABLE iris TARGET y WITH (positive = 2)", "invalid_option",
     "two classes; the rows have 3 (the TARGET's and the predicted ones together: 0, 1, 2)"),
])
def test_bad_input_is_a_clear_error_and_records_nothing(con, sql, code, says):
    before = con.execute("SELECT count(*) FROM modelsql.evaluations").fetchone()[0]
    with pytest.raises(modelsql.Error) as info:
        con.execute(sql)
    assert info.value.code == code and says in str(info.value), str(info.value)
    con.rollback()
    assert con.execute("SELECT count(*) FROM modelsql.evaluations").fetchone()[0] == before


def test_a_whole_number_double_target_is_read_as_the_integer_classes(con):
    whole = _evaluate(con, "EVALUATE MODEL iris_lr ON (SELECT * REPLACE (y::DOUBLE AS y) FROM iris) TARGET y")
    integer = _evaluate(con, "EVALUATE MODEL iris_lr ON TABLE iris TARGET y")
    assert whole["accuracy"] == integer["accuracy"] and whole["confusion_matrix"] == integer["confusion_matrix"]
    assert whole["log_loss"] == pytest.approx(integer["log_loss"], abs=1e-12)
    for option, positive in (("", "1.0"), (" WITH (positive = 0)", "0.0")):  # an integer names a whole-number float
        got = _evaluate(con, "EVALUATE MODEL cancer_rf ON (SELECT * REPLACE (malignant::DOUBLE AS malignant) FROM "
                             f"cancer) TARGET malignant{option}")
        assert got["average"] == "binary" and got["positive"] == positive, option


def test_dropping_a_model_drops_its_evaluations(con):
    con.import_model("short_lived", LogisticRegression(max_iter=500).fit(*load_iris(return_X_y=True)))
    _evaluate(con, "EVALUATE MODEL short_lived ON TABLE iris TARGET y")
    con.execute("DROP MODEL short_lived")
    assert con.execute("SELECT count(*) FROM modelsql.evaluations WHERE name = 'short_lived'").fetchone() == (0,)


# ---------------------------------------------------------------- what a new user broke (issue 25)


def test_the_record_is_part_of_the_users_transaction(con):
    """EVALUATE commits nothing of the user's: a ROLLBACK discards their change and the evaluation alike."""
    con.commit()
    before = con.execute("SELECT count(*) FROM modelsql.evaluations").fetchone()[0]
    con.execute("DELETE FROM iris WHERE y = 2")
    con.execute("EVALUATE MODEL iris_lr ON TABLE iris TARGET y")
    assert con.execute("SELECT count(*) FROM modelsql.evaluations").fetchone()[0] == before + 1
    con.rollback()
    assert con.execute("SELECT count(*) FROM iris").fetchone() == (150,)
    assert con.execute("SELECT count(*) FROM modelsql.evaluations").fetchone()[0] == before


def test_scores_that_are_not_probabilities_give_no_log_loss_or_roc_auc(con):
    """A support vector machine without probability estimates outputs margins: not probabilities, so no log loss
    or ROC AUC (rather than numbers computed as if they were), and no threshold."""
    from sklearn.svm import SVC

    x, y = load_breast_cancer(return_X_y=True)
    con.import_model("cancer_svc", SVC().fit(x[:300], y[:300]))
    got = _evaluate(con, "EVALUATE MODEL cancer_svc ON TABLE cancer TARGET malignant")
    truth, predicted, _ = _predictions(con, "cancer_svc", "cancer", "malignant", 30)
    assert got["log_loss"] is None and got["roc_auc"] is None
    assert got["accuracy"] == pytest.approx(M.accuracy_score(truth, predicted), rel=1e-12)
    with pytest.raises(modelsql.ProgrammingError) as info:
        con.execute("EVALUATE MODEL cancer_svc ON TABLE cancer TARGET malignant WITH (threshold = 0.5)")
    assert info.value.code == "invalid_option" and "probabilities" in str(info.value)
    con.rollback()


def test_scores_inside_0_1_that_do_not_sum_to_1_are_not_probabilities(con):
    """A LinearSVC's margins shrunk into [0.3, 0.7]: in range, but a row's three do not sum to 1, so they are no
    class probabilities (they gave a log loss and a ROC AUC scikit-learn refuses)."""
    from sklearn.svm import LinearSVC

    x, y = load_iris(return_X_y=True)
    svc = LinearSVC(random_state=0).fit(x, y)
    svc.coef_, svc.intercept_ = svc.coef_ * 0.01, svc.intercept_ * 0.01 + 0.5
    con.import_model("iris_shrunk", svc, example_input=x, replace=True)
    con.commit()
    scores = np.array([list(r[0]) for r in con.execute(
        "SELECT probabilities FROM PREDICT(MODEL iris_shrunk, TABLE iris, features = (f0, f1, f2, f3))").fetchall()])
    assert scores.min() > 0.2 and scores.max() < 0.8
    got = _evaluate(con, "EVALUATE MODEL iris_shrunk ON TABLE iris TARGET y")
    assert got["log_loss"] is None and got["roc_auc"] is None and got["accuracy"] is not None


def test_two_connections_evaluating_at_once_both_record(con, tmp_path):
    import threading

    path = str(tmp_path / "two.duckdb")
    with modelsql.connect(path) as first:
        x, y = load_iris(return_X_y=True)
        _table(first, "iris", x, y)
        first.import_model("lr", LogisticRegression(max_iter=500).fit(x, y))
        first.commit()
    errors: list[BaseException] = []

    def evaluate() -> None:
        with modelsql.connect(path) as mine:
            try:
                for _ in range(4):
                    mine.execute("EVALUATE MODEL lr ON TABLE iris TARGET y").fetchall()
                    mine.commit()
            except BaseException as exc:  # collected: the assertion names it
                errors.append(exc)

    threads = [threading.Thread(target=evaluate) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    with modelsql.connect(path) as check:
        assert check.execute("SELECT count(*), count(DISTINCT evaluation) FROM modelsql.evaluations").fetchone() == (
            12, 12)


@pytest.mark.parametrize("sql, says", [
    ("EVALUATE MODEL iris_lr ON (SELECT * REPLACE (CASE WHEN f0 > 6 THEN 'nan'::DOUBLE ELSE f1 END AS f1) "
     "FROM iris) TARGET y", "probabilities is NaN"),
    ("EVALUATE MODEL diabetes_ridge ON (SELECT * REPLACE (CASE WHEN f0 > 0.05 THEN 'nan'::DOUBLE ELSE y END AS y) "
     "FROM diabetes) TARGET y", "TARGET or the prediction is NaN"),
    ("EVALUATE MODEL diabetes_ridge ON (SELECT * REPLACE (CASE WHEN f0 > 0.05 THEN 'inf'::DOUBLE ELSE y END AS y) "
     "FROM diabetes) TARGET y", "infinite"),
])
def test_a_nan_or_infinite_number_is_an_error_not_a_metric(con, sql, says):
    with pytest.raises(modelsql.DataError) as info:
        con.execute(sql)
    assert info.value.code == "not_a_number" and says in str(info.value), str(info.value)
    con.rollback()


def test_a_class_the_model_does_not_know_gives_no_probability_metrics(con):
    """Rows of a class the model was never trained on: the confusion-based metrics as scikit-learn computes
    them; log loss and ROC AUC have no probability column for it (scikit-learn refuses them)."""
    got = _evaluate(con, "EVALUATE MODEL iris_lr ON (SELECT * REPLACE (CASE WHEN y = 2 THEN 7 ELSE y END AS y) "
                         "FROM iris) TARGET y")
    assert got["log_loss"] is None and got["roc_auc"] is None and got["labels"] == ["0", "1", "2", "7"]


def test_rows_of_one_class_score_the_class_1_as_scikit_learn(con):
    """Rows of class 0 only, all predicted 0: the positive class of the binary average is still 1 (scikit-learn's
    pos_label), which no row has, so precision, recall and F1 are 0, not 1."""
    got = _evaluate(con, "EVALUATE MODEL iris_lr ON (SELECT * FROM iris WHERE y = 0) TARGET y")
    assert got["accuracy"] == 1.0 and got["average"] == "macro"  # the model has three classes
    binary = _evaluate(con, "EVALUATE MODEL cancer_rf ON (SELECT * FROM cancer WHERE malignant = 0 AND f0 > 20) "
                            "TARGET malignant")
    assert binary["positive"] == "1" and binary["precision"] == 0.0 and binary["recall"] == 0.0
    named = _evaluate(con, "EVALUATE MODEL cancer_rf ON (SELECT * FROM cancer WHERE malignant = 0 AND f0 > 20) "
                           "TARGET malignant WITH (positive = 1)")  # a class of the model's, though of no row
    assert (named["precision"], named["recall"], named["f1_score"]) == (0.0, 0.0, 0.0)
    as_float = _evaluate(con, "EVALUATE MODEL cancer_rf ON (SELECT * REPLACE (malignant::DOUBLE AS malignant) FROM "
                              "cancer WHERE malignant = 0 AND f0 > 20) TARGET malignant WITH (positive = 1)")
    assert as_float["positive"] == "1.0" and as_float["recall"] == 0.0  # a DOUBLE target's class of the model's


def test_a_boolean_target_of_a_classifier_fitted_on_booleans(con):
    x, y = load_breast_cancer(return_X_y=True)
    con.import_model("cancer_bool", LogisticRegression(max_iter=5000).fit(x[:300], y[:300].astype(bool)))
    got = _evaluate(con, "EVALUATE MODEL cancer_bool ON (SELECT * REPLACE (malignant::BOOLEAN AS malignant) "
                         "FROM cancer) TARGET malignant")
    truth, predicted, _ = _predictions(con, "cancer_bool", "cancer", "malignant", 30)
    assert predicted.dtype == bool  # BOOLEAN labels, as BigQuery ML predicts for a BOOL label
    truth = truth.astype(bool)
    assert got["accuracy"] == pytest.approx(M.accuracy_score(truth, predicted), rel=1e-12)
    assert got["labels"] == ["False", "True"] and got["positive"] == "True"
    for word, label in (("true", True), ("false", False)):  # the BOOLEAN target's own words name the classes
        named = _evaluate(con, "EVALUATE MODEL cancer_bool ON (SELECT * REPLACE (malignant::BOOLEAN AS malignant) "
                               f"FROM cancer) TARGET malignant WITH (positive = {word})")
        assert named["positive"] == str(label)
        assert named["recall"] == pytest.approx(M.recall_score(truth, predicted, pos_label=label), rel=1e-12)
    # a classifier of 0 / 1 labels reads a BOOLEAN target as 0 / 1
    as_int = _evaluate(con, "EVALUATE MODEL cancer_rf ON (SELECT * REPLACE (malignant::BOOLEAN AS malignant) FROM "
                            "cancer) TARGET malignant WITH (positive = true)")
    assert as_int["labels"] == ["0", "1"] and as_int["positive"] == "1"
    assert as_int["accuracy"] == _evaluate(con, "EVALUATE MODEL cancer_rf ON TABLE cancer TARGET malignant")["accuracy"]


def test_two_integer_classes_without_1_take_the_greater_as_positive(con):
    """scikit-learn's pos_label=1 names no class of {0, 2}: the greater class is the positive one (it raised a
    KeyError from inside EVALUATE)."""
    x, y = load_iris(return_X_y=True)
    keep = y != 1
    con.import_model("iris_02", LogisticRegression(max_iter=500).fit(x[keep][::2], y[keep][::2]), replace=True)
    con.commit()
    rows = con.execute("SELECT y, label, probabilities FROM PREDICT(MODEL iris_02, (SELECT * FROM iris WHERE y <> 1), "
                       "features = (f0, f1, f2, f3))").fetchall()
    truth, predicted = np.array([r[0] for r in rows]), np.array([r[1] for r in rows])
    scores = np.array([r[2][1] for r in rows], dtype=np.float64)
    got = _evaluate(con, "EVALUATE MODEL iris_02 ON (SELECT * FROM iris WHERE y <> 1) TARGET y")
    assert got["positive"] == "2" and got["average"] == "binary"
    _close(got, {"precision": M.precision_score(truth, predicted, pos_label=2),
                 "recall": M.recall_score(truth, predicted, pos_label=2), "roc_auc": M.roc_auc_score(truth == 2, scores)})


def test_a_single_column_of_scores_gives_no_probability_metrics(con):
    """One score per row in a list of unknown width (``FLOAT[]``): two classes cannot share its one position, so
    there is no log loss or ROC AUC (it gave both, computed as if each class's probability were that column)."""
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["z"]),
         helper.make_node("Sigmoid", ["z"], ["probabilities"]),
         helper.make_node("Constant", [], ["half"], value=numpy_helper.from_array(np.array(0.5, np.float32))),
         helper.make_node("GreaterOrEqual", ["probabilities", "half"], ["above"]),
         helper.make_node("Cast", ["above"], ["label2d"], to=TensorProto.INT64),
         helper.make_node("Flatten", ["label2d"], ["flat"], axis=0),
         helper.make_node("Squeeze", ["flat", "zero"], ["label"])],
        "one_column", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 30])],
        [helper.make_tensor_value_info("label", TensorProto.INT64, ["N"]),
         helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["N", "K"])],
        [numpy_helper.from_array(np.eye(30, 1, dtype=np.float32), "w"),  # the mean radius, about 14 to 1 class
         numpy_helper.from_array(np.array([-14.0], np.float32), "b"),
         numpy_helper.from_array(np.array([0], np.int64), "zero")])
    con.import_model("cancer_one", helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
                     features=[f"f{i}" for i in range(30)], replace=True)
    con.commit()
    assert len(con.execute("SELECT DISTINCT label FROM PREDICT(MODEL cancer_one, TABLE cancer)").fetchall()) == 2
    got = _evaluate(con, "EVALUATE MODEL cancer_one ON TABLE cancer TARGET malignant")
    assert got["log_loss"] is None and got["roc_auc"] is None and got["accuracy"] is not None


def test_a_regressor_refuses_a_classifiers_options_and_far_targets_keep_their_digits(con):
    with pytest.raises(modelsql.ProgrammingError) as info:
        con.execute("EVALUATE MODEL diabetes_ridge ON TABLE diabetes TARGET y WITH (average = 'macro')")
    assert info.value.code == "invalid_option" and "classifier" in str(info.value)
    con.rollback()
    rows = con.execute("SELECT y, prediction FROM PREDICT(MODEL diabetes_ridge, (SELECT * REPLACE (y + 1e9 "
                       "AS y) FROM diabetes), features = (f0, f1, f2, f3, f4, f5, f6, f7, f8, f9))").fetchall()
    y, p = np.array([r[0] for r in rows]), np.array([r[1] for r in rows], dtype=np.float64)
    got = _evaluate(con, "EVALUATE MODEL diabetes_ridge ON (SELECT * REPLACE (y + 1e9 AS y) FROM diabetes) TARGET y")
    assert got["r2_score"] == pytest.approx(M.r2_score(y, p), rel=1e-9)
    assert got["explained_variance"] == pytest.approx(M.explained_variance_score(y, p), rel=1e-9, abs=1e-9)
    one = _evaluate(con, "EVALUATE MODEL diabetes_ridge ON (SELECT * FROM diabetes LIMIT 1) TARGET y")
    assert one["r2_score"] is None  # scikit-learn: not defined for one row (NaN)


# ---------------------------------------------------------------- the table functions


def test_the_evaluate_table_function_gives_the_statements_row_and_records_nothing(con):
    before = con.execute("SELECT count(*) FROM modelsql.evaluations").fetchone()[0]
    statement = _evaluate(con, "EVALUATE MODEL iris_lr ON TABLE iris TARGET y WITH (average = 'weighted')")
    cur = con.execute("SELECT * FROM EVALUATE(MODEL iris_lr, TABLE iris, target = y, average = 'weighted')")
    row = dict(zip([d[0] for d in cur.description], cur.fetchone()))
    for key in ("accuracy", "precision", "recall", "f1_score", "log_loss", "roc_auc", "confusion_matrix", "labels"):
        assert row[key] == statement[key], key
    assert row["evaluation"] is None
    assert con.execute("SELECT count(*) FROM modelsql.evaluations").fetchone()[0] == before + 1  # the statement's
    joined = con.execute("SELECT e.accuracy > 0.9, m.name FROM EVALUATE(MODEL iris_lr, TABLE iris, target = y) AS e "
                         "JOIN modelsql.models AS m ON m.name = e.model").fetchall()
    assert joined == [(True, "iris_lr")]
    cur = con.execute("SELECT (SELECT rows FROM EVALUATE(MODEL iris_lr, TABLE iris, target = y)), 1 + 1")
    assert [d[0] for d in cur.description] == [  # named as DuckDB names the text, never by the rows' internal table
        '(SELECT "rows" FROM EVALUATE(MODEL iris_lr, TABLE iris, target = y))', "(1 + 1)"]
    assert cur.fetchall() == [(150, 2)]


def test_a_table_function_reads_the_querys_ctes_as_the_query_does(con):
    """A table function is computed before its query runs, yet ``TABLE h`` under ``WITH h AS (...)`` is the CTE (never
    a table of that name), an inner CTE hides an outer one, a CTE listed after the one reading it is not seen, and a
    parameter in the CTE is bound."""
    con.execute("CREATE TABLE h AS SELECT * FROM iris LIMIT 10")
    want = con.execute("SELECT count(*) FROM iris WHERE y = 1 OR f0 > 6.5").fetchone()[0]
    for sql, rows in (
            ("WITH h AS (SELECT * FROM iris WHERE y = 1 OR f0 > 6.5) SELECT rows FROM EVALUATE(MODEL iris_lr, "
             "TABLE h, target = y)", want),
            ("WITH h AS (SELECT * FROM iris WHERE y = ? OR f0 > ?) SELECT sum(rows) FROM CONFUSION_MATRIX(MODEL "
             "iris_lr, (SELECT * FROM h), target = y)", want),
            ("WITH h AS (SELECT * FROM iris) SELECT * FROM (WITH h AS (SELECT * FROM iris LIMIT 7) SELECT rows FROM "
             "EVALUATE(MODEL iris_lr, TABLE h, target = y))", 7),
            ("WITH e AS (SELECT rows FROM EVALUATE(MODEL iris_lr, TABLE h, target = y)), h AS (SELECT * FROM iris) "
             "SELECT * FROM e", 10),
            ("WITH RECURSIVE h AS (SELECT * FROM iris WHERE y = 1), e AS (SELECT rows FROM EVALUATE(MODEL iris_lr, "
             "TABLE h, target = y)) SELECT * FROM e", 50),
            ("WITH RECURSIVE r(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM r WHERE i < 1), e AS (SELECT rows FROM "
             "EVALUATE(MODEL iris_lr, (SELECT iris.* FROM iris JOIN r ON iris.y = r.i), target = y)) SELECT * FROM e",
             100)):
        assert con.execute(sql, [1, 6.5] if "?" in sql else None).fetchone()[0] == rows, sql
    con.execute("CREATE TABLE out (n BIGINT)")  # a WITH written before INSERT (sqlglot hangs it on the INSERT)
    con.execute("WITH h AS (SELECT * FROM iris WHERE y = 1 OR f0 > 6.5) INSERT INTO out SELECT rows FROM "
                "EVALUATE(MODEL iris_lr, TABLE h, target = y)")
    assert con.execute("SELECT n FROM out").fetchall() == [(want,)]
    con.rollback()


def test_confusion_matrix_and_roc_curve_equal_scikit_learn(con):
    y, p, s = _predictions(con, "cancer_rf", "cancer", "malignant", 30)
    cells = con.execute("SELECT expected_label, predicted_label, rows FROM CONFUSION_MATRIX(MODEL cancer_rf, "
                        "TABLE cancer, target = malignant) ORDER BY ALL").fetchall()
    want = M.confusion_matrix(y, p)
    assert cells == [(a, b, int(want[a][b])) for a in (0, 1) for b in (0, 1)]
    curve = con.execute("SELECT threshold, recall, false_positive_rate, true_positives, false_positives "
                        "FROM ROC_CURVE(MODEL cancer_rf, TABLE cancer, target = malignant)").fetchall()
    fpr, tpr, thresholds = M.roc_curve(y, s[:, 1], drop_intermediate=False)
    assert [c[0] for c in curve] == pytest.approx(list(thresholds), rel=1e-12)  # +inf first, as scikit-learn's
    assert [c[1] for c in curve] == pytest.approx(list(tpr), rel=1e-12)
    assert [c[2] for c in curve] == pytest.approx(list(fpr), rel=1e-12)
    area = np.trapezoid([c[1] for c in curve], [c[2] for c in curve])  # the curve's area is the ROC AUC
    assert area == pytest.approx(M.roc_auc_score(y, s[:, 1]), rel=1e-9)
    # one pass over the input: a sequence read in it moves once per row
    con.execute("CREATE SEQUENCE roc_reads START 1")
    again = con.execute("SELECT threshold, recall, false_positive_rate, true_positives, false_positives FROM "
                        "ROC_CURVE(MODEL cancer_rf, (SELECT * FROM cancer WHERE nextval('roc_reads') > 0), "
                        "target = malignant)").fetchall()
    assert again == curve and con.execute("SELECT currval('roc_reads')").fetchone() == (len(y),)


def test_roc_curve_of_a_class_the_model_does_not_know_names_it(con):
    """A TARGET class the binary model never learned is named as such, not as probabilities the model lacks."""
    with pytest.raises(modelsql.ProgrammingError) as info:
        con.execute("SELECT * FROM ROC_CURVE(MODEL cancer_rf, (SELECT * REPLACE (CASE WHEN f0 > 20 THEN 7 ELSE "
                    "malignant END AS malignant) FROM cancer), target = malignant)")
    assert info.value.code == "invalid_target" and "the class 7, which cancer_rf does not know" in str(info.value)


def test_explain_of_a_table_function_computes_nothing_and_shows_its_plan(con):
    """EXPLAIN binds a table function but never runs it (its input's NULL target would fail the run), shows the
    plan of its predictions, and keeps the columns and their types, so the query around it binds as it would run;
    EXPLAIN ANALYZE computes it."""
    con.execute("CREATE TABLE half_null AS SELECT * REPLACE (CASE WHEN f0 > 6 THEN NULL ELSE y END AS y) FROM iris")
    for function, column in (("EVALUATE", "accuracy + 1"), ("CONFUSION_MATRIX", "expected_label + 1"),
                             ("ROC_CURVE", "threshold * 2")):
        model, target = ("cancer_rf", "malignant") if function == "ROC_CURVE" else ("iris_lr", "y")
        table = "(SELECT * REPLACE (NULL::BIGINT AS malignant) FROM cancer)" if function == "ROC_CURVE" else \
            "TABLE half_null"
        rows = con.execute(f"EXPLAIN SELECT {column} FROM {function}(MODEL {model}, {table}, "
                           f"target = {target})").fetchall()
        plan = dict(rows)["modelsql_plan"]
        assert f"{function}(MODEL {model} VERSION 1" in plan and "EXPLAIN computes nothing" in plan, plan
        assert f'StreamPredict model "{model}" version 1' in plan or f'BatchPredict model "{model}"' in plan, plan
        with pytest.raises(modelsql.DataError) as info:
            con.execute(f"EXPLAIN ANALYZE SELECT {column} FROM {function}(MODEL {model}, {table}, target = {target})")
        assert info.value.code == "null_target"
        con.rollback()
        con.execute("CREATE TABLE half_null AS SELECT * REPLACE (CASE WHEN f0 > 6 THEN NULL ELSE y END AS y) FROM iris")
    cur = con.execute("SELECT * FROM CONFUSION_MATRIX(MODEL iris_lr, TABLE iris, target = y) LIMIT 0")
    kinds = [d[1] for d in cur.description]
    cur.fetchall()
    cur = con.execute("EXPLAIN SELECT * FROM (SELECT * FROM CONFUSION_MATRIX(MODEL iris_lr, TABLE iris, target = y))")
    assert "expected_label" in dict(cur.fetchall())["physical_plan"]
    assert kinds[:2] == ["BIGINT", "BIGINT"]  # a DOUBLE target of integer classes is read as its integers
    con.rollback()


def test_what_a_hostile_try_of_the_table_functions_found(con):
    # an error in the second table function's input is that error, not DuckDB's aborted transaction
    with pytest.raises(modelsql.ProgrammingError) as info:
        con.execute("SELECT * FROM EVALUATE(MODEL iris_lr, TABLE iris, target = y) a, "
                    "EVALUATE(MODEL iris_lr, (SELECT * FROM nosuch), target = y) b")
    assert info.value.code == "catalog_error" and "nosuch" in str(info.value)
    con.rollback()
    # an unsigned integer TARGET gives integer labels, as EXPLAIN says
    cur = con.execute("SELECT * FROM CONFUSION_MATRIX(MODEL iris_lr, (SELECT * REPLACE (y::UINTEGER AS y) FROM iris), "
                      "target = y) ORDER BY ALL LIMIT 1")
    assert cur.fetchall() == [(0, 0, 50)] and cur.description[0][1] == "BIGINT"
    # a star beside one keeps the table's names
    cur = con.execute("SELECT * REPLACE ((SELECT accuracy FROM EVALUATE(MODEL iris_lr, TABLE iris, target = y)) AS f0) "
                      "FROM iris LIMIT 1")
    assert [d[0] for d in cur.description] == ["f0", "f1", "f2", "f3", "y"]
    cur.fetchall()
    # EXPLAIN computes none, not even one in another's input (its NULL target would fail the run)
    inner = "EVALUATE(MODEL iris_lr, (SELECT * REPLACE (NULL::DOUBLE AS y) FROM iris), target = y)"
    rows = con.execute(f"EXPLAIN SELECT * FROM EVALUATE(MODEL iris_lr, (SELECT iris.* REPLACE (f0 + e.rows AS f0) FROM iris, {inner} "
                       "AS e), target = y)").fetchall()
    assert "EXPLAIN computes nothing" in dict(rows)["modelsql_plan"]
    # a PREPARE's ? are its own, among other statements too
    for sql in ("SELECT 1; PREPARE p AS SELECT * FROM EVALUATE(MODEL iris_lr, (SELECT * FROM iris WHERE f0 > ?), "
                "target = y)", "PREPARE q AS SELECT ? + 1; EXECUTE q(1)"):
        try:
            assert con.execute(sql).fetchall() == [(2,)]
        except modelsql.NotSupportedError as err:
            assert err.code == "predict_in_command" and "PREPARE" in sql.split(";")[-1]
        con.rollback()


@pytest.mark.parametrize("sql, code, says", [
    ("SELECT * FROM EVALUATE(MODEL iris_lr, TABLE iris)", "missing_option", "records no target of its own"),
    ("EVALUATE MODEL iris_lr ON TABLE iris", "missing_option", "(TARGET column)"),
    ("SELECT * FROM ROC_CURVE(MODEL iris_lr, TABLE iris, target = y)", "invalid_target", "two classes"),
    ("SELECT * FROM CONFUSION_MATRIX(MODEL diabetes_ridge, TABLE diabetes, target = y)", "invalid_target",
     "predicts numbers"),
    ("SELECT * FROM EVALUATE(MODEL nope, TABLE iris, target = y)", "model_not_found", "nope"),
])
def test_table_function_errors(con, sql, code, says):
    with pytest.raises(modelsql.Error) as info:
        con.execute(sql)
    assert info.value.code == code and says in str(info.value), str(info.value)
    con.rollback()


def test_a_users_function_named_evaluate_is_left_alone(con):
    con.execute("CREATE MACRO evaluate(a, b) AS a + b")
    assert con.execute("SELECT evaluate(1, 2)").fetchone() == (3,)
    con.execute("DROP MACRO evaluate")
    con.commit()


def test_what_a_new_user_broke_in_the_table_functions(con):
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    with pytest.raises(modelsql.NotSupportedError) as info:  # its rows would be gone when the view is read
        con.execute("CREATE VIEW v AS SELECT * FROM EVALUATE(MODEL iris_lr, TABLE iris, target = y)")
    assert info.value.code == "predict_in_view" and "CREATE TABLE" in str(info.value)
    con.rollback()
    with pytest.raises(modelsql.ProgrammingError) as info:
        con.execute("SELECT * FROM ROC_CURVE(MODEL diabetes_ridge, TABLE diabetes, target = y)")
    assert info.value.code == "invalid_target" and "predicts numbers" in str(info.value)
    con.rollback()
    with pytest.raises(modelsql.ProgrammingError) as info:
        con.execute("SELECT * FROM EVALUATE(MODEL iris_lr, TABLE iris, target = f0, target = y)")
    assert info.value.code == "duplicate_option"
    con.rollback()
    # class labels that are text, three of them
    x, y = load_iris(return_X_y=True)
    species = np.array(["setosa", "versicolor", "virginica"])[y]
    con.import_model("iris_named", LogisticRegression(max_iter=500).fit(x, species))
    con.execute("CREATE OR REPLACE TABLE iris_named AS SELECT * REPLACE (['setosa', 'versicolor', 'virginica'][y + 1] "
                "AS y) FROM iris")
    got = _evaluate(con, "EVALUATE MODEL iris_named ON TABLE iris_named TARGET y")
    assert got["labels"] == ["setosa", "versicolor", "virginica"] and got["roc_auc"] is not None
    # a pipeline fed by position: the TARGET is not a feature
    con.import_pipeline("iris_positional", make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)).fit(x, y),
                        example_input=x[:2].astype(np.float32))
    assert _evaluate(con, "EVALUATE PIPELINE iris_positional ON TABLE iris TARGET y")["accuracy"] > 0.9


def test_messages_name_the_table_function_and_a_null_typed_target_is_null_target(con):
    with pytest.raises(modelsql.DataError) as info:
        con.execute("EVALUATE MODEL iris_lr ON (SELECT * REPLACE (NULL AS y) FROM iris) TARGET y")
    assert info.value.code == "null_target" and "every row" in str(info.value)
    con.rollback()
    with pytest.raises(modelsql.ProgrammingError) as info:
        con.execute("SELECT * FROM CONFUSION_MATRIX(MODEL cancer_rf, TABLE cancer, target = malignant, positive = 7)")
    assert "CONFUSION_MATRIX(MODEL cancer_rf)" in str(info.value) and "EVALUATE" not in str(info.value)
    con.rollback()


def test_on_null_skip_leaves_rows_with_a_null_feature_out(con):
    sql = ("EVALUATE MODEL iris_lr ON (SELECT * REPLACE (CASE WHEN f0 > 7 THEN NULL ELSE f1 END AS f1) FROM iris) "
           "TARGET y{}")
    with pytest.raises(modelsql.DataError) as info:
        con.execute(sql.format(""))
    assert info.value.code == "null_input" and str(info.value).startswith("EVALUATE MODEL iris_lr: ")
    assert "on_null = 'skip'" in str(info.value) and "'null'" not in str(info.value)  # EVALUATE has no 'null'
    con.rollback()
    kept = con.execute("SELECT count(*) FROM iris WHERE NOT f0 > 7").fetchone()[0]
    assert _evaluate(con, sql.format(" WITH (on_null = 'skip')"))["rows"] == kept


def test_a_clusterer_is_refused_imported_or_as_a_pipelines_last_step(con):
    from sklearn.cluster import KMeans
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import StandardScaler

    x, _ = load_iris(return_X_y=True)
    con.import_model("iris_km", KMeans(3, n_init=2, random_state=0).fit(x))
    con.import_pipeline("iris_kmp", Pipeline([("sc", StandardScaler()), ("km", KMeans(3, n_init=2, random_state=0))])
                        .fit(x), example_input=x[:20], features=["f0", "f1", "f2", "f3"])
    for sql in ("EVALUATE MODEL iris_km ON TABLE iris TARGET y", "EVALUATE PIPELINE iris_kmp ON TABLE iris TARGET y"):
        with pytest.raises(modelsql.ProgrammingError) as info:
            con.execute(sql)
        assert info.value.code == "invalid_target" and "is a clusterer" in str(info.value)
        con.rollback()
    labels = con.execute("SELECT DISTINCT label FROM PREDICT(PIPELINE iris_kmp, TABLE iris) ORDER BY 1").fetchall()
    assert labels == [(0,), (1,), (2,)]


def test_probabilities_of_no_fixed_width_are_ranked_by_one_window(con):
    """A graph whose probabilities' width is symbolic (a ``FLOAT[]`` column) takes the other ranking path (the
    lists unnested and ranked by one window per position); rounded scores give many ties."""
    from onnx import TensorProto, helper, numpy_helper

    x, y = load_iris(return_X_y=True)
    fitted = LogisticRegression(max_iter=500).fit(x, y)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["z"]),
         helper.make_node("Round", ["z"], ["r"]),
         helper.make_node("Softmax", ["r"], ["probabilities"], axis=1),
         helper.make_node("ArgMax", ["probabilities"], ["label"], axis=1, keepdims=0)],
        "symbolic_width", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("label", TensorProto.INT64, ["N"]),
         helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["N", "K"])],
        [numpy_helper.from_array(fitted.coef_.T.astype(np.float32), "w"),
         numpy_helper.from_array(fitted.intercept_.astype(np.float32), "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    con.import_model("iris_symbolic", model, features=["f0", "f1", "f2", "f3"], replace=True)
    con.commit()
    y, p, s = _predictions(con, "iris_symbolic", "iris", "y", 4)
    assert len(np.unique(s[:, 0])) < len(s) // 2  # ties: the ranking's average ranks matter
    kind = con.execute("SELECT * FROM PREDICT(MODEL iris_symbolic, TABLE iris) LIMIT 0").description[-1][1]
    assert kind == "FLOAT[]"
    got = _evaluate(con, "EVALUATE MODEL iris_symbolic ON TABLE iris TARGET y WITH (average = 'weighted')")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        log_loss = M.log_loss(y, s)
    _close(got, {"accuracy": M.accuracy_score(y, p), "log_loss": log_loss,
                 "roc_auc": M.roc_auc_score(y, s, multi_class="ovr", average="weighted")})


def test_an_imported_classifier_keeps_its_classes_so_rows_of_one_prediction_still_score(con):
    """A binary LogisticRegression's graph (sigmoid, threshold, gather) and naive Bayes' (ArrayFeatureExtractor) do
    not name their classes where the graph analysis looks: the import keeps ``classes_``, so rows the model
    predicts as one class still give log loss and ROC AUC, and the default positive class is the model's."""
    from sklearn.naive_bayes import GaussianNB

    x, y = load_breast_cancer(return_X_y=True)
    names = np.array(["benign", "malignant"])[y]
    for model in (LogisticRegression(max_iter=5000), GaussianNB()):
        model.fit(x[:300], names[:300])
        con.import_model("cancer_text", model, replace=True)
        con.commit()
        rows = con.execute("SELECT malignant, label, probabilities FROM PREDICT(MODEL cancer_text, (SELECT * REPLACE "
                           "(CASE malignant WHEN 1 THEN 'malignant' ELSE 'benign' END AS malignant) FROM cancer), "
                           "features = (" + ", ".join(f"f{i}" for i in range(30)) + "))").fetchall()
        truth, predicted = np.array([r[0] for r in rows]), np.array([r[1] for r in rows])
        scores = np.array([list(r[2]) for r in rows], dtype=np.float64)
        sure = predicted == "benign"  # rows the model predicts as one class only
        assert 0 < sure.sum() < len(sure) and len(set(truth[sure])) == 2
        ids = ", ".join(str(i + 300) for i in np.flatnonzero(sure))
        got = _evaluate(con, "EVALUATE MODEL cancer_text ON (SELECT * REPLACE (CASE malignant WHEN 1 THEN 'malignant' "
                             f"ELSE 'benign' END AS malignant) FROM (SELECT *, row_number() OVER () + 299 AS rid FROM "
                             f"cancer) WHERE rid IN ({ids})) TARGET malignant WITH (features = ("
                             + ", ".join(f"f{i}" for i in range(30)) + "))")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _close(got, {"log_loss": M.log_loss(truth[sure], scores[sure], labels=["benign", "malignant"]),
                         "roc_auc": M.roc_auc_score(truth[sure] == "malignant", scores[sure][:, 1])})
        assert got["positive"] == "malignant", type(model).__name__


def test_a_target_that_the_model_is_fed_is_refused(con):
    x, y = load_iris(return_X_y=True)
    con.import_model("iris_named", LogisticRegression(max_iter=500).fit(x, y), features=["f0", "f1", "f2", "f3"],
                     replace=True)
    con.commit()
    before = con.execute("SELECT count(*) FROM modelsql.evaluations").fetchone()
    with pytest.raises(modelsql.ProgrammingError) as info:
        con.execute("EVALUATE MODEL iris_named ON TABLE iris TARGET f0")
    assert info.value.code == "invalid_target" and "also a feature" in str(info.value)
    con.rollback()
    assert con.execute("SELECT count(*) FROM modelsql.evaluations").fetchone() == before


@pytest.mark.parametrize("sql, option", [
    ("EVALUATE MODEL iris_lr ON TABLE iris TARGET y WITH (on_null = 'error', threshold = 7)", "threshold = 7"),
    ("EVALUATE MODEL iris_lr ON TABLE iris TARGET y WITH (positive = 9)", "positive = 9"),  # found reading the rows
    ("SELECT * FROM EVALUATE(MODEL iris_lr, TABLE iris, TARGET => y, average => 'nope')", "average => 'nope'"),
    ("SELECT * FROM PREDICT(MODEL iris_lr, TABLE iris, batch_size => 'x')", "batch_size => 'x'"),
    ("EXPLAIN SELECT * FROM PREDICT(MODEL iris_lr, TABLE iris, batch_size => 'x')", "batch_size => 'x'"),
    ("SELECT * FROM PREDICT(MODEL iris_lr, TABLE iris, features => (f0, f1, f2, zz))", "features =>"),
    ("SELECT * FROM PREDICT(MODEL iris_lr, TABLE iris, batch_size => 1, batch_size => 2)", "batch_size => 2"),  # the repeat
    ("SELECT * FROM PREDICT(MODEL iris_lr, TABLE iris, device => 'cuda:97')", "device =>"),
    ("EVALUATE MODEL iris_lr ON TABLE iris TARGET y WITH (average = 'macro', \"average\" = 'micro')", '"average" ='),
    ("EVALUATE MODEL iris_lr ON TABLE iris TARGET y WITH (features = (f0, f1))", "features = (f0"),  # PREDICT's error
    ("SELECT * FROM EVALUATE(MODEL iris_lr, TABLE iris, target => y, features => (f0, f1))", "features => (f0"),
    ("EXPLAIN ANALYZE SELECT * FROM PREDICT(MODEL nope, TABLE iris)", "nope"),  # (EXPLAIN's own offset)
    ("EXPLAIN SELECT * FROM EVALUATE(MODEL iris_lr, TABLE iris, TARGET => y, threshold => 5)", "threshold => 5"),
    ("CREATE MODEL bad WITH (model_type = 'logistic_reg', target = y, C = 'abc') AS SELECT * FROM iris", "C = 'abc'"),
    ("CREATE MODEL bad WITH (model_type = 'logistic_reg', target = y, validation = 2.5) AS SELECT * FROM iris",
     "validation = 2.5"),
    ("CREATE MODEL bad WITH (model_type = 'logistic_reg', target = y, nosuch = 1) AS SELECT * FROM iris", "nosuch = 1"),
    ("CREATE MODEL bad WITH (model_type = 'logistic_regg', target = y) AS SELECT * FROM iris", "model_type = 'logistic_regg'"),
    ("CREATE MODEL bad WITH (model_type = 'logistic_reg', target = zz) AS SELECT * FROM iris", "target = zz"),
    ("TUNE MODEL bad ON TABLE iris TARGET y SEARCH (max_dpth = CHOICE(1, 2)) USING GRID WITH (model_type = "
     "'decision_tree_classifier')", "max_dpth = CHOICE(1, 2)"),
])
def test_an_error_about_an_option_points_at_the_option(con, sql, option):
    with pytest.raises((modelsql.ProgrammingError, modelsql.DataError, modelsql.NotSupportedError)) as info:
        con.execute(sql)
    line, carets = str(info.value).split("\nLINE 1: ", 1)[1].splitlines()[:2]
    column = carets.index("^") - len("LINE 1: ")
    assert line[column:].startswith(option) and info.value.column == sql.index(option) + 1
    if option.startswith('"'):  # a quoted name underlined with its quotes
        assert carets.count("^") == option.index('"', 1) + 1
    con.rollback()


def test_text_labels_are_compared_exactly_whatever_the_collation(tmp_path):
    """Classes 'A' and 'a' stay two classes, as scikit-learn compares labels, under a NOCASE collation of the column
    or the connection (DuckDB's GROUP BY and JOIN would merge them in some aggregates and not in others)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 2))
    y = np.array(["A", "a", "b"])[np.argmax(x @ np.array([[2.0, -1.0, 0.0], [0.0, 1.5, -2.0]]), axis=1)]
    with modelsql.connect(str(tmp_path / "c.duckdb")) as c:
        c.autocommit = True
        _table(c, "t", x, y)
        c.import_model("m", LogisticRegression(max_iter=500).fit(x, y))
        _, predicted, proba = _predictions(c, "m", "t", "y", 2)
        want = (M.accuracy_score(y, predicted), M.log_loss(y, proba, labels=["A", "a", "b"]),
                M.confusion_matrix(y, predicted).tolist())
        for sql in ("EVALUATE MODEL m ON TABLE t TARGET y",
                    "EVALUATE MODEL m ON (SELECT f0, f1, y COLLATE NOCASE AS y FROM t) TARGET y"):
            got = _evaluate(c, sql)
            assert (got["accuracy"], got["confusion_matrix"]) == (want[0], want[2]) and got["labels"] == ["A", "a", "b"]
            assert got["log_loss"] == pytest.approx(want[1], rel=1e-6)  # (float32 probabilities)
        c.execute("SET default_collation = 'nocase'")
        assert _evaluate(c, "EVALUATE MODEL m ON TABLE t TARGET y")["confusion_matrix"] == want[2]


def test_a_multiclass_model_on_rows_of_two_classes_scores_one_vs_rest(con):
    """Rows holding two of a 3-class model's classes: ROC AUC is one-vs-rest over them, each class by its own
    probability (weighted: scikit-learn's with every label), not the binary AUC of a class the rows may lack."""
    con.execute("CREATE OR REPLACE TABLE iris02 AS SELECT * FROM iris WHERE y IN (0, 2)")
    rows = "iris02"
    got = _evaluate(con, f"EVALUATE MODEL iris_lr ON TABLE {rows} TARGET y WITH (average = 'weighted')")
    truth, _, proba = _predictions(con, "iris_lr", rows, "y", 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (class 1 has no row: scikit-learn warns, its weight is 0)
        want = M.roc_auc_score(truth, proba, multi_class="ovr", average="weighted", labels=[0, 1, 2])
    assert got["roc_auc"] == pytest.approx(want, rel=1e-9)
    with pytest.raises(modelsql.ProgrammingError) as info:  # the default positive class (1) has no row
        con.execute("EVALUATE MODEL iris_lr ON (SELECT * FROM iris WHERE y = 0 OR (y = 2 AND f3 >= 2.0)) TARGET y "
                    "WITH (average = 'binary')")  # (rows the model predicts 0 or 2)
    assert info.value.code == "invalid_option" and "which no row has" in str(info.value)
    con.rollback()


def test_a_threshold_applies_to_rows_of_one_of_the_models_two_classes(con):
    con.execute("CREATE OR REPLACE TABLE benign AS SELECT * FROM cancer WHERE malignant = 0")
    rows = "benign"
    got = _evaluate(con, f"EVALUATE MODEL cancer_rf ON TABLE {rows} TARGET malignant WITH (threshold = 0.2)")
    truth, _, proba = _predictions(con, "cancer_rf", rows, "malignant", 30)
    predicted = (proba[:, 1] >= 0.2).astype(int)
    assert got["confusion_matrix"] == M.confusion_matrix(truth, predicted).tolist()
    assert got["accuracy"] == M.accuracy_score(truth, predicted) and len(got["labels"]) == 2


def test_rows_with_a_nan_probability_are_counted_as_rows(con):
    with pytest.raises(modelsql.DataError) as info:
        con.execute("EVALUATE MODEL iris_lr ON (SELECT * REPLACE (CASE WHEN f0 > 7.2 THEN 'nan'::DOUBLE ELSE f1 END "
                    "AS f1) FROM iris) TARGET y")
    rows = con.execute("SELECT count(*) FROM iris WHERE f0 > 7.2").fetchone()[0]
    assert info.value.code == "not_a_number" and f"in {rows} of 150 rows" in str(info.value)
    con.rollback()


def test_an_error_in_a_later_statement_points_at_its_own_line_not_an_earlier_one_written_alike(con):
    sql = ("EVALUATE MODEL cancer_rf ON TABLE cancer TARGET malignant WITH (average = 'micro',\n  threshold = 0.3);\n"
           "EVALUATE MODEL iris_lr ON TABLE iris TARGET y WITH (average = 'micro',\n  threshold = 0.3)")
    with pytest.raises(modelsql.ProgrammingError) as info:
        con.execute(sql)
    assert info.value.code == "invalid_option" and (info.value.line, info.value.column) == (4, 3)
    con.rollback()


def test_whole_decimal_classes_past_2_53_stay_apart(tmp_path):
    """A DECIMAL(38,0) TARGET of labels 2**62 + k (which CREATE MODEL trains on exactly) was read as DOUBLE against the
    integer predictions: the three classes became one and a TARGET wrong on every row scored accuracy 1.0."""
    c = modelsql.connect(str(tmp_path / "d.duckdb"))
    c.autocommit = True
    c.execute("CREATE TABLE base AS SELECT (i % 3)::DOUBLE + (i % 7) / 70.0 AS x1, i % 3 AS k FROM range(300) r(i)")
    c.execute("CREATE TABLE d AS SELECT x1, (4611686018427387904 + k)::DECIMAL(38,0) AS y FROM base")
    c.execute("CREATE MODEL m WITH (model_type = 'logistic_reg', target = y, validation = 'none') AS SELECT * FROM d")
    c.execute("CREATE TABLE wrong AS SELECT x1, (4611686018427387904 + (k + 1) % 3)::DECIMAL(38,0) AS y FROM base")
    truth = c.execute("SELECT avg((label = y)::INT) FROM PREDICT(MODEL m, TABLE wrong)").fetchone()[0]
    got = c.execute("SELECT accuracy, labels FROM EVALUATE(MODEL m, TABLE wrong, target = y)").fetchone()
    assert got[0] == truth and len(got[1]) == 3
    c.close()


def test_micro_roc_auc_of_a_model_of_unnamed_classes_over_rows_of_two_of_its_three(tmp_path):
    """A float64 skl2onnx graph names no classes; over rows of two of its three classes micro ROC AUC was the binary
    AUC of one class, where scikit-learn, given three probabilities, ranks all of them (roc_auc_score(...,
    average='micro', labels=[0, 1, 2]))."""
    from skl2onnx import to_onnx

    c = modelsql.connect(str(tmp_path / "u.duckdb"))
    c.autocommit = True
    x, y = load_iris(return_X_y=True)
    _table(c, "iris", x, y)
    lr = LogisticRegression(max_iter=1000).fit(x, y)
    features = [f"f{i}" for i in range(4)]
    c.import_model("named", lr, features=features)
    c.import_model("unnamed", to_onnx(lr, x[:1], options={"zipmap": False}), features=features)
    for model in ("named", "unnamed"):
        rows = c.execute(f"SELECT y, probabilities FROM PREDICT(MODEL {model}, (SELECT * FROM iris WHERE y <> 0))"
                         ).fetchall()
        want = M.roc_auc_score([r[0] for r in rows], np.array([r[1] for r in rows], dtype=np.float64),
                               multi_class="ovr", average="micro", labels=[0, 1, 2])
        got = c.execute(f"SELECT roc_auc FROM EVALUATE(MODEL {model}, (SELECT * FROM iris WHERE y <> 0), "
                        "target = y, average = 'micro')").fetchone()[0]
        assert got == pytest.approx(want, rel=1e-9), model
    c.close()


def test_labels_past_2_53_against_a_fractional_decimal_or_a_float_target(tmp_path):
    """A classifier of labels 2**62 + {0, 1} against a DECIMAL(38,2) TARGET is compared exactly (as the DECIMAL's
    scale); against a FLOAT or DOUBLE one, which cannot tell them apart, it is invalid_target. Both were read as
    DOUBLE: one class, and a TARGET wrong on every row scored accuracy 1.0."""
    c = modelsql.connect(str(tmp_path / "b.duckdb"))
    c.autocommit = True
    x = np.random.default_rng(0).normal(size=(40, 2)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    c.import_model("big", LogisticRegression().fit(x, y + 2 ** 62), features=["f0", "f1"])
    _table(c, "base", x, y)
    sql = "EVALUATE MODEL big ON (SELECT f0, f1, (1 - y + 4611686018427387904)::{} AS y FROM base) TARGET y"
    got = _evaluate(c, sql.format("DECIMAL(38,2)"))
    assert got["accuracy"] == pytest.approx(M.accuracy_score(1 - y, (c.execute(
        "SELECT label FROM PREDICT(MODEL big, TABLE base)").fetch_arrow().column(0).to_numpy() - 2 ** 62)))
    assert len(got["labels"]) == 2
    for kind in ("FLOAT", "DOUBLE"):
        with pytest.raises(modelsql.ProgrammingError, match="cannot tell big's class labels apart") as info:
            c.execute(sql.format(kind))
        assert info.value.code == "invalid_target"
    c.close()
