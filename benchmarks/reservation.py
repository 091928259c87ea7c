"""Reservation (PRETZEL, Lee et al., OSDI 2018, section 4.3): a pipeline served with
``reserved_threads = k`` keeps its tail latency while the other pipelines load the server.

Side by side in one run, on the workload of ``benchmarks/pretzel.py`` (its prepared folder, or a
new one with ``--pipelines``): the server serves every pipeline; a background client process sends
single-row requests to random *other* pipelines over ``--clients`` connections, as fast as they are
answered, while a foreground client sends sequential single-row requests to pipeline ``s0`` and
times each. Once with ``s0`` sharing the worker threads with everyone (``SERVE PIPELINE s0, ...``),
once with ``SERVE PIPELINE s0 (reserved_threads = 1), ...``; ``--repeats`` alternating runs,
medians and min/max.

Writes ``benchmarks/results/reservation.json`` with the headline ``p99_ratio`` (s0's p99 shared /
reserved: above 1 means the reservation held its tail latency) beside p50s, p99s and the
background throughput (which the reservation takes a thread from).

Run: ``python benchmarks/reservation.py --workdir /tmp/pz_full`` (reusing pretzel.py's folder).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pretzel  # noqa: E402  (the workload and its client)

RESULTS = Path(__file__).resolve().parent / "results" / "reservation.json"


def serve(work: Path, info: Path, reserved: bool) -> None:
    import modelsql

    spec = json.loads((work / "spec.json").read_text())
    con = modelsql.connect(str(work / "pretzel.duckdb"))
    first = "PIPELINE s0 (reserved_threads = 1)" if reserved else "PIPELINE s0"
    rest = ", ".join(f"PIPELINE {n}" for n in spec["served"] if n != "s0")
    cur = con.cursor()
    cur.execute(f"SERVE {first}, {rest} ON PORT 0 WITH (max_batch_size = 32, max_queue_delay_ms = 0.5, threads = 2)")
    info.write_text(json.dumps({"port": int(cur.fetchall()[0][0].rsplit(":", 1)[1])}))
    while True:
        time.sleep(3600)


async def _probe(port: int, spec: dict, n: int) -> list[float]:
    rng = random.Random(5)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    out = []
    for i in range(n + 50):
        t = time.perf_counter()
        writer.write(pretzel._request("s0", spec, rng))
        assert await pretzel._read_response(reader) == 200
        if i >= 50:
            out.append((time.perf_counter() - t) * 1000)
        await asyncio.sleep(0.002)
    writer.close()
    return out


def run(work: Path, reserved: bool, args) -> dict:
    info = work / "reservation.info.json"
    info.unlink(missing_ok=True)
    server = subprocess.Popen([sys.executable, __file__, "_serve", str(work), str(info), "1" if reserved else "0"])
    background = None
    try:
        while not info.exists():
            if server.poll() is not None:
                raise RuntimeError("the server did not start")
            time.sleep(0.2)
        time.sleep(0.3)
        port = json.loads(info.read_text())["port"]
        spec = json.loads((work / "spec.json").read_text())
        others = dict(spec, served=[n for n in spec["served"] if n != "s0"])
        (work / "others.json").write_text(json.dumps(others))
        out = work / "background.json"
        background = subprocess.Popen([sys.executable, __file__, "_background", str(port), str(work), str(args.clients),
                                       str(out)])
        time.sleep(1.0)
        lat = np.array(asyncio.run(_probe(port, spec, args.requests)))
        background.wait(timeout=600)
        bg = json.loads(out.read_text())
        return {"p50_ms": float(np.percentile(lat, 50)), "p99_ms": float(np.percentile(lat, 99)),
                "background_rps": bg["throughput_rps"]}
    finally:
        if background is not None and background.poll() is None:
            background.kill()
        server.kill()
        server.wait()


def background(port: int, work: Path, clients: int, out: Path) -> None:
    spec = json.loads((work / "others.json").read_text())
    res = asyncio.run(pretzel._load(port, spec, clients, 6000, warmup=200, seed=2))
    out.write_text(json.dumps(res))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", type=Path, default=None, help="pretzel.py's prepared folder (default: prepare one)")
    ap.add_argument("--pipelines", type=int, default=250)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--requests", type=int, default=1000, help="probe requests to s0 per run")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="reservation-"))
    if not (work / "spec.json").exists():
        (work / "spec.json").write_text(json.dumps(pretzel.prepare(work, args.pipelines, 0, 1)))
    runs = {"shared": [], "reserved": []}
    for r in range(args.repeats):
        for mode in (("shared", "reserved") if r % 2 == 0 else ("reserved", "shared")):
            res = run(work, mode == "reserved", args)
            runs[mode].append(res)
            print(f"run {r} {mode}: s0 p50 {res['p50_ms']:.2f} ms, p99 {res['p99_ms']:.2f} ms, "
                  f"background {res['background_rps']:.0f} req/s", flush=True)

    def med(mode, key):
        vals = [x[key] for x in runs[mode]]
        return {"median": statistics.median(vals), "min": min(vals), "max": max(vals)}

    summary = {m: {k: med(m, k) for k in ("p50_ms", "p99_ms", "background_rps")} for m in runs}
    result = {"p99_ratio": summary["shared"]["p99_ms"]["median"] / summary["reserved"]["p99_ms"]["median"],
              "p50_ratio": summary["shared"]["p50_ms"]["median"] / summary["reserved"]["p50_ms"]["median"],
              "ratios_mean": "s0's latency shared / reserved (above 1: the reservation helps s0)",
              **summary, "runs": runs,
              "command": "python " + " ".join([Path(sys.argv[0]).as_posix()] + sys.argv[1:])}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(json.dumps({k: result[k] for k in ("p99_ratio", "p50_ratio")}, indent=2))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_serve":
        serve(Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4] == "1")
    elif len(sys.argv) > 1 and sys.argv[1] == "_background":
        background(int(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4]), Path(sys.argv[5]))
    else:
        main()
