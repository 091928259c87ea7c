"""NetFuse on a CUDA device (issue 24, part 4): the device reaches the routed and shared-family runners,
``merge_gain.estimate`` weighs members, members captured and merged on the device, and, where there is a
GPU (tests marked ``gpu``), routed PREDICTs on ``cuda`` answer as on the CPU with captured merged runs.

The CPU tests hide any GPU with ``MODELSQL_DEVICES=cpu`` so they check the same thing on every machine.

Tolerance on CUDA: cuBLAS/cuDNN pick other kernels than the CPU's MLAS, so float32 outputs differ in the last
digits; :data:`CUDA_RTOL` bounds ``max |cuda - cpu| / max |cpu|`` (the merged graphs in the H200 measurements
differed from their members by at most 3e-4 relative).
"""

from __future__ import annotations

import numpy as np
import pytest

import modelsql
from modelsql.datasets import architectures as A
from modelsql.errors import NotSupportedError
from modelsql.operators.backends import devices
from modelsql.engine.artifacts import merge_gain

CUDA_RTOL = 1e-3
"""Largest relative difference accepted between a routed PREDICT on CUDA and on the CPU."""
N_MEMBERS = 4
SIZES = (8, 16, 4)

needs_cuda = pytest.mark.skipif(not devices.cuda_available(),
                                reason="needs a CUDA device (onnxruntime-gpu and an NVIDIA driver)")


@pytest.fixture
def db(tmp_path):
    """A database with a family of four small MLPs (m0..m3) and 40 routed rows (``req``)."""
    con = modelsql.connect(str(tmp_path / "nfg.duckdb"))
    cur = con.cursor()
    for i, data in enumerate(A.family("mlp", N_MEMBERS, sizes=SIZES, seed=11)):
        path = tmp_path / f"m{i}.onnx"
        path.write_bytes(data)
        cur.execute(f"CREATE MODEL m{i} FROM '{path}'")
    x = np.random.default_rng(0).standard_normal((40, SIZES[0])).astype(np.float32)
    cur.execute("CREATE TABLE req (id INTEGER, model_name VARCHAR, input FLOAT[8])")
    cur.executemany("INSERT INTO req VALUES (?, ?, ?)", [(i, f"m{i % N_MEMBERS}", x[i].tolist()) for i in range(40)])
    con.commit()
    yield con, cur
    con.close()


ROUTED = ("SELECT id, output FROM PREDICT(MODELS (m0, m1, m2, m3) ROUTE BY model_name, TABLE req, "
          "merge = '{merge}', device = '{device}') ORDER BY id")


def test_cuda_asked_without_a_gpu_is_refused_and_the_catalog_unchanged(db, monkeypatch):
    monkeypatch.setenv("MODELSQL_DEVICES", "cpu")
    con, cur = db
    before = cur.execute("SELECT count(*) FROM modelsql.merged_graphs").fetchall()
    with pytest.raises(NotSupportedError) as err:
        cur.execute(ROUTED.format(merge="always", device="cuda"))
    assert err.value.code == "device_not_available"
    assert "Traceback" not in str(err.value)
    assert cur.execute("SELECT count(*) FROM modelsql.merged_graphs").fetchall() == before


def test_routed_on_the_cpu_unchanged_when_a_gpu_is_hidden(db, monkeypatch):
    monkeypatch.setenv("MODELSQL_DEVICES", "cpu")
    con, cur = db
    auto = cur.execute(ROUTED.format(merge="always", device="auto")).fetchall()
    cpu = cur.execute(ROUTED.format(merge="always", device="cpu")).fetchall()
    assert auto == cpu and len(cpu) == 40
    plan = "\n".join(r[1] for r in cur.execute("EXPLAIN " + ROUTED.format(merge="auto", device="cpu")).fetchall())
    assert "merge:" in plan and "cuda" not in plan


