"""TUNE of a scikit-learn model type (issue 25, part 3): the same best configuration as Optuna driven by hand with the
same sampler and seed; a boosted model's trials share trees (warm_start) with results identical to training each
configuration alone; CREATE MODEL ... FROM STUDY refits the trial; bad input is a clear error."""

from __future__ import annotations

import json
import warnings

import numpy as np
import optuna
import pyarrow as pa
import pytest
from sklearn import metrics as M
from sklearn.compose import ColumnTransformer
from sklearn.datasets import load_breast_cancer
from sklearn.ensemble import GradientBoostingClassifier, RandomForestClassifier
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

import modelsql

FEATURES = [f"f{i}" for i in range(6)]


@pytest.fixture(scope="module")
def con(tmp_path_factory):
    c = modelsql.connect(str(tmp_path_factory.mktemp("tune_estimators") / "t.duckdb"))
    c.autocommit = True
    x, y = load_breast_cancer(return_X_y=True)
    c.register("arrow", pa.table({**{f: x[:, i] for i, f in enumerate(FEATURES)}, "y": y}))
    c.execute("CREATE TABLE cancer AS SELECT * FROM arrow")
    c.unregister("arrow")
    yield c
    c.close()


def _split(con, seed: int):
    """The rows TUNE trains and validates on: CREATE MODEL's 'random' split with the study seed."""
    frame = con.execute("SELECT * FROM cancer").fetch_arrow().to_pandas()
    train, valid = train_test_split(np.arange(len(frame)), test_size=0.2, random_state=seed)
    train.sort(), valid.sort()
    x, y = frame[FEATURES], frame["y"].to_numpy()
    return x.iloc[train], y[train], x.iloc[valid], y[valid]


def test_tpe_finds_the_configuration_optuna_finds_by_hand(con):
    got = con.execute("TUNE MODEL rf ON TABLE cancer TARGET y SEARCH (max_depth = INTEGER(1, 6), min_samples_leaf = "
                      "INTEGER(1, 20), max_features = UNIFORM(0.2, 1.0)) USING TPE WITH (model_type = "
                      "'random_forest_classifier', trials = 12, max_concurrent_trials = 1, metric = 'roc_auc', "
                      "seed = 3)").fetchone()
    best_config = json.loads(con.execute(f"SELECT config FROM modelsql.trials WHERE study = 'rf_study' AND trial = "
                                         f"{got[3]}").fetchone()[0])
    x_train, y_train, x_valid, y_valid = _split(con, 3)  # scale-free trees: the numbers pass through

    def objective(trial: optuna.Trial) -> float:
        params = dict(max_depth=trial.suggest_int("max_depth", 1, 6),
                      min_samples_leaf=trial.suggest_int("min_samples_leaf", 1, 20),
                      max_features=trial.suggest_float("max_features", 0.2, 1.0))
        model = RandomForestClassifier(random_state=3, **params).fit(x_train.to_numpy(), y_train)
        return M.roc_auc_score(y_valid, model.predict_proba(x_valid.to_numpy())[:, 1])

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=3))
    study.optimize(objective, n_trials=12)
    assert best_config == study.best_params
    assert got[4] == pytest.approx(study.best_value, abs=1e-12)


def test_boosted_trials_share_trees_and_equal_each_trial_trained_alone(con):
    sql = ("TUNE MODEL gb ON TABLE cancer TARGET y SEARCH (max_depth = CHOICE(1, 2, 3), learning_rate = "
           "CHOICE(0.05, 0.2)) USING ASHA WITH (model_type = 'boosted_tree_classifier', max_epochs = 27, trials = 10, "
           "grace_period = 3, metric = 'log_loss', seed = 0{extra})")
    shared = con.execute(sql.format(extra="")).fetchone()
    alone = con.execute(sql.format(extra=", study_name = 'gb_alone', execution = 'trials'")).fetchone()
    assert shared[7] < shared[8] and shared[9] > 1.5  # fewer trees trained than requested
    assert alone[7] == alone[8] and alone[9] == 1.0
    trials = con.execute("SELECT trial, config, epochs, metrics FROM modelsql.trials WHERE study = 'gb_study' "
                         "ORDER BY trial").fetchall()
    assert trials == con.execute("SELECT trial, config, epochs, metrics FROM modelsql.trials WHERE study = "
                                 "'gb_alone' ORDER BY trial").fetchall()  # the same decisions, the same metrics
    x_train, y_train, x_valid, y_valid = _split(con, 0)
    for _, config, epochs, metrics in trials[:4]:  # each trial fitted alone, from scratch, to its trees
        params = json.loads(config)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = GradientBoostingClassifier(n_estimators=epochs, random_state=0, **params).fit(
                x_train.to_numpy(), y_train)
        assert metrics[-1] == M.log_loss(y_valid, model.predict_proba(x_valid.to_numpy()))


