"""Cost-based plans against fixed policies: the planning half of the cost-model claim (issue 11).

Claim: once PROFILE has trained the learned cost model (``modelsql_cost``), the planner's own choice
for a PREDICT (stream or batch execution, rows per batch run, merge or not) is the fastest of the
candidate plans at least 90% of the time, and a workload of PREDICT and multi-model queries run as
the planner chooses is never slower in total than under the best fixed policy.

Workload (models built in code, random init: ``modelsql.datasets.architectures.mlp``):

* ``tiny`` (MLP 32-64-64-4), ``medium`` (784-256-256-10) and ``wide`` (256-1024-1024-10), each over
  a table of ``--rows`` rows (a ``FLOAT[F]`` column; ``medium`` and ``wide`` get a quarter of them; the column is named ``input``, as the model's input);
* a family of ``--family`` tiny MLPs and one of medium MLPs, each member seeded differently, behind
  ``PREDICT(MODELS FAMILY ... ROUTE BY model_name, TABLE req)`` over a request table whose rows are
  spread evenly over the members (``--rows`` / 10 rows), and the same over 8 rows (a small request).

Training: PROFILE of every model at batch sizes 1, 8, 64, 512, 2048 and 8192, threads 1 and 2, and,
for the family architectures, merge factors 1 and ``--family``; the last PROFILE retrains the model.

Plans: per query, the candidates its options can force:

* single-model queries: ``execution = 'stream'``, ``execution = 'batch'`` and ``execution = 'batch',
  batch_size = b`` for b in 1,024, 4,096, 8,192 and 32,768 (rows per model run; the planner also picks
  one or every core for them, which no option forces: its plan is matched to the candidate of its rows
  per run);
* routed queries: ``merge = 'always'`` and ``merge = 'never'``.

The planner's plan is the query with no options (``auto``); which candidate it equals is read from
EXPLAIN. Fixed policies apply one option set to every query where it means anything: ``ort_default``
(stream at DuckDB's chunk of 2,048 rows, never merge), ``always_batch``, ``always_merge`` and
``never_merge`` (the rest left to the planner).

Timing: every candidate and the planner's plan run interleaved, ``--repeats`` times after one
warm-up each, their order rotated per repeat; each figure is the median wall time of
``cursor.execute(q).fetchall()``. ``fastest`` says whether the planner's candidate had the lowest
median of the query's candidates; ``within_5pct`` whether it was within 5% of the lowest (the
noise of this machine, whose medians of the same point differ by more than that often).

Noise ceiling of plan choice: each candidate's timed runs split into two independent sets, the even and
the odd repeats (interleaved in time, so a slow spell of the machine falls on both), a median per set.
``fastest_plan_ceiling`` is the share of queries whose fastest candidate by the even runs is also the
fastest by the odd runs (how often a re-measurement picks the same plan: no planner can be expected to
be "the fastest" much more often); ``fastest_plan_ceiling_within_5pct`` the share whose fastest by the
even runs is within 5% of the lowest odd-run median. Each set has about half the runs of the full
medians ``fastest`` is judged on, so the ceiling is, if anything, a little low.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

SINGLE_CANDIDATES = {
    "stream": "execution = 'stream'",
    "batch": "execution = 'batch'",
    **{f"batch_{b}": f"execution = 'batch', batch_size = {b}" for b in (1024, 4096, 8192, 32768)},
}
ROUTED_CANDIDATES = {"merge": "merge = 'always'", "separate": "merge = 'never'"}
POLICIES = {
    "ort_default": {"single": "stream", "routed": "separate"},
    "always_batch": {"single": "batch", "routed": None},
    "always_merge": {"single": None, "routed": "merge"},
    "never_merge": {"single": None, "routed": "separate"},
}
"""Policy -> the candidate it forces per kind of query (None: the planner's own plan)."""


def build(con, rows: int, family: int) -> list[dict]:
    """Create the models, tables and traces; return the queries (name, kind, SQL with an ``{opts}`` slot)."""
    from modelsql.datasets.architectures import mlp, randomize

    sizes = {"tiny": (32, 64, 64, 4), "medium": (784, 256, 256, 10), "wide": (256, 1024, 1024, 10)}
    rng = np.random.default_rng(0)
    queries = []
    for name, arch in sizes.items():
        import torch

        con.import_model(name, randomize(mlp(arch), 0), example_input=torch.randn(2, arch[0]))
        n = rows if name == "tiny" else rows // 4
        _table(con, f"t_{name}", rng.standard_normal((n, arch[0]), dtype=np.float32))
        queries.append({"name": f"{name}_{n}", "kind": "single",
                        "sql": f"SELECT count(*), sum(output[1]) FROM PREDICT(MODEL {name}, TABLE t_{name}{{opts}})"})
    for fam, arch in (("tf", sizes["tiny"]), ("mf", sizes["medium"])):
        import torch

        for i in range(family):
            con.import_model(f"{fam}{i}", randomize(mlp(arch), i + 1), example_input=torch.randn(2, arch[0]))
        for n in (rows // 10, 8):
            x = rng.standard_normal((n, arch[0]), dtype=np.float32)
            table = f"req_{fam}_{n}"
            _table(con, table, x, routes=[f"{fam}{i % family}" for i in range(n)])
            queries.append({"name": f"{fam}_family{family}_{n}", "kind": "routed",
                            "sql": f"SELECT count(*), sum(output[1]) FROM PREDICT(MODELS FAMILY {fam}0 ROUTE BY model_name, "
                                   f"TABLE {table}{{opts}})"})
    return queries


def _table(con, name: str, x: np.ndarray, routes=None) -> None:
    import pyarrow as pa

    cols = {"input": pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1)), x.shape[1])}
    if routes is not None:
        cols["model_name"] = pa.array(routes)
    con.register("__bench_src", pa.table(cols))
    con.execute(f"CREATE TABLE {name} AS SELECT * FROM __bench_src")
    con.unregister("__bench_src")


