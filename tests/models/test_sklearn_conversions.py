"""scikit-learn conversions: those whose outputs skl2onnx describes wrongly, conversions checked against the
estimator they came from (issue 6, items 6, first bullet, and 8), and the documented way to import a pipeline
that selects columns by name (issue 6, item 12): the README's way is a pandas DataFrame (pandas comes with the
``sklearn`` extra): a ``ColumnTransformer`` pipeline fitted on one, imported with ``import_model``, predicts
by column name what the estimator predicts (scikit-learn's shipped wine data).

Real estimators on scikit-learn's shipped data sets (iris, linnerud: nothing is
downloaded), real skl2onnx conversions, real ONNX Runtime and DuckDB files.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from sklearn.compose import ColumnTransformer
from sklearn.datasets import load_iris, load_linnerud
from sklearn.ensemble import (
    BaggingRegressor,
    ExtraTreesClassifier,
    ExtraTreesRegressor,
    RandomForestClassifier,
    RandomForestRegressor,
)
from sklearn.linear_model import LinearRegression, LogisticRegression, Ridge
from sklearn.multioutput import MultiOutputClassifier, MultiOutputRegressor
from sklearn.neighbors import KNeighborsClassifier, KNeighborsRegressor
from sklearn.neural_network import MLPClassifier, MLPRegressor
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor, ExtraTreeRegressor

import modelsql
from modelsql.errors import DataError, NotSupportedError, ProgrammingError
from modelsql.converters import ConversionCheck, check_conversion, from_sklearn
from modelsql.onnxformat import signature

from conftest import run_onnx

# ----------------------------------------------------------------------------- data


@pytest.fixture(scope="module")
def linnerud():
    """``(X float64 [20, 3], Y float64 [20, 3], feature names, target names)``."""
    data = load_linnerud()
    return data.data, data.target, list(data.feature_names), list(data.target_names)


@pytest.fixture(scope="module")
def iris():
    X, y = load_iris(return_X_y=True)
    return X, y


@pytest.fixture(scope="module")
def iris_colors(iris):
    """Iris as a pyarrow Table with a text column ``color`` (red / white / blue, seeded)."""
    X, y = iris
    color = np.array(["red", "white", "blue"])[np.random.default_rng(0).integers(0, 3, len(y))]
    names = ["sepal_length", "sepal_width", "petal_length", "petal_width"]
    return pa.table({**{n: X[:, i] for i, n in enumerate(names)}, "color": color}), names, y


def by_name_pipeline(table, names, y, handle_unknown):
    """Scaled numbers and a one-hot ``color``, selected by name, then a LogisticRegression."""
    ct = ColumnTransformer(
        [("num", StandardScaler(), names), ("color", OneHotEncoder(handle_unknown=handle_unknown), ["color"])]
    )
    return Pipeline([("ct", ct), ("lr", LogisticRegression(max_iter=1000))]).fit(table, y)


MULTI_OUTPUT_REGRESSORS = [
    RandomForestRegressor(n_estimators=10, random_state=0),
    DecisionTreeRegressor(random_state=0),
    ExtraTreesRegressor(n_estimators=10, random_state=0),
    ExtraTreeRegressor(random_state=0),
    MLPRegressor(hidden_layer_sizes=(8,), max_iter=50, random_state=0),
    BaggingRegressor(DecisionTreeRegressor(random_state=0), n_estimators=3, random_state=0),
    KNeighborsRegressor(n_neighbors=3),
    MultiOutputRegressor(Ridge()),
    LinearRegression(),
]


def _fit_quietly(est, X, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # MLP convergence
        return est.fit(X, y)


# ----------------------------------------------------------------------------- item 6: multi-output regressors


@pytest.mark.parametrize("estimator", MULTI_OUTPUT_REGRESSORS, ids=lambda e: type(e).__name__)
def test_multi_output_regressor_declares_and_returns_n_by_3(linnerud, estimator):
    """skl2onnx declares [N, 1] for trees (returning [N, 3]) and returns [N * 3, 1] for MLP
    and bagging; the converted graph declares and returns [N, 3], like LinearRegression's."""
    X, Y, _, _ = linnerud
    est = _fit_quietly(estimator, X, Y)
    model, _ = from_sklearn(est)
    _, outputs, _ = signature(model)
    assert [(o.name, o.shape) for o in outputs] == [("prediction", ("N", 3))]
    for rows in (X[:1], X[:7], X):
        (pred,) = run_onnx(model, {"input": rows.astype(np.float32)})
        assert pred.shape == (len(rows), 3)
        np.testing.assert_allclose(pred, est.predict(rows), rtol=1e-5, atol=1e-3)


