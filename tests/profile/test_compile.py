"""COMPILE MODEL and PREDICT(..., backend = 'tvm'): real TVM compiles of small models in a real DuckDB file,
checked against ONNX Runtime, recorded in modelsql.compiled, declined with the reason when TVM cannot
import a model, and every refusal made before anything runs."""

from __future__ import annotations

import numpy as np
import pytest

from modelsql.errors import NotSupportedError, ProgrammingError

from conftest import linear_model

tvm_backend = pytest.importorskip("modelsql.operators.backends.tvm")
if tvm_backend.unavailable_reason() is not None:
    pytest.skip(f"TVM backend unavailable: {tvm_backend.unavailable_reason()}", allow_module_level=True)


@pytest.fixture
def lin(con):
    rng = np.random.default_rng(0)
    con.import_model("lin", linear_model(rng.standard_normal((8, 3)).astype(np.float32)))
    con.execute("CREATE TABLE t AS SELECT " + ", ".join(f"(random() - 0.5)::FLOAT AS c{i}" for i in range(8))
                + " FROM range(300)")
    return con


def _outputs(con, backend: str) -> np.ndarray:
    rows = con.execute(f"SELECT y FROM PREDICT(MODEL lin, TABLE t, backend = '{backend}')").fetchall()
    return np.array([r[0] for r in rows], dtype=np.float32)


def test_compile_checks_records_and_predict_runs_it(lin):
    with pytest.raises(NotSupportedError) as ei:
        lin.execute("SELECT * FROM PREDICT(MODEL lin, TABLE t, backend = 'tvm')")
    assert ei.value.code == "tvm_not_compiled" and "COMPILE MODEL lin VERSION 1 FOR 'llvm'" in str(ei.value)
    assert lin.execute("SELECT count(*) FROM t").fetchone() == (300,)  # the refusal aborted nothing
    row = lin.execute("COMPILE MODEL lin FOR 'llvm'").fetchone()
    assert row[:3] == ("lin", 1, "tvm") and row[4:7] == (0, "checked", None)
    assert '"mcpu"' in row[3] and row[7] <= 1e-4 and row[10] == "none (untuned loops)"
    tvm_out, ort_out = _outputs(lin, "tvm"), _outputs(lin, "onnxruntime")
    np.testing.assert_allclose(tvm_out, ort_out, rtol=1e-5, atol=1e-5)
    stored = lin.execute("SELECT status, digest, nbytes, tvm_version, ffi_version FROM modelsql.compiled").fetchall()
    assert stored[0][0] == "checked" and stored[0][2] > 0 and stored[0][4] == tvm_backend.REQUIRED_FFI
    plan = dict(lin.execute("EXPLAIN SELECT * FROM PREDICT(MODEL lin, TABLE t, backend = 'tvm')").fetchall())
    assert "[tvm, cpu]" in plan["modelsql_plan"]


def test_artifact_survives_reopen_and_goes_with_the_model(db, lin):
    lin.execute("COMPILE MODEL lin FOR 'llvm' WITH (batch_size = 16)")
    expected = _outputs(lin, "onnxruntime")
    lin.close()
    import modelsql
    from modelsql.operators.backends import SESSIONS

    SESSIONS.clear()
    con = modelsql.connect(db)
    rows = con.execute("SELECT y FROM PREDICT(MODEL lin, TABLE t, backend = 'tvm', batch_size = 16)").fetchall()
    np.testing.assert_allclose(np.array([r[0] for r in rows], np.float32), expected, rtol=1e-5, atol=1e-5)
    con.execute("DROP MODEL lin")
    assert con.execute("SELECT count(*) FROM modelsql.compiled").fetchone() == (0,)
    con.close()


def test_a_model_tvm_cannot_import_is_declined_with_the_reason(con):
    """Celu has no converter in TVM's ONNX frontend: COMPILE records the decline naming the node, and
    backend = 'tvm' is refused with that reason while ONNX Runtime still serves the model."""
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Celu", ["x"], ["y"], name="celu1")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    con.import_model("celu", model)
    row = con.execute("COMPILE MODEL celu FOR 'llvm'").fetchone()
    assert row[5] == "declined" and "Celu" in row[6] and "celu1" in row[6]
    assert con.execute("SELECT status, digest FROM modelsql.compiled").fetchone() == ("declined", None)
    con.execute("CREATE TABLE pts AS SELECT -1.0::FLOAT AS a, 2.0::FLOAT AS b")
    with pytest.raises(NotSupportedError) as ei:
        con.execute("SELECT * FROM PREDICT(MODEL celu, TABLE pts, backend = 'tvm')")
    assert ei.value.code == "tvm_declined" and "Celu" in str(ei.value)
    assert con.execute("SELECT y[2] FROM PREDICT(MODEL celu, TABLE pts)").fetchone() == (2.0,)


