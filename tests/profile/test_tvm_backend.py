"""The TVM backend as a library (modelsql/operators/backends/tvm.py, tvm_check.py): compiling ONNX
models with TVM Relax, running them as BackendModels, refusing what TVM cannot import, and catching
what it imports wrongly by checking against ONNX Runtime.

Real models only: small torch modules exported with the legacy exporter (dynamic batch), a
scikit-learn LogisticRegression fitted on the iris data it ships, ONNX graphs built node by node,
and the onnx package's own backend node test cases. Skipped as a whole when TVM is unusable.
"""

from __future__ import annotations

import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from modelsql.errors import DataError, NotSupportedError
from modelsql.operators.backends import tvm as tvm_backend
from modelsql.operators.backends.onnxruntime import OrtModel
from modelsql.operators.backends.tvm_check import check_against_onnxruntime

_REASON = tvm_backend.unavailable_reason()
pytestmark = pytest.mark.skipif(_REASON is not None, reason=f"the TVM backend is unavailable: {_REASON}")

torch = pytest.importorskip("torch")


from tvm_fixtures import cnn as _cnn, mlp as _mlp  # noqa: E402


_MODELS = {"mlp": (_mlp, (16,)), "cnn": (_cnn, (1, 8, 8))}


@pytest.fixture(scope="module")
def target() -> dict:
    return tvm_backend.cpu_target(2)


@pytest.fixture(scope="module")
def compiled(target) -> dict:
    """name -> (onnx bytes, dynamic-batch library bytes)."""
    out = {}
    for name, (make, _) in _MODELS.items():
        model = make()
        out[name] = (model, tvm_backend.compile_onnx(model, target=target))
    return out


def _load(model: bytes, library, batch_size=None, **kw):
    return tvm_backend.load_library(library, tvm_backend.Signature.from_onnx(model, batch_size), "model m version 1", **kw)


def _rows(shape: tuple, n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, *shape)).astype(np.float32)


def _ort(model: bytes, x: np.ndarray) -> np.ndarray:
    return OrtModel(model, "reference").run({"x": x})[0]


# ---------------------------------------------------------------- compiling and running


@pytest.mark.parametrize("name", sorted(_MODELS))
def test_dynamic_batch_matches_onnxruntime(compiled, name) -> None:
    model, library = compiled[name]
    tvm_model = _load(model, library)
    assert tvm_model.fixed_batch is None and tvm_model.input_names == ["x"] and tvm_model.output_names == ["y"]
    for n in (1, 5, 32):
        x = _rows(_MODELS[name][1], n, seed=n)
        (y,) = tvm_model.run({"x": x})
        assert y.shape[0] == n and y.dtype == np.float32
        np.testing.assert_allclose(y, _ort(model, x), atol=1e-4, rtol=1e-3)


def test_reloaded_library_gives_identical_outputs(compiled, tmp_path) -> None:
    model, library = compiled["cnn"]
    x = _rows((1, 8, 8), 6)
    first = _load(model, library).run({"x": x})[0]
    path = tmp_path / "cnn.so"
    path.write_bytes(library)
    for source in (library, str(path)):
        np.testing.assert_array_equal(_load(model, source).run({"x": x})[0], first)


def test_static_batch_compile_has_a_fixed_batch(compiled, target) -> None:
    model = compiled["mlp"][0]
    tvm_model = _load(model, tvm_backend.compile_onnx(model, target=target, batch_size=8), batch_size=8)
    assert tvm_model.fixed_batch == 8 and tvm_model.input_shapes["x"] == [8, 16]
    x = _rows((16,), 20)  # two full slices of 8 and one padded slice of 4
    np.testing.assert_allclose(tvm_model.run({"x": x})[0], _ort(model, x), atol=1e-4, rtol=1e-3)
    assert tvm_model.run({"x": x[:0]})[0].shape == (0, 4)


def test_a_fixed_batch_other_than_the_models_is_refused(target) -> None:
    fixed = _static_mlp(batch=4)
    with pytest.raises(NotSupportedError) as info:
        tvm_backend.compile_onnx(fixed, target=target, batch_size=8)
    assert info.value.code == "fixed_batch"


def _static_mlp(batch: int) -> bytes:
    model = onnx.load_model_from_string(_mlp())
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = batch
    return model.SerializeToString()


def test_run_sets_the_calling_threads_pool(compiled) -> None:
    import tvm

    model, library = compiled["mlp"]
    tvm_model = _load(model, library, intra_op_threads=1)
    seen = []

    def work() -> None:
        tvm_model.run({"x": _rows((16,), 3)})
        seen.append(tvm.runtime.num_threads())

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert tvm_model.intra_op_threads == 1 and seen == [1]


def test_target_signature_and_versions(compiled) -> None:
    target = tvm_backend.cpu_target(3)
    assert target["kind"] == "llvm" and target["num-cores"] == 3 and target["mcpu"] not in ("", "native", "generic")
    assert tvm_backend.target_key(target) == tvm_backend.target_key(dict(reversed(list(target.items()))))
    assert set(tvm_backend.versions()) == {"tvm", "tvm_ffi"}
    signature = tvm_backend.Signature.from_onnx(compiled["cnn"][0])
    assert signature.inputs[0] == tvm_backend.TensorSpec("x", "float32", ("N", 1, 8, 8))
    assert tvm_backend.Signature.from_json(signature.to_json()) == signature


