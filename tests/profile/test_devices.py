"""Devices in the plan (issue 24): the ``device`` option, the cost function's device choice, EXPLAIN, SERVE,
and, on a machine with CUDA (tests marked ``gpu``), CUDA sessions with captured CUDA graphs.

The CPU tests run everywhere; a GPU, where there is one, is hidden from them with ``MODELSQL_DEVICES=cpu``
so they check the same thing on both machines. The ``gpu`` tests skip with the reason where CUDA is absent.

Tolerances on CUDA (documented at each check): cuDNN and cuBLAS pick other kernels than the CPU's MLAS, so a
float32 network's outputs differ in the last digits; :data:`CUDA_RTOL` bounds the difference relative to the
output's largest magnitude (measured on an H200: 2e-4 for ResNet-50, 5e-5 for a small CNN).
"""

from __future__ import annotations

import json
import threading
import urllib.request

import numpy as np
import pytest

import modelsql
from modelsql.errors import NotSupportedError, ProgrammingError
from modelsql.operators.backends import devices
from modelsql.operators.backends.cuda import BUCKETS, bucket_of
from modelsql.engine.query import cost

torch = pytest.importorskip("torch")

CUDA_RTOL = 1e-3
"""Largest |cuda - cpu| / max|cpu| accepted for a float32 network (see the module docstring)."""


def _cnn_onnx(path, width: int = 8, size: int = 16) -> None:
    from modelsql.datasets import architectures

    module = architectures.resnet18(num_classes=10, width=width).eval()
    example = np.random.default_rng(0).standard_normal((2, 3, size, size)).astype(np.float32)
    path.write_bytes(architectures.export_onnx(module, example))


@pytest.fixture
def cnn_onnx(tmp_path):
    """A small ResNet as an ONNX file (input [N, 3, 16, 16], 10 outputs)."""
    _cnn_onnx(tmp_path / "cnn.onnx")
    return tmp_path / "cnn.onnx"


@pytest.fixture
def cnn_db(tmp_path, cnn_onnx):
    """A database with the small ResNet (``cnn``) and 40 image rows (``imgs``)."""
    conn = modelsql.connect(str(tmp_path / "db.duckdb"))
    cur = conn.cursor()
    cur.execute(f"IMPORT MODEL cnn FROM '{cnn_onnx}'")
    rng = np.random.default_rng(1)
    rows = [(i, rng.standard_normal(3 * 16 * 16).astype(np.float32).tolist()) for i in range(40)]
    cur.execute("CREATE TABLE imgs (id INTEGER, input FLOAT[])")
    cur.executemany("INSERT INTO imgs VALUES (?, ?)", rows)
    conn.commit()
    yield conn
    conn.close()


@pytest.fixture
def cpu_only(monkeypatch):
    monkeypatch.setenv("MODELSQL_DEVICES", "cpu")


# ------------------------------------------------------------------ the option


@pytest.mark.parametrize("text, device", [("auto", "auto"), ("cpu", "cpu"), ("CPU", "cpu"), ("cuda", "cuda:0"),
                                          ("cuda:1", "cuda:1"), (" cuda:0 ", "cuda:0")])
def test_device_option_is_normalised(text, device):
    assert devices.parse(text, "PREDICT") == device


@pytest.mark.parametrize("text", ["gpu", "cpu:0", "cuda:", "cuda:x", "", None, 3])
def test_a_bad_device_is_invalid_option(text):
    with pytest.raises(ProgrammingError) as e:
        devices.parse(text, "PREDICT(MODEL m)")
    assert e.value.code == "invalid_option" and "PREDICT(MODEL m)" in str(e.value) and "'cuda:N'" in str(e.value)


def test_cpu_is_always_available_and_first():
    assert devices.available()[0] == "cpu"
    assert devices.ort_providers("cpu") == ["CPUExecutionProvider"]
    assert devices.ort_providers("cuda:1", cuda_graph=True)[0] == (
        "CUDAExecutionProvider", {"device_id": "1", "enable_cuda_graph": "1"})


def test_an_absent_device_is_refused_naming_what_there_is(cnn_db, cpu_only):
    cur = cnn_db.cursor()
    before = cur.execute("SELECT count(*) FROM modelsql.models").fetchone()
    with pytest.raises(NotSupportedError) as e:
        cur.execute("SELECT id, output FROM PREDICT(MODEL cnn, TABLE imgs, device = 'cuda')")
    assert e.value.code == "device_not_available"
    assert "cuda:0" in str(e.value) and "available: cpu" in str(e.value)
    assert cur.execute("SELECT count(*) FROM modelsql.models").fetchone() == before
    # the connection stays usable
    assert len(cur.execute("SELECT id FROM PREDICT(MODEL cnn, TABLE imgs, device = 'cpu')").fetchall()) == 40


