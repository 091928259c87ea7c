"""Benchmark: PREDICT over a table on the GPU, side by side with the hand-written glue and a ready array.

Claim (issue 24): ResNet-50 (224x224, width 64, 1,000 classes, random weights, built in code by
``modelsql.datasets.architectures.resnet50`` and exported with ``export_onnx``) over a DuckDB table of
``--rows`` (256) images, each row one 3x224x224 image as nested arrays ``FLOAT[224][224][3]`` (README
"Array inputs": DuckDB writes sizes innermost first, so this holds NumPy's ``[3, 224, 224]``; ``--layout
list`` stores flat ``FLOAT[]`` lists of 150,528 values instead, which both DuckDB's read to Arrow and
PREDICT's input path took about twice as long over on a 2-core CPU machine),

    SELECT id, output FROM PREDICT(MODEL r50, TABLE imgs, device = 'cuda')

fetched whole with the cursor's ``fetch_arrow()`` (a ``pyarrow.Table``: what a user reading 256 x 1,000
floats does; ``fetchall`` would build 256,000 Python floats) takes

* at most 1.2x the best hand-written glue doing the same job (``vs_glue``): DuckDB -> Arrow -> NumPy ->
  ONNX Runtime's CUDA provider with IOBinding (inputs bound from the host, outputs bound on the device and
  copied back once per batch), at its best batch size (16, 32, 64, 128, 256) and its best way of reading
  (``whole``: the table fetched as one Arrow table, its list column flattened to one NumPy array and run in
  slices; ``stream``: DuckDB's Arrow record batches of the batch size, each flattened and run as it arrives);
* at most 2x ONNX Runtime's CUDA provider on the same images already in a NumPy array (``vs_ready_array``),
  at its best batch size and call (``run`` or IOBinding).

Also timed, for diagnosis: the pure DuckDB read of the image column into Arrow and then NumPy (what the
glue pays before any inference), and the statement with ``execution = 'batch'`` and ``'stream'``.

Method: one process. The glue's and the ready array's configurations are searched first (each one warm-up
and ``--search-repeat`` timed runs, the median kept), then every variant is warmed up once and timed in
``--repeat`` interleaved rounds (each round runs every variant once, in a shuffled order), so drift falls on
all of them alike. Figures are the medians of the rounds, with min/max as the spread. Outputs are checked
against the glue's: argmax agreement and max relative difference (max |a - b| / max |b|). A variant that
fails records its error text in the JSON and the run goes on.

Writes ``benchmarks/results/gpu_predict.json``.

Run (GPU machine): ``python benchmarks/gpu_predict.py`` (about a minute on one H200).
Run (no GPU, end to end on tiny sizes): ``python benchmarks/gpu_predict.py --device cpu --smoke``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

try:  # torch first: its CUDA libraries are the ones onnxruntime-gpu's preload_dlls finds
    import torch
except ImportError:  # pragma: no cover - torch builds the model; the run fails below without it
    torch = None

import duckdb
import numpy as np
import onnxruntime as ort
import pyarrow as pa

import modelsql

from gpu_common import error_text, host_info, logger  # noqa: E402  (benchmarks/gpu_common.py)

log = logger("gpu_predict")

QUERY = "SELECT id, output FROM PREDICT(MODEL r50, TABLE imgs{options})"
READ_QUERY = "SELECT id, input FROM imgs"


def versions() -> dict:
    return {"modelsql": modelsql.__version__, "duckdb": duckdb.__version__, "onnxruntime": ort.__version__,
            "pyarrow": pa.__version__, "numpy": np.__version__, "torch": getattr(torch, "__version__", None)}


# ---------------------------------------------------------------- setup


def build_model(size: int, width: int, classes: int) -> bytes:
    from modelsql.datasets import architectures as A

    torch.manual_seed(0)
    net = A.resnet50(num_classes=classes, width=width).eval()
    example = np.random.default_rng(0).standard_normal((2, 3, size, size), dtype=np.float32)
    return A.export_onnx(net, example, dynamic_batch=True)


def make_images(rows: int, size: int) -> np.ndarray:
    return np.random.default_rng(1).standard_normal((rows, 3, size, size), dtype=np.float32)


def column_type(layout: str, shape: tuple) -> str:
    """The image column's DuckDB type: nested arrays (sizes innermost first, README "Array inputs") or a list."""
    return "FLOAT" + "".join(f"[{d}]" for d in reversed(shape)) if layout == "nested" else "FLOAT[]"