def test_a_validation_table_encoding_a_column_otherwise_is_refused_naming_it(con):
    con.execute("CREATE TABLE coded_fit AS SELECT f0, f1, (f2 > 10)::INTEGER AS band, y FROM cancer")
    con.execute("CREATE TABLE coded_check AS SELECT f0, f1, (f2 > 10)::VARCHAR AS band, y FROM cancer")
    before = con.execute("SELECT count(*) FROM modelsql.studies").fetchone()
    with pytest.raises(modelsql.ProgrammingError) as info:
        con.execute("TUNE MODEL coded ON TABLE coded_fit VALIDATE ON TABLE coded_check TARGET y "
                    "SEARCH (C = CHOICE(0.1, 1.0)) USING GRID WITH (model_type = 'logistic_reg')")
    assert info.value.code == "invalid_feature"
    assert 'column "band" is text or a category (one-hot encoded) in VALIDATE ON but a number' in str(info.value)
    assert con.execute("SELECT count(*) FROM modelsql.studies").fetchone() == before


def test_a_study_validated_on_a_table_is_compared_with_evaluations_of_that_table(con):
    """FROM STUDY records its evaluation with the fingerprint of the VALIDATE ON table's rows (every column, as
    EVALUATE ON TABLE records them), so BEST BY ON TABLE compares it; and its lineage keeps the fingerprint of the
    training rows, so an EVALUATE of those does not count."""
    con.execute("CREATE TABLE cancer_ids AS SELECT row_number() OVER () AS id, * FROM cancer")  # (a key: not fed)
    con.execute("CREATE TABLE cancer_fit AS SELECT * FROM cancer_ids WHERE id % 3 <> 0")
    con.execute("CREATE TABLE cancer_check AS SELECT * FROM cancer_ids WHERE id % 3 = 0")
    con.execute("TUNE MODEL bv ON TABLE cancer_fit VALIDATE ON TABLE cancer_check TARGET y SEARCH (C = CHOICE(0.1, 1.0)) "
                "USING GRID WITH (model_type = 'logistic_reg', metric = 'accuracy')")
    con.execute("CREATE MODEL bv FROM STUDY bv_study")
    con.execute("CREATE OR REPLACE MODEL bv WITH (model_type = 'decision_tree_classifier', target = y) AS "
                "SELECT * FROM cancer_fit")
    con.execute("EVALUATE MODEL bv VERSION 2 ON TABLE cancer_check TARGET y")
    row = con.execute("ALTER MODEL bv SET ALIAS champion = BEST BY accuracy ON TABLE cancer_check").fetchone()
    assert row[7] == 2 and row[8] is None  # both versions compared
    con.execute("EVALUATE MODEL bv VERSION 1 ON TABLE cancer_fit TARGET y")  # the study's training rows
    with pytest.raises(modelsql.ProgrammingError) as info:
        con.execute("ALTER MODEL bv SET ALIAS champion = BEST BY accuracy ON TABLE cancer_fit")
    assert info.value.code == "no_evaluation"
    con.rollback()


def test_a_study_of_a_model_trained_in_sql_records_the_version_tuned_as_the_parent(con):
    con.execute("CREATE MODEL pv WITH (model_type = 'logistic_reg', target = y, C = 0.5) AS SELECT * FROM cancer")
    con.execute("CREATE OR REPLACE MODEL pv WITH (model_type = 'logistic_reg', target = y, C = 2) AS "
                "SELECT * FROM cancer")
    con.execute("TUNE MODEL pv VERSION 1 ON TABLE cancer TARGET y SEARCH (tol = CHOICE(0.001, 0.0001)) USING GRID "
                "WITH (study_name = 'pv_s')")
    assert con.execute("SELECT model, model_version FROM modelsql.studies WHERE name = 'pv_s'").fetchall() == [
        ("pv", 1)]
    con.execute("CREATE OR REPLACE MODEL pv FROM STUDY pv_s")
    assert con.execute("SELECT parent_name, parent_version FROM modelsql.lineage WHERE name = 'pv' AND version = 3"
                       ).fetchall() == [("pv", 1)]
    assert '"C": 0.5' in dict((r[2], r[5]) for r in con.execute("DESCRIBE MODEL pv").fetchall())["hyperparameters"]


