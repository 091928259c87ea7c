"""Hippo (Shin et al., "Hippo: Taming Hyper-parameter Optimization of Deep Learning with Stage Trees",
VLDB 2022; arXiv:1911.10504 in 2019) on TUNE: the same studies run as stage trees and trial-based.

Claim: a study run as a stage tree (``execution = 'stages'``, the default) trains every epoch that
trials share (the same per-epoch hyper-parameters from the start) once, from its parent's checkpoint,
and an identical configuration sampled twice costs nothing; trial-based execution
(``execution = 'trials'``: every trial in a tree of its own, from scratch, pausing and resuming only
itself at rungs, as Ray Tune and Optuna run trials) trains each trial's epochs separately. Training is
bit-exact, so both give every trial the same per-epoch metrics, the algorithms make the same decisions,
and the saving is pure.

Workload: scikit-learn's digits (8x8 images as 64 pixel columns scaled to [0, 1], and ``label``), the
first ``train_rows`` rows (1000) as table ``train`` and the next ``val_rows`` (300) as ``val``, in a fresh DuckDB file
(in a temporary folder) per measured study; trainables ``CREATE MODEL cnn FROM PYTHON 'modelsql.zoo:cnn'``
(Conv16-Conv32-pool-FC64-Dropout0.2-FC10) and ``CREATE MODEL mlp FROM PYTHON 'modelsql.zoo:mlp'``
(64-64-64-10). Every TUNE: SGD (momentum 0.9), ``batch_size = 32``, ``workers = 2``, ``threads = 1``,
``seed = 0``, metric ``val_loss``; the two modes of a study differ only in ``execution`` and
``study_name``. The space of the schedule studies is 18 step-decay schedules,
``lr = STEP_DECAY(initial => CHOICE(0.1, 0.05, 0.02), milestones => CHOICE(3 tuples), gamma =>
CHOICE(0.1, 0.2))`` (milestones (9, 18), (12, 21), (15, 24) over 27 epochs; a third of that with
``--quick``). Studies (see :func:`studies`):

* ``grid_cnn``: GRID over the 18 schedules, CNN;
* ``asha_random_mlp`` / ``asha_tpe_mlp``: ASHA (Optuna's SuccessiveHalvingPruner; grace_period 1,
  reduction_factor 3, 8 concurrent trials) with a random / TPE sampler, 60 trials, MLP;
* ``hyperband_cnn``: our synchronous Hyperband, max_t 27, eta 3 (5 brackets), random sampler, CNN;
* ``pbt_cnn`` / ``pbt_q50_cnn``: PBT, population 8, perturbation_interval 4, 24 epochs,
  ``lr = CHOICE(0.2, 0.1, 0.05, 0.02, 0.01)``, quantile_fraction 0.25 (the default) / 0.5, CNN.

Multi-study (Hippo's section 6.3 case): a second study over the same space, trainable, data and seed
run stage-based in the database of the first one, so it trains in the first one's tree (the seed is
part of the tree key: another seed would be another tree): ``grid_cnn -> hyperband_cnn`` (every
Hyperband request is a prefix of a grid trial: the second trains nothing), ``asha_random_mlp ->
asha_tpe_mlp`` and ``pbt_cnn -> pbt_q50_cnn`` (the two populations part after the first interval:
little is shared). Trial-based, the second trains from scratch whatever ran before, so its
trial-based figures are those of its own single-study run of the same repeat. Multi ratios:
(trial-based first + second) / (stage-based first + stage-based second after the first).

Measured, for each study and mode:

* training steps: the study's ``epochs_trained`` (one epoch of one trial over ``train``; the
  hardware-independent measure of GPU-hours; epochs recomputed from an older checkpoint count), from
  the TUNE result row and ``modelsql.studies``; optimizer steps = epochs * ceil(train_rows / 32);
  ``epochs_requested``, what the trials asked for, which is what trial-based execution trains;
  ``dedupe_only``: what whole-trial memoization alone would train (each distinct configuration once,
  to the furthest epoch any trial of it reached; not for PBT, whose configurations change), to tell
  the share of plain deduplication from that of prefix sharing;
* end-to-end time: wall time from the cursor's ``execute`` to its ``fetchone``, 2 worker processes
  (started, with torch imported, by a warm-up study before anything is timed), and the training
  seconds the stages report (``modelsql.stages.seconds``, summed: compute without the overheads);
* checkpoints: ``written``: count and bytes of every checkpoint handed to the blob store while the
  study ran (counted by wrapping ``BlobStore.put`` in this process; trial-based PBT's exploits copy
  the donor's checkpoint by reference and write none), ``distinct``: those with distinct contents
  (the content-addressed store keeps identical bytes once), and ``kept``:
  ``modelsql.studies.checkpoint_bytes`` once the study
  finished (after TUNE collected every checkpoint no trial still needs). The catalog does not keep the
  bytes written: a collected stage's ``checkpoint`` and ``checkpoint_bytes`` become NULL;
* identical: every trial's status and per-epoch metric (as ``float.hex``) equal in both modes, and the
  same best trial and best metric; also across repeats (the runs are deterministic).

Each study runs ``--repeats`` times (3; 1 with ``--quick``), each time in fresh databases, the two modes'
order alternating from repeat to repeat; wall times are medians with their min and max (the machine
is shared and noisy); ``time_ratio`` is the ratio of the medians, with the per-repeat ratios' spread.
Epoch counts and metrics are the same in every repeat (checked).

Writes ``benchmarks/results/hippo.json``: top-level ``steps_ratio`` and ``time_ratio`` (the best single
study of each), ``multi_steps_ratio`` and ``multi_time_ratio`` (the best multi-study scenario of each),
``identical_metrics`` (true only when every trial of every study and scenario matched), Hippo's own
figures (``hippo_reported``), ``studies`` and ``multi_studies`` (every one, with all figures), ``host``,
``settings``, ``command``, ``date``, ``runtime_s``; prints a table.

Run: ``python benchmarks/hippo.py`` (about 13 minutes on 2 shared cores); ``--quick`` for a smoke run (600/200
rows, 9 epochs, 24 ASHA trials, 12 PBT epochs, 1 repeat: about 1.5 minutes); ``--only NAME ...`` for a
subset of the studies.

On a GPU (issue 24): ``--device cuda`` (or ``cuda:N``) is every TUNE's ``device`` option (``--device cpu``, the
default, keeps the CPU even where a GPU is, and the results file above); the workers share the one GPU. Its
studies are the ResNet ones, on a synthetic workload of 3x32x32 images made by :func:`synthetic_images`
(CIFAR-10's shape: 10 classes, each a smooth random colour pattern, every image one of them shifted,
scaled and with noise; ``x FLOAT[3072]`` channels first, and ``label``), trainable ``CREATE MODEL resnet
FROM PYTHON 'modelsql.zoo:cifar_resnet'`` (3 stages of one basic block, width 16-32-64):

* ``asha_tpe_resnet``: ASHA with the TPE sampler over the 18 step-decay schedules (as ``asha_tpe_mlp``);
* ``grid_resnet``: GRID over the 18 schedules (as ``grid_cnn``).

It writes ``benchmarks/results/gpu_hippo.json`` (same fields; top-level ``time_ratio``, ``steps_ratio``,
``identical_metrics``, ``device``, and the GPU's name under ``host``). ``--gpu-quick`` (4096/1024 images, 9
epochs, 32 ASHA trials, 1 repeat, ``asha_tpe_resnet`` only unless ``--only`` says otherwise) took 135 s on an
H200 (22 s warm-up, 28 s stage-based, 83 s trial-based): ``python benchmarks/hippo.py --device cuda
--gpu-quick``; ``--train-rows``, ``--val-rows`` and ``--trials`` shrink it (a CPU smoke run:
``--device cpu --gpu-quick --only asha_tpe_resnet --train-rows 96 --val-rows 32 --trials 6``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import modelsql  # noqa: E402
from modelsql.storage import blobstore  # noqa: E402

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "hippo.json"
GPU_RESULTS = HERE / "results" / "gpu_hippo.json"
IMAGE_FEATURES = 3 * 32 * 32
RESNET_STUDIES = ("asha_tpe_resnet", "grid_resnet")
BATCH = 32
WORKERS = 2
THREADS = 1

HIPPO_REPORTED = {
    "source": "Shin et al., 'Hippo: Taming Hyper-parameter Optimization of Deep Learning with Stage Trees', "
              "PVLDB 15(5), 2022; and arXiv:1911.10504 (2019)",
    "single_study": {"gpu_hours_ratio": 4.81, "end_to_end_ratio": 2.76},
    "multi_study": {"gpu_hours_ratio": 6.77, "end_to_end_ratio": 3.53},
    "multi_study_2019_preprint": {"gpu_hours_ratio": 6.6, "end_to_end_ratio": 4.1,
                                  "note": "6.60x and 4.13x in the preprint"},
    "baseline": "trial-based execution (Ray Tune) on GPUs; GPU-hours compared as training steps here",
}


KNOWN_ISSUES = [
    "TUNE records Hyperband's and PBT's decisions late: both decide a round's trials in the next ask (inside "
    "the tell of the round's last trial), while the study run reads each trial's status right after its own "
    "tell, so every trial but the last one told in a round keeps status 'running' in modelsql.trials, also "
    "once the study is finished (trials_done undercounts), and the checkpoint collection keeps the "
    "checkpoints of Hyperband's pruned trials (it keeps every trial not 'pruned' or 'failed'), which inflates "
    "'kept_bytes' for hyperband_cnn in both modes. The algorithms' decisions, the epochs and the metrics are "
    "not affected; both modes are affected alike.",
]

# ---------------------------------------------------------------- studies


@dataclass(frozen=True)
class Study:
    """One study definition; ``sql(mode, name)`` is its TUNE statement."""

    name: str
    model: str
    algorithm: str
    space: str
    max_epochs: int
    options: dict = field(default_factory=dict)
    about: str = ""

    def sql(self, execution: str, study_name: str, seed: int, device: str = "cpu") -> str:
        opts = {"max_epochs": self.max_epochs, "seed": seed, "workers": WORKERS, "threads": THREADS,
                **self.options, "study_name": f"'{study_name}'", "execution": f"'{execution}'",
                "device": f"'{device}'"}
        with_ = ", ".join(f"{k} = {v}" for k, v in opts.items())
        return (f"TUNE MODEL {self.model} ON TABLE train VALIDATE ON TABLE val TARGET label\n"
                f"SEARCH ({self.space})\nUSING {self.algorithm} WITH ({with_})")


def sizes(quick: bool, gpu_quick: bool = False) -> dict:
    if gpu_quick:
        return {"train_rows": 4096, "val_rows": 1024, "max_epochs": 9, "milestones": ((3, 6), (4, 7), (5, 8)),
                "asha_trials": 32, "asha_concurrency": 8, "pbt_epochs": 12, "pbt_interval": 4, "repeats": 1}
    if quick:
        return {"train_rows": 600, "val_rows": 200, "max_epochs": 9, "milestones": ((3, 6), (4, 7), (5, 8)),
                "asha_trials": 24, "asha_concurrency": 8, "pbt_epochs": 12, "pbt_interval": 4, "repeats": 1}
    return {"train_rows": 1000, "val_rows": 300, "max_epochs": 27, "milestones": ((9, 18), (12, 21), (15, 24)),
            "asha_trials": 60, "asha_concurrency": 8, "pbt_epochs": 24, "pbt_interval": 4, "repeats": 3}


def studies(size: dict) -> dict[str, Study]:
    ms = ", ".join("(" + ", ".join(map(str, m)) + ")" for m in size["milestones"])
    schedules = (f"lr = STEP_DECAY(initial => CHOICE(0.1, 0.05, 0.02), milestones => CHOICE({ms}), "
                 f"gamma => CHOICE(0.1, 0.2)), batch_size = {BATCH}")
    constant = f"lr = CHOICE(0.2, 0.1, 0.05, 0.02, 0.01), batch_size = {BATCH}"
    e = size["max_epochs"]
    asha = {"trials": size["asha_trials"], "max_concurrent_trials": size["asha_concurrency"], "grace_period": 1,
            "reduction_factor": 3}
    pbt = {"trials": 8, "perturbation_interval": size["pbt_interval"]}
    out = [
        Study("grid_cnn", "cnn", "GRID", schedules, e, {}, "grid over the 18 step-decay schedules"),
        Study("asha_random_mlp", "mlp", "ASHA", schedules, e, {"sampler": "'random'", **asha},
              f"ASHA + random sampler, {asha['trials']} trials over the 18 schedules"),
        Study("asha_tpe_mlp", "mlp", "ASHA", schedules, e, {"sampler": "'tpe'", **asha},
              f"ASHA + TPE sampler, {asha['trials']} trials over the 18 schedules"),
        Study("hyperband_cnn", "cnn", "HYPERBAND", schedules, e, {"sampler": "'random'", "reduction_factor": 3,
                                                                  "grace_period": 1},
              f"synchronous Hyperband, max_t {e}, eta 3, random sampler over the 18 schedules"),
        Study("pbt_cnn", "cnn", "PBT", constant, size["pbt_epochs"], pbt,
              f"PBT, population 8, every {pbt['perturbation_interval']} epochs, lr in 5 values"),
        Study("pbt_q50_cnn", "cnn", "PBT", constant, size["pbt_epochs"], {**pbt, "quantile_fraction": 0.5},
              "the same PBT with quantile_fraction 0.5"),
        Study("asha_tpe_resnet", "resnet", "ASHA", schedules, e, {"sampler": "'tpe'", **asha},
              f"ASHA + TPE sampler, {asha['trials']} trials over the 18 schedules, ResNet on 3x32x32 images"),
        Study("grid_resnet", "resnet", "GRID", schedules, e, {},
              "grid over the 18 step-decay schedules, ResNet on 3x32x32 images"),
    ]
    return {s.name: s for s in out}


MULTI = (("grid_cnn", "hyperband_cnn"), ("asha_random_mlp", "asha_tpe_mlp"), ("pbt_cnn", "pbt_q50_cnn"))
"""(first, second): the second runs stage-based in the first one's database, after it."""