def test_a_model_tvm_compiles_wrongly_is_declined(con):
    """TVM compiles SpaceToDepth in CRD mode without a word and computes it wrongly (the onnx package's own
    node test case): the check against ONNX Runtime declines it, and nothing is stored."""
    import importlib

    importlib.import_module("onnx.backend.test.case.node.spacetodepth")
    from onnx.backend.test.case import node as cases

    case = next(c for c in cases._NodeTestCases if c.name == "test_spacetodepth_crd_mode_example")
    con.import_model("s2d", case.model)
    row = con.execute("COMPILE MODEL s2d FOR 'llvm'").fetchone()
    assert row[5] == "declined" and "outputs differ from ONNX Runtime" in row[6] and "elements differ" in row[6]
    assert con.execute("SELECT digest FROM modelsql.compiled").fetchone() == (None,)


@pytest.mark.parametrize("sql,cls,code", [
    ("COMPILE MODEL lin FOR 'gpu'", NotSupportedError, "invalid_target"),
    ("COMPILE MODEL lin FOR 'cuda'", NotSupportedError, "device_not_available"),
    ("COMPILE MODEL lin FOR 'llvm' WITH (tune_trials = 8)", ProgrammingError, "invalid_option"),
    ("COMPILE MODEL lin FOR 'llvm' WITH (trials = 8)", ProgrammingError, "unknown_option"),
    ("COMPILE MODEL lin FOR 'llvm' WITH (batch_size = 0)", ProgrammingError, "invalid_option"),
    ("COMPILE MODEL nope FOR 'llvm'", ProgrammingError, "model_not_found"),
    ("COMPILE MODEL lin FOR 42", ProgrammingError, "parse_error"),
])
def test_bad_compile_statements_change_nothing(lin, sql, cls, code):
    import importlib.util

    if code == "device_not_available" and tvm_backend.load_tvm().cuda(0).exist:
        pytest.skip("this machine has a CUDA device")
    with pytest.raises(cls) as ei:
        lin.execute(sql)
    assert ei.value.code == code
    assert lin.execute("SELECT count(*) FROM modelsql.compiled").fetchone() == (0,)
    assert importlib.util.find_spec("tvm") is not None


def test_profile_times_the_checked_tvm_artifact_beside_onnxruntime(lin):
    """PROFILE ... backends = ('onnxruntime', 'tvm') times both builds on the same inputs; the TVM traces say
    so in their features, and only ONNX Runtime's carry per-operator times. Without an artifact it is refused."""
    with pytest.raises(NotSupportedError) as ei:
        lin.execute("PROFILE MODEL lin WITH (backends = ('tvm'))")
    assert ei.value.code == "tvm_not_compiled"
    lin.execute("COMPILE MODEL lin FOR 'llvm'")
    rows = lin.execute("PROFILE MODEL lin WITH (backends = ('onnxruntime', 'tvm'), batch_sizes = (1, 32), "
                       "repeat = 3, train_cost_model = false)").fetchall()
    assert [(r[1], r[3]) for r in rows] == [("onnxruntime", 1), ("onnxruntime", 32), ("tvm", 1), ("tvm", 32)]
    assert all(r[5] > 0 for r in rows)
    backends = lin.execute("SELECT t.backend, json_extract_string(t.features, '$.backend'), count(o.trace) "
                           "FROM modelsql.traces t LEFT JOIN modelsql.trace_operators o USING (trace) "
                           "GROUP BY ALL ORDER BY 1").fetchall()
    assert [b[:2] for b in backends] == [("onnxruntime", "onnxruntime"), ("tvm", "tvm")]
    assert backends[0][2] > 0 and backends[1][2] == 0


