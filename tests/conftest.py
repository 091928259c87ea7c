"""Shared fixtures: real models (scikit-learn on its shipped digits data, a small
torch MLP, tiny ONNX graphs built with ``onnx.helper``) and real DuckDB files.

Nothing is mocked and nothing is downloaded: scikit-learn ships the digits
data set, torch modules are built in code with a fixed seed, and ONNX graphs
are assembled node by node.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Optional, Sequence

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import modelsql
from modelsql.operators.backends import devices

OPSET = 17

NO_CUDA = ("needs a CUDA device (onnxruntime-gpu with its CUDA provider and an NVIDIA driver); "
           "this machine has none")


@pytest.fixture(autouse=True, scope="session")
def _signing_key(tmp_path_factory):
    """The tests sign the code they create with a key of their own (``MODELSQL_KEY_FILE``), never the user's
    ``~/.config/modelsql/key``; child processes inherit it."""
    path = tmp_path_factory.mktemp("modelsql-key") / "key"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MODELSQL_KEY_FILE", str(path))
        yield path


@pytest.fixture(autouse=True, scope="session")
def _cache_home(tmp_path_factory):
    """What modelsql caches under ``$XDG_CACHE_HOME`` (TVM's name of this CPU) goes to a folder of the test run's,
    never the user's ``~/.cache``; child processes inherit it."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache-home")))
        yield


SLOW = "a long end-to-end test beyond its suite's representative in CI; run it with -m slow"


def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` skip, with the reason, where no CUDA device is available; tests marked ``slow``
    skip unless the ``-m`` expression names ``slow``."""
    cuda = devices.cuda_available()
    slow = "slow" in (config.getoption("markexpr") or "")
    for item in items:
        if "gpu" in item.keywords and not cuda:
            item.add_marker(pytest.mark.skip(reason=NO_CUDA))
        if item.get_closest_marker("slow") is not None and not slow:
            item.add_marker(pytest.mark.skip(reason=SLOW))

_ONNX_TYPES = {
    np.dtype(np.float32): TensorProto.FLOAT,
    np.dtype(np.float64): TensorProto.DOUBLE,
    np.dtype(np.int64): TensorProto.INT64,
    np.dtype(np.int32): TensorProto.INT32,
}


# ---------------------------------------------------------------- ONNX building


def make_model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Sequence[tuple[str, int, Sequence]],
    outputs: Sequence[tuple[str, int, Sequence]],
    initializers: Iterable[tuple[str, np.ndarray]] = (),
    name: str = "tiny",
) -> onnx.ModelProto:
    """A checked ONNX model from nodes, ``(name, elem_type, shape)`` inputs/outputs and
    ``(name, array)`` initializers (opset 17)."""
    graph = helper.make_graph(
        list(nodes),
        name,
        [helper.make_tensor_value_info(n, t, list(s) if s is not None else None) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, list(s) if s is not None else None) for n, t, s in outputs],
        initializer=[numpy_helper.from_array(np.asarray(a), name=n) for n, a in initializers],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="modelsql-tests")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def linear_model(
    weights: np.ndarray,
    bias: Optional[np.ndarray] = None,
    *,
    batch="N",
    input_name: str = "x",
    output_name: str = "y",
) -> onnx.ModelProto:
    """``y = x @ W + b``: input ``[batch, F]`` FLOAT, output ``[batch, K]`` FLOAT."""
    w = np.asarray(weights, dtype=np.float32)
    f, k = w.shape
    b = np.zeros(k, dtype=np.float32) if bias is None else np.asarray(bias, dtype=np.float32)
    return make_model(
        [helper.make_node("MatMul", [input_name, "W"], ["xw"]), helper.make_node("Add", ["xw", "B"], [output_name])],
        [(input_name, TensorProto.FLOAT, [batch, f])],
        [(output_name, TensorProto.FLOAT, [batch, k])],
        [("W", w), ("B", b)],
    )


def identity_model(width: int, *, input_name: str = "x", output_name: str = "y", batch="N") -> onnx.ModelProto:
    """Returns its FLOAT ``[batch, width]`` input unchanged (shows exactly what a model was fed)."""
    return make_model(
        [helper.make_node("Identity", [input_name], [output_name])],
        [(input_name, TensorProto.FLOAT, [batch, width])],
        [(output_name, TensorProto.FLOAT, [batch, width])],
    )


def scale_model(factor: float, *, input_name: str = "x", output_name: str = "y") -> onnx.ModelProto:
    """``y = factor * x`` over a scalar-per-row FLOAT input of shape ``[N]``."""
    return make_model(
        [helper.make_node("Mul", [input_name, "k"], [output_name])],
        [(input_name, TensorProto.FLOAT, ["N"])],
        [(output_name, TensorProto.FLOAT, ["N"])],
        [("k", np.array(factor, dtype=np.float32))],
    )


def add_model() -> onnx.ModelProto:
    """Two inputs ``a``, ``b`` (FLOAT ``[N, 1]``) -> ``sum = a + b`` (FLOAT ``[N, 1]``)."""
    return make_model(
        [helper.make_node("Add", ["a", "b"], ["sum"])],
        [("a", TensorProto.FLOAT, ["N", 1]), ("b", TensorProto.FLOAT, ["N", 1])],
        [("sum", TensorProto.FLOAT, ["N", 1])],
    )


def argmax_model(width: int, input_name: str = "probabilities", output_name: str = "best") -> onnx.ModelProto:
    """ArgMax over axis 1 of a FLOAT ``[N, width]`` input -> INT64 ``[N]``."""
    return make_model(
        [helper.make_node("ArgMax", [input_name], [output_name], axis=1, keepdims=0)],
        [(input_name, TensorProto.FLOAT, ["N", width])],
        [(output_name, TensorProto.INT64, ["N"])],
    )


def save(model: onnx.ModelProto, path: os.PathLike) -> str:
    onnx.save_model(model, str(path))
    return str(path)


def run_onnx(model_bytes_or_path, feeds: dict) -> list[np.ndarray]:
    """Run a model directly in ONNX Runtime (the reference the PREDICT results are compared to)."""
    import onnxruntime as ort

    src = model_bytes_or_path
    if isinstance(src, onnx.ModelProto):
        src = src.SerializeToString()
    if isinstance(src, Path):
        src = str(src)
    sess = ort.InferenceSession(src, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


# ---------------------------------------------------------------- tables


def load_table(con, name: str, columns: dict[str, tuple[str, object]]) -> None:
    """``CREATE TABLE name`` from ``{column: (duckdb_type, values)}`` (all the same length).

    Values go in as one list parameter per column and are unnested side by side,
    so a 2-D array makes a ``T[k]`` column.
    """
    parts, params = [], []
    for col, (typ, values) in columns.items():
        values = values.tolist() if isinstance(values, np.ndarray) else list(values)
        parts.append(f'unnest(?::{typ}[]) AS "{col}"')
        params.append(values)
    con.execute(f'CREATE TABLE "{name}" AS SELECT {", ".join(parts)}', params)
    con.commit()


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def digits():
    """scikit-learn's shipped 8x8 digits: ``(X float64 [1797, 64], y int64 [1797])``."""
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    return X, y.astype(np.int64)


@pytest.fixture(scope="session")
def digits_pipe(digits):
    """A fitted StandardScaler + LogisticRegression pipeline on the digits."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X, y = digits
    return make_pipeline(StandardScaler(), LogisticRegression(max_iter=200)).fit(X, y)


@pytest.fixture(scope="session")
def digits_tree(digits):
    """A different fitted classifier on the digits (a shallow decision tree): other outputs."""
    from sklearn.tree import DecisionTreeClassifier

    X, y = digits
    return DecisionTreeClassifier(max_depth=4, random_state=0).fit(X, y)


@pytest.fixture(scope="session")
def torch_mlp():
    """A small torch MLP (8 -> 16 -> 3, seeded) and an example input batch."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3)
    )
    net.eval()
    return net, torch.randn(4, 8)


@pytest.fixture
def db(tmp_path) -> str:
    """Path of a fresh DuckDB file in tmp_path."""
    return str(tmp_path / "test.duckdb")


@pytest.fixture
def con(db):
    """A connection to a fresh file database, closed at teardown."""
    c = modelsql.connect(db)
    yield c
    if not c.closed:
        c.close()


@pytest.fixture
def digits_con(con, digits, digits_pipe):
    """``con`` with table ``digits(id INTEGER, input FLOAT[64], target BIGINT)`` and model ``digits``."""
    X, y = digits
    load_table(
        con,
        "digits",
        {"id": ("INTEGER", np.arange(len(y))), "input": ("FLOAT[64]", X), "target": ("BIGINT", y)},
    )
    con.import_model("digits", digits_pipe)
    return con
