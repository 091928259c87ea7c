"""CREATE MODEL m TRANSFORM (...) WITH (...) AS SELECT (BigQuery ML's TRANSFORM clause; issue 25, part 2): the ML
functions are fitted inside the model on the training rows and applied by PREDICT to raw columns, predicting what
the same scikit-learn pipeline fitted by hand predicts; TUNE and CREATE MODEL ... FROM STUDY keep the clause's
preprocessing; bad items are clear errors that leave the catalog as it was."""

from __future__ import annotations

import warnings

import numpy as np
import pyarrow as pa
import pytest
from sklearn.compose import ColumnTransformer
from sklearn.datasets import load_breast_cancer
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import (KBinsDiscretizer, MinMaxScaler, OneHotEncoder, OrdinalEncoder, RobustScaler,
                                   StandardScaler)

import modelsql
from modelsql.errors import NotSupportedError, ProgrammingError

CLAUSE = ("TRANSFORM (ML.MIN_MAX_SCALER(f0) OVER () AS f0_scaled, ML.QUANTILE_BUCKETIZE(f1, 4) OVER () AS f1_bucket, "
          "ML.ROBUST_SCALER(f2) OVER () AS f2_robust, f3, ML.ONE_HOT_ENCODER(size) OVER () AS size_hot, "
          "ML.LABEL_ENCODER(shade) OVER () AS shade_code, y)")


@pytest.fixture(scope="module")
def con(tmp_path_factory):
    c = modelsql.connect(str(tmp_path_factory.mktemp("transform") / "t.duckdb"))
    x, y = load_breast_cancer(return_X_y=True)
    size = np.array(["small", "medium", "large"])[np.digitize(x[:, 3], [400, 800])]
    shade = np.array(["a", "b", "c", "d"])[np.arange(len(y)) % 4]
    data = {"id": np.arange(len(y)), **{f"f{i}": x[:, i] for i in range(4)}, "size": size, "shade": shade, "y": y}
    c.register("cancer_arrow", pa.table(data))
    c.execute("CREATE TABLE cancer AS SELECT * FROM cancer_arrow ORDER BY id")
    c.unregister("cancer_arrow")
    yield c
    c.close()


def _frame(con):
    return con.execute("SELECT * FROM cancer ORDER BY id").fetch_arrow().to_pandas()


def _hand(frame, train, C: float = 1.0) -> Pipeline:
    pipeline = Pipeline([("preprocess", ColumnTransformer([
        ("f0_scaled", MinMaxScaler(clip=True), ["f0"]),
        ("f1_bucket", KBinsDiscretizer(n_bins=4, encode="onehot-dense", strategy="quantile", subsample=None,
                                       quantile_method="averaged_inverted_cdf"), ["f1"]),
        ("f2_robust", RobustScaler(), ["f2"]), ("f3", StandardScaler(), ["f3"]),
        ("size_hot", OneHotEncoder(handle_unknown="ignore", sparse_output=False), ["size"]),
        ("shade_code", OrdinalEncoder(handle_unknown="use_encoded_value", unknown_value=-1), ["shade"])])),
        ("model", LogisticRegression(C=C, random_state=0))])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pipeline.fit(frame.iloc[train][["f0", "f1", "f2", "f3", "size", "shade"]], frame["y"].to_numpy()[train])


def _probabilities(con, model: str, source: str = "TABLE cancer") -> np.ndarray:
    return np.array([list(p) for (p,) in con.execute(
        f"SELECT probabilities FROM PREDICT(MODEL {model}, {source}) ORDER BY id").fetchall()])


def test_the_clause_is_fitted_in_the_model_and_predicts_as_the_hand_fitted_pipeline(con):
    result = con.execute(f"CREATE MODEL tr {CLAUSE} WITH (model_type = 'logistic_reg', target = y, validation = 0.25) "
                         "AS SELECT * FROM cancer ORDER BY id").fetchone()
    frame = _frame(con)
    train, _ = train_test_split(np.arange(len(frame)), test_size=0.25, random_state=0)
    hand = _hand(frame, np.sort(train))
    np.testing.assert_allclose(_probabilities(con, "tr"), hand.predict_proba(frame), atol=1e-5)
    assert result[3] == len(train)
    # PREDICT reads the raw columns (one input each), values outside the training range included (capped)
    inputs = [r[2] for r in con.execute("DESCRIBE MODEL tr").fetchall() if r[0] == "input"]
    assert inputs == ["f0", "f1", "f2", "f3", "size", "shade"]
    far = "(SELECT id, f0 * 100 AS f0, f1, f2, f3, 'huge' AS size, 'z' AS shade FROM cancer)"
    shifted = frame.assign(f0=frame["f0"] * 100, size="huge", shade="z")
    np.testing.assert_allclose(_probabilities(con, "tr", far), hand.predict_proba(shifted), atol=1e-5)
    options = {r[2]: r[5] for r in con.execute("DESCRIBE MODEL tr").fetchall() if r[0] == "property"}
    assert options["transform"].startswith("ML.MIN_MAX_SCALER(f0) OVER () AS f0_scaled")