# ---------------------------------------------------------------- refusing

def test_bad_feeds_raise_data_error_naming_the_model(compiled) -> None:
    model, library = compiled["mlp"]
    tvm_model = _load(model, library)
    x = _rows((16,), 4)
    for feeds, outputs, words in [
        ({"x": x.astype(np.float64)}, None, "float32"),
        ({"x": x[:, :3]}, None, "shape"),
        ({"x": x[0]}, None, "shape"),
        ({"z": x}, None, "'x'"),
        ({"x": x}, ["nope"], "nope"),
    ]:
        with pytest.raises(DataError) as info:
            tvm_model.run(feeds, outputs)
        assert info.value.code == "model_run_failed"
        assert "model m version 1" in str(info.value) and words in str(info.value)


def test_bytes_that_are_no_library_are_refused(compiled) -> None:
    with pytest.raises(DataError) as info:
        _load(compiled["mlp"][0], b"not a shared library")
    assert info.value.code == "invalid_library"


def test_onnx_ml_operators_are_refused_by_name(target) -> None:
    pytest.importorskip("skl2onnx")
    from sklearn.datasets import load_iris
    from sklearn.linear_model import LogisticRegression
    from skl2onnx import to_onnx

    x, y = load_iris(return_X_y=True)
    x = x.astype(np.float32)
    model = to_onnx(LogisticRegression(max_iter=500).fit(x, y), x[:1], target_opset={"": 17, "ai.onnx.ml": 3})
    with pytest.raises(NotSupportedError) as info:
        tvm_backend.compile_onnx(model.SerializeToString(), target=target)
    assert info.value.code == "tvm_import_failed"
    assert "LinearClassifier" in str(info.value) and "ai.onnx.ml" in str(info.value)


def _graph(nodes, inputs, outputs) -> bytes:
    model = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def test_an_operator_without_a_converter_is_named(target) -> None:
    model = _graph([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Celu", ["r"], ["y"], name="celu1")],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])])
    with pytest.raises(NotSupportedError) as info:
        tvm_backend.compile_onnx(model, target=target)
    assert info.value.code == "tvm_import_failed" and "Celu" in str(info.value) and "celu1" in str(info.value)


def test_a_conversion_failure_names_the_operator(target) -> None:
    model = _graph([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("TopK", ["r", "k"], ["v", "i"], axis=1)],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4]),
                    helper.make_tensor_value_info("k", TensorProto.INT64, [1])],
                   [helper.make_tensor_value_info("v", TensorProto.FLOAT, None),
                    helper.make_tensor_value_info("i", TensorProto.INT64, None)])
    with pytest.raises(NotSupportedError) as info:
        tvm_backend.compile_onnx(model, target=target)
    assert info.value.code == "tvm_import_failed" and "operator TopK" in str(info.value)
    assert "Traceback" not in str(info.value)


# ---------------------------------------------------------------- checking against ONNX Runtime


def test_check_passes_for_the_mlp(compiled) -> None:
    model, library = compiled["mlp"]
    result = check_against_onnxruntime(model, _load(model, library))
    assert result.ok and result.reason is None and result.batches == (1, 7, 32)
    assert result.max_abs < 1e-4


def test_check_of_a_static_library_runs_its_batch_only(compiled, target) -> None:
    model = compiled["mlp"][0]
    tvm_model = _load(model, tvm_backend.compile_onnx(model, target=target, batch_size=8), batch_size=8)
    result = check_against_onnxruntime(model, tvm_model)
    assert result.ok and result.batches == (8,)


def _node_case(name: str, module: str) -> bytes:
    """The model of the onnx package's backend node test case ``name``.

    Read from ``onnx/backend/test/data/node/<name>/model.onnx`` when the wheel ships it; onnx 1.23's
    wheel ships only the generators, so otherwise the one generator module is imported: importing
    ``onnx.backend.test.case.node.<module>`` runs its ``export*`` functions, which append their cases
    to the package's case list (``collect_testcases`` would import all 200 modules: ~6 s).
    """
    import importlib
    import os

    import onnx.backend.test

    path = os.path.join(os.path.dirname(onnx.backend.test.__file__), "data", "node", name, "model.onnx")
    if os.path.exists(path):
        return onnx.load(path).SerializeToString()
    importlib.import_module(f"onnx.backend.test.case.node.{module}")
    from onnx.backend.test.case import node as cases

    return next(c for c in cases._NodeTestCases if c.name == name).model.SerializeToString()


