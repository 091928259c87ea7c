"""SERVE (issue 8): a real Open Inference Protocol server on 127.0.0.1 serving catalog pipelines, spoken to
by the real tritonclient, by raw HTTP and by a client in another process; shared steps computed once
per batch, a live resident set (ADD / REMOVE, repository load / unload), reservation, bad input."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest
import tritonclient.http as triton
from onnx import TensorProto, helper
from prometheus_client.parser import text_string_to_metric_families
from sklearn.datasets import load_iris
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler

import modelsql
from modelsql import errors
from modelsql.engine.serve.statements import SERVERS, stop_all

X, Y = load_iris(return_X_y=True)
X32 = X.astype(np.float32)


@pytest.fixture(scope="module")
def fitted():
    sc = StandardScaler().fit(X)
    z = sc.transform(X)
    return {
        "a": Pipeline([("scale", sc), ("head", LogisticRegression(max_iter=1000).fit(z, Y))]),
        "b": Pipeline([("scale", sc), ("head", LogisticRegression(C=0.05, max_iter=1000).fit(z, Y))]),
        "c": Pipeline([("scale", sc), ("head", LogisticRegression(C=5.0, max_iter=1000).fit(z, Y))]),
    }


def _gather_model() -> onnx.ModelProto:
    """idx INT64 [N] -> out FLOAT [N, 2] = table[idx]: ONNX Runtime fails on an index out of range."""
    table = helper.make_tensor("table", TensorProto.FLOAT, [3, 2], [0, 1, 2, 3, 4, 5])
    node = helper.make_node("Gather", ["table", "idx"], ["out"], axis=0)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("idx", TensorProto.INT64, ["N"])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", 2])], [table])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture
def served(tmp_path, fitted):
    con = modelsql.connect(str(tmp_path / "serve.duckdb"))
    for name in ("a", "b", "c"):
        con.import_pipeline(name, fitted[name], example_input=X)
    con.import_model("lookup", _gather_model())
    cur = con.cursor()
    cur.execute("SERVE PIPELINE a, PIPELINE b, MODEL lookup ON PORT 0 WITH (max_batch_size = 64, "
                "max_queue_delay_ms = 5)")
    url = cur.fetchall()[0][0]
    yield con, url.split("//")[1]
    stop_all()
    con.close()


def _post(host: str, path: str, body: bytes, headers=None) -> tuple[int, dict]:
    conn = http.client.HTTPConnection(host, timeout=10)
    conn.request("POST", path, body=body, headers=headers or {"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, json.loads(data) if data else {}


def _metrics(host: str) -> dict:
    conn = http.client.HTTPConnection(host, timeout=10)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


@pytest.mark.parametrize("binary", [False, True])
def test_tritonclient_gets_the_pipelines_answers(served, fitted, binary):
    con, host = served
    client = triton.InferenceServerClient(host)
    assert client.is_server_live() and client.is_server_ready() and client.is_model_ready("a")
    meta = client.get_model_metadata("b")
    assert meta["platform"] == "modelsql_pipeline"
    assert meta["inputs"] == [{"name": "input", "datatype": "FP32", "shape": [-1, 4]}]
    for name in ("a", "b"):
        inp = triton.InferInput("input", [20, 4], "FP32")
        inp.set_data_from_numpy(X32[::7][:20], binary_data=binary)
        outs = [triton.InferRequestedOutput(n, binary_data=binary) for n in ("label", "probabilities")]
        res = client.infer(name, [inp], outputs=outs)
        assert (res.as_numpy("label") == fitted[name].predict(X[::7][:20])).all()
        np.testing.assert_allclose(res.as_numpy("probabilities"), fitted[name].predict_proba(X[::7][:20]), atol=1e-5)
    client.close()


_CLIENT = textwrap.dedent("""
    import json, sys, http.client, threading
    import numpy as np
    host, rows = sys.argv[1], json.loads(sys.argv[2])
    answers = {}
    def work(k):
        conn = http.client.HTTPConnection(host, timeout=30)
        for i in range(10):
            name = "a" if (k + i) % 2 == 0 else "b"
            body = {"inputs": [{"name": "input", "shape": [2, 4], "datatype": "FP32",
                                "data": rows[(k * 10 + i) % len(rows)]}]}
            conn.request("POST", f"/v2/models/{name}/infer", body=json.dumps(body))
            r = conn.getresponse(); out = json.loads(r.read())
            assert r.status == 200, out
            answers.setdefault(name, []).append(out["outputs"][0]["data"])
    ts = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    [t.start() for t in ts]; [t.join() for t in ts]
    print(json.dumps({k: len(v) for k, v in answers.items()}))
