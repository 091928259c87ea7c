"""Benchmark: CREATE MODEL ... AS SELECT against the same scikit-learn fit by hand plus its conversion.

Claim (issue 25): training a standard model in SQL costs at most 1.2x what a user's script costs for the same
model: read the rows with DuckDB, fit the same scikit-learn pipeline on the same training rows, convert it to
ONNX with skl2onnx. The statement does more than that script (it checks the conversion on 256 rows, stores the
version and runs EVALUATE on the validation rows); the ratio says what that costs.

Data: ``--rows`` rows (default 100,000) of 8 float features, 2 text columns of 5 and 12 categories and a binary
target, drawn from a fixed seed. Model types: ``logistic_reg`` (a fast fit: the fixed costs show) and
``random_forest_classifier`` (50 trees of depth 8) and ``boosted_tree_classifier`` (30 trees, depth 3), each
with ``validation = 'auto'`` (10,000 random rows held out above 50,000 rows); the script fits on the same
training rows (``train_test_split``, sorted). The two are run alternately for ``--repeats`` rounds (default 3).

The statement does three things the script does not, and each is timed alone beside each round, on the script's
own fitted pipeline: the conversion check (``modelsql.converters.conversion_check.check_conversion`` of the pipeline
against its ONNX graph on 256 training rows: an ONNX Runtime session and scikit-learn's answers), storing the
version (``import_model`` of the converted ONNX graph: its blobs in the store and its catalog rows, one committed
transaction) and the evaluation of the validation rows (an ``EVALUATE`` of the trained version on a table of the same
number of rows). ``<type>_floor_vs_by_hand`` is (the script + those three) / the script: the least the statement can
cost, each part done as fast as modelsql does it alone; ``<type>_evaluate_floor_vs_by_hand`` counts the EVALUATE
alone.

Writes ``benchmarks/results/create_model.json``: per model type and variant the median, min and max seconds;
headline figures at the top level: ``<type>_vs_by_hand`` (ratios of medians), ``<type>_floor_vs_by_hand``,
``<type>_evaluate_floor_vs_by_hand`` and ``worst_vs_by_hand``.

Run: ``python benchmarks/create_model.py`` (about 3 minutes on 2 cores; ``--rows 20000 --repeats 1`` for a look).
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
from typing import Optional

import numpy as np
import pyarrow as pa
from skl2onnx import convert_sklearn
from skl2onnx.common.data_types import FloatTensorType, StringTensorType
from sklearn.compose import ColumnTransformer
from sklearn.ensemble import GradientBoostingClassifier, RandomForestClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler

import modelsql
from modelsql.converters.conversion_check import check_conversion

RESULTS = Path(__file__).resolve().parent / "results" / "create_model.json"
NUMERIC = [f"f{i}" for i in range(8)]
TEXT = ["region", "plan"]
TYPES = {
    "logistic_reg": ("", lambda: LogisticRegression(random_state=0), True),
    "random_forest_classifier": (", n_estimators = 50, max_depth = 8",
                                 lambda: RandomForestClassifier(n_estimators=50, max_depth=8, random_state=0), False),
    "boosted_tree_classifier": (", n_estimators = 30, max_depth = 3",
                                lambda: GradientBoostingClassifier(n_estimators=30, max_depth=3, random_state=0),
                                False),
}


def make_table(rows: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, len(NUMERIC)))
    region = rng.integers(0, 5, rows)
    plan = rng.integers(0, 12, rows)
    score = x[:, 0] - 0.7 * x[:, 1] + 0.5 * x[:, 2] * x[:, 3] + 0.3 * (region == 2) - 0.2 * (plan % 3) \
        + rng.normal(scale=0.7, size=rows)
    return pa.table({**{f: x[:, i] for i, f in enumerate(NUMERIC)},
                     "region": np.array([f"r{v}" for v in region]), "plan": np.array([f"p{v}" for v in plan]),
                     "y": (score > 0).astype(np.int64)})


def in_sql(con, model_type: str, hyper: str, run: int) -> float:
    start = time.perf_counter()
    con.execute(f"CREATE OR REPLACE MODEL m_{model_type} WITH (model_type = '{model_type}', target = y{hyper}) "
                "AS SELECT * FROM t").fetchall()
    return time.perf_counter() - start


def by_hand(con, make_estimator, scaled: bool, keep: Optional[dict] = None) -> float:
    """The user's script: the rows out of DuckDB, the same split, the same pipeline fitted, converted (``keep``
    gets the fitted pipeline, its ONNX graph and 256 of its training rows, for the floor's parts)."""
    start = time.perf_counter()
    frame = con.execute("SELECT * FROM t").fetch_arrow().to_pandas()
    for c in TEXT:
        frame[c] = frame[c].astype(object)
    held = 10_000 if len(frame) > 50_000 else 0.2  # validation = 'auto'
    train, _ = train_test_split(np.arange(len(frame)), test_size=held, random_state=0)
    train.sort()
    pipeline = Pipeline([("preprocess", ColumnTransformer([
        ("numeric", StandardScaler() if scaled else "passthrough", NUMERIC),
        ("categorical", OneHotEncoder(handle_unknown="ignore", sparse_output=False), TEXT)])),
        ("model", make_estimator())])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pipeline.fit(frame.iloc[train][NUMERIC + TEXT], frame["y"].to_numpy()[train])
    types = [(c, FloatTensorType([None, 1])) for c in NUMERIC] + [(c, StringTensorType([None, 1])) for c in TEXT]
    onnx_model = convert_sklearn(pipeline, initial_types=types,
                                 options={id(pipeline.steps[-1][1]): {"zipmap": False}},
                                 target_opset={"": 17, "ai.onnx.ml": 3})
    seconds = time.perf_counter() - start
    if keep is not None:
        sample = frame.iloc[train[np.linspace(0, len(train) - 1, 256).astype(np.int64)]][NUMERIC + TEXT]
        keep.update(pipeline=pipeline, onnx=onnx_model, sample=sample)
    return seconds


