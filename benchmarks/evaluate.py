"""Benchmark: EVALUATE of a classifier over many rows, against the PREDICT alone and the script a user writes.

Claim (issue 25): EVALUATE runs as one query with its PREDICT (the model sees each row once; what leaves DuckDB
is the target, the prediction, the probabilities and each input row's hash as Arrow columns, counted and ranked
in NumPy), so it costs at most 1.15x the PREDICT alone of the same rows, and less than the script a user
writes instead: read the rows with DuckDB, ``model.predict`` / ``predict_proba``, then ``sklearn.metrics``
(accuracy, precision, recall, F1, log loss, ROC AUC, the confusion matrix: what EVALUATE returns).

Data: ``--rows`` rows (default 1,000,000) of 10 float features and a 3-class label, drawn from a fixed seed;
the model a scikit-learn ``LogisticRegression`` fitted on 10,000 of them. The three are run alternately for
``--repeats`` rounds (default 5) in one process, each timed end to end (the PREDICT alone reads both outputs
EVALUATE reads, ``label`` and ``probabilities``, in one aggregate so nothing is pruned).

The floor under the first goal: ROC AUC (one-vs-rest) needs the rows ranked by each class's probability, one sort
of the rows per class, which nothing of the PREDICT alone does. ``sort`` times NumPy sorting the three probability
columns, ready in memory (the cheapest ranking there is: no window, no ties, no DuckDB); ``floor_vs_predict`` is
(PREDICT alone + that sort) / PREDICT alone, the least any EVALUATE returning ROC AUC can take.
``fingerprint`` times DuckDB summing the hash of every input row alone (the fingerprint of the rows read that every
EVALUATE records); ``floor_with_fingerprint_vs_predict`` adds it (the PREDICT alone keeps the two cores about 90%
busy, its process CPU time 1.8x its wall time, so the two hardly overlap).

Writes ``benchmarks/results/evaluate.json``: per variant the median, min and max seconds; headline figures at
the top level: ``evaluate_vs_predict``, ``evaluate_vs_script`` and ``floor_vs_predict`` (ratios of medians),
``rows``.

Run: ``python benchmarks/evaluate.py`` (about 2 minutes on 2 cores; ``--rows 100000 --repeats 3`` for a look).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
from sklearn import metrics as M
from sklearn.linear_model import LogisticRegression

import modelsql

RESULTS = Path(__file__).resolve().parent / "results" / "evaluate.json"
FEATURES = [f"f{i}" for i in range(10)]


def make_data(rows: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Features (rows, 10) and a 3-class label depending on them with noise."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, len(FEATURES)))
    logits = x[:, :3] * np.array([1.5, -1.0, 0.8]) + rng.normal(scale=0.8, size=(rows, 3))
    return x, np.argmax(logits, axis=1)


def predict_alone(con) -> float:
    start = time.perf_counter()
    con.execute("SELECT count(*), sum(label), sum(list_sum(probabilities)) FROM PREDICT(MODEL m, TABLE t)").fetchall()
    return time.perf_counter() - start


def evaluate(con) -> float:
    start = time.perf_counter()
    con.execute("EVALUATE MODEL m ON TABLE t TARGET y").fetchall()
    return time.perf_counter() - start


def script(con, model: LogisticRegression) -> float:
    """What a user writes without EVALUATE: the rows out of DuckDB, the estimator, then sklearn.metrics."""
    start = time.perf_counter()
    data = con.execute(f"SELECT {', '.join(FEATURES)}, y FROM t").fetch_arrow()
    x = np.column_stack([data.column(f).to_numpy() for f in FEATURES])
    y = data.column("y").to_numpy()
    predicted, proba = model.predict(x), model.predict_proba(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        [M.accuracy_score(y, predicted), M.precision_score(y, predicted, average="macro"),
         M.recall_score(y, predicted, average="macro"), M.f1_score(y, predicted, average="macro"),
         M.log_loss(y, proba), M.roc_auc_score(y, proba, multi_class="ovr"), M.confusion_matrix(y, predicted)]
    return time.perf_counter() - start


def sort_probabilities(columns: list[np.ndarray]) -> float:
    """The floor's ranking: NumPy sorting each class's probabilities (float32, contiguous)."""
    start = time.perf_counter()
    for column in columns:
        np.sort(column)
    return time.perf_counter() - start


def fingerprint_alone(con) -> float:
    """The fingerprint EVALUATE records of the rows it read (the sum of every input row's hash), alone."""
    start = time.perf_counter()
    con.execute(f"SELECT count(*), sum(hash({', '.join(FEATURES)}, y)::HUGEINT) FROM t").fetchall()
    return time.perf_counter() - start


def spread(values: list[float]) -> dict:
    return {"median_s": statistics.median(values), "min_s": min(values), "max_s": max(values), "runs_s": values}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    x, y = make_data(args.rows)
    model = LogisticRegression(max_iter=500).fit(x[:10_000], y[:10_000])
    with tempfile.TemporaryDirectory() as work:
        con = modelsql.connect(str(Path(work) / "bench.duckdb"))
        con.autocommit = True
        con.register("data", pa.table({**{f: x[:, i] for i, f in enumerate(FEATURES)}, "y": y}))
        con.execute("CREATE TABLE t AS SELECT * FROM data")
        con.unregister("data")
        con.import_model("m", model, features=FEATURES)
        probabilities = con.execute("SELECT probabilities FROM PREDICT(MODEL m, TABLE t)").fetch_arrow()
        flat = probabilities.column(0).combine_chunks().flatten().to_numpy().reshape(args.rows, -1)
        columns = [np.ascontiguousarray(flat[:, k]) for k in range(flat.shape[1])]
        variants = {"predict": lambda: predict_alone(con), "evaluate": lambda: evaluate(con),
                    "script": lambda: script(con, model), "sort": lambda: sort_probabilities(columns),
                    "fingerprint": lambda: fingerprint_alone(con)}
        for run in variants.values():  # warm: sessions, caches, imports
            run()
        times: dict[str, list[float]] = {k: [] for k in variants}
        for r in range(args.repeats):
            order = list(variants) if r % 2 == 0 else list(reversed(variants))
            for name in order:
                times[name].append(variants[name]())
        accuracy = con.execute("SELECT (metrics->>'accuracy')::DOUBLE FROM modelsql.evaluations "
                               "ORDER BY evaluation DESC LIMIT 1").fetchone()[0]
        con.close()
    figures = {k: spread(v) for k, v in times.items()}
    result = {
        "rows": args.rows, "repeats": args.repeats,
        "evaluate_vs_predict": figures["evaluate"]["median_s"] / figures["predict"]["median_s"],
        "evaluate_vs_script": figures["evaluate"]["median_s"] / figures["script"]["median_s"],
        "floor_vs_predict": (figures["predict"]["median_s"] + figures["sort"]["median_s"])
        / figures["predict"]["median_s"],
        "floor_with_fingerprint_vs_predict": (figures["predict"]["median_s"] + figures["sort"]["median_s"]
                                              + figures["fingerprint"]["median_s"]) / figures["predict"]["median_s"],
        "goal_evaluate_vs_predict_at_most": 1.15, "accuracy": accuracy, "variants": figures,
        "machine": {"python": platform.python_version(), "processor": platform.processor() or platform.machine(),
                    "numpy": np.__version__, "duckdb": duckdb.__version__},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if isinstance(v, (int, float))}, indent=2))


if __name__ == "__main__":
    main()
