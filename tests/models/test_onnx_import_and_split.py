"""Tests of model import and the graph/tensor split (modelsql.converters, modelsql.onnxformat), on real models
run in ONNX Runtime."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pyarrow as pa
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper
from sklearn.datasets import load_breast_cancer, load_digits, load_iris
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from modelsql.catalog.entries import StoredTensor, TensorSpec
from modelsql.errors import DataError, NotSupportedError, ProgrammingError
from modelsql.converters import from_sklearn, from_torch, to_onnx
from modelsql.onnxformat import (
    join_model,
    load_model,
    param_count,
    referenced_digests,
    signature,
    split_model,
    stored_tensors,
)
from modelsql.storage import BlobCorruptError, BlobMissingError, BlobStore

# ----------------------------------------------------------------------------- helpers


def session(model: onnx.ModelProto) -> ort.InferenceSession:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def run(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    return session(model).run(None, feeds)


def round_trip(model: onnx.ModelProto) -> onnx.ModelProto:
    graph, tensors = split_model(model)
    return join_model(graph, {t.digest: payload for t, payload in tensors})


def assert_bit_identical(a: list[np.ndarray], b: list[np.ndarray]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape
        assert x.tobytes() == y.tobytes()


class MLP(torch.nn.Module):
    def __init__(self, n_in: int = 64, hidden: int = 32, n_out: int = 10) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(n_in, hidden)
        self.fc2 = torch.nn.Linear(hidden, n_out)
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.drop(torch.relu(self.fc1(x))))


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    return X.astype(np.float32), y


@pytest.fixture(scope="module")
def digits_pipeline(digits):
    X, y = digits
    return make_pipeline(StandardScaler(), LogisticRegression(max_iter=300)).fit(X, y)


@pytest.fixture(scope="module")
def digits_onnx(digits_pipeline):
    model, features = from_sklearn(digits_pipeline)
    return model


@pytest.fixture(scope="module")
def mlp():
    torch.manual_seed(0)
    return MLP()


@pytest.fixture(scope="module")
def mlp_onnx(mlp):
    return from_torch(mlp, torch.randn(4, 64))


# ----------------------------------------------------------------------------- scikit-learn


def test_sklearn_classifier_outputs_label_and_probability_matrix(digits, digits_pipeline, digits_onnx) -> None:
    X, y = digits
    inputs, outputs, opset = signature(digits_onnx)
    assert inputs == (TensorSpec("input", "FLOAT", ("N", 64)),)
    assert outputs == (
        TensorSpec("label", "INT64", ("N",)),
        TensorSpec("probabilities", "FLOAT", ("N", 10)),
    )
    assert 1 <= opset <= 21
    assert all(n.op_type != "ZipMap" for n in digits_onnx.graph.node)
    label, proba = run(digits_onnx, {"input": X})
    assert label.dtype == np.int64 and label.shape == (len(X),)
    assert proba.dtype == np.float32 and proba.shape == (len(X), 10)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(proba, digits_pipeline.predict_proba(X), atol=1e-4)
    assert (label == digits_pipeline.predict(X)).mean() > 0.99


def test_sklearn_split_join_bit_identical(digits, digits_onnx) -> None:
    X, _ = digits
    graph, tensors = split_model(digits_onnx)
    assert tensors, "the pipeline's coefficients must be stored as blobs"
    assert sum(t.nbytes for t, _ in tensors) > 0.5 * len(digits_onnx.SerializeToString())
    assert len(graph) < len(digits_onnx.SerializeToString()) // 2
    for t, payload in tensors:
        assert isinstance(t, StoredTensor) and t.nbytes == len(payload)
    # Scaler offset + scale, LinearClassifier coefficients + intercepts (ai.onnx.ml attributes)
    assert param_count(digits_onnx) == 64 + 64 + 640 + 10
    assert param_count(onnx.load_model_from_string(graph)) == param_count(digits_onnx)
    joined = join_model(graph, {t.digest: p for t, p in tensors})
    assert joined.SerializeToString() == digits_onnx.SerializeToString()
    assert_bit_identical(run(joined, {"input": X}), run(digits_onnx, {"input": X}))


def test_sklearn_random_forest_split_join(digits) -> None:
    X, y = load_breast_cancer(return_X_y=True)
    X = X.astype(np.float32)
    rf = RandomForestClassifier(n_estimators=10, max_depth=6, random_state=0).fit(X, y)
    model, features = from_sklearn(rf)
    assert features is None
    graph, tensors = split_model(model)
    assert len(tensors) >= 5  # tree-ensemble attribute arrays
    joined = join_model(graph, {t.digest: p for t, p in tensors})
    assert joined.SerializeToString() == model.SerializeToString()
    out = run(joined, {"input": X})
    assert_bit_identical(out, run(model, {"input": X}))
    assert out[1].shape == (len(X), 2)
    assert (out[0] == rf.predict(X)).mean() > 0.99


def test_sklearn_regressor_output_named_prediction() -> None:
    X, y = load_breast_cancer(return_X_y=True)
    reg = LinearRegression().fit(X, y.astype(np.float64))
    model, _ = from_sklearn(reg)
    _, outputs, _ = signature(model)
    assert [o.name for o in outputs] == ["prediction"]
    assert outputs[0].shape in (("N",), ("N", 1))
    (pred,) = run(model, {"input": X.astype(np.float32)})
    np.testing.assert_allclose(pred.reshape(-1), reg.predict(X), atol=1e-3)


def test_sklearn_feature_names_from_arrow_table() -> None:
    data = load_iris()
    table = pa.table({n: data.data[:, i] for i, n in enumerate(data.feature_names)})
    clf = LogisticRegression(max_iter=500).fit(table, data.target)
    model, features = from_sklearn(clf)
    assert features == tuple(data.feature_names)
    label, proba = run(model, {"input": data.data.astype(np.float32)})
    assert proba.shape == (150, 3) and label.shape == (150,)
    assert param_count(model) == 4 * 3 + 3 + 3  # coefficients, intercepts and the class labels (initializers)
    assert_bit_identical(run(round_trip(model), {"input": data.data.astype(np.float32)}), [label, proba])


def test_sklearn_feature_names_given_and_mismatch() -> None:
    X, y = load_iris(return_X_y=True)
    clf = LogisticRegression(max_iter=500).fit(X, y)
    names = ["sl", "sw", "pl", "pw"]
    _, features = from_sklearn(clf, feature_names=names)
    assert features == tuple(names)
    with pytest.raises(ProgrammingError) as info:
        from_sklearn(clf, feature_names=["a", "b"])
    assert info.value.code == "feature_mismatch"
    with pytest.raises(ProgrammingError) as info:
        from_sklearn(clf, n_features=7)
    assert info.value.code == "feature_mismatch"


def test_sklearn_not_fitted() -> None:
    with pytest.raises(ProgrammingError) as info:
        from_sklearn(make_pipeline(StandardScaler(), LogisticRegression()))
    assert info.value.code == "not_fitted"
    with pytest.raises(ProgrammingError) as info:
        to_onnx(LogisticRegression())
    assert info.value.code == "not_fitted"


# ----------------------------------------------------------------------------- torch


def test_torch_dynamic_batch(mlp, mlp_onnx) -> None:
    inputs, outputs, _ = signature(mlp_onnx)
    assert inputs == (TensorSpec("input", "FLOAT", ("N", 64)),)
    assert outputs == (TensorSpec("output", "FLOAT", ("N", 10)),)
    assert mlp.training  # restored after export
    sess = session(mlp_onnx)
    rng = np.random.default_rng(0)
    mlp.eval()
    try:
        for batch in (1, 1000):
            x = rng.standard_normal((batch, 64)).astype(np.float32)
            (y,) = sess.run(None, {"input": x})
            assert y.shape == (batch, 10)
            with torch.no_grad():
                np.testing.assert_allclose(y, mlp(torch.from_numpy(x)).numpy(), rtol=1e-4, atol=1e-5)
    finally:
        mlp.train()


def test_torch_split_join_bit_identical(mlp, mlp_onnx) -> None:
    graph, tensors = split_model(mlp_onnx)
    assert {t.name for t, _ in tensors} >= {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}
    w = next(t for t, _ in tensors if t.name == "fc1.weight")
    assert w.elem_type == "FLOAT" and w.dims == (32, 64) and w.nbytes == 32 * 64 * 4
    payload = next(p for t, p in tensors if t.name == "fc1.weight")
    assert payload == mlp.fc1.weight.detach().numpy().astype("<f4").tobytes()
    joined = join_model(graph, {t.digest: p for t, p in tensors})
    assert joined.SerializeToString() == mlp_onnx.SerializeToString()
    x = np.random.default_rng(1).standard_normal((1000, 64)).astype(np.float32)
    assert_bit_identical(run(joined, {"input": x}), run(mlp_onnx, {"input": x}))
    assert param_count(mlp_onnx) == sum(p.numel() for p in mlp.parameters())
    assert param_count(onnx.load_model_from_string(graph)) == param_count(mlp_onnx)


def test_stripped_graph_has_no_parameter_data(mlp_onnx) -> None:
    graph, tensors = split_model(mlp_onnx)
    stripped = onnx.load_model_from_string(graph)
    for t in stripped.graph.initializer:
        assert t.data_location == TensorProto.EXTERNAL
        assert not t.raw_data and not t.float_data
        entries = {e.key: e.value for e in t.external_data}
        assert entries["location"] == "modelsql-blob:" + entries["digest"]
    assert stored_tensors(graph) == [t for t, _ in tensors]
    assert referenced_digests(graph) == {t.digest for t, _ in tensors}
    assert signature(stripped) == signature(mlp_onnx)
    assert mlp_onnx.graph.initializer[0].raw_data  # the input model was not modified


def test_split_is_deterministic(mlp_onnx, digits_onnx) -> None:
    for model in (mlp_onnx, digits_onnx):
        g1, t1 = split_model(model)
        g2, t2 = split_model(model)
        assert g1 == g2
        assert [t for t, _ in t1] == [t for t, _ in t2]


def test_dedup_across_differently_named_copies(tmp_path, mlp, digits_pipeline) -> None:
    a = from_torch(mlp, torch.randn(2, 64))
    b = from_torch(mlp, torch.randn(3, 64), input_names=("pixels",), output_names=("scores",))
    b.graph.name = "copy"
    for t in b.graph.initializer:  # rename every initializer, consistently
        old, new = t.name, "copy/" + t.name
        t.name = new
        for node in b.graph.node:
            node.input[:] = [new if i == old else i for i in node.input]
    ga, ta = split_model(a)
    gb, tb = split_model(b)
    assert ga != gb
    assert sorted(t.digest for t, _ in ta) == sorted(t.digest for t, _ in tb)

    store = BlobStore(tmp_path / "blobs")
    for _, payload in ta:
        store.put(payload)
    count, size = len(store), store.stored_bytes()
    for _, payload in tb:
        store.put(payload)
    assert (len(store), store.stored_bytes()) == (count, size)
    x = np.random.default_rng(2).standard_normal((5, 64)).astype(np.float32)
    jb = join_model(gb, {d: store.get(d) for d in referenced_digests(gb)})
    assert_bit_identical(run(jb, {"pixels": x}), run(a, {"input": x}))

    # the same fitted pipeline converted under two graph names shares every blob
    s1, _ = from_sklearn(digits_pipeline, name="first")
    s2, _ = from_sklearn(digits_pipeline, name="second")
    assert {t.digest for t, _ in split_model(s1)[1]} == {t.digest for t, _ in split_model(s2)[1]}


def test_float_data_and_raw_data_share_a_digest() -> None:
    w = np.arange(48, dtype=np.float32).reshape(6, 8) / 7
    raw = numpy_helper.from_array(w, "w")
    typed = helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.ravel().tolist(), raw=False)
    assert raw.HasField("raw_data") and len(typed.float_data) == 48

    def model_with(init: TensorProto) -> onnx.ModelProto:
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])
        g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g", [x], [y], [init])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])

    m_raw, m_typed = model_with(raw), model_with(typed)
    (t_raw, p_raw), = split_model(m_raw)[1]
    (t_typed, p_typed), = split_model(m_typed)[1]
    assert t_raw.digest == t_typed.digest and p_raw == p_typed == w.tobytes()
    for m in (m_raw, m_typed):
        assert round_trip(m).SerializeToString() == m.SerializeToString()
    x = np.ones((3, 6), np.float32)
    assert_bit_identical(run(round_trip(m_typed), {"x": x}), run(m_raw, {"x": x}))


def test_subgraph_string_sparse_and_typed_initializers() -> None:
    """If-branch initializers, STRING, FLOAT16 (int32_data), INT8 and sparse initializers."""
    then_w = numpy_helper.from_array(np.full((4,), 2.0, np.float32), "then_w")
    else_w = helper.make_tensor("else_w", TensorProto.FLOAT, [4], [3.0] * 4)
    then_g = helper.make_graph(
        [helper.make_node("Mul", ["x", "then_w"], ["then_out"])], "then", [],
        [helper.make_tensor_value_info("then_out", TensorProto.FLOAT, [4])], [then_w],
    )
    else_g = helper.make_graph(
        [helper.make_node("Mul", ["x", "else_w"], ["else_out"])], "else", [],
        [helper.make_tensor_value_info("else_out", TensorProto.FLOAT, [4])], [else_w],
    )
    half = helper.make_tensor("half", TensorProto.FLOAT16, [3], np.array([0.5, 1.5, -2], np.float16))
    small = helper.make_tensor("small", TensorProto.INT8, [3], [-1, 0, 127])
    names = helper.make_tensor("names", TensorProto.STRING, [2], [b"setosa", b"versicolor"])
    sparse = helper.make_sparse_tensor(
        numpy_helper.from_array(np.array([1.0, 5.0], np.float32), "sp"),
        numpy_helper.from_array(np.array([1, 3], np.int64), ""),
        [4],
    )
    nodes = [
        helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g),
        helper.make_node("Add", ["y", "sp"], ["z"]),
        helper.make_node("Identity", ["names"], ["labels"]),
        helper.make_node("Cast", ["half"], ["half32"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["small"], ["small32"], to=TensorProto.FLOAT),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [4]),
        ],
        [
            helper.make_tensor_value_info("z", TensorProto.FLOAT, [4]),
            helper.make_tensor_value_info("labels", TensorProto.STRING, [2]),
            helper.make_tensor_value_info("half32", TensorProto.FLOAT, [3]),
            helper.make_tensor_value_info("small32", TensorProto.FLOAT, [3]),
        ],
        [half, small, names],
        sparse_initializer=[sparse],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model = load_model(model.SerializeToString())

    g, tensors = split_model(model)
    by_name = {t.name: (t, p) for t, p in tensors}
    assert set(by_name) == {"half", "small", "names", "sp", "sp/indices", "then_w", "else_w"}
    assert by_name["half"][1] == np.array([0.5, 1.5, -2], np.float16).tobytes()
    assert by_name["small"][1] == np.array([-1, 0, 127], np.int8).tobytes()
    assert by_name["then_w"][1] == np.full((4,), 2.0, np.float32).tobytes()
    assert by_name["names"][0].elem_type == "STRING"
    assert TensorProto.FromString(by_name["names"][1]).string_data == [b"setosa", b"versicolor"]
    assert param_count(model) == 3 + 3 + 2 + 2 + 4 + 4

    joined = join_model(g, {t.digest: p for t, p in tensors})
    assert joined.SerializeToString() == model.SerializeToString()
    x = np.arange(4, dtype=np.float32)
    for cond in (True, False):
        feeds = {"cond": np.array(cond), "x": x}
        a, b = run(joined, feeds), run(model, feeds)
        for u, v in zip(a, b):
            assert np.array_equal(u, v)
        assert np.array_equal(a[0], x * (2 if cond else 3) + np.array([0, 1, 0, 5], np.float32))
        assert list(a[1]) == ["setosa", "versicolor"]


def test_blob_store_end_to_end(tmp_path, digits, digits_onnx) -> None:
    X, _ = digits
    store = BlobStore(tmp_path / "m.duckdb.blobs")
    graph, tensors = split_model(digits_onnx)
    graph_digest = store.put(graph)
    for t, payload in tensors:
        assert store.put(payload) == t.digest
    loaded_graph = store.get(graph_digest)
    model = join_model(loaded_graph, {d: store.get(d) for d in referenced_digests(loaded_graph)})
    assert_bit_identical(run(model, {"input": X}), run(digits_onnx, {"input": X}))
    assert store.collect(referenced_digests(loaded_graph) | {graph_digest}) == (0, 0)


def test_join_missing_or_wrong_payload(mlp_onnx) -> None:
    graph, tensors = split_model(mlp_onnx)
    payloads = {t.digest: p for t, p in tensors}
    missing = tensors[0][0].digest
    with pytest.raises(BlobMissingError) as info:
        join_model(graph, {d: p for d, p in payloads.items() if d != missing})
    assert info.value.code == "blob_missing" and info.value.digest == missing
    with pytest.raises(BlobCorruptError) as info:
        join_model(graph, {**payloads, missing: payloads[missing][:-4]})
    assert info.value.code == "blob_corrupt"


# ----------------------------------------------------------------------------- loading


def test_load_model_from_path_bytes_and_proto(tmp_path, mlp_onnx) -> None:
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp_onnx, path)
    for source in (path, str(path), path.read_bytes(), mlp_onnx):
        m = load_model(source)
        assert m.SerializeToString() == mlp_onnx.SerializeToString()


def test_load_model_with_external_data(tmp_path, mlp_onnx) -> None:
    folder = tmp_path / "ext"
    folder.mkdir()
    path = folder / "mlp.onnx"
    copy = onnx.ModelProto()
    copy.CopyFrom(mlp_onnx)  # onnx.save(save_as_external_data=True) modifies its argument
    onnx.save(
        copy, path, save_as_external_data=True, all_tensors_to_one_file=True,
        location="weights.bin", size_threshold=0,
    )
    assert (folder / "weights.bin").stat().st_size > 1000
    m = load_model(path)
    graph, tensors = split_model(m)
    assert {t.name for t, _ in tensors} >= {"fc1.weight", "fc2.weight"}
    x = np.random.default_rng(3).standard_normal((7, 64)).astype(np.float32)
    assert_bit_identical(run(join_model(graph, {t.digest: p for t, p in tensors}), {"input": x}),
                         run(mlp_onnx, {"input": x}))
    (folder / "weights.bin").unlink()
    with pytest.raises(DataError) as info:
        load_model(path)
    assert info.value.code == "invalid_onnx" and str(path) in str(info.value)


def test_missing_file(tmp_path) -> None:
    path = tmp_path / "nope.onnx"
    with pytest.raises(ProgrammingError) as info:
        load_model(path)
    assert info.value.code == "file_not_found"
    assert str(path) in str(info.value)
    with pytest.raises(ProgrammingError) as info:
        to_onnx(str(path))
    assert info.value.code == "file_not_found"


@pytest.mark.parametrize(
    "content",
    [
        b"this is not an onnx model at all\n",
        b"\x08\x07\x12\xff\xff\xff\xff\x0f garbage",
        b"",
        "truncated",
        "no_graph",
        "bad_node",
        "stripped",
    ],
)
def test_invalid_onnx(tmp_path, mlp_onnx, content) -> None:
    if content == "truncated":
        data = mlp_onnx.SerializeToString()[:-50]
    elif content == "no_graph":
        data = helper.make_model(helper.make_graph([], "g", [], [])).SerializeToString()[:2]
    elif content == "bad_node":
        m = onnx.ModelProto()
        m.CopyFrom(mlp_onnx)
        m.graph.node[0].op_type = "NoSuchOperator"
        data = m.SerializeToString()
    elif content == "stripped":  # a stored graph without its tensors
        data = split_model(mlp_onnx)[0]
    else:
        data = content
    path = tmp_path / "model.onnx"
    path.write_bytes(data)
    for source, name in ((path, str(path)), (data, "<bytes>")):
        with pytest.raises(DataError) as info:
            load_model(source)
        err = info.value
        assert err.code == "invalid_onnx"
        text = str(err)
        assert name in text
        assert "\n" not in text and "Traceback" not in text
        assert len(text) < 400


# ----------------------------------------------------------------------------- to_onnx dispatch


def test_to_onnx_dispatch(tmp_path, mlp, mlp_onnx, digits_pipeline) -> None:
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp_onnx, path)
    m, kind, source, features = to_onnx(str(path))
    assert (kind, source, features) == ("onnx", str(path), None)
    m, kind, source, features = to_onnx(path, feature_names=[f"p{i}" for i in range(64)])
    assert kind == "onnx" and source == str(path) and features == tuple(f"p{i}" for i in range(64))
    assert to_onnx(mlp_onnx.SerializeToString())[1:3] == ("onnx", "<bytes>")
    assert to_onnx(mlp_onnx)[1:3] == ("onnx", "<ModelProto>")

    m, kind, source, features = to_onnx(digits_pipeline)
    assert (kind, source, features) == ("sklearn", "sklearn:Pipeline", None)
    assert [o.name for o in m.graph.output] == ["label", "probabilities"]

    m, kind, source, features = to_onnx(mlp, example_input=torch.randn(2, 64))
    assert (kind, source) == ("torch", "torch:MLP")
    assert signature(m)[0][0].shape == ("N", 64)

    with pytest.raises(ProgrammingError) as info:
        to_onnx(mlp)
    assert info.value.code == "example_missing"
    with pytest.raises(ProgrammingError) as info:
        to_onnx(mlp_onnx, feature_names=["a", "b"])
    assert info.value.code == "feature_mismatch"
    for bad in (42, {"a": 1}, np.zeros(3)):
        with pytest.raises(ProgrammingError) as info:
            to_onnx(bad)
        assert info.value.code == "unsupported_model"
        assert type(bad).__name__ in str(info.value)


def test_torch_export_failure_is_not_supported() -> None:
    class Bad(torch.nn.Module):
        def forward(self, x):
            return torch.linalg.svd(x)[1]  # aten::linalg_svd has no ONNX export

    with pytest.raises(NotSupportedError) as info:
        from_torch(Bad(), torch.randn(2, 3))
    assert info.value.code == "conversion_failed"