def profile(con, names: list[str], merge_names: list[str], family: int, repeat: int) -> float:
    """PROFILE every model (the last one retrains the cost model); returns the seconds it took."""
    start = time.perf_counter()
    for i, name in enumerate(names):
        merge = f", merge_factors = (1, {family})" if name in merge_names else ""
        last = "true" if i == len(names) - 1 else "false"
        con.execute(f"PROFILE MODEL {name} WITH (batch_sizes = (1, 8, 64, 512, 2048, 8192), threads = (1, 2), "
                    f"repeat = {repeat}, operators = false, train_cost_model = {last}{merge})")
    return time.perf_counter() - start


def chosen_candidate(con, query: dict) -> str:
    """Which candidate the planner's plan of ``query`` is, read from EXPLAIN."""
    plan = dict(con.execute("EXPLAIN " + query["sql"].format(opts="")).fetchall())["modelsql_plan"]
    if query["kind"] == "routed":
        return "merge" if "merge: yes" in plan else "separate"
    if "BatchPredict" not in plan:
        return "stream"
    for rows in (1024, 4096, 8192, 32768):
        if f"rows per run: {rows:,} " in plan:
            return f"batch_{rows}"
    return "batch"


def time_query(con, query: dict, repeats: int) -> dict:
    """Seconds of every timed run of the planner's plan (``auto``) and of every candidate, interleaved:
    {variant: [repeat 0, repeat 1, ...]}."""
    cands = SINGLE_CANDIDATES if query["kind"] == "single" else ROUTED_CANDIDATES
    variants = {"auto": "", **{k: ", " + v for k, v in cands.items()}}
    samples = {k: [] for k in variants}
    for k, opts in variants.items():
        con.execute(query["sql"].format(opts=opts)).fetchall()  # warm-up: sessions, merged graphs
    keys = list(variants)
    for r in range(repeats):
        for k in keys[r % len(keys):] + keys[:r % len(keys)]:
            t = time.perf_counter()
            con.execute(query["sql"].format(opts=variants[k])).fetchall()
            samples[k].append(time.perf_counter() - t)
    return samples


