"""Triton's model configuration and statistics extensions, one value per row sent as ``[N]`` or ``[N, 1]``,
and the adaptive batching policy (issue 22, items 9-11).

Real servers on 127.0.0.1, real clients: the real ``tritonclient.http`` (from the test thread only: it is
gevent-based), ``http.client`` in threads, Triton's ``perf_analyzer`` where its binary is installed, and a
real catalog database for SERVE. The batching policy is checked on a :class:`Batcher` driven by a real event
loop and a repository whose batches wait on the test.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import http.client
import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as triton
from onnx import TensorProto, helper, numpy_helper
from tritonclient.utils import InferenceServerException

import modelsql
from modelsql.engine.serve.statements import stop_all
from modelsql.serving import Batcher, InferenceServer, ServerMetrics
from modelsql.serving.batching import AHEAD
from modelsql.serving.simple import OrtRepository, OrtServable

WORDS = ["cheap", "flight", "café", "", "island"]
W = np.random.default_rng(22).normal(size=(4, 3)).astype(np.float32)


def _model(nodes, inputs, outputs, inits=(), ml=False) -> bytes:
    graph = helper.make_graph(nodes, "m", inputs, outputs, list(inits))
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid("ai.onnx.ml", 2)] if ml else [])
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 9
    return model.SerializeToString()


def mlp() -> bytes:
    """X FLOAT [N, 4] -> y FLOAT [N, 3] = X @ W."""
    return _model([helper.make_node("MatMul", ["X", "W"], ["y"])],
                  [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 4])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])], [numpy_helper.from_array(W, "W")])


def text() -> bytes:
    """text STRING [N] -> label INT64 [N] (a LabelEncoder over WORDS, -1 otherwise)."""
    node = helper.make_node("LabelEncoder", ["text"], ["label"], domain="ai.onnx.ml", keys_strings=WORDS,
                            values_int64s=list(range(10, 10 + len(WORDS))), default_int64=-1)
    return _model([node], [helper.make_tensor_value_info("text", TensorProto.STRING, ["N"])],
                  [helper.make_tensor_value_info("label", TensorProto.INT64, ["N"])], ml=True)


def scalars() -> bytes:
    """v FLOAT [N] -> twice [N] = 2 v; col FLOAT [N, 1] -> thrice [N, 1] = 3 col: one number per row, both ways."""
    two, three = numpy_helper.from_array(np.float32(2), "two"), numpy_helper.from_array(np.float32(3), "three")
    return _model([helper.make_node("Mul", ["v", "two"], ["twice"]), helper.make_node("Mul", ["col", "three"], ["thrice"])],
                  [helper.make_tensor_value_info("v", TensorProto.FLOAT, ["N"]),
                   helper.make_tensor_value_info("col", TensorProto.FLOAT, ["N", 1])],
                  [helper.make_tensor_value_info("twice", TensorProto.FLOAT, ["N"]),
                   helper.make_tensor_value_info("thrice", TensorProto.FLOAT, ["N", 1])], [two, three])


MODELS = {"mlp": mlp, "text": text, "scalars": scalars}


@pytest.fixture(scope="module")
def repo():
    r = OrtRepository({name: make() for name, make in MODELS.items()})
    yield r
    r.close()


@pytest.fixture
def fixed(repo):
    """A server with a fixed 50 ms batching delay (requests sent at once share a batch)."""
    srv = InferenceServer(repo, max_batch_size=16, max_queue_delay_ms=50.0).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def adaptive(repo):
    """A server with the default batching policy."""
    srv = InferenceServer(repo, max_batch_size=8).start()
    yield srv
    srv.stop()


def client_of(server) -> triton.InferenceServerClient:
    return triton.InferenceServerClient(f"{server.host}:{server.port}", connection_timeout=10, network_timeout=10)


def get(server, path: str) -> tuple[int, dict]:
    conn = http.client.HTTPConnection(server.host, server.port, timeout=10)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


# -- item 9: the model configuration ------------------------------------------------------------


def test_model_config_as_triton_reads_it(adaptive, fixed):
    with client_of(adaptive) as c:
        config = c.get_model_config("mlp")
        assert c.get_model_config("mlp", "1") == config  # the version in the URL
        assert c.get_server_metadata()["extensions"][-2:] == ["model_configuration", "statistics"]
        text_config = c.get_model_config("text")
        with pytest.raises(InferenceServerException, match="nope"):
            c.get_model_config("nope")
    assert {k: config[k] for k in ("name", "platform", "backend", "max_batch_size", "version_policy")} == {
        "name": "mlp", "platform": "onnxruntime_onnx", "backend": "onnxruntime", "max_batch_size": 8,
        "version_policy": {"specific": {"versions": [1]}}}
    (x,), (y,) = config["input"], config["output"]
    assert (x["name"], x["data_type"], x["dims"], x["is_shape_tensor"], x["optional"]) == ("X", "TYPE_FP32", [4], False, False)
    assert (y["name"], y["data_type"], y["dims"]) == ("y", "TYPE_FP32", [3])
    assert config["dynamic_batching"]["max_queue_delay_microseconds"] == 0
    assert config["parameters"] == {"batching": {"string_value": "adaptive"}}
    (t,), (label,) = text_config["input"], text_config["output"]
    assert (t["data_type"], t["dims"], t["reshape"]) == ("TYPE_STRING", [1], {"shape": []})  # [N, 1] or [N]
    assert (label["data_type"], label["dims"]) == ("TYPE_INT64", [1])
    status, body = get(fixed, "/v2/models/mlp/versions/1/config")
    assert status == 200 and body["max_batch_size"] == 16
    assert body["dynamic_batching"]["max_queue_delay_microseconds"] == 50_000
    assert body["parameters"] == {"batching": {"string_value": "fixed_delay"}}
    status, body = get(fixed, "/v2/models/mlp/versions/7/config")
    assert status == 404 and "7" in body["error"]


# -- item 9: the statistics ---------------------------------------------------------------------


def _infer_in_threads(server, bodies: list[bytes]) -> list[int]:
    def post(body):
        conn = http.client.HTTPConnection(server.host, server.port, timeout=10)
        conn.request("POST", "/v2/models/mlp/infer", body=body, headers={"Content-Type": "application/json"})
        status = conn.getresponse().status
        conn.close()
        return status

    with concurrent.futures.ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(post, bodies))


def _body(rows: int) -> bytes:
    return json.dumps({"inputs": [{"name": "X", "shape": [rows, 4], "datatype": "FP32",
                                   "data": [0.5] * (4 * rows)}]}).encode()


def test_statistics_count_requests_batches_and_times(fixed):
    before = time.time() * 1000
    assert _infer_in_threads(fixed, [_body(1 + k % 3) for k in range(6)]) == [200] * 6  # 12 rows, in few batches
    with client_of(fixed) as c:
        with pytest.raises(InferenceServerException, match="shape"):
            inp = triton.InferInput("X", [2, 5], "FP32")
            inp.set_data_from_numpy(np.ones((2, 5), np.float32))
            c.infer("mlp", [inp])
        (stat,) = c.get_inference_statistics("mlp")["model_stats"]
        assert c.get_inference_statistics("mlp", "1")["model_stats"] == [stat]
        everyone = c.get_inference_statistics()["model_stats"]
        with pytest.raises(InferenceServerException, match="nope"):
            c.get_inference_statistics("nope")
    assert sorted((s["name"], s["version"]) for s in everyone) == [("mlp", "1"), ("scalars", "1"), ("text", "1")]
    assert (stat["name"], stat["version"], stat["inference_count"]) == ("mlp", "1", 12)
    assert before <= stat["last_inference"] <= time.time() * 1000 + 1
    phases = stat["inference_stats"]
    assert {p: phases[p]["count"] for p in phases} == {
        "success": 6, "fail": 1, "queue": 6, "compute_input": 6, "compute_infer": 6, "compute_output": 6,
        "cache_hit": 0, "cache_miss": 0}
    assert all(phases[p]["ns"] > 0 for p in ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output"))
    batches = stat["batch_stats"]
    # the first request of each batch waited the fixed 50 ms (later ones of a batch less)
    assert phases["queue"]["ns"] > stat["execution_count"] * 45e6
    assert 1 <= stat["execution_count"] < 6  # requests sent at once shared batches
    assert sum(b["compute_infer"]["count"] for b in batches) == stat["execution_count"]
    assert sum(b["batch_size"] * b["compute_infer"]["count"] for b in batches) == 12
    assert all(b["compute_input"]["count"] == b["compute_infer"]["count"] for b in batches)


def test_statistics_taken_while_requests_wait_have_equal_phase_counts(fixed):
    """perf_analyzer aborts ("Server side statistics compute counts must be the same") when a snapshot
    counts a request's parsing before its queue and compute: a request's phases are recorded together."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        sent = pool.submit(_infer_in_threads, fixed, [_body(1), _body(2), _body(1)])
        snapshots = []
        while not sent.done():
            status, body = get(fixed, "/v2/models/mlp/stats")
            phases = body["model_stats"][0]["inference_stats"]
            snapshots.append({p: phases[p]["count"] for p in ("success", "queue", "compute_input",
                                                               "compute_infer", "compute_output")})
            time.sleep(0.005)
        assert sent.result() == [200] * 3
    assert len(snapshots) >= 2  # some were taken while the requests sat in the 50 ms queue
    assert all(len(set(s.values())) == 1 for s in snapshots), snapshots
    _, body = get(fixed, "/v2/models/mlp/stats")
    assert body["model_stats"][0]["inference_stats"]["compute_input"]["count"] == 3


