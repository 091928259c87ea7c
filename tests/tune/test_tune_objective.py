"""TUNE of a Python objective (issue 25, part 3): ``WITH (objective = 'pkg.mod:function', mode = ...)`` calls the
function per trial with the training and validation rows; its best configuration is the one Optuna finds driven by
hand with the same sampler and seed; failures are per trial; a connection that runs no Python refuses it."""

from __future__ import annotations

import json

import numpy as np
import optuna
import pyarrow as pa
import pytest
from sklearn.datasets import load_diabetes
from sklearn.linear_model import Ridge
from sklearn.model_selection import train_test_split

import modelsql

TUNE = ("TUNE MODEL ridge ON TABLE diabetes TARGET y SEARCH (alpha = LOGUNIFORM(0.001, 10)) USING TPE WITH ("
        "objective = 'tune_fixtures:ridge_objective', mode = 'max', trials = 10, seed = 4, max_concurrent_trials = 1)")


@pytest.fixture
def con(tmp_path):
    c = modelsql.connect(str(tmp_path / "o.duckdb"))
    c.autocommit = True
    x, y = load_diabetes(return_X_y=True)
    c.register("arrow", pa.table({**{f"f{i}": x[:, i] for i in range(x.shape[1])}, "y": y}))
    c.execute("CREATE TABLE diabetes AS SELECT * FROM arrow")
    c.unregister("arrow")
    yield c
    c.close()


def test_the_objective_finds_what_optuna_finds_by_hand(con):
    row = con.execute(TUNE).fetchone()
    assert row[1] == "finished" and row[2] == 10 and row[5] == "objective" and row[6] == "max"
    best = json.loads(con.execute(f"SELECT config FROM modelsql.trials WHERE study = 'ridge_study' AND trial = "
                                  f"{row[3]}").fetchone()[0])
    x, y = load_diabetes(return_X_y=True)
    train, valid = train_test_split(np.arange(len(y)), test_size=0.2, random_state=4)
    train.sort(), valid.sort()

    def objective(trial):
        alpha = trial.suggest_float("alpha", 0.001, 10, log=True)
        return Ridge(alpha=alpha).fit(x[train], y[train]).score(x[valid], y[valid])

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=4))
    study.optimize(objective, n_trials=10)
    assert best == study.best_params and row[4] == pytest.approx(study.best_value, abs=1e-12)
    assert con.execute(TUNE).fetchone() == row  # the same study: its stored result
    with pytest.raises(modelsql.NotSupportedError) as info:
        con.execute("CREATE MODEL r FROM STUDY ridge_study")
    assert info.value.code == "not_supported" and "makes no model" in str(info.value)


def test_failing_trials_and_bad_statements(con, tmp_path):
    row = con.execute("TUNE MODEL b ON TABLE diabetes TARGET y SEARCH (alpha = CHOICE(1.0, 2.0, 3.0)) USING GRID "
                      "WITH (objective = 'tune_fixtures:broken_objective', mode = 'min')").fetchone()
    trials = con.execute("SELECT trial, status, error FROM modelsql.trials WHERE study = 'b_study' ORDER BY trial"
                         ).fetchall()
    assert [t[1] for t in trials] == ["failed", "failed", "completed"] and row[3] == 2
    assert "alpha 1 is not allowed" in trials[0][2] and "'high', not a finite number" in trials[1][2]
    for sql, cls, code in [
        ("WITH (objective = 'tune_fixtures:ridge_objective')", modelsql.ProgrammingError, "missing_option"),
        ("WITH (objective = 'tune_fixtures:nope', mode = 'max')", modelsql.ProgrammingError, "factory_not_found"),
        ("WITH (objective = 'tune_fixtures:ridge_objective', mode = 'max', metric = 'val_loss')",
         modelsql.ProgrammingError, "invalid_option"),
    ]:
        with pytest.raises(cls) as info:
            con.execute(f"TUNE MODEL x ON TABLE diabetes TARGET y SEARCH (alpha = CHOICE(1.0)) USING GRID {sql}")
        assert info.value.code == code, str(info.value)
    with pytest.raises(modelsql.NotSupportedError) as info:
        con.execute("TUNE MODEL x ON TABLE diabetes TARGET y SEARCH (alpha = CHOICE(1.0)) USING ASHA "
                    "WITH (objective = 'tune_fixtures:ridge_objective', mode = 'max')")
    assert info.value.code == "not_supported"
    guarded = modelsql.connect(str(tmp_path / "guarded.duckdb"), allow_python=False)  # SQL from others
    guarded.execute("CREATE TABLE diabetes AS SELECT 1.0 AS f0, 2.0 AS y")
    with pytest.raises(modelsql.NotSupportedError) as info:
        guarded.execute(TUNE)
    assert info.value.code == "python_disabled"
    guarded.close()