def test_device_null_and_unknown_are_refused(cnn_db):
    cur = cnn_db.cursor()
    for bad in ("NULL", "'tpu'"):
        with pytest.raises(ProgrammingError) as e:
            cur.execute(f"SELECT id FROM PREDICT(MODEL cnn, TABLE imgs, device = {bad})")
        assert e.value.code == "invalid_option"


def test_cpu_device_gives_the_answers_of_the_default_plan(cnn_db, cpu_only):
    cur = cnn_db.cursor()
    a = cur.execute("SELECT id, output FROM PREDICT(MODEL cnn, TABLE imgs) ORDER BY id").fetchall()
    b = cur.execute("SELECT id, output FROM PREDICT(MODEL cnn, TABLE imgs, device = 'cpu') ORDER BY id").fetchall()
    assert a == b


# ------------------------------------------------------------------ EXPLAIN and the cost function


def _plan(cur, sql: str) -> str:
    rows = cur.execute("EXPLAIN " + sql).fetchall()
    return dict(rows)["modelsql_plan"]


def test_explain_names_the_device_and_why(cnn_db, cpu_only):
    cur = cnn_db.cursor()
    auto = _plan(cur, "SELECT id, output FROM PREDICT(MODEL cnn, TABLE imgs)")
    assert "[onnxruntime, cpu]" in auto
    assert "device:" not in auto  # the CPU alone: nothing was weighed
    asked = _plan(cur, "SELECT id, output FROM PREDICT(MODEL cnn, TABLE imgs, device = 'cpu')")
    assert "device: cpu (device = 'cpu' was asked for)" in asked


def test_the_cuda_estimate_favours_big_models_over_many_rows():
    """The default CUDA estimate (no traces): a fixed run cost, the copies, inference CUDA_SPEEDUP times faster."""
    assert cost.CUDA_SPEEDUP > 1 and cost.CUDA_RUN_MS > 0 and cost.H2D_BYTES_PER_MS > 0
    # a 25M-parameter network over 256 rows: inference dominates the CPU's estimate
    cpu_ms = 256 * 25_000_000 * cost.PS_PER_PARAM_ROW / 1e9
    cuda_ms = cost.CUDA_RUN_MS + cpu_ms / cost.CUDA_SPEEDUP
    assert cpu_ms / cuda_ms > cost.DEVICE_MIN_GAIN
    # a 1,000-parameter model over 10 rows: one CUDA run costs more than the CPU's whole inference
    small = 10 * 1_000 * cost.PS_PER_PARAM_ROW / 1e9
    assert small < cost.CUDA_RUN_MS


def test_buckets_pad_to_the_next_power_of_two():
    assert BUCKETS[0] == 1 and all(b * 2 == c for b, c in zip(BUCKETS, BUCKETS[1:]))
    assert [bucket_of(n) for n in (1, 2, 3, 5, 17, 256)] == [1, 2, 4, 8, 32, 256]


# ------------------------------------------------------------------ SERVE


def test_serve_refuses_an_absent_device_and_shows_the_device(cnn_db, cpu_only):
    cur = cnn_db.cursor()
    with pytest.raises(NotSupportedError) as e:
        cur.execute("SERVE MODEL cnn ON PORT 0 WITH (device = 'cuda')")
    assert e.value.code == "device_not_available"
    assert cur.execute("SHOW SERVERS").fetchall() == []
    with pytest.raises(ProgrammingError) as e:
        cur.execute("SERVE MODEL cnn ON PORT 0 WITH (devices = 'cpu')")
    assert e.value.code == "unknown_option" and "device" in str(e.value)
    cur.execute("SERVE MODEL cnn ON PORT 0 WITH (device = 'cpu')")
    try:
        cols = [d[0] for d in cur.execute("SHOW SERVERS").description]
        row = dict(zip(cols, cur.fetchall()[0]))
        assert row["device"] == "cpu" and row["captured"] is None
    finally:
        cur.execute("STOP SERVER")


# ------------------------------------------------------------------ on a GPU


def _cpu_outputs(cur, sql: str):
    return np.array([r[1] for r in cur.execute(sql.format(device="cpu")).fetchall()], dtype=np.float64)


def _close(got, want, rtol=CUDA_RTOL):
    scale = max(float(np.max(np.abs(want))), 1.0)
    return float(np.max(np.abs(np.asarray(got, dtype=np.float64) - want))) <= rtol * scale


