"""modelsql.serving against a real server on 127.0.0.1: the Open Inference Protocol (KServe v2 REST) and
Triton's binary tensor and model repository extensions, spoken by the real ``tritonclient.http`` client, by
``http.client`` and by raw sockets.

The served models are tiny ONNX graphs run by ONNX Runtime (a float [N,4] -> [N,3] MatMul+Add+Softmax, and a
string model: Identity plus a LabelEncoder, so BYTES travel both ways), plus an in-test servable "boom" whose
run fails on demand. The gevent-based tritonclient is used only from the test thread (it hangs in the gevent
hub when mixed with OS threads); concurrency comes from a separate process or from raw sockets.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import http.client
import json
import socket
import struct
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import onnxruntime as ort
import prometheus_client
import pytest
import tritonclient.http as triton
from onnx import TensorProto, helper, numpy_helper
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import InferenceServerException

from modelsql.errors import DataError
from modelsql.serving import Batcher, InferenceServer, ServerBindError, ServerMetrics, TensorMetadata
from modelsql.serving.simple import OrtRepository, OrtServable

RNG = np.random.default_rng(7)
W = RNG.normal(size=(4, 3)).astype(np.float32)
B = RNG.normal(size=3).astype(np.float32)
WORDS = ["cheap", "flight", "café", "", "island"]
LIMIT = 1 << 20  # the test server's max_request_bytes


# -- models and repository ------------------------------------------------------------------------


def mlp_model() -> bytes:
    nodes = [helper.make_node("MatMul", ["X", "W"], ["xw"]), helper.make_node("Add", ["xw", "B"], ["logits"]),
             helper.make_node("Softmax", ["logits"], ["probs"], axis=-1)]
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["N", 3]),
         helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3])],
        [numpy_helper.from_array(W, "W"), numpy_helper.from_array(B, "B")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model.SerializeToString()


def text_model() -> bytes:
    nodes = [helper.make_node("Identity", ["text"], ["echo"]),
             helper.make_node("LabelEncoder", ["text"], ["label"], domain="ai.onnx.ml", keys_strings=WORDS,
                              values_int64s=list(range(10, 10 + len(WORDS))), default_int64=-1)]
    graph = helper.make_graph(
        nodes, "text", [helper.make_tensor_value_info("text", TensorProto.STRING, ["N"])],
        [helper.make_tensor_value_info("echo", TensorProto.STRING, ["N"]),
         helper.make_tensor_value_info("label", TensorProto.INT64, ["N"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 2)])
    model.ir_version = 9
    return model.SerializeToString()


BOOM = OrtServable("boom", (TensorMetadata("code", "INT64", (-1,)),), (TensorMetadata("y", "INT64", (-1,)),), group="boom")


def boom(code: np.ndarray):
    """code[0]: 0 echoes; 1 RuntimeError (500); 2 ValueError (400); 3 LookupError (404); 4 DataError (400)."""
    kinds = {1: RuntimeError("kaboom in row 0"), 2: ValueError("row 0: code 2 is not allowed"),
             3: LookupError("no such thing"), 4: DataError("bad data in row 0")}
    return kinds.get(int(code[0]), {"y": code})


class Repo(OrtRepository):
    """Two ONNX models plus "boom", an in-test servable whose runs fail as asked."""

    def get(self, name, version=None):
        if name == "boom" and version in (None, "1"):
            return BOOM
        return super().get(name, version)

    def ready(self, name, version=None):
        return (name == "boom" and version in (None, "1")) or super().ready(name, version)

    def run_group(self, group, items):
        if group != "boom":
            return super().run_group(group, items)
        if any(int(inputs["code"][0]) == 9 for _, inputs in items):
            raise RuntimeError("the whole batch failed")
        return [boom(inputs["code"]) for _, inputs in items]


@pytest.fixture(scope="module")
def sessions():
    return {"mlp": ort.InferenceSession(mlp_model()), "text": ort.InferenceSession(text_model())}


@pytest.fixture(scope="module")
def server():
    repo = Repo({"mlp": mlp_model(), "text": text_model()})
    srv = InferenceServer(repo, max_batch_size=64, max_queue_delay_ms=5.0, max_request_bytes=LIMIT).start()
    yield srv
    srv.stop()
    repo.close()


@pytest.fixture(scope="module")
def client(server):
    c = triton.InferenceServerClient(f"{server.host}:{server.port}", connection_timeout=10, network_timeout=10)
    yield c
    c.close()


# -- plain HTTP helpers ---------------------------------------------------------------------------


def request(server, method, path, body=b"", headers=None, timeout=10.0):
    """(status, headers, body) of one request on a fresh connection."""
    conn = http.client.HTTPConnection(server.host, server.port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def infer_body(x: np.ndarray, **extra) -> bytes:
    return json.dumps({"inputs": [{"name": "X", "shape": list(x.shape), "datatype": "FP32", "data": x.ravel().tolist()}],
                       **extra}).encode()


def expected_probs(x: np.ndarray) -> np.ndarray:
    z = x @ W + B
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def assert_error(status, headers, body, code, *needles):
    assert status == code, (status, body)
    assert headers["content-type"].startswith("application/json")
    message = json.loads(body)["error"]
    for needle in needles:
        assert needle in message, (needle, message)
    assert "Traceback" not in message
    return message


def assert_still_serves(server):
    x = RNG.normal(size=(2, 4)).astype(np.float32)
    status, _, body = request(server, "POST", "/v2/models/mlp/infer", infer_body(x))
    assert status == 200, body
    probs = next(o for o in json.loads(body)["outputs"] if o["name"] == "probs")
    np.testing.assert_allclose(np.array(probs["data"]).reshape(2, 3), expected_probs(x), rtol=1e-5, atol=1e-6)


def metric_samples(server, family_name):
    status, headers, body = request(server, "GET", "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    return families[family_name].samples


def batch_stats(server, group):
    samples = metric_samples(server, "modelsql_inference_batch_size")
    pick = {s.name: s.value for s in samples if s.labels.get("group") == group and s.name.endswith(("_count", "_sum"))}
    ones = [s.value for s in samples if s.labels.get("group") == group and s.labels.get("le") == "1.0"]
    return pick.get("modelsql_inference_batch_size_count", 0.0), pick.get("modelsql_inference_batch_size_sum", 0.0), \
        (ones[0] if ones else 0.0)


def request_count(server, model, status):
    samples = metric_samples(server, "modelsql_inference_requests")
    return sum(s.value for s in samples if s.name.endswith("_total") and s.labels["model"] == model
               and s.labels["status"] == str(status))


# -- tritonclient ---------------------------------------------------------------------------------


def test_health_and_metadata_with_tritonclient(client, server):
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("mlp") and client.is_model_ready("text", "1")
    assert not client.is_model_ready("nope") and not client.is_model_ready("mlp", "7")
    meta = client.get_server_metadata()
    assert meta["name"] == "modelsql"
    assert meta["version"] == __import__("modelsql").__version__
    assert {"binary_tensor_data", "model_repository"} <= set(meta["extensions"])
    mlp = client.get_model_metadata("mlp")
    assert mlp["name"] == "mlp" and mlp["versions"] == ["1"] and mlp["platform"] == "onnxruntime_onnx"
    assert mlp["inputs"] == [{"name": "X", "datatype": "FP32", "shape": [-1, 4]}]
    assert mlp["outputs"] == [{"name": "probs", "datatype": "FP32", "shape": [-1, 3]},
                              {"name": "logits", "datatype": "FP32", "shape": [-1, 3]}]
    text = client.get_model_metadata("text", "1")
    # one value per row: [N, 1] as Triton reports its config (dims [1], reshape []); [N] is accepted too
    assert text["inputs"] == [{"name": "text", "datatype": "BYTES", "shape": [-1, 1]}]
    assert [o["datatype"] for o in text["outputs"]] == ["BYTES", "INT64"]
    with pytest.raises(InferenceServerException, match="nope"):
        client.get_model_metadata("nope")
    assert server.url == f"http://127.0.0.1:{server.port}" and server.started_at is not None


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_infer_fp32_matches_onnxruntime(client, sessions, binary):
    x = RNG.normal(size=(5, 4)).astype(np.float32)
    probs, logits = sessions["mlp"].run(["probs", "logits"], {"X": x})
    inp = triton.InferInput("X", [5, 4], "FP32")
    inp.set_data_from_numpy(x, binary_data=binary)
    outputs = [triton.InferRequestedOutput(n, binary_data=binary) for n in ("probs", "logits")]
    result = client.infer("mlp", [inp], outputs=outputs, request_id="req-1")
    assert result.get_response()["id"] == "req-1"
    assert result.get_response()["model_version"] == "1"
    np.testing.assert_allclose(result.as_numpy("probs"), probs, rtol=1e-6)
    np.testing.assert_allclose(result.as_numpy("logits"), logits, rtol=1e-6)
    assert result.as_numpy("probs").dtype == np.float32 and result.as_numpy("probs").shape == (5, 3)
    if binary:
        assert result.get_output("probs")["parameters"]["binary_data_size"] == 5 * 3 * 4


def test_infer_defaults_binary_outputs_and_versions(client, sessions):
    x = RNG.normal(size=(3, 4)).astype(np.float32)
    inp = triton.InferInput("X", [3, 4], "FP32")
    inp.set_data_from_numpy(x)  # defaults: binary input, no outputs -> binary_data_output
    result = client.infer("mlp", [inp], model_version="1")
    np.testing.assert_allclose(result.as_numpy("probs"), sessions["mlp"].run(["probs"], {"X": x})[0], rtol=1e-6)
    assert all("binary_data_size" in o["parameters"] for o in result.get_response()["outputs"])
    only = client.infer("mlp", [inp], outputs=[triton.InferRequestedOutput("logits")])
    assert [o["name"] for o in only.get_response()["outputs"]] == ["logits"]


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_infer_bytes_matches_onnxruntime(client, sessions, binary):
    words = np.array(["island", "café", "", "unknown words", "cheap"], dtype=object)
    echo, label = sessions["text"].run(["echo", "label"], {"text": words})
    inp = triton.InferInput("text", [5], "BYTES")
    inp.set_data_from_numpy(words, binary_data=binary)
    outputs = [triton.InferRequestedOutput(n, binary_data=binary) for n in ("echo", "label")]
    result = client.infer("text", [inp], outputs=outputs)
    got = result.as_numpy("echo")
    as_text = [v.decode("utf-8") if isinstance(v, bytes) else v for v in got]  # bytes in binary mode, str in JSON
    assert as_text == list(echo)
    assert isinstance(got[0], bytes) == binary
    np.testing.assert_array_equal(result.as_numpy("label"), label)
    assert list(label) == [14, 12, 13, -1, 10]


def test_nested_json_data_and_raw_http(server, sessions):
    x = RNG.normal(size=(2, 4)).astype(np.float32)
    body = json.dumps({"id": "n1", "inputs": [{"name": "X", "shape": [2, 4], "datatype": "FP32",
                                                "data": x.tolist()}], "outputs": [{"name": "probs"}]}).encode()
    status, headers, raw = request(server, "POST", "/v2/models/mlp/versions/1/infer", body,
                                   {"Content-Type": "application/json"})
    assert status == 200 and headers["content-type"] == "application/json"
    out = json.loads(raw)
    assert out["id"] == "n1" and out["model_name"] == "mlp" and [o["name"] for o in out["outputs"]] == ["probs"]
    assert out["outputs"][0]["shape"] == [2, 3]
    np.testing.assert_allclose(np.array(out["outputs"][0]["data"]).reshape(2, 3),
                               sessions["mlp"].run(["probs"], {"X": x})[0], rtol=1e-6)
    status, _, raw = request(server, "GET", "/v2/models/mlp/ready")
    assert status == 200 and json.loads(raw) == {"name": "mlp", "ready": True}
    assert json.loads(request(server, "GET", "/v2/health/live")[2]) == {"live": True}
    assert json.loads(request(server, "GET", "/v2/health/ready")[2]) == {"ready": True}


def test_binary_response_by_hand(server):
    """The raw binary layout: header length, JSON header, then each output's bytes in order."""
    words = [b"cheap", "café".encode(), b""]
    blob = b"".join(struct.pack("<I", len(w)) + w for w in words)
    head = json.dumps({"id": "b1", "inputs": [{"name": "text", "shape": [3], "datatype": "BYTES",
                                               "parameters": {"binary_data_size": len(blob)}}],
                       "parameters": {"binary_data_output": True}}).encode()
    status, headers, raw = request(server, "POST", "/v2/models/text/infer", head + blob,
                                   {"Inference-Header-Content-Length": str(len(head))})
    assert status == 200 and headers["content-type"] == "application/octet-stream"
    n = int(headers["inference-header-content-length"])
    meta = json.loads(raw[:n])
    assert meta["id"] == "b1"
    sizes = [o["parameters"]["binary_data_size"] for o in meta["outputs"]]
    assert sum(sizes) == len(raw) - n
    echo = raw[n:n + sizes[0]]
    assert echo == blob
    label = np.frombuffer(raw[n + sizes[0]:], dtype="<i8")
    assert list(label) == [10, 12, 13]