def _perf_analyzer() -> str | None:
    """The ``perf_analyzer`` binary: on PATH, beside this Python, or inside the tritonclient package."""
    here = Path(sys.executable).parent / "perf_analyzer"
    packaged = Path(triton.__file__).resolve().parents[1] / "bin" / "perf_analyzer"
    return shutil.which("perf_analyzer") or next((str(p) for p in (here, packaged) if p.exists()), None)


@pytest.mark.skipif(_perf_analyzer() is None, reason="no perf_analyzer binary on PATH: tritonclient >= 2.51 no longer "
                    "ships it; tritonclient[all]==2.50.0 does (README, Serving: it needs libb64-0d and the CUDA "
                    "runtime library, no GPU); the statistics it checks are tested above")
@pytest.mark.parametrize("model, extra", [("mlp", []), ("text", ["--input-tensor-format", "json"]),
                                          ("mlp", ["--concurrency-range", "4"])])
def test_perf_analyzer_runs_against_the_server(adaptive, model, extra):
    args = [_perf_analyzer(), "-m", model, "-u", f"127.0.0.1:{adaptive.port}", "-i", "http", "-x", "1",
            "--measurement-interval", "300", "--concurrency-range", "1",
            "--stability-percentage", "500", *extra]  # a loaded 2-core machine is not stable to 10 %
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Throughput" in proc.stdout and "infer/sec" in proc.stdout


