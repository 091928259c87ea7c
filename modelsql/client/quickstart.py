"""``modelsql quickstart``: the whole job on real data, in about ten seconds.

1. Loads three datasets that ship with scikit-learn (no download) into DuckDB
   tables, split into train and test deterministically (stratified, seed 0):

   * ``digits_train`` / ``digits_test``: 8x8 images of handwritten digits,
     ``id INTEGER PRIMARY KEY``, pixels ``p0`` .. ``p63`` (``DOUBLE``, 0..16),
     ``target INTEGER`` (0..9); 1,797 rows.
   * ``breast_cancer_train`` / ``breast_cancer_test``: 30 features with
     snake_case names (``mean_radius``, ``worst_concave_points`` ...),
     ``target`` (0 = malignant, 1 = benign); 569 rows.
   * ``iris_train`` / ``iris_test``: ``sepal_length_cm`` .. ``petal_width_cm``,
     ``target`` (0..2); 150 rows; and ``iris_species (label, species)``.

2. Trains real models on the train tables, read back from DuckDB:

   * ``breast_cancer_logreg``: scikit-learn ``Pipeline(StandardScaler, LogisticRegression)``;
   * ``digits_mlp``: a torch MLP 64 -> 64 -> 10 (ReLU), a few epochs of Adam;
     it outputs ``logits``, ``label`` (argmax, BIGINT) and ``probabilities`` (softmax);
   * ``iris_forest``: scikit-learn ``RandomForestClassifier``.

3. Imports them with :meth:`modelsql.Connection.import_model`. Models of these
   names from an earlier run are dropped first (a line says so), so a re-run
   leaves the catalog as one run does: one version of each.

4. Runs prediction queries in SQL, each printed before its result: accuracy per
   class (``GROUP BY`` over ``PREDICT``), overall accuracy of every model,
   predictions joined with the original table, ``SHOW MODELS``,
   ``SELECT * FROM modelsql.storage`` and ``DESCRIBE MODEL``.

Re-runnable on the same database: tables are created with ``CREATE OR REPLACE``
and the models replaced (step 3).
"""

from __future__ import annotations

import os
import re
import shlex
import tempfile
import time
from typing import Any, Optional, Sequence

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.syntax import Syntax

SEED = 0
TEST_FRACTION = 0.25
DIGITS_PIXELS = [f"p{i}" for i in range(64)]
MLP_EPOCHS = 30
MODELS = ("breast_cancer_logreg", "digits_mlp", "iris_forest")
TABLES = tuple(f"{d}_{split}" for d in ("breast_cancer", "digits", "iris") for split in ("train", "test")) + (
    "iris_species",)
MARK = "made by modelsql quickstart"
"""The ``description`` option the quickstart's models carry: a model of one of their names without it
is the user's own, and the quickstart leaves the database alone rather than replace it."""
"""The models the quickstart imports."""


def snake_case(name: str) -> str:
    """``"mean concave points"`` -> ``mean_concave_points``; ``"sepal length (cm)"`` -> ``sepal_length_cm``."""
    return re.sub(r"[^0-9a-z]+", "_", str(name).lower()).strip("_")


def _need(module: str, extra: str) -> Any:
    import importlib

    from modelsql.errors import NotSupportedError

    try:
        return importlib.import_module(module)
    except ImportError:
        raise NotSupportedError(
            f"the quickstart needs {module.split('.')[0]}: pip install 'modelsql[{extra}]'",
            code="missing_dependency",
        ) from None


# --------------------------------------------------------------------------- data


