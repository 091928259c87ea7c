"""CREATE MODEL ... WITH (model_type = ...) AS SELECT (issue 25, part 2): models trained in SQL predict what the
same scikit-learn pipeline fitted by hand on the same rows predicts; the validation split is scikit-learn's; the
validation evaluation is recorded; bad input is a clear error that leaves the catalog as it was."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pyarrow as pa
import pytest
from sklearn import metrics as M
from sklearn.cluster import KMeans
from sklearn.compose import ColumnTransformer
from sklearn.datasets import load_breast_cancer, load_diabetes, load_iris
from sklearn.ensemble import GradientBoostingRegressor, RandomForestClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler
from sklearn.tree import DecisionTreeClassifier

import modelsql


def _load(con, name: str, x: np.ndarray, y: np.ndarray, extra: dict | None = None) -> list[str]:
    features = [f"f{i}" for i in range(x.shape[1])]
    data = {"id": np.arange(len(y)), **{f: x[:, i] for i, f in enumerate(features)}, **(extra or {}), "y": y}
    con.register(f"{name}_arrow", pa.table(data))
    con.execute(f"CREATE TABLE {name} AS SELECT * FROM {name}_arrow ORDER BY id")
    con.unregister(f"{name}_arrow")
    return features


@pytest.fixture(scope="module")
def con(tmp_path_factory):
    c = modelsql.connect(str(tmp_path_factory.mktemp("trained") / "t.duckdb"))
    x, y = load_breast_cancer(return_X_y=True)
    _load(c, "cancer", x[:, :8], y)
    x, y = load_iris(return_X_y=True)
    colour = np.array(["red", "green", "blue"])[np.arange(len(y)) % 3]
    _load(c, "iris", x, y, {"colour": colour})
    x, y = load_diabetes(return_X_y=True)
    _load(c, "diabetes", x, y)
    yield c
    c.close()


def _hand(pipeline: Pipeline, frame, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pipeline.fit(frame, y)


def _frame(con, table: str, columns: list[str]):
    return con.execute(f"SELECT {', '.join(columns)} FROM {table} ORDER BY id").fetch_arrow().to_pandas()


def _predict(con, model: str, table: str, column: str = "label") -> np.ndarray:
    return np.array([r[0] for r in con.execute(
        f"SELECT {column} FROM PREDICT(MODEL {model}, TABLE {table}) ORDER BY id").fetchall()])


def test_logistic_regression_predicts_as_the_hand_fitted_pipeline_and_records_its_validation(con) -> None:
    row = con.execute("CREATE MODEL cancer_lr WITH (model_type = 'logistic_reg', target = y, C = 0.5, "
                      "validation = 0.25, seed = 7) AS SELECT * FROM cancer ORDER BY id")
    names = [d[0] for d in row.description]
    result = dict(zip(names, row.fetchone()))
    features = [f"f{i}" for i in range(8)]
    frame = _frame(con, "cancer", features)
    y = np.array([r[0] for r in con.execute("SELECT y FROM cancer ORDER BY id").fetchall()])
    train, valid = train_test_split(np.arange(len(y)), test_size=0.25, random_state=7)
    train.sort(), valid.sort()
    hand = _hand(Pipeline([("preprocess", ColumnTransformer([("numeric", StandardScaler(), features)])),
                           ("model", LogisticRegression(C=0.5, random_state=7))]), frame.iloc[train], y[train])
    assert (result["model"], result["version"], result["training_rows"], result["validation_rows"]) == \
        ("cancer_lr", 1, len(train), len(valid))
    probabilities = np.array([list(p) for p in _predict(con, "cancer_lr", "cancer", "probabilities")])
    np.testing.assert_allclose(probabilities, hand.predict_proba(frame), atol=1e-5)
    sure = np.abs(hand.predict_proba(frame)[:, 1] - 0.5) > 1e-4
    np.testing.assert_array_equal(_predict(con, "cancer_lr", "cancer")[sure], hand.predict(frame)[sure])
    assert result["accuracy"] == pytest.approx(M.accuracy_score(y[valid], hand.predict(frame.iloc[valid])), abs=1e-9)
    assert result["roc_auc"] == pytest.approx(M.roc_auc_score(y[valid], hand.predict_proba(frame.iloc[valid])[:, 1]),
                                              abs=1e-4)
    recorded = con.execute("SELECT input, rows, options->>'rows', fingerprint FROM modelsql.evaluations "
                           "WHERE name = 'cancer_lr'").fetchall()
    assert recorded == [("SELECT * FROM cancer ORDER BY id", len(valid), "validation", recorded[0][3])]
    props = {r[2]: r[5] for r in con.execute("DESCRIBE MODEL cancer_lr").fetchall() if r[0] == "property"}
    assert props["model_type"] == "logistic_reg" and props["target"] == "y" and props["training_rows"] == str(len(train))
    assert props["hyperparameters"] == '{"C": 0.5}' and props["query"] == "SELECT * FROM cancer ORDER BY id"
    assert con.execute("SELECT (options['hyperparameters']::JSON)->>'C' FROM modelsql.model_versions "
                       "WHERE name = 'cancer_lr'").fetchall() == [("0.5",)]  # JSON, read by plain SQL
    inputs = [r[2] for r in con.execute("DESCRIBE MODEL cancer_lr").fetchall() if r[0] == "input"]
    assert inputs == features  # the key column id is never fed
    assert props["features"] == ", ".join(features)  # one input per column, named after it
    shown = {r[0]: r[6] for r in con.execute("SHOW MODELS").fetchall()}
    assert shown["cancer_lr"] == ", ".join(features)
    assert con.execute("SELECT features FROM modelsql.models WHERE name = 'cancer_lr'").fetchone()[0] == features


def test_text_columns_are_one_hot_encoded_and_an_unseen_category_predicts(con) -> None:
    con.execute("CREATE MODEL iris_rf WITH (model_type = 'random_forest_classifier', target = y, n_estimators = 15, "
                "max_depth = 3, validation = 'none') AS SELECT * FROM iris")
    columns = ["f0", "f1", "f2", "f3", "colour"]
    frame = _frame(con, "iris", columns)
    y = np.array([r[0] for r in con.execute("SELECT y FROM iris ORDER BY id").fetchall()]).astype(np.int64)
    hand = _hand(Pipeline([("preprocess", ColumnTransformer([
        ("numeric", "passthrough", columns[:4]),
        ("categorical", OneHotEncoder(handle_unknown="ignore", sparse_output=False), ["colour"])])),
        ("model", RandomForestClassifier(n_estimators=15, max_depth=3, random_state=0))]), frame, y)
    np.testing.assert_array_equal(_predict(con, "iris_rf", "iris"), hand.predict(frame))
    unseen = con.execute("SELECT label FROM PREDICT(MODEL iris_rf, (SELECT 5.1 AS f0, 3.5 AS f1, 1.4 AS f2, "
                         "0.2 AS f3, 'purple' AS colour))").fetchone()[0]
    probe = frame.iloc[:1].copy()
    probe.loc[:, ["f0", "f1", "f2", "f3", "colour"]] = [5.1, 3.5, 1.4, 0.2, "purple"]
    assert unseen == hand.predict(probe)[0]
    assert con.execute("SELECT options->>'rows' FROM modelsql.evaluations WHERE name = 'iris_rf'").fetchall() == \
        [("training",)]


def test_a_regressor_with_a_sequential_split(con) -> None:
    row = con.execute("CREATE MODEL diabetes_gb WITH (model_type = 'boosted_tree_regressor', target = y, "
                      "n_estimators = 30, validation = 'seq') AS SELECT * FROM diabetes ORDER BY id").fetchone()
    features = [f"f{i}" for i in range(10)]
    frame = _frame(con, "diabetes", features)
    y = np.array([r[0] for r in con.execute("SELECT y FROM diabetes ORDER BY id").fetchall()])
    cut = len(y) - int(np.ceil(0.2 * len(y)))
    hand = _hand(Pipeline([("preprocess", ColumnTransformer([("numeric", "passthrough", features)])),
                           ("model", GradientBoostingRegressor(n_estimators=30, random_state=0))]),
                 frame.iloc[:cut], y[:cut])
    np.testing.assert_allclose(_predict(con, "diabetes_gb", "diabetes", "prediction").reshape(-1),
                               hand.predict(frame), rtol=1e-5, atol=1e-3)
    assert row[3:5] == (cut, len(y) - cut)


def test_estimator_class_names_kmeans_and_mlp(con) -> None:
    con.execute("CREATE MODEL iris_km WITH (model_type = 'kmeans', n_clusters = 3, n_init = 2, "
                "features = (f0, f1, f2, f3)) AS SELECT * FROM iris")
    frame = _frame(con, "iris", ["f0", "f1", "f2", "f3"])
    hand = _hand(Pipeline([("preprocess", ColumnTransformer([("numeric", StandardScaler(), list(frame.columns))])),
                           ("model", KMeans(n_clusters=3, n_init=2, random_state=0))]), frame, None)
    np.testing.assert_array_equal(_predict(con, "iris_km", "iris"), hand.predict(frame))
    assert con.execute("SELECT count(*) FROM modelsql.evaluations WHERE name = 'iris_km'").fetchone() == (0,)
    con.execute("CREATE MODEL iris_mlp WITH (model_type = 'MLPClassifier', target = y, hidden_layer_sizes = (8, 4), "
                "max_iter = 50, validation = 'none', features = (f0, f1, f2, f3)) AS SELECT * FROM iris")
    hand = _hand(Pipeline([("preprocess", ColumnTransformer([("numeric", StandardScaler(), list(frame.columns))])),
                           ("model", MLPClassifier(hidden_layer_sizes=(8, 4), max_iter=50, random_state=0))]),
                 frame, np.array([r[0] for r in con.execute("SELECT y FROM iris ORDER BY id").fetchall()]).astype(int))
    assert (_predict(con, "iris_mlp", "iris") == hand.predict(frame)).mean() > 0.98


def test_or_replace_makes_a_new_version_and_if_not_exists_trains_nothing(con) -> None:
    sql = "MODEL iris_dt WITH (model_type = 'decision_tree_classifier', target = y, max_depth = 2) AS SELECT * FROM iris"
    con.execute(f"CREATE {sql}")
    assert con.execute(f"CREATE MODEL IF NOT EXISTS {sql.removeprefix('MODEL ')}").rowcount == 0
    with pytest.raises(modelsql.IntegrityError) as err:
        con.execute(f"CREATE {sql}")
    assert err.value.code == "duplicate_model"
    assert con.execute(f"CREATE OR REPLACE {sql}").fetchone()[:2] == ("iris_dt", 2)
    assert con.execute("SELECT count(*) FROM modelsql.evaluations WHERE name = 'iris_dt'").fetchone() == (2,)


def test_a_parameter_in_the_query_and_rows_with_nulls_skipped(con) -> None:
    con.execute("CREATE TABLE holes AS SELECT * REPLACE (CASE WHEN id % 10 = 0 THEN NULL ELSE f0 END AS f0) FROM iris")
    with pytest.raises(modelsql.DataError) as err:
        con.execute("CREATE MODEL holes_lr WITH (model_type = 'logistic_reg', target = y) AS SELECT * FROM holes")
    assert err.value.code == "null_value" and '"f0"' in str(err.value) and "15 of 150" in str(err.value)
    row = con.execute("CREATE MODEL holes_lr WITH (model_type = 'logistic_reg', target = y, on_null = 'skip', "
                      "validation = 'none') AS SELECT * FROM holes WHERE f1 > ?", [2.5]).fetchone()
    expected = con.execute("SELECT count(*) FROM holes WHERE f1 > 2.5 AND f0 IS NOT NULL").fetchone()[0]
    assert row[3] == expected


BAD = [
    ("WITH (target = y) AS SELECT * FROM iris", modelsql.ProgrammingError, "missing_option", "model_type is required"),
    ("WITH (model_type = 'logistc_reg', target = y) AS SELECT * FROM iris", modelsql.ProgrammingError,
     "unknown_model_type", 'Did you mean "logistic_reg"'),
    ("WITH (model_type = 'StandardScaler', target = y) AS SELECT * FROM iris", modelsql.NotSupportedError,
     "unknown_model_type", "transformer"),
    ("WITH (model_type = 'logistic_reg', target = y, depth = 3) AS SELECT * FROM iris", modelsql.ProgrammingError,
     "unknown_hyperparameter", "has no hyper-parameter 'depth'"),
    ("WITH (model_type = 'logistic_reg', target = y, data_split_method = 'random') AS SELECT * FROM iris",
     modelsql.ProgrammingError, "unknown_hyperparameter", "BigQuery ML's option; here write validation = "),
    ("WITH (model_type = 'logistic_reg', target = y, l2_reg = 0.5) AS SELECT * FROM iris",
     modelsql.ProgrammingError, "unknown_hyperparameter", "here write C, the inverse of the regularisation strength"),
    ("WITH (model_type = 'ridge_reg', target = f0, l2_reg = 0.5) AS SELECT * FROM iris",
     modelsql.ProgrammingError, "unknown_hyperparameter", "here write alpha"),
    ("WITH (model_type = 'logistic_reg', target = y, C = -1) AS SELECT * FROM iris", modelsql.ProgrammingError,
     "invalid_hyperparameter", "'C' parameter of LogisticRegression"),
    ("WITH (model_type = 'logistic_reg') AS SELECT * FROM iris", modelsql.ProgrammingError, "missing_option",
     "target is required"),
    ("WITH (model_type = 'kmeans', target = y) AS SELECT * FROM iris", modelsql.ProgrammingError, "invalid_option",
     "clusterer"),
    ("WITH (model_type = 'logistic_reg', target = yy) AS SELECT * FROM iris", modelsql.ProgrammingError,
     "column_not_found", 'Did you mean "y"'),
    ("WITH (model_type = 'linear_reg', target = colour) AS SELECT * FROM iris", modelsql.DataError, "invalid_target",
     "a regressor predicts numbers"),
    ("WITH (model_type = 'logistic_reg', target = f0) AS SELECT * FROM iris", modelsql.DataError, "invalid_target",
     "not a whole number"),
    ("WITH (model_type = 'logistic_reg', target = y) AS SELECT *, DATE '2024-01-01' AS d FROM iris",
     modelsql.NotSupportedError, "wrong_column_type", 'column "d" is DATE'),
    ("WITH (model_type = 'logistic_reg', target = y) AS SELECT * FROM iris WHERE y = 1", modelsql.DataError,
     "one_class", "one class"),
    ("WITH (model_type = 'logistic_reg', target = y, validation = 'random') AS SELECT * FROM iris LIMIT 1",
     modelsql.DataError, "too_few_rows", "too few to hold out"),
    ("WITH (model_type = 'logistic_reg', target = y, validation = 1.5) AS SELECT * FROM iris",
     modelsql.ProgrammingError, "invalid_option", "or a fraction"),
    ("WITH (model_type = 'logistic_reg', target = y) AS SELECT * FROM nowhere", modelsql.ProgrammingError,
     "catalog_error", "nowhere"),
]


BAD += [
    ("WITH (model_type = 'logistic_reg', target = y) AS SELECT f0 AS a, f1 AS \"A\", y FROM iris",
     modelsql.ProgrammingError, "duplicate_column", 'two columns named "a" and "A"'),
    # an MLP's graph holds its classes as 32-bit integers: the advice was to accept the mismatch (a broken model)
    ("WITH (model_type = 'mlp_classifier', target = big) AS SELECT f0, f2, y::INT % 2 * 3000000000 AS big FROM iris",
     modelsql.DataError, "conversion_mismatch", "cast the TARGET to VARCHAR"),
    # the TARGET's type as DuckDB names it (it was Arrow's: date32[day], list<l: int64>)
    ("WITH (model_type = 'logistic_reg', target = d) AS SELECT f0, DATE '2020-01-01' + y::INT AS d FROM iris",
     modelsql.DataError, "invalid_target", "TARGET d is DATE;"),
    # values scikit-learn's parameter validation lets through, refused by the fit: training_failed before
    ("WITH (model_type = 'random_forest_classifier', target = y, max_depth = 99999999999999999999) AS SELECT * "
     "FROM iris", modelsql.ProgrammingError, "invalid_hyperparameter", "cannot use the hyper-parameters"),
    ("WITH (model_type = 'mlp_classifier', target = y, hidden_layer_sizes = (4, 'a')) AS SELECT * FROM iris",
     modelsql.ProgrammingError, "invalid_hyperparameter", '{"hidden_layer_sizes": [4, "a"]}'),
    # predicted as float32, 1e8 + (0, 1, 2) are all 1e8: r2 -1.5 where the estimator by hand had 1.0
    ("WITH (model_type = 'linear_reg', target = big) AS SELECT f0, f2, y + 1e8 AS big FROM iris", modelsql.DataError,
     "precision_loss", "TARGET big loses precision as float32"),
    # class labels a 64-bit integer cannot hold became INT64_MIN (a class no row had), or a raw ArrowInvalid
    ("WITH (model_type = 'logistic_reg', target = big) AS SELECT f0, (y::INT % 2 * 1e30)::HUGEINT AS big FROM iris",
     modelsql.DataError, "invalid_target", "past the 64-bit integer range (1e+30)"),
    ("WITH (model_type = 'logistic_reg', target = big) AS SELECT f0, y::INT % 2 * 1e20 AS big FROM iris",
     modelsql.DataError, "invalid_target", "past the 64-bit integer range (1e+20)"),
    ("WITH (model_type = 'logistic_reg', target = big) AS SELECT f0, (y::INT % 2 * 1e19)::UBIGINT AS big FROM iris",
     modelsql.DataError, "invalid_target", "past the 64-bit integer range (1e+19)"),
    # a query holding nextval is run (not only bound) when DuckDB makes a relation of it, and its second "A" comes
    # back renamed A_1: the names are DESCRIBE's
    ("WITH (model_type = 'logistic_reg', target = y) AS SELECT nextval('bad_ids') AS id, f0 AS a, f1 AS \"A\", y "
     "FROM iris", modelsql.ProgrammingError, "duplicate_column", 'two columns named "a" and "A"'),
    ("WITH (model_type = 'VotingClassifier', target = y) AS SELECT * FROM iris", modelsql.NotSupportedError,
     "unknown_model_type", "built from other estimators"),
    ("WITH (model_type = 'histgradientboostingclassifier', target = y) AS SELECT * FROM iris",
     modelsql.NotSupportedError, "conversion_failed", "use boosted_tree_classifier"),
    ("WITH (model_type = 'IsolationForest') AS SELECT * FROM iris", modelsql.NotSupportedError, "unknown_model_type",
     "not a classifier, regressor or clusterer"),
    ("WITH (model_type = 'linear_reg', target = y) AS SELECT f0 + 1.7e9 AS t, y FROM iris", modelsql.DataError,
     "precision_loss", 'column "t" loses precision as float32'),
    ("WITH (model_type = 'linear_reg', target = y) AS SELECT CASE WHEN id = 3 THEN 'nan'::DOUBLE ELSE f0 END AS f, "
     "y FROM iris", modelsql.DataError, "invalid_value", 'column "f" is NaN'),
    ("WITH (model_type = 'logistic_reg', target = y) AS SELECT f0 AS label, y FROM iris", modelsql.ProgrammingError,
     "invalid_feature", 'may not be named "label"'),
    ("WITH (model_type = 'logistic_reg', target = y) AS SELECT f0, uuid() AS u, y FROM iris",
     modelsql.NotSupportedError, "wrong_column_type", 'column "u" is UUID'),
    ("WITH (model_type = 'logistic_reg', target = y, validation_size = 0.3) AS SELECT * FROM iris",
     modelsql.ProgrammingError, "invalid_option", "validation_size applies to validation = 'random' or 'seq'"),
]


def _catalog(con) -> tuple:
    return (con.execute("SELECT name, version FROM modelsql.model_versions ORDER BY ALL").fetchall(),
            con.execute("SELECT count(*) FROM modelsql.evaluations").fetchone(),
            con.execute("SELECT count(*) FROM modelsql.model_origins").fetchone())


@pytest.mark.parametrize("body,cls,code,text", BAD, ids=[b[2] + str(i) for i, b in enumerate(BAD)])
def test_bad_input_is_a_clear_error_that_changes_nothing(con, body: str, cls, code: str, text: str) -> None:
    con.execute("CREATE SEQUENCE IF NOT EXISTS bad_ids")
    before = _catalog(con)
    con.commit()
    with pytest.raises(cls) as err:
        con.execute(f"CREATE MODEL bad {body}")
    assert err.value.code == code and text in str(err.value), str(err.value)
    con.rollback()  # a failed query aborts the transaction, as any failed statement does in DuckDB
    assert _catalog(con) == before


def test_a_failure_leaves_the_open_transaction_to_the_user(con) -> None:
    con.execute("CREATE TABLE journal (x INTEGER)")
    con.commit()
    con.execute("INSERT INTO journal VALUES (1)")
    with pytest.raises(modelsql.ProgrammingError):
        con.execute("CREATE MODEL j WITH (model_type = 'logistic_reg', target = x) AS SELECT x FROM journal")
    con.rollback()
    assert con.execute("SELECT count(*) FROM journal").fetchone() == (0,)


def test_the_query_runs_once_and_its_rows_are_what_the_origin_fingerprints(con) -> None:
    """The training rows' fingerprint is taken of the rows read, not of the query run again: a sequence in the
    query moves once per row, a query that would fail a second time trains (in an open transaction too, which a
    failed second run used to abort), and the recorded fingerprint is that of an EVALUATE of the rows."""
    con.execute("CREATE TABLE once AS SELECT i AS id, (i % 7) / 7.0 AS a, (i % 3 = 0)::INT AS y FROM range(90) r(i)")
    con.execute("CREATE SEQUENCE reads START 1")
    con.commit()
    con.execute("INSERT INTO once VALUES (1000, 0.5, 1)")  # an open transaction the statement joins
    con.execute("CREATE MODEL once_m WITH (model_type = 'logistic_reg', target = y, validation = 'none') AS "
                "SELECT a, CASE WHEN nextval('reads') > 91 THEN error('read twice') ELSE y END AS y FROM once")
    assert con.execute("SELECT currval('reads')").fetchone() == (91,)
    digest = con.execute("SELECT digest FROM modelsql.model_origins WHERE name = 'once_m'").fetchone()[0]
    con.execute("EVALUATE MODEL once_m ON (SELECT a, y FROM once) TARGET y")
    evaluated = con.execute("SELECT fingerprint FROM modelsql.evaluations WHERE name = 'once_m' "
                            "ORDER BY evaluation DESC LIMIT 1").fetchone()[0]
    assert digest.startswith("rows:91:") and digest == "rows:" + evaluated
    con.commit()
    assert con.execute("SELECT count(*) FROM once").fetchone() == (91,)


def test_the_origin_fingerprint_equals_evaluates_whatever_the_columns_types(con) -> None:
    """The rows' hashes are taken as DuckDB reads them, in their own types: columns that do not come back from Arrow
    as they were (a TIMETZ's offset, a BIT, a UHUGEINT past 2**127) beside a UUID and an ENUM fingerprint as an
    EVALUATE of the same query does (they differed when the rows were hashed after the round trip)."""
    con.execute("CREATE TYPE tone AS ENUM ('dark', 'light')")
    q = ("SELECT (i % 7)::DOUBLE AS x, (i % 3 = 0)::INT AS y, '01:02:03+05:30'::TIMETZ AS tz, "
         "(i % 2)::VARCHAR::BIT AS b, (340282366920938463463374607431768211455::UHUGEINT - i::UHUGEINT) AS big, "
         "md5(i::VARCHAR)::UUID AS u, (['dark', 'light'][i % 2 + 1])::tone AS s FROM range(60) r(i)")
    con.execute(f"CREATE MODEL typed WITH (model_type = 'logistic_reg', target = y, features = (x), "
                f"validation = 'none') AS {q}")
    digest = con.execute("SELECT digest FROM modelsql.model_origins WHERE name = 'typed'").fetchone()[0]
    con.execute(f"EVALUATE MODEL typed ON ({q}) TARGET y")
    evaluated = con.execute("SELECT fingerprint FROM modelsql.evaluations WHERE name = 'typed' "
                            "ORDER BY evaluation DESC LIMIT 1").fetchone()[0]
    assert digest == "rows:" + evaluated
    con.commit()


def test_a_users_macro_named_hash_does_not_replace_the_rows_hash(tmp_path) -> None:
    """The row hash of fingerprints is DuckDB's own function named whole: a macro named hash changes nothing (it
    made CREATE MODEL ... AS and EVALUATE fail with a binder error)."""
    c = modelsql.connect(str(tmp_path / "macro.duckdb"))
    c.autocommit = True
    c.execute("CREATE TABLE t AS SELECT (i % 7)::DOUBLE AS a, (i % 3 = 0)::INT AS y FROM range(60) r(i)")
    c.execute("CREATE MACRO hash(a) AS 42")
    c.execute("CREATE MODEL m WITH (model_type = 'logistic_reg', target = y, validation = 'none') AS SELECT * FROM t")
    c.execute("EVALUATE MODEL m ON (SELECT * FROM t) TARGET y")
    digest = c.execute("SELECT digest FROM modelsql.model_origins").fetchone()[0]
    fingerprints = {r[0] for r in c.execute("SELECT fingerprint FROM modelsql.evaluations").fetchall()}
    assert fingerprints == {digest.removeprefix("rows:")} and digest.startswith("rows:60:")
    c.close()


def test_enum_features_and_whole_number_float_targets(con) -> None:
    con.execute("CREATE TYPE shade AS ENUM ('red', 'green', 'blue')")
    con.execute("CREATE TABLE shaded AS SELECT id, f0, f2, colour::shade AS colour, y::DOUBLE AS y FROM iris")
    row = con.execute("CREATE MODEL shaded_lr WITH (model_type = 'logistic_reg', target = y) "
                      "AS SELECT * FROM shaded").fetchone()
    assert row[2] == "logistic_reg"
    labels = con.execute("SELECT label FROM PREDICT(MODEL shaded_lr, TABLE shaded)").fetchall()
    assert {r[0] for r in labels} <= {0, 1, 2}
    metrics = con.execute("EVALUATE MODEL shaded_lr ON TABLE shaded TARGET y").fetchone()
    assert 0.8 < metrics[5] <= 1.0  # accuracy


def test_a_boolean_target_trains_a_model_predicting_booleans(con) -> None:
    """As BigQuery ML's predicted label of a BOOL label column: BOOLEAN, equal to the hand-fitted estimator's."""
    con.execute("CREATE TABLE cancer_bool AS SELECT * REPLACE (y::BOOLEAN AS y) FROM cancer")
    con.execute("CREATE MODEL cancer_bool_lr WITH (model_type = 'logistic_reg', target = y, validation = 'none') "
                "AS SELECT * FROM cancer_bool")
    cur = con.execute("SELECT label FROM PREDICT(MODEL cancer_bool_lr, TABLE cancer_bool) ORDER BY id")
    assert cur.description[0][1] == "BOOLEAN"
    got = np.array([r[0] for r in cur.fetchall()])
    frame = _frame(con, "cancer_bool", [f"f{i}" for i in range(8)] + ["y"])
    want = _hand(Pipeline([("scale", StandardScaler()), ("model", LogisticRegression())]),
                 frame[[f"f{i}" for i in range(8)]], frame["y"].to_numpy())
    assert got.dtype == bool and (got == want.predict(frame[[f"f{i}" for i in range(8)]])).mean() > 0.99
    evaluated = con.execute("EVALUATE MODEL cancer_bool_lr ON TABLE cancer_bool TARGET y").fetchone()
    assert evaluated[12] == "True"  # the positive class
    for only in (True, False):  # a classifier fitted on one boolean class predicts it as a boolean too
        con.import_model("one_class", DecisionTreeClassifier().fit(frame[["f0"]].to_numpy(), np.full(len(frame), only)),
                         features=["f0"], replace=True)
        assert con.execute("SELECT DISTINCT label FROM PREDICT(MODEL one_class, TABLE cancer_bool)").fetchall() == [
            (only,)]


def test_classes_that_are_never_predicted_still_give_log_loss_and_roc_auc(con) -> None:
    con.execute("CREATE TABLE rare AS SELECT i AS id, (i * 0.37) % 1 AS a, (i * 0.61) % 1 AS b, (i % 20 = 0)::INT AS y "
                "FROM range(600) r(i)")
    cur = con.execute("CREATE MODEL rare_nb WITH (model_type = 'naive_bayes', target = y) AS SELECT * FROM rare")
    row = dict(zip([d[0] for d in cur.description], cur.fetchone()))
    assert row["log_loss"] is not None and row["roc_auc"] is not None


def test_a_clusterer_is_not_evaluated_against_a_target(con) -> None:
    con.execute("CREATE MODEL iris_km2 WITH (model_type = 'kmeans', n_clusters = 3, n_init = 1, "
                "features = (f0, f1)) AS SELECT * FROM iris")
    with pytest.raises(modelsql.ProgrammingError) as err:
        con.execute("EVALUATE MODEL iris_km2 ON TABLE iris TARGET y")
    assert err.value.code == "invalid_target" and "clusterer" in str(err.value)


def test_every_version_records_its_origin(con) -> None:
    con.execute("CREATE MODEL cancer_origin WITH (model_type = 'logistic_reg', target = y, validation = 'none') "
                "AS SELECT * FROM cancer ORDER BY id")
    origin = con.execute("SELECT origin, source, digest FROM modelsql.model_origins "
                         "WHERE name = 'cancer_origin'").fetchone()
    assert origin[:2] == ("query", "SELECT * FROM cancer ORDER BY id") and origin[2].startswith("rows:569:")
    edges = con.execute("SELECT kind, relation FROM modelsql.lineage WHERE name = 'cancer_origin'").fetchall()
    assert edges == [("model", "query")]


def test_float32_rounding_that_merges_values_is_refused_even_with_an_outlier(con):
    con.execute("CREATE TABLE stamps AS SELECT CASE WHEN i = 0 THEN 0 ELSE 1767225600 + i % 100 END::BIGINT AS ts, "
                "(i % 100 >= 50)::INT AS y FROM range(300) t(i)")
    with pytest.raises(modelsql.DataError) as err:
        con.execute("CREATE MODEL stamped WITH (model_type = 'decision_tree_classifier', target = y) "
                    "AS SELECT ts, y FROM stamps")
    assert err.value.code == "precision_loss" and "101 distinct values become" in str(err.value)
    con.rollback()


def test_a_wide_text_column_stays_sparse_and_predicts_as_the_dense_pipeline(con) -> None:
    """A text column of 400 values one-hot encodes to a sparse matrix for an estimator that fits on one (dense
    it would be rows x 400 float64s), and the model predicts what the dense pipeline fitted by hand does; an
    estimator that takes no sparse input, or that scikit-learn fits otherwise on sparse rows (gradient boosting's
    classifier), or whose sparse model skl2onnx cannot convert (k-nearest neighbours), gets dense rows."""
    import scipy.sparse

    from modelsql.estimators import ColumnKinds, build_pipeline, resolve_model_type

    rng = np.random.default_rng(3)
    n = 6000
    code = rng.integers(0, 400, n)
    table = pa.table({"id": np.arange(n), "x": rng.normal(size=n), "city": np.array([f"c{v}" for v in code]),
                      "y": ((code % 5 < 2) ^ (rng.random(n) < 0.1)).astype(np.int64)})
    con.register("wide_arrow", table)
    con.execute("CREATE TABLE wide AS SELECT * FROM wide_arrow ORDER BY id")
    con.unregister("wide_arrow")
    con.execute("CREATE MODEL wide_lr WITH (model_type = 'logistic_reg', target = y, validation = 'none') "
                "AS SELECT * FROM wide ORDER BY id")
    frame = _frame(con, "wide", ["x", "city"])
    y = table.column("y").to_numpy()
    hand = _hand(Pipeline([("preprocess", ColumnTransformer([
        ("numeric", StandardScaler(), ["x"]),
        ("categorical", OneHotEncoder(handle_unknown="ignore", sparse_output=False), ["city"])])),
        ("model", LogisticRegression(random_state=0))]), frame, y)
    probabilities = np.array([list(p) for p in _predict(con, "wide_lr", "wide", "probabilities")])
    np.testing.assert_allclose(probabilities, hand.predict_proba(frame), atol=1e-5)
    kinds = ColumnKinds(("x",), ("city",))
    for model_type, sparse in (("logistic_reg", True), ("GaussianNB", False), ("boosted_tree_classifier", False),
                               ("KNeighborsClassifier", False)):
        chosen = resolve_model_type(model_type)
        assert chosen.accepts_sparse is sparse
        encoded = build_pipeline(kinds, None, chosen).steps[0][1].fit_transform(frame)
        assert scipy.sparse.issparse(encoded) is sparse and encoded.shape == (n, 401)


def test_a_conversion_that_strays_from_the_estimator_is_refused(con, tmp_path):
    """skl2onnx 1.20 converts a binary LinearDiscriminantAnalysis's probabilities as expit(2 d) where
    scikit-learn gives expit(d) (labels agree): a model trained in SQL must predict what its estimator predicts,
    and an import of such a classifier is refused unless accepted."""
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis

    rng = np.random.default_rng(0)
    a = rng.normal(size=500)
    y = ((a + rng.normal(size=500)) > 0.5).astype(int)
    con.register("lda_arrow", pa.table({"a": a, "y": y}))
    con.execute("CREATE TABLE lda_rows AS SELECT * FROM lda_arrow")
    con.unregister("lda_arrow")
    with pytest.raises(modelsql.errors.DataError) as err:
        con.execute("CREATE MODEL lda WITH (model_type = 'LinearDiscriminantAnalysis', target = y, "
                    "validation = 'none') AS SELECT * FROM lda_rows")
    assert err.value.code == "conversion_mismatch" and "more than the 0.001 allowed" in str(err.value)
    assert con.execute("SELECT count(*) FROM modelsql.models WHERE name = 'lda'").fetchone()[0] == 0
    fitted = LinearDiscriminantAnalysis().fit(a[:, None], y)
    with pytest.raises(modelsql.errors.DataError) as err:
        con.import_model("lda", fitted, features=["a"])
    assert err.value.code == "conversion_mismatch" and "accept_mismatch=True" in str(err.value)
    con.import_model("lda", fitted, features=["a"], accept_mismatch=True)  # the user's call: recorded
    check = [r[5] for r in con.execute("DESCRIBE MODEL lda").fetchall() if r[2] == "conversion_check"][0]
    assert "max abs diff 0." in check
    # the same estimator of three classes converts closely, and trains
    con.execute("CREATE MODEL lda3 WITH (model_type = 'LinearDiscriminantAnalysis', target = y, validation = 'none') "
                "AS SELECT f0, f1, f2, f3, y FROM iris")


def test_ties_and_accepted_mismatches(con):
    """k-nearest neighbours over tied distances pick other neighbours in float32 (a regressor 0.8 off): refused,
    unless accept_mismatch keeps it, recorded; a forest's exact half-and-half vote is a tie either label breaks
    (scikit-learn's 0.5 / 0.5 is ONNX's 0.49999994 / 0.50000006), not a mismatch."""
    tied = "SELECT (i % 10)::DOUBLE AS x, (i % 3)::DOUBLE AS y FROM range(100) r(i)"
    with pytest.raises(modelsql.errors.DataError) as err:
        con.execute(f"CREATE MODEL knn_tied WITH (model_type = 'knn_regressor', target = y) AS {tied}")
    assert err.value.code == "conversion_mismatch" and "accept_mismatch = true" in str(err.value)
    con.execute(f"CREATE MODEL knn_tied WITH (model_type = 'knn_regressor', target = y, accept_mismatch = true) "
                f"AS {tied}")
    check = [r[5] for r in con.execute("DESCRIBE MODEL knn_tied").fetchall() if r[2] == "conversion_check"][0]
    assert "max abs diff 0.8" in check
    con.execute("CREATE MODEL halves WITH (model_type = 'ExtraTreesClassifier', target = y, n_estimators = 20, "
                "validation = 'none') AS SELECT f0, y FROM cancer")


def test_predict_refuses_nan_and_infinities_where_the_model_was_trained_on_finite_numbers(con):
    """The estimator refuses them at training and scikit-learn at predict; ONNX Runtime would answer NaN
    probabilities and a label of them. An imputing model reads a NaN as a NULL, not an infinity."""
    con.execute("CREATE MODEL finite WITH (model_type = 'logistic_reg', target = y) AS SELECT f0, f1, y FROM cancer")
    for value in ("'NaN'::DOUBLE", "'inf'::DOUBLE", "'-inf'::DOUBLE"):
        with pytest.raises(modelsql.errors.DataError) as err:
            con.execute(f"SELECT label FROM PREDICT(MODEL finite, (SELECT {value} AS f0, 1.0 AS f1))").fetchall()
        assert err.value.code == "invalid_value" and '"f0"' in str(err.value)
        con.rollback()  # (a failed PREDICT aborts the transaction; CREATE MODEL above committed the tables)
    con.execute("CREATE MODEL finite_imp WITH (model_type = 'logistic_reg', target = y, on_null = 'impute') "
                "AS SELECT f0, f1, y FROM cancer")
    nan = con.execute("SELECT probabilities FROM PREDICT(MODEL finite_imp, (SELECT 'NaN'::DOUBLE AS f0, 1.0 AS f1))")
    null = con.execute("SELECT probabilities FROM PREDICT(MODEL finite_imp, (SELECT NULL::DOUBLE AS f0, 1.0 AS f1))")
    assert nan.fetchall() == null.fetchall()
    with pytest.raises(modelsql.errors.DataError):
        con.execute("SELECT label FROM PREDICT(MODEL finite_imp, (SELECT 'inf'::DOUBLE AS f0, 1.0 AS f1))").fetchall()
    con.rollback()


def test_a_misspelt_option_is_named_as_such_not_as_a_hyper_parameter(con):
    with pytest.raises(modelsql.errors.ProgrammingError) as err:
        con.execute("CREATE MODEL misspelt WITH (model_type = 'logistic_reg', target = y, on_nul = 'skip') "
                    "AS SELECT f0, y FROM cancer")
    assert err.value.code == "unknown_option" and 'Did you mean "on_null"?' in str(err.value)
    con.execute("CREATE MODEL misspelt WITH (model_type = 'logistic_reg', target = y, c = 0.5) "  # C, any case
                "AS SELECT f0, y FROM cancer")


def test_a_graph_whose_outputs_contradict_their_declared_shape_is_refused(con):
    """skl2onnx 1.20 declares a binary RidgeClassifier's scores in a pipeline [N, 2] and gives [N, 1]: every
    PREDICT would fail, so the conversion is refused and nothing is stored; with three classes it is consistent."""
    with pytest.raises(modelsql.errors.NotSupportedError) as err:
        con.execute("CREATE MODEL ridge2 WITH (model_type = 'RidgeClassifier', target = y) "
                    "AS SELECT f0, f1, y FROM cancer")
    assert err.value.code == "conversion_failed" and "'probabilities' of rows [2] but gives rows [1]" in str(err.value)
    assert con.execute("SELECT count(*) FROM modelsql.models WHERE name = 'ridge2'").fetchone()[0] == 0
    con.execute("CREATE MODEL ridge3 WITH (model_type = 'RidgeClassifier', target = y) AS SELECT f0, f1, y FROM iris")


def test_a_linear_svc_trains_and_imports_in_a_pipeline(con) -> None:
    """skl2onnx's Pipeline parser asks every classifier for a ZipMap, which LinearSVC's converter does not have:
    both paths give the converter an entry of its own, and the scores are the decision function's."""
    from sklearn.svm import LinearSVC

    con.execute("CREATE MODEL iris_svc WITH (model_type = 'LinearSVC', target = y, validation = 'none', "
                "features = (f0, f1, f2, f3)) AS SELECT * FROM iris")
    frame = _frame(con, "iris", ["f0", "f1", "f2", "f3"])
    y = np.array([r[0] for r in con.execute("SELECT y FROM iris ORDER BY id").fetchall()]).astype(int)
    hand = _hand(Pipeline([("preprocess", ColumnTransformer([("numeric", StandardScaler(), list(frame.columns))])),
                           ("model", LinearSVC(random_state=0))]), frame, y)
    np.testing.assert_array_equal(_predict(con, "iris_svc", "iris"), hand.predict(frame))
    scores = np.array([list(r[0]) for r in con.execute(
        "SELECT probabilities FROM PREDICT(MODEL iris_svc, TABLE iris) ORDER BY id").fetchall()])
    np.testing.assert_allclose(scores, hand.decision_function(frame), rtol=1e-4, atol=1e-4)
    x = frame.to_numpy()
    con.import_model("iris_svc_file", _hand(Pipeline([("scale", StandardScaler()), ("model", LinearSVC())]), x, y),
                     example_input=x)
    got = con.execute("SELECT label FROM PREDICT(MODEL iris_svc_file, (SELECT f0, f1, f2, f3 FROM iris ORDER BY id), "
                      "features = (f0, f1, f2, f3))").fetchall()
    assert [r[0] for r in got] == list(hand.predict(frame))