# ---------------------------------------------------------------- checkpoint bytes

PUTS: dict = {"count": 0, "bytes": 0, "distinct": {}}
_ORIGINAL_PUT = blobstore.BlobStore.put


def _counting_put(self, data):
    n = memoryview(data).nbytes
    PUTS["count"] += 1
    PUTS["bytes"] += n
    PUTS["distinct"][self.digest_of(data)] = n
    return _ORIGINAL_PUT(self, data)


blobstore.BlobStore.put = _counting_put  # this process's blob writes are counted (workers never write blobs)


# ---------------------------------------------------------------- databases and runs


def digits_table():
    import pyarrow as pa
    from sklearn.datasets import load_digits

    d = load_digits()
    cols = {f"p{i}": (d.data[:, i] / 16).astype(np.float32) for i in range(64)}
    cols["label"] = d.target.astype(np.int64)
    return pa.table(cols)


def synthetic_images(rows: int, seed: int = 0, classes: int = 10):
    """``rows`` synthetic 3x32x32 images in [0, 1] as a table ``(x FLOAT[3072], label BIGINT)``: each class a
    smooth random colour pattern (a sum of 4 low-frequency cosines per channel), each image its class's pattern
    rolled by up to 4 pixels, scaled by 0.7 to 1.3, plus Gaussian noise (sd 0.15): learnable, not trivial."""
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    grid = np.arange(32, dtype=np.float32) / 32
    yy, xx = np.meshgrid(grid, grid, indexing="ij")
    freq = rng.integers(1, 4, size=(classes, 3, 4, 2))
    phase = rng.uniform(0, 2 * np.pi, size=(classes, 3, 4))
    patterns = np.cos(2 * np.pi * (freq[..., 0, None, None] * yy + freq[..., 1, None, None] * xx)
                      + phase[..., None, None]).mean(axis=2)  # (classes, 3, 32, 32)
    labels = rng.integers(0, classes, size=rows)
    shifts = rng.integers(-4, 5, size=(rows, 2))
    scale = rng.uniform(0.7, 1.3, size=(rows, 1, 1, 1))
    images = np.stack([np.roll(patterns[c], tuple(s), axis=(1, 2)) for c, s in zip(labels, shifts)]) * scale
    images = 0.5 + 0.5 * images + rng.normal(0, 0.15, size=images.shape)
    flat = np.clip(images, 0, 1).astype(np.float32).reshape(rows, IMAGE_FEATURES)
    x = pa.FixedSizeListArray.from_arrays(pa.array(flat.reshape(-1)), IMAGE_FEATURES)
    return pa.table({"x": x, "label": labels.astype(np.int64)})


