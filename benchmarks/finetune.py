"""FINETUNE PIPELINE against the original pipeline and a scikit-learn hyper-parameter search (issue 12).

Claim: translating a fitted pipeline into a differentiable program and training all its steps jointly
(``FINETUNE PIPELINE``, the original kept as a candidate chosen on validation) can only match or improve
the pipeline on validation, and helps on held-out data where a step is a real bottleneck (PCA before a
linear head). The baseline a user would reach for instead: scikit-learn's own search of the same
pipeline's hyper-parameters (PCA components, or forest size and depth), chosen on the same validation rows.

Protocol, per data set shipped with scikit-learn (digits, breast_cancer, wine), per pipeline and per seed
(5 seeds): a 60/20/20 train/validation/test split with that seed; the pipeline fitted on train; imported
with ``Connection.import_pipeline``; ``FINETUNE PIPELINE p ON TABLE train VALIDATE ON TABLE val TARGET label
WITH (epochs = 300, temperature = T, seed = s, test = test)`` (full-batch Adam, lr 3e-3); and a grid search
over the pipeline's hyper-parameters fitted on train, chosen on validation, scored on test. Pipelines:
``pca_lr`` (StandardScaler, PCA(k), LogisticRegression; k = 10 / 5 / 3 on digits / breast_cancer / wine;
searched over k) and ``rf`` (MinMaxScaler, RandomForest(10 trees, depth 4); T = 0.1; searched over trees in
{10, 30} x depth in {4, 6, 8}).

Headlines in ``benchmarks/results/finetune.json``: ``mean_gain_points`` per data set (the ``pca_lr``
pipeline: test accuracy after minus before, in points, mean over seeds), with the same for every pipeline,
wins/ties/losses, and the search's accuracy beside it.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
from sklearn.datasets import load_breast_cancer, load_digits, load_wine
from sklearn.decomposition import PCA
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MinMaxScaler, StandardScaler

import modelsql

RESULTS = Path(__file__).parent / "results" / "finetune.json"

DATASETS = {"digits": (load_digits, 10), "breast_cancer": (load_breast_cancer, 5), "wine": (load_wine, 3)}


def _pca_lr(k: int, seed: int):
    return make_pipeline(StandardScaler(), PCA(k, random_state=seed), LogisticRegression(max_iter=2000))


def _rf(trees: int, depth: int, seed: int):
    return make_pipeline(MinMaxScaler(), RandomForestClassifier(trees, max_depth=depth, random_state=seed))


def _split(x, y, seed: int):
    xtr, xrest, ytr, yrest = train_test_split(x, y, test_size=0.4, random_state=seed, stratify=y)
    xva, xte, yva, yte = train_test_split(xrest, yrest, test_size=0.5, random_state=seed, stratify=yrest)
    return (xtr, ytr), (xva, yva), (xte, yte)


def _search(candidates, parts) -> float:
    """Test accuracy of the candidate best on validation (the first of ties)."""
    (xtr, ytr), (xva, yva), (xte, yte) = parts
    fitted = [c.fit(xtr, ytr) for c in candidates]
    best = max(fitted, key=lambda p: p.score(xva, yva))
    return float(best.score(xte, yte))


def _tables(con, parts) -> None:
    cur = con.cursor()
    for name, (x, y) in zip(("train", "val", "test"), parts):
        cols = {f"f{i}": x[:, i] for i in range(x.shape[1])}
        cols["label"] = y.astype(np.int64)
        con.register(f"{name}_arrow", pa.table(cols))
        cur.execute(f"CREATE OR REPLACE TABLE {name} AS SELECT * FROM {name}_arrow")


def run_one(dataset: str, pipeline: str, seed: int, epochs: int, temperature: float) -> dict:
    loader, k = DATASETS[dataset]
    x, y = loader(return_X_y=True)
    x = x.astype(np.float32)
    parts = _split(x, y, seed)
    if pipeline == "pca_lr":
        original = _pca_lr(k, seed)
        ks = sorted({max(2, k // 2), k, min(x.shape[1], 2 * k), min(x.shape[1], 3 * k)})
        searched = _search([_pca_lr(kk, seed) for kk in ks], parts)
    else:
        original = _rf(10, 4, seed)
        searched = _search([_rf(t, d, seed) for t in (10, 30) for d in (4, 6, 8)], parts)
    original.fit(*parts[0])
    con = modelsql.connect(":memory:")
    _tables(con, parts)
    con.import_pipeline("p", original, example_input=parts[0][0][:20],
                        features=[f"f{i}" for i in range(x.shape[1])])
    start = time.perf_counter()
    cur = con.cursor()
    cur.execute(f"FINETUNE PIPELINE p ON TABLE train VALIDATE ON TABLE val TARGET label WITH (epochs = {epochs}, "
                f"temperature = {temperature}, seed = {seed}, test = test)")
    row = dict(zip([d[0] for d in cur.description], cur.fetchone()))
    con.close()
    return {"dataset": dataset, "pipeline": pipeline, "seed": seed, "temperature": temperature,
            "original": row["test_before"], "finetuned": row["test_after"], "searched": searched,
            "chosen": row["chosen"], "best_epoch": row["best_epoch"], "val_before": row["val_before"],
            "val_after": row["val_after"], "finetune_s": round(time.perf_counter() - start, 2)}


def summarize(rows: list) -> dict:
    groups: dict = {}
    for r in rows:
        groups.setdefault(f"{r['dataset']}/{r['pipeline']}", []).append(r)
    out = {}
    for key, rs in groups.items():
        gains = [100 * (r["finetuned"] - r["original"]) for r in rs]
        out[key] = {"original": statistics.mean(r["original"] for r in rs),
                    "finetuned": statistics.mean(r["finetuned"] for r in rs),
                    "searched": statistics.mean(r["searched"] for r in rs),
                    "mean_gain_points": statistics.mean(gains), "gain_range_points": [min(gains), max(gains)],
                    "wins_ties_losses": [sum(g > 1e-9 for g in gains), sum(abs(g) <= 1e-9 for g in gains),
                                         sum(g < -1e-9 for g in gains)],
                    "kept_original": sum(r["chosen"] == "original" for r in rs)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=300)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    rows = []
    for dataset in DATASETS:
        for pipeline in ("pca_lr", "rf"):
            for seed in range(args.seeds):
                rows.append(run_one(dataset, pipeline, seed, args.epochs, 0.1))
                print(json.dumps(rows[-1]))
    groups = summarize(rows)
    result = {
        "mean_gain_points": {d: groups[f"{d}/pca_lr"]["mean_gain_points"] for d in DATASETS},
        "mean_gain_points_rf": {d: groups[f"{d}/rf"]["mean_gain_points"] for d in DATASETS},
        "groups": groups, "runs": rows,
        "machine": {"platform": platform.platform()},
        "command": f"python benchmarks/finetune.py --seeds {args.seeds} --epochs {args.epochs}",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k not in ("runs",)}, indent=1))


if __name__ == "__main__":
    main()
