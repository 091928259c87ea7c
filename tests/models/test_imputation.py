"""Missing values in models trained in SQL (issue 25, part 2: BigQuery ML's automatic imputation and its
``ML.IMPUTER``): ``on_null = 'impute'`` keeps rows with NULL features, the model fills a NULL number with the
training mean and makes NULL text a category of its own; ``ML.IMPUTER(x, strategy)`` in a TRANSFORM picks the
strategy per column. PREDICT and EVALUATE then feed those NULLs to the model, which predicts what the same
scikit-learn pipeline fitted by hand predicts; TUNE and CREATE MODEL ... FROM STUDY keep the imputation; bad input
is a clear error and leaves the catalog as it was."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pyarrow as pa
import pytest
from sklearn.compose import ColumnTransformer
from sklearn.datasets import load_breast_cancer
from sklearn.ensemble import RandomForestClassifier
from sklearn.impute import SimpleImputer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler

import modelsql
from modelsql.errors import DataError, ProgrammingError
from modelsql.estimators import NULL_CATEGORY


@pytest.fixture(scope="module")
def con(tmp_path_factory):
    """breast cancer's first three features and a text column derived from the fourth, a fifth of each
    feature's values NULL (at different rows), and a NULL-free copy of the features."""
    c = modelsql.connect(str(tmp_path_factory.mktemp("impute") / "t.duckdb"))
    c.autocommit = True  # (a statement that fails leaves no transaction aborted for the next test)
    x, y = load_breast_cancer(return_X_y=True)
    rng = np.random.default_rng(0)
    size = np.array(["small", "medium", "large"])[np.digitize(x[:, 3], [400, 800])]
    holes = rng.random((len(y), 4)) < 0.2
    data = {"id": np.arange(len(y)),
            **{f"f{i}": pa.array(np.where(holes[:, i], None, x[:, i]), pa.float64()) for i in range(3)},
            "size": pa.array(np.where(holes[:, 3], None, size), pa.string()), "y": y}
    c.register("cancer_arrow", pa.table(data))
    c.execute("CREATE TABLE cancer AS SELECT * FROM cancer_arrow ORDER BY id")
    c.unregister("cancer_arrow")
    yield c
    c.close()


def _frame(con):
    frame = con.execute("SELECT * FROM cancer ORDER BY id").fetch_arrow().to_pandas()
    frame["size"] = frame["size"].fillna(NULL_CATEGORY).astype(object)  # NULL text: a category of its own
    return frame


def _fit(pipeline: Pipeline, frame) -> Pipeline:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pipeline.fit(frame[["f0", "f1", "f2", "size"]], frame["y"])


def _probabilities(con, model: str, source: str = "TABLE cancer") -> np.ndarray:
    return np.array([list(p) for (p,) in con.execute(
        f"SELECT probabilities FROM PREDICT(MODEL {model}, {source}) ORDER BY id").fetchall()])


def _options(con, model: str) -> dict:
    return {r[2]: r[5] for r in con.execute(f"DESCRIBE MODEL {model}").fetchall() if r[0] == "property"}


def test_on_null_impute_fills_numbers_with_the_mean_and_makes_null_text_a_category(con):
    con.execute("CREATE MODEL imp WITH (model_type = 'logistic_reg', target = y, validation = 'none', "
                "on_null = 'impute') AS SELECT * FROM cancer ORDER BY id")
    frame = _frame(con)
    hand = _fit(Pipeline([("preprocess", ColumnTransformer([
        ("numeric", Pipeline([("impute", SimpleImputer()), ("scale", StandardScaler())]), ["f0", "f1", "f2"]),
        ("categorical", OneHotEncoder(handle_unknown="ignore", sparse_output=False), ["size"])])),
        ("model", LogisticRegression(random_state=0))]), frame)
    got = _probabilities(con, "imp")
    assert not np.isnan(got).any() and len(got) == len(frame)  # every row, those with NULLs too
    np.testing.assert_allclose(got, hand.predict_proba(frame), atol=1e-5)
    assert _options(con, "imp")["imputed"] == '["f0", "f1", "f2", "size"]'
    # EVALUATE feeds the NULLs too; PREDICT's on_null = 'skip' leaves no row out (nothing is NULL to the model)
    assert con.execute("EVALUATE MODEL imp ON TABLE cancer TARGET y").fetchone()[4] == len(frame)
    assert con.execute("SELECT count(*) FROM PREDICT(MODEL imp, TABLE cancer, on_null = 'skip')").fetchone()[0] \
        == len(frame)


