"""Benchmark: batch-1 latency on the GPU (Nimble's ahead-of-time scheduling), operator and served.

Claim (issue 24): for one row of each of three models built in code by ``modelsql.datasets.architectures``
(random weights, exported with ``export_onnx``, dynamic batch),

* ``resnet50``: ResNet-50, 3x224x224, width 64, 1,000 classes;
* ``small_resnet``: ResNet-18, width 16, 3x32x32, 10 classes;
* ``bert``: a BERT-style encoder, vocabulary 30,522, d 256, 4 layers, 4 heads, feed-forward 1,024, 64 tokens,
  4 classes,

(i) modelsql's CUDA operator alone (:class:`modelsql.operators.backends.cuda.CudaModel`, ``capture=True``:
its ``run`` on a one-row NumPy feed replays the CUDA graph captured for the 1-row bucket) is within 1.15x of
ONNX Runtime's own CUDA-graph replay (``*_operator_vs_replay``; the replay: a session with
``enable_cuda_graph``, device buffers bound with IOBinding, per call ``update_inplace`` of the input,
``run_with_iobinding`` and the output copied to the host) and, for ResNet-50, at least 2.5x faster than ONNX
Runtime CUDA's plain ``run`` with NumPy in and out (``*_operator_vs_run`` = operator / run <= 0.4);

(ii) the same model served by ``SERVE MODEL ... WITH (device = 'cuda', max_queue_delay_ms = 0)`` (the server
in its own process; requests padded to the next bucket and replayed from captured CUDA graphs) and called over
HTTP one request at a time has a p50 within 1.2x of (the replay floor + the server's own floor)
(``*_served_vs_floor``). The server's floor is a model that returns zeros, with the same input (name, type,
shape) and an output of the same shape (``ReduceMean`` over the input, ``Mul`` by 0, ``Add`` of a zeros row:
a few tiny kernels), served and called the same way.

Baselines in the same run: ONNX Runtime CUDA ``run``, ONNX Runtime's CUDA-graph replay, torch eager on CUDA
(``torch.no_grad``; the input copied to the device and the output back, as every variant here takes and
returns NumPy arrays, so it synchronises). The client is the fastest of tritonclient's
``InferenceServerClient`` (binary tensors) and plain ``http.client`` speaking the same binary tensor
extension over one kept-alive connection (both are measured when tritonclient is importable; the JSON
records which won, and whether tritonclient was missing).

Method: per model, each variant warms up (``--warmup`` calls), then ``--calls`` timed calls in 4 rounds of
a quarter each, the variants in a shuffled order every round; p50 (median) and p90 per variant. Outputs of
the operator, the replay and the served model are checked against ONNX Runtime's plain run. A failing
variant records its error text in the JSON and the run goes on.

Writes ``benchmarks/results/gpu_latency.json``.

Run (GPU machine): ``python benchmarks/gpu_latency.py`` (about a minute on one H200).
Run (no GPU, end to end on tiny sizes): ``python benchmarks/gpu_latency.py --device cpu --smoke``
(the CUDA-graph replay is skipped there, the operator is modelsql's CPU session and the floor is ONNX
Runtime's plain run).
"""

from __future__ import annotations

import argparse
import datetime
import http.client
import json
import os
import random
import queue
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from gpu_common import error_text, host_info, logger  # noqa: E402  (benchmarks/gpu_common.py)

log = logger("gpu_latency")

ROUNDS = 4
PROTOCOL = "@@ "
"""Prefix of the lines the server process writes for this script on its stdout."""


# ---------------------------------------------------------------- models


def model_specs(smoke: bool) -> dict:
    """name -> (builder, input shape of one row, kind 'f' float32 image or 'i' int64 token ids)."""
    from modelsql.datasets import architectures as A

    if smoke:
        return {"resnet50": (lambda: A.resnet50(num_classes=10, width=8), (1, 3, 64, 64), "f"),
                "small_resnet": (lambda: A.resnet18(num_classes=10, width=8), (1, 3, 32, 32), "f"),
                "bert": (lambda: A.bert_encoder(vocab=1000, dim=32, layers=1, heads=2, ff=64, seq=8), (1, 8), "i")}
    return {"resnet50": (lambda: A.resnet50(num_classes=1000, width=64), (1, 3, 224, 224), "f"),
            "small_resnet": (lambda: A.resnet18(num_classes=10, width=16), (1, 3, 32, 32), "f"),
            "bert": (lambda: A.bert_encoder(vocab=30522, dim=256, layers=4, heads=4, ff=1024, seq=64), (1, 64), "i")}