def test_create_model_from_an_estimator_study_refits_the_trial(con):
    con.execute("TUNE MODEL lr ON TABLE cancer TARGET y SEARCH (C = LOGUNIFORM(0.01, 10)) USING RANDOM "
                "WITH (model_type = 'logistic_reg', trials = 4, metric = 'accuracy', seed = 1)")
    best, value = con.execute("SELECT best_trial, best_metric FROM modelsql.studies WHERE name = 'lr_study'").fetchone()
    with pytest.raises(modelsql.ProgrammingError) as info:  # the algorithm is checked before the stored study
        con.execute("TUNE MODEL lr ON TABLE cancer TARGET y SEARCH (C = LOGUNIFORM(0.01, 10)) USING BAYES "
                    "WITH (model_type = 'logistic_reg', trials = 4, metric = 'accuracy', seed = 1)")
    assert info.value.code == "unknown_algorithm" and "BAYES" in str(info.value).upper()
    cur = con.execute("CREATE MODEL lr FROM STUDY lr_study")
    row = dict(zip([d[0] for d in cur.description], cur.fetchone()))
    recorded = con.execute("SELECT (metrics->>'accuracy')::DOUBLE, options->>'trial' FROM modelsql.evaluations "
                           "WHERE name = 'lr'").fetchone()
    assert recorded == (pytest.approx(value, abs=1e-12), str(best))
    assert (row["model"], row["version"], row["study"], row["trial"]) == ("lr", 1, "lr_study", best)
    assert row["metric"] == pytest.approx(value, abs=1e-12) and row["accuracy"] == pytest.approx(value, abs=1e-12)
    assert con.execute("SELECT origin, study, trial FROM modelsql.model_origins WHERE name = 'lr'").fetchone() == \
        ("study", "lr_study", best)
    x_train, y_train, x_valid, y_valid = _split(con, 1)
    c = json.loads(con.execute(f"SELECT config FROM modelsql.trials WHERE study = 'lr_study' AND trial = {best}")
                   .fetchone()[0])["C"]  # the estimator's name, as get_params() spells it
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline

    hand = Pipeline([("preprocess", ColumnTransformer([("numeric", StandardScaler(), FEATURES)])),
                     ("model", LogisticRegression(C=c, random_state=1))]).fit(x_train, y_train)
    labels = [r[0] for r in con.execute("SELECT label FROM PREDICT(MODEL lr, TABLE cancer)").fetchall()]
    frame = con.execute("SELECT * FROM cancer").fetch_arrow().to_pandas()
    np.testing.assert_array_equal(np.array(labels), hand.predict(frame[FEATURES]))