def test_repository_extension(client, server):
    index = {e["name"]: e for e in client.get_model_repository_index()}
    assert index["mlp"]["state"] == "READY" and index["text"]["version"] == "1"
    client.unload_model("text")
    try:
        assert not client.is_model_ready("text")
        states = {e["name"]: e["state"] for e in client.get_model_repository_index()}
        assert states["text"] == "UNAVAILABLE"
        status, _, raw = request(server, "POST", "/v2/repository/index", b'{"ready": true}')
        assert status == 200 and "text" not in {e["name"] for e in json.loads(raw)}
        for bad in (b"{not json", b"[1]", b"null"):  # the index request is a JSON object
            assert_error(*request(server, "POST", "/v2/repository/index", bad), 400, "must be a JSON object")
        body = json.dumps({"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": ["x"]}]}).encode()
        assert_error(*request(server, "POST", "/v2/models/text/infer", body), 404, '"text"', "not loaded")
    finally:
        client.load_model("text")
    assert client.is_model_ready("text")
    with pytest.raises(InferenceServerException, match="nope"):
        client.load_model("nope")
    assert_error(*request(server, "POST", "/v2/repository/models/nope/unload", b""), 404, '"nope"')


# -- batching -------------------------------------------------------------------------------------

CLIENTS = textwrap.dedent("""
    import http.client, json, sys, threading
    import numpy as np
    port, threads, per_thread = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    W = np.array(json.loads(sys.argv[4]), dtype=np.float32); B = np.array(json.loads(sys.argv[5]), dtype=np.float32)
    barrier = threading.Barrier(threads)
    failures = []
    def work(seed):
        rng = np.random.default_rng(seed)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        barrier.wait()
        for _ in range(per_thread):
            x = rng.normal(size=(1, 4)).astype(np.float32)
            body = json.dumps({"inputs": [{"name": "X", "shape": [1, 4], "datatype": "FP32",
                                           "data": x.ravel().tolist()}], "outputs": [{"name": "probs"}]})
            conn.request("POST", "/v2/models/mlp/infer", body=body)
            resp = conn.getresponse()
            out = json.loads(resp.read())
            if resp.status != 200:
                failures.append(out); continue
            z = x @ W + B; e = np.exp(z - z.max()); want = e / e.sum()
            got = np.array(out["outputs"][0]["data"]).reshape(1, 3)
            if not np.allclose(got, want, rtol=1e-5, atol=1e-6):
                failures.append({"x": x.tolist(), "got": got.tolist(), "want": want.tolist()})
        conn.close()
    ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    [t.start() for t in ts]; [t.join() for t in ts]
    print(json.dumps({"failures": failures[:3], "n_failures": len(failures)}))
""")