def test_two_classes_without_1_train_and_evaluate(con) -> None:
    """Classes 0 and 2: the validation EVALUATE takes 2 as the positive class (it raised KeyError: 1)."""
    row = con.execute("CREATE MODEL iris_02 WITH (model_type = 'logistic_reg', target = y, validation = 'none', "
                      "features = (f0, f1, f2, f3)) AS SELECT * FROM iris WHERE y <> 1")
    result = dict(zip([d[0] for d in row.description], row.fetchone()))
    assert result["positive"] == "2" and result["accuracy"] == 1.0 and result["roc_auc"] == 1.0


def test_a_trained_version_is_evaluated_on_its_own_target_without_target(con) -> None:
    """EVALUATE MODEL m ON TABLE t, and EVALUATE(MODEL m, TABLE t), read the column the version was trained to
    predict, as BigQuery ML's ML.EVALUATE reads the training's label column."""
    con.execute("CREATE MODEL iris_own WITH (model_type = 'logistic_reg', target = y, features = (f0, f1)) AS "
                "SELECT * FROM iris")
    named = con.execute("EVALUATE MODEL iris_own ON TABLE iris TARGET y").fetchone()
    own = con.execute("EVALUATE MODEL iris_own ON TABLE iris").fetchone()
    assert own[1:] == named[1:] and own[4] == 150
    assert con.execute("SELECT accuracy FROM EVALUATE(MODEL iris_own, TABLE iris)").fetchone()[0] == named[5]
    con.rollback()