@pytest.mark.parametrize("sql, code, says", [
    ("SEARCH (depth = CHOICE(1, 2)) USING GRID WITH (model_type = 'random_forest_classifier')",
     "unknown_hyperparameter", 'Did you mean "max_depth"'),
    ("SEARCH (n_estimators = CHOICE(10, 20)) USING GRID WITH (model_type = 'boosted_tree_classifier')",
     "invalid_search_space", "max_epochs"),
    ("SEARCH (max_depth = CHOICE(1, 2)) USING GRID WITH (model_type = 'random_forest_classifier', metric = 'r2_score')",
     "invalid_option", "does not score a classification model"),
    ("SEARCH (max_depth = CHOICE(1, 2)) USING GRID WITH (model_type = 'random_forest_classifier', max_epochs = 5)",
     "invalid_option", "applies to boosted models"),
    ("SEARCH (max_depth = CHOICE(1, 2)) USING GRID WITH (model_type = 'random_forest_classifier', workers = 2)",
     "invalid_option", "applies to trainables"),
    ("SEARCH (max_depth = STEP_DECAY(initial => 3, milestones => (2,), gamma => 0.5)) USING GRID WITH (model_type = "
     "'decision_tree_classifier')", "hyperparameter_not_schedulable", "one value for the whole fit"),
    ("SEARCH (max_depth = CHOICE(1, 2)) USING GRID WITH (model_type = 'random_forest_clasifier')",
     "unknown_model_type", 'Did you mean "random_forest_classifier"'),
    ("SEARCH (n_clusters = CHOICE(2, 3)) USING GRID WITH (model_type = 'kmeans')", "not_supported", "clusterer"),
    ("SEARCH (max_depth = CHOICE(1, 2)) USING ASHA WITH (model_type = 'random_forest_classifier')", "not_supported",
     "nothing to stop early"),
    ("SEARCH (lr = CHOICE(0.1, 0.2)) USING PBT WITH (model_type = 'boosted_tree_classifier')", "not_supported",
     "PBT exploits"),
    ("SEARCH (max_depth = CHOICE(-1, -2)) USING GRID WITH (model_type = 'decision_tree_classifier')",
     "invalid_hyperparameter", "every trial failed"),
    ("SEARCH (C = CHOICE(1.0)) USING GRID WITH (model_type = 'SVC', metric = 'log_loss')", "invalid_option",
     "needs the model's probabilities"),
    ("SEARCH (max_depth = CHOICE(1, 2)) USING GRID WITH (model_type = 'decision_tree_classifier', "
     "study_name = 'bad name')", "invalid_option", "must be a name"),
    ("SEARCH (max_depth = CHOICE(1, 2)) USING ASHA WITH (model_type = 'boosted_tree_classifier', max_epochs = 6, "
     "max_t = 8)", "invalid_option", "contradict"),
])
def test_bad_estimator_studies_are_clear_errors_and_record_nothing(con, sql, code, says):
    before = con.execute("SELECT count(*) FROM modelsql.studies").fetchone()
    with pytest.raises(modelsql.Error) as info:
        con.execute(f"TUNE MODEL bad ON TABLE cancer TARGET y {sql}")
    assert info.value.code == code and says in str(info.value), str(info.value)
    assert con.execute("SELECT count(*) FROM modelsql.studies").fetchone() == before


@pytest.mark.parametrize("inputs, says", [
    ("ON (SELECT f0, f1, CASE WHEN f0 > 20 THEN error('boom') ELSE y END AS y FROM cancer)", "TUNE ON: "),
    ("ON TABLE cancer VALIDATE ON (SELECT f0, nosuch AS y FROM cancer)", "TUNE VALIDATE ON: "),
])
def test_a_failing_input_query_is_named_by_its_clause(con, inputs, says):
    """As a trainable's TUNE says which of ON and VALIDATE ON failed, a model type's does."""
    with pytest.raises(modelsql.Error) as info:
        con.execute(f"TUNE MODEL bad {inputs} TARGET y SEARCH (max_depth = CHOICE(1, 2)) USING GRID WITH ("
                    "model_type = 'decision_tree_classifier')")
    assert str(info.value).startswith(says), str(info.value)


def test_failed_trials_one_class_and_the_study_s_rows(con):
    # a configuration scikit-learn refuses fails its trial; the others run
    row = con.execute("TUNE MODEL dt ON TABLE cancer TARGET y SEARCH (max_depth = CHOICE(-1, 2)) USING GRID "
                      "WITH (model_type = 'decision_tree_classifier', metric = 'accuracy')").fetchone()
    statuses = con.execute("SELECT trial, status, error IS NOT NULL FROM modelsql.trials WHERE study = 'dt_study' "
                           "ORDER BY trial").fetchall()
    assert statuses == [(0, "failed", True), (1, "completed", False)] and row[3] == 1
    with pytest.raises(modelsql.DataError) as info:
        con.execute("TUNE MODEL one ON (SELECT * FROM cancer WHERE y = 0) TARGET y SEARCH (max_depth = CHOICE(1, 2)) "
                    "USING GRID WITH (model_type = 'decision_tree_classifier')")
    assert info.value.code == "one_class"
    # the same statement returns the stored study; CREATE MODEL FROM STUDY refuses rows that changed since
    assert con.execute("TUNE MODEL dt ON TABLE cancer TARGET y SEARCH (max_depth = CHOICE(-1, 2)) USING GRID "
                       "WITH (model_type = 'decision_tree_classifier', metric = 'accuracy')").fetchone() == row
    con.execute("CREATE TABLE cancer2 AS SELECT * FROM cancer")
    con.execute("TUNE MODEL dt2 ON TABLE cancer2 TARGET y SEARCH (max_depth = CHOICE(1, 2)) USING GRID "
                "WITH (model_type = 'decision_tree_classifier', metric = 'accuracy')")
    con.execute("DELETE FROM cancer2 WHERE y = 1 AND f0 > 15")
    with pytest.raises(modelsql.ProgrammingError) as info:
        con.execute("CREATE MODEL dt2 FROM STUDY dt2_study")
    assert info.value.code == "study_definition_changed" and "changed since it ran" in str(info.value)
    assert con.execute("SELECT count(*) FROM modelsql.model_versions WHERE name = 'dt2'").fetchone() == (0,)


