"""Benchmark: the fixed cost of one SQL statement, with and without a PREDICT.

Claim (issue 7): what a statement costs beyond the work it asks for, measured on
tiny inputs where that fixed cost is all there is.

* PREDICT over a model already loaded (the light torch MLP 64-32-10 of
  ``predict_overhead.py``, trained on scikit-learn's digits), on input tables of
  1, 10 and 1,000 rows x 64 FLOAT columns ``c0..c63`` (digits-derived data):
  ``cursor.execute("SELECT * FROM PREDICT(MODEL light, TABLE t1)")`` + ``fetchall()``
  through the modelsql PEP 249 cursor, against ONNX Runtime's ``session.run`` on
  the same rows already in a NumPy array. The session is configured at its best:
  1 and all cores (spinning on) are both timed and the faster kept, per input size.
  ``predict_<n>_overhead_ms`` is the difference of the two medians.
* plain SQL that names no model, ``SELECT * FROM t1`` + ``fetchall()``, through the
  modelsql cursor against DuckDB's own ``duckdb`` connection on the same file
  (1 and all threads timed, the faster kept); ``plain_sql_ratio`` is modelsql / duckdb.
* floor diagnostic, ``duckdb_udf_floor_1_row_ms``: raw DuckDB running the same
  64-column shape a PREDICT is lowered to (``[c0, ..., c63]::FLOAT[64]`` fed to a
  registered Arrow UDF returning a ``STRUCT(label, probabilities)``, the struct
  unnested in an outer SELECT) with a trivial UDF that returns zeros:
  what DuckDB itself charges for running any Python vectorized function in a
  statement. ``duckdb_udf_register_floor_1_row_ms`` is the same with the UDF
  registered and removed around every statement, as a PREDICT does;
  ``diagnostics.duckdb_pack_1_row`` is the ``FLOAT[64]`` packing alone, no UDF;
  ``predict_1_row_over_floor_ms`` is what modelsql adds to that floor; and
  ``duckdb_select_1000_rows_ms`` is raw DuckDB returning the 1,000-row table's
  rows to Python (``SELECT * FROM t1000`` + ``fetchall``), what the 1,000-row
  PREDICT pays before any model work.

All measurements run in one process and are interleaved: each of ``--repeat``
rounds (after ``--warmup`` rounds) times every variant once, in a random order and
each right after an untimed call of itself (see :func:`interleaved`), so load from
other processes falls on all of them alike. Each figure is the median over the rounds,
with p10/p90 as its spread (``diagnostics``). Writes
``benchmarks/results/statement_latency.json``.

Run: ``python benchmarks/statement_latency.py [--repeat 300]``

``--profile [N]`` instead runs cProfile over N (default 200) 1-row PREDICT
statements, after warm-up, and prints the top 25 functions by cumulative time, then
the top 15 by own time (it writes no JSON: profiling distorts the timings).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import platform
import pstats
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import numpy as np
import onnxruntime as ort
import pyarrow as pa

import modelsql

sys.path.insert(0, str(Path(__file__).resolve().parent))
from predict_overhead import FEATURES, light_model, make_data, ort_sessions  # noqa: E402

SIZES = (1, 10, 1000)
PREDICT_SQL = "SELECT * FROM PREDICT(MODEL light, TABLE t{n})"
PLAIN_SQL = "SELECT * FROM t1"


def _row_word(n: int) -> str:
    return "1_row" if n == 1 else f"{n}_rows"


def build(path: str, data: np.ndarray):
    """Tables t1, t10, t1000 (the first n rows of ``data``) and the light model, in a new file; returns the model."""
    proto = light_model()
    with modelsql.connect(path) as con:
        for n in SIZES:
            con.register("bench_src", {c: data[:n, i] for i, c in enumerate(FEATURES)})
            con.execute(f"CREATE TABLE t{n} AS SELECT * FROM bench_src")
            con.unregister("bench_src")
        con.commit()
        con.import_model("light", proto, features=FEATURES)
    return proto


def floor_udf(arr: pa.Array) -> pa.StructArray:
    """The trivial Arrow UDF of the floor diagnostic: zeros of the PREDICT's output struct, one per row."""
    n = len(arr)
    probs = pa.FixedSizeListArray.from_arrays(pa.array(np.zeros(n * 10, np.float32)), 10)
    return pa.StructArray.from_arrays([pa.array(np.zeros(n, np.int64)), probs], names=["label", "probabilities"])


FLOOR_ARG = "CAST([" + ", ".join(f'"{c}"' for c in FEATURES) + "] AS REAL[64])"
FLOOR_TYPE = "STRUCT(label BIGINT, probabilities FLOAT[10])"