@pytest.mark.gpu
def test_predict_on_cuda_agrees_with_the_cpu_and_explain_says_so(cnn_db):
    cur = cnn_db.cursor()
    sql = "SELECT id, output FROM PREDICT(MODEL cnn, TABLE imgs, device = '{device}') ORDER BY id"
    want = _cpu_outputs(cur, sql)
    got = np.array([r[1] for r in cur.execute(sql.format(device="cuda")).fetchall()])
    assert _close(got, want)
    assert (got.argmax(1) == want.argmax(1)).mean() >= 0.95
    plan = _plan(cur, sql.format(device="cuda"))
    assert "[onnxruntime, cuda:0]" in plan and "device: cuda:0 (device = 'cuda' was asked for)" in plan
    assert "cuda graphs:" in plan


@pytest.mark.gpu
def test_a_captured_replay_equals_an_uncaptured_run(tmp_path):
    """Nimble's replay computes what an ordinary CUDA run computes, bit for bit, for every bucket it pads to."""
    from modelsql.operators.backends.cuda import CudaModel
    from modelsql.operators.backends.onnxruntime import OrtModel

    _cnn_onnx(tmp_path / "cnn.onnx")
    data = (tmp_path / "cnn.onnx").read_bytes()
    captured = CudaModel(data, "cnn", "cuda:0")
    plain = OrtModel(data, "cnn", device="cuda:0")
    rng = np.random.default_rng(2)
    for n in (1, 3, 8, 300):
        x = rng.standard_normal((n, 3, 16, 16)).astype(np.float32)
        got = captured.run({captured.input_names[0]: x})[0]
        want = plain.run({captured.input_names[0]: x})[0]
        assert got.shape == want.shape
        assert _close(got, want, rtol=1e-5)
    assert captured.capture_declined is None, captured.capture_declined
    assert captured.replays() >= 4
    assert "captured: 1 row, 4 rows, 8 rows" in captured.explain() or "256 rows" in captured.explain()


@pytest.mark.gpu
def test_threads_share_a_captured_model(tmp_path):
    from modelsql.operators.backends.cuda import CudaModel

    _cnn_onnx(tmp_path / "cnn.onnx")
    model = CudaModel((tmp_path / "cnn.onnx").read_bytes(), "cnn", "cuda:0")
    name = model.input_names[0]
    xs = [np.random.default_rng(i).standard_normal((1, 3, 16, 16)).astype(np.float32) for i in range(8)]
    want = [model.run({name: x})[0] for x in xs]
    got: dict = {}

    def work(i):
        for _ in range(20):
            got[i] = model.run({name: xs[i]})[0]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(np.array_equal(got[i], want[i]) for i in range(8))