def make_db(path: Path, size: dict, table) -> modelsql.Connection:
    con = modelsql.connect(str(path))
    con.register("digits_arrow", table)
    cur = con.cursor()
    cur.execute("CREATE TABLE digits AS SELECT * FROM digits_arrow")
    cur.execute(f"CREATE TABLE train AS SELECT * FROM digits LIMIT {size['train_rows']}")
    cur.execute(f"CREATE TABLE val AS SELECT * FROM digits LIMIT {size['val_rows']} OFFSET {size['train_rows']}")
    con.commit()
    cur.execute("CREATE MODEL cnn FROM PYTHON 'modelsql.zoo:cnn'")
    cur.execute("CREATE MODEL mlp FROM PYTHON 'modelsql.zoo:mlp'")
    cur.execute("CREATE MODEL resnet FROM PYTHON 'modelsql.zoo:cifar_resnet' WITH (width = 16, blocks = 1)")
    return con


def trial_metrics(con, study: str) -> dict[int, tuple]:
    rows = con.execute("SELECT trial, status, metrics FROM modelsql.trials WHERE study = ? ORDER BY trial",
                       [study]).fetchall()
    return {t: (s, tuple(float(m).hex() for m in ms)) for t, s, ms in rows}


def run_tune(con, study: Study, execution: str, seed: int, device: str = "cpu") -> dict:
    """Run one study in one mode; its figures from the result row, the catalog and the blob counter."""
    name = f"{study.name}_{execution}"
    sql = study.sql(execution, name, seed, device)
    PUTS.update(count=0, bytes=0, distinct={})
    cur = con.cursor()
    t0 = time.perf_counter()
    cur.execute(sql)
    row = cur.fetchone()
    wall = time.perf_counter() - t0
    result = dict(zip([d[0] for d in cur.description], row))
    puts = {"count": PUTS["count"], "bytes": PUTS["bytes"], "distinct_count": len(PUTS["distinct"]),
            "distinct_bytes": sum(PUTS["distinct"].values())}
    srow = con.execute("SELECT status, epochs_trained, epochs_requested, checkpoint_bytes FROM modelsql.studies "
                       "WHERE name = ?", [name]).fetchone()
    stages = con.execute(
        "SELECT count(*) FILTER (worker IS DISTINCT FROM 'copy'), "
        "coalesce(sum(end_epoch - first_epoch) FILTER (worker IS DISTINCT FROM 'copy'), 0), "
        "coalesce(sum(seconds), 0), count(*) FILTER (worker = 'copy'), "
        "coalesce(sum(checkpoint_bytes) FILTER (worker IS DISTINCT FROM 'copy'), 0) "
        "FROM modelsql.stages WHERE study = ? AND status = 'done'", [name]).fetchone()
    configs = con.execute("SELECT config, max(epochs) FROM modelsql.trials WHERE study = ? GROUP BY config",
                          [name]).fetchall()
    statuses = dict(con.execute("SELECT status, count(*) FROM modelsql.trials WHERE study = ? GROUP BY status "
                                "ORDER BY status", [name]).fetchall())
    return {
        "study": name, "wall_s": wall, "result": result,
        "status": srow[0], "epochs_trained": srow[1], "epochs_requested": srow[2],
        "checkpoint_bytes_kept": srow[3],
        "stages_trained": stages[0], "stage_epochs": stages[1], "train_seconds": stages[2],
        "donor_copies": stages[3], "stage_rows_checkpoint_bytes": stages[4],
        "checkpoints_written": puts["count"], "checkpoint_bytes_written": puts["bytes"],
        "checkpoints_distinct": puts["distinct_count"], "checkpoint_bytes_distinct": puts["distinct_bytes"],
        "dedupe_only_epochs": sum(e for _, e in configs), "statuses": statuses,
        "metrics": trial_metrics(con, name),
    }