def test_names_values_and_restatements(con, tmp_path):
    with pytest.raises(modelsql.ProgrammingError) as info:
        con.execute("TUNE MODEL x ON TABLE diabetes TARGET why SEARCH (alpha = CHOICE(1.0)) USING GRID "
                    "WITH (objective = 'tune_fixtures:ridge_objective', mode = 'max')")
    assert info.value.code == "column_not_found"
    row = con.execute("TUNE MODEL n ON TABLE diabetes TARGET y SEARCH (alpha = CHOICE(1.0, 3.0)) USING GRID "
                      "WITH (objective = 'tune_fixtures:numpy_objective', mode = 'max')").fetchone()
    assert row[3] == 1 and row[4] == 3.0
    # the same study written otherwise is the same study
    again = con.execute("tune model n on table diabetes target Y search (alpha = choice(1.0, 3.0)) using grid "
                        "with (mode = 'max', seed = 0, objective = 'tune_fixtures:numpy_objective')").fetchone()
    assert again == row
    for on in ('(SELECT f0, f0 AS "F0", y FROM diabetes)', "TABLE diabetes VALIDATE ON (SELECT f0, f0 AS \"F0\", y "
               "FROM diabetes)"):  # the objective was handed both spellings
        with pytest.raises(modelsql.ProgrammingError, match='two columns named "f0" and "F0"') as info:
            con.execute(f"TUNE MODEL x ON {on} TARGET y SEARCH (alpha = CHOICE(1.0)) USING GRID "
                        "WITH (objective = 'tune_fixtures:ridge_objective', mode = 'max')")
        assert info.value.code == "duplicate_column"
    (tmp_path / "raising_module.py").write_text("raise RuntimeError('not importable today')\n")
    import sys
    sys.path.insert(0, str(tmp_path))
    try:
        with pytest.raises(modelsql.ProgrammingError) as info:
            con.execute("TUNE MODEL x ON TABLE diabetes TARGET y SEARCH (alpha = CHOICE(1.0)) USING GRID "
                        "WITH (objective = 'raising_module:f', mode = 'max')")
        assert info.value.code == "factory_not_found" and "not importable today" in str(info.value)
    finally:
        sys.path.remove(str(tmp_path))
    assert con.execute("SELECT count(*) FROM modelsql.studies").fetchone() == (1,)


SLOW = '''import os
import sys
import time


def objective(config, train, validate, target):
    if os.environ.get("SLOW_OBJECTIVE"):
        print("training", flush=True)
        time.sleep(60)
    return float(config["alpha"])
'''

KILLED = """
import sys
sys.path.insert(0, {here!r})
import modelsql
con = modelsql.connect({db!r})
con.autocommit = True
con.execute({sql!r})
"""


def test_a_run_killed_part_way_is_run_again_not_left_running(tmp_path):
    """A process killed while its study's trials run leaves the study's row ``running``, owned by it; the next
    connection finds the owner dead (``interrupted``) and the next run runs the study again (it was
    ``study_running`` until a DROP STUDY)."""
    import os
    import subprocess
    import sys

    (tmp_path / "slow_objective_mod.py").write_text(SLOW)
    db = str(tmp_path / "k.duckdb")
    with modelsql.connect(db) as c:
        c.execute("CREATE TABLE t AS SELECT i::DOUBLE AS a, (i % 3)::DOUBLE AS y FROM range(50) r(i)")
        c.commit()
    sql = ("TUNE MODEL s ON TABLE t TARGET y SEARCH (alpha = CHOICE(1.0, 2.0)) USING GRID "
           "WITH (objective = 'slow_objective_mod:objective', mode = 'min')")
    child = subprocess.Popen([sys.executable, "-c", KILLED.format(here=str(tmp_path), db=db, sql=sql)],
                             stdout=subprocess.PIPE, env={**os.environ, "SLOW_OBJECTIVE": "1"}, text=True)
    assert child.stdout is not None and child.stdout.readline().strip() == "training"
    child.kill()
    child.wait(30)
    with modelsql.connect(db) as c:
        c.autocommit = True
        assert c.execute("SELECT status FROM modelsql.studies").fetchall() == [("interrupted",)]
        sys.path.insert(0, str(tmp_path))
        try:
            row = c.execute(sql).fetchone()
        finally:
            sys.path.remove(str(tmp_path))
        assert row[1] == "finished" and row[4] == 1.0
        assert c.execute("SELECT status, owner_pid FROM modelsql.studies").fetchall() == [("finished", None)]