def test_parameters_in_the_input_are_kept_for_create_model_from_study(con):
    con.execute("TUNE MODEL pq ON (SELECT * FROM cancer WHERE f0 > ?) TARGET y SEARCH (max_depth = CHOICE(1, 2)) "
                "USING GRID WITH (model_type = 'decision_tree_classifier', metric = 'accuracy')", [12.0])
    con.execute("CREATE MODEL pq FROM STUDY pq_study")
    best = con.execute("SELECT best_metric FROM modelsql.studies WHERE name = 'pq_study'").fetchone()[0]
    assert con.execute("SELECT (metrics->>'accuracy')::DOUBLE FROM modelsql.evaluations WHERE name = 'pq'"
                       ).fetchone()[0] == pytest.approx(best, abs=1e-12)
    assert con.execute("CREATE MODEL IF NOT EXISTS pq FROM STUDY pq_study").rowcount == 0
    assert con.execute("SELECT count(*) FROM modelsql.evaluations WHERE name = 'pq'").fetchone() == (1,)


def test_a_study_whose_on_holds_a_predict_records_its_training_rows(con):
    """TUNE over a query with a PREDICT keeps EVALUATE's fingerprint of its rows, predictions included, as the
    lineage digest of the version made FROM STUDY (it had none: the rows were hashed on a plain DuckDB cursor)."""
    con.execute("CREATE MODEL base WITH (model_type = 'logistic_reg', target = y, validation = 'none') AS "
                "SELECT f0, f1, y FROM cancer")
    on = "(SELECT f0, f1, f2, probabilities[2] AS p, y FROM PREDICT(MODEL base, TABLE cancer))"
    con.execute(f"TUNE MODEL pp ON {on} TARGET y SEARCH (max_depth = CHOICE(1, 2)) USING GRID WITH (model_type = "
                "'decision_tree_classifier', metric = 'accuracy')")
    con.execute("CREATE MODEL pp FROM STUDY pp_study")
    digest = con.execute("SELECT digest FROM modelsql.model_origins WHERE name = 'pp'").fetchone()[0]
    evaluated = con.execute(f"EVALUATE MODEL pp ON {on} TARGET y").fetchone()
    fingerprint = con.execute("SELECT fingerprint FROM modelsql.evaluations WHERE evaluation = ?",
                              [evaluated[0]]).fetchone()[0]
    assert digest == f"rows:{fingerprint}"  # what BEST BY knows as the version's training rows