def test_single_output_regressor_unchanged(linnerud):
    X, Y, _, _ = linnerud
    est = RandomForestRegressor(n_estimators=5, random_state=0).fit(X, Y[:, 0])
    model, _ = from_sklearn(est)
    _, outputs, _ = signature(model)
    assert [(o.name, o.shape) for o in outputs] == [("prediction", ("N", 1))]
    assert all(n.op_type != "Reshape" for n in model.graph.node)


@pytest.mark.parametrize(
    "estimator",
    [RandomForestRegressor(n_estimators=10, random_state=0), DecisionTreeRegressor(random_state=0)],
    ids=lambda e: type(e).__name__,
)
def test_multi_output_forest_predicts_in_sql(db, linnerud, estimator):
    """Fitted on a table of linnerud's columns, imported, and predicted over a DuckDB table
    with those columns: PREDICT returns the estimator's 3 targets per row, and DESCRIBE
    MODEL shows the output as [N, 3]."""
    X, Y, features, _ = linnerud
    table = pa.table({f: X[:, i] for i, f in enumerate(features)})
    est = estimator.fit(table, Y)
    con = modelsql.connect(db)
    try:
        con.register("src", table.append_column("id", pa.array(np.arange(len(X)))))
        con.execute("CREATE TABLE linnerud AS SELECT * FROM src")
        con.import_model("lin", est)
        cur = con.execute("SELECT * FROM PREDICT(MODEL lin, TABLE linnerud) ORDER BY id")
        names = [d[0] for d in cur.description]
        got = np.array([row[names.index("prediction")] for row in cur.fetchall()], dtype=np.float64)
        assert got.shape == (20, 3)
        np.testing.assert_allclose(got, est.predict(table), rtol=1e-6, atol=1e-3)

        cur = con.execute("DESCRIBE MODEL lin")
        cols = [d[0] for d in cur.description]
        outputs = [dict(zip(cols, r)) for r in cur.fetchall() if r[cols.index("role")] == "output"]
        assert [(o["name"], o["shape"]) for o in outputs] == [("prediction", "[N, 3]")]
    finally:
        con.close()


# ----------------------------------------------------------------------------- item 6: multi-output classifiers


def _iris_targets(X, y):
    """Three targets per row (species, long sepal, wide sepal) and two 0/1 labels (multi-label)."""
    Y = np.stack([y, (X[:, 0] > 5.8).astype(int), (X[:, 1] > 3).astype(int)], axis=1)
    return Y, Y[:, 1:]