def compare(a: dict, b: dict) -> list[str]:
    """What differs between two runs' trials (empty: identical)."""
    out = []
    ma, mb = a["metrics"], b["metrics"]
    if sorted(ma) != sorted(mb):
        out.append(f"trial numbers differ: {sorted(ma)} vs {sorted(mb)}")
    for t in sorted(set(ma) & set(mb)):
        if ma[t] != mb[t]:
            sa, xa = ma[t]
            sb, xb = mb[t]
            first = next((i for i, (x, y) in enumerate(zip(xa, xb)) if x != y), min(len(xa), len(xb)))
            out.append(f"trial {t}: {sa}/{len(xa)} epochs vs {sb}/{len(xb)}, first difference at epoch {first}")
    for k in ("best_trial", "best_metric", "trials"):
        if a["result"][k] != b["result"][k]:
            out.append(f"{k}: {a['result'][k]!r} vs {b['result'][k]!r}")
    return out


def spread(xs: list[float]) -> dict:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "samples": len(xs)}


def ratio(a: float, b: float):
    return a / b if b else None


# ---------------------------------------------------------------- summaries


def summarize_study(study: Study, runs: list[dict], size: dict, device: str = "cpu") -> dict:
    """``runs``: one ``{"stages": run, "trials": run}`` per repeat."""
    steps_per_epoch = math.ceil(size["train_rows"] / BATCH)
    s0, t0 = runs[0]["stages"], runs[0]["trials"]
    mismatches = []
    for r, run in enumerate(runs):
        mismatches += [f"repeat {r}: {m}" for m in compare(run["stages"], run["trials"])]
        if r:
            for mode in ("stages", "trials"):
                mismatches += [f"repeat {r} vs 0, {mode}: {m}" for m in compare(run[mode], runs[0][mode])]
                if run[mode]["epochs_trained"] != runs[0][mode]["epochs_trained"]:
                    mismatches.append(f"repeat {r} vs 0, {mode}: epochs_trained differ")
    checks = []
    if t0["epochs_trained"] != t0["epochs_requested"]:
        checks.append(f"trial-based epochs_trained {t0['epochs_trained']} != its epochs_requested "
                      f"{t0['epochs_requested']}")
    if s0["epochs_requested"] != t0["epochs_requested"]:
        checks.append(f"epochs_requested differ: {s0['epochs_requested']} stage-based, {t0['epochs_requested']} "
                      "trial-based")
    catalog_issues = []
    for run in (s0, t0):
        if run["status"] == "finished" and run["statuses"].get("running"):
            catalog_issues.append(f"{run['study']}: finished with {run['statuses']['running']} trial(s) still "
                                  "'running' in modelsql.trials (see known_issues)")
        if run["stage_epochs"] != run["epochs_trained"]:
            checks.append(f"{run['study']}: the stage rows hold {run['stage_epochs']} epochs, epochs_trained "
                          f"{run['epochs_trained']}")
        if run["status"] != "finished":
            checks.append(f"{run['study']}: status {run['status']}")
    walls = {m: [r[m]["wall_s"] for r in runs] for m in ("stages", "trials")}
    secs = {m: [r[m]["train_seconds"] for r in runs] for m in ("stages", "trials")}
    per_repeat = [r["trials"]["wall_s"] / r["stages"]["wall_s"] for r in runs]
    mode_name = {"stages": "stage_based", "trials": "trial_based"}
    return {
        "name": study.name, "algorithm": study.algorithm.lower(), "model": study.model, "about": study.about,
        "options": study.options, "max_epochs": study.max_epochs, "sql": study.sql("stages", "<name>", 0, device),
        "trials": s0["result"]["trials"], "statuses": s0["statuses"],
        "best_trial": s0["result"]["best_trial"], "best_metric": s0["result"]["best_metric"],
        "epochs": {"trial_based": t0["epochs_trained"], "stage_based": s0["epochs_trained"],
                   "requested": s0["epochs_requested"],
                   "dedupe_only": None if study.algorithm == "PBT" else s0["dedupe_only_epochs"]},
        "steps_ratio": ratio(t0["epochs_trained"], s0["epochs_trained"]),
        "dedupe_only_ratio": None if study.algorithm == "PBT" else ratio(t0["epochs_trained"],
                                                                          s0["dedupe_only_epochs"]),
        "optimizer_steps": {"trial_based": t0["epochs_trained"] * steps_per_epoch,
                            "stage_based": s0["epochs_trained"] * steps_per_epoch},
        "tune_row_steps_ratio": {"stage_based": s0["result"]["steps_ratio"],
                                 "trial_based": t0["result"]["steps_ratio"]},
        "stages_trained": {mode_name[m]: runs[0][m]["stages_trained"] for m in mode_name},
        "wall_s": {mode_name[m]: spread(walls[m]) for m in mode_name},
        "time_ratio": ratio(statistics.median(walls["trials"]), statistics.median(walls["stages"])),
        "time_ratio_per_repeat": spread(per_repeat),
        "train_seconds": {mode_name[m]: spread(secs[m]) for m in mode_name},
        "train_seconds_ratio": ratio(statistics.median(secs["trials"]), statistics.median(secs["stages"])),
        "checkpoints": {mode_name[m]: {
            "written": runs[0][m]["checkpoints_written"], "written_bytes": runs[0][m]["checkpoint_bytes_written"],
            "distinct": runs[0][m]["checkpoints_distinct"],
            "distinct_bytes": runs[0][m]["checkpoint_bytes_distinct"],
            "kept_bytes": runs[0][m]["checkpoint_bytes_kept"],
            "stage_rows_bytes_after_collection": runs[0][m]["stage_rows_checkpoint_bytes"],
            "donor_copies": runs[0][m]["donor_copies"]} for m in mode_name},
        "identical": not mismatches, "mismatches": mismatches[:20], "checks": checks,
        "catalog_issues": catalog_issues, "repeats": len(runs),
    }