def test_tune_reads_its_on_rows_once_and_keeps_their_fingerprint(con):
    """The training rows' fingerprint is taken of the rows TUNE read (a sequence in ON moves once per row; it was
    read a second time to be hashed), and it is what an EVALUATE of the same rows records."""
    con.execute("CREATE SEQUENCE tune_reads START 1")
    rows = con.execute("SELECT count(*) FROM cancer").fetchone()[0]
    on = "(SELECT f0, f1, y FROM cancer WHERE nextval('tune_reads') > 0)"
    con.execute(f"TUNE MODEL once ON {on} TARGET y SEARCH (max_depth = CHOICE(1, 2)) USING GRID WITH (model_type = "
                "'decision_tree_classifier', metric = 'accuracy')")
    assert con.execute("SELECT currval('tune_reads')").fetchone() == (rows,)
    con.execute("CREATE MODEL once FROM STUDY once_study")
    digest = con.execute("SELECT digest FROM modelsql.model_origins WHERE name = 'once'").fetchone()[0]
    evaluated = con.execute("EVALUATE MODEL once ON (SELECT f0, f1, y FROM cancer) TARGET y").fetchone()
    fingerprint = con.execute("SELECT fingerprint FROM modelsql.evaluations WHERE evaluation = ?",
                              [evaluated[0]]).fetchone()[0]
    assert digest == f"rows:{fingerprint}"
    # VALIDATE ON too: read once by TUNE, once by CREATE MODEL ... FROM STUDY (which fingerprints what it read)
    con.execute("CREATE SEQUENCE validate_reads START 1")
    held = con.execute("SELECT count(*) FROM cancer WHERE f0 > 15").fetchone()[0]
    con.execute("TUNE MODEL twice ON (SELECT f0, f1, y FROM cancer WHERE f0 <= 15) VALIDATE ON (SELECT f0, f1, y "
                "FROM cancer WHERE f0 > 15 AND nextval('validate_reads') > 0) TARGET y SEARCH (max_depth = CHOICE(1, "
                "2)) USING GRID WITH (model_type = 'decision_tree_classifier', metric = 'accuracy')")
    assert con.execute("SELECT currval('validate_reads')").fetchone() == (held,)
    con.execute("CREATE MODEL twice FROM STUDY twice_study")
    assert con.execute("SELECT currval('validate_reads')").fetchone() == (2 * held,)
    recorded = con.execute("SELECT fingerprint FROM modelsql.evaluations WHERE name = 'twice'").fetchone()[0]
    assert recorded.startswith(f"{held}:")


def test_the_held_out_rows_fingerprint_over_every_column_as_create_model_records_them(con):
    """FROM STUDY of a study without VALIDATE ON records the fingerprint of the rows held out over every column of
    ON (a column that is not a feature too), as CREATE MODEL ... AS records its random validation rows with the
    same seed: BEST BY knows them as the same rows."""
    q = "SELECT f0, f1, y, f5 AS extra FROM cancer"
    con.execute(f"TUNE MODEL held ON ({q}) TARGET y SEARCH (max_depth = CHOICE(1, 2)) USING GRID WITH (model_type = "
                "'decision_tree_classifier', features = (f0, f1), metric = 'accuracy', seed = 4)")
    con.execute("CREATE MODEL held FROM STUDY held_study")
    con.execute(f"CREATE MODEL held_sql WITH (model_type = 'decision_tree_classifier', target = y, "
                f"features = (f0, f1), validation = 'random', seed = 4) AS {q}")
    studied, trained = (con.execute(f"SELECT fingerprint FROM modelsql.evaluations WHERE name = '{name}'").fetchone()[0]
                        for name in ("held", "held_sql"))
    assert studied == trained