def test_bigquery_mls_spelling_of_the_target(con) -> None:
    """OPTIONS (..., input_label_cols = ['y']) as BigQuery ML writes it: the target; two columns, or both spellings,
    are invalid_option."""
    row = con.execute("CREATE MODEL iris_bq OPTIONS (model_type = 'logistic_reg', input_label_cols = ['y'], "
                      "features = (f0, f1)) AS SELECT * FROM iris").fetchone()
    assert row[:2] == ("iris_bq", 1)
    props = {r[2]: r[5] for r in con.execute("DESCRIBE MODEL iris_bq").fetchall() if r[0] == "property"}
    assert props["target"] == "y"
    for options in ("input_label_cols = ['y', 'f2']", "input_label_cols = ['y'], target = y", "input_label_cols = []"):
        with pytest.raises(modelsql.ProgrammingError) as info:
            con.execute(f"CREATE MODEL iris_bq2 OPTIONS (model_type = 'logistic_reg', {options}) AS SELECT * FROM iris")
        assert info.value.code == "invalid_option" and "input_label_cols" in str(info.value)
        assert "not ()" not in str(info.value)  # (an empty list is named as one, however it was written)


def test_hyperparameters_are_kept_as_json_and_read_back_as_sql_wrote_them():
    from modelsql.estimators import hyperparameters_from_text, hyperparameters_text

    written = {"hidden_layer_sizes": (16, 8), "alpha": 0.001, "solver": "adam", "max_fun": None, "shuffle": True}
    text = hyperparameters_text(written)
    assert json.loads(text) == {"alpha": 0.001, "hidden_layer_sizes": [16, 8], "max_fun": None, "shuffle": True,
                                "solver": "adam"}
    assert hyperparameters_from_text(text) == written  # a parenthesised list comes back a tuple
    assert hyperparameters_from_text("{'C': 0.5, 'hidden_layer_sizes': (16,)}") == {  # as catalogs before kept them
        "C": 0.5, "hidden_layer_sizes": (16,)}