@pytest.mark.parametrize(
    "estimator, target, output",
    [
        (RandomForestClassifier(n_estimators=5, random_state=0), "multi", "probabilities"),
        (ExtraTreesClassifier(n_estimators=5, random_state=0), "multi", "probabilities"),
        (KNeighborsClassifier(n_neighbors=3), "multi", "probabilities"),
        (MultiOutputClassifier(LogisticRegression(max_iter=500)), "multi", "probabilities"),
        (DecisionTreeClassifier(random_state=0), "labels", "probabilities"),
        (KNeighborsClassifier(n_neighbors=3), "labels", "probabilities"),
        (MLPClassifier(hidden_layer_sizes=(8,), max_iter=100, random_state=0), "labels", "label"),
    ],
    ids=lambda v: type(v).__name__ if hasattr(v, "fit") else str(v),
)
def test_multi_output_classifier_refused_at_conversion(iris, estimator, target, output):
    """skl2onnx's conversions of multi-output classifiers do not give one row per input row
    (probabilities [k, N, c], a sequence of tensors, a label declared [N] for [N, 2]):
    refused at conversion, naming the output, instead of failing in PREDICT."""
    X, y = iris
    multi, labels = _iris_targets(X, y)
    est = _fit_quietly(estimator, X, multi if target == "multi" else labels)
    with pytest.raises(NotSupportedError) as info:
        from_sklearn(est)
    assert info.value.code == "conversion_failed"
    assert f"its output {output!r}" in str(info.value) and "targets per row" in str(info.value)


def test_multi_output_classifier_import_leaves_no_model(con, iris):
    X, y = iris
    multi, _ = _iris_targets(X, y)
    est = RandomForestClassifier(n_estimators=5, random_state=0).fit(X, multi)
    with pytest.raises(NotSupportedError) as info:
        con.import_model("rf", est)
    assert info.value.code == "conversion_failed"
    assert con.execute("SELECT count(*) FROM modelsql.model_versions").fetchone() == (0,)


def test_single_output_classifier_not_refused(iris):
    X, y = iris
    model, _ = from_sklearn(RandomForestClassifier(n_estimators=5, random_state=0).fit(X, y))
    _, outputs, _ = signature(model)
    assert [(o.name, o.shape) for o in outputs] == [("label", ("N",)), ("probabilities", ("N", 3))]


# ----------------------------------------------------------------------------- item 8: check_conversion


def test_forest_float32_probabilities_differ_in_the_last_digits(iris):
    """A tree ensemble sums its trees in float32: probabilities differ from scikit-learn's
    float64 ones in the last digits, with no label changing."""
    X, y = iris
    rf = RandomForestClassifier(n_estimators=20, random_state=0).fit(X, y)
    model, _ = from_sklearn(rf)
    check = check_conversion(rf, model, X)
    assert isinstance(check, ConversionCheck)
    assert check.rows == 150 and check.label_mismatches == 0 and check.first_mismatch is None
    assert check.compared == "predict vs label, predict_proba vs probabilities"
    assert 0 < check.max_abs_diff <= 4 * np.finfo(np.float32).eps  # a few units in the last place
    _, proba = run_onnx(model, {"input": X.astype(np.float32)})
    assert 0 < np.abs(proba - rf.predict_proba(X)).max() <= 4 * np.finfo(np.float32).eps


def test_multi_output_regressor_check(linnerud):
    X, Y, _, _ = linnerud
    rf = RandomForestRegressor(n_estimators=10, random_state=0).fit(X, Y)
    check = check_conversion(rf, from_sklearn(rf)[0], X)
    assert (check.rows, check.label_mismatches, check.compared) == (20, 0, "predict vs prediction")
    assert 0 <= check.max_abs_diff < 1e-3


def test_unfixed_multi_output_conversion_fails_the_check(linnerud):
    """skl2onnx's own MLPRegressor graph returns [60, 1] for 20 rows: the check refuses it
    as a failed conversion (not a difference one could accept)."""
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import FloatTensorType

    X, Y, _, _ = linnerud
    mlp = _fit_quietly(MLPRegressor(hidden_layer_sizes=(8,), max_iter=50, random_state=0), X, Y)
    raw = convert_sklearn(mlp, initial_types=[("input", FloatTensorType([None, 3]))], target_opset=17)
    with pytest.raises(NotSupportedError) as info:
        check_conversion(mlp, raw, X)
    assert info.value.code == "conversion_failed" and "[60, 1] for 20 rows" in str(info.value)