def build_db(path: str, blob: bytes, images: np.ndarray, layout: str) -> None:
    """``r50`` in the catalog and ``imgs(id BIGINT, input <column_type>)``, one row-major image per row."""
    rows, shape = len(images), images.shape[1:]
    values = pa.array(images.reshape(-1))
    if layout == "nested":
        column = values
        for d in reversed(shape):
            column = pa.FixedSizeListArray.from_arrays(column, d)
    else:
        column = pa.ListArray.from_arrays(pa.array(np.arange(rows + 1, dtype=np.int32) * int(np.prod(shape))), values)
    with modelsql.connect(path) as con:
        con.import_model("r50", blob)
        con.register("imgs_src", pa.table({"id": pa.array(np.arange(rows, dtype=np.int64)), "input": column}))
        con.execute(f"CREATE TABLE imgs AS SELECT id, input::{column_type(layout, shape)} AS input FROM imgs_src")
        con.unregister("imgs_src")
        con.commit()


# ---------------------------------------------------------------- the variants


def list_to_numpy(column, shape: tuple) -> np.ndarray:
    """A list or (nested) array column (Array or ChunkedArray) of equal-size float rows as one ``(n, *shape)``
    array (zero-copy for one chunk without nulls; one copy joining several chunks)."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    flat = []
    for c in chunks:
        while pa.types.is_list(c.type) or pa.types.is_large_list(c.type) or pa.types.is_fixed_size_list(c.type):
            c = c.flatten()
        if len(c):
            flat.append(c.to_numpy(zero_copy_only=False))
    values = flat[0] if len(flat) == 1 else np.concatenate(flat)
    return values.reshape((-1, *shape))


class Ort:
    """ONNX Runtime sessions of the model on ``device`` ("cuda" or "cpu"), run plainly or with IOBinding."""

    def __init__(self, blob: bytes, device: str) -> None:
        self.device = device
        providers = ([("CUDAExecutionProvider", {"device_id": "0"}), "CPUExecutionProvider"] if device == "cuda"
                     else ["CPUExecutionProvider"])
        self.session = ort.InferenceSession(blob, providers=providers)
        self.providers = self.session.get_providers()

    def run(self, x: np.ndarray) -> np.ndarray:
        return self.session.run(["output"], {"input": x})[0]

    def bound(self, x: np.ndarray) -> np.ndarray:
        binding = self.session.io_binding()
        binding.bind_cpu_input("input", np.ascontiguousarray(x))
        binding.bind_output("output", self.device, 0)
        self.session.run_with_iobinding(binding)
        return binding.copy_outputs_to_cpu()[0]


def glue(duck, model: Ort, shape: tuple, batch: int, fetch: str):
    """The hand-written glue: DuckDB -> Arrow -> NumPy -> ONNX Runtime (IOBinding), ``batch`` rows a run."""
    if fetch == "whole":
        table = duck.sql(READ_QUERY).to_arrow_table()
        ids = table.column("id").to_numpy()
        x = list_to_numpy(table.column("input"), shape)
        return ids, np.concatenate([model.bound(x[i:i + batch]) for i in range(0, len(x), batch)])
    ids, outs = [], []
    for rb in duck.sql(READ_QUERY).to_arrow_reader(batch):
        if rb.num_rows:
            ids.append(rb.column(0).to_numpy())
            outs.append(model.bound(list_to_numpy(rb.column(1), shape)))
    return np.concatenate(ids), np.concatenate(outs)


def ready(images: np.ndarray, model: Ort, batch: int, call: str):
    fn = model.bound if call == "iobinding" else model.run
    return np.arange(len(images)), np.concatenate([fn(images[i:i + batch]) for i in range(0, len(images), batch)])


def duckdb_read(duck, shape: tuple, parts: dict):
    """Diagnostic: the image column read into one Arrow table, then into one NumPy array (times in ``parts``)."""
    t0 = time.perf_counter()
    table = duck.sql(READ_QUERY).to_arrow_table()
    t1 = time.perf_counter()
    x = list_to_numpy(table.column("input"), shape)
    t2 = time.perf_counter()
    parts.setdefault("arrow_s", []).append(t1 - t0)
    parts.setdefault("numpy_s", []).append(t2 - t1)
    return None, x


def modelsql_predict(cur, options: str):
    cur.execute(QUERY.format(options=options))
    table = cur.fetch_arrow()
    return table, None


def modelsql_arrays(table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """(ids, outputs) of a PREDICT's Arrow result (outside the timing: the user has the table already)."""
    ids = table.column("id").to_numpy()
    out = list_to_numpy(table.column("output"), ())
    return ids, out.reshape(len(ids), -1)