def summarize_multi(first: str, second: str, singles: dict[str, list[dict]], seconds: list[dict],
                    size: dict) -> dict:
    """``seconds``: per repeat, the second study's stage-based run in the first one's database."""
    steps_per_epoch = math.ceil(size["train_rows"] / BATCH)
    a, b = singles[first], singles[second]
    n = min(len(a), len(b), len(seconds))
    mismatches = []
    for r in range(n):
        mismatches += [f"repeat {r}: {m}" for m in compare(seconds[r], b[r]["trials"])]
    trial_epochs = a[0]["trials"]["epochs_trained"] + b[0]["trials"]["epochs_trained"]
    stage_epochs = a[0]["stages"]["epochs_trained"] + seconds[0]["epochs_trained"]
    trial_walls = [a[r]["trials"]["wall_s"] + b[r]["trials"]["wall_s"] for r in range(n)]
    stage_walls = [a[r]["stages"]["wall_s"] + seconds[r]["wall_s"] for r in range(n)]
    return {
        "name": f"{first} -> {second}", "first": first, "second": second,
        "epochs": {"trial_based": trial_epochs, "stage_based": stage_epochs,
                   "second_trial_based": b[0]["trials"]["epochs_trained"],
                   "second_stage_based_alone": b[0]["stages"]["epochs_trained"],
                   "second_stage_based_after_first": seconds[0]["epochs_trained"]},
        "steps_ratio": ratio(trial_epochs, stage_epochs),
        "optimizer_steps": {"trial_based": trial_epochs * steps_per_epoch,
                            "stage_based": stage_epochs * steps_per_epoch},
        "wall_s": {"trial_based": spread(trial_walls), "stage_based": spread(stage_walls),
                   "second_stage_based_after_first": spread([s["wall_s"] for s in seconds[:n]])},
        "time_ratio": ratio(statistics.median(trial_walls), statistics.median(stage_walls)),
        "time_ratio_per_repeat": spread([t / s for t, s in zip(trial_walls, stage_walls)]),
        "checkpoints_second_after_first": {"written": seconds[0]["checkpoints_written"],
                                           "written_bytes": seconds[0]["checkpoint_bytes_written"],
                                           "kept_bytes": seconds[0]["checkpoint_bytes_kept"]},
        "identical": not mismatches, "mismatches": mismatches[:20], "repeats": n,
        "note": "the trial-based second study is its own single-study run of the same repeat: trial-based "
                "execution shares nothing, so what ran before in the database does not change it",
    }