def test_default_sample(iris, iris_colors):
    """No sample: 256 standard-normal rows drawn with a fixed seed (the same figure every
    time) for a numeric input; a pipeline selecting columns by name is not checked."""
    X, y = iris
    rf = RandomForestClassifier(n_estimators=20, random_state=0).fit(X, y)
    model, _ = from_sklearn(rf)
    first, again = check_conversion(rf, model), check_conversion(rf, model)
    assert first == again and first.rows == 256 and first.label_mismatches == 0
    table, names, y = iris_colors
    pipe = by_name_pipeline(table, names, y, "ignore")
    assert check_conversion(pipe, from_sklearn(pipe)[0]) is None


def test_default_sample_skipped_when_the_estimator_fails_on_it(iris):
    """A OneHotEncoder with handle_unknown='error' refuses the random rows: no check."""
    X, y = iris
    pipe = make_pipeline(OneHotEncoder(), LogisticRegression(max_iter=500)).fit(np.round(X), y)
    model, _ = from_sklearn(pipe)
    assert check_conversion(pipe, model) is None
    assert check_conversion(pipe, model, np.round(X)).label_mismatches == 0


@pytest.mark.parametrize("handle_unknown", ["infrequent_if_exist", "warn"])
def test_one_hot_unseen_category_is_a_label_mismatch(iris_colors, handle_unknown):
    """scikit-learn encodes an unseen category as zeros under 'infrequent_if_exist' (no
    infrequent categories) and 'warn'; skl2onnx's graph fails on it ("Unknown Category and
    zeros = 0"). Each such row counts as a mismatch, and import is refused unless accepted."""
    table, names, y = iris_colors
    pipe = by_name_pipeline(table, names, y, handle_unknown)
    model, _ = from_sklearn(pipe)
    assert check_conversion(pipe, model, table).label_mismatches == 0
    colors = table.column("color").to_numpy(zero_copy_only=False)
    unseen = table.set_column(4, "color", pa.array(np.where(colors == "blue", "green", colors)))
    n_green = int((colors == "blue").sum())
    first = int(np.flatnonzero(colors == "blue")[0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = pipe.predict(unseen)

    with pytest.raises(DataError) as info:
        check_conversion(pipe, model, unseen)
    msg = str(info.value)
    assert info.value.code == "conversion_mismatch"
    assert f"on {n_green} of 150 sample rows" in msg
    assert f"row {first} is {expected[first]} in scikit-learn" in msg and "Unknown Category" in msg
    assert "pass accept_mismatch=True to import_model" in msg

    check = check_conversion(pipe, model, unseen, accept_mismatch=True)
    assert (check.rows, check.label_mismatches) == (150, n_green)
    assert check.first_mismatch[0] == first and check.first_mismatch[1] == repr(expected[first].item())
    assert 0 <= check.max_abs_diff < 1e-5  # over the rows ONNX Runtime answered


def test_one_hot_unseen_category_agrees_under_ignore(iris_colors):
    table, names, y = iris_colors
    pipe = by_name_pipeline(table, names, y, "ignore")
    colors = table.column("color").to_numpy(zero_copy_only=False)
    unseen = table.set_column(4, "color", pa.array(np.where(colors == "blue", "green", colors)))
    check = check_conversion(pipe, from_sklearn(pipe)[0], unseen)
    assert check.rows == 150 and check.label_mismatches == 0 and check.max_abs_diff < 1e-5


def test_one_hot_infrequent_categories_refused_at_conversion(iris):
    """With infrequent categories (min_frequency), skl2onnx refuses the conversion."""
    X, y = iris
    pipe = make_pipeline(
        OneHotEncoder(handle_unknown="infrequent_if_exist", min_frequency=10), LogisticRegression(max_iter=500)
    ).fit(np.round(X), y)
    with pytest.raises(NotSupportedError) as info:
        from_sklearn(pipe)
    assert info.value.code == "conversion_failed" and "Infrequent categories" in str(info.value)


def test_label_disagreement_names_the_first_row(iris):
    """The comparison itself: an estimator checked against another estimator's graph."""
    X, y = iris
    lr = LogisticRegression(max_iter=500).fit(X, y)
    stump = DecisionTreeClassifier(max_depth=1, random_state=0).fit(X, y)
    differ = np.flatnonzero(lr.predict(X) != stump.predict(X))
    check = check_conversion(lr, from_sklearn(stump)[0], X, accept_mismatch=True)
    assert check.label_mismatches == len(differ) > 0
    r = int(differ[0])
    assert check.first_mismatch == (r, repr(int(lr.predict(X)[r])), repr(int(stump.predict(X)[r])))
    with pytest.raises(DataError) as info:
        check_conversion(lr, from_sklearn(stump)[0], X)
    assert f"{len(differ)} of 150 sample rows: row {r} is" in str(info.value)


def test_string_labels_and_table_sample_in_another_order(iris):
    """Text labels compare as text; a table sample's columns are taken in the model's order."""
    data = load_iris()
    names = ["sl", "sw", "pl", "pw"]
    table = pa.table({n: data.data[:, i] for i, n in enumerate(names)})
    species = np.asarray(data.target_names)[data.target]
    clf = LogisticRegression(max_iter=500).fit(table, species)
    model, features = from_sklearn(clf)
    shuffled = table.select(["pw", "sl", "pl", "sw"])
    check = check_conversion(clf, model, shuffled, features=features)
    assert (check.rows, check.label_mismatches) == (150, 0)
    assert check_conversion(clf, model, data.data[:10].tolist()).rows == 10


def test_transformer_and_clusterer_checks(iris):
    from sklearn.cluster import KMeans

    X, _ = iris
    km = KMeans(3, n_init=3, random_state=0).fit(X)
    check = check_conversion(km, from_sklearn(km)[0], X)
    assert check.compared == "predict vs label, transform vs scores" and check.label_mismatches == 0
    scaler = StandardScaler().fit(X)
    check = check_conversion(scaler, from_sklearn(scaler)[0], X)
    assert check.compared == "transform vs variable" and check.max_abs_diff < 1e-5


@pytest.mark.parametrize(
    "sample, says",
    [
        (np.zeros((3, 5)), "shape [3, 5]"),
        (np.zeros((0, 4)), "shape [0, 4]"),
        (pa.table({"a": [1.0]}), "feature names are unknown"),
    ],
    ids=["width", "empty", "table-without-names"],
)
def test_bad_samples(iris, sample, says):
    X, y = iris
    lr = LogisticRegression(max_iter=500).fit(X, y)
    with pytest.raises(ProgrammingError) as info:
        check_conversion(lr, from_sklearn(lr)[0], sample)
    assert info.value.code == "bad_sample" and says in str(info.value)


def test_by_name_sample_must_be_a_table_with_the_columns(iris_colors):
    table, names, y = iris_colors
    pipe = by_name_pipeline(table, names, y, "ignore")
    model, _ = from_sklearn(pipe)
    for sample, says in [(np.zeros((2, 5)), "pyarrow Table"), (table.drop_columns(["color"]), "no column 'color'")]:
        with pytest.raises(ProgrammingError) as info:
            check_conversion(pipe, model, sample)
        assert info.value.code == "bad_sample" and says in str(info.value)


def test_large_sample_is_cut_to_a_seeded_subset(iris):
    from modelsql.converters.conversion_check import MAX_SAMPLE_ROWS

    X, y = iris
    lr = LogisticRegression(max_iter=500).fit(X, y)
    big = np.repeat(X, MAX_SAMPLE_ROWS // len(X) + 1, axis=0)
    model = from_sklearn(lr)[0]
    check = check_conversion(lr, model, big)
    assert check.rows == MAX_SAMPLE_ROWS and check.label_mismatches == 0
    names = ["x0", "x1", "x2", "x3"]
    table = pa.table({n: big[:, i] for i, n in enumerate(names)})
    assert check_conversion(lr, model, table, features=names) == check


# ------------------------------------------------------------------ item 8 through import_model


def test_import_model_records_the_conversion_check(tmp_path):
    from sklearn.datasets import load_iris
    from sklearn.ensemble import RandomForestClassifier

    X, y = load_iris(return_X_y=True)
    forest = RandomForestClassifier(n_estimators=10, random_state=0).fit(X, y)
    con = modelsql.connect(str(tmp_path / "c.duckdb"))
    con.import_model("forest", forest, example_input=X)
    rows, diff, mismatches = con.execute(
        "SELECT check_rows, check_max_abs_diff, check_label_mismatches FROM modelsql.model_versions").fetchone()
    assert rows == 150 and 0 < diff < 1e-5 and mismatches == 0
    props = {r[2]: r[5] for r in con.execute("DESCRIBE MODEL forest").fetchall() if r[0] == "property"}
    assert props["conversion_check"].startswith("150 rows, max abs diff ") and "0 label mismatches" in props["conversion_check"]
    con.import_model("forest_default", forest)  # no sample: the documented default rows
    assert con.execute("SELECT check_rows FROM modelsql.model_versions WHERE name = 'forest_default'").fetchone() == (256,)
    con.close()


def test_import_model_refuses_a_label_disagreement_unless_accepted(tmp_path):
    pd = pytest.importorskip("pandas")
    from sklearn.compose import make_column_transformer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder

    train = pd.DataFrame({"color": ["red", "green", "blue"] * 20, "size": np.arange(60.0)})
    pipe = make_pipeline(
        make_column_transformer((OneHotEncoder(handle_unknown="infrequent_if_exist"), ["color"]),
                                ("passthrough", ["size"])),
        LogisticRegression(),
    ).fit(train, (train["color"] == "red").astype(int))
    sample = pd.DataFrame({"color": ["red", "purple", "blue"], "size": [1.0, 2.0, 3.0]})
    con = modelsql.connect(str(tmp_path / "c.duckdb"))
    with pytest.raises(modelsql.DataError, match="accept_mismatch=True") as ei:
        con.import_model("enc", pipe, example_input=sample)
    assert ei.value.code == "conversion_mismatch" and "1 of 3" in str(ei.value)
    assert con.execute("SELECT count(*) FROM modelsql.model_versions").fetchone() == (0,)
    con.import_model("enc", pipe, example_input=sample, accept_mismatch=True)
    assert con.execute("SELECT check_rows, check_label_mismatches FROM modelsql.model_versions").fetchone() == (3, 1)
    con.close()


# ------------------------------------------------------------------ item 12: pipelines fitted on a DataFrame


def test_sklearn_and_dev_extras_install_pandas():
    tomllib = pytest.importorskip("tomllib")
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    extras = pyproject["project"]["optional-dependencies"]
    for extra in ("sklearn", "dev"):
        names = {re.match(r"[\w.-]+", req).group(0).lower() for req in extras[extra]}
        assert "pandas" in names, (extra, extras[extra])


def test_column_transformer_pipeline_fitted_on_a_dataframe(con):
    """The README's way: fit on a pandas DataFrame, import, PREDICT binds columns by name."""
    import pandas as pd
    from sklearn.compose import ColumnTransformer
    from sklearn.datasets import load_wine
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    df, y = load_wine(as_frame=True, return_X_y=True)
    assert isinstance(df, pd.DataFrame)
    df["hue_band"] = np.where(df["hue"] > 1.0, "high", "low")  # a text column, one-hot encoded
    numeric = ["alcohol", "malic_acid", "color_intensity", "proline", "flavanoids"]
    pipe = make_pipeline(
        ColumnTransformer([("num", StandardScaler(), numeric), ("text", OneHotEncoder(), ["hue_band"])]),
        LogisticRegression(max_iter=1000),
    ).fit(df, y)
    con.import_model("wine", pipe)

    # the table has every column, in another order, plus an id: PREDICT picks by name
    table = df[list(reversed(df.columns))].assign(id=np.arange(len(df)))
    con.register("wine_frame", table)
    con.execute("CREATE TABLE wine AS SELECT * FROM wine_frame")
    con.unregister("wine_frame")
    con.commit()
    rows = con.execute("SELECT id, label, probabilities FROM PREDICT(MODEL wine, TABLE wine) ORDER BY id").fetchall()

    assert [r[0] for r in rows] == list(range(len(df)))
    np.testing.assert_array_equal([r[1] for r in rows], pipe.predict(df))
    np.testing.assert_allclose(np.array([r[2] for r in rows]), pipe.predict_proba(df), atol=1e-5)


@pytest.mark.parametrize("shape", ["vectorizer", "feature_union_inside", "feature_union_of_column_transformers"])
def test_a_column_transformer_with_a_text_vectorizer_imports_whole(con, shape):
    """A ColumnTransformer that vectorizes a text column (TfidfVectorizer; two vectorizers in a FeatureUnion; a
    FeatureUnion of ColumnTransformers) beside scaled numbers converts with modelsql's exact featurizer for that call
    alone (skl2onnx's own, with a locale many hosts lack, stays registered for the user's conversions), and PREDICT
    gives the pipeline's answers."""
    import pandas as pd
    from skl2onnx.common import _registration
    from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer
    from sklearn.pipeline import FeatureUnion

    from modelsql.datasets import reviews

    texts, labels = reviews(400)
    frame = pd.DataFrame({"review": texts, "stars": np.arange(len(texts), dtype=float) % 5})
    text_part = (TfidfVectorizer(ngram_range=(1, 2)) if shape == "vectorizer" else
                 FeatureUnion([("w", TfidfVectorizer()), ("b", CountVectorizer(ngram_range=(2, 2)))]))
    features = (FeatureUnion([("t", ColumnTransformer([("txt", TfidfVectorizer(), "review")])),
                              ("n", ColumnTransformer([("num", StandardScaler(), ["stars"])]))])
                if shape == "feature_union_of_column_transformers" else
                ColumnTransformer([("num", StandardScaler(), ["stars"]), ("txt", text_part, "review")]))
    pipe = Pipeline([("features", features), ("lr", LogisticRegression(max_iter=500))]).fit(frame.iloc[:300],
                                                                                           labels[:300])
    before = _registration._converter_pool["SklearnTfidfVectorizer"]
    con.import_model("reviews_ct", pipe)
    assert _registration._converter_pool["SklearnTfidfVectorizer"] is before
    held = frame.iloc[300:].assign(id=np.arange(100))
    con.register("held_frame", held)
    rows = con.execute("SELECT id, label, probabilities FROM PREDICT(MODEL reviews_ct, TABLE held_frame) "
                       "ORDER BY id").fetchall()
    con.unregister("held_frame")
    np.testing.assert_array_equal([r[1] for r in rows], pipe.predict(held))
    np.testing.assert_allclose(np.array([r[2] for r in rows]), pipe.predict_proba(held), atol=1e-5)
    con.rollback()


def test_a_pipeline_of_one_text_per_row_imports_with_import_model(con):
    """Pipeline(TfidfVectorizer, LogisticRegression) fitted on a list of texts: import_model converts it (its input
    one text per row, checked on the example's texts when given), and PREDICT feeds it a column named "input"; a
    ColumnTransformer reading text by position (an object array) is refused, naming the part and the fix."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    from modelsql.datasets import reviews

    texts, labels = reviews(300)
    pipe = make_pipeline(TfidfVectorizer(), LogisticRegression(max_iter=300)).fit(texts[:200], labels[:200])
    con.import_model("texts_plain", pipe)
    con.import_model("texts_checked", pipe, example_input=texts[200:])
    con.register("held", pa.table({"input": texts[200:]}))
    for name in ("texts_plain", "texts_checked"):
        got = [r[0] for r in con.execute(f"SELECT label FROM PREDICT(MODEL {name}, TABLE held)").fetchall()]
        assert got == list(pipe.predict(texts[200:]))
    con.unregister("held")
    by_position = np.array([[t, float(i % 5)] for i, t in enumerate(texts)], dtype=object)
    mixed = make_pipeline(ColumnTransformer([("words", TfidfVectorizer(), 0), ("n", StandardScaler(), [1])]),
                          LogisticRegression(max_iter=300)).fit(by_position, labels)
    with pytest.raises(NotSupportedError) as info:
        con.import_model("texts_mixed", mixed)
    assert info.value.code == "conversion_failed" and "'words'" in str(info.value) and "DataFrame" in str(info.value)
    con.rollback()


_CHAR_AND_STOP_WORDS = """
import numpy as np, pandas as pd, modelsql
from sklearn.compose import ColumnTransformer
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler
from modelsql.datasets import reviews
texts, labels = reviews(300)
frame = pd.DataFrame({"review": texts, "stars": np.arange(300, dtype=float) % 5})
con = modelsql.connect(":memory:")
for vectorizer in (TfidfVectorizer(analyzer="char", ngram_range=(1, 2)), TfidfVectorizer(stop_words=["the", "is"])):
    pipe = Pipeline([("ct", ColumnTransformer([("n", StandardScaler(), ["stars"]), ("t", vectorizer, "review")])),
                     ("lr", LogisticRegression(max_iter=300))]).fit(frame, labels)
    con.import_model("m", pipe, replace=True)
    con.register("f", frame)
    got = [r[0] for r in con.execute("SELECT label FROM PREDICT(MODEL m, TABLE f)").fetchall()]
    assert got == list(pipe.predict(frame)), vectorizer
print("ok")
"""


def test_a_character_analyzer_or_stop_words_in_a_column_transformer_import(tmp_path):
    """ONNX's shape inference ended the process (a segmentation fault) on the contrib Tokenizer's untyped output read
    by RegexFullMatch (a character analyzer) or LabelEncoder (stop words): run in a process of its own."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _CHAR_AND_STOP_WORDS], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), (done.returncode, done.stderr[-2000:])


def test_pipeline_columns_keep_their_own_names_and_unused_ones_are_not_needed(tmp_path):
    """skl2onnx renames "a/b" to a_b (and a real a_b to a_b1): PREDICT must bind the pipeline's own
    column names, never another column that happens to have the changed name; columns the
    ColumnTransformer drops are not needed in the table."""
    pd = pytest.importorskip("pandas")
    from sklearn.compose import ColumnTransformer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    rs = np.random.RandomState(0)
    X = pd.DataFrame({"a/b": rs.rand(200), "c": rs.rand(200), "unused col": rs.rand(200)})
    pipe = make_pipeline(ColumnTransformer([("n", StandardScaler(), ["a/b", "c"])]), LogisticRegression())
    pipe.fit(X, (X["a/b"] > 0.5).astype(int))
    con = modelsql.connect(str(tmp_path / "c.duckdb"))
    con.import_model("m", pipe, example_input=X)
    inputs = [r[2] for r in con.execute("DESCRIBE MODEL m").fetchall() if r[0] == "input"]
    assert inputs == ["a/b", "c"]
    con.register("t", X.drop(columns=["unused col"]).assign(a_b=1 - X["a/b"], id=range(200)))
    got = [r[0] for r in con.execute("SELECT label FROM PREDICT(MODEL m, TABLE t) ORDER BY id").fetchall()]
    assert got == pipe.predict(X).tolist()
    con.close()