# -- item 10: one value per row, [N] or [N, 1] --------------------------------------------------


@pytest.mark.parametrize("binary", [True, False])
def test_one_value_per_row_as_n_or_n_by_1(adaptive, binary):
    words = np.array([w.encode() for w in WORDS + ["other"]], dtype=object)
    with client_of(adaptive) as c:
        labels = []
        for shape in ([6], [6, 1]):
            inp = triton.InferInput("text", shape, "BYTES")
            inp.set_data_from_numpy(words.reshape(shape), binary_data=binary)
            labels.append(c.infer("text", [inp]).as_numpy("label"))
        assert labels[0].tolist() == labels[1].tolist() == [10, 11, 12, 13, 14, -1]
        v, col = np.arange(3, dtype=np.float32), np.arange(3, dtype=np.float32) + 1
        inputs = [triton.InferInput("v", [3, 1], "FP32"), triton.InferInput("col", [3], "FP32")]  # the other way round
        inputs[0].set_data_from_numpy(v.reshape(3, 1), binary_data=binary)
        inputs[1].set_data_from_numpy(col, binary_data=binary)
        res = c.infer("scalars", inputs)
        assert res.as_numpy("twice").tolist() == [0, 2, 4] and res.as_numpy("thrice").tolist() == [[3], [6], [9]]
        wrong = triton.InferInput("text", [3, 2], "BYTES")
        wrong.set_data_from_numpy(words.reshape(3, 2), binary_data=binary)
        with pytest.raises(InferenceServerException, match=r"expects shape \[-1\] or \[-1, 1\].*got \[3, 2\]"):
            c.infer("text", [wrong])


# -- item 11: the adaptive batching policy ------------------------------------------------------