def test_tune_and_from_study_keep_the_transform(con):
    con.execute(f"CREATE MODEL tt {CLAUSE} WITH (model_type = 'logistic_reg', target = y) AS SELECT * FROM cancer "
                "ORDER BY id")
    row = con.execute("TUNE MODEL tt ON (SELECT * FROM cancer ORDER BY id) TARGET y SEARCH (C = CHOICE(0.1, 10.0)) "
                      "USING GRID WITH (metric = 'val_accuracy', seed = 0)").fetchone()
    assert row[1] == "finished"
    best_c = {0: 0.1, 1: 10.0}[row[3]]
    con.execute("CREATE MODEL tt_best FROM STUDY tt_study")
    frame = _frame(con)
    train, _ = train_test_split(np.arange(len(frame)), test_size=0.2, random_state=0)  # TUNE's held-out fraction
    np.testing.assert_allclose(_probabilities(con, "tt_best"), _hand(frame, train, best_c).predict_proba(frame),
                               atol=1e-5)
    with pytest.raises(ProgrammingError) as err:
        con.execute("TUNE MODEL tt ON TABLE cancer TARGET y SEARCH (C = CHOICE(0.1, 10.0)) USING GRID "
                    "WITH (features = (f0, f1), study_name = 'other')")
    assert err.value.code == "invalid_option" and "TRANSFORM" in str(err.value)


@pytest.mark.parametrize("clause, error, code", [
    ("TRANSFORM (ML.STANDARD_SCALER(size) OVER () AS s)", ProgrammingError, "invalid_transform"),
    ("TRANSFORM (ML.ONE_HOT_ENCODER(f0) OVER () AS s)", ProgrammingError, "invalid_transform"),
    ("TRANSFORM (f0 * 2 AS double_f0)", NotSupportedError, "not_supported"),
    ("TRANSFORM (ML.BUCKETIZE(f0, [1, 2]) AS b)", NotSupportedError, "not_supported"),
    ("TRANSFORM (ML.NO_SUCH(f0) OVER () AS b)", ProgrammingError, "invalid_transform"),
    ("TRANSFORM (ML.QUANTILE_BUCKETIZE(f0, 1) OVER () AS q)", ProgrammingError, "invalid_transform"),
    ("TRANSFORM (ML.QUANTILE_BUCKETIZE(f0) OVER () AS q)", ProgrammingError, "invalid_transform"),
    ("TRANSFORM (ML.QUANTILE_BUCKETIZE(f0, f1) OVER () AS q)", ProgrammingError, "invalid_transform"),
    ("TRANSFORM (ML.STANDARD_SCALER(f0) OVER (PARTITION BY size) AS s)", ProgrammingError, "invalid_transform"),
    ("TRANSFORM (ML.STANDARD_SCALER(y) OVER () AS s, f0)", ProgrammingError, "invalid_transform"),
    ("TRANSFORM (y)", ProgrammingError, "invalid_transform"),
    ("TRANSFORM (missing_column)", ProgrammingError, "column_not_found"),
    ("TRANSFORM (f0, ML.STANDARD_SCALER(f1) OVER () AS f0)", ProgrammingError, "duplicate_column"),
    ("TRANSFORM (ML.QUANTILE_BUCKETIZE(f0, 1000000000) OVER () AS q)", ProgrammingError, "invalid_transform"),
    ("TRANSFORM (ML.STANDARD_SCALER(f0) OVER w AS s)", ProgrammingError, "invalid_transform"),
    ('TRANSFORM (f0 AS "")', ProgrammingError, "invalid_transform"),
    ("TRANSFORM ()", ProgrammingError, "parse_error"),
])
def test_a_bad_item_is_a_clear_error_naming_it_and_changes_nothing(con, clause, error, code):
    before = con.execute("SELECT count(*) FROM modelsql.models").fetchone()
    sql = f"CREATE MODEL bad {clause} WITH (model_type = 'logistic_reg', target = y) AS SELECT * FROM cancer"
    with pytest.raises(error) as err:
        con.execute(sql)
    assert err.value.code == code
    assert "TRANSFORM" in str(err.value) and "Traceback" not in str(err.value)
    assert con.execute("SELECT count(*) FROM modelsql.models").fetchone() == before


def test_features_and_transform_together_are_refused_before_the_query_runs(con):
    with pytest.raises(ProgrammingError) as err:
        con.execute("CREATE MODEL bad TRANSFORM (f0) WITH (model_type = 'logistic_reg', target = y, features = (f1)) "
                    "AS SELECT * FROM no_such_table")
    assert err.value.code == "invalid_option"