@pytest.mark.gpu
def test_serve_on_cuda_answers_as_the_cpu_and_shows_what_is_captured(cnn_db, cnn_onnx):
    cur = cnn_db.cursor()
    url = cur.execute("SERVE MODEL cnn ON PORT 0 WITH (device = 'cuda')").fetchall()[0][0]
    try:
        x = np.random.default_rng(3).standard_normal((3, 3, 16, 16)).astype(np.float32)
        body = {"inputs": [{"name": "input", "shape": list(x.shape), "datatype": "FP32",
                            "data": x.ravel().tolist()}]}
        meta = json.loads(urllib.request.urlopen(f"{url}/v2/models/cnn").read())
        body["inputs"][0]["name"] = meta["inputs"][0]["name"]
        req = urllib.request.Request(f"{url}/v2/models/cnn/infer", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        out = json.loads(urllib.request.urlopen(req).read())["outputs"][0]
        got = np.array(out["data"], dtype=np.float64).reshape(out["shape"])
        from modelsql.operators.backends.onnxruntime import OrtModel

        cpu = OrtModel((cnn_onnx).read_bytes(), "cnn")
        want = cpu.run({cpu.input_names[0]: x})[0]
        assert _close(got, want)
        cols = [d[0] for d in cur.execute("SHOW SERVERS").description]
        row = dict(zip(cols, cur.fetchall()[0]))
        assert row["device"] == "cuda:0" and "captured" in (row["captured"] or "")
    finally:
        cur.execute("STOP SERVER")


# ------------------------------------------------------------------ PROFILE per device


def test_profile_measures_the_devices_present_and_refuses_absent_ones(cnn_db, cpu_only):
    cur = cnn_db.cursor()
    before = cur.execute("SELECT count(*) FROM modelsql.traces").fetchone()[0]
    with pytest.raises(NotSupportedError) as e:
        cur.execute("PROFILE MODEL cnn WITH (devices = ('cpu', 'cuda'), batch_sizes = 1, repeat = 2, "
                    "operators = false, train_cost_model = false)")
    assert e.value.code == "device_not_available"
    with pytest.raises(ProgrammingError) as e:
        cur.execute("PROFILE MODEL cnn WITH (devices = ('cpu', 'cpu'), batch_sizes = 1, repeat = 2)")
    assert e.value.code == "invalid_option"
    assert cur.execute("SELECT count(*) FROM modelsql.traces").fetchone()[0] == before
    cur.execute("PROFILE MODEL cnn WITH (batch_sizes = (1, 2), repeat = 2, operators = false, "
                "train_cost_model = false)")
    assert [d[0] for d in cur.description][-1] == "device" and {r[-1] for r in cur.fetchall()} == {"cpu"}
    assert {r[0] for r in cur.execute("SELECT DISTINCT device FROM modelsql.traces").fetchall()} == {"cpu"}


@pytest.mark.gpu
def test_profile_traces_each_cuda_device_with_its_device_feature(cnn_db):
    cur = cnn_db.cursor()
    cur.execute("PROFILE MODEL cnn WITH (batch_sizes = (1, 8), repeat = 3, operators = false, "
                "train_cost_model = false)")
    rows = cur.execute("SELECT device, batch_size, json_extract_string(features, '$.device') FROM modelsql.traces "
                       "ORDER BY device, batch_size").fetchall()
    assert ("cuda:0", 1, "cuda") in rows and ("cpu", 1, "cpu") in rows


# ------------------------------------------------------------------ MODELSQL_DEVICES and odd values


@pytest.mark.parametrize("value", ["cuda:0", "cuda", "auto", "cpu,cuda:0", " , "])
def test_the_cpu_stays_whatever_modelsql_devices_names(monkeypatch, value):
    monkeypatch.setenv("MODELSQL_DEVICES", value)
    assert devices.available()[0] == "cpu"
    assert devices.require("cpu", "PREDICT") == "cpu"


def test_modelsql_devices_auto_means_detection(monkeypatch):
    monkeypatch.delenv("MODELSQL_DEVICES", raising=False)
    detected = devices.available()
    monkeypatch.setenv("MODELSQL_DEVICES", "auto")
    assert devices.available() == detected


def test_a_bad_modelsql_devices_is_an_environment_error_for_every_statement(cnn_db, monkeypatch):
    from modelsql.errors import OperationalError

    monkeypatch.setenv("MODELSQL_DEVICES", "garbage")
    cur = cnn_db.cursor()
    for option in ("", ", device = 'cpu'", ", device = 'cuda'"):
        with pytest.raises(OperationalError) as e:
            cur.execute(f"SELECT id FROM PREDICT(MODEL cnn, TABLE imgs{option})")
        assert e.value.code == "bad_environment" and "MODELSQL_DEVICES" in str(e.value)
    monkeypatch.delenv("MODELSQL_DEVICES")
    assert len(cur.execute("SELECT id FROM PREDICT(MODEL cnn, TABLE imgs, device = 'cpu')").fetchall()) == 40


@pytest.mark.parametrize("value, shown", [("TRUE", "not TRUE"), ("'cuda:\u0661'", "cuda:\u0661")])
def test_odd_device_values_are_refused_as_written(cnn_db, value, shown):
    with pytest.raises(ProgrammingError) as e:
        cnn_db.cursor().execute(f"SELECT id FROM PREDICT(MODEL cnn, TABLE imgs, device = {value})")
    assert e.value.code == "invalid_option" and shown in str(e.value)


def test_a_trainable_factory_takes_no_device(tmp_path):
    conn = modelsql.connect(str(tmp_path / "t.duckdb"))
    cur = conn.cursor()
    with pytest.raises(ProgrammingError) as e:
        cur.execute("CREATE MODEL tm FROM PYTHON 'modelsql.zoo:mlp' WITH (hidden = 4, device = 'cpu')")
    assert e.value.code == "invalid_option" and "TUNE" in str(e.value)
    assert cur.execute("SELECT count(*) FROM modelsql.trainables").fetchone()[0] == 0
    conn.close()


def test_the_shells_serve_takes_a_device():
    import argparse

    from modelsql.client import cli_serve

    parser = cli_serve.add_parser(argparse.ArgumentParser().add_subparsers())
    args = parser.parse_args(["--model", "m", "--port", "0", "--device", "cuda:1"])
    assert cli_serve.serve_statement(args).endswith("WITH (device = 'cuda:1')")
    args = parser.parse_args(["--model", "m", "--threads", "2", "--device", "x'y"])
    assert cli_serve.serve_statement(args).endswith("WITH (threads = 2, device = 'x''y')")
