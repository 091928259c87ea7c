"""Shared set-up of the TUNE tests (tests/tune/, tests/client/test_shell.py): a real DuckDB file holding
scikit-learn's digits (8x8 images, 64 pixel columns p0..p63 scaled to [0, 1] and a ``label``), split into
``train`` and ``val`` tables, and a trainable ``mlp`` (``modelsql.zoo:mlp``); the statements and the child
process the fault tests share."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

import modelsql

TRAIN_ROWS = 360
VAL_ROWS = 120

GRID_SQL = """TUNE MODEL mlp ON TABLE train VALIDATE ON TABLE val TARGET label
SEARCH (lr = STEP_DECAY(initial => CHOICE(0.2, 0.1), milestones => CHOICE((2,), (3,)), gamma => 0.1),
        batch_size = 64)
USING GRID WITH (max_epochs = 4, seed = 0{extra})"""


# a longer GRID study (6 trials, 8 epochs, one worker) for the fault tests: long enough to be killed part-way
LONG_SQL = """TUNE MODEL mlp ON TABLE train VALIDATE ON TABLE val TARGET label
SEARCH (lr = STEP_DECAY(initial => CHOICE(0.3, 0.2, 0.1), milestones => CHOICE((3,), (6,)), gamma => 0.1),
        batch_size = 64)
USING GRID WITH (max_epochs = 8, seed = 0, workers = 1)"""

# a child process (``sys.executable -c``; format it with ``tests``, the tests folder, and ``db``) that runs
# LONG_SQL on ``db`` slowly, printing "stage" and the epochs trained at each progress report and
# "finished" at the end
CHILD = """
import sys, time
sys.path.insert(0, {tests!r})
import modelsql
from tune_fixtures import LONG_SQL
con = modelsql.connect({db!r})
def progress(p):
    print("stage", p["epochs_trained"], flush=True)
    time.sleep(0.4)  # slow the study's process down, so the kill lands part-way
con.tune_progress = progress
con.execute(LONG_SQL)
print("finished", flush=True)
"""


def digits_table() -> pa.Table:
    from sklearn.datasets import load_digits

    d = load_digits()
    cols = {f"p{i}": (d.data[:, i] / 16).astype(np.float32) for i in range(64)}
    cols["label"] = d.target.astype(np.int64)
    return pa.table(cols)


def make_db(path: str) -> modelsql.Connection:
    """A connection to a new database ``path`` with tables digits / train / val and the trainable ``mlp``."""
    con = modelsql.connect(path)
    con.register("digits_arrow", digits_table())
    cur = con.cursor()
    cur.execute("CREATE TABLE digits AS SELECT * FROM digits_arrow")
    cur.execute(f"CREATE TABLE train AS SELECT * FROM digits LIMIT {TRAIN_ROWS}")
    cur.execute(f"CREATE TABLE val AS SELECT * FROM digits LIMIT {VAL_ROWS} OFFSET {TRAIN_ROWS}")
    con.commit()
    cur.execute("CREATE MODEL mlp FROM PYTHON 'modelsql.zoo:mlp' WITH (hidden = 16)")
    return con


def trial_metrics(con, study: str) -> dict[int, tuple]:
    """``{trial: (status, metrics per epoch as float.hex)}`` of a study."""
    rows = con.execute("SELECT trial, status, metrics FROM modelsql.trials WHERE study = ? ORDER BY trial",
                       [study]).fetchall()
    return {t: (s, tuple(float(m).hex() for m in ms)) for t, s, ms in rows}


def ridge_objective(config, train, validate, target):
    """A Python objective for TUNE (tests/tune/test_tune_objective.py): the validation R2 of a ridge regression
    with ``config["alpha"]``, fitted on the training rows' numeric columns."""
    import numpy as np
    from sklearn.linear_model import Ridge

    columns = [c for c in train.column_names if c != target]
    x = np.column_stack([train.column(c).to_numpy() for c in columns])
    xv = np.column_stack([validate.column(c).to_numpy() for c in columns])
    model = Ridge(alpha=config["alpha"]).fit(x, train.column(target).to_numpy())
    return float(model.score(xv, validate.column(target).to_numpy()))


def broken_objective(config, train, validate, target):
    """An objective that fails one configuration and returns a non-number for another."""
    if config["alpha"] == 1.0:
        raise ValueError("alpha 1 is not allowed here")
    if config["alpha"] == 2.0:
        return "high"
    return 0.5


def numpy_objective(config, train, validate, target):
    """An objective returning a NumPy float32 (a real number like any other)."""
    import numpy as np

    return np.float32(config["alpha"])
