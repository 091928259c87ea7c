"""The learned cost model (Mantis, Chun et al. 2010): how well it predicts ONNX Runtime latencies of runs it
was not trained on, against the noise of the measurements themselves.

Claim: from static program features (per-operator-class kernels, FLOPs and bytes; tree-ensemble work) and
the run's configuration (batch, threads), ``modelsql.costmodel.CostModel`` trained on a small share of
profiled runs predicts the rest, and runs of models it never saw, about as well as a second measurement of
the same runs agrees with the first. Mantis reports > 93% accuracy from < 10% training data; nn-Meter
(MobiSys 2021) and LitePred (NSDI 2024) predict 99% of DL inference latencies within 10% on their devices.

Workload: ``modelsql.costmodel.zoo`` (36 models built in code: MLPs, CNNs, ResNet-18/50, ResNeXt-50, BERT
encoders, ``nn.TransformerEncoder``, scikit-learn pipelines, NetFuse merges of N = 2, 4, 8), each at its
batch sizes (1 to 128 for light models, 1 to 8 for heavy ones) and intra-op threads {1, 2}: one point per
(model, batch, threads). Profiled by ``modelsql.operators.backends.profiling.profile_latency`` (every
configuration of a model interleaved round by round, ``--repeat`` timed runs after 2 warm-ups, spinning
off): the point's latency is the median of its runs.

Two independent passes over the zoo (pass B visits the models in reverse order):

* ``noise_ceiling``: the share of points whose pass-A median is within 10% of the pass-B median (how well a
  perfect re-measurement "predicts"; no model can be expected to do much better);
* ``within_10pct``: train on a random 10% of the pass-A points (``--splits`` random splits), predict the other
  90%; the median over splits of the share within 10% (spread: min, quartiles, max, in ``splits``);
* ``within_10pct_unseen_models``: leave-models-out, ``--folds`` folds of whole models: every point predicted by
  a model trained on the other models' points (all of their points); ``within_10pct_unseen_families``
  (reported beside it): the harsher leave-one-family-out (no MLP in training when predicting MLPs ...);
* ``median_rel_error`` (and per split), the same for unseen models; ``within_10pct_vs_pass_b``: the 10%
  models' predictions scored against pass B instead (the other side of the noise ceiling);
* the same figures for the variant with the Mantis polynomial correction (``CostModel(correction=True)``,
  a quarter of the random splits: its fit is slower) under ``variants``; the headline figures are the default ``CostModel()``'s (sparse physical model);
* ``terms``: the sparse terms selected when training on every pass-A point; ``points``: every point's two
  medians and its unseen-model prediction.

Then the planner half (``benchmarks/plan_choice.py``, skipped with ``--no-plans``): in a catalog of its own,
PROFILE trains the catalog's cost model and the planner's plans of a set of PREDICT and routed multi-model
queries are timed against every candidate plan and four fixed policies: ``fastest_plan_share`` (how often
the planner's plan was the fastest candidate), beside it its noise ceiling ``fastest_plan_ceiling`` (how
often the fastest candidate by the even timed runs is also the fastest by the odd ones) and
``fastest_plan_ceiling_within_5pct``, and ``planner_vs_best_fixed`` (the best fixed policy's total
time over the planner's: at least 1 when the planner is never slower in total), details under ``plans``.

Writes ``benchmarks/results/cost_model.json``. Run: ``python benchmarks/cost_model.py`` (about 5 minutes on 2
cores: about 1 to profile each pass, the rest fitting); ``--quick`` for a smoke run (8 tiny models, 5 runs per
point, 3 splits, about a minute; it writes ``cost_model.quick.json``, leaving the real results alone). Needs
the torch and sklearn extras. Run it on a quiet machine: on a shared one the noise ceiling drops, and every
share with it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from modelsql.costmodel import (Config, CostModel, group_folds, median_relative_error, model_features,  # noqa: E402
                                noise_ceiling, random_splits, row, within)
from modelsql.costmodel.evaluate import evaluate_splits  # noqa: E402
from modelsql.costmodel.zoo import build_zoo, tiny_zoo  # noqa: E402
from modelsql.operators.backends.profiling import profile_latency  # noqa: E402

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "cost_model.json"
THREADS = (1, 2)
TOL = 0.10


# ---------------------------------------------------------------- measuring


def profile_pass(zoo, repeat: int, reverse: bool) -> dict[tuple[str, int, int], float]:
    """{(model, batch, threads): median ms} of one pass over the zoo."""
    out = {}
    for z in (reversed(zoo) if reverse else zoo):
        for t in profile_latency(z.onnx_bytes, batch_sizes=list(z.batch_sizes), threads=list(THREADS), repeat=repeat):
            out[(z.name, t.batch_size, t.threads)] = t.median * 1e3
    return out


def feature_rows(zoo) -> tuple[list[dict], list[tuple[str, int, int]], list[str], list[str]]:
    """(feature rows, point keys, model name and family of each point), in the zoo's order."""
    rows, keys, names, families = [], [], [], []
    for z in zoo:
        for b in z.batch_sizes:
            static = model_features(z.model, b)
            for t in THREADS:
                rows.append(row(static, Config(batch_size=b, threads=t, merge_factor=z.merge_factor)))
                keys.append((z.name, b, t))
                names.append(z.name)
                families.append(z.family)
    return rows, keys, names, families