def test_explain_weighs_the_checked_artifact_against_onnxruntime(lin):
    """With a checked artifact and traces of both backends, EXPLAIN of a PREDICT that names no backend says
    which backend the cost model chose and estimates the one it rejected; naming a backend forces it."""
    lin.execute("COMPILE MODEL lin FOR 'llvm'")
    plan = dict(lin.execute("EXPLAIN SELECT * FROM PREDICT(MODEL lin, TABLE t)").fetchall())["modelsql_plan"]
    assert "no traces of it to estimate it by" in plan  # no traces yet: ONNX Runtime, and why
    lin.execute("PROFILE MODEL lin WITH (backends = ('onnxruntime', 'tvm'), batch_sizes = (1, 64, 512), "
                "threads = (1, 2), repeat = 5, operators = false)")
    plan = dict(lin.execute("EXPLAIN SELECT * FROM PREDICT(MODEL lin, TABLE t)").fetchall())["modelsql_plan"]
    line = next(x for x in plan.splitlines() if x.strip().startswith("backend:"))
    assert "rejected: " in line and "estimated" in line and "ms" in line
    chosen = "tvm" if line.strip().startswith("backend: tvm") else "onnxruntime"
    assert f"[{chosen}, cpu]" in plan
    forced = dict(lin.execute("EXPLAIN SELECT * FROM PREDICT(MODEL lin, TABLE t, backend = 'onnxruntime')")
                  .fetchall())["modelsql_plan"]
    assert "[onnxruntime, cpu]" in forced and "backend = 'onnxruntime' was asked for" in forced


def test_the_backend_rule_needs_a_clear_gain(lin):
    """choose_backend runs TVM only when the estimate is 1.5x better (here from a cost model that predicts
    fixed times per backend), and always says why."""
    from dataclasses import replace

    from modelsql.engine.query import cost
    from modelsql.engine.query.learned_costs import Costs

    lin.execute("COMPILE MODEL lin FOR 'llvm'")
    session = lin._session
    from modelsql.engine.query_handler import plan_query
    from modelsql.sql import parse

    scan = plan_query(parse("SELECT * FROM PREDICT(MODEL lin, TABLE t)")[0], session, []).scans[0]
    assert scan.tvm is not None and scan.tvm.status == "checked"
    fast = Costs(predict=lambda rows: [0.1 if r["backend"] == "tvm" else 1.0 for r in rows], store=session.store,
                 source="test costs")
    assert cost.choose_execution(scan, fast).backend == "tvm"
    slow = Costs(predict=lambda rows: [0.9 if r["backend"] == "tvm" else 1.0 for r in rows], store=session.store,
                 source="test costs")
    choice = cost.choose_execution(scan, slow)
    assert choice.backend == "onnxruntime" and "under 1.5x" in choice.backend_rejected[0][1]
    given = cost.choose_execution(replace(scan, options=replace(scan.options, backend="onnxruntime",
                                                                backend_given=True)), fast)
    assert given.backend == "onnxruntime"


# ---------------------------------------------------------------- CUDA (issue 24)

from modelsql.operators.backends import devices  # noqa: E402

_CUDA_REASON = "needs a CUDA device (onnxruntime-gpu and an NVIDIA driver)"


def _cuda_ready() -> bool:
    return devices.cuda_available() and tvm_backend.cuda_unavailable_reason(0) is None


@pytest.mark.parametrize("kind", ["cuda", "cuda:1"])
def test_compile_for_cuda_without_cuda_is_refused_naming_what_is_missing(lin, monkeypatch, kind):
    """MODELSQL_DEVICES=cpu hides any GPU: COMPILE ... FOR 'cuda' is refused before anything is built, naming
    each missing piece, and PREDICT on a CUDA device is refused as well."""
    from modelsql.engine.artifacts import compiled

    monkeypatch.setenv("MODELSQL_DEVICES", "cpu")
    with pytest.raises(NotSupportedError) as ei:
        lin.execute(f"COMPILE MODEL lin FOR '{kind}'")
    assert ei.value.code == "device_not_available"
    assert f"FOR '{kind}'" in str(ei.value) and f"MODELSQL_DEVICES=cpu does not list cuda:{kind[5:] or 0}" in str(ei.value)
    assert lin.execute("SELECT count(*) FROM modelsql.compiled").fetchone() == (0,)
    session = lin._session
    mv = session.get_model("lin", None, None)
    with pytest.raises(NotSupportedError) as ei:
        compiled.require_artifact(session, mv, device="cuda:0")
    assert ei.value.code == "device_not_available"


