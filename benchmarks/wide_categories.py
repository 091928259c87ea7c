"""Benchmark: CREATE MODEL ... AS SELECT over a wide text column, against the same fit by hand.

Claim (issue 25, part 2): training in SQL encodes a text column of many values as the best hand-written script
does, a sparse one-hot matrix for an estimator fitted the same on sparse rows (``SPARSE_SAME`` in
``modelsql/estimators/model_types.py``), so time and memory follow the rows, not rows x categories; the dense
encoding modelsql used before is measured beside them.

Data: ``--rows`` rows (default 300,000) of one float feature and a text column of ``--categories`` values (default
1,000), a binary target, drawn from a fixed seed, in a DuckDB table. Variants, each in a fresh ``python`` process
(its peak resident memory is the process's ``ru_maxrss``), alternately for ``--repeats`` rounds (default 3):

* ``create_model``: ``CREATE MODEL m WITH (model_type = 'logistic_reg', target = y, validation = 'none') AS
  SELECT * FROM t`` (the statement also converts, checks, stores and evaluates the model);
* ``by_hand``: the script a user writes, configured at its best: the rows to pandas, ``Pipeline([ColumnTransformer
  ([StandardScaler, OneHotEncoder(handle_unknown="ignore")]), LogisticRegression])`` fitted (scikit-learn's
  default sparse one-hot), converted with skl2onnx;
* ``by_hand_dense``: the same with ``OneHotEncoder(sparse_output=False)``, the encoding modelsql used before.

Writes ``benchmarks/results/wide_categories.json``: per variant the median, min and max of the seconds (the work
alone, not the interpreter's start) and of the peak memory (MB); headline figures at the top level: ``time_ratio``
and ``memory_ratio`` (create_model / by_hand) and ``dense_time_ratio`` / ``dense_memory_ratio`` (by_hand_dense /
create_model: what sparse saves).

Run: ``python benchmarks/wide_categories.py`` (about 3 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results" / "wide_categories.json"
VARIANTS = ("create_model", "by_hand", "by_hand_dense")


def make_db(path: str, rows: int, categories: int) -> None:
    import modelsql
    import pyarrow as pa

    rng = np.random.default_rng(0)
    city = rng.integers(0, categories, rows)
    table = pa.table({"x": rng.normal(size=rows), "city": np.array([f"c{v}" for v in city]),
                      "y": ((city % 7 < 3) ^ (rng.random(rows) < 0.1)).astype(np.int64)})
    con = modelsql.connect(path)
    con.register("data", table)
    con.execute("CREATE TABLE t AS SELECT * FROM data")
    con.commit()
    con.close()


def run_variant(variant: str, db: str) -> float:
    """One variant's work in this process; its seconds."""
    import modelsql

    start = time.perf_counter()
    con = modelsql.connect(db)
    if variant == "create_model":
        con.execute("CREATE MODEL m WITH (model_type = 'logistic_reg', target = y, validation = 'none') "
                    "AS SELECT * FROM t").fetchall()
        return time.perf_counter() - start
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import FloatTensorType, StringTensorType
    from sklearn.compose import ColumnTransformer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    frame = con.execute("SELECT * FROM t").fetch_arrow().to_pandas()
    frame["city"] = frame["city"].astype(object)
    encoder = OneHotEncoder(handle_unknown="ignore", **({"sparse_output": False} if variant == "by_hand_dense" else {}))
    pipeline = Pipeline([("preprocess", ColumnTransformer([("numeric", StandardScaler(), ["x"]),
                                                           ("categorical", encoder, ["city"])])),
                         ("model", LogisticRegression(random_state=0))])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pipeline.fit(frame[["x", "city"]], frame["y"].to_numpy())
    convert_sklearn(pipeline, initial_types=[("x", FloatTensorType([None, 1])), ("city", StringTensorType([None, 1]))],
                    options={id(pipeline.steps[-1][1]): {"zipmap": False}}, target_opset={"": 17, "ai.onnx.ml": 3})
    return time.perf_counter() - start


def spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": values}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=300_000)
    ap.add_argument("--categories", type=int, default=1_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--db", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        seconds = run_variant(args.child, args.db)
        print(json.dumps({"seconds": seconds, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
        return
    runs: dict[str, dict[str, list[float]]] = {v: {"seconds": [], "peak_mb": []} for v in VARIANTS}
    with tempfile.TemporaryDirectory() as work:
        for r in range(args.repeats):
            for variant in (VARIANTS if r % 2 == 0 else tuple(reversed(VARIANTS))):
                db = str(Path(work) / f"{variant}_{r}.duckdb")  # a fresh database: no model of an earlier run
                make_db(db, args.rows, args.categories)
                out = subprocess.run([sys.executable, __file__, "--child", variant, "--db", db], capture_output=True,
                                     text=True, check=True)
                figures = json.loads(out.stdout.strip().splitlines()[-1])
                for key in ("seconds", "peak_mb"):
                    runs[variant][key].append(figures[key])
    med = {v: {k: statistics.median(x) for k, x in f.items()} for v, f in runs.items()}
    result = {
        "rows": args.rows, "categories": args.categories, "repeats": args.repeats,
        "time_ratio": med["create_model"]["seconds"] / med["by_hand"]["seconds"],
        "memory_ratio": med["create_model"]["peak_mb"] / med["by_hand"]["peak_mb"],
        "dense_time_ratio": med["by_hand_dense"]["seconds"] / med["create_model"]["seconds"],
        "dense_memory_ratio": med["by_hand_dense"]["peak_mb"] / med["create_model"]["peak_mb"],
        "variants": {v: {k: spread(x) for k, x in f.items()} for v, f in runs.items()},
        "machine": {"python": platform.python_version(), "processor": platform.processor() or platform.machine()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if isinstance(v, (int, float))}, indent=2))


if __name__ == "__main__":
    main()