def check_alone(kept: dict) -> float:
    """The conversion check of the script's pipeline against its graph on 256 of its training rows."""
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_conversion(kept["pipeline"], kept["onnx"], kept["sample"], tolerance=1e-3)
    return time.perf_counter() - start


def store_alone(con, kept: dict, run: int) -> float:
    """Storing the script's converted graph as a version: its blobs and catalog rows, one committed transaction."""
    start = time.perf_counter()
    con.import_model(f"stored_{run}", kept["onnx"], replace=True)
    return time.perf_counter() - start


def evaluate_alone(con, model_type: str) -> float:
    """EVALUATE of the trained version on 10,000 rows (what the statement's validation evaluation reads)."""
    start = time.perf_counter()
    con.execute(f"EVALUATE MODEL m_{model_type} ON TABLE validation_sized TARGET y").fetchall()
    return time.perf_counter() - start


def spread(values: list[float]) -> dict:
    return {"median_s": statistics.median(values), "min_s": min(values), "max_s": max(values), "runs_s": values}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--types", default=",".join(TYPES), help="model types, comma-separated (default: all three)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    result: dict = {"rows": args.rows, "repeats": args.repeats, "goal_at_most": 1.2, "model_types": {}}
    with tempfile.TemporaryDirectory() as work:
        con = modelsql.connect(str(Path(work) / "bench.duckdb"))
        con.autocommit = True
        con.register("data", make_table(args.rows))
        con.execute("CREATE TABLE t AS SELECT * FROM data")
        con.unregister("data")
        held = 10_000 if args.rows > 50_000 else round(0.2 * args.rows)
        con.execute(f"CREATE TABLE validation_sized AS SELECT * FROM t LIMIT {held}")
        for model_type in args.types.split(","):
            hyper, make_estimator, scaled = TYPES[model_type]
            kept: dict = {}
            variants = {"create_model": lambda r: in_sql(con, model_type, hyper, r),
                        "by_hand": lambda r: by_hand(con, make_estimator, scaled, kept),
                        "evaluate_alone": lambda r: evaluate_alone(con, model_type),
                        "check_alone": lambda r: check_alone(kept),
                        "store_alone": lambda r: store_alone(con, kept, r)}
            times: dict[str, list[float]] = {k: [] for k in variants}
            for r in range(args.repeats + 1):  # the first round warms imports and caches, and is dropped
                # the script runs before the floor's parts, which use what it fitted
                order = list(variants) if r % 2 == 0 else ["by_hand", "create_model", *list(variants)[2:][::-1]]
                for name in order:
                    seconds = variants[name](r)
                    if r:
                        times[name].append(seconds)
            accuracy = con.execute(f"SELECT (metrics->>'accuracy')::DOUBLE FROM modelsql.evaluations WHERE name = "
                                   f"'m_{model_type}' ORDER BY evaluation DESC LIMIT 1").fetchone()[0]
            figures = {k: spread(v) for k, v in times.items()}
            ratio = figures["create_model"]["median_s"] / figures["by_hand"]["median_s"]
            result[f"{model_type}_vs_by_hand"] = ratio
            hand = figures["by_hand"]["median_s"]
            result[f"{model_type}_floor_vs_by_hand"] = (hand + sum(
                figures[k]["median_s"] for k in ("evaluate_alone", "check_alone", "store_alone"))) / hand
            result[f"{model_type}_evaluate_floor_vs_by_hand"] = (hand + figures["evaluate_alone"]["median_s"]) / hand
            result["model_types"][model_type] = {"validation_accuracy": accuracy, "variants": figures}
            print(model_type, f"{ratio:.2f}x", {k: round(v["median_s"], 3) for k, v in figures.items()}, flush=True)
        con.close()
    result["worst_vs_by_hand"] = max(v for k, v in result.items() if k.endswith("_vs_by_hand") and "floor" not in k)
    result["machine"] = {"python": platform.python_version(), "processor": platform.processor() or platform.machine()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if isinstance(v, (int, float))}, indent=2))


if __name__ == "__main__":
    main()