def example(shape: tuple, kind: str, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if kind == "i":
        return rng.integers(0, 1000, size=shape, dtype=np.int64)
    return rng.standard_normal(shape, dtype=np.float32)


def zeros_model(row_shape: tuple, kind: str, classes: int) -> bytes:
    """A model with the input ``input`` ([N, *row_shape[1:]], float32 or int64) and the output ``output``
    ([N, classes] float32) of zeros: ReduceMean over the input (after a Cast for ids), Mul by 0, Add of a
    zeros row. Every node runs on the CUDA provider, so it is captured like the real models."""
    from onnx import TensorProto, helper, numpy_helper

    rank = len(row_shape)
    elem = TensorProto.INT64 if kind == "i" else TensorProto.FLOAT
    nodes, src = [], "input"
    if kind == "i":
        nodes.append(helper.make_node("Cast", ["input"], ["as_float"], to=TensorProto.FLOAT))
        src = "as_float"
    nodes += [helper.make_node("ReduceMean", [src], ["mean"], axes=list(range(1, rank)), keepdims=1),
              helper.make_node("Flatten", ["mean"], ["flat"], axis=1),
              helper.make_node("Mul", ["flat", "zero"], ["nought"]),
              helper.make_node("Add", ["nought", "zeros_row"], ["output"])]
    inits = [numpy_helper.from_array(np.zeros((), np.float32), "zero"),
             numpy_helper.from_array(np.zeros((1, classes), np.float32), "zeros_row")]
    graph = helper.make_graph(nodes, "zeros",
                              [helper.make_tensor_value_info("input", elem, ["N", *row_shape[1:]])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", classes])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="gpu_latency")
    model.ir_version = 8
    return model.SerializeToString()


# ---------------------------------------------------------------- the server, in its own process


def serve_child(db: str, device: str, names: list[str]) -> int:
    """Open ``db``, SERVE its models, report ``{port, statement, ...}`` on stdout; on stdin ``show``, report
    SHOW SERVERS; exit when stdin closes."""
    import modelsql

    con = modelsql.connect(db)
    cur = con.cursor()
    items = ", ".join(f"MODEL {n}" for n in names)
    info: dict = {"served": names}
    options = ["max_queue_delay_ms = 0"]
    statements = ([f"SERVE {items} ON PORT 0 WITH (device = '{device}', {', '.join(options)})"] if device != "cpu"
                  else [])
    statements.append(f"SERVE {items} ON PORT 0 WITH ({', '.join(options)})")
    for i, sql in enumerate(statements):
        try:
            t0 = time.perf_counter()
            rows = cur.execute(sql).fetchall()
            info.update(statement=sql, port=int(rows[0][0].rsplit(":", 1)[1]), load_s=time.perf_counter() - t0)
            break
        except Exception as exc:  # noqa: BLE001 - reported; the next statement is tried
            info.setdefault("statement_errors", []).append({"statement": sql, "error": error_text(exc)})
    print(PROTOCOL + json.dumps(info, default=str), flush=True)
    for line in sys.stdin:
        if line.strip() == "show":
            try:
                c = con.cursor().execute("SHOW SERVERS")
                cols = [d[0] for d in c.description]
                rows = [dict(zip(cols, r)) for r in c.fetchall()]
            except Exception as exc:  # noqa: BLE001
                rows = [{"error": error_text(exc)}]
            print(PROTOCOL + json.dumps(rows, default=str), flush=True)
    return 0


class ServerProcess:
    """The server's process: started at once; :meth:`wait` returns what it reported once it serves."""

    def __init__(self, db: str, device: str, names: list[str]) -> None:
        self.started = time.perf_counter()
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve-child", db,
                                      "--device", device, "--models", ",".join(names)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, bufsize=1)
        self.info: dict | None = None
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def wait(self, timeout: float = 180.0) -> dict:
        if self.info is None:
            self.info = self.read(timeout)
            self.info["start_s"] = time.perf_counter() - self.started
        return self.info

    def read(self, timeout: float):
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(f"the server process said nothing for {timeout:.0f} s") from None
            if line is None:
                raise RuntimeError(f"the server process ended (exit {self.proc.wait()})")
            if line.startswith(PROTOCOL):
                return json.loads(line[len(PROTOCOL):])
            print("  server: " + line.rstrip(), flush=True)

    def show(self):
        self.proc.stdin.write("show\n")
        self.proc.stdin.flush()
        return self.read(30)

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=15)
        except Exception:  # noqa: BLE001 - it did not leave in time
            self.proc.kill()
            self.proc.wait()


# ---------------------------------------------------------------- clients


DATATYPES = {np.dtype(np.float32): "FP32", np.dtype(np.int64): "INT64"}


class HttpBinaryClient:
    """Plain ``http.client`` over one kept-alive connection, with Triton's binary tensor extension."""

    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def infer(self, name: str, x: np.ndarray) -> np.ndarray:
        header = json.dumps({"inputs": [{"name": "input", "shape": list(x.shape), "datatype": DATATYPES[x.dtype],
                                         "parameters": {"binary_data_size": x.nbytes}}],
                             "outputs": [{"name": "output", "parameters": {"binary_data": True}}]}).encode()
        self.conn.request("POST", f"/v2/models/{name}/infer", body=header + x.tobytes(),
                          headers={"Inference-Header-Content-Length": str(len(header)),
                                   "Content-Type": "application/octet-stream"})
        resp = self.conn.getresponse()
        data = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {data[:500]!r}")
        length = resp.getheader("Inference-Header-Content-Length")
        if length is None:
            out = json.loads(data)["outputs"][0]
            return np.asarray(out["data"], dtype=np.float32).reshape(out["shape"])
        meta = json.loads(data[:int(length)])["outputs"][0]
        return np.frombuffer(data[int(length):], dtype=np.float32).reshape(meta["shape"])

    def close(self) -> None:
        self.conn.close()


class TritonClient:
    """tritonclient.http's ``InferenceServerClient``, binary tensors in and out (its defaults)."""

    def __init__(self, port: int) -> None:
        import tritonclient.http as th

        self.th = th
        self.client = th.InferenceServerClient(url=f"127.0.0.1:{port}", concurrency=1)

    def infer(self, name: str, x: np.ndarray) -> np.ndarray:
        th = self.th
        inp = th.InferInput("input", list(x.shape), DATATYPES[x.dtype])
        inp.set_data_from_numpy(x, binary_data=True)
        res = self.client.infer(name, [inp], outputs=[th.InferRequestedOutput("output", binary_data=True)])
        return res.as_numpy("output")

    def close(self) -> None:
        self.client.close()


# ---------------------------------------------------------------- baselines


def ort_providers(device: str, graph: bool = False) -> list:
    if device == "cpu":
        return ["CPUExecutionProvider"]
    opts = {"device_id": "0"}
    if graph:
        opts["enable_cuda_graph"] = "1"
        return [("CUDAExecutionProvider", opts)]
    return [("CUDAExecutionProvider", opts), "CPUExecutionProvider"]


def ort_run(blob: bytes, device: str):
    import onnxruntime as ort

    session = ort.InferenceSession(blob, providers=ort_providers(device))
    return lambda x: session.run(["output"], {"input": x})[0]


def ort_replay(blob: bytes, x: np.ndarray, out_shape: tuple):
    """ONNX Runtime's own CUDA-graph replay: fixed device buffers bound once; per call ``update_inplace``,
    ``run_with_iobinding``, the output copied to the host."""
    import onnxruntime as ort

    session = ort.InferenceSession(blob, providers=ort_providers("cuda", graph=True))
    xv = ort.OrtValue.ortvalue_from_numpy(x, "cuda", 0)
    ov = ort.OrtValue.ortvalue_from_shape_and_type(out_shape, np.float32, "cuda", 0)
    binding = session.io_binding()
    binding.bind_ortvalue_input("input", xv)
    binding.bind_ortvalue_output("output", ov)
    for _ in range(3):  # ONNX Runtime's regular runs, then the one that captures (as CudaModel does)
        session.run_with_iobinding(binding)

    def call(v):
        xv.update_inplace(v)
        session.run_with_iobinding(binding)
        return ov.numpy()

    return call


def torch_eager(module, device: str):
    import torch

    dev = torch.device("cuda:0" if device == "cuda" else "cpu")
    module = module.eval().to(dev)

    def call(v):
        with torch.no_grad():
            y = module(torch.from_numpy(v).to(dev))
            if dev.type == "cuda":
                torch.cuda.synchronize()
            return y.cpu().numpy()

    return call


def operator(blob: bytes, label: str, device: str):
    """modelsql's operator: CudaModel (captured) on CUDA; the CPU session (OrtModel) without one."""
    if device == "cuda":
        from modelsql.operators.backends.cuda import CudaModel

        model = CudaModel(blob, label, "cuda:0", capture=True)
    else:
        from modelsql.operators.backends.onnxruntime import OrtModel

        model = OrtModel(blob, label, device="cpu")
    return model, (lambda x: model.run({"input": x})[0])


# ---------------------------------------------------------------- timing


def measure(variants: dict, x: np.ndarray, calls: int, warmup: int, details: dict, seed: int) -> dict:
    """Warm each variant up, then time ``calls`` calls each in :data:`ROUNDS` interleaved rounds; a failing
    variant gets ``details[name]["error"]`` and leaves. Returns name -> list of seconds."""
    live = {}
    for name, fn in variants.items():
        try:
            for _ in range(warmup):
                fn(x)
            live[name] = fn
        except Exception as exc:  # noqa: BLE001 - recorded, the others go on
            details.setdefault(name, {})["error"] = error_text(exc)
            log(f"  {name} warm-up FAILED: {details[name]['error'][:300]}")
    times: dict = {name: [] for name in live}
    rng = random.Random(seed)
    per_round = [calls // ROUNDS + (1 if i < calls % ROUNDS else 0) for i in range(ROUNDS)]
    for n in per_round:
        order = list(live)
        rng.shuffle(order)
        for name in order:
            fn = live.get(name)
            if fn is None:
                continue
            try:
                for _ in range(n):
                    t0 = time.perf_counter()
                    fn(x)
                    times[name].append(time.perf_counter() - t0)
            except Exception as exc:  # noqa: BLE001
                details.setdefault(name, {})["error"] = error_text(exc)
                log(f"  {name} FAILED: {details[name]['error'][:300]}")
                del live[name]
    return {k: v for k, v in times.items() if v}


def summary(ts: list[float]) -> dict:
    s = sorted(ts)
    return {"p50_ms": statistics.median(s) * 1e3, "p90_ms": s[min(len(s) - 1, (9 * len(s)) // 10)] * 1e3,
            "min_ms": s[0] * 1e3, "max_ms": s[-1] * 1e3, "n": len(s)}


def agreement(got: np.ndarray, want: np.ndarray) -> dict:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape:
        return {"shape": list(got.shape), "expected_shape": list(want.shape), "agree": False}
    rel = float(np.max(np.abs(got - want)) / (np.max(np.abs(want)) + 1e-12))
    same = bool((got.argmax(-1) == want.argmax(-1)).all())
    return {"max_rel_diff": rel, "argmax_same": same, "agree": bool(same and rel < 1e-2)}


def versions() -> dict:
    import duckdb
    import onnxruntime as ort

    import modelsql

    out = {"modelsql": modelsql.__version__, "duckdb": duckdb.__version__, "onnxruntime": ort.__version__,
           "numpy": np.__version__}
    try:
        import torch

        out["torch"] = torch.__version__
    except ImportError:
        out["torch"] = None
    try:
        import tritonclient

        out["tritonclient"] = getattr(tritonclient, "__version__", "present")
    except ImportError as exc:
        out["tritonclient"] = f"missing ({exc})"
    return out


def save(result: dict, specs: dict, out: str) -> list:
    """Write the JSON (headline ratios first) with the table and the goals met so far; returns the table.
    Called after every model, so a run cut short still leaves what it measured."""
    models = result.get("models", {})
    table = []
    for name, entry in models.items():
        for vname, d in entry.get("variants", {}).items():
            table.append({"model": name, "variant": vname, "p50_ms": d.get("p50_ms"), "p90_ms": d.get("p90_ms"),
                          "error": d.get("error", "").split("\n")[0] or None})
    result["table"] = table
    met = {}
    for name in models:
        if f"{name}_operator_vs_replay" in result:
            met[f"{name}_operator_vs_replay"] = result[f"{name}_operator_vs_replay"] <= 1.15
        if f"{name}_served_vs_floor" in result:
            met[f"{name}_served_vs_floor"] = result[f"{name}_served_vs_floor"] <= 1.2
    if "resnet50_operator_vs_run" in result:
        met["resnet50_operator_vs_run"] = result["resnet50_operator_vs_run"] <= 0.4
    result["met"] = met
    head = ["claim", "goals"] + sorted(k for k in result if any(k.startswith(n + "_") for n in specs)) + ["met"]
    ordered = {k: result[k] for k in head if k in result}
    ordered.update({k: v for k, v in result.items() if k not in ordered})
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(ordered, indent=2, default=str) + "\n")
    return table


# ---------------------------------------------------------------- main


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--smoke", action="store_true", help="tiny models and few calls")
    ap.add_argument("--calls", type=int, default=None, help="timed calls per variant (200; smoke 20)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed calls per variant first (20; smoke 3)")
    ap.add_argument("--models", default="resnet50,small_resnet,bert")
    ap.add_argument("--budget-s", type=float, default=80.0,
                    help="no further model starts past this many seconds from the start")
    ap.add_argument("--out", default=None, help="the JSON written (benchmarks/results/gpu_latency.json; with "
                    "--smoke, gpu_latency_smoke.json in the temporary folder)")
    ap.add_argument("--serve-child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve_child:
        return serve_child(args.serve_child, args.device, args.models.split(","))
    t_start = time.perf_counter()
    if args.out is None:
        args.out = (os.path.join(tempfile.gettempdir(), "gpu_latency_smoke.json") if args.smoke
                    else str(Path(__file__).parent / "results" / "gpu_latency.json"))
    try:  # torch first: its CUDA libraries are the ones onnxruntime-gpu's preload_dlls finds
        import torch  # noqa: F401
    except ImportError:
        pass
    import modelsql
    from modelsql.operators.backends import devices

    if args.device == "cuda" and not devices.cuda_available():
        print(f"gpu_latency: no CUDA device here (modelsql sees {list(devices.available())}); "
              "run with --device cpu --smoke to check the script on the CPU.", file=sys.stderr, flush=True)
        return 2
    calls = args.calls or (20 if args.smoke else 200)
    warmup = args.warmup or (3 if args.smoke else 20)
    specs = {k: v for k, v in model_specs(args.smoke).items() if k in args.models.split(",")}
    cuda = args.device == "cuda"
    result: dict = {
        "claim": "Batch-1 latency on the GPU: modelsql's CUDA operator (captured CUDA graphs) against ONNX Runtime's "
                 "own CUDA-graph replay and its plain run; SERVE over HTTP against the replay floor plus the "
                 "server's own floor (a zeros model served the same way)",
        "goals": {"operator_vs_replay": "<= 1.15", "resnet50_operator_vs_run": "<= 0.4 (at least 2.5x faster)",
                  "served_vs_floor": "<= 1.2 (served p50 / (replay p50 + server floor p50))"},
        "device": args.device, "smoke": args.smoke, "calls": calls, "warmup": warmup, "rounds": ROUNDS,
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": host_info(), "versions": versions(), "notes": [],
    }
    if not cuda:
        result["notes"].append("CPU run (--device cpu): no CUDA-graph replay baseline (skipped); the operator is "
                               "modelsql's CPU session; served_vs_floor uses ONNX Runtime's plain run as the compute "
                               "floor. These figures check the script, they are not the GPU claim.")
    log(f"device {args.device}, models {list(specs)}, {calls} calls after {warmup} warm-up, "
        f"GPU {result['host']['gpu'] or 'none'}")

    # 1. the models, exported, and the catalog the server reads
    from modelsql.datasets.architectures import export_onnx

    built: dict = {}
    tmp = tempfile.mkdtemp(prefix="modelsql-gpu-latency-")
    db = os.path.join(tmp, "gpu_latency.duckdb")
    t0 = time.perf_counter()
    import torch

    with modelsql.connect(db) as con:
        for name, (builder, shape, kind) in specs.items():
            try:
                torch.manual_seed(0)
                module = builder().eval()
                blob = export_onnx(module, example((2,) + shape[1:], kind), dynamic_batch=True)
                x = example(shape, kind, seed=1)
                with torch.no_grad():
                    classes = int(module(torch.from_numpy(x)).shape[-1])
                zeros = zeros_model(shape, kind, classes)
                con.import_model(name, blob)
                con.import_model(f"{name}_zeros", zeros)
                built[name] = {"module": module, "blob": blob, "zeros": zeros, "x": x, "out_shape": (1, classes)}
            except Exception as exc:  # noqa: BLE001
                result.setdefault("models", {})[name] = {"error": error_text(exc)}
                log(f"{name}: build FAILED: {error_text(exc)[:300]}")
        con.commit()
    result["setup_s"] = time.perf_counter() - t0
    log(f"models exported and imported in {result['setup_s']:.1f} s")

    # 2. the server, in its own process, started now so it loads while the first model's baselines are built
    server = None
    clients: dict = {}
    try:
        server = ServerProcess(db, args.device, [n for m in built for n in (m, f"{m}_zeros")])
    except Exception as exc:  # noqa: BLE001
        result["server_error"] = error_text(exc)
        log(f"server FAILED to start: {result['server_error'][:300]}")

    def connect_clients() -> None:
        """Wait for the server, then make the clients (once)."""
        nonlocal server
        if server is None or server.info is not None:
            return
        try:
            info = server.wait()
            result["server"] = info
        except Exception as exc:  # noqa: BLE001
            result["server_error"] = error_text(exc)
            log(f"server FAILED: {result['server_error'][:300]}")
            server.close()
            server = None
            return
        if cuda and "device" not in info.get("statement", ""):
            result["notes"].append("SERVE refused the device option, so the served figures are of the server's "
                                   "default device, not CUDA; served_vs_floor is left out.")
        if "port" not in info:
            log(f"server: no port: {json.dumps(info)[:800]}")
            return
        log(f"server: {info['statement']} on port {info['port']} ({info['load_s']:.1f} s to load, "
            f"{info['start_s']:.1f} s from start)")
        try:
            clients["tritonclient"] = TritonClient(info["port"])
        except Exception as exc:  # noqa: BLE001 - a user without tritonclient uses plain HTTP
            result["tritonclient_error"] = error_text(exc)
            log(f"tritonclient unavailable: {str(exc)[:200]}; plain http.client only")
        clients["http_binary"] = HttpBinaryClient(info["port"])

    # 3. per model: the variants, interleaved
    models: dict = result.setdefault("models", {})
    for i, (name, b) in enumerate(built.items()):
        if time.perf_counter() - t_start > args.budget_s:
            models[name] = {"skipped": f"--budget-s {args.budget_s:.0f} s reached before it started"}
            result["notes"].append(f"{name}: skipped, --budget-s reached")
            log(f"{name}: skipped, --budget-s {args.budget_s:.0f} s reached")
            continue
        entry: dict = {"input_shape": list(b["x"].shape), "output_shape": list(b["out_shape"])}
        details: dict = {}
        variants: dict = {}
        x = b["x"]
        op_models: dict = {}

        def make_operator(blob, label):
            model, fn = operator(blob, label, args.device)
            op_models[label] = model
            return fn

        makers = {
            "operator": lambda: make_operator(b["blob"], f'model "{name}" version 1'),
            "ort_run": lambda: ort_run(b["blob"], args.device),
            "torch_eager": lambda: torch_eager(b["module"], args.device),
            "zeros_operator": lambda: make_operator(b["zeros"], f'model "{name}_zeros" version 1'),
        }
        if cuda:
            makers["ort_replay"] = lambda: ort_replay(b["blob"], x, b["out_shape"])
        t0 = time.perf_counter()
        for vname, make in makers.items():
            try:
                variants[vname] = make()
            except Exception as exc:  # noqa: BLE001
                details[vname] = {"error": error_text(exc)}
                log(f"{name} {vname}: setup FAILED: {details[vname]['error'][:300]}")
        entry["baselines_setup_s"] = time.perf_counter() - t0
        connect_clients()
        for cname, client in clients.items():
            variants[f"served_{cname}"] = lambda v, c=client: c.infer(name, v)
            variants[f"zeros_served_{cname}"] = lambda v, c=client: c.infer(f"{name}_zeros", v)
        # outputs agree with ONNX Runtime's plain run (checked before timing, once)
        checks: dict = {}
        want = None
        if "ort_run" in variants:
            try:
                want = variants["ort_run"](x)
            except Exception as exc:  # noqa: BLE001
                details["ort_run"] = {"error": error_text(exc)}
        for vname, fn in variants.items():
            if want is None or vname == "ort_run":
                continue
            try:
                got = np.asarray(fn(x))
                checks[vname] = ({"all_zero": bool(np.all(got == 0)), "shape": list(got.shape),
                                  "agree": bool(got.shape == want.shape and np.all(got == 0))}
                                 if vname.startswith("zeros") else agreement(got, want))
            except Exception as exc:  # noqa: BLE001
                checks[vname] = {"error": error_text(exc)}
        entry["check"] = checks
        log(f"{name}: measuring {list(variants)}")
        t0 = time.perf_counter()
        times = measure(variants, x, calls, warmup, details, seed=i)
        for vname, ts in times.items():
            details.setdefault(vname, {}).update(summary(ts))
        entry["measure_s"] = time.perf_counter() - t0
        entry["variants"] = details
        for label, model in op_models.items():  # what the operators captured (CudaModel.explain)
            if hasattr(model, "explain"):
                entry.setdefault("operator_explain", {})[label] = model.explain()
                entry.setdefault("operator_capture_declined", {})[label] = model.capture_declined
        p50 = {k: v.get("p50_ms") for k, v in details.items()}
        served = [(p50[f"served_{c}"], c) for c in clients if p50.get(f"served_{c}") and p50.get(f"zeros_served_{c}")]
        client = min(served)[1] if served else None
        entry["served_client"] = client
        floor_compute = p50.get("ort_replay") if cuda else p50.get("ort_run")
        entry["compute_floor"] = "ort_replay" if cuda else "ort_run (no CUDA graphs on the CPU)"
        if p50.get("operator") and p50.get("ort_replay"):
            result[f"{name}_operator_vs_replay"] = p50["operator"] / p50["ort_replay"]
        if p50.get("operator") and p50.get("ort_run"):
            result[f"{name}_operator_vs_run"] = p50["operator"] / p50["ort_run"]
            result[f"{name}_run_over_operator"] = p50["ort_run"] / p50["operator"]
        served_ok = not cuda or "device" in (server.info.get("statement", "") if server else "")
        if client and floor_compute and served_ok:
            floor = floor_compute + p50[f"zeros_served_{client}"]
            result[f"{name}_served_vs_floor"] = p50[f"served_{client}"] / floor
            entry["served_p50_ms"] = p50[f"served_{client}"]
            entry["server_floor_p50_ms"] = p50[f"zeros_served_{client}"]
            entry["floor_p50_ms"] = floor
        models[name] = entry
        save(result, specs, args.out)
        log(f"{name} ({entry['measure_s']:.1f} s): " + ", ".join(
            f"{k} p50 {v['p50_ms']:.3f} / p90 {v['p90_ms']:.3f} ms" for k, v in details.items() if "p50_ms" in v))
        log(f"{name}: " + ", ".join(f"{k[len(name) + 1:]} {result[k]:.3f}" for k in result
                                    if k.startswith(name + "_") and isinstance(result[k], float)))
    if server is not None and server.info is not None:
        try:
            result["show_servers"] = server.show()
        except Exception as exc:  # noqa: BLE001
            result["show_servers_error"] = error_text(exc)
        for c in clients.values():
            try:
                c.close()
            except Exception:  # noqa: BLE001
                pass
    if server is not None:
        server.close()
    shutil.rmtree(tmp, ignore_errors=True)

    # 4. the table and the JSON
    result["total_s"] = time.perf_counter() - t_start
    table = save(result, specs, args.out)
    log("model         variant                  p50 ms    p90 ms")
    for row in table:
        if row["p50_ms"] is not None:
            log(f"{row['model']:13s} {row['variant']:22s} {row['p50_ms']:8.3f}  {row['p90_ms']:8.3f}")
        else:
            log(f"{row['model']:13s} {row['variant']:22s} ERROR {str(row['error'])[:150]}")
    log(f"met: {result['met']}; total {result['total_s']:.1f} s")
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