def test_ml_imputer_picks_the_strategy_per_column_and_other_columns_stay_checked(con):
    con.execute("CREATE MODEL rf TRANSFORM (ML.IMPUTER(f0, 'median') OVER () AS f0_filled, "
                "ML.IMPUTER(size, 'most_frequent') OVER () AS size_filled, f1, y) "
                "WITH (model_type = 'random_forest_classifier', target = y, validation = 'none', n_estimators = 20, "
                "max_depth = 4) AS SELECT * FROM cancer WHERE f1 IS NOT NULL ORDER BY id")
    frame = _frame(con)
    rows = frame[frame["f1"].notna()]
    hand = Pipeline([("preprocess", ColumnTransformer([
        ("f0", SimpleImputer(strategy="median"), ["f0"]),
        ("size", Pipeline([("impute", SimpleImputer(strategy="most_frequent", missing_values=NULL_CATEGORY)),
                           ("encode", OneHotEncoder(handle_unknown="ignore", sparse_output=False))]), ["size"]),
        ("f1", "passthrough", ["f1"])])),
        ("model", RandomForestClassifier(n_estimators=20, max_depth=4, random_state=0))])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hand.fit(rows[["f0", "size", "f1"]], rows["y"])
    source = "(SELECT * FROM cancer WHERE f1 IS NOT NULL)"
    np.testing.assert_allclose(_probabilities(con, "rf", source), hand.predict_proba(rows[["f0", "size", "f1"]]),
                               atol=1e-5)
    assert _options(con, "rf")["imputed"] == '["f0", "size"]'
    with pytest.raises(DataError) as err:  # f1 is not imputed: a NULL in it is PREDICT's error, naming it
        con.execute("SELECT * FROM PREDICT(MODEL rf, TABLE cancer)").fetchall()
    assert err.value.code == "null_input" and "f1" in str(err.value)


def test_tune_and_from_study_keep_the_imputation(con):
    con.execute("CREATE MODEL timp WITH (model_type = 'logistic_reg', target = y, on_null = 'impute') "
                "AS SELECT * FROM cancer ORDER BY id")
    row = con.execute("TUNE MODEL timp ON (SELECT * FROM cancer ORDER BY id) TARGET y SEARCH (C = CHOICE(0.1, 10.0)) "
                      "USING GRID WITH (metric = 'val_accuracy', seed = 0)").fetchone()
    assert row[1] == "finished"
    con.execute("CREATE MODEL timp_best FROM STUDY timp_study")
    assert _options(con, "timp_best")["imputed"] == '["f0", "f1", "f2", "size"]'
    got = _probabilities(con, "timp_best")
    assert len(got) == con.execute("SELECT count(*) FROM cancer").fetchone()[0] and not np.isnan(got).any()


@pytest.mark.parametrize("clause, options, code", [
    ("TRANSFORM (ML.IMPUTER(size, 'mean') OVER () AS s, f0, y)", "", "invalid_transform"),  # a mean of text
    ("TRANSFORM (ML.IMPUTER(f0, 'avg') OVER () AS s, y)", "", "invalid_transform"),
    ("TRANSFORM (ML.IMPUTER(f0) OVER () AS s, y)", "", "invalid_transform"),
    ("TRANSFORM (ML.IMPUTER(f0, 'mean') OVER () AS s, f1, y)", "", "null_value"),  # f1 is not imputed
    ("", ", on_null = 'impute', features = (f0, nothing)", "null_value"),  # a column NULL in every row
    ("", ", on_null = 'fill'", "invalid_option"),
])
def test_bad_imputation_is_a_clear_error_and_creates_nothing(con, clause, options, code):
    query = ("(SELECT *, NULL::DOUBLE AS nothing FROM cancer)" if "nothing" in options else "cancer")
    with pytest.raises((ProgrammingError, DataError)) as err:
        con.execute(f"CREATE MODEL bad {clause} WITH (model_type = 'logistic_reg', target = y{options}) "
                    f"AS SELECT * FROM {query}")
    assert err.value.code == code
    assert con.execute("SELECT count(*) FROM modelsql.models WHERE name = 'bad'").fetchone()[0] == 0


def test_a_null_target_is_still_an_error(con):
    with pytest.raises(DataError) as err:
        con.execute("CREATE MODEL nt WITH (model_type = 'logistic_reg', target = t, on_null = 'impute') "
                    "AS SELECT f0, f1, CASE WHEN id % 7 = 0 THEN NULL ELSE y END AS t FROM cancer")
    assert err.value.code == "null_value" and '"t"' in str(err.value)


def test_the_null_category_text_itself_is_refused_in_training_and_at_predict(con):
    with pytest.raises(DataError) as err:
        con.execute("CREATE MODEL sym WITH (model_type = 'logistic_reg', target = y, on_null = 'impute') "
                    f"AS SELECT f0, CASE WHEN id % 9 = 0 THEN '{NULL_CATEGORY}' ELSE size END AS size, y FROM cancer")
    assert err.value.code == "invalid_value" and "U+2400" in str(err.value)
    con.execute("CREATE MODEL sym WITH (model_type = 'logistic_reg', target = y, on_null = 'impute') "
                "AS SELECT f0, size, y FROM cancer")
    with pytest.raises(DataError) as err:  # never read as NULL silently
        con.execute(f"SELECT label FROM PREDICT(MODEL sym, (SELECT f0, '{NULL_CATEGORY}' AS size FROM cancer))"
                    ).fetchall()
    assert err.value.code == "invalid_value" and "PREDICT(MODEL sym)" in str(err.value)


