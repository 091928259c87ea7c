"""Imperative Python programs: eager PyTorch against what modelsql runs for them (issue 12).

Claim: ``CREATE MODEL m FROM PYTHON`` imports each of the ten programs of
``modelsql.datasets.programs`` correctly (none silently wrong) and runs it as one ONNX graph where the
safety gate allows, else co-executed (torch.compile with each captured graph on ONNX Runtime) or eagerly,
whichever was faster at import. This script measures, per program, at batch 1 and 32:

* ``eager_us``: the program called eagerly under ``no_grad`` on the batch (a batch-dependent program, which
  PREDICT runs one row per call because its answer for a row must not depend on the other rows, is called
  one row at a time here too: the same semantics);
* ``modelsql_us``: the session PREDICT runs (``modelsql.engine.artifacts.sessions.model_session``: ONNX Runtime for
  a whole graph, the :class:`PythonProgramModel` otherwise), on the same inputs, 1 thread;
* ``eager_whole_batch_us`` (row-per-call programs only): eager on the whole batch at once, which is what
  calling the program directly costs, though its answer for a row then depends on the batch;
* ``path``: ``whole_graph``, ``coexecute`` or ``eager``; ``correct``: modelsql's outputs equal eager
  PyTorch's (rtol 1e-4, atol 1e-5) on 64 rows that are not the example.

Timing: the two variants interleaved, ``--repeats`` samples after warm-up, each sample ``k`` calls / ``k``
(``k`` so a sample lasts >= 2 ms), every call on the next of :data:`POOL` distinct input batches; medians
with min and max. Headlines in
``benchmarks/results/imperative.json``: ``programs_correct`` (of 10), ``whole_graph``, ``coexecuted`` (kind
python: co-executed or eager by choice), ``speedup_geomean`` (eager_us / modelsql_us over all programs and
both batches).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import duckdb
import numpy as np
import torch

import modelsql
from modelsql.datasets import programs as P
from modelsql.converters.python_program import to_feeds
from modelsql.catalog import Catalog
from modelsql.engine.artifacts import sessions as artifacts
from modelsql.storage import BlobStore

RESULTS = Path(__file__).parent / "results" / "imperative.json"

POOL = 32
"""Distinct input batches per batch size, cycled through call after call (a program whose dynamo guards test
input values recompiles on new inputs; timing one repeated input would hide that)."""


def _sample(fn, k: int) -> float:
    start = time.perf_counter()
    for _ in range(k):
        fn()
    return (time.perf_counter() - start) / k * 1e6


def _calls(fn) -> int:
    fn()
    once = _sample(fn, 1)
    return max(1, int(2000 / max(once, 1.0)))


def time_pair(eager, ours, repeats: int) -> dict:
    """Interleaved medians (us per call) of two zero-argument callables."""
    k_e, k_o = _calls(eager), _calls(ours)
    e, o = [], []
    for _ in range(repeats):
        e.append(_sample(eager, k_e))
        o.append(_sample(ours, k_o))
    return {"eager_us": statistics.median(e), "eager_range": [min(e), max(e)],
            "modelsql_us": statistics.median(o), "modelsql_range": [min(o), max(o)]}


def _eager_fn(module, args, per_row: bool):
    def run():
        with torch.no_grad():
            if per_row:
                return [module(*(a[i:i + 1] for a in args)) for i in range(len(args[0]))]
            return module(*args)
    return run


def _cycling(calls: list):
    """One callable running the next of ``calls`` each time (each call gets other inputs, as PREDICT's do)."""
    state = {"k": 0}

    def run():
        state["k"] = (state["k"] + 1) % len(calls)
        return calls[state["k"]]()
    return run


def _per_row_outputs(cls, args) -> np.ndarray:
    module = cls().eval()
    with torch.no_grad():
        return np.concatenate([module(*(a[i:i + 1] for a in args)).numpy() for i in range(len(args[0]))])


def create(db: str, name: str, cls) -> float:
    """``CREATE MODEL name FROM PYTHON ...`` in database ``db``; the seconds it took."""
    with modelsql.connect(db) as con:
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            con.cursor().execute(f"CREATE MODEL {name} FROM PYTHON 'modelsql.datasets.programs:{cls.__name__}'")
        con.commit()
        return time.perf_counter() - start


def measure(name: str, cls, db: str, repeats: int) -> dict:
    import_s = create(db, name, cls)
    duck = duckdb.connect(db, read_only=True)
    mv = Catalog(duck, read_only=True).get(name)
    duck.close()
    props = dict(mv.options)
    session = artifacts.model_session(BlobStore.for_database(db), mv, intra=1)
    per_row = mv.batch_dependence is not None and mv.kind == "python"
    row = {"program": name, "path": props["execution"], "kind": mv.kind, "row_calls": per_row,
           "import_s": round(import_s, 2), "whole_graph": props.get("whole_graph"), "timing_at_import":
           props.get("timing")}
    check = P.new_inputs(name, 64, seed=42)
    check_args = check if isinstance(check, tuple) else (check,)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = session.run(to_feeds(check_args, mv.inputs))[0]
    row["correct"] = bool(np.allclose(got, _per_row_outputs(cls, check_args), rtol=1e-4, atol=1e-5))
    module = cls().eval()
    for batch in (1, 32):
        pool = [P.new_inputs(name, batch, seed=1000 * batch + k) for k in range(POOL)]
        pool = [x if isinstance(x, tuple) else (x,) for x in pool]
        feeds = [to_feeds(args, mv.inputs) for args in pool]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t = time_pair(_cycling([_eager_fn(module, args, per_row) for args in pool]),
                          _cycling([(lambda f=f: session.run(f)) for f in feeds]), repeats)
        t["speedup"] = t["eager_us"] / t["modelsql_us"]
        if per_row:  # what calling the program on the whole batch costs (its answer is PREDICT's only row by row)
            t["eager_whole_batch_us"] = time_pair(_cycling([_eager_fn(module, args, False) for args in pool]),
                                                  lambda: None, 5)["eager_us"]
        row[f"batch_{batch}"] = t
    return row


def run(repeats: int) -> dict:
    torch.set_num_threads(1)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "imperative.duckdb")
        for name, cls in P.PROGRAMS.items():
            row = measure(name, cls, db, repeats)
            rows.append(row)
            print(json.dumps({k: row[k] for k in ("program", "path", "correct")} |
                             {f"speedup_b{b}": round(row[f"batch_{b}"]["speedup"], 2) for b in (1, 32)}))
    speedups = [r[f"batch_{b}"]["speedup"] for r in rows for b in (1, 32)]
    return {
        "programs_correct": sum(r["correct"] for r in rows),
        "whole_graph": sum(r["kind"] != "python" for r in rows),
        "coexecuted": sum(r["kind"] == "python" for r in rows),
        "coexecuted_running_eager": sum(r["path"] == "eager" for r in rows),
        "speedup_geomean": math.exp(statistics.mean(math.log(s) for s in speedups)),
        "speedup_geomean_whole_graph": math.exp(statistics.mean(
            math.log(r[f"batch_{b}"]["speedup"]) for r in rows if r["kind"] != "python" for b in (1, 32))),
        "programs": rows,
        "repeats": repeats,
        "machine": {"platform": platform.platform(), "torch": torch.__version__, "threads": 1},
        "command": f"python benchmarks/imperative.py --repeats {repeats}",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    result = run(args.repeats)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "programs"}, indent=1))


if __name__ == "__main__":
    main()