def test_concurrent_requests_from_another_process_are_batched(server):
    threads, per_thread = 8, 25
    count0, sum0, ones0 = batch_stats(server, "mlp")
    proc = subprocess.run([sys.executable, "-c", CLIENTS, str(server.port), str(threads), str(per_thread),
                           json.dumps(W.tolist()), json.dumps(B.tolist())], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["n_failures"] == 0, report
    count1, sum1, ones1 = batch_stats(server, "mlp")
    batches, rows = count1 - count0, sum1 - sum0
    assert rows == threads * per_thread
    assert batches < rows  # some batch held more than one request
    assert ones1 - ones0 < batches  # ... and the histogram says so
    queue = [s for s in metric_samples(server, "modelsql_inference_queue_seconds")
             if s.name.endswith("_count") and s.labels["model"] == "mlp"]
    assert queue and queue[0].value >= rows


class _FakeRepository:
    """Records each batch; a row whose first value is negative fails (ValueError) on its own."""

    def __init__(self):
        self.batches = []
        self.pool = concurrent.futures.ThreadPoolExecutor(1)

    def executor(self, group):
        return self.pool

    def run_group(self, group, items):
        self.batches.append((group, [len(inputs["x"]) for _, inputs in items]))
        return [ValueError("negative") if inputs["x"][0] < 0 else {"y": inputs["x"] * 2} for _, inputs in items]


def test_batcher_dispatch_rules():
    async def scenario():
        repo = _FakeRepository()
        batcher = Batcher(repo, ServerMetrics(), max_batch_size=4, max_queue_delay_ms=30)
        a = OrtServable("a", (), (), group="g")
        b = OrtServable("b", (), (), group="g")  # another servable of the same group: batched with "a"
        other = OrtServable("c", (), (), group="h")

        def go(s, rows, first=1.0):
            x = np.full(rows, first)
            return asyncio.ensure_future(batcher.submit(s, {"x": x}, rows))

        t0 = time.perf_counter()
        small = [go(a, 1), go(b, 1), go(a, 1, first=-1.0)]
        results = await asyncio.gather(*small, return_exceptions=True)
        waited = time.perf_counter() - t0
        assert repo.batches == [("g", [1, 1, 1])] and 0.02 < waited < 1.0  # dispatched by the delay
        assert isinstance(results[2], ValueError) and list(results[0]["y"]) == [2.0]
        full = [go(a, 2), go(b, 2)]
        await asyncio.gather(*full)
        assert repo.batches[-1] == ("g", [2, 2])  # dispatched on reaching max_batch_size
        mixed = [go(a, 3), go(a, 3), go(other, 6), go(a, 1)]
        await asyncio.gather(*mixed)
        assert ("g", [3]) in repo.batches and ("h", [6]) in repo.batches and ("g", [3, 1]) in repo.batches
        batcher.close()
        repo.pool.shutdown()

    asyncio.run(scenario())


# -- bad requests ---------------------------------------------------------------------------------


def _x(name="X", shape=(2, 4), datatype="FP32", data=None):
    n = int(np.prod(shape))
    return {"name": name, "shape": list(shape), "datatype": datatype,
            "data": list(range(n)) if data is None else data}


BAD_JSON = [
    ("unknown input", "mlp", {"inputs": [_x(name="Y")]}, ['"mlp"', 'unknown input "Y"', '"X" (FP32 [-1, 4])']),
    ("missing input", "mlp", {"inputs": []}, ['"mlp"', "missing input", "'X'"]),
    ("no inputs", "mlp", {"id": "1"}, ['"mlp"', '"inputs"']),
    ("wrong shape", "mlp", {"inputs": [_x(shape=(2, 5))]}, ['"mlp"', '"X"', "[-1, 4]", "got [2, 5]"]),
    ("wrong rank", "mlp", {"inputs": [_x(shape=(8,))]}, ['"X"', "[-1, 4]", "got [8]"]),
    ("negative dim", "mlp", {"inputs": [_x(shape=(-1, 4), data=[])]}, ['"X"', "non-negative"]),
    ("wrong datatype", "mlp", {"inputs": [_x(datatype="FP64")]}, ['"mlp"', '"X"', "FP32", "FP64"]),
    ("too few values", "mlp", {"inputs": [_x(data=list(range(7)))]}, ['"X"', "7 values", "[2, 4] needs 8"]),
    ("not numbers", "mlp", {"inputs": [_x(data=[1, 2, 3, 4, 5, "six", 7, 8])]},
     ['"X"', "expects numbers", "element 5 (row 1)", "a string"]),
    ("unknown output", "mlp", {"inputs": [_x()], "outputs": [{"name": "nope"}]},
     ['"mlp"', 'unknown output "nope"', '"probs"', '"logits"']),
    ("bytes not strings", "text", {"inputs": [_x(name="text", shape=(2,), datatype="BYTES", data=["a", 3])]},
     ['"text"', "expects strings", "element 1 (row 1)"]),
    ("int out of range", "boom", {"inputs": [_x(name="code", shape=(2,), datatype="INT64", data=[1, 2 ** 63])]},
     ['"boom"', '"code"', "out of range", "max 9223372036854775808"]),
    ("int gets float", "boom", {"inputs": [_x(name="code", shape=(2,), datatype="INT64", data=[1, 1.5])]},
     ['"code"', "expects integers", "element 1 (row 1) is 1.5"]),
    ("duplicate input", "mlp", {"inputs": [_x(), _x()]}, ['"X"', "twice"]),
]


@pytest.mark.parametrize("model,payload,needles", [c[1:] for c in BAD_JSON], ids=[c[0] for c in BAD_JSON])
def test_bad_json_requests_are_400_naming_the_problem(server, model, payload, needles):
    assert_error(*request(server, "POST", f"/v2/models/{model}/infer", json.dumps(payload).encode()), 400, *needles)
    assert_still_serves(server)


@pytest.mark.parametrize("body,needles", [
    (b'{"inputs": [', ["not valid JSON"]),
    (b"[1, 2]", ["must be a JSON object", "an array"]),
    (b"\xff\xfe", ["not valid JSON"]),
], ids=["truncated", "array", "not utf8"])
def test_malformed_json_is_400(server, body, needles):
    assert_error(*request(server, "POST", "/v2/models/mlp/infer", body), 400, '"mlp"', *needles)
    assert_still_serves(server)


def test_unknown_model_version_and_route_are_404(server):
    body = infer_body(np.zeros((1, 4), np.float32))
    assert_error(*request(server, "POST", "/v2/models/nope/infer", body), 404, '"nope"')
    assert_error(*request(server, "POST", "/v2/models/mlp/versions/9/infer", body), 404, '"mlp"', '"9"')
    assert_error(*request(server, "GET", "/v2/models/mlp/versions/9"), 404, '"mlp"', '"9"')
    assert_error(*request(server, "GET", "/v2/models/nope/ready"), 404, '"nope"')
    assert_error(*request(server, "GET", "/v2/nothing/here"), 404, "/v2/nothing/here")
    assert_error(*request(server, "GET", "/v2/models/mlp/infer"), 405, "/v2/models/mlp/infer")
    assert_still_serves(server)


def _binary_x(x: np.ndarray, size=None, header=None, extra=b""):
    head = json.dumps({"inputs": [{"name": "X", "shape": list(x.shape), "datatype": "FP32",
                                   "parameters": {"binary_data_size": x.nbytes if size is None else size}}]}).encode()
    return head + x.astype("<f4").tobytes() + extra, {"Inference-Header-Content-Length": header or str(len(head))}


@pytest.mark.parametrize("case,needles", [
    ("header too long", ["Inference-Header-Content-Length", "says 100000 bytes", "body has"]),
    ("header not int", ["Inference-Header-Content-Length", "must be an integer", "'12a'"]),
    ("size mismatch", ['"X"', "binary_data_size is 28 bytes", "[2, 4] of FP32 needs 32"]),
    ("size past end", ['"X"', "binary_data_size 40 runs past the end"]),
    ("unused bytes", ["36 bytes of binary data", "add up to 32"]),
])
def test_bad_binary_requests_are_400(server, case, needles):
    x = RNG.normal(size=(2, 4)).astype(np.float32)
    body, headers = {
        "header too long": lambda: _binary_x(x, header="100000"),
        "header not int": lambda: _binary_x(x, header="12a"),
        "size mismatch": lambda: _binary_x(x, size=28),
        "size past end": lambda: _binary_x(x, size=40),
        "unused bytes": lambda: _binary_x(x, extra=b"\0\0\0\0"),
    }[case]()
    assert_error(*request(server, "POST", "/v2/models/mlp/infer", body, headers), 400, '"mlp"', *needles)
    assert_still_serves(server)


def test_bad_binary_bytes_elements_are_400(server):
    def send(blob, n=2):
        head = json.dumps({"inputs": [{"name": "text", "shape": [n], "datatype": "BYTES",
                                       "parameters": {"binary_data_size": len(blob)}}]}).encode()
        return request(server, "POST", "/v2/models/text/infer", head + blob,
                       {"Inference-Header-Content-Length": str(len(head))})

    good = struct.pack("<I", 3) + b"abc"
    assert_error(*send(good + struct.pack("<I", 99) + b"xy"), 400, '"text"', '"text"', "element 1 is 99 bytes long")
    assert_error(*send(good), 400, "element 1's 4-byte length")
    assert_error(*send(good + good + b"!"), 400, "its 2 BYTES elements take 14")
    # valid framing, but not UTF-8 text, which the ONNX string model needs: the repository's ValueError -> 400
    assert_error(*send(good + struct.pack("<I", 2) + b"\xff\xfe"), 400, '"text"', 'input "text" element 1 (row 1)',
                 "not UTF-8")
    assert_still_serves(server)


@pytest.mark.parametrize("code,status,needles", [
    (1, 500, ['"boom"', "kaboom in row 0"]),
    (2, 400, ['"boom"', "row 0: code 2"]),
    (3, 404, ['"boom"', "no such thing"]),
    (4, 400, ['"boom"', "bad data in row 0"]),
    (9, 500, ['"boom"', "the whole batch failed"]),
])
def test_model_failures_map_to_status(server, code, status, needles):
    body = json.dumps({"inputs": [_x(name="code", shape=(1,), datatype="INT64", data=[code])]}).encode()
    assert_error(*request(server, "POST", "/v2/models/boom/infer", body), status, *needles)
    status, _, raw = request(server, "POST", "/v2/models/boom/infer",
                             json.dumps({"inputs": [_x(name="code", shape=(1,), datatype="INT64", data=[0])]}).encode())
    assert status == 200 and json.loads(raw)["outputs"][0]["data"] == [0]


def test_oversized_body_is_413_before_reading(server):
    with socket.create_connection((server.host, server.port), timeout=10) as s:
        s.sendall(b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % (LIMIT + 1))  # and no body at all: refused on the header
        raw = _read_response(s)
    status, headers, body = _parse_response(raw)
    message = assert_error(status, headers, body, 413, '"mlp"', str(LIMIT), "max_request_bytes")
    assert str(LIMIT + 1) in message
    assert_still_serves(server)


def test_oversized_chunked_body_is_413_while_streaming(server):
    def chunks():
        for _ in range(LIMIT // 65536 + 2):
            yield b" " * 65536

    conn = http.client.HTTPConnection(server.host, server.port, timeout=10)
    try:
        try:
            conn.request("POST", "/v2/models/mlp/infer", body=chunks(), encode_chunked=True,
                         headers={"Transfer-Encoding": "chunked"})
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server may close before the last chunk
        resp = conn.getresponse()
        assert_error(resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read(), 413,
                     '"mlp"', f"more than {LIMIT} bytes")
    finally:
        conn.close()
    assert_still_serves(server)


def test_client_disconnecting_mid_body(server):
    before = request_count(server, "mlp", 499)
    with socket.create_connection((server.host, server.port), timeout=10) as s:
        s.sendall(b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n{\"inputs\": [")
        time.sleep(0.05)
    assert_still_serves(server)
    deadline = time.monotonic() + 5
    while request_count(server, "mlp", 499) == before and time.monotonic() < deadline:
        time.sleep(0.02)
    assert request_count(server, "mlp", 499) == before + 1


def test_slow_client_does_not_block_others(server):
    body = infer_body(np.ones((1, 4), np.float32))
    replies = []
    sent = []

    def slow():
        with socket.create_connection((server.host, server.port), timeout=20) as s:
            s.sendall(b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                      b"Content-Length: %d\r\n\r\n" % len(body))
            for i in range(len(body)):
                s.sendall(body[i:i + 1])
                time.sleep(0.02)
            sent.append(time.monotonic())
            replies.append(_read_response(s))

    t = threading.Thread(target=slow)
    t.start()
    time.sleep(0.1)
    try:
        for _ in range(5):
            t0 = time.perf_counter()
            assert_still_serves(server)
            assert time.perf_counter() - t0 < 1.0
        answered = time.monotonic()
    finally:
        t.join(30)
    assert answered < sent[0]  # the others were answered while the slow one was still sending
    status, _, raw = _parse_response(replies[0])
    assert status == 200 and json.loads(raw)["model_name"] == "mlp"


def _read_response(s: socket.socket) -> bytes:
    chunks = []
    while True:
        data = s.recv(65536)
        if not data:
            return b"".join(chunks)
        chunks.append(data)
        raw = b"".join(chunks)
        head, sep, rest = raw.partition(b"\r\n\r\n")
        if sep:
            length = [int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")]
            if length and len(rest) >= length[0]:
                return raw


def _parse_response(raw: bytes):
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    return int(lines[0].split()[1]), headers, body


# -- metrics and life cycle -----------------------------------------------------------------------


def test_metrics_exposition(server):
    assert_still_serves(server)
    request(server, "POST", "/v2/models/mlp/infer", b"{")
    server.metrics.observe_step("tokenize", 12, 0.002)
    server.metrics.observe_step("tokenize", 3, 0.001)
    status, headers, body = request(server, "GET", "/metrics")
    assert status == 200 and headers["content-type"] == prometheus_client.CONTENT_TYPE_LATEST
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    assert families["modelsql_inference_requests"].type == "counter"
    for name in ("modelsql_inference_batch_size", "modelsql_inference_queue_seconds",
                 "modelsql_inference_request_seconds", "modelsql_step_seconds"):
        assert families[name].type == "histogram", name
    assert request_count(server, "mlp", 200) >= 1 and request_count(server, "mlp", 400) >= 1
    steps = {s.name: s.value for s in families["modelsql_step_rows"].samples if s.labels == {"step": "tokenize"}}
    assert steps["modelsql_step_rows_total"] == 15
    counts = {s.name: s.value for s in families["modelsql_step_seconds"].samples if s.labels.get("step") == "tokenize"}
    assert counts["modelsql_step_seconds_count"] == 2 and abs(counts["modelsql_step_seconds_sum"] - 0.003) < 1e-9
    unknown = request_count(server, "", 404)
    request(server, "POST", "/v2/models/some-random-name/infer", b"{}")
    assert request_count(server, "", 404) == unknown + 1  # unknown names share one label


def test_port_in_use_stop_and_restart(server):
    repo = OrtRepository({"mlp": mlp_model()})
    with pytest.raises(ServerBindError, match=f"127.0.0.1:{server.port}") as info:
        InferenceServer(repo, port=server.port).start()
    assert isinstance(info.value, OSError)
    assert InferenceServer(repo).max_request_bytes == 64 << 20  # the documented default
    other = InferenceServer(repo, max_queue_delay_ms=0).start()  # a second server, own metrics registry
    stalled = socket.create_connection((other.host, other.port), timeout=10)
    try:
        assert other.port not in (0, server.port)
        assert_still_serves(other)
        assert request_count(other, "mlp", 200) == 1
        stalled.sendall(b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        time.sleep(0.05)
    finally:
        t0 = time.perf_counter()
        other.stop(timeout=1.0)  # the stalled request is cut off after the 1 s grace period
        assert time.perf_counter() - t0 < 4.0 and not other.running
        other.stop()  # idempotent
    with stalled:
        status, headers, body = _parse_response(_read_response(stalled))
    assert_error(status, headers, body, 503, '"mlp"', "shutting down")
    with pytest.raises(OSError):
        socket.create_connection((other.host, other.port), timeout=1).close()
    again = InferenceServer(repo, port=other.port).start()  # the port is free again at once
    try:
        assert again.port == other.port
        assert_still_serves(again)
    finally:
        again.stop()
        repo.close()