def test_one_feature_routed_models_and_messages_of_partly_imputed_models(con):
    # one column: EVALUATE (and the statement's own evaluation) binds it by name, NULLs included
    con.execute("CREATE MODEL one WITH (model_type = 'logistic_reg', target = y, on_null = 'impute') "
                "AS SELECT f0, y FROM cancer")
    rows = con.execute("SELECT count(*) FROM cancer").fetchone()[0]
    assert con.execute("EVALUATE MODEL one ON TABLE cancer TARGET y").fetchone()[4] == rows
    assert con.execute("SELECT count(label) FROM PREDICT(MODEL one, TABLE cancer, features = (f0))").fetchone()[0] \
        == rows
    # routed models that all impute a column take its NULLs
    routed = ("SELECT count(label) FROM PREDICT(MODELS (one, one_b) ROUTE BY which, (SELECT *, CASE WHEN id % 2 = 0 "
              "THEN 'one' ELSE 'one_b' END AS which FROM cancer))")
    con.execute("CREATE MODEL one_b WITH (model_type = 'logistic_reg', target = y, on_null = 'impute', C = 0.5) "
                "AS SELECT f0, y FROM cancer")
    assert con.execute(routed).fetchone()[0] == rows
    # routed models that impute different columns are refused (one would read another's text as NULL)
    con.execute("CREATE OR REPLACE MODEL one_b WITH (model_type = 'logistic_reg', target = y, on_null = 'skip') "
                "AS SELECT f0, y FROM cancer")
    with pytest.raises(modelsql.errors.NotSupportedError) as err:
        con.execute(routed).fetchall()
    assert err.value.code == "not_supported" and "treat NULLs alike" in str(err.value)
    # a NULL where the model does not impute is PREDICT's error, counting only those rows
    con.execute("CREATE MODEL part TRANSFORM (ML.IMPUTER(f0, 'mean') OVER () AS f0_filled, f1, y) "
                "WITH (model_type = 'logistic_reg', target = y, on_null = 'skip') AS SELECT * FROM cancer")
    nulls = con.execute("SELECT count(*) FROM cancer WHERE f1 IS NULL").fetchone()[0]
    with pytest.raises(DataError) as err:
        con.execute("SELECT label FROM PREDICT(MODEL part, TABLE cancer)").fetchall()
    assert f'"f1" ({nulls} rows); in all, {nulls} rows' in str(err.value) and '"f0"' not in str(err.value)


def test_a_column_null_in_every_training_row_is_refused_even_when_validation_rows_hold_values(con):
    with pytest.raises(DataError) as err:
        con.execute("CREATE MODEL late WITH (model_type = 'logistic_reg', target = y, on_null = 'impute', "
                    "validation = 'seq') AS SELECT f0, CASE WHEN id >= 500 THEN f1 END AS f1, y FROM cancer ORDER BY id")
    assert err.value.code == "null_value" and '"f1"' in str(err.value) and "training rows" in str(err.value)
    assert con.execute("SELECT count(*) FROM modelsql.models WHERE name = 'late'").fetchone()[0] == 0


def test_export_keeps_the_imputation_and_tune_imputes_a_new_model_type(con, tmp_path):
    con.execute("CREATE MODEL exp_src WITH (model_type = 'logistic_reg', target = y, on_null = 'impute') "
                "AS SELECT f0, size, y FROM cancer")
    path = tmp_path / "imputing.onnx"
    con.execute(f"EXPORT MODEL exp_src TO '{path}'")
    con.execute(f"IMPORT MODEL exp_back FROM '{path}'")
    assert _options(con, "exp_back")["imputed"] == '["f0", "size"]'
    np.testing.assert_allclose(_probabilities(con, "exp_back"), _probabilities(con, "exp_src"), atol=1e-6)
    # the entry is checked against the graph: a model that does not impute answers NaN for a NULL, refused
    con.execute("CREATE MODEL exp_plain WITH (model_type = 'logistic_reg', target = y, on_null = 'skip') "
                "AS SELECT f0, size, y FROM cancer")
    con.execute(f"EXPORT MODEL exp_plain TO '{path}'")
    proto = onnx.load(str(path))
    proto.metadata_props.add(key="modelsql.imputed", value='["F0"]')
    onnx.save(proto, str(path))
    with pytest.raises(DataError) as err:
        con.execute(f"IMPORT MODEL exp_claim FROM '{path}'")
    assert err.value.code == "invalid_onnx" and "does not impute" in str(err.value)
    with pytest.raises(DataError) as err:  # TUNE of a new model type refuses NULLs unless told to impute
        con.execute("TUNE MODEL fresh ON TABLE cancer TARGET y SEARCH (C = CHOICE(0.1, 1.0)) USING GRID "
                    "WITH (model_type = 'logistic_reg')")
    assert err.value.code == "null_value"
    con.execute("TUNE MODEL fresh ON TABLE cancer TARGET y SEARCH (C = CHOICE(0.1, 1.0)) USING GRID "
                "WITH (model_type = 'logistic_reg', on_null = 'impute')")
    con.execute("CREATE MODEL fresh FROM STUDY fresh_study")
    assert not np.isnan(_probabilities(con, "fresh")).any()