class _HeldRepository:
    """Records each batch as it starts; a batch holding a request for "hold" waits until ``release`` is set."""

    def __init__(self, threads: int):
        self.started: list[list[str]] = []
        self.release = threading.Event()
        self.pool = concurrent.futures.ThreadPoolExecutor(threads)

    def executor(self, group):
        return self.pool

    def run_group(self, group, items):
        self.started.append([s.name for s, _ in items])
        if any(s.name == "hold" for s, _ in items):
            self.release.wait(10)
        return [{"y": inputs["x"]} for _, inputs in items]


def _submit(batcher: Batcher, name: str) -> asyncio.Future:
    return asyncio.ensure_future(batcher.submit(OrtServable(name, (), (), group="g"), {"x": np.ones(1)}, 1))


async def _turns(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def _dispatched(metrics: ServerMetrics) -> float:
    return metrics.registry.get_sample_value("modelsql_inference_batch_size_count", {"group": "g"}) or 0


def test_adaptive_policy_sends_a_lone_request_at_once_and_batches_while_busy():
    async def scenario():
        repo, metrics = _HeldRepository(threads=1), ServerMetrics()
        batcher = Batcher(repo, metrics, max_batch_size=8)  # the default policy
        first = _submit(batcher, "hold")
        await _turns()
        assert _dispatched(metrics) == 1  # a free thread: dispatched in the same loop turn, no delay
        ahead = _submit(batcher, "b")
        await _turns()
        assert _dispatched(metrics) == 1 + AHEAD  # one batch may wait for the busy thread
        later = [_submit(batcher, "c"), _submit(batcher, "d")]
        await asyncio.sleep(0.05)
        assert _dispatched(metrics) == 1 + AHEAD  # a batch runs and one waits: they wait for the running one
        repo.release.set()
        await asyncio.gather(first, ahead, *later)
        assert repo.started == [["hold"], ["b"], ["c", "d"]]  # dispatched together when "hold" finished
        batcher.close()
        repo.pool.shutdown()

    asyncio.run(scenario())


def test_adaptive_policy_uses_a_free_thread_at_once():
    async def scenario():
        repo, metrics = _HeldRepository(threads=2), ServerMetrics()
        batcher = Batcher(repo, metrics, max_batch_size=8)
        first = _submit(batcher, "hold")
        await _turns()
        second = _submit(batcher, "b")  # "hold" runs on one thread; the other is free
        await _turns()
        assert _dispatched(metrics) == 2
        await second
        assert not first.done() and repo.started == [["hold"], ["b"]]
        repo.release.set()
        await first
        batcher.close()
        repo.pool.shutdown()

    asyncio.run(scenario())


# -- SERVE: the default policy and a catalog text pipeline ---------------------------------------


def test_serve_defaults_to_adaptive_and_takes_text_as_n_by_1(tmp_path):
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline

    docs = ["cheap flight deal", "island hotel", "cheap island", "bad flight", "great hotel", "bad deal"] * 3
    pipe = Pipeline([("tfidf", TfidfVectorizer()), ("head", LogisticRegression())]).fit(docs, [0, 1, 0, 1, 1, 0] * 3)
    con = modelsql.connect(str(tmp_path / "s.duckdb"))
    try:
        con.import_pipeline("senti", pipe, example_input=docs[:4], input_name="text")
        cur = con.cursor()
        cur.execute("SERVE PIPELINE senti ON PORT 0")
        host = cur.fetchall()[0][0].split("//")[1]
        with triton.InferenceServerClient(host) as c:
            config = c.get_model_config("senti")
            assert (config["platform"], config["max_batch_size"]) == ("modelsql_pipeline", 32)
            assert config["parameters"]["batching"]["string_value"] == "adaptive"
            inp = triton.InferInput("text", [4, 1], "BYTES")
            inp.set_data_from_numpy(np.array(docs[:4], dtype=object).reshape(4, 1))
            assert c.infer("senti", [inp]).as_numpy("label").tolist() == pipe.predict(docs[:4]).tolist()
        stop_all()
        cur.execute("SERVE PIPELINE senti ON PORT 0 WITH (max_queue_delay_ms = 1)")
        host = cur.fetchall()[0][0].split("//")[1]
        with triton.InferenceServerClient(host) as c:
            assert c.get_model_config("senti")["dynamic_batching"]["max_queue_delay_microseconds"] == 1000
    finally:
        stop_all()
        con.close()
