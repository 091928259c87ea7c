"""Classical pipelines as tensors: the translation of a pipeline's ONNX steps is exact against scikit-learn and
ONNX Runtime, soft trees give thresholds gradients, and FINETUNE PIPELINE trains, chooses on validation,
registers a new version PREDICT runs, and refuses what it cannot translate."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")

from sklearn.datasets import load_breast_cancer, load_diabetes, load_digits, load_wine  # noqa: E402
from sklearn.decomposition import PCA  # noqa: E402
from sklearn.ensemble import (GradientBoostingClassifier, RandomForestClassifier,  # noqa: E402
                              RandomForestRegressor)
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import MinMaxScaler, StandardScaler  # noqa: E402
from sklearn.tree import DecisionTreeClassifier  # noqa: E402

import modelsql  # noqa: E402
from modelsql.finetune.translate import PipelineNet  # noqa: E402
from modelsql.engine.artifacts import sessions as artifacts  # noqa: E402


def _data(loader):
    x, y = loader(return_X_y=True)
    return x.astype(np.float32), y


PIPELINES = {
    "pca_lr_digits": (load_digits, lambda: make_pipeline(StandardScaler(), PCA(10), LogisticRegression(max_iter=500))),
    "rf_digits": (load_digits, lambda: make_pipeline(MinMaxScaler(), RandomForestClassifier(8, max_depth=4,
                                                                                            random_state=0))),
    "pca_lr_binary": (load_breast_cancer, lambda: make_pipeline(StandardScaler(), PCA(5), LogisticRegression())),
    "gb_binary": (load_breast_cancer, lambda: make_pipeline(GradientBoostingClassifier(n_estimators=6, max_depth=2,
                                                                                       random_state=0))),
    "rf_binary": (load_breast_cancer, lambda: make_pipeline(StandardScaler(), RandomForestClassifier(
        5, max_depth=3, random_state=0))),
    "tree_wine": (load_wine, lambda: make_pipeline(DecisionTreeClassifier(max_depth=4, random_state=0))),
    "forest_regressor": (load_diabetes, lambda: make_pipeline(RandomForestRegressor(4, max_depth=3, random_state=0))),
}


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_the_translation_is_exact(name) -> None:
    loader, build = PIPELINES[name]
    x, y = _data(loader)
    pipe = build().fit(x, y)
    con = modelsql.connect(":memory:")
    pv = con.import_pipeline(name, pipe, example_input=x[:20])
    store = con._session.store
    net = PipelineNet(pv, [artifacts.load_model_proto(store, s.model) for s in pv.steps])
    with torch.no_grad():
        outs = [o.numpy() for o in net(torch.from_numpy(x))]
    if hasattr(pipe, "predict_proba"):
        np.testing.assert_array_equal(outs[0], pipe.predict(x))
        np.testing.assert_allclose(outs[1], pipe.predict_proba(x), atol=2e-6)
    else:
        np.testing.assert_allclose(outs[0].reshape(-1), pipe.predict(x), rtol=1e-5, atol=1e-3)
    runner = artifacts.model_session(store, pv, intra=1)
    ort_outs = runner.run({pv.inputs[0].name: x}, [o.name for o in pv.outputs])
    for got, want in zip(outs, ort_outs):
        np.testing.assert_allclose(got.reshape(np.shape(want)), want, rtol=1e-5, atol=1e-5)


def test_soft_trees_give_thresholds_gradients_and_approach_hard_trees() -> None:
    x, y = _data(load_digits)
    pipe = make_pipeline(RandomForestClassifier(4, max_depth=3, random_state=0)).fit(x, y)
    con = modelsql.connect(":memory:")
    pv = con.import_pipeline("rf", pipe, example_input=x[:20])
    net = PipelineNet(pv, [artifacts.load_model_proto(con._session.store, s.model) for s in pv.steps])
    xt = torch.from_numpy(x)
    net.calibrate(xt)
    trees = net.tree_modules()[0]
    hard = net(xt)[1].detach()
    net(xt)[1].sum().backward()
    assert trees.thresholds.grad is None or float(trees.thresholds.grad.abs().sum()) == 0.0
    net.set_temperature(0.3)
    net.zero_grad()
    torch.log(net(xt)[1].clamp_min(1e-12)).sum().backward()
    assert float(trees.thresholds.grad.abs().sum()) > 0 and float(trees.leaf_values.grad.abs().sum()) > 0
    net.set_temperature(1e-4)
    with torch.no_grad():
        cold = net(xt)[1]
    assert float((cold - hard).abs().mean()) < 1e-3


def _tables(cur, con, x, y, prefix: str = "") -> None:
    xtr, xrest, ytr, yrest = train_test_split(x, y, test_size=0.4, random_state=0)
    xva, xte, yva, yte = train_test_split(xrest, yrest, test_size=0.5, random_state=0)
    for name, (xx, yy) in {"train": (xtr, ytr), "val": (xva, yva), "test": (xte, yte)}.items():
        cols = {f"p{i}": xx[:, i] for i in range(x.shape[1])}
        cols["label"] = yy.astype(np.int64)
        con.register(f"{prefix}{name}_arrow", pa.table(cols))
        cur.execute(f"CREATE TABLE {prefix}{name} AS SELECT * FROM {prefix}{name}_arrow")
    return xtr, ytr, xte, yte


def test_finetune_registers_a_better_version_that_predict_runs(tmp_path) -> None:
    x, y = _data(load_digits)
    con = modelsql.connect(str(tmp_path / "ft.duckdb"))
    cur = con.cursor()
    xtr, ytr, xte, yte = _tables(cur, con, x, y)
    pipe = make_pipeline(StandardScaler(), PCA(10), LogisticRegression(max_iter=1000)).fit(xtr, ytr)
    con.import_pipeline("pl", pipe, example_input=xtr[:20], features=[f"p{i}" for i in range(64)])
    cur.execute("FINETUNE PIPELINE pl ON TABLE train VALIDATE ON TABLE val TARGET label "
                "WITH (epochs = 200, seed = 0, test = test)")
    row = dict(zip([d[0] for d in cur.description], cur.fetchone()))
    assert row["chosen"] == "finetuned" and row["version"] == 2 and row["best_epoch"] > 0
    assert row["val_after"] > row["val_before"]
    assert row["test_before"] == pytest.approx(pipe.score(xte, yte))
    cur.execute("SELECT * FROM PREDICT(PIPELINE pl, TABLE test)")
    names = [d[0] for d in cur.description]
    rows = cur.fetchall()
    accuracy = np.mean([r[names.index("label")] == r[names.index("predicted_label")] for r in rows])
    assert accuracy == pytest.approx(row["test_after"])
    cur.execute("SELECT max(version) FROM modelsql.pipeline_versions WHERE name = 'pl'")
    assert cur.fetchone()[0] == 2
    cur.execute("SELECT * FROM PREDICT(PIPELINE pl VERSION 1, TABLE test)")  # the original stays addressable
    rows = cur.fetchall()
    assert np.mean([r[names.index("label")] == r[names.index("predicted_label")] for r in rows]) == pytest.approx(
        row["test_before"])
    # both versions EVALUATEd on the validation rows and recorded: one input, one fingerprint, so BEST BY compares them
    cur.execute("SELECT version, options->>'finetune', (metrics->>'accuracy')::DOUBLE, input, fingerprint "
                "FROM modelsql.evaluations WHERE kind = 'pipeline' AND name = 'pl' ORDER BY version")
    recorded = cur.fetchall()
    assert [r[:2] for r in recorded] == [(1, "before"), (2, "after")]
    assert recorded[0][2] == pytest.approx(row["val_before"]) and recorded[1][2] == pytest.approx(row["val_after"])
    assert recorded[0][3:] == recorded[1][3:] and "VALIDATE ON val" in recorded[0][3]
    cur.execute("SELECT origin, parent_kind, parent_name, parent_version FROM modelsql.model_origins "
                "WHERE name = 'pl_finetuned'")
    assert cur.fetchall() == [("finetune", "pipeline", "pl", 1)]


def test_finetune_keeps_the_original_when_nothing_beats_it() -> None:
    x, y = _data(load_digits)
    con = modelsql.connect(":memory:")
    cur = con.cursor()
    xtr, ytr, _, _ = _tables(cur, con, x, y)
    pipe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000)).fit(xtr, ytr)
    con.import_pipeline("keep", pipe, example_input=xtr[:20], features=[f"p{i}" for i in range(64)])
    cur.execute("FINETUNE PIPELINE keep ON TABLE train VALIDATE ON TABLE val TARGET label WITH (epochs = 3, lr = 0)")
    row = dict(zip([d[0] for d in cur.description], cur.fetchone()))
    assert row["chosen"] == "original" and row["version"] is None and row["val_after"] == row["val_before"]
    cur.execute("SELECT count(*) FROM modelsql.pipeline_versions WHERE name = 'keep'")
    assert cur.fetchone()[0] == 1


def test_finetune_refuses_what_it_cannot_do() -> None:
    x, y = _data(load_digits)
    con = modelsql.connect(":memory:")
    cur = con.cursor()
    xtr, ytr, _, _ = _tables(cur, con, x, y)
    pipe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000)).fit(xtr, ytr)
    con.import_pipeline("p", pipe, example_input=xtr[:20], features=[f"p{i}" for i in range(64)])
    with pytest.raises(modelsql.ProgrammingError) as err:
        cur.execute("FINETUNE PIPELINE p ON TABLE train TARGET label WITH (epochz = 3)")
    assert err.value.code == "unknown_option" and "epochs" in str(err.value)
    with pytest.raises(modelsql.ProgrammingError) as err:
        cur.execute("FINETUNE PIPELINE nope ON TABLE train TARGET label")
    assert err.value.code == "pipeline_not_found"
    cur.execute("CREATE TABLE shifted AS SELECT * EXCLUDE (label), label + 100 AS label FROM train")
    with pytest.raises(modelsql.DataError) as err:
        cur.execute("FINETUNE PIPELINE p ON TABLE shifted TARGET label WITH (epochs = 2)")
    assert err.value.code == "unknown_label"
    cur.execute("SELECT count(*) FROM modelsql.pipeline_versions")
    assert cur.fetchone()[0] == 1


def test_a_text_pipeline_is_refused_as_not_translatable() -> None:
    from sklearn.feature_extraction.text import TfidfVectorizer

    from modelsql.datasets import reviews

    texts, labels = reviews(200)
    pipe = make_pipeline(TfidfVectorizer(), LogisticRegression(max_iter=200)).fit(texts, labels)
    con = modelsql.connect(":memory:")
    cur = con.cursor()
    con.import_pipeline("txt", pipe, example_input=texts[:20], input_name="text")
    cur.execute("CREATE TABLE reviews AS SELECT * FROM (VALUES ('good film', 1), ('bad film', 0)) v(text, label)")
    with pytest.raises(modelsql.NotSupportedError) as err:
        cur.execute("FINETUNE PIPELINE txt ON TABLE reviews TARGET label")
    assert err.value.code == "not_supported"


# ---------------------------------------------------------------- found by trying to break it


@pytest.fixture()
def digits_db():
    x, y = _data(load_digits)
    con = modelsql.connect(":memory:")
    cur = con.cursor()
    xtr, ytr, xte, yte = _tables(cur, con, x, y)
    pipe = make_pipeline(StandardScaler(), PCA(10), LogisticRegression(max_iter=1000)).fit(xtr, ytr)
    con.import_pipeline("p", pipe, example_input=xtr[:20])  # no features: the tables' numeric columns
    return con, cur, pipe, xte, yte


def test_the_task_is_the_pipelines_not_the_target_type(digits_db) -> None:
    con, cur, pipe, xte, yte = digits_db
    cur.execute("CREATE TABLE train_d AS SELECT * EXCLUDE (label), label::DOUBLE AS label FROM train")
    cur.execute("CREATE TABLE val_d AS SELECT * EXCLUDE (label), label::DOUBLE AS label FROM val")
    cur.execute("FINETUNE PIPELINE p ON TABLE train_d VALIDATE ON TABLE val_d TARGET label WITH (epochs = 30)")
    row = dict(zip([d[0] for d in cur.description], cur.fetchone()))
    assert row["metric"] == "val_accuracy" and row["val_after"] >= row["val_before"]
    cur.execute("CREATE TABLE train_f AS SELECT * EXCLUDE (label), label + 0.5 AS label FROM train")
    with pytest.raises(modelsql.DataError) as err:
        cur.execute("FINETUNE PIPELINE p VERSION 1 ON TABLE train_f TARGET label WITH (epochs = 2)")
    assert err.value.code == "unknown_label" and ".5," in str(err.value)


def test_the_test_table_is_read_by_column_name_and_its_labels_checked(digits_db) -> None:
    con, cur, pipe, xte, yte = digits_db
    reversed_columns = ", ".join([f"p{i}" for i in reversed(range(64))])
    cur.execute(f"CREATE TABLE test_rev AS SELECT label, {reversed_columns} FROM test")
    cur.execute("FINETUNE PIPELINE p ON TABLE train VALIDATE ON TABLE val TARGET label WITH (epochs = 1, lr = 0, "
                "test = test_rev)")
    row = dict(zip([d[0] for d in cur.description], cur.fetchone()))
    assert row["test_before"] == pytest.approx(pipe.score(xte, yte))
    cur.execute("CREATE TABLE test_bad AS SELECT * EXCLUDE (label), label + 10 AS label FROM test")
    with pytest.raises(modelsql.DataError) as err:
        cur.execute("FINETUNE PIPELINE p ON TABLE train TARGET label WITH (epochs = 1, test = test_bad)")
    assert err.value.code == "unknown_label"


def test_a_users_model_of_the_result_name_is_not_overwritten(digits_db) -> None:
    con, cur, pipe, xte, yte = digits_db
    x, y = _data(load_digits)
    con.import_model("p_finetuned", LogisticRegression(max_iter=300).fit(x[:, :3], y), example_input=x[:5, :3])
    with pytest.raises(modelsql.IntegrityError) as err:
        cur.execute("FINETUNE PIPELINE p ON TABLE train VALIDATE ON TABLE val TARGET label WITH (epochs = 20)")
    assert err.value.code == "duplicate_model" and "p_finetuned" in str(err.value)
    cur.execute("SELECT count(*) FROM modelsql.models WHERE name = 'p_finetuned'")
    assert cur.fetchone()[0] == 1
    cur.execute("SELECT max(version) FROM modelsql.pipeline_versions WHERE name = 'p'")
    assert cur.fetchone()[0] == 1


def test_a_fine_tuned_version_can_be_fine_tuned_again(digits_db) -> None:
    con, cur, pipe, xte, yte = digits_db
    cur.execute("FINETUNE PIPELINE p ON TABLE train VALIDATE ON TABLE val TARGET label WITH (epochs = 30)")
    assert cur.fetchone()[1] == 2
    cur.execute("FINETUNE PIPELINE p ON TABLE train VALIDATE ON TABLE val TARGET label WITH (epochs = 30)")
    row = dict(zip([d[0] for d in cur.description], cur.fetchone()))
    assert row["val_after"] >= row["val_before"]


@pytest.mark.parametrize("option, code", [("epochs = NULL", "invalid_option"), ("epochs = 2.5", "invalid_option"),
                                          ("lr = -1", "invalid_option"), ("test = 3", "invalid_option")])
def test_bad_options_are_refused(digits_db, option, code) -> None:
    con, cur, *_ = digits_db
    with pytest.raises(modelsql.ProgrammingError) as err:
        cur.execute(f"FINETUNE PIPELINE p ON TABLE train TARGET label WITH ({option})")
    assert err.value.code == code and "FINETUNE" in str(err.value)


def test_a_parameter_in_an_option_is_refused_and_the_transaction_stays_usable(digits_db) -> None:
    con, cur, *_ = digits_db
    with pytest.raises(modelsql.NotSupportedError) as err:
        cur.execute("FINETUNE PIPELINE p ON TABLE train TARGET label WITH (epochs = ?)", [2])
    assert err.value.code == "parameter_not_supported"
    cur.execute("SELECT count(*) FROM train")
    assert cur.fetchone()[0] > 0


def test_text_class_labels_are_refused() -> None:
    x, y = _data(load_wine)
    names = np.array(["zero", "one", "two"], dtype=object)[y]
    pipe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)).fit(x, names)
    con = modelsql.connect(":memory:")
    cur = con.cursor()
    con.import_pipeline("w", pipe, example_input=x[:20])
    cols = {f"p{i}": x[:, i] for i in range(x.shape[1])}
    cols["label"] = names.astype(str)
    con.register("wine_arrow", pa.table(cols))
    cur.execute("CREATE TABLE wine AS SELECT * FROM wine_arrow")
    with pytest.raises(modelsql.NotSupportedError) as err:
        cur.execute("FINETUNE PIPELINE w ON TABLE wine TARGET label WITH (epochs = 2)")
    assert err.value.code == "not_supported" and "text" in str(err.value)