def _load_table(con, tmpdir: str, name: str, ids, X, y, features: Sequence[str]) -> None:
    """``CREATE OR REPLACE TABLE name (id INTEGER PRIMARY KEY, <features> DOUBLE, target INTEGER)``
    filled from a Parquet file written to ``tmpdir`` (fast, and types are kept)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = {"id": pa.array(np.asarray(ids, dtype=np.int32))}
    for j, f in enumerate(features):
        columns[f] = pa.array(np.asarray(X[:, j], dtype=np.float64))
    columns["target"] = pa.array(np.asarray(y, dtype=np.int32))
    path = os.path.join(tmpdir, f"{name}.parquet")
    pq.write_table(pa.table(columns), path)
    cols = ", ".join(f"{f} DOUBLE" for f in features)
    con.execute(f"CREATE OR REPLACE TABLE {name} (id INTEGER PRIMARY KEY, {cols}, target INTEGER)")
    quoted = path.replace("'", "''")
    con.execute(f"INSERT INTO {name} BY NAME SELECT * FROM read_parquet('{quoted}')")


def load_datasets(con, progress: Progress) -> dict[str, list[str]]:
    """Load digits, breast cancer and iris into ``<name>_train`` / ``<name>_test`` tables.

    Returns:
        ``{dataset: feature column names}``.
    """
    datasets = _need("sklearn.datasets", "sklearn")
    model_selection = _need("sklearn.model_selection", "sklearn")
    import numpy as np

    sources = [
        ("digits", datasets.load_digits, lambda names: DIGITS_PIXELS),
        ("breast_cancer", datasets.load_breast_cancer, lambda names: [snake_case(n) for n in names]),
        ("iris", datasets.load_iris, lambda names: [snake_case(n) for n in names]),
    ]
    task = progress.add_task("Loading datasets into DuckDB", total=len(sources))
    features: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory(prefix="modelsql-quickstart-") as tmpdir:
        for name, loader, namer in sources:
            bunch = loader()
            X = np.asarray(bunch.data, dtype=np.float64)
            y = np.asarray(bunch.target)
            cols = namer(bunch.feature_names)
            ids = np.arange(len(y))
            train_ids, test_ids = model_selection.train_test_split(
                ids, test_size=TEST_FRACTION, random_state=SEED, stratify=y
            )
            for split, part in (("train", np.sort(train_ids)), ("test", np.sort(test_ids))):
                _load_table(con, tmpdir, f"{name}_{split}", part, X[part], y[part], cols)
            features[name] = cols
            if name == "iris":
                con.execute("CREATE OR REPLACE TABLE iris_species (label INTEGER PRIMARY KEY, species VARCHAR)")
                con.execute(
                    "INSERT INTO iris_species VALUES "
                    + ", ".join(f"({i}, '{s}')" for i, s in enumerate(bunch.target_names))
                )
            progress.advance(task)
    return features


def read_xy(con, table: str, features: Sequence[str]):
    """The train table back from DuckDB as ``(X float64 [n, k], y int64 [n])``, ordered by id."""
    import numpy as np

    cols = ", ".join(features)
    rows = con.execute(f"SELECT {cols}, target FROM {table} ORDER BY id").fetchall()
    data = np.asarray(rows, dtype=np.float64)
    return data[:, :-1], data[:, -1].astype(np.int64)


# --------------------------------------------------------------------------- models


def train_breast_cancer(X, y):
    """StandardScaler + LogisticRegression, the classic tabular baseline."""
    pipeline = _need("sklearn.pipeline", "sklearn")
    preprocessing = _need("sklearn.preprocessing", "sklearn")
    linear_model = _need("sklearn.linear_model", "sklearn")
    model = pipeline.Pipeline([
        ("scale", preprocessing.StandardScaler()),
        ("logreg", linear_model.LogisticRegression(max_iter=1000)),
    ])
    return model.fit(X, y)


def train_iris(X, y):
    """A small random forest."""
    ensemble = _need("sklearn.ensemble", "sklearn")
    return ensemble.RandomForestClassifier(n_estimators=25, max_depth=4, random_state=SEED).fit(X, y)


def train_digits_mlp(X, y, progress: Progress, epochs: int = MLP_EPOCHS):
    """A torch MLP 64 -> 64 -> 10 trained with Adam (batch 64, lr 1e-2); pixels are scaled
    from 0..16 to 0..1 inside the module, so it takes the table's raw columns.

    Returns:
        A module whose ``forward(pixels FLOAT [N, 64])`` returns
        ``(logits FLOAT [N, 10], label INT64 [N], probabilities FLOAT [N, 10])``.
    """
    torch = _need("torch", "torch")
    nn = torch.nn
    module_base: Any = nn.Module  # torch is imported on demand, so the base class is a value here

    class DigitsMLP(module_base):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))

        def forward(self, pixels):
            logits = self.net(pixels / 16.0)
            return logits, torch.argmax(logits, dim=1), torch.softmax(logits, dim=1)

    torch.manual_seed(SEED)
    model = DigitsMLP()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    loss_fn = nn.CrossEntropyLoss()
    Xt = torch.as_tensor(X, dtype=torch.float32)
    yt = torch.as_tensor(y, dtype=torch.int64)
    gen = torch.Generator().manual_seed(SEED)
    task = progress.add_task("Training digits_mlp (torch MLP 64→64→10, Adam)", total=epochs)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: more threads only add overhead (50x slower on 2 cores)
    try:
        model.train()
        for _ in range(epochs):
            order = torch.randperm(len(Xt), generator=gen)
            for start in range(0, len(Xt), 64):
                idx = order[start:start + 64]
                opt.zero_grad()
                logits, _, _ = model(Xt[idx])
                loss_fn(logits, yt[idx]).backward()
                opt.step()
            progress.advance(task)
    finally:
        torch.set_num_threads(threads)
    model.eval()
    return model


def import_torch(con, name: str, module, example, features: Sequence[str]):
    """Import a torch module whose outputs are ``(logits, label, probabilities)`` under those names."""
    return con.import_model(name, module, example_input=example, features=list(features),
                            output_names=("logits", "label", "probabilities"), replace=True,
                            options={"description": MARK})


def check_database_is_ours(con, database: str) -> None:
    """Refuse to run where the quickstart would replace the user's own models or tables.

    A model of one of :data:`MODELS`' names is an earlier run's when it carries :data:`MARK`; its
    tables (:data:`TABLES`) are an earlier run's when such a model exists.

    Raises:
        ProgrammingError: code ``"quickstart_conflict"``, naming what is there and what to run instead.
    """
    from modelsql.errors import ProgrammingError

    rows = con.execute(
        "SELECT name, options['description'] FROM modelsql.model_versions WHERE list_contains(?, name)",
        [list(MODELS)],
    ).fetchall()
    foreign = sorted({name for name, mark in rows if mark != MARK})
    ours = any(mark == MARK for _, mark in rows)
    tables = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main'").fetchall()}
    clashing = sorted(t for t in TABLES if t in tables) if not ours else []
    if foreign or clashing:
        what = ", ".join([f"model {m}" for m in foreign] + [f"table {t}" for t in clashing])
        raise ProgrammingError(
            f"{database} already has {what}, which the quickstart did not make and would replace. Run it on "
            "another database: modelsql --database quickstart.duckdb quickstart",
            code="quickstart_conflict",
        )


def drop_earlier_models(con, console: Console) -> list[str]:
    """Drop every version of the :data:`MODELS` already in the catalog (an earlier run's),
    printing their names, so the imports that follow leave one version of each.

    Returns:
        The names dropped.
    """
    existing = {str(row[0]).lower() for row in con.execute("SHOW MODELSQL MODELS").fetchall()}
    dropped = [name for name in MODELS if name in existing]
    for name in dropped:
        con.execute(f"DROP MODEL {name}")
    if dropped:
        console.print(f"Replacing the models of an earlier run: {', '.join(dropped)} "
                      "(all their versions dropped; imported again as version 1).", highlight=False)
    return dropped


# --------------------------------------------------------------------------- queries


class _Shower:
    """Prints a SQL statement, runs it, prints its result; returns the rows."""

    def __init__(self, con, console: Console) -> None:
        self.con = con
        self.console = console

    def __call__(self, title: str, sql: str, note: str = "") -> list[tuple]:
        """``note``: printed under the result, to say what its figures mean."""
        from modelsql.client.display import MAX_ROWS, render_table

        self.console.print()
        self.console.rule(f"[bold]{title}", align="left")
        self.console.print(Syntax(sql, "sql", theme="ansi_dark", background_color="default", word_wrap=True))
        started = time.perf_counter()
        cur = self.con.execute(sql)
        rows = cur.fetchall() if cur.description is not None else []
        elapsed = (time.perf_counter() - started) * 1000
        if cur.description is not None:
            head, tail = (rows, []) if len(rows) <= MAX_ROWS else (rows[: MAX_ROWS // 2], rows[-(MAX_ROWS // 2):])
            self.console.print(
                render_table(cur.description, head, tail, len(rows), self.console.width, f"{elapsed:.0f} ms")
            )
        if note:
            self.console.print(note, highlight=False)
        return rows


TRAINABLE_SQL = "CREATE MODEL IF NOT EXISTS digits_cnn FROM PYTHON 'modelsql.zoo:cnn' WITH (channels = 8);"

TUNE_SQL = """\
TUNE MODEL digits_cnn
  ON (SELECT COLUMNS('p\\d+') / 16, target FROM digits_train WHERE id % 5 <> 0)
  VALIDATE ON (SELECT COLUMNS('p\\d+') / 16, target FROM digits_train WHERE id % 5 = 0)
  TARGET target
  SEARCH (lr = STEP_DECAY(initial => CHOICE(0.1, 0.05), milestones => CHOICE((2,), (3,)), gamma => 0.1),
          batch_size = 32)
  USING GRID WITH (max_epochs = 4, seed = 0, workers = 2);"""

TUNE_NOTE = (
    "It validates on a fifth of the training rows, never on the test table. best_metric is the lowest "
    "val_loss of the four trials (metric val_loss, mode min); steps_ratio is the epochs the trials would "
    "train one by one (epochs_requested) over the epochs the stage tree trained, sharing prefixes once. "
    "Run again, the study resumes and trains nothing."
)

TRIALS_SQL = """\
SELECT trial, status, epochs, round(metric, 4) AS val_loss, config
FROM modelsql.trials WHERE study = 'digits_cnn_study' ORDER BY metric;"""


def _accuracy_sql(model: str, table: str) -> str:
    return (
        "SELECT target, count(*) AS n, round(avg((label = target)::INT), 4) AS accuracy\n"
        f"FROM PREDICT(MODEL {model}, TABLE {table})\n"
        "GROUP BY target\nORDER BY target;"
    )


EVALUATE_SQL = "EVALUATE MODEL breast_cancer_logreg ON TABLE breast_cancer_test TARGET target;"

OVERALL_SQL = """\
EVALUATE MODEL digits_mlp ON TABLE digits_test TARGET target;
EVALUATE MODEL iris_forest ON TABLE iris_test TARGET target;
-- every evaluation is kept in the catalog: the latest of each model
SELECT name AS model, rows AS n, round((metrics->>'accuracy')::DOUBLE, 4) AS accuracy
FROM modelsql.evaluations
QUALIFY row_number() OVER (PARTITION BY name ORDER BY evaluation DESC) = 1
ORDER BY model;"""

IRIS_SQL = """\
SELECT s.species, count(*) AS n, round(avg((p.label = p.target)::INT), 4) AS accuracy
FROM PREDICT(MODEL iris_forest, TABLE iris_test) AS p
JOIN iris_species AS s ON s.label = p.target
GROUP BY s.species
ORDER BY s.species;"""

MISTAKES_SQL = """\
-- predict from the pixels alone, then join the test table for the truth
SELECT p.id, t.target, p.label AS predicted,
       round(list_max(p.probabilities::FLOAT[]), 3) AS confidence,
       p.probabilities
FROM PREDICT(MODEL digits_mlp, (SELECT * EXCLUDE (target) FROM digits_test)) AS p
JOIN digits_test AS t USING (id)
WHERE p.label <> t.target
ORDER BY confidence DESC;"""

PROBABILITIES_SQL = """\
SELECT id, target, label, probabilities
FROM PREDICT(MODEL breast_cancer_logreg, TABLE breast_cancer_test)
ORDER BY id
LIMIT 5;"""


# --------------------------------------------------------------------------- main


def run(database: str, console: Optional[Console] = None) -> None:
    """Run the quickstart on ``database`` (created if missing), printing to ``console``.

    Raises:
        modelsql.Error: from any statement (the CLI prints it without a traceback);
            NotSupportedError (``missing_dependency``) without scikit-learn or torch.
    """
    import modelsql

    console = console or Console()
    started = time.perf_counter()
    shown_path = database if database == ":memory:" else os.path.abspath(database)
    console.print(f"[bold]modelsql quickstart[/bold] — database {shown_path}", highlight=False)
    con = modelsql.connect(database)
    try:
        con.autocommit = True
        progress = Progress(
            SpinnerColumn(), TextColumn("{task.description}"), BarColumn(bar_width=20),
            MofNCompleteColumn(), TimeElapsedColumn(), console=console,
        )
        check_database_is_ours(con, shown_path)
        with progress:
            features = load_datasets(con, progress)

            task = progress.add_task("Training breast_cancer_logreg (StandardScaler + LogisticRegression)", total=1)
            X, y = read_xy(con, "breast_cancer_train", features["breast_cancer"])
            logreg = train_breast_cancer(X, y)
            progress.advance(task)

            task = progress.add_task("Training iris_forest (RandomForestClassifier)", total=1)
            X, y = read_xy(con, "iris_train", features["iris"])
            forest = train_iris(X, y)
            progress.advance(task)

            X, y = read_xy(con, "digits_train", features["digits"])
            mlp = train_digits_mlp(X, y, progress)

            drop_earlier_models(con, progress.console)
            task = progress.add_task("Importing models into the catalog", total=3)
            con.import_model("breast_cancer_logreg", logreg, features=features["breast_cancer"], replace=True,
                             options={"description": MARK})
            progress.advance(task)
            con.import_model("iris_forest", forest, features=features["iris"], replace=True,
                             options={"description": MARK})
            progress.advance(task)
            torch = _need("torch", "torch")
            import_torch(con, "digits_mlp", mlp, torch.zeros(2, 64), features["digits"])
            progress.advance(task)

        show = _Shower(con, console)
        show("Accuracy per digit", _accuracy_sql("digits_mlp", "digits_test"))
        show("Accuracy per class (0 = malignant, 1 = benign)", _accuracy_sql("breast_cancer_logreg", "breast_cancer_test"))
        show("Accuracy per species, joined with a lookup table", IRIS_SQL)
        show("Evaluating a model: metrics by the task, as scikit-learn computes them", EVALUATE_SQL)
        overall = show("Overall test accuracy", OVERALL_SQL)
        show("Mistakes: predictions joined with the original table", MISTAKES_SQL)
        show("Probabilities are arrays", PROBABILITIES_SQL)
        show("The catalog", "SHOW MODELSQL MODELS;")
        show("Storage: identical tensors are stored once", "SELECT * FROM modelsql.storage;")
        show("One model in detail", "DESCRIBE MODEL digits_mlp;")
        show("A trainable model: a factory that builds a torch module from hyper-parameters", TRAINABLE_SQL)
        show("Tuning it: four step-decay schedules trained as one stage tree", TUNE_SQL, TUNE_NOTE)
        show("Its trials (SQL over the catalog)", TRIALS_SQL)
    finally:
        con.close()

    elapsed = time.perf_counter() - started
    console.print()
    summary = " · ".join(f"{name} {acc:.4f}" for name, _, acc in overall)
    console.print(f"[bold]Overall test accuracy:[/bold] {summary}", highlight=False)
    db_arg = shlex.quote(database if database == ":memory:" else shown_path)
    console.print(
        f"[bold green]Done[/bold green] in {elapsed:.1f} s. Database: {shown_path}\n"
        f'Try: modelsql --database {db_arg} -c "SHOW MODELSQL MODELS"',
        highlight=False,
    )