# ---------------------------------------------------------------- accuracy


def _fitter(rows, y, correction: bool):
    def fit_predict(train, test):
        model = CostModel(correction=correction).fit([rows[i] for i in train], y[train])
        return model.predict([rows[i] for i in test])
    return fit_predict


def _spread(values) -> dict:
    v = np.asarray(values, dtype=np.float64)
    return {"median": float(np.median(v)), "min": float(v.min()), "p25": float(np.quantile(v, 0.25)),
            "p75": float(np.quantile(v, 0.75)), "max": float(v.max()), "per_split": [float(x) for x in v]}


def accuracy(rows, y_a, y_b, names, families, args, correction: bool, n_splits: int) -> dict:
    """The accuracy figures of one model variant (module docstring), over ``n_splits`` random splits."""
    fit_predict = _fitter(rows, y_a, correction)
    splits = random_splits(len(rows), args.train_share, n_splits, seed=args.seed)
    held = evaluate_splits(fit_predict, y_a, splits, TOL)
    vs_b = [within(fit_predict(train, test), y_b[test], TOL) for train, test in splits[: max(1, n_splits // 4)]]
    unseen = evaluate_splits(fit_predict, y_a, group_folds(names, args.folds, seed=args.seed), TOL)
    by_family = evaluate_splits(fit_predict, y_a, group_folds(families, len(set(families)), seed=args.seed), TOL)
    return {"within_10pct": float(np.median(held["within"])),
            "median_rel_error": float(np.median(held["median_rel_error"])),
            "within_10pct_unseen_models": unseen["pooled_within"],
            "median_rel_error_unseen_models": unseen["pooled_median_rel_error"],
            "within_10pct_unseen_families": by_family["pooled_within"],
            "median_rel_error_unseen_families": by_family["pooled_median_rel_error"],
            "within_10pct_vs_pass_b": float(np.median(vs_b)),
            "splits": {"within_10pct": _spread(held["within"]), "median_rel_error": _spread(held["median_rel_error"]),
                       "train_points": int(len(splits[0][0])), "test_points": int(len(splits[0][1]))},
            "unseen_fold_within_10pct": unseen["within"],
            "unseen_predicted_ms": unseen["predicted"]}


def per_model(names, y_a, predicted) -> dict:
    """Per model: the share of its points within 10% when it was unseen, and the geometric-mean ratio."""
    out = {}
    for name in dict.fromkeys(names):
        idx = [i for i, n in enumerate(names) if n == name]
        ratio = predicted[idx] / y_a[idx]
        out[name] = {"within_10pct": float(np.mean(np.abs(ratio - 1) <= TOL)),
                     "geomean_ratio": float(np.exp(np.mean(np.log(ratio))))}
    return out


def accuracy_results(zoo, args) -> dict:
    """Profile the zoo twice, fit and score the cost model: the accuracy half of the benchmark."""
    rows, keys, names, families = feature_rows(zoo)
    t0 = time.perf_counter()
    pass_a = profile_pass(zoo, args.repeat, reverse=False)
    pass_b = profile_pass(zoo, args.repeat, reverse=True)
    profile_s = time.perf_counter() - t0
    y_a, y_b = np.array([pass_a[k] for k in keys]), np.array([pass_b[k] for k in keys])
    t0 = time.perf_counter()
    physical = accuracy(rows, y_a, y_b, names, families, args, correction=False, n_splits=args.splits)
    corrected = accuracy(rows, y_a, y_b, names, families, args, correction=True, n_splits=max(3, args.splits // 4))
    full = CostModel().fit(rows, y_a)
    fit_s = time.perf_counter() - t0
    predicted = physical.pop("unseen_predicted_ms")
    corrected.pop("unseen_predicted_ms")
    by_threads = {f"threads_{t}": noise_ceiling(y_a[[k[2] == t for k in keys]], y_b[[k[2] == t for k in keys]], TOL)
                  for t in THREADS}
    return {**{k: v for k, v in physical.items() if not isinstance(v, dict)},
            "noise_ceiling": noise_ceiling(y_a, y_b, TOL),
            "noise_ceiling_by_threads": by_threads,
            "noise_median_rel_diff": median_relative_error(y_a, y_b),
            "n_points": len(rows), "n_models": len(zoo), "n_families": len(set(families)),
            "splits": physical["splits"],
            "variants": {"physical_plus_correction": corrected},
            "terms": [[n, c] for n, c in full.terms()],
            "model_json": json.loads(full.to_json()),
            "per_model_unseen": per_model(names, y_a, predicted),
            "profile_s": profile_s, "fit_s": fit_s,
            "points": [{"model": k[0], "batch": k[1], "threads": k[2], "median_ms_a": float(a), "median_ms_b": float(b),
                        "unseen_predicted_ms": float(p)} for k, a, b, p in zip(keys, y_a, y_b, predicted)]}


# ---------------------------------------------------------------- main


def host() -> dict:
    import onnxruntime
    import torch

    return {"cpu_count": len(os.sched_getaffinity(0)), "platform": platform.platform(),
            "python": sys.version.split()[0], "onnxruntime": onnxruntime.__version__, "torch": torch.__version__,
            "numpy": np.__version__, "loadavg_start": os.getloadavg()}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="8 tiny models, 5 runs per point, 3 splits (a smoke run)")
    ap.add_argument("--repeat", type=int, default=None, help="timed runs per point (default 20; 5 with --quick)")
    ap.add_argument("--splits", type=int, default=None, help="random training splits (default 20; 3 with --quick)")
    ap.add_argument("--train-share", type=float, default=0.10)
    ap.add_argument("--folds", type=int, default=5, help="leave-models-out folds")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-plans", action="store_true", help="skip the planner half (benchmarks/plan_choice.py)")
    ap.add_argument("--plan-rows", type=int, default=200_000, help="rows of the planner half's tiny-MLP table")
    ap.add_argument("--plan-repeats", type=int, default=7, help="timed runs of each candidate plan")
    ap.add_argument("--out", type=Path, default=None,
                    help=f"default {RESULTS.relative_to(HERE.parent)} (cost_model.quick.json with --quick)")
    args = ap.parse_args(argv)
    args.repeat = args.repeat or (5 if args.quick else 20)
    args.splits = args.splits or (3 if args.quick else 20)
    args.out = args.out or (RESULTS.with_suffix(".quick.json") if args.quick else RESULTS)
    start, machine = time.perf_counter(), host()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zoo = tiny_zoo() if args.quick else build_zoo()
    build_s = time.perf_counter() - start
    results = accuracy_results(zoo, args)
    if not args.no_plans:  # the second half: cost-based plans against fixed policies (benchmarks/plan_choice.py)
        import plan_choice

        plans = (plan_choice.run(20_000, 4, 3, 5) if args.quick
                 else plan_choice.run(args.plan_rows, 8, args.plan_repeats, 10))
        top = ("fastest_plan_share", "fastest_plan_ceiling", "fastest_plan_ceiling_within_5pct",
               "planner_vs_best_fixed")
        results.update({k: plans[k] for k in top}, plans={k: v for k, v in plans.items() if k not in top})
    out = {**results,
           "host": {**machine, "loadavg_end": os.getloadavg()},
           "settings": {"quick": args.quick, "repeat": args.repeat, "warmup": 2, "splits": args.splits,
                        "train_share": args.train_share, "folds": args.folds, "seed": args.seed, "tolerance": TOL,
                        "threads": list(THREADS), "target": "median of the point's timed runs, ms",
                        "session": "CPUExecutionProvider, intra-op threads as the point, inter-op 1, spinning off",
                        "models": {z.name: {"family": z.family, "kind": z.kind, "batch_sizes": list(z.batch_sizes),
                                            "merge_factor": z.merge_factor} for z in zoo}},
           "build_s": build_s, "runtime_s": time.perf_counter() - start,
           "command": "python " + " ".join([Path(sys.argv[0]).as_posix()] + sys.argv[1:])}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2))
    print(json.dumps({k: out.get(k) for k in ("within_10pct", "within_10pct_unseen_models", "within_10pct_unseen_families",
                                              "noise_ceiling", "median_rel_error", "fastest_plan_share",
                                              "fastest_plan_ceiling", "fastest_plan_ceiling_within_5pct",
                                              "planner_vs_best_fixed", "n_points", "n_models", "runtime_s")},
                     indent=2))
    return out


if __name__ == "__main__":
    main()