# ---------------------------------------------------------------- timing


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def spread(times: list[float]) -> dict:
    return {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times),
            "runs_s": [round(t, 5) for t in times]}


def search(name: str, configs: list[tuple[dict, object]], repeat: int) -> tuple[list[dict], dict | None]:
    """Each configuration: one warm-up and ``repeat`` timed runs; the table of medians and the fastest."""
    rows, best = [], None
    for config, fn in configs:
        row = dict(config)
        try:
            fn()
            row.update(spread([timed(fn) for _ in range(repeat)]))
            del row["runs_s"]
            if best is None or row["median_s"] < best["median_s"]:
                best = row
        except Exception as exc:  # noqa: BLE001 - recorded, the search goes on
            row["error"] = error_text(exc)
        log(f"  {name} {config}: "
            + (f"{row['median_s']:.4f} s" if "median_s" in row else "FAILED " + row["error"][:200]))
        rows.append(row)
    return rows, best


def compare(got: tuple, want: tuple) -> dict:
    """Argmax agreement and max relative difference of ``got`` against ``want`` (each ``(ids, outputs)``)."""
    gi, g = got
    wi, w = want
    g = g[np.argsort(gi)] if gi is not None else g
    w = w[np.argsort(wi)] if wi is not None else w
    if g.shape != w.shape:
        return {"shape": list(g.shape), "expected_shape": list(w.shape), "agree": False}
    rel = float(np.max(np.abs(g.astype(np.float64) - w)) / (np.max(np.abs(w)) + 1e-12))
    argmax = float(np.mean(g.argmax(1) == w.argmax(1)))
    return {"argmax_agreement": argmax, "max_rel_diff": rel, "agree": bool(argmax == 1.0 and rel < 1e-2)}


def save(result: dict, out: str, t_start: float) -> None:
    """The headline figures from the medians so far, then the JSON (headline first). Called after every
    round, so a run cut short still leaves what it measured."""
    med = {n: d.get("median_s") for n, d in result.get("variants", {}).items()}
    result.update(modelsql_s=med.get("modelsql"), glue_s=med.get("glue"), ready_array_s=med.get("ready_array"))
    if med.get("modelsql") and med.get("glue"):
        result["vs_glue"] = med["modelsql"] / med["glue"]
        result["vs_glue_met"] = result["vs_glue"] <= 1.2
    if med.get("modelsql") and med.get("ready_array"):
        result["vs_ready_array"] = med["modelsql"] / med["ready_array"]
        result["vs_ready_array_met"] = result["vs_ready_array"] <= 2.0
    result["total_s"] = time.perf_counter() - t_start
    head = ["claim", "goals", "vs_glue", "vs_glue_met", "vs_ready_array", "vs_ready_array_met", "modelsql_s",
            "glue_s", "ready_array_s"]
    ordered = {k: result[k] for k in head if k in result}
    ordered.update({k: v for k, v in result.items() if k not in ordered})
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(ordered, indent=2, default=str) + "\n")