def test_a_scaler_before_trees_is_refused_and_reserved_part_names_are_fine(con):
    """A tree splits on the order a scaler keeps: the scaler would only add float32 rounding across its thresholds.
    Output names ColumnTransformer reserves for itself (``remainder``, ``a__b``) name items like any other."""
    with pytest.raises(ProgrammingError) as err:
        con.execute("CREATE MODEL bad TRANSFORM (ML.MIN_MAX_SCALER(f0) OVER () AS f0, y) WITH (model_type = "
                    "'random_forest_classifier', target = y) AS SELECT * FROM cancer")
    assert err.value.code == "invalid_transform" and "tree" in str(err.value)
    row = con.execute("CREATE MODEL odd TRANSFORM (ML.QUANTILE_BUCKETIZE(f0, 3) OVER () AS remainder, f1 AS a__b, "
                      "f2 AS n_jobs) WITH (model_type = 'random_forest_classifier', target = y, n_estimators = 5) "
                      "AS SELECT * FROM cancer").fetchone()
    assert row[:3] == ("odd", 1, "random_forest_classifier")


def test_key_like_columns_named_in_the_clause_are_features(con):
    """Columns PREDICT would take for keys (``id``) are features when the TRANSFORM names them: the statement's
    evaluation feeds what the model was trained on."""
    for name, items in (("keyed", "id, f0, y"), ("key_only", "id, y"), ("key_scaled", "ML.STANDARD_SCALER(id) OVER () AS i")):
        row = con.execute(f"CREATE MODEL {name} TRANSFORM ({items}) WITH (model_type = 'logistic_reg', target = y) "
                          "AS SELECT * FROM cancer").fetchone()
        assert row[:2] == (name, 1) and 0 <= row[8] <= 1


def test_tune_checks_the_clause_against_the_rows_it_reads_and_keeps_it_with_a_model_type(con):
    con.execute(f"CREATE MODEL tk {CLAUSE} WITH (model_type = 'logistic_reg', target = y) AS SELECT * FROM cancer "
                "ORDER BY id")
    with pytest.raises(ProgrammingError) as err:
        con.execute("TUNE MODEL tk ON (SELECT id, f0::VARCHAR AS f0, f1, f2, f3, size, shade, y FROM cancer) TARGET y "
                    "SEARCH (C = CHOICE(0.1, 1.0)) USING GRID WITH (study_name = 'tk_text')")
    assert err.value.code == "invalid_transform" and "f0" in str(err.value)
    con.execute("TUNE MODEL tk ON (SELECT * FROM cancer ORDER BY id) TARGET y SEARCH (C = CHOICE(0.1, 1.0)) USING "
                "GRID WITH (model_type = 'logistic_reg', study_name = 'tk_typed')")
    options = con.execute("SELECT options FROM modelsql.studies WHERE name = 'tk_typed'").fetchone()[0]
    assert "QUANTILE_BUCKETIZE" in options
    con.execute("CREATE MODEL tk_best FROM STUDY tk_typed")
    described = {r[2]: r[5] for r in con.execute("DESCRIBE MODEL tk_best").fetchall() if r[0] == "property"}
    assert described["transform"].startswith("ML.MIN_MAX_SCALER(f0) OVER () AS f0_scaled")


def test_from_study_of_a_text_column_before_a_number(con):
    """The study keeps its features in the query's order, so FROM STUDY reads the same rows (numbers were stored
    first, and the rows' fingerprint then differed: ``study_definition_changed``)."""
    con.execute("CREATE MODEL ordered TRANSFORM (ML.ONE_HOT_ENCODER(size) OVER () AS s, f0, y) WITH (model_type = "
                "'logistic_reg', target = y) AS SELECT * FROM cancer")
    con.execute("TUNE MODEL ordered ON TABLE cancer TARGET y SEARCH (C = CHOICE(0.1, 1.0)) USING GRID")
    assert con.execute("CREATE MODEL ordered_best FROM STUDY ordered_study").rowcount != 0
    con.execute("CREATE TABLE text_first AS SELECT size, f0, y FROM cancer")
    con.execute("CREATE MODEL plain WITH (model_type = 'logistic_reg', target = y) AS SELECT * FROM text_first")
    con.execute("TUNE MODEL plain ON TABLE text_first TARGET y SEARCH (C = CHOICE(0.1, 1.0)) USING GRID")
    con.execute("CREATE MODEL plain_best FROM STUDY plain_study")
    assert con.execute("SELECT count(*) FROM PREDICT(MODEL plain_best, TABLE text_first)").fetchone() == (569,)


def test_parameters_in_the_clause_are_its_constants(con):
    con.execute("CREATE MODEL tparam TRANSFORM (ML.QUANTILE_BUCKETIZE(f1, ?) OVER () AS f1_bucket, f0, y) "
                "WITH (model_type = 'logistic_reg', target = y) AS SELECT * FROM cancer WHERE f0 > ?", [4, 0.0])
    options = {r[2]: r[5] for r in con.execute("DESCRIBE MODEL tparam").fetchall() if r[0] == "property"}
    assert options["transform"].startswith("ML.QUANTILE_BUCKETIZE(f1, 4) OVER () AS f1_bucket")
    with pytest.raises(ProgrammingError) as err:  # a parameter that is no number or text is no constant
        con.execute("CREATE MODEL tparam2 TRANSFORM (ML.QUANTILE_BUCKETIZE(f1, ?) OVER () AS b, y) "
                    "WITH (model_type = 'logistic_reg', target = y) AS SELECT * FROM cancer", [None])
    assert err.value.code == "invalid_transform"