def test_a_cuda_artifact_is_passed_over_where_cuda_is_absent(lin, monkeypatch):
    """A version compiled on a GPU machine and planned on one without (here: a GPU hidden by MODELSQL_DEVICES)
    runs its CPU artifact; without one the refusal names the CPU target."""
    from dataclasses import replace

    from modelsql.engine.artifacts import compiled

    monkeypatch.setenv("MODELSQL_DEVICES", "cpu")
    session = lin._session
    mv = session.get_model("lin", None, None)
    lin.execute("COMPILE MODEL lin FOR 'llvm'")
    cpu_row = session.catalog.compiled.of_model("lin")[0]
    cuda_row = replace(cpu_row, target='{"arch":"sm_90","kind":"cuda"}')
    with session.catalog.transaction(join=False):
        session.catalog.compiled.put(cuda_row)
    assert compiled.tvm_device(session, mv) == "cpu"
    np.testing.assert_allclose(_outputs(lin, "tvm"), _outputs(lin, "onnxruntime"), rtol=1e-5, atol=1e-5)


def _cuda_table(con, name: str, shape: tuple, rows: int = 200) -> np.ndarray:
    x = np.random.default_rng(7).uniform(-0.5, 0.5, (rows, *shape)).astype(np.float32)
    typ = "FLOAT" + "".join(f"[{d}]" for d in reversed(shape if len(shape) == 1 else shape[1:]))
    con.execute(f"CREATE TABLE {name} (id INTEGER, x {typ})")
    con.executemany(f"INSERT INTO {name} VALUES (?, ?)",
                    [(i, (r if len(shape) == 1 else r[0]).tolist()) for i, r in enumerate(x)])
    return x


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda_ready(), reason=_CUDA_REASON)
@pytest.mark.parametrize("name,shape", [("mlp", (16,)), ("cnn", (1, 8, 8))])
def test_compile_for_cuda_checks_it_and_predict_runs_it_on_the_gpu(con, name, shape):
    """COMPILE ... FOR 'cuda' builds with DLight's default schedules and checks against ONNX Runtime CUDA;
    PREDICT(..., backend = 'tvm') runs the artifact on cuda:0 and agrees with ONNX Runtime on the CPU (full
    fp32) and on CUDA (which rounds matrix products to TF32 by default)."""
    import tvm_fixtures

    from modelsql.operators.backends.onnxruntime import OrtModel
    from modelsql.engine.artifacts import compiled

    model = getattr(tvm_fixtures, name)()
    con.import_model(name, model)
    x = _cuda_table(con, "imgs", shape)
    row = con.execute(f"COMPILE MODEL {name} FOR 'cuda'").fetchone()
    assert row[5] == "checked", row[6]
    assert '"kind":"cuda"' in row[3] and row[10] == "DLight default GPU schedules (untuned)"
    session = con._session
    assert compiled.tvm_device(session, session.get_model(name, None, None)) == "cuda:0"
    got = np.array([r[0] for r in con.execute(
        f"SELECT y FROM PREDICT(MODEL {name}, TABLE imgs, backend = 'tvm') ORDER BY id").fetchall()], np.float32)
    np.testing.assert_allclose(got, OrtModel(model, "cpu reference").run({"x": x})[0], atol=1e-4, rtol=1e-3)
    cuda = OrtModel(model, "cuda reference", device="cuda:0").run({"x": x})[0]
    np.testing.assert_allclose(got, cuda, atol=2e-3, rtol=1e-2)


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda_ready(), reason=_CUDA_REASON)
def test_compile_for_cuda_declines_with_the_reason(con, monkeypatch):
    """On a GPU machine too: a model TVM cannot import, and a build past its time limit, are declined with the
    reason (nothing stored); tuning on CUDA is refused before anything is built."""
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Celu", ["x"], ["y"], name="celu1")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    con.import_model("celu", model)
    row = con.execute("COMPILE MODEL celu FOR 'cuda'").fetchone()
    assert row[5] == "declined" and "Celu" in row[6]
    import tvm_fixtures

    con.import_model("mlp", tvm_fixtures.mlp())
    monkeypatch.setenv("MODELSQL_TVM_BUILD_TIMEOUT_S", "0.05")
    row = con.execute("COMPILE MODEL mlp FOR 'cuda'").fetchone()
    assert row[5] == "declined" and "within 0.05 s" in row[6]
    assert con.execute("SELECT count(*) FROM modelsql.compiled WHERE digest IS NOT NULL").fetchone() == (0,)
    with pytest.raises(NotSupportedError) as ei:
        con.execute("COMPILE MODEL mlp FOR 'cuda' WITH (tune_trials = 4, batch_size = 8)")
    assert ei.value.code == "invalid_target"
