"""Level-batched tree execution against naive Python recursion (issue 12; EuroSys 2018).

Claim: running a recursive model one tree height at a time (every node whose children are done, across
all trees of the batch, in one cell call: :func:`modelsql.recursive.trees.level_batched`) is much faster
than Python recursion over each tree (one cell call per node: :func:`~modelsql.recursive.trees.naive_recursion`),
with equal outputs and gradients.

Workload: a Child-Sum TreeLSTM (hidden 32, one value per node, 3 outputs) over ``--trees`` trees of 19-49
nodes (``modelsql.datasets.trees.random_trees``, seed 0), 1 thread. Per variant:

* ``inference_ms``: forward under ``no_grad`` over the whole batch;
* ``training_ms``: one training step (forward, cross-entropy over random labels, backward, Adam step).

The level variant's time includes computing its schedule in NumPy (``schedule_ms`` separately). The two
variants are interleaved, ``--repeats`` samples each (a sample is one call timed after one untimed call of
the same variant); medians with min and max. ``max_output_diff`` and
``max_grad_diff`` compare the two on the same weights. Headlines in ``benchmarks/results/recursion.json``:
``inference_speedup`` and ``training_speedup`` (naive median / level median).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch

from modelsql.datasets.trees import random_trees
from modelsql.recursive.treelstm import TreeLSTM
from modelsql.recursive.trees import Trees, schedule

RESULTS = Path(__file__).parent / "results" / "recursion.json"


def _ms(fn) -> float:
    """One timed call after one untimed call (the other variant ran just before: its memory is not ours)."""
    fn()
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def _infer(model, trees):
    with torch.no_grad():
        return model(trees)


def _step(model, optimizer, trees, labels):
    optimizer.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(trees), labels)
    loss.backward()
    optimizer.step()


def _grads(model, trees, labels) -> list:
    model.zero_grad()
    torch.nn.functional.cross_entropy(model(trees), labels).backward()
    return [p.grad.clone() for p in model.parameters()]


def equality(model, trees, labels) -> dict:
    """Largest differences between the two executors' outputs and gradients on the same weights."""
    out, grads = {}, {}
    for executor in ("level", "naive"):
        model.executor = executor
        out[executor] = _infer(model, trees)
        grads[executor] = _grads(model, trees, labels)
    return {"max_output_diff": float((out["level"] - out["naive"]).abs().max()),
            "max_grad_diff": max(float((a - b).abs().max()) for a, b in zip(grads["level"], grads["naive"]))}


def run(n_trees: int, repeats: int) -> dict:
    torch.set_num_threads(1)
    values, parents = random_trees(n_trees, 19, 49, seed=0)
    trees = Trees(values, parents)
    labels = torch.randint(0, 3, (n_trees,), generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    model = TreeLSTM(1, 3, 32)
    result = {"trees": n_trees, "nodes": trees.nodes, "levels": len(schedule(trees.parents).levels)}
    result.update(equality(model, trees, labels))
    times = {(e, k): [] for e in ("level", "naive") for k in ("inference", "training")}
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for executor in ("level", "naive"):  # warm-up
        model.executor = executor
        _infer(model, trees)
    for _ in range(repeats):
        for executor in ("level", "naive"):
            model.executor = executor
            times[(executor, "inference")].append(_ms(lambda: _infer(model, trees)))
            times[(executor, "training")].append(_ms(lambda: _step(model, optimizer, trees, labels)))
    result["schedule_ms"] = statistics.median(_ms(lambda: schedule(trees.parents)) for _ in range(repeats))
    for (executor, kind), samples in times.items():
        result[f"{executor}_{kind}_ms"] = statistics.median(samples)
        result[f"{executor}_{kind}_range_ms"] = [min(samples), max(samples)]
    result["inference_speedup"] = result["naive_inference_ms"] / result["level_inference_ms"]
    result["training_speedup"] = result["naive_training_ms"] / result["level_training_ms"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    result = run(args.trees, args.repeats)
    head = {"inference_speedup": result.pop("inference_speedup"), "training_speedup": result.pop("training_speedup")}
    out = dict(head, **result, machine={"platform": platform.platform(), "torch": torch.__version__, "threads": 1},
               command=f"python benchmarks/recursion.py --trees {args.trees} --repeats {args.repeats}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