def medians(runs: dict, start: int = 0, step: int = 1) -> dict:
    """{variant: median seconds} over the runs ``start::step`` of each variant (every run by default)."""
    return {k: statistics.median(v[start::step]) for k, v in runs.items()}


def halves_agree(runs: dict) -> dict:
    """The query's noise ceiling (module docstring): the fastest candidate by the even and by the odd runs,
    whether they are the same, and whether the even runs' fastest is within 5% of the odd runs' lowest."""
    even, odd = ({k: v for k, v in medians(runs, i, 2).items() if k != "auto"} for i in (0, 1))
    best_even, best_odd = min(even, key=even.get), min(odd, key=odd.get)
    return {"fastest_even_runs": best_even, "fastest_odd_runs": best_odd, "halves_agree": best_even == best_odd,
            "halves_within_5pct": odd[best_even] <= 1.05 * odd[best_odd]}


def run(rows: int = 200_000, family: int = 8, repeats: int = 7, profile_repeat: int = 10) -> dict:
    """The whole comparison (module docstring); returns the JSON-ready figures. ``repeats`` >= 2 (the
    noise ceiling splits them in two)."""
    import modelsql

    with tempfile.TemporaryDirectory(prefix="modelsql-plans-") as tmp:
        con = modelsql.connect(str(Path(tmp) / "plans.duckdb"))
        queries = build(con, rows, family)
        names = ["tiny", "medium", "wide", "tf0", "mf0"]
        profile_s = profile(con, names, ["tf0", "mf0"], family, profile_repeat)
        fit = con.execute("SELECT version, traces, within_10pct, median_rel_error, noise_ceiling "
                          "FROM modelsql.cost_models ORDER BY version DESC LIMIT 1").fetchone()
        out = []
        for q in queries:
            chosen = chosen_candidate(con, q)
            runs = time_query(con, q, repeats)
            times = medians(runs)
            cands = {k: v for k, v in times.items() if k != "auto"}
            best = min(cands, key=cands.get)
            out.append({"query": q["name"], "kind": q["kind"], "chosen": chosen, "fastest_candidate": best,
                        "fastest": chosen == best, "within_5pct": cands[chosen] <= 1.05 * cands[best],
                        **halves_agree(runs), "seconds": times, "runs": runs})
        con.close()
    return summarize(out, profile_s, fit)


def summarize(out: list[dict], profile_s: float, fit) -> dict:
    """Totals per policy and the headline shares."""
    totals = {"planner": sum(q["seconds"]["auto"] for q in out)}
    for policy, forced in POLICIES.items():
        totals[policy] = sum(q["seconds"][forced[q["kind"]] or "auto"] for q in out)
    best_fixed = min((p for p in POLICIES), key=lambda p: totals[p])
    return {
        "fastest_plan_share": float(np.mean([q["fastest"] for q in out])),
        "fastest_within_5pct_share": float(np.mean([q["within_5pct"] for q in out])),
        "fastest_plan_ceiling": float(np.mean([q["halves_agree"] for q in out])),
        "fastest_plan_ceiling_within_5pct": float(np.mean([q["halves_within_5pct"] for q in out])),
        "planner_vs_best_fixed": totals[best_fixed] / totals["planner"],
        "best_fixed_policy": best_fixed,
        "total_seconds": totals,
        "queries": out,
        "profile_seconds": profile_s,
        "cost_model_fit": dict(zip(("version", "traces", "within_10pct", "median_rel_error", "noise_ceiling"),
                                   fit)) if fit else None,
    }


if __name__ == "__main__":
    import argparse
    import json

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--family", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    result = run(20_000, 4, 3, 3) if a.quick else run(a.rows, a.family, a.repeats)
    print(json.dumps({k: v for k, v in result.items() if k != "queries"}, indent=1))
    for q in result["queries"]:
        print(q["query"], q["chosen"], q["fastest_candidate"], q["fastest_even_runs"], q["fastest_odd_runs"],
              {k: round(v * 1e3, 1) for k, v in q["seconds"].items()})