def _span(x: dict) -> str:
    return f"{x['min']:.2f}-{x['max']:.2f}"


def table(result: dict) -> str:
    lines = ["| study | trials | epochs trial-based / stage-based | steps ratio | dedupe-only ratio | "
             "wall s trial-based / stage-based (median) | time ratio (min-max per repeat) | "
             "checkpoints MB written trial / stage | identical |",
             "|---|---|---|---|---|---|---|---|---|"]
    for s in result["studies"]:
        w, c = s["wall_s"], s["checkpoints"]
        d = f"{s['dedupe_only_ratio']:.2f}x" if s["dedupe_only_ratio"] else "-"
        lines.append(
            f"| {s['name']} | {s['trials']} | {s['epochs']['trial_based']} / {s['epochs']['stage_based']} | "
            f"{s['steps_ratio']:.2f}x | {d} | {w['trial_based']['median']:.1f} / {w['stage_based']['median']:.1f} | "
            f"{s['time_ratio']:.2f}x ({_span(s['time_ratio_per_repeat'])}) | "
            f"{c['trial_based']['written_bytes'] / 1e6:.1f} / {c['stage_based']['written_bytes'] / 1e6:.1f} | "
            f"{'yes' if s['identical'] else 'NO'} |")
    for m in result["multi_studies"]:
        w = m["wall_s"]
        lines.append(
            f"| {m['name']} | - | {m['epochs']['trial_based']} / {m['epochs']['stage_based']} "
            f"(second after first: {m['epochs']['second_stage_based_after_first']}) | {m['steps_ratio']:.2f}x | - | "
            f"{w['trial_based']['median']:.1f} / {w['stage_based']['median']:.1f} | "
            f"{m['time_ratio']:.2f}x ({_span(m['time_ratio_per_repeat'])}) | "
            f"- / {m['checkpoints_second_after_first']['written_bytes'] / 1e6:.1f} (second) | "
            f"{'yes' if m['identical'] else 'NO'} |")
    return "\n".join(lines)