def floor_sql(fn_name: str, table: str) -> str:
    """The least a PREDICT over ``table`` can ask of DuckDB (and the shape it is lowered to, see
    ``modelsql.operators.scan.StreamPredict.sql``): the 64 columns packed into one ``REAL[64]`` argument of
    one function, its struct result unnested next to the passthrough columns."""
    return (
        'SELECT * EXCLUDE ("__msql_p"), unnest("__msql_p") FROM '
        f'(SELECT *, {fn_name}({FLOOR_ARG}) AS "__msql_p" FROM {table} AS "__msql_in") AS "__msql_q"'
    )


def register_floor(duck: duckdb.DuckDBPyConnection, name: str) -> None:
    # the same flags a PREDICT registers its function with
    duck.create_function(name, floor_udf, [duckdb.sqltype("FLOAT[64]")], duckdb.sqltype(FLOOR_TYPE),
                         type="arrow", null_handling="special", side_effects=True)


def interleaved(variants: dict[str, callable], repeat: int, warmup: int, seed: int = 0) -> dict[str, list[float]]:
    """Seconds per call of each variant: ``warmup`` untimed rounds, then ``repeat`` rounds each timing every variant once.

    Each round runs the variants in a fresh random order, and each timed call comes right after an
    untimed call of the same variant: what ran before (a PREDICT's session threads still spinning,
    caches filled by another statement) does not land in the time of a baseline that follows it.
    """
    for _ in range(warmup):
        for fn in variants.values():
            fn()
    times: dict[str, list[float]] = {k: [] for k in variants}
    items = list(variants.items())
    rng = np.random.default_rng(seed)
    for _ in range(repeat):
        for i in rng.permutation(len(items)):
            name, fn = items[i]
            fn()
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return times


def spread_ms(ts: list[float]) -> dict:
    a = np.asarray(ts) * 1e3
    return {"median_ms": float(np.median(a)), "p10_ms": float(np.percentile(a, 10)),
            "p90_ms": float(np.percentile(a, 90)), "n": len(a)}