""")


def test_requests_for_pipelines_sharing_a_step_batch_together_and_run_it_once(served):
    """8 client threads in another process send 80 two-row requests alternating between pipelines a and b:
    the shared scaler runs once per batch over both pipelines' rows (its row count is every row sent,
    in fewer runs than requests), and each head only over its own pipeline's rows."""
    con, host = served
    rows = [X32[i:i + 2].tolist() for i in range(0, 40, 2)]
    out = subprocess.run([sys.executable, "-c", _CLIENT, host, json.dumps(rows)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"a": 40, "b": 40}
    m = _metrics(host)
    step_rows = {dict(k[1])["step"]: v for k, v in m.items() if k[0] == "modelsql_step_rows_total"}
    step_runs = {dict(k[1])["step"]: v for k, v in m.items() if k[0] == "modelsql_step_seconds_count"}
    assert step_rows["scale"] == 160  # every row of a and b went through the one shared scaler
    heads = [v for k, v in step_rows.items() if k.startswith("head")]
    assert sum(heads) == 160 and len(heads) >= 1
    assert step_runs["scale"] < 80  # batched across requests and across pipelines
    cur = con.cursor()
    cur.execute("SHOW SERVERS")
    rows = {r[1]: r for r in cur.fetchall()}
    assert rows["a"][5] == rows["b"][5] != rows["lookup"][5]  # one batch group for a and b
    assert rows["a"][6:8] == (2, 1)  # two steps, one of them shared


def test_add_and_remove_change_the_resident_set(served, fitted):
    con, host = served
    cur = con.cursor()
    cur.execute("SERVE ADD PIPELINE c")
    assert cur.fetchall()[0][1:] == ("c", "pipeline", "1", "added")
    client = triton.InferenceServerClient(host)
    inp = triton.InferInput("input", [3, 4], "FP32")
    inp.set_data_from_numpy(X32[:3])
    assert (client.infer("c", [inp]).as_numpy("label") == fitted["c"].predict(X[:3])).all()
    cur.execute("SHOW SERVERS")
    rows = {r[1]: r for r in cur.fetchall()}
    assert rows["c"][7] == 1 and rows["c"][5] == rows["a"][5]  # its scaler is the resident one
    cur.execute("SERVE REMOVE PIPELINE a")
    with pytest.raises(triton.InferenceServerException) as ei:
        client.infer("a", [inp])
    assert "a" in str(ei.value)
    assert (client.infer("b", [inp]).as_numpy("label") == fitted["b"].predict(X[:3])).all()
    # the protocol's repository extension: unload and load again
    client.unload_model("b")
    assert not client.is_model_ready("b")
    client.load_model("b")
    assert client.is_model_ready("b")
    client.close()
    with pytest.raises(errors.ProgrammingError) as ei:
        cur.execute("SERVE REMOVE PIPELINE nope")
    assert ei.value.code == "not_served"


def test_reserved_pipeline_gets_its_own_group(served):
    con, host = served
    cur = con.cursor()
    cur.execute("SERVE ADD PIPELINE c (reserved_threads = 1)")
    cur.execute("SHOW SERVERS")
    rows = {r[1]: r for r in cur.fetchall()}
    assert rows["c"][11] == 1 and rows["c"][5] not in (rows["a"][5], rows["b"][5])
    status, out = _post(host, "/v2/models/c/infer", json.dumps(
        {"inputs": [{"name": "input", "shape": [1, 4], "datatype": "FP32", "data": X32[0].tolist()}]}).encode())
    assert status == 200, out


def test_bad_requests_get_protocol_errors_and_the_server_keeps_serving(served):
    con, host = served
    status, out = _post(host, "/v2/models/a/infer", json.dumps(
        {"inputs": [{"name": "features", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}).encode())
    assert status == 400 and "features" in out["error"] and "input" in out["error"]
    status, out = _post(host, "/v2/models/zzz/infer", b"{}")
    assert status == 404 and "zzz" in out["error"]
    # a row ONNX Runtime fails on is named: model, batch and row
    status, out = _post(host, "/v2/models/lookup/infer", json.dumps(
        {"inputs": [{"name": "idx", "shape": [4], "datatype": "INT64", "data": [0, 1, 9, 2]}]}).encode())
    assert status == 400, out
    assert 'model "lookup" version 1' in out["error"] and "row 2" in out["error"], out
    status, out = _post(host, "/v2/models/lookup/infer", json.dumps(
        {"inputs": [{"name": "idx", "shape": [2], "datatype": "INT64", "data": [2, 0]}]}).encode())
    assert status == 200 and out["outputs"][0]["data"] == [4.0, 5.0, 0.0, 1.0]


def test_serve_statement_errors(served):
    con, host = served
    cur = con.cursor()
    with pytest.raises(errors.ProgrammingError) as ei:
        cur.execute("SERVE ADD PIPELINE nope")
    assert ei.value.code == "pipeline_not_found"
    port = int(host.rsplit(":", 1)[1])
    with pytest.raises(errors.OperationalError) as ei:
        cur.execute(f"SERVE PIPELINE a ON PORT {port}")
    assert ei.value.code == "port_in_use"
    with pytest.raises(errors.ProgrammingError) as ei:
        cur.execute("SERVE PIPELINE a ON PORT 0 WITH (max_batch = 3)")
    assert ei.value.code == "unknown_option" and "max_batch_size" in str(ei.value)
    with pytest.raises(errors.ProgrammingError) as ei:
        cur.execute("SERVE PIPELINE a ON PORT 0 WITH (max_batch_size = 0)")
    assert ei.value.code == "invalid_option"
    with pytest.raises(errors.ProgrammingError) as ei:
        cur.execute("SERVE PIPELINE a, PIPELINE a ON PORT 0")
    assert ei.value.code == "duplicate_served_name"
    with pytest.raises(errors.ProgrammingError) as ei:
        cur.execute("STOP SERVER ON PORT 1")
    assert ei.value.code == "server_not_found"
    assert len(SERVERS) == 1
    cur.execute("STOP SERVER")
    assert not SERVERS
    with pytest.raises(errors.ProgrammingError) as ei:
        cur.execute("STOP SERVER")
    assert ei.value.code == "server_not_found"


def test_memory_budget_unloads_idle_steps_and_reloads_them_on_demand(tmp_path, fitted):
    """Three pipelines sharing a scaler under a budget of zero bytes: only steps a request is running stay
    loaded; every request still gets its answer (its steps load again: a cold start)."""
    con = modelsql.connect(str(tmp_path / "budget.duckdb"))
    for name in ("a", "b", "c"):
        con.import_pipeline(name, fitted[name], example_input=X)
    cur = con.cursor()
    cur.execute("SERVE PIPELINE a, PIPELINE b, PIPELINE c ON PORT 0 WITH (memory_budget_mb = 0)")
    host = cur.fetchall()[0][0].split("//")[1]
    try:
        repo = next(iter(SERVERS.values())).repository
        loads = repo.steps.loads
        for name in ("a", "b", "c", "a"):
            status, out = _post(host, f"/v2/models/{name}/infer", json.dumps(
                {"inputs": [{"name": "input", "shape": [2, 4], "datatype": "FP32", "data": X32[:2].ravel().tolist()}]}
            ).encode())
            assert status == 200, out
            assert out["outputs"][0]["data"] == fitted[name].predict(X[:2]).tolist()
        assert repo.steps.evictions > 0 and repo.steps.loads > loads
        cur.execute("SHOW SERVERS")
        assert all(r[8] <= r[6] for r in cur.fetchall())  # loaded_steps <= steps
    finally:
        stop_all()
        con.close()


def test_modelsql_serve_command_serves_until_interrupted(tmp_path, fitted):
    import signal

    db = str(tmp_path / "cli.duckdb")
    con = modelsql.connect(db)
    con.import_pipeline("a", fitted["a"], example_input=X)
    con.close()
    proc = subprocess.Popen([sys.executable, "-m", "modelsql.client.cli", "serve", "-d", db, "--pipeline", "a", "--port", "0",
                             "--max-batch-size", "8"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline()
        assert first.startswith("-- SERVE PIPELINE \"a\" ON HOST '127.0.0.1' PORT 0 WITH (max_batch_size = 8)"), first
        line = proc.stdout.readline()
        assert line.startswith("serving at http://127.0.0.1:"), (line, proc.stderr.read() if proc.poll() else "")
        host = line.split("//")[1].strip()
        status, out = _post(host, "/v2/models/a/infer", json.dumps(
            {"inputs": [{"name": "input", "shape": [1, 4], "datatype": "FP32", "data": X32[100].tolist()}]}).encode())
        assert status == 200 and out["outputs"][0]["data"] == [int(fitted["a"].predict(X[100:101])[0])]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    bad = subprocess.run([sys.executable, "-m", "modelsql.client.cli", "serve", "-d", db], capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and "--pipeline or --model" in bad.stderr


def test_text_pipelines_share_one_fused_featurizer_stage(tmp_path):
    """Two sentiment pipelines over one FeatureUnion(word, char_wb) featurizer: the featurizer's three
    steps (word, char, concatenation) run as one fused stage, once per batch for both pipelines;
    answers equal scikit-learn's, in JSON and in binary (BYTES) mode."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.pipeline import FeatureUnion

    from modelsql.datasets import reviews

    texts, labels = reviews(600)
    fu = FeatureUnion([("word", TfidfVectorizer(ngram_range=(1, 2))),
                       ("char", TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 3)))]).fit(texts)
    feats = fu.transform(texts)
    pipes = {f"t{k}": Pipeline([("features", fu), ("head", LogisticRegression(C=c, max_iter=200).fit(feats, labels))])
             for k, c in enumerate((1.0, 0.1))}
    con = modelsql.connect(str(tmp_path / "text.duckdb"))
    for name, p in pipes.items():
        con.import_pipeline(name, p, example_input=texts[:50], input_name="text")
    cur = con.cursor()
    cur.execute("SERVE PIPELINE t0, PIPELINE t1 ON PORT 0")
    host = cur.fetchall()[0][0].split("//")[1]
    try:
        test, _ = reviews(40, seed=3)
        client = triton.InferenceServerClient(host)
        for k, binary in ((0, False), (1, True)):
            inp = triton.InferInput("text", [len(test)], "BYTES")
            inp.set_data_from_numpy(np.array(test, dtype=object), binary_data=binary)
            res = client.infer(f"t{k}", [inp], outputs=[triton.InferRequestedOutput("label", binary_data=binary)])
            assert (res.as_numpy("label") == pipes[f"t{k}"].predict(test)).all()
        client.close()
        m = _metrics(host)
        stages = {dict(k[1])["step"]: v for k, v in m.items() if k[0] == "modelsql_step_rows_total"}
        assert stages["features.word+features.char+features.concat"] == 2 * len(test), stages
        cur.execute("SHOW SERVERS")
        assert {r[1]: r[6:8] for r in cur.fetchall()} == {"t0": (4, 3), "t1": (4, 3)}
    finally:
        stop_all()
        con.close()


def test_share_structures_runs_heads_of_one_shape_on_one_session(tmp_path, fitted):
    con = modelsql.connect(str(tmp_path / "struct.duckdb"))
    for name in ("a", "b", "c"):
        con.import_pipeline(name, fitted[name], example_input=X)
    cur = con.cursor()
    cur.execute("SERVE PIPELINE a, PIPELINE b, PIPELINE c ON PORT 0 WITH (share_structures = true)")
    host = cur.fetchall()[0][0].split("//")[1]
    try:
        keys = next(iter(SERVERS.values())).repository.steps.loaded_keys()
        assert len([k for k in keys if k.startswith("structure:")]) == 1, keys  # three heads, one session
        for name in ("a", "b", "c"):
            status, out = _post(host, f"/v2/models/{name}/infer", json.dumps(
                {"inputs": [{"name": "input", "shape": [5, 4], "datatype": "FP32",
                             "data": X32[::30].ravel().tolist()}]}).encode())
            assert status == 200, out
            probs = np.array(out["outputs"][1]["data"]).reshape(5, 3)
            np.testing.assert_allclose(probs, fitted[name].predict_proba(X[::30]), atol=1e-5)
            assert out["outputs"][0]["data"] == fitted[name].predict(X[::30]).tolist()
    finally:
        stop_all()
        con.close()


def test_stop_server_records_sampled_run_times_as_traces(served):
    """The server samples one run in SAMPLE_EVERY of each single-model stage; STOP SERVER records them as
    traces (source serve, with features) for the cost model."""
    from modelsql.engine.profile.run_traces import SAMPLE_EVERY

    con, host = served
    body = json.dumps({"inputs": [{"name": "idx", "shape": [3], "datatype": "INT64", "data": [0, 1, 2]}]}).encode()
    for _ in range(SAMPLE_EVERY * 4):
        status, out = _post(host, "/v2/models/lookup/infer", body)
        assert status == 200, out
    port = host.rsplit(":", 1)[1]
    con.execute(f"STOP SERVER ON PORT {port}")
    rows = con.execute("SELECT model, source, batch_size, len(seconds), features IS NOT NULL FROM modelsql.traces "
                       "WHERE model = 'lookup'").fetchall()
    assert rows == [("lookup", "serve", 3, 4, True)]
