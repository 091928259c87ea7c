"""Benchmark: the same benchmark scripts run on two revisions of modelsql, side by side in one run.

Claim (issue 23): a change that only moves code (the engine's feature packages, the statement registry,
the option schema) leaves the fixed cost of a statement and the cost of a large PREDICT where they were,
within their spread.

The revision before (``--before``, default the last commit before issue 23's redesign) and the one after
(``--after``, default ``HEAD``: never the working tree's uncommitted edits) are checked out in temporary git
worktrees; each benchmark script (``--bench``, default ``statement_latency`` and
``predict_overhead``) is run from each revision's own checkout, that revision's ``modelsql`` first on
``PYTHONPATH``, alternately (before, after, after, before, ...) for ``--rounds`` rounds, so machine load
falls on both alike. Every numeric top-level figure both revisions' scripts write is compared: the median
over rounds of each side, their min and max, and ``after / before``.

Writes ``benchmarks/results/revisions.json``; headline figures at the top level:
``<bench>.<figure>.ratio`` for each benchmark's own headline figures (``HEADLINES``).

Run: ``python benchmarks/revisions.py`` (about 4 minutes a round on 2 cores; ``--rounds 1 --quick`` for a
look). Requires git and the dev extras.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "revisions.json"
BEFORE = "7dcb20b"
"""The last commit before issue 23's redesign (``planner/`` as one folder)."""
HEADLINES = {
    "statement_latency": ("predict_1_row_ms", "predict_1000_rows_ms", "plain_sql_ms", "predict_1_row_over_floor_ms"),
    "predict_overhead": ("light_glue_s", "light_vs_glue"),
}
QUICK_ARGS = {"statement_latency": ["--repeat", "60", "--warmup", "10"], "predict_overhead": ["--rows", "200000"]}


def run_once(root: Path, bench: str, out: Path, quick: bool) -> dict:
    """Run ``root``'s ``benchmarks/<bench>.py`` with ``root``'s modelsql; its JSON output."""
    env = dict(os.environ, PYTHONPATH=str(root))
    args = [sys.executable, str(root / "benchmarks" / f"{bench}.py"), "--out", str(out)]
    subprocess.run(args + (QUICK_ARGS.get(bench, []) if quick else []), env=env, cwd=root, check=True,
                   stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": values}


def compare(runs: dict[str, list[dict]]) -> dict:
    """Per figure present on both sides: each side's spread and the ratio of medians (after / before)."""
    keys = [k for k, v in runs["after"][0].items() if isinstance(v, (int, float)) and not isinstance(v, bool)
            and all(k in r for r in runs["before"])]
    out = {}
    for k in keys:
        before, after = spread([r[k] for r in runs["before"]]), spread([r[k] for r in runs["after"]])
        out[k] = {"before": before, "after": after,
                  "ratio": after["median"] / before["median"] if before["median"] else None}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", default=BEFORE, help="the revision to compare with (default: %(default)s)")
    ap.add_argument("--after", default="HEAD", help="the revision measured (default: %(default)s, checked out apart "
                                                     "from the working tree, so uncommitted edits never run)")
    ap.add_argument("--bench", nargs="+", default=list(HEADLINES), help="benchmark scripts (names in benchmarks/)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="fewer repeats and rows per run")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="revisions-"))
    old, new = work / "before", work / "after"
    for path, revision in ((old, args.before), (new, args.after)):
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(path), revision], cwd=ROOT, check=True)
    try:
        result: dict = {"before": args.before, "after": _head(new), "rounds": args.rounds, "quick": args.quick}
        for bench in args.bench:
            runs: dict[str, list[dict]] = {"before": [], "after": []}
            for r in range(args.rounds):
                order = ("before", "after") if r % 2 == 0 else ("after", "before")
                for side in order:
                    root = old if side == "before" else new
                    runs[side].append(run_once(root, bench, work / f"{bench}-{side}-{r}.json", args.quick))
                    print(f"round {r} {bench} {side} done", flush=True)
            figures = compare(runs)
            result[bench] = figures
            for k in HEADLINES.get(bench, ()):
                if k in figures:
                    result[f"{bench}.{k}.ratio"] = figures[k]["ratio"]
    finally:
        for path in (old, new):
            subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=ROOT, check=False)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if isinstance(v, float)}, indent=2))


def _head(checkout: Path) -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=checkout, capture_output=True, text=True,
                          check=True).stdout.strip()


if __name__ == "__main__":
    main()
