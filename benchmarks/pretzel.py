"""PRETZEL's comparison, side by side in one run: many pipelines served white-box (modelsql's SERVE)
against the black-box way (one ONNX Runtime session per whole pipeline), by the same HTTP stack.

Workload, after PRETZEL's case study (Lee et al., OSDI 2018, section 2):

* ``--pipelines`` sentiment pipelines (default 250): one FeatureUnion(word (1,2) TF-IDF, char_wb
  (2,4) TF-IDF) fitted once and shared, each with its own LogisticRegression head (5 classes, a
  different label permutation and 15% label noise per head). Text: ``modelsql.datasets.reviews``
  sentences, each followed by a few pseudo-words drawn from a Zipf law over a 20,000-word
  lexicon (deterministic), so the vocabulary is the size of a real review corpus (~70k features);
  the point is the system figures, not accuracy.
* ``--regression`` regression pipelines (default 20) on scikit-learn's diabetes data: one
  StandardScaler + PCA front, heads Ridge / Lasso with different penalties, or a small forest.

Both servers are ``modelsql.serving.InferenceServer`` (Starlette + uvicorn, the Open Inference
Protocol) in a process of their own, with the same batching settings and two worker threads:

* **modelsql**: ``SERVE PIPELINE ...`` over the catalog (each distinct step one session, weights
  memory-mapped and shared, requests of pipelines sharing steps batched together);
* **black box**: each pipeline exported whole (``EXPORT PIPELINE``) and loaded as one ONNX Runtime
  session from its file, at its best: one intra-op thread, no spinning, sequential execution, the
  shared environment allocator; requests batched per pipeline (the only batching it can do).

Measured for each (``--repeats`` runs, alternating, medians and their min/max):

* resident memory with everything loaded: the server process's ``RssAnon`` after ``gc.collect()``
  and ``malloc_trim(0)`` (anonymous memory; the white box's memory-mapped weights are file pages
  every worker process would share, reported beside it as ``rss_file``);
* load time: from starting to serve the whole set to ready;
* cold first prediction: the repository-extension load of a pipeline not yet served plus its first
  request, from the client (``--cold`` held-out pipelines);
* latency of single-row requests under load: ``--clients`` concurrent keep-alive connections from a
  separate client process, each request for a random pipeline (seeded): p50 and p99, in ms;
* throughput: requests completed per second in that run;
* modelsql again with ``share_structures = true`` (the heads of one shape on one session), reported
  beside the headline under ``share_structures``;
* and, as a ceiling for both, variant ``floor``: the same HTTP stack, batching, client and
  requests answered with zeros by no model at all.

Writes ``benchmarks/results/pretzel.json`` with the headline ratios as top-level numbers:
``memory_ratio`` and ``p99_ratio`` (black box over modelsql: higher is better for modelsql) and
``throughput_ratio`` (modelsql over black box: higher is better for modelsql), beside the raw figures.
PRETZEL reports 25x less memory, 5.5x lower p99 and 4.7x more throughput.

Run: ``python benchmarks/pretzel.py`` (about 10-15 minutes on 2 cores; ``--pipelines 20 --repeats 1``
for a quick look). Requires the dev extras (scikit-learn, skl2onnx).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import proc_memory  # noqa: E402  (benchmarks/proc_memory.py)
from http_load import closed_loop, infer_request, read_response  # noqa: E402  (benchmarks/http_load.py)

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "pretzel.json"


# ---------------------------------------------------------------- workload


def corpus(n: int, seed: int) -> tuple[list[str], list[int]]:
    """``reviews(n)`` sentences each followed by 3-8 Zipf-distributed pseudo-words (deterministic)."""
    from modelsql.datasets import reviews

    texts, labels = reviews(n, seed=seed)
    rng = np.random.default_rng(seed + 1000)
    ranks = np.arange(1, 20_001)
    p = 1.0 / ranks
    p /= p.sum()
    syll = ["ka", "lo", "mi", "ne", "ru", "ta", "vi", "so", "pe", "du", "ga", "fi"]
    lexicon = ["".join(syll[(i // 12 ** k) % 12] for k in range(4)) + str(i % 7) for i in range(20_000)]
    out = []
    for t in texts:
        extra = rng.choice(20_000, size=int(rng.integers(3, 9)), p=p)
        out.append(t + " " + " ".join(lexicon[j] for j in extra))
    return out, labels


def fit_pipelines(n_text: int, n_reg: int, seed: int = 0):
    """The fitted sentiment and regression pipelines (names ``s<k>`` and ``r<k>``)."""
    from sklearn.datasets import load_diabetes
    from sklearn.decomposition import PCA
    from sklearn.ensemble import RandomForestRegressor
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import Lasso, LogisticRegression, Ridge
    from sklearn.pipeline import FeatureUnion, Pipeline
    from sklearn.preprocessing import StandardScaler

    texts, labels = corpus(3000, seed)
    features = FeatureUnion([("word", TfidfVectorizer(ngram_range=(1, 2))),
                             ("char", TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 4)))]).fit(texts)
    x = features.transform(texts)
    rng = np.random.default_rng(seed)
    y0 = np.asarray(labels)
    text_pipes = {}
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # lbfgs stops at max_iter=50 on purpose (speed, not accuracy)
        for k in range(n_text):
            y = rng.permutation(5)[y0]
            noisy = rng.random(len(y)) < 0.15
            y[noisy] = rng.integers(0, 5, int(noisy.sum()))
            head = LogisticRegression(max_iter=50).fit(x, y)
            text_pipes[f"s{k}"] = Pipeline([("features", features), ("head", head)])
    dx, dy = load_diabetes(return_X_y=True)
    front = Pipeline([("scale", StandardScaler()), ("pca", PCA(8, random_state=0))]).fit(dx)
    z = front.transform(dx)
    reg_pipes = {}
    for k in range(n_reg):
        head = (Ridge(alpha=0.1 * (k + 1)) if k % 3 == 0 else Lasso(alpha=0.05 * (k + 1)) if k % 3 == 1
                else RandomForestRegressor(8, max_depth=4, random_state=k))
        reg_pipes[f"r{k}"] = Pipeline([("front", front), ("head", head.fit(z, dy))])
    return texts, text_pipes, dx, reg_pipes


def prepare(work: Path, n_text: int, n_reg: int, cold: int) -> dict:
    """Fit, import into a catalog, export each pipeline whole; returns what the servers and client need."""
    import modelsql

    t0 = time.perf_counter()
    texts, text_pipes, dx, reg_pipes = fit_pipelines(n_text + cold, n_reg)
    fit_s = time.perf_counter() - t0
    con = modelsql.connect(str(work / "pretzel.duckdb"))
    t0 = time.perf_counter()
    for name, p in text_pipes.items():
        con.import_pipeline(name, p, example_input=texts[:64], input_name="text")
    for name, p in reg_pipes.items():
        con.import_pipeline(name, p, example_input=dx[:64])
    import_s = time.perf_counter() - t0
    (work / "blackbox").mkdir(exist_ok=True)
    cur = con.cursor()
    for name in [*text_pipes, *reg_pipes]:
        cur.execute("EXPORT PIPELINE " + name + " TO ?", [str(work / "blackbox" / f"{name}.onnx")])
    con.close()
    names = list(text_pipes)
    served = names[:n_text] + list(reg_pipes)
    return {"served": served, "held_out": names[n_text:], "text": list(text_pipes), "regression": list(reg_pipes),
            "texts": texts[:500], "rows": dx[:200].astype(np.float32).tolist(), "fit_s": fit_s,
            "import_s": import_s}


# ---------------------------------------------------------------- servers (each in its own process)


def rss() -> dict:
    proc_memory.settle()
    got = proc_memory.status("RssAnon", "RssFile")
    return {"rss_anon": got["RssAnon"], "rss_file": got["RssFile"]}


class _FixedRepository:
    """What the black box and the floor answer alike: their servables by name, one two-thread pool."""

    _servables: dict
    _pool: object

    def get(self, name, version=None):
        if name not in self._servables:
            raise LookupError(f'no model "{name}"')
        return self._servables[name]

    def names(self):
        return sorted(self._servables)

    def ready(self, name, version=None):
        return name in self._servables

    def index(self):
        return [{"name": n, "version": "1", "state": "READY", "reason": ""} for n in self.names()]

    def executor(self, group):
        return self._pool


class BlackBoxRepository(_FixedRepository):
    """One ONNX Runtime session per whole pipeline, loaded from its exported file (the black box)."""

    def __init__(self, folder: Path, names: list[str]):
        import concurrent.futures

        import onnxruntime as ort

        from modelsql.serving.simple import ORT_DATATYPES, OrtServable, text_feed
        from modelsql.serving.repository import TensorMetadata

        self._ort, self._folder, self._feed = ort, folder, text_feed
        self._meta, self._servable, self._types = TensorMetadata, OrtServable, ORT_DATATYPES
        self._sessions, self._servables = {}, {}
        self._pool = concurrent.futures.ThreadPoolExecutor(2)
        ort.create_and_register_allocator(ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0,
                                                            ort.OrtMemType.DEFAULT), ort.OrtArenaCfg(0, -1, -1, -1))
        for n in names:
            self.load(n)

    def _options(self):
        so = self._ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        so.execution_mode = self._ort.ExecutionMode.ORT_SEQUENTIAL
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        so.add_session_config_entry("session.use_env_allocators", "1")
        return so

    def load(self, name: str) -> None:
        path = self._folder / f"{name}.onnx"
        if not path.exists():
            raise LookupError(f"no pipeline file {path}")
        s = self._ort.InferenceSession(str(path), self._options(), providers=["CPUExecutionProvider"])

        def meta(a):
            return self._meta(a.name, self._types[a.type], tuple(d if isinstance(d, int) else -1 for d in a.shape))

        self._sessions[name] = s
        self._servables[name] = self._servable(name, tuple(map(meta, s.get_inputs())),
                                               tuple(map(meta, s.get_outputs())), group=name)

    def unload(self, name: str) -> None:
        self._sessions.pop(name, None)
        self._servables.pop(name, None)

    def run_group(self, group, items):
        s = self._sessions[group]
        feeds = [{k: self._feed(k, v) for k, v in inputs.items()} for _, inputs in items]
        batch = {k: np.concatenate([f[k] for f in feeds]) for k in feeds[0]}
        outs = s.run(None, batch)
        names = [o.name for o in s.get_outputs()]
        bounds = np.cumsum([len(next(iter(f.values()))) for f in feeds])[:-1]
        parts = [np.split(o, bounds) for o in outs]
        return [{n: p[k] for n, p in zip(names, parts)} for k in range(len(feeds))]


class FloorRepository(_FixedRepository):
    """The same names and metadata, answered with zeros and no model at all: what the HTTP stack, the
    batching and this client cost by themselves (a ceiling on any server's throughput here)."""

    def __init__(self, db: Path, names: list[str]):
        import concurrent.futures

        import modelsql
        from modelsql.engine.serve.repository import ONNX_TO_OIP
        from modelsql.serving.repository import TensorMetadata
        from modelsql.serving.simple import OrtServable

        con = modelsql.connect(str(db), read_only=True)
        cur = con.cursor()
        self._servables = {}
        for n in names:
            cur.execute(f"DESCRIBE PIPELINE {n}")
            rows = cur.fetchall()

            def meta(r):
                dims = [-1 if d.strip() in ("N", "?") or not d.strip().lstrip("-").isdigit() else int(d)
                        for d in r[4].strip("[]").split(",")]
                return TensorMetadata(r[2], ONNX_TO_OIP[r[3]], tuple([-1] + dims[1:]))

            self._servables[n] = OrtServable(n, tuple(meta(r) for r in rows if r[0] == "input"),
                                             tuple(meta(r) for r in rows if r[0] == "output"), group=n)
        con.close()
        self._pool = concurrent.futures.ThreadPoolExecutor(2)
        self._dtypes = {"FP32": np.float32, "FP64": np.float64, "INT64": np.int64, "INT32": np.int32, "BOOL": np.bool_}

    def load(self, name):
        raise LookupError("the floor serves a fixed set")

    def unload(self, name):
        raise LookupError("the floor serves a fixed set")

    def run_group(self, group, items):
        out = []
        for servable, inputs in items:
            n = len(next(iter(inputs.values())))
            out.append({o.name: np.zeros([n] + [max(d, 1) for d in o.shape[1:]], dtype=self._dtypes[o.datatype])
                        for o in servable.outputs})
        return out


def serve(variant: str, work: Path, info_path: Path, batch: int, delay: float) -> None:
    """Load everything, write ``{port, load_s, rss_anon, rss_file}`` to ``info_path``, serve until killed."""
    spec = json.loads((work / "spec.json").read_text())
    t0 = time.perf_counter()
    if variant.startswith("modelsql"):
        import modelsql

        con = modelsql.connect(str(work / "pretzel.duckdb"))
        items = ", ".join(f"PIPELINE {n}" for n in spec["served"])
        structures = ", share_structures = true" if variant == "modelsql_structures" else ""
        cur = con.cursor()
        cur.execute(f"SERVE {items} ON PORT 0 WITH (max_batch_size = {batch}, max_queue_delay_ms = {delay}, "
                    f"threads = 2{structures})")
        port = int(cur.fetchall()[0][0].rsplit(":", 1)[1])
    else:
        from modelsql.serving import InferenceServer

        repo = (BlackBoxRepository(work / "blackbox", spec["served"]) if variant == "blackbox"
                else FloorRepository(work / "pretzel.duckdb", spec["served"]))
        server = InferenceServer(repo, port=0, max_batch_size=batch, max_queue_delay_ms=delay).start()
        port = server.port
    load_s = time.perf_counter() - t0
    info = {"port": port, "load_s": load_s, **rss()}
    info_path.write_text(json.dumps(info))
    while True:
        time.sleep(3600)


# ---------------------------------------------------------------- the client (its own process)


def _request(name: str, spec: dict, rng: random.Random) -> bytes:
    if name.startswith("s"):
        return infer_request(name, [{"name": "text", "shape": [1], "datatype": "BYTES",
                                     "data": [rng.choice(spec["texts"])]}])
    return infer_request(name, [{"name": "input", "shape": [1, 10], "datatype": "FP32", "data": rng.choice(spec["rows"])}])


async def _load(port: int, spec: dict, clients: int, requests: int, warmup: int, seed: int) -> dict:
    rng = random.Random(seed)
    names = spec["served"]
    queue = [_request(rng.choice(names), spec, rng) for _ in range(requests + warmup)]
    return await closed_loop(port, queue, clients, warmup)


async def _cold(port: int, spec: dict) -> list[float]:
    """Per held-out pipeline: repository load + first request, in ms."""
    out = []
    rng = random.Random(7)
    for name in spec["held_out"]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        t = time.perf_counter()
        writer.write(f"POST /v2/repository/models/{name}/load HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n".encode())
        assert await read_response(reader) == 200, name
        writer.write(_request(name, spec, rng))
        assert await read_response(reader) == 200, name
        out.append((time.perf_counter() - t) * 1000)
        writer.close()
    return out


def client(port: int, work: Path, clients: int, requests: int, out: Path, cold: bool) -> None:
    spec = json.loads((work / "spec.json").read_text())
    load = asyncio.run(_load(port, spec, clients, requests, warmup=max(200, requests // 10), seed=1))
    load["cold_ms"] = asyncio.run(_cold(port, spec)) if cold else [float("nan")]
    out.write_text(json.dumps(load))


# ---------------------------------------------------------------- orchestration


def run_variant(variant: str, work: Path, args) -> dict:
    info = work / f"{variant}.info.json"
    info.unlink(missing_ok=True)
    server = subprocess.Popen([sys.executable, __file__, "_serve", variant, str(work), str(info),
                               str(args.max_batch_size), str(args.max_queue_delay_ms)])
    try:
        deadline = time.time() + 1800
        while not info.exists():
            if server.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"the {variant} server did not start")
            time.sleep(0.2)
        time.sleep(0.2)
        meta = json.loads(info.read_text())
        out = work / f"{variant}.client.json"
        subprocess.run([sys.executable, __file__, "_client", str(meta["port"]), str(work), str(args.clients),
                        str(args.requests), str(out), "1" if variant != "floor" else "0"], check=True, timeout=1800)
        return {**meta, **json.loads(out.read_text())}
    finally:
        server.kill()
        server.wait()


def summary(runs: list[dict], cold: bool = True) -> dict:
    keys = ("rss_anon", "rss_file", "load_s", "p50_ms", "p99_ms", "throughput_rps")
    out = {k: {"median": statistics.median(r[k] for r in runs), "min": min(r[k] for r in runs),
               "max": max(r[k] for r in runs)} for k in keys}
    if cold:
        firsts = [statistics.median(r["cold_ms"]) for r in runs]
        out["cold_first_prediction_ms"] = {"median": statistics.median(firsts), "min": min(firsts), "max": max(firsts)}
    out["errors"] = sum(r["errors"] for r in runs)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pipelines", type=int, default=250, help="sentiment pipelines served")
    ap.add_argument("--regression", type=int, default=20, help="regression pipelines served")
    ap.add_argument("--cold", type=int, default=5, help="held-out pipelines for the cold first prediction")
    ap.add_argument("--clients", type=int, default=8, help="concurrent connections of the load client")
    ap.add_argument("--requests", type=int, default=4000, help="single-row requests per run (after a warm-up)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-batch-size", type=int, default=32)
    ap.add_argument("--max-queue-delay-ms", type=float, default=0.5)
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--workdir", type=Path, default=None, help="reuse a prepared folder (default: a temporary one)")
    args = ap.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="pretzel-"))
    work.mkdir(parents=True, exist_ok=True)
    if not (work / "spec.json").exists():
        spec = prepare(work, args.pipelines, args.regression, args.cold)
        (work / "spec.json").write_text(json.dumps(spec))
    spec = json.loads((work / "spec.json").read_text())
    variants = ("modelsql", "blackbox", "floor", "modelsql_structures")
    runs = {v: [] for v in variants}
    for r in range(args.repeats):
        for variant in (variants if r % 2 == 0 else variants[::-1]):
            res = run_variant(variant, work, args)
            runs[variant].append(res)
            print(f"run {r} {variant}: rss_anon {res['rss_anon'] / 2**20:.0f} MiB, load {res['load_s']:.1f} s, "
                  f"cold {statistics.median(res['cold_ms']):.1f} ms, p50 {res['p50_ms']:.2f} ms, "
                  f"p99 {res['p99_ms']:.2f} ms, {res['throughput_rps']:.0f} req/s, errors {res['errors']}", flush=True)
    white, black, floor = summary(runs["modelsql"]), summary(runs["blackbox"]), summary(runs["floor"], cold=False)
    structures = summary(runs["modelsql_structures"])
    result = {
        "memory_ratio": black["rss_anon"]["median"] / white["rss_anon"]["median"],
        "p99_ratio": black["p99_ms"]["median"] / white["p99_ms"]["median"],
        "throughput_ratio": white["throughput_rps"]["median"] / black["throughput_rps"]["median"],
        "cold_first_prediction_ratio": black["cold_first_prediction_ms"]["median"]
        / white["cold_first_prediction_ms"]["median"],
        "load_time_ratio": black["load_s"]["median"] / white["load_s"]["median"],
        "ratios_mean": "memory, p99, cold, load: black box / modelsql; throughput: modelsql / black box",
        "throughput_ratio_ceiling": floor["throughput_rps"]["median"] / black["throughput_rps"]["median"],
        "p99_ratio_ceiling": black["p99_ms"]["median"] / floor["p99_ms"]["median"],
        "ceilings_mean": "the same HTTP stack, client and requests answered with zeros and no model (variant "
                         "'floor'): no server on this stack can beat the black box by more than this here",
        "pretzel_reported": {"memory_ratio": 25.0, "p99_ratio": 5.5, "throughput_ratio": 4.7},
        "share_structures": {
            "memory_ratio": black["rss_anon"]["median"] / structures["rss_anon"]["median"],
            "p99_ratio": black["p99_ms"]["median"] / structures["p99_ms"]["median"],
            "throughput_ratio": structures["throughput_rps"]["median"] / black["throughput_rps"]["median"],
            "means": "SERVE ... WITH (share_structures = true): the 250 heads of one shape on one session",
        },
        "modelsql": white, "blackbox": black, "floor": floor, "modelsql_structures": structures,
        "workload": {"sentiment_pipelines": args.pipelines, "regression_pipelines": args.regression,
                     "clients": args.clients, "requests_per_run": args.requests, "repeats": args.repeats,
                     "max_batch_size": args.max_batch_size, "max_queue_delay_ms": args.max_queue_delay_ms,
                     "fit_s": spec["fit_s"], "import_s": spec["import_s"], "cpus": os.cpu_count()},
        "command": "python " + " ".join([str(Path(sys.argv[0]).as_posix())] + sys.argv[1:]),
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(json.dumps({k: result[k] for k in ("memory_ratio", "p99_ratio", "throughput_ratio",
                                             "cold_first_prediction_ratio", "load_time_ratio",
                                             "throughput_ratio_ceiling", "p99_ratio_ceiling")}, indent=2))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_serve":
        serve(sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6]))
    elif len(sys.argv) > 1 and sys.argv[1] == "_client":
        client(int(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), Path(sys.argv[6]),
               sys.argv[7] == "1")
    else:
        main()
