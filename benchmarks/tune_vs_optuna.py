"""Benchmark: TUNE against the loop a user writes instead, Optuna driving a hand-written PyTorch loop.

Claim (issue 25, part 5): TUNE's per-epoch metrics are bit-identical to the hand-written loop's (same model,
schedule, data order, sampler and pruner), its stage tree trains fewer epochs, and its fixed costs (worker start,
catalog writes) are small enough that a study in a fresh process takes at most 0.6x Optuna's time, and a second
study in the same process at most 0.25x.

Workload: scikit-learn's digits (64 pixel columns scaled to [0, 1]; the first 1,000 rows train, the next 300
validate, as tables ``train`` and ``val``); ``modelsql.zoo:mlp`` (``--model mlp``: hidden 64, 2 layers) or a wider one
(``--model wide``: hidden 256, 3 layers); SEARCH ``lr = CHOICE(0.1, 0.05, 0.02)``, ``hidden`` / width choices,
SGD with momentum 0.9, batch 32; ASHA (Optuna's ``SuccessiveHalvingPruner``: grace period 1, reduction factor 3,
27 epochs) with a TPE sampler (seed 0), 30 trials, one at a time (``max_concurrent_trials = 1``: the hand loop runs
trials one after another, so both make the same decisions), one worker, one thread; metric ``val_loss``.

The hand loop (``--variant optuna``): ``study.optimize`` over an objective that seeds as TUNE's trainer does
(``random``, NumPy and torch with the study seed, a ``torch.Generator`` for the data order), builds the same model and
SGD optimizer, and per epoch shuffles, trains in batches, computes the validation loss (a sum over chunks of 4,096
rows, over the row count), reports it and prunes as Optuna's docs show. TUNE (``--variant tune``): ``CREATE MODEL
mlp FROM PYTHON 'modelsql.zoo:mlp'`` and the TUNE statement.

Each variant runs as its own ``python`` process, ``--repeats`` times (default 3), alternately; inside each, a
second study (seed 1, the same space) runs after the first and is timed on its own. Figures: ``fresh``, the wall
seconds from starting the interpreter to the first study's answer (interpreter start, imports, loading the data,
TUNE's worker start: what the user waits, end to end); ``second``, the second study alone; epochs trained;
``identical_metrics``: every trial's per-epoch validation losses equal, to the bit, between the two (first
studies); ``second_floor_ratio``, the least the second study's ratio can be with the epochs its stage tree
trains: the seconds its stages spent training (timed inside them) over Optuna's second study.

Both variants' processes find their packages' bytecode compiled, as an installed package's is (``precompile``;
a machine with ``PYTHONDONTWRITEBYTECODE`` set would make each fresh TUNE process compile modelsql from source).

Writes ``benchmarks/results/tune_vs_optuna.json`` (per model): medians, min and max; headline figures at the top
level: ``fresh_ratio`` and ``second_ratio`` (TUNE / Optuna, medians) per model, ``identical_metrics``.

Run: ``python benchmarks/tune_vs_optuna.py`` (about 4 minutes on 2 cores; ``--repeats 1 --models mlp`` for a look).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results" / "tune_vs_optuna.json"
MODELS = {"mlp": {"hidden": (32, 64), "layers": 2}, "wide": {"hidden": (128, 256), "layers": 3}}
LRS = (0.1, 0.05, 0.02)
TRIALS, MAX_EPOCHS, BATCH, MOMENTUM = 30, 27, 32, 0.9


def make_db(path: str) -> None:
    import modelsql
    import pyarrow as pa
    from sklearn.datasets import load_digits

    d = load_digits()
    table = pa.table({**{f"p{i}": (d.data[:, i] / 16).astype(np.float32) for i in range(64)},
                      "label": d.target.astype(np.int64)})
    con = modelsql.connect(path)
    con.register("digits_arrow", table)
    con.execute("CREATE TABLE digits AS SELECT * FROM digits_arrow")
    con.execute("CREATE TABLE train AS SELECT * FROM digits LIMIT 1000")
    con.execute("CREATE TABLE val AS SELECT * FROM digits LIMIT 300 OFFSET 1000")
    con.commit()
    con.close()


# ---------------------------------------------------------------- the two variants, each in its own process


def tune(db: str, model: str, seed: int, name: str) -> tuple[float, dict]:
    import modelsql

    spec = MODELS[model]
    start = time.perf_counter()
    con = modelsql.connect(db)
    con.autocommit = True
    if seed == 0:
        con.execute(f"CREATE OR REPLACE MODEL {model} FROM PYTHON 'modelsql.zoo:mlp' WITH (layers = {spec['layers']})")
    row = con.execute(
        f"TUNE MODEL {model} ON TABLE train VALIDATE ON TABLE val TARGET label SEARCH (lr = CHOICE{LRS}, "
        f"hidden = CHOICE{spec['hidden']}, momentum = {MOMENTUM}, batch_size = {BATCH}) USING ASHA WITH ("
        f"max_epochs = {MAX_EPOCHS}, trials = {TRIALS}, grace_period = 1, reduction_factor = 3, sampler = 'tpe', "
        f"max_concurrent_trials = 1, seed = {seed}, workers = 1, threads = 1, study_name = '{name}')").fetchone()
    seconds = time.perf_counter() - start
    trials = {t: [float(v).hex() for v in m] for t, m in con.execute(
        "SELECT trial, metrics FROM modelsql.trials WHERE study = ? ORDER BY trial", [name]).fetchall()}
    training_s = con.execute("SELECT coalesce(sum(seconds), 0) FROM modelsql.stages WHERE study = ?",
                             [name]).fetchone()[0]
    con.close()
    return seconds, {"epochs": row[7], "requested": row[8], "trials": trials, "training_s": training_s}


def optuna_loop(db: str, model: str, seed: int) -> tuple[float, dict]:
    import duckdb
    import optuna
    import torch
    import torch.nn.functional as F

    from modelsql.zoo import mlp

    start = time.perf_counter()
    con = duckdb.connect(db, read_only=True)
    features = [f"p{i}" for i in range(64)]

    def matrix(table: str) -> tuple["torch.Tensor", "torch.Tensor"]:
        columns = con.execute(f"SELECT {', '.join(features)}, label FROM {table}").fetchnumpy()
        x = np.column_stack([columns[f] for f in features]).astype(np.float32)
        return torch.from_numpy(x), torch.from_numpy(columns["label"].astype(np.int64))

    (x, y), (xv, yv) = matrix("train"), matrix("val")
    con.close()
    spec = MODELS[model]
    history: dict[int, list[str]] = {}
    epochs = [0]

    def objective(trial: optuna.Trial) -> float:
        lr = trial.suggest_categorical("lr", LRS)
        hidden = trial.suggest_categorical("hidden", spec["hidden"])
        torch.set_num_threads(1)
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)
        net = mlp(64, 10, hidden=hidden, layers=spec["layers"])
        optimizer = torch.optim.SGD(net.parameters(), lr=lr, momentum=MOMENTUM, weight_decay=0.0)
        gen = torch.Generator()
        gen.manual_seed(seed)
        losses = history.setdefault(trial.number, [])
        for epoch in range(MAX_EPOCHS):
            net.train()
            perm = torch.randperm(len(x), generator=gen)
            for i in range(0, len(x), BATCH):
                idx = perm[i:i + BATCH]
                optimizer.zero_grad()
                loss = F.cross_entropy(net(x[idx]), y[idx])
                loss.backward()
                optimizer.step()
            net.eval()
            with torch.no_grad():
                val_loss = sum(F.cross_entropy(net(xv[i:i + 4096]), yv[i:i + 4096], reduction="sum").item()
                               for i in range(0, len(xv), 4096)) / len(xv)
            epochs[0] += 1
            losses.append(float(val_loss).hex())
            trial.report(val_loss, epoch + 1)
            if trial.should_prune():
                raise optuna.TrialPruned()
        return val_loss

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="minimize", sampler=optuna.samplers.TPESampler(seed=seed),
                                pruner=optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=3,
                                                                              min_early_stopping_rate=0,
                                                                              bootstrap_count=0))
    study.optimize(objective, n_trials=TRIALS)
    return time.perf_counter() - start, {"epochs": epochs[0], "requested": epochs[0], "trials": history}


def child(args: argparse.Namespace) -> None:
    """One fresh process: the first study (seed 0), then a second (seed 1); prints JSON."""
    if args.variant == "tune":
        first_s, first = tune(args.db, args.model, 0, f"{args.model}_s0_{args.tag}")
        first_done = time.time()
        second_s, second = tune(args.db, args.model, 1, f"{args.model}_s1_{args.tag}")
    else:
        first_s, first = optuna_loop(args.db, args.model, 0)
        first_done = time.time()
        second_s, second = optuna_loop(args.db, args.model, 1)
    print(json.dumps({"first_s": first_s, "second_s": second_s, "first_done": first_done, "first": first,
                      "second": second}))


# ---------------------------------------------------------------- the parent


def spread(values: list[float]) -> dict:
    return {"median_s": statistics.median(values), "min_s": min(values), "max_s": max(values), "runs_s": values}


def child_env() -> dict:
    """The children's environment: bytecode cached beside the sources, as in any installed package (pip compiles
    what it installs) or working copy. Where ``PYTHONDONTWRITEBYTECODE`` is set (this project's CI machines set
    it), every fresh process would otherwise compile modelsql's ~250 modules from source (0.37 s on 2 cores)
    where the hand loop's packages are compiled already."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def precompile(env: dict) -> None:
    """Compile modelsql, and what either variant imports, before the first timed run."""
    import modelsql

    subprocess.run([sys.executable, "-m", "compileall", "-q", str(Path(modelsql.__file__).parent)], env=env,
                   check=True)
    subprocess.run([sys.executable, "-c", "import modelsql, optuna, torch, torch._dynamo, duckdb, sklearn"], env=env,
                   check=True)