def test_the_device_reaches_the_routed_runner(db, monkeypatch):
    """physical.routed_model hands the scan's device to merged_models.routed_session."""
    from modelsql.engine.artifacts import merged as merged_models
    from modelsql.engine.query import physical

    monkeypatch.setenv("MODELSQL_DEVICES", "cpu")
    seen = []
    original = merged_models.routed_session

    def spy(*args, **kwargs):
        seen.append(kwargs.get("device"))
        return original(*args, **kwargs)

    monkeypatch.setattr(physical.merged_models, "routed_session", spy)
    con, cur = db
    cur.execute(ROUTED.format(merge="always", device="cpu")).fetchall()
    assert seen and set(seen) == {"cpu"}


SMALL_RESNET = merge_gain.MemberCost(flops=5.55e6, conv_flops=5.53e6, gemm_flops=2560.0, nodes=49,
                                     param_bytes=700_000)
"""Static features of a width-16 ResNet-18 at 32x32 (``static_features`` of the benchmark's member)."""
RESNET50 = merge_gain.MemberCost(flops=8.2e9, conv_flops=8.1e9, gemm_flops=4.1e6, nodes=122, param_bytes=102_000_000)


def test_gpu_rule_merges_32_small_models_at_one_row():
    est = merge_gain.estimate(SMALL_RESNET, 32, [1.0] * 32, device="cuda:0")
    assert est.merge and est.policy == "merged" and est.device == "cuda:0"
    costs = dict(est.estimates)
    assert set(costs) == set(merge_gain.GPU_POLICIES)
    assert costs["merged"] < costs["members_captured"] < costs["members"]
    assert "members_captured" in est.reason and "members " in est.reason  # EXPLAIN names the rejected ones


def test_gpu_rule_keeps_big_members_apart_and_the_cpu_rule_is_unchanged():
    est = merge_gain.estimate(RESNET50, 32, [8.0] * 32, device="cuda:0")
    assert not est.merge and est.policy == "members_captured"
    one = merge_gain.estimate(SMALL_RESNET, 1, [1.0], device="cuda:0")
    assert not one.merge
    cpu = merge_gain.estimate(SMALL_RESNET, 32, [1.0] * 32)
    assert cpu == merge_gain.estimate(SMALL_RESNET, 32, [1.0] * 32, device="cpu") and cpu.device == "cpu"


def test_gpu_rule_takes_the_learned_traces_of_the_device():
    calls = []

    def learned(rows, factor):
        calls.append((rows, factor))
        return 0.1 if factor == 1 else 50.0  # merged runs traced slow on this device

    est = merge_gain.estimate(SMALL_RESNET, 32, [1.0] * 32, device="cuda:0", learned=learned)
    assert not est.merge and est.policy == "members_captured"
    assert (1.0, 32) in calls and "learned cost model" in est.reason


@pytest.mark.gpu
@needs_cuda
def test_routed_predict_on_cuda_equals_the_cpu(db):
    con, cur = db
    cpu = cur.execute(ROUTED.format(merge="always", device="cpu")).fetchall()
    for merge in ("always", "never"):
        gpu = cur.execute(ROUTED.format(merge=merge, device="cuda")).fetchall()
        assert [r[0] for r in gpu] == [r[0] for r in cpu]
        a, b = np.array([r[1] for r in gpu]), np.array([r[1] for r in cpu])
        assert np.max(np.abs(a - b)) <= CUDA_RTOL * max(1.0, float(np.max(np.abs(b))))


@pytest.mark.gpu
@needs_cuda
def test_merged_runs_on_cuda_are_captured(db):
    from modelsql.operators.backends import SESSIONS

    con, cur = db
    text = "\n".join(r[1] for r in cur.execute("EXPLAIN ANALYZE " + ROUTED.format(merge="always", device="cuda"))
                     .fetchall())
    assert "merge: yes" in text and "merged runs" in text
    merged = [m for k, m in SESSIONS.items() if k.device == "cuda:0" and dict(k.options).get("merged")]
    assert merged, "no merged graph was loaded on cuda:0"
    for model in merged:
        assert model.capture_declined is None, model.capture_declined
        assert model.replays() >= 1