def test_a_model_trained_on_one_column_is_never_fed_another_by_position(con) -> None:
    """A model trained in SQL on one numeric column has one input of one value per row, which PREDICT's third rule
    (the input's numeric columns, by position) fed with any column, income as age; it binds by name, as a model
    of several columns does, and a missing column is column_not_found (EVALUATE records nothing)."""
    con.execute("CREATE TABLE people AS SELECT i AS person_id, (20 + i % 50)::DOUBLE AS age, "
                "(i * 997 % 100000)::DOUBLE AS income, (20 + i % 50 > 45) AS retired FROM range(300) t(i)")
    con.execute("CREATE MODEL retire WITH (model_type = 'logistic_reg', target = retired) AS SELECT age, retired "
                "FROM people")
    con.execute("CREATE MODEL retire_t TRANSFORM (ML.STANDARD_SCALER(age) OVER () AS age) "
                "WITH (model_type = 'logistic_reg', target = retired) AS SELECT age, retired FROM people")
    con.commit()
    evaluations = con.execute("SELECT count(*) FROM modelsql.evaluations").fetchone()
    for model in ("retire", "retire_t"):
        assert len(con.execute(f"SELECT label FROM PREDICT(MODEL {model}, (SELECT age FROM people))").fetchall()) == 300
        for sql in (f"SELECT label FROM PREDICT(MODEL {model}, (SELECT income FROM people))",
                    f"EVALUATE MODEL {model} ON (SELECT income, retired FROM people) TARGET retired"):
            with pytest.raises(modelsql.ProgrammingError, match='missing column\\(s\\) "age"') as err:
                con.execute(sql)
            assert err.value.code == "column_not_found"
            con.rollback()
    assert con.execute("SELECT count(*) FROM modelsql.evaluations").fetchone() == evaluations