def best(rows: list[dict], key: str) -> tuple:
    got = [r for r in rows if r.get(key) is not None]
    if not got:
        return None, None
    top = max(got, key=lambda r: r[key])
    return top[key], top["name"]


# ---------------------------------------------------------------- main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: fewer rows, epochs and trials, 1 repeat")
    ap.add_argument("--repeats", type=int, default=None, help="runs of every study in each mode (3; 1 with --quick)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", nargs="+", default=None, help="run only these studies (and the scenarios they make)")
    ap.add_argument("--out", type=Path, default=None,
                    help=f"results file ({RESULTS.name}; {GPU_RESULTS.name} with a CUDA --device)")
    ap.add_argument("--device", default="cpu", help="every TUNE's device option: cpu (the default), cuda, cuda:N")
    ap.add_argument("--gpu-quick", action="store_true",
                    help="the GPU smoke run: 4096/1024 images, 9 epochs, 32 ASHA trials, 1 repeat, asha_tpe_resnet")
    ap.add_argument("--train-rows", type=int, default=None, help="override the training rows (a tiny smoke run)")
    ap.add_argument("--val-rows", type=int, default=None, help="override the validation rows")
    ap.add_argument("--trials", type=int, default=None, help="override the ASHA trials")
    args = ap.parse_args()
    gpu = args.device.lower().startswith("cuda")
    out = args.out or (GPU_RESULTS if gpu else RESULTS)
    size = sizes(args.quick, args.gpu_quick)
    size.update({k: v for k, v in (("train_rows", args.train_rows), ("val_rows", args.val_rows),
                                   ("asha_trials", args.trials)) if v is not None})
    repeats = args.repeats or size["repeats"]
    defs = studies(size)
    default = (["asha_tpe_resnet"] if args.gpu_quick else list(RESNET_STUDIES)) if gpu else \
        [n for n in defs if n not in RESNET_STUDIES]
    names = args.only or default
    unknown = set(names) - set(defs)
    if unknown:
        ap.error(f"unknown studies {sorted(unknown)}; known: {', '.join(defs)}")
    multis = [(a, b) for a, b in MULTI if a in names and b in names]

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a kill still removes the temporary folder
    start = time.perf_counter()
    import duckdb
    import optuna
    import sklearn
    import torch

    host = {"cpu_count": os.cpu_count(), "platform": platform.platform(), "processor": platform.processor(),
            "python": platform.python_version(), "torch": torch.__version__, "optuna": optuna.__version__,
            "duckdb": duckdb.__version__, "sklearn": sklearn.__version__, "numpy": np.__version__,
            "loadavg_start": os.getloadavg(),
            **({"gpu": torch.cuda.get_device_name(args.device)} if gpu and torch.cuda.is_available() else {})}
    work = Path(tempfile.mkdtemp(prefix="hippo-bench-"))
    images = any(defs[n].model == "resnet" for n in names)
    tables = {"digits": digits_table() if not all(defs[n].model == "resnet" for n in names) else None,
              "images": synthetic_images(size["train_rows"] + size["val_rows"], args.seed) if images else None}

    def table_of(name: str):
        return tables["images" if defs[name].model == "resnet" else "digits"]

    singles: dict[str, list[dict]] = {n: [] for n in names}
    seconds: dict[tuple, list[dict]] = {m: [] for m in multis}
    try:
        # warm-up: both worker processes started, torch and the factories imported (CUDA initialised), nothing timed
        for kind, table_ in tables.items():
            if table_ is None:
                continue
            con = make_db(work / f"warmup_{kind}.duckdb", size, table_)
            for model in sorted({defs[n].model for n in names if table_of(n) is table_}):
                con.execute(f"TUNE MODEL {model} ON TABLE train VALIDATE ON TABLE val TARGET label "
                            f"SEARCH (lr = CHOICE(0.1, 0.05), batch_size = {BATCH}) USING GRID WITH (max_epochs = 1, "
                            f"workers = {WORKERS}, threads = {THREADS}, study_name = 'warm_{model}', "
                            f"device = '{args.device}')").fetchall()
            con.close()
        print(f"warm-up done in {time.perf_counter() - start:.1f} s; {repeats} repeat(s) of {', '.join(names)}",
              flush=True)
        for r in range(repeats):
            for name in names:
                study = defs[name]
                path = work / f"r{r}_{name}.duckdb"
                con = make_db(path, size, table_of(name))
                order = ("stages", "trials") if r % 2 == 0 else ("trials", "stages")
                got = {}
                for mode in order:
                    got[mode] = run_tune(con, study, mode, args.seed, args.device)
                    g = got[mode]
                    print(f"repeat {r} {name:16s} {mode:6s}: {g['wall_s']:6.1f} s, {g['epochs_trained']:5d} epochs "
                          f"({g['stages_trained']} stages, {g['train_seconds']:.1f} s training), "
                          f"{g['checkpoints_written']} checkpoints {g['checkpoint_bytes_written'] / 1e6:.1f} MB",
                          flush=True)
                diff = compare(got["stages"], got["trials"])
                if diff:
                    print(f"  MISMATCH: {diff[:3]}", flush=True)
                singles[name].append(got)
                for m in multis:
                    if m[0] == name:
                        second = run_tune(con, defs[m[1]], "stages", args.seed, args.device)
                        seconds[m].append(second)
                        print(f"repeat {r} {m[1]:16s} stages after {name}: {second['wall_s']:6.1f} s, "
                              f"{second['epochs_trained']:5d} epochs", flush=True)
                con.close()
                shutil.rmtree(path.parent / (path.name + ".blobs"), ignore_errors=True)
                path.unlink(missing_ok=True)
        rows = [summarize_study(defs[n], singles[n], size, args.device) for n in names]
        multi_rows = []
        for m in multis:  # the second's single-study runs come later in each repeat: pair them up now
            multi_rows.append(summarize_multi(m[0], m[1], singles, seconds[m], size))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    steps, steps_at = best(rows, "steps_ratio")
    time_r, time_at = best(rows, "time_ratio")
    msteps, msteps_at = best(multi_rows, "steps_ratio")
    mtime, mtime_at = best(multi_rows, "time_ratio")
    result = {
        "steps_ratio": steps, "steps_ratio_at": steps_at,
        "time_ratio": time_r, "time_ratio_at": time_at,
        "multi_steps_ratio": msteps, "multi_steps_ratio_at": msteps_at,
        "multi_time_ratio": mtime, "multi_time_ratio_at": mtime_at,
        "identical_metrics": all(s["identical"] for s in rows) and all(m["identical"] for m in multi_rows),
        "checks_passed": not any(s["checks"] for s in rows),
        "known_issues": KNOWN_ISSUES if any(s["catalog_issues"] for s in rows) else [],
        "means": {
            "steps_ratio": "training steps (epochs of one trial over the training table: the hardware-independent "
                           "measure of GPU-hours) trial-based / stage-based, best single study",
            "time_ratio": "end-to-end wall time (2 workers) trial-based / stage-based, ratio of medians, best single "
                          "study",
            "multi_*": "(trial-based first + second) / (stage-based first + stage-based second in the first one's "
                       "tree), best scenario",
            "identical_metrics": "every trial's status and per-epoch metric (float.hex) equal in both modes, in every "
                                 "study, scenario and repeat",
            "optimizer_steps": f"epochs * ceil(train_rows / {BATCH})",
            "dedupe_only": "what whole-trial memoization alone would train (each distinct configuration once, to "
                           "the furthest epoch any of its trials reached)",
            "checkpoints": "written: handed to the blob store during the study; distinct: those of them with "
                           "distinct contents (the content-addressed store keeps identical checkpoints once: "
                           "trial-based trials that repeat a configuration or share a prefix write identical "
                           "checkpoints); kept: modelsql.studies.checkpoint_bytes after the study "
                           "(TUNE collects every checkpoint no trial still needs, and sets a collected stage's "
                           "checkpoint and checkpoint_bytes to NULL, so the catalog keeps no record of the bytes "
                           "written: they are counted by wrapping BlobStore.put in the benchmark)",
        },
        "hippo_reported": HIPPO_REPORTED,
        "studies": rows, "multi_studies": multi_rows,
        "host": {**host, "loadavg_end": os.getloadavg()},
        "device": args.device,
        "settings": {**{k: v for k, v in size.items() if k != "repeats"}, "repeats": repeats, "seed": args.seed,
                     "workers": WORKERS, "threads": THREADS, "batch_size": BATCH, "quick": args.quick,
                     "gpu_quick": args.gpu_quick, "device": args.device,
                     "optimizer": "sgd, momentum 0.9 (defaults)", "metric": "val_loss (min)"},
        "command": "python " + " ".join([Path(sys.argv[0]).as_posix()] + sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "runtime_s": time.perf_counter() - start,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print()
    print(table(result))
    print()
    print(json.dumps({k: result[k] for k in ("steps_ratio", "steps_ratio_at", "time_ratio", "time_ratio_at",
                                             "multi_steps_ratio", "multi_steps_ratio_at", "multi_time_ratio",
                                             "multi_time_ratio_at", "identical_metrics", "checks_passed",
                                             "runtime_s")}, indent=2))


if __name__ == "__main__":
    main()