def measure(model: str, repeats: int, work: Path) -> dict:
    env = child_env()
    precompile(env)
    runs: dict[str, list[dict]] = {"tune": [], "optuna": []}
    for r in range(repeats):
        for variant in (("tune", "optuna") if r % 2 == 0 else ("optuna", "tune")):
            db = work / f"{model}_{variant}_{r}.duckdb"  # a fresh database: no stage tree of an earlier run
            make_db(str(db))
            start = time.time()
            out = subprocess.run([sys.executable, __file__, "--child", "--variant", variant, "--db", str(db),
                                  "--model", model, "--tag", str(r)], capture_output=True, text=True, check=True, env=env)
            child_out = json.loads(out.stdout.strip().splitlines()[-1])
            # fresh: from starting the interpreter to the first study's answer (imports and worker start included)
            runs[variant].append({"fresh_s": child_out["first_done"] - start, **child_out})
    tune_first, optuna_first = runs["tune"][0]["first"]["trials"], runs["optuna"][0]["first"]["trials"]
    identical = {int(k): v for k, v in tune_first.items()} == {int(k): v for k, v in optuna_first.items()}
    figures = {v: {"fresh": spread([x["fresh_s"] for x in rs]), "second": spread([x["second_s"] for x in rs]),
                   "epochs_first": rs[0]["first"]["epochs"], "epochs_second": rs[0]["second"]["epochs"]}
               for v, rs in runs.items()}
    figures["tune"]["second_training"] = spread([x["second"]["training_s"] for x in runs["tune"]])
    optuna_second = figures["optuna"]["second"]["median_s"]
    return {"fresh_ratio": figures["tune"]["fresh"]["median_s"] / figures["optuna"]["fresh"]["median_s"],
            "second_ratio": figures["tune"]["second"]["median_s"] / optuna_second,
            # the floor: TUNE's second study spending nothing but its stages' training (its epochs, as timed
            # inside the stages) against Optuna's whole second study
            "second_floor_ratio": figures["tune"]["second_training"]["median_s"] / optuna_second,
            "identical_metrics": identical, "variants": figures}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--models", default="mlp,wide")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--variant", help=argparse.SUPPRESS)
    ap.add_argument("--db", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--tag", default="0", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)
    result: dict = {"repeats": args.repeats, "goal_fresh_at_most": 0.6, "goal_second_at_most": 0.25}
    with tempfile.TemporaryDirectory() as work:
        for model in args.models.split(","):
            figures = measure(model, args.repeats, Path(work))
            result[f"{model}_fresh_ratio"] = figures["fresh_ratio"]
            result[f"{model}_second_ratio"] = figures["second_ratio"]
            result[f"{model}_second_floor_ratio"] = figures["second_floor_ratio"]
            result[f"{model}_identical_metrics"] = figures["identical_metrics"]
            result[model] = figures
            print(model, {k: v for k, v in figures.items() if k != "variants"}, flush=True)
    result["identical_metrics"] = all(v for k, v in result.items() if k.endswith("_identical_metrics"))
    result["machine"] = {"python": platform.python_version(), "processor": platform.processor() or platform.machine()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if isinstance(v, (int, float, bool))}, indent=2))


if __name__ == "__main__":
    main()