def test_integers_past_float64s_exact_range_train_as_numbers(con) -> None:
    """A BIGINT feature past 2**53 and a UBIGINT regression target past 2**63 are read as float64 (rounded, as the
    model reads them anyway), where pyarrow's checked cast raised its own ArrowInvalid; a HUGEINT class label within
    int64 stays exact."""
    con.execute("CREATE TABLE wide_ints AS SELECT (i % 10)::DOUBLE AS a, (i % 2)::BIGINT * 1152921504606846976 + i "
                "AS big, ((i % 2) * 1e19)::UBIGINT + i AS far, (i % 3)::HUGEINT * 2305843009213693952 AS cls "
                "FROM range(300) t(i)")
    con.commit()
    cur = con.execute("CREATE MODEL wide_f WITH (model_type = 'logistic_reg', target = cls) "
                      "AS SELECT big, a, cls FROM wide_ints")
    labels = dict(zip([d[0] for d in cur.description], cur.fetchone()))["labels"]
    assert sorted(int(v) for v in labels) == [0, 2 ** 61, 2 ** 62]
    assert con.execute("CREATE MODEL wide_r WITH (model_type = 'linear_reg', target = far) "
                       "AS SELECT a, far FROM wide_ints").fetchone()[0] == "wide_r"
    con.commit()


