"""Benchmark: TUNE of a boosted scikit-learn model, trials sharing trees, against every request trained alone.

Claim (issue 25, part 3): a boosted model's trials share training as Hippo's stage trees share epochs (a request
for more trees continues the trees its configuration has, ``warm_start``), so an ASHA study fits fewer trees than
training each request from scratch, with identical metrics. Both runs are the same statement, ``execution =
'stages'`` against ``execution = 'trials'`` (the baseline), side by side in one process, alternately for
``--repeats`` rounds (default 3), each under its own study name.

Data: ``--rows`` rows (default 20,000) of 12 float features and a binary target drawn from a fixed seed. Study:
``GradientBoostingClassifier`` (``boosted_tree_classifier``), SEARCH over ``max_depth``, ``learning_rate`` and
``subsample``, ASHA with ``max_epochs = 81`` trees, ``grace_period = 3``, ``reduction_factor = 3``, 24 trials,
metric ``log_loss``.

Writes ``benchmarks/results/tune_estimators.json``: per variant the median, min and max seconds; headline figures at
the top level: ``steps_ratio`` (trees requested / trees fitted), ``time_ratio`` (trials' median seconds / stages'),
``identical_metrics`` (every trial's per-tree metrics equal in both runs).

Run: ``python benchmarks/tune_estimators.py`` (about 3 minutes on 2 cores; ``--rows 5000 --repeats 1`` for a look).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

import modelsql

RESULTS = Path(__file__).resolve().parent / "results" / "tune_estimators.json"
STUDY = ("TUNE MODEL gb ON TABLE t TARGET y SEARCH (max_depth = CHOICE(2, 3, 4), learning_rate = LOGUNIFORM(0.03, 0.3), "
         "subsample = UNIFORM(0.6, 1.0)) USING ASHA WITH (model_type = 'boosted_tree_classifier', max_epochs = 81, "
         "grace_period = 3, reduction_factor = 3, trials = 24, metric = 'log_loss', seed = 0, "
         "study_name = '{name}', execution = '{execution}')")


def make_table(rows: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 12))
    score = x[:, 0] - 0.8 * x[:, 1] + 0.6 * x[:, 2] * x[:, 3] + 0.4 * np.sin(2 * x[:, 4]) + rng.normal(0, 0.8, rows)
    return pa.table({**{f"f{i}": x[:, i] for i in range(12)}, "y": (score > 0).astype(np.int64)})


def run(con, execution: str, name: str) -> tuple[float, tuple]:
    start = time.perf_counter()
    row = con.execute(STUDY.format(name=name, execution=execution)).fetchone()
    return time.perf_counter() - start, row


def spread(values: list[float]) -> dict:
    return {"median_s": statistics.median(values), "min_s": min(values), "max_s": max(values), "runs_s": values}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    times: dict[str, list[float]] = {"stages": [], "trials": []}
    rows: dict[str, tuple] = {}
    with tempfile.TemporaryDirectory() as work:
        con = modelsql.connect(str(Path(work) / "bench.duckdb"))
        con.autocommit = True
        con.register("data", make_table(args.rows))
        con.execute("CREATE TABLE t AS SELECT * FROM data")
        con.unregister("data")
        for r in range(args.repeats):
            for execution in (("stages", "trials") if r % 2 == 0 else ("trials", "stages")):
                seconds, rows[execution] = run(con, execution, f"{execution}_{r}")
                times[execution].append(seconds)
        metrics = {e: con.execute(f"SELECT trial, metrics FROM modelsql.trials WHERE study = '{e}_0' ORDER BY trial")
                   .fetchall() for e in times}
        con.close()
    figures = {k: spread(v) for k, v in times.items()}
    stages = rows["stages"]
    result = {
        "rows": args.rows, "repeats": args.repeats, "trials": stages[2],
        "steps_ratio": stages[9], "trees_fitted": stages[7], "trees_requested": stages[8],
        "time_ratio": figures["trials"]["median_s"] / figures["stages"]["median_s"],
        "identical_metrics": metrics["stages"] == metrics["trials"], "best_log_loss": stages[4],
        "variants": figures,
        "machine": {"python": platform.python_version(), "processor": platform.processor() or platform.machine()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if isinstance(v, (int, float, bool))}, indent=2))


if __name__ == "__main__":
    main()