def profile(path: str, n: int, warmup: int) -> None:
    con = modelsql.connect(path)
    con.autocommit = True
    cur = con.cursor()
    query = PREDICT_SQL.format(n=1)
    for _ in range(warmup):
        cur.execute(query).fetchall()
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    for _ in range(n):
        cur.execute(query).fetchall()
    prof.disable()
    wall = time.perf_counter() - t0
    con.close()
    print(f"cProfile over {n} 1-row PREDICT statements: {wall / n * 1e3:.3f} ms each under the profiler")
    stats = pstats.Stats(prof).strip_dirs()
    stats.sort_stats("cumulative").print_stats(25)
    print("The same by own time (tottime), where no callee is counted:")
    stats.sort_stats("tottime").print_stats(15)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=300, help="timed rounds (median and p10/p90 over them)")
    ap.add_argument("--warmup", type=int, default=20, help="untimed rounds first")
    ap.add_argument("--profile", type=int, nargs="?", const=200, default=None, metavar="N",
                    help="instead: cProfile N (default 200) 1-row PREDICT statements and print the top 25")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "statement_latency.json"))
    args = ap.parse_args(argv)

    tmp = tempfile.mkdtemp(prefix="modelsql-bench-")
    path = os.path.join(tmp, "bench.duckdb")
    data = make_data(max(SIZES))
    proto = build(path, data)
    if args.profile is not None:
        profile(path, args.profile, args.warmup)
        return 0

    con = modelsql.connect(path)
    con.autocommit = True
    cur = con.cursor()
    raw = {}
    cores = len(os.sched_getaffinity(0))
    for threads in sorted({1, cores}):
        raw[threads] = duckdb.connect(path)  # the same database instance in this process, its own connection
        raw[threads].execute(f"SET threads = {threads}")
    floor_con = duckdb.connect(path)  # the floor's own connection, apart from those timing plain SQL
    register_floor(floor_con, "floor_udf")
    counter = iter(range(1, 1 << 62))

    sessions = ort_sessions(proto.SerializeToString())
    feeds = {n: np.ascontiguousarray(data[:n]) for n in SIZES}
    input_name = sessions[1].get_inputs()[0].name

    # the answers agree before anything is timed
    for n in SIZES:
        rows = cur.execute(PREDICT_SQL.format(n=n)).fetchall()
        labels = sessions[1].run(["label"], {input_name: feeds[n]})[0]
        assert len(rows) == n and [r[64] for r in rows] == labels.tolist(), n
    assert cur.execute(PLAIN_SQL).fetchall() == raw[1].execute(PLAIN_SQL).fetchall()
    assert len(floor_con.execute(floor_sql("floor_udf", "t1")).fetchall()[0]) == 66

    def register_each():
        name = f"floor_udf_{next(counter)}"
        register_floor(floor_con, name)
        floor_con.execute(floor_sql(name, "t1")).fetchall()
        floor_con.remove_function(name)

    variants = {}
    for n in SIZES:
        variants[f"predict_{n}"] = lambda q=PREDICT_SQL.format(n=n): cur.execute(q).fetchall()
        for threads, sess in sessions.items():
            variants[f"session_run_{n}_t{threads}"] = lambda s=sess, x=feeds[n]: s.run(None, {input_name: x})
    variants["plain_sql"] = lambda: cur.execute(PLAIN_SQL).fetchall()
    for threads, d in raw.items():
        variants[f"duckdb_plain_sql_t{threads}"] = lambda d=d: d.execute(PLAIN_SQL).fetchall()
    variants["duckdb_udf_floor_1"] = lambda q=floor_sql("floor_udf", "t1"): floor_con.execute(q).fetchall()
    variants["duckdb_select_1000"] = lambda: floor_con.execute("SELECT * FROM t1000").fetchall()
    variants["duckdb_udf_register_floor_1"] = register_each
    variants["duckdb_pack_1"] = lambda q=f"SELECT *, {FLOOR_ARG} AS p FROM t1": floor_con.execute(q).fetchall()

    times = interleaved(variants, args.repeat, args.warmup)
    stats = {k: spread_ms(v) for k, v in times.items()}

    def best(prefix: str) -> tuple[dict, int]:
        threads = min((t for t in (1, cores) if f"{prefix}_t{t}" in stats), key=lambda t: stats[f"{prefix}_t{t}"]["median_ms"])
        return stats[f"{prefix}_t{threads}"], threads

    result = {
        "repeat": args.repeat,
        "warmup": args.warmup,
        "machine": {"cores": cores, "python": sys.version.split()[0], "platform": platform.platform()},
        "versions": {"duckdb": duckdb.__version__, "onnxruntime": ort.__version__, "modelsql": modelsql.__version__},
    }
    diag = {}
    for n in SIZES:
        w = _row_word(n)
        pred = stats[f"predict_{n}"]
        sr, threads = best(f"session_run_{n}")
        result[f"predict_{w}_ms"] = pred["median_ms"]
        result[f"session_run_{w}_ms"] = sr["median_ms"]
        result[f"predict_{w}_overhead_ms"] = pred["median_ms"] - sr["median_ms"]
        diag[f"predict_{w}"] = pred
        diag[f"session_run_{w}"] = {**sr, "intra_op_threads": threads}
        for t in sessions:
            diag[f"session_run_{w}_threads_{t}"] = stats[f"session_run_{n}_t{t}"]
    plain = stats["plain_sql"]
    dplain, dthreads = best("duckdb_plain_sql")
    result["plain_sql_ms"] = plain["median_ms"]
    result["duckdb_plain_sql_ms"] = dplain["median_ms"]
    result["plain_sql_ratio"] = plain["median_ms"] / dplain["median_ms"]
    result["duckdb_udf_floor_1_row_ms"] = stats["duckdb_udf_floor_1"]["median_ms"]
    result["predict_1_row_over_floor_ms"] = stats["predict_1"]["median_ms"] - stats["duckdb_udf_floor_1"]["median_ms"]
    result["duckdb_select_1000_rows_ms"] = stats["duckdb_select_1000"]["median_ms"]
    result["duckdb_udf_register_floor_1_row_ms"] = stats["duckdb_udf_register_floor_1"]["median_ms"]
    diag["plain_sql"] = plain
    diag["duckdb_plain_sql"] = {**dplain, "threads": dthreads}
    for t in raw:
        diag[f"duckdb_plain_sql_threads_{t}"] = stats[f"duckdb_plain_sql_t{t}"]
    diag["duckdb_udf_floor_1_row"] = stats["duckdb_udf_floor_1"]
    diag["duckdb_udf_register_floor_1_row"] = stats["duckdb_udf_register_floor_1"]
    diag["duckdb_pack_1_row"] = stats["duckdb_pack_1"]
    result["diagnostics"] = diag

    for n in SIZES:
        w = _row_word(n)
        d = diag[f"predict_{w}"]
        print(f"{n:>5} {'row ' if n == 1 else 'rows'}: PREDICT {d['median_ms']:.3f} ms (p10 {d['p10_ms']:.3f}, p90 {d['p90_ms']:.3f})  "
              f"session.run {result[f'session_run_{w}_ms']:.3f} ms ({diag[f'session_run_{w}']['intra_op_threads']} threads)  "
              f"overhead {result[f'predict_{w}_overhead_ms']:.3f} ms", flush=True)
    print(f"plain SQL: modelsql {plain['median_ms']:.3f} ms  duckdb {dplain['median_ms']:.3f} ms ({dthreads} threads)  "
          f"ratio {result['plain_sql_ratio']:.2f}", flush=True)
    print(f"DuckDB Arrow-UDF floor, 1 row: {result['duckdb_udf_floor_1_row_ms']:.3f} ms "
          f"(registered per statement: {result['duckdb_udf_register_floor_1_row_ms']:.3f} ms; "
          f"the FLOAT[64] packing alone, no UDF: {diag['duckdb_pack_1_row']['median_ms']:.3f} ms)", flush=True)

    for d in raw.values():
        d.close()
    floor_con.close()
    con.close()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