def test_a_uuid_target_is_evaluated_as_the_text_classes_it_was_trained_on(con) -> None:
    """A UUID TARGET trains text classes; EVALUATE of its own training rows refused it (VARCHAR against UUID)."""
    con.execute("CREATE TABLE by_uuid AS SELECT (i % 10)::DOUBLE AS a, (CASE WHEN i % 10 > 4 THEN "
                "'00000000-0000-0000-0000-00000000000a' ELSE 'A0000000-0000-0000-0000-000000000001' END)::UUID AS u "
                "FROM range(200) t(i)")
    con.commit()
    created = con.execute("CREATE MODEL by_uuid_m WITH (model_type = 'logistic_reg', target = u, validation = 'none') "
                          "AS SELECT a, u FROM by_uuid").fetchone()
    cur = con.execute("EVALUATE MODEL by_uuid_m ON TABLE by_uuid")
    evaluated = dict(zip([d[0] for d in cur.description], cur.fetchone()))
    assert evaluated["accuracy"] == 1.0 and evaluated["rows"] == 200
    assert "a0000000-0000-0000-0000-000000000001" in created[-2]  # labels as DuckDB writes a UUID
    con.commit()


def test_regression_targets_that_float32_keeps_within_a_thousandth_of_their_spread_train(con) -> None:
    """Prices near 1e7 in cents and latitudes in a 1 km box round in float32 by under a thousandth of their spread:
    they train (the rule that refuses a feature merging 1% of its distinct values refused them as targets)."""
    con.execute("CREATE TABLE near AS SELECT (i % 13)::DOUBLE AS a, 9999000 + (i * 7919 % 200000) / 100.0 AS price, "
                "37 + (i * 7919 % 10000) / 1e6 AS lat FROM range(2000) t(i)")
    con.commit()
    for target in ("price", "lat"):
        row = con.execute(f"CREATE MODEL near_{target} WITH (model_type = 'linear_reg', target = {target}) "
                          f"AS SELECT a, {target} FROM near").fetchone()
        assert row[0] == f"near_{target}"
    con.commit()


def test_a_constant_column_of_a_value_float32_rounds_is_no_precision_loss(con) -> None:
    """A constant 0.1 (as a regression TARGET, and as a feature) has no spread; the standard deviation's own rounding
    (2.8e-17) was taken for one, and the float32 rounding of 0.1 for a loss against it."""
    con.execute("CREATE TABLE constant AS SELECT (i * 0.37 % 1)::FLOAT AS a, 0.1::DOUBLE AS c, i % 2 AS k "
                "FROM range(50) r(i)")
    con.commit()
    assert con.execute("CREATE MODEL constant_r WITH (model_type = 'linear_reg', target = c) "
                       "AS SELECT a, c FROM constant").fetchone()[0] == "constant_r"
    assert con.execute("CREATE MODEL constant_c WITH (model_type = 'logistic_reg', target = k) "
                       "AS SELECT a, c, k FROM constant").fetchone()[0] == "constant_c"
    con.commit()