def test_two_connections_tuning_one_study_never_merge_it(tmp_path):
    import threading

    path = str(tmp_path / "two.duckdb")
    with modelsql.connect(path) as first:
        first.execute("CREATE TABLE t AS SELECT i AS id, (i * 0.37) % 1 AS a, (i * 0.71) % 1 AS b, "
                      "((i * 0.37) % 1 > 0.5)::INT AS y FROM range(400) r(i)")
        first.commit()
    sql = ("TUNE MODEL m ON TABLE t TARGET y SEARCH (max_depth = CHOICE(1, 2, 3, 4)) USING GRID "
           "WITH (model_type = 'decision_tree_classifier', metric = 'accuracy')")
    outcomes: list = []

    def tune() -> None:
        with modelsql.connect(path) as mine:
            try:
                outcomes.append(mine.execute(sql).fetchone())
            except modelsql.Error as exc:
                outcomes.append(exc.code)

    threads = [threading.Thread(target=tune) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    rows = [o for o in outcomes if isinstance(o, tuple)]
    assert rows and all(o == "study_running" for o in outcomes if not isinstance(o, tuple)), outcomes
    with modelsql.connect(path) as check:
        assert check.execute("SELECT count(*), count(DISTINCT trial) FROM modelsql.trials").fetchone() == (4, 4)
        assert check.execute("SELECT status FROM modelsql.studies").fetchall() == [("finished",)]


def test_create_model_from_a_failed_trial_is_refused(con):
    con.execute("TUNE MODEL neg ON TABLE cancer TARGET y SEARCH (C = CHOICE(-1.0, 1.0)) USING GRID "
                "WITH (model_type = 'logistic_reg', metric = 'accuracy')")
    failed = con.execute("SELECT trial FROM modelsql.trials WHERE study = 'neg_study' AND status = 'failed'").fetchall()
    assert len(failed) == 1
    with pytest.raises(modelsql.ProgrammingError) as info:
        con.execute(f"CREATE MODEL neg FROM STUDY neg_study TRIAL {failed[0][0]}")
    assert info.value.code == "trial_failed" and "failed" in str(info.value)
    assert con.execute("SELECT count(*) FROM modelsql.model_versions WHERE name = 'neg'").fetchone() == (0,)


def test_a_target_of_classes_1_and_2_scores_class_1_as_evaluate_does(con):
    """The estimator's classes_ are NumPy integers: the positive class is 1 (scikit-learn's pos_label=1), as
    EVALUATE takes it, not the greater class."""
    con.execute("CREATE OR REPLACE TABLE cancer12 AS SELECT * REPLACE (y + 1 AS y) FROM cancer")
    con.execute("TUNE MODEL c12 ON TABLE cancer12 TARGET y SEARCH (C = CHOICE(0.05)) USING GRID "
                "WITH (model_type = 'logistic_reg', metric = 'f1_score', seed = 0)")
    metric = con.execute("SELECT metric FROM modelsql.trials WHERE study = 'c12_study'").fetchone()[0]
    x_train, y_train, x_valid, y_valid = _split(con, 0)
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline

    hand = Pipeline([("preprocess", ColumnTransformer([("numeric", StandardScaler(), FEATURES)])),
                     ("model", LogisticRegression(C=0.05, random_state=0))]).fit(x_train, y_train + 1)
    assert metric == pytest.approx(M.f1_score(y_valid + 1, hand.predict(x_valid), pos_label=1), abs=1e-12)
    assert metric != pytest.approx(M.f1_score(y_valid + 1, hand.predict(x_valid), pos_label=2), abs=1e-6)


def test_a_mode_against_the_metric_or_a_misspelt_metric_is_refused(con):
    for extra, says in ((", metric = 'accuracy', mode = 'min'", "would pick the worst trial"),
                        (", metric = 'acuracy'", 'Did you mean "accuracy"')):
        with pytest.raises(modelsql.ProgrammingError) as info:
            con.execute("TUNE MODEL modes ON TABLE cancer TARGET y SEARCH (C = CHOICE(1.0)) USING GRID "
                        f"WITH (model_type = 'logistic_reg'{extra})")
        assert info.value.code == "invalid_option" and says in str(info.value)
    assert con.execute("SELECT count(*) FROM modelsql.studies WHERE name = 'modes_study'").fetchone() == (0,)


def test_the_same_tune_runs_again_after_create_model_from_its_study(con):
    """TUNE of a model trained in SQL, CREATE OR REPLACE MODEL ... FROM STUDY, then the same TUNE: the new version's
    tuned hyper-parameters are not the study's defaults, so it is the same study (it was study_definition_changed)."""
    con.execute("CREATE MODEL again WITH (model_type = 'logistic_reg', target = y) AS SELECT * FROM cancer")
    tune = ("TUNE MODEL again ON TABLE cancer TARGET y SEARCH (C = LOGUNIFORM(0.01, 10)) USING RANDOM "
            "WITH (trials = 3, metric = 'log_loss', seed = 2)")
    first = con.execute(tune).fetchone()
    con.execute("CREATE OR REPLACE MODEL again FROM STUDY again_study")
    assert con.execute(tune).fetchone() == first


def test_from_study_of_a_dropped_table_is_the_statements_error(con):
    con.execute("CREATE TABLE gone AS SELECT * FROM cancer LIMIT 200")
    con.execute("TUNE MODEL gone ON TABLE gone TARGET y SEARCH (max_depth = CHOICE(1, 2)) USING GRID "
                "WITH (model_type = 'decision_tree_classifier', metric = 'accuracy')")
    con.execute("DROP TABLE gone")
    with pytest.raises(modelsql.ProgrammingError) as info:
        con.execute("CREATE MODEL gone FROM STUDY gone_study")
    assert info.value.code == "catalog_error" and str(info.value).startswith(
        "CREATE MODEL gone FROM STUDY gone_study: the study's rows no longer read") and "\nLINE " not in str(info.value)
    assert con.execute("SELECT count(*) FROM modelsql.model_versions WHERE name = 'gone'").fetchone() == (0,)