@pytest.mark.parametrize("case", [
    ("test_spacetodepth_crd_mode_example", "spacetodepth", "y", "elements differ"),  # values wrong
    ("test_convtranspose_output_shape", "convtranspose", "Y", "shape"),  # output_shape ignored
], ids=lambda c: c[0])
def test_check_catches_what_tvm_compiles_wrongly(case, target) -> None:
    name, module, output, words = case
    model = _node_case(name, module)
    tvm_model = _load(model, tvm_backend.compile_onnx(model, target=target))  # TVM compiles it without a word
    result = check_against_onnxruntime(model, tvm_model)
    assert not result.ok
    assert f'output "{output}" at batch 1' in result.reason and words in result.reason
    assert result.batches == (1,)  # the cases have a fixed batch of 1


def test_integer_inputs_are_checked_with_nonzero_values(target) -> None:
    """Zeros alone would make ONNX Runtime refuse an integer division; the small-integer variant checks it."""
    model = _graph([helper.make_node("Div", ["a", "b"], ["y"])],
                   [helper.make_tensor_value_info("a", TensorProto.INT32, ["N", 3]),
                    helper.make_tensor_value_info("b", TensorProto.INT32, ["N", 3])],
                   [helper.make_tensor_value_info("y", TensorProto.INT32, ["N", 3])])
    tvm_model = _load(model, tvm_backend.compile_onnx(model, target=target))
    result = check_against_onnxruntime(model, tvm_model)
    assert result.ok, result.reason


# ---------------------------------------------------------------- CUDA (issue 24)

from modelsql.operators.backends import tvm_build  # noqa: E402

_CUDA_REASON = "needs a CUDA device (onnxruntime-gpu and an NVIDIA driver)"
_NO_COMPILER = not tvm_build.cuda_compilers()


def _cuda_ready() -> bool:
    from modelsql.operators.backends import devices

    return _REASON is None and devices.cuda_available() and tvm_backend.cuda_unavailable_reason(0) is None


@pytest.mark.skipif(_NO_COMPILER, reason="no CUDA compiler here (cuda-bindings for NVRTC, or nvcc on the PATH)")
def test_a_cuda_build_needs_no_gpu_and_is_stopped_at_its_time_limit() -> None:
    """Relax's CUDA pipeline (DLight default schedules) and code generation run on a machine without a GPU (the
    kernels stay CUDA source there: TVM's CUDA runtime is not loaded); a build past its limit is stopped and refused as tvm_build_timeout, and a model the frontend cannot import is
    refused as on the CPU, whatever the CUDA compiler."""
    target = {"kind": "cuda", "arch": "sm_90"}
    library = tvm_build.build_with_limit(_mlp(), target=target, timeout_s=240)
    assert library[:4] == b"\x7fELF" and len(library) > 10_000
    with pytest.raises(NotSupportedError) as info:
        tvm_build.build_with_limit(_mlp(), target=target, timeout_s=0.2)
    assert info.value.code == "tvm_build_timeout" and "0.2 s" in str(info.value)
    celu = _graph([helper.make_node("Celu", ["x"], ["y"], name="celu1")],
                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2])])
    with pytest.raises(NotSupportedError) as info:
        tvm_build.build_with_limit(celu, target=target, timeout_s=240)
    assert info.value.code == "tvm_import_failed" and "Celu" in str(info.value)


def test_without_cuda_the_cuda_target_says_what_is_missing(monkeypatch) -> None:
    if tvm_backend.cuda_unavailable_reason(0) is None:
        pytest.skip("TVM can use a CUDA device here")
    with pytest.raises(NotSupportedError) as info:
        tvm_backend.cuda_target(0)
    assert info.value.code == "device_not_available" and "CUDA" in str(info.value)


def test_the_cuda_tolerance_scales_with_the_output() -> None:
    """On CUDA the absolute tolerance is ATOL times the output's largest magnitude; on the CPU it is ATOL."""
    from modelsql.operators.backends.tvm_check import ATOL, compare

    b = np.array([1000.0, 0.0], np.float32)
    a = b + np.array([0.0, 50 * ATOL], np.float32)  # a cancelled element off by 0.005 in an output of 1000
    assert compare(a, b, scaled=True) is None
    assert "1 of 2 elements differ" in compare(a, b)
    assert "2 of 2 elements differ" in compare(b + np.float32(2.0), b, scaled=True)


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda_ready(), reason=_CUDA_REASON)
@pytest.mark.parametrize("name", sorted(_MODELS))
def test_cuda_library_runs_on_the_gpu_and_matches_onnxruntime_cuda(name) -> None:
    model = _MODELS[name][0]()
    library = tvm_build.build_with_limit(model, target=tvm_backend.cuda_target(0), timeout_s=240)
    tvm_model = _load(model, library, device="cuda:0")
    assert tvm_model.device == "cuda:0"
    result = check_against_onnxruntime(model, tvm_model, device="cuda:0")
    assert result.ok, result.reason
    x = _rows(_MODELS[name][1], 33, seed=3)
    (y,) = tvm_model.run({"x": x})
    np.testing.assert_allclose(y, _ort(model, x), atol=1e-4, rtol=1e-3)  # full fp32 on the GPU: as the CPU
    ort_cuda = OrtModel(model, "reference", device="cuda:0").run({"x": x})[0]
    np.testing.assert_allclose(y, ort_cuda, atol=2e-3, rtol=1e-2)  # ONNX Runtime CUDA computes in TF32