# ---------------------------------------------------------------- main


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--smoke", action="store_true", help="tiny sizes (8 rows of 3x64x64, a narrow ResNet-50)")
    ap.add_argument("--rows", type=int, default=None, help="image rows (256; smoke 8)")
    ap.add_argument("--repeat", type=int, default=None, help="interleaved timed rounds (5; smoke 2)")
    ap.add_argument("--search-repeat", type=int, default=None,
                    help="timed runs per searched configuration (2; smoke 1)")
    ap.add_argument("--layout", default="nested", choices=("nested", "list"),
                    help="the image column: nested arrays FLOAT[224][224][3] (default) or FLOAT[] lists")
    ap.add_argument("--batches", default=None, help="batch sizes searched, comma list (16,32,64,128,256; smoke 4,8)")
    ap.add_argument("--budget-s", type=float, default=75.0,
                    help="no new timed round starts past this many seconds from the start (after 2 rounds)")
    ap.add_argument("--out", default=None, help="the JSON written (benchmarks/results/gpu_predict.json; with "
                    "--smoke, gpu_predict_smoke.json in the temporary folder, so a smoke run leaves the results alone)")
    args = ap.parse_args(argv)
    t_start = time.perf_counter()
    if args.out is None:
        args.out = (os.path.join(tempfile.gettempdir(), "gpu_predict_smoke.json") if args.smoke
                    else str(Path(__file__).parent / "results" / "gpu_predict.json"))

    smoke = args.smoke
    rows = args.rows or (8 if smoke else 256)
    size, width, classes = (64, 8, 10) if smoke else (224, 64, 1000)
    repeat = args.repeat or (2 if smoke else 5)
    search_repeat = args.search_repeat or (1 if smoke else 2)
    batches = [int(b) for b in (args.batches or ("4,8" if smoke else "16,32,64,128,256")).split(",")]
    shape = (3, size, size)

    from modelsql.operators.backends import devices

    if args.device == "cuda" and not devices.cuda_available():
        print(f"gpu_predict: no CUDA device here (modelsql sees {list(devices.available())}); "
              "run with --device cpu --smoke to check the script on the CPU.", file=sys.stderr, flush=True)
        return 2
    sql_device = "cuda" if args.device == "cuda" else "cpu"
    result: dict = {
        "claim": "PREDICT over a table on the GPU: ResNet-50 over image rows of a DuckDB table, against the best "
                 "hand-written glue (DuckDB -> Arrow -> NumPy -> ONNX Runtime CUDA, IOBinding) and ONNX Runtime "
                 "CUDA on a ready NumPy array",
        "goals": {"vs_glue": "<= 1.2", "vs_ready_array": "<= 2.0"},
        "vs_glue": None, "vs_ready_array": None, "modelsql_s": None, "glue_s": None, "ready_array_s": None,
        "device": args.device, "smoke": smoke,
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": host_info(), "versions": versions(),
        "workload": {"rows": rows, "image": list(shape),
                     "layout": column_type(args.layout, shape) + (
                         " (nested arrays, sizes innermost first: one 3 x H x W image per row)"
                         if args.layout == "nested" else " (one flat row-major list per image)"),
                     "model": f"resnet50(width={width}, num_classes={classes}), random weights, ONNX (legacy "
                              "exporter, dynamic batch)",
                     "query": QUERY.format(options=f", device = '{sql_device}'"),
                     "fetch": "cursor.fetch_arrow() (the whole result as one pyarrow.Table)"},
        "repeat": repeat, "search_repeat": search_repeat, "batches": batches,
    }
    log(f"device {args.device}, {rows} rows of {shape}, host {result['host']['gpu'] or 'no GPU'}")
    if args.device == "cpu":
        result["notes"] = ["CPU run (--device cpu): ONNX Runtime's CPU provider everywhere; the figures check the "
                           "script, they are not the GPU claim."]

    t0 = time.perf_counter()
    blob = build_model(size, width, classes)
    images = make_images(rows, size)
    tmp = tempfile.mkdtemp(prefix="modelsql-gpu-predict-")
    path = os.path.join(tmp, "gpu_predict.duckdb")
    build_db(path, blob, images, args.layout)
    result["setup_s"] = time.perf_counter() - t0
    log(f"setup (export, images, table) {result['setup_s']:.1f} s; model {len(blob) / 1e6:.1f} MB")

    con = modelsql.connect(path)
    con.autocommit = True
    cur = con.cursor()
    duck = duckdb.connect(path)
    model = Ort(blob, args.device)
    result["ort_providers_used"] = model.providers
    try:
        cur.execute("EXPLAIN " + QUERY.format(options=f", device = '{sql_device}'"))
        result["explain"] = "\n".join(str(r[1]) for r in cur.fetchall() if r[0] == "modelsql_plan")[:3000]
    except Exception as exc:  # noqa: BLE001
        result["explain_error"] = error_text(exc)

    # 1. the baselines' best configurations
    log("searching the glue's configuration")
    glue_rows, glue_best = search("glue", [({"fetch": f, "batch": b}, (lambda f=f, b=b: glue(duck, model, shape, b, f)))
                                           for f in ("stream", "whole") for b in batches], search_repeat)
    log("searching the ready array's configuration")
    ready_rows, ready_best = search("ready", [({"call": c, "batch": b}, (lambda c=c, b=b: ready(images, model, b, c)))
                                              for c in ("iobinding", "run") for b in batches], search_repeat)
    result["glue_search"], result["ready_search"] = glue_rows, ready_rows
    result["glue_config"] = glue_best and {k: glue_best[k] for k in ("fetch", "batch")}
    result["ready_array_config"] = ready_best and {k: ready_best[k] for k in ("call", "batch")}
    save(result, args.out, t_start)

    # 2. the interleaved rounds
    read_parts: dict = {}
    dev_opt = f", device = '{sql_device}'"
    variants = {
        "modelsql": lambda: modelsql_predict(cur, dev_opt),
        "modelsql_batch": lambda: modelsql_predict(cur, dev_opt + ", execution = 'batch'"),
        "modelsql_stream": lambda: modelsql_predict(cur, dev_opt + ", execution = 'stream'"),
        "duckdb_read": lambda: duckdb_read(duck, shape, read_parts),
    }
    if glue_best:
        g = result["glue_config"]
        variants["glue"] = lambda: glue(duck, model, shape, g["batch"], g["fetch"])
    if ready_best:
        r = result["ready_array_config"]
        variants["ready_array"] = lambda: ready(images, model, r["batch"], r["call"])

    details: dict = {name: {} for name in variants}
    result["variants"] = details
    outputs: dict = {}
    for name, fn in list(variants.items()):
        try:
            t = time.perf_counter()
            outputs[name] = fn()
            details[name]["first_run_s"] = time.perf_counter() - t
            log(f"warm-up {name}: {details[name]['first_run_s']:.3f} s")
        except Exception as exc:  # noqa: BLE001 - recorded, the others go on
            details[name]["error"] = error_text(exc)
            log(f"warm-up {name} FAILED: {details[name]['error'][:300]}")
            del variants[name]

    # 3. outputs agree? (the warm-up runs' outputs, against the glue's)
    checks: dict = {}
    result["check"] = checks
    want = outputs.get("glue")
    if want is not None:
        for name in ("modelsql", "modelsql_batch", "modelsql_stream"):
            if name in outputs:
                try:
                    checks[f"{name}_vs_glue"] = compare(modelsql_arrays(outputs[name][0]), want)
                except Exception as exc:  # noqa: BLE001
                    checks[f"{name}_vs_glue"] = {"error": error_text(exc)}
        if "ready_array" in outputs:
            checks["ready_array_vs_glue"] = compare(outputs["ready_array"], want)
    for k, v in checks.items():
        log(f"check {k}: {v}")
    outputs = {"glue": want}
    save(result, args.out, t_start)

    read_parts.clear()
    times: dict = {name: [] for name in variants}
    order = list(variants)
    rng = random.Random(0)
    for rnd in range(repeat):
        if rnd >= 2 and time.perf_counter() - t_start > args.budget_s:
            result.setdefault("notes", []).append(f"rounds cut short at {rnd} of {repeat}: --budget-s "
                                                  f"{args.budget_s:.0f} s reached")
            log(result["notes"][-1])
            break
        rng.shuffle(order)
        for name in order:
            if name not in variants:
                continue
            try:
                times[name].append(timed(variants[name]))
            except Exception as exc:  # noqa: BLE001
                details[name]["error"] = error_text(exc)
                log(f"round {rnd + 1} {name} FAILED: {details[name]['error'][:300]}")
                del variants[name]
        log(f"round {rnd + 1}/{repeat}: " + ", ".join(f"{n} {times[n][-1]:.3f}s" for n in order if times.get(n)
                                                          and n in variants))
        for name, ts in times.items():
            if ts:
                details[name].update(spread(ts))
        if read_parts:
            details["duckdb_read"]["arrow_median_s"] = statistics.median(read_parts["arrow_s"])
            details["duckdb_read"]["numpy_median_s"] = statistics.median(read_parts["numpy_s"])
        save(result, args.out, t_start)

    # 4. last, as it takes a while: the glue's outputs against ONNX Runtime's CPU provider
    if want is not None and time.perf_counter() - t_start < args.budget_s:
        try:
            cpu = ort.InferenceSession(blob, providers=["CPUExecutionProvider"])
            ref = np.concatenate([cpu.run(["output"], {"input": images[i:i + 64]})[0] for i in range(0, rows, 64)])
            checks["glue_vs_onnxruntime_cpu"] = compare(want, (np.arange(rows), ref))
        except Exception as exc:  # noqa: BLE001
            checks["glue_vs_onnxruntime_cpu"] = {"error": error_text(exc)}
        log(f"check glue_vs_onnxruntime_cpu: {checks['glue_vs_onnxruntime_cpu']}")
    save(result, args.out, t_start)
    for name, d in details.items():
        if "median_s" in d:
            log(f"{name:16s} median {d['median_s']:.4f} s  (min {d['min_s']:.4f}, max {d['max_s']:.4f})")
        else:
            log(f"{name:16s} {d.get('error', 'no runs')[:200]}")
    vg, vr = result["vs_glue"], result["vs_ready_array"]
    log(f"vs_glue {vg if vg is None else round(vg, 3)} (goal <= 1.2)  vs_ready_array "
        f"{vr if vr is None else round(vr, 3)} (goal <= 2.0); total {result['total_s']:.1f} s")
    log(f"wrote {args.out}")
    con.close()
    duck.close()
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
