"""Imported models' rows and outputs: models whose rows depend on each other (batch dependence and
``isolate_rows``), what EXPORT keeps, outputs that were dropped or no column can hold, and errors that name
the row (issue 6, items 2, 3, 6: ZipMap, unreturnable outputs, Arrow child names, and 7).

Real components throughout: scikit-learn's shipped data sets, skl2onnx, onnxruntime's own
``quantize_dynamic`` and bundled ``logreg_iris.onnx``, real DuckDB files.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import modelsql
from modelsql.analyses import batch_dependence

from conftest import load_table, make_model, run_onnx, save

# ------------------------------------------------------------------ item 2: batch dependence


@pytest.fixture(scope="module")
def quantized_mlp(tmp_path_factory, digits):
    """A 64-256-10 MLP trained on the digits, dynamically quantized by onnxruntime (DynamicQuantizeLinear)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from sklearn.neural_network import MLPClassifier

    from modelsql.converters import from_sklearn

    X, y = digits
    mlp = MLPClassifier(hidden_layer_sizes=(256,), max_iter=60, random_state=0).fit(X, y)
    model, _ = from_sklearn(mlp)
    folder = tmp_path_factory.mktemp("quant")
    plain = save(model, folder / "mlp.onnx")
    quantize_dynamic(plain, str(folder / "mlp_q.onnx"), weight_type=QuantType.QInt8)
    return str(folder / "mlp_q.onnx")


def _alone(path: str, X: np.ndarray) -> np.ndarray:
    """Row-at-a-time ONNX Runtime: each row's probabilities when it is run on its own."""
    import onnxruntime as ort

    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return np.concatenate([sess.run(["probabilities"], {"input": X[i : i + 1]})[0] for i in range(len(X))])


def test_quantized_mlp_every_row_gets_its_own_answer(con, digits, quantized_mlp):
    X, y = digits
    X = X.astype(np.float32).copy()
    X[5] *= 20  # one extreme row moves the batch's quantization scale for every other row
    alone = _alone(quantized_mlp, X)
    together = run_onnx(quantized_mlp, {"input": X})[1]
    assert np.abs(together - alone).max() > 1e-3  # the model really is batch-dependent
    load_table(con, "d", {"id": ("INTEGER", np.arange(len(y))), "input": ("FLOAT[64]", X)})
    con.execute(f"IMPORT MODEL q FROM '{quantized_mlp}'")
    props = {r[2]: r[5] for r in con.execute("DESCRIBE MODEL q").fetchall() if r[0] == "property"}
    assert "DynamicQuantizeLinear" in props["batch_dependence"]
    assert con.execute("SELECT batch_dependent FROM modelsql.models WHERE name = 'q'").fetchall() == [(True,)]
    for query in (
        "SELECT id, probabilities FROM PREDICT(MODEL q, TABLE d, execution = 'stream') ORDER BY id",
        "SELECT id, probabilities FROM PREDICT(MODEL q, TABLE d, execution = 'batch') ORDER BY id",
        "SELECT id, probabilities FROM PREDICT(MODEL q, TABLE d) WHERE id % 7 = 3 ORDER BY id",
        "SELECT id, probabilities FROM PREDICT(MODEL q, (SELECT * FROM d WHERE id > 1000)) ORDER BY id",
    ):
        rows = con.execute(query).fetchall()
        ids = np.array([r[0] for r in rows])
        got = np.array([r[1] for r in rows], dtype=np.float32)
        np.testing.assert_array_equal(got, alone[ids], err_msg=query)
    plan = "\n".join(r[1] for r in con.execute("EXPLAIN SELECT * FROM PREDICT(MODEL q, TABLE d)").fetchall())
    assert "rows run one at a time" in plan


def test_isolate_rows_false_lets_a_batch_dependent_model_batch(con, digits, quantized_mlp):
    X, _ = digits
    X = X[:300].astype(np.float32).copy()
    X[5] *= 20
    load_table(con, "d", {"id": ("INTEGER", np.arange(len(X))), "input": ("FLOAT[64]", X)})
    con.execute(f"IMPORT MODEL q FROM '{quantized_mlp}'")
    rows = con.execute(
        "SELECT probabilities FROM PREDICT(MODEL q, TABLE d, isolate_rows = false, execution = 'batch') ORDER BY id"
    ).fetchall()
    together = run_onnx(quantized_mlp, {"input": X})[1]
    np.testing.assert_allclose(np.array([r[0] for r in rows], dtype=np.float32), together, atol=1e-6)
    with pytest.raises(modelsql.ProgrammingError, match="isolate_rows must be true or false"):
        con.execute("SELECT * FROM PREDICT(MODEL q, TABLE d, isolate_rows = 'maybe')")


def _one_node(op: str, inputs, shape_in, shape_out, **attrs) -> onnx.ModelProto:
    extra = [n for n in inputs[1:]]
    nodes = []
    inits = []
    for name, value in extra:
        inits.append(onnx.numpy_helper.from_array(np.asarray(value), name))
    nodes.append(helper.make_node(op, ["x"] + [n for n, _ in extra], ["y"], **attrs))
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape_in)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape_out)], initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize(
    "op, extra, shape_out, attrs, mixes",
    [
        ("ReduceMean", [], ["N", 1], {"axes": [1]}, False),
        ("ReduceMean", [], [1, 4], {"axes": [0]}, True),
        ("ReduceSum", [("axes", np.array([0], dtype=np.int64))], [1, 4], {}, True),
        ("ReduceMax", [], [1, 1], {}, True),  # no axes: every axis
        ("Softmax", [], ["N", 4], {"axis": 1}, False),
        ("Softmax", [], ["N", 4], {"axis": 0}, True),
        ("Gather", [("i", np.array([0, 0], dtype=np.int64))], [2, 4], {"axis": 0}, True),
        ("Gather", [("i", np.array([1, 2], dtype=np.int64))], ["N", 2], {"axis": 1}, False),
        ("Reshape", [("s", np.array([-1, 8], dtype=np.int64))], ["M", 8], {}, True),  # merges row pairs
        ("Reshape", [("s", np.array([0, 2, 2], dtype=np.int64))], ["N", 2, 2], {}, False),
        ("Transpose", [], [4, "N"], {"perm": [1, 0]}, True),  # output rows would be the input's columns
        ("LayerNormalization", [("w", np.ones(4, np.float32))], ["N", 4], {"axis": -1}, False),
        ("LayerNormalization", [("w", np.ones((1, 4), np.float32))], ["N", 4], {"axis": 0}, True),
        ("CumSum", [("a", np.array(0, dtype=np.int64))], ["N", 4], {}, True),
        ("Flatten", [], [1, 1], {"axis": 0}, True),
    ],
)
def test_batch_axis_analysis_of_single_nodes(op, extra, shape_out, attrs, mixes):
    model = _one_node(op, [None] + extra, ["N", 4], shape_out, **attrs)
    reason = batch_dependence(model)
    assert (reason is not None) == mixes, reason
    if mixes:
        assert op in reason or "axis 1, not on axis 0" in reason


def test_batch_axis_analysis_of_common_models(digits, digits_pipe, digits_tree, torch_mlp):
    torch = pytest.importorskip("torch")
    from modelsql.converters import from_sklearn, from_torch

    assert batch_dependence(from_sklearn(digits_pipe)[0]) is None
    assert batch_dependence(from_sklearn(digits_tree)[0]) is None
    from sklearn.impute import SimpleImputer
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import KBinsDiscretizer

    x = digits[0][:, 20:24]  # quantile buckets after an imputer (ONNX infers no shape past ai.onnx.ml's Imputer)
    binned = make_pipeline(SimpleImputer(), KBinsDiscretizer(n_bins=3, encode="onehot-dense", quantile_method="linear"))
    assert batch_dependence(from_sklearn(binned.fit(x))[0]) is None
    net, example = torch_mlp
    assert batch_dependence(from_torch(net, example)) is None

    class Cnn(torch.nn.Module):  # x.view(x.size(0), -1): Shape -> Gather -> Concat -> Reshape
        def __init__(self):
            super().__init__()
            self.conv, self.fc = torch.nn.Conv2d(1, 2, 3), torch.nn.Linear(2 * 3 * 3, 10)

        def forward(self, x):
            x = torch.nn.functional.max_pool2d(torch.relu(self.conv(x)), 2)
            return torch.softmax(self.fc(x.view(x.size(0), -1)), dim=1)

    assert batch_dependence(from_torch(Cnn().eval(), torch.zeros(2, 1, 8, 8))) is None

    class Centre(torch.nn.Module):  # subtracts the batch mean: every row depends on the others
        def forward(self, x):
            return x - x.mean(dim=0, keepdim=True)

    class Positions(torch.nn.Module):  # adds each row's position in the batch
        def forward(self, x):
            return x + torch.arange(x.shape[0]).unsqueeze(1)

    assert "ReduceMean" in batch_dependence(from_torch(Centre(), torch.zeros(2, 4)))

    # torch's attention folds the heads into the batch axis ([L, N * heads, E / heads]) and back
    encoder = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True), 2).eval()
    assert batch_dependence(from_torch(encoder, torch.zeros(2, 5, 8))) is None

    class Pairs(torch.nn.Module):  # folds row pairs together: [N, 4] -> [N / 2, 8] mixes rows
        def forward(self, x):
            return x.reshape(-1, 8).sum(dim=1, keepdim=True).reshape(-1, 1)

    class Halves(torch.nn.Module):  # [N, 4] -> [N * 2, 2] rows out: each "row" is half an input row
        def forward(self, x):
            return x.reshape(-1, 2)

    assert batch_dependence(from_torch(Pairs(), torch.zeros(2, 4))) is not None
    assert "folded" in batch_dependence(from_torch(Halves(), torch.zeros(2, 4)))
    assert "batch size" in batch_dependence(from_torch(Positions(), torch.zeros(2, 4)))


# ------------------------------------------------------------------ item 3: EXPORT keeps features


def test_export_then_import_keeps_feature_names(con, tmp_path):
    from sklearn.datasets import load_iris
    from sklearn.ensemble import RandomForestClassifier

    data = load_iris()
    names = ["sepal_length", "sepal_width", "petal_length", "petal_width"]
    forest = RandomForestClassifier(n_estimators=10, random_state=0).fit(data.data, data.target)
    con.import_model("iris", forest, features=names)
    target = tmp_path / "iris.onnx"
    con.execute(f"EXPORT MODEL iris TO '{target}'")
    props = {p.key: p.value for p in onnx.load(str(target)).metadata_props}
    assert props["modelsql.features"] == '["sepal_length", "sepal_width", "petal_length", "petal_width"]'
    assert '"probabilities": {"column": "probabilities", "type": "FLOAT[3]"}' in props["modelsql.outputs"]
    assert props["modelsql.version"] == f'"{modelsql.__version__}"'
    con.execute(f"IMPORT MODEL again FROM '{target}'")
    # the columns in another order: bound by name, so the same answers (setosa stays label 0)
    reordered = {n: ("DOUBLE", data.data[:, names.index(n)]) for n in reversed(names)}
    load_table(con, "flowers", {"id": ("INTEGER", np.arange(150)), **reordered})
    got = [r[0] for r in con.execute("SELECT label FROM PREDICT(MODEL again, TABLE flowers) ORDER BY id").fetchall()]
    assert got == forest.predict(data.data).tolist()
    show = con.execute("SHOW MODELS").fetchall()
    columns = [d[0] for d in con.execute("SHOW MODELS").description]
    assert {r[0]: r[columns.index("features")] for r in show}["again"] == ", ".join(names)
    described = con.execute("DESCRIBE MODEL again").fetchall()
    assert ("input", 0, "input", "FLOAT", "[N, 4]", "features: " + ", ".join(names)) in described


def test_import_refuses_bad_feature_metadata(con, tmp_path):
    model = make_model([helper.make_node("Identity", ["x"], ["y"])], [("x", TensorProto.FLOAT, ["N", 2])],
                       [("y", TensorProto.FLOAT, ["N", 2])])
    model.metadata_props.add(key="modelsql.features", value="not json")
    path = save(model, tmp_path / "bad.onnx")
    with pytest.raises(modelsql.DataError, match="modelsql.features"):
        con.execute(f"IMPORT MODEL bad FROM '{path}'")
    assert con.execute("SELECT count(*) FROM modelsql.model_versions").fetchall() == [(0,)]


# ------------------------------------------------------------------ item 6: outputs


def test_zipmap_output_is_a_map_column(con):
    import onnxruntime

    path = os.path.join(os.path.dirname(onnxruntime.__file__), "datasets", "logreg_iris.onnx")
    from sklearn.datasets import load_iris

    X = load_iris().data[:, :2].astype(np.float32)
    load_table(con, "iris", {"id": ("INTEGER", np.arange(150)), "float_input": ("FLOAT[2]", X)})
    con.execute(f"IMPORT MODEL lr FROM '{path}'")
    outputs = [r for r in con.execute("DESCRIBE MODEL lr").fetchall() if r[0] == "output"]
    assert outputs[1][2:4] == ("probabilities", "SEQUENCE(MAP(INT64, FLOAT))")
    for execution in ("stream", "batch"):
        cur = con.execute(f"SELECT id, label, probabilities FROM PREDICT(MODEL lr, TABLE iris, "
                          f"execution = '{execution}') ORDER BY id")
        assert [d[1] for d in cur.description][1:] == ["BIGINT", "MAP(BIGINT, FLOAT)"]
        rows = cur.fetchall()
        labels, maps = run_onnx(path, {"float_input": X[:3]})  # the model's batch is fixed at 3
        assert [r[1] for r in rows[:3]] == labels.tolist()
        for got, want in zip([r[2] for r in rows[:3]], maps):
            assert got.keys() == want.keys()
            np.testing.assert_allclose(list(got.values()), list(want.values()), rtol=1e-6)
    assert con.execute("SELECT probabilities[2] > 0 FROM PREDICT(MODEL lr, TABLE iris) LIMIT 1").fetchall() == [(True,)]


def test_an_output_no_column_can_hold_is_refused_at_import(con, tmp_path):
    nodes = [helper.make_node("SequenceConstruct", ["x", "x"], ["seq"]), helper.make_node("Identity", ["x"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2]),
         helper.make_tensor_sequence_value_info("seq", TensorProto.FLOAT, None)],
    )
    path = save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "seq.onnx")
    with pytest.raises(modelsql.NotSupportedError, match='output "seq" has type SEQUENCE\\(FLOAT\\)') as ei:
        con.execute(f"IMPORT MODEL s FROM '{path}'")
    assert ei.value.code == "output_type_not_supported"
    assert con.execute("SELECT count(*) FROM modelsql.model_versions").fetchall() == [(0,)]


def test_array_outputs_have_named_arrow_children(digits_con):
    table = digits_con.execute("SELECT input, probabilities FROM PREDICT(MODEL digits, TABLE digits) LIMIT 3").fetch_arrow()
    assert table.schema.field("probabilities").type.value_field.name == "item"
    assert table.schema.field("input").type.value_field.name == "item"
    assert table.num_rows == 3


# ------------------------------------------------------------------ item 7: errors that name the row


@pytest.fixture
def encoder_con(con):
    """Model ``enc``: OneHotEncoder(handle_unknown='error') on color + size -> LogisticRegression,
    and table ``t`` with two rows of the unseen colour 'purple'."""
    pd = pytest.importorskip("pandas")
    from sklearn.compose import make_column_transformer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder

    frame = pd.DataFrame({"color": ["red", "green", "blue"] * 20, "size": np.arange(60.0)})
    pipe = make_pipeline(
        make_column_transformer((OneHotEncoder(handle_unknown="error"), ["color"]), ("passthrough", ["size"])),
        LogisticRegression(),
    ).fit(frame, (frame["color"] == "red").astype(int))
    con.import_model("enc", pipe)
    con.execute("CREATE TABLE t AS SELECT * FROM (VALUES (1, 'red', 1.0), (2, 'purple', 2.0), (3, 'blue', 3.0), "
                "(4, 'purple', 4.0), (5, 'green', 5.0)) v(id, color, size)")
    con.commit()
    con.autocommit = True
    return con, pipe, pd


@pytest.mark.parametrize("execution", ["stream", "batch"])
def test_failing_rows_are_named_by_column_and_value(encoder_con, execution):
    con, _, _ = encoder_con
    with pytest.raises(modelsql.DataError) as ei:
        con.execute(f"SELECT * FROM PREDICT(MODEL enc, TABLE t, execution = '{execution}')").fetchall()
    msg = str(ei.value)
    assert 'column "color" value \'purple\'' in msg and "2 of the 5 rows" in msg, msg
    assert "Unknown Category" in msg and "on_error = 'null'" in msg
    assert ei.value.code == "inference_failed"


@pytest.mark.parametrize("execution", ["stream", "batch"])
def test_on_error_null_and_skip(encoder_con, execution):
    con, pipe, pd = encoder_con
    known = pipe.predict(pd.DataFrame({"color": ["red", "blue", "green"], "size": [1.0, 3.0, 5.0]})).tolist()
    rows = con.execute(f"SELECT id, label FROM PREDICT(MODEL enc, TABLE t, on_error = 'null', "
                       f"execution = '{execution}') ORDER BY id").fetchall()
    assert rows == [(1, known[0]), (2, None), (3, known[1]), (4, None), (5, known[2])]
    rows = con.execute(f"SELECT id, label FROM PREDICT(MODEL enc, TABLE t, on_error = 'skip', "
                       f"execution = '{execution}') ORDER BY id").fetchall()
    assert rows == [(1, known[0]), (3, known[1]), (5, known[2])]
    assert con.execute("SELECT count(*) FROM PREDICT(MODEL enc, TABLE t, on_error = 'skip')").fetchall() == [(3,)]
    for bad in ("'ignore'", "NULL"):
        with pytest.raises(modelsql.ProgrammingError, match="on_error must be one of"):
            con.execute(f"SELECT * FROM PREDICT(MODEL enc, TABLE t, on_error = {bad})")
    with pytest.raises(modelsql.ProgrammingError, match="on_null must be one of .* not NULL"):
        con.execute("SELECT * FROM PREDICT(MODEL enc, TABLE t, on_null = NULL)")


def test_when_every_row_fails_the_error_shows_the_first_rows_values(encoder_con):
    con, _, _ = encoder_con
    with pytest.raises(modelsql.DataError) as ei:
        con.execute("SELECT * FROM PREDICT(MODEL enc, (SELECT * FROM t WHERE color = 'purple'))").fetchall()
    assert "2 of the 2 rows" in str(ei.value) and "color = 'purple', size = 2.0" in str(ei.value)


def test_outputs_wider_than_a_duckdb_array_come_back_as_lists(con):
    model = make_model([helper.make_node("Tile", ["x", "r"], ["y"])], [("x", TensorProto.FLOAT, ["N", 2])],
                       [("y", TensorProto.FLOAT, ["N", 150_528])],
                       initializers=[("r", np.array([1, 75_264], dtype=np.int64))])
    con.import_model("wide", model)
    load_table(con, "t", {"x": ("FLOAT[2]", np.array([[1.0, 2.0], [3.0, 4.0]]))})
    cur = con.execute("SELECT y FROM PREDICT(MODEL wide, TABLE t)")
    assert cur.description[0][1] == "FLOAT[]"
    rows = cur.fetchall()
    assert len(rows[0][0]) == 150_528 and rows[1][0][:4] == [3.0, 4.0, 3.0, 4.0]


@pytest.mark.parametrize("on_error", ["error", "null", "skip"])
def test_on_error_in_batch_mode_over_packed_number_columns(con, on_error):
    """Batch execution feeds packed number columns column-major (F, n): the failing-row search must
    still read rows, not features. An Embedding over ids 0..9 fails on ids 10 and 11."""
    torch = pytest.importorskip("torch")

    class Lookup(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(10, 2)

        def forward(self, x):
            return self.emb(x[:, 0].long()) + x[:, 1:2]

    con.import_model("m", Lookup().eval(), example_input=torch.zeros(1, 2), features=["a", "b"],
                     output_names=("out",))
    con.execute("CREATE TABLE t AS SELECT i AS id, (i % 12)::FLOAT AS a, 0.5::FLOAT AS b FROM range(100) r(i)")
    con.commit()
    query = f"SELECT id, out FROM PREDICT(MODEL m, TABLE t, on_error = '{on_error}', execution = 'batch') ORDER BY id"
    if on_error == "error":
        with pytest.raises(modelsql.DataError) as ei:
            con.execute(query).fetchall()
        assert 'column "a" value 10.0 (16 of the 100 rows' in str(ei.value), str(ei.value)
        return
    rows = con.execute(query).fetchall()
    streamed = con.execute(query.replace("'batch'", "'stream'")).fetchall()
    assert rows == streamed
    bad = [i for i in range(100) if i % 12 >= 10]
    if on_error == "null":
        assert len(rows) == 100 and [r[0] for r in rows if r[1] is None] == bad
    else:
        assert [r[0] for r in rows] == [i for i in range(100) if i not in bad]


def test_feature_metadata_that_does_not_fit_is_blamed_on_the_file(con, tmp_path):
    model = make_model([helper.make_node("Identity", ["x"], ["y"])], [("x", TensorProto.FLOAT, ["N", 3])],
                       [("y", TensorProto.FLOAT, ["N", 3])])
    model.metadata_props.add(key="modelsql.features", value='["a", "b"]')
    path = save(model, tmp_path / "two.onnx")
    with pytest.raises(modelsql.ProgrammingError, match="metadata entry modelsql.features names 2") as ei:
        con.execute(f"IMPORT MODEL m FROM '{path}'")
    assert "override" in str(ei.value)
    con.execute(f"IMPORT MODEL m FROM '{path}' WITH (features = (p, q, r))")  # naming them overrides the file
    assert con.execute("SELECT features FROM modelsql.model_versions").fetchone() == (["p", "q", "r"],)


def test_list_rows_of_the_wrong_length_name_the_column_and_input(con):
    from conftest import identity_model

    con.import_model("m", identity_model(4))
    con.execute("CREATE TABLE t AS SELECT [1.0, 2.0, 3.0]::FLOAT[] AS x")
    con.commit()
    with pytest.raises(modelsql.DataError) as ei:
        con.execute("SELECT * FROM PREDICT(MODEL m, TABLE t)").fetchall()
    assert ei.value.code == "wrong_input_shape"
    assert 'column "x" holds rows of 3 values, but model input "x" takes 4' in str(ei.value)


def test_fixed_batch_model_whose_output_has_no_batch_axis_is_an_error(con, tmp_path):
    """Split of a fixed float[3] into [2] and [1]: padding rows to the batch and slicing the outputs
    would invent values; it is a wrong_output_shape error instead."""
    model = make_model([helper.make_node("Split", ["x", "s"], ["a", "b"], axis=0)], [("x", TensorProto.FLOAT, [3])],
                       [("a", TensorProto.FLOAT, [2]), ("b", TensorProto.FLOAT, [1])],
                       initializers=[("s", np.array([2, 1], dtype=np.int64))])
    con.import_model("split", model)
    con.execute("CREATE TABLE t AS SELECT range::FLOAT AS x FROM range(3)")
    con.commit()
    for extra in ("", ", isolate_rows = false", ", on_error = 'null'"):
        with pytest.raises(modelsql.DataError) as ei:
            con.execute(f"SELECT * FROM PREDICT(MODEL split, TABLE t{extra})").fetchall()
        assert ei.value.code == "wrong_output_shape", (extra, str(ei.value))
        con.rollback()


def test_onnxruntime_bundled_ir3_model_imports(con):
    import onnxruntime

    path = os.path.join(os.path.dirname(onnxruntime.__file__), "datasets", "mul_1.onnx")
    con.import_model("mul", path)  # IR 3: its initializer is not a graph input, which ORT accepts
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    load_table(con, "t", {"X": ("FLOAT[2]", x)})
    got = np.array([r[0] for r in con.execute("SELECT Y FROM PREDICT(MODEL mul, TABLE t)").fetchall()], np.float32)
    np.testing.assert_array_equal(got, run_onnx(path, {"X": x})[0])


def test_linear_svc_imports_and_predicts(con):
    """skl2onnx's LinearSVC converter takes no zipmap option (it returns tensors already)."""
    from sklearn.datasets import load_iris
    from sklearn.svm import LinearSVC

    X, y = load_iris(return_X_y=True)
    svc = LinearSVC(random_state=0).fit(X, y)
    con.import_model("svc", svc, example_input=X, features=["a", "b", "c", "d"])
    load_table(con, "t", {"id": ("INTEGER", np.arange(150)), **{c: ("DOUBLE", X[:, i]) for i, c in enumerate("abcd")}})
    got = [r[0] for r in con.execute("SELECT label FROM PREDICT(MODEL svc, TABLE t) ORDER BY id").fetchall()]
    assert got == svc.predict(X).tolist()


def test_types_numpy_has_no_dtype_for_are_refused_at_import(con, tmp_path):
    """BFLOAT16 has no NumPy type: ONNX Runtime can neither take nor return it through NumPy, so such a
    model would fail on every row; it is refused at import, naming the input or output."""
    out = make_model([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.BFLOAT16)],
                     [("x", TensorProto.FLOAT, ["N", 2])], [("y", TensorProto.BFLOAT16, ["N", 2])])
    with pytest.raises(modelsql.NotSupportedError, match='output "y" has type BFLOAT16') as ei:
        con.import_model("b", out)
    assert ei.value.code == "output_type_not_supported"
    inp = make_model([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT)],
                     [("x", TensorProto.BFLOAT16, ["N", 2])], [("y", TensorProto.FLOAT, ["N", 2])])
    with pytest.raises(modelsql.NotSupportedError, match='input "x" has type BFLOAT16') as ei:
        con.import_model("b", inp)
    assert ei.value.code == "input_type_not_supported"
    assert con.execute("SELECT count(*) FROM modelsql.model_versions").fetchone() == (0,)


def test_transformer_encoder_predicts_as_onnx_runtime_batched(con):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    encoder = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True), 1).eval()
    con.import_model("enc", encoder, example_input=torch.zeros(2, 5, 8))
    assert con.execute("SELECT batch_dependent FROM modelsql.models").fetchone() == (False,)
    x = np.random.default_rng(0).standard_normal((50, 5, 8)).astype(np.float32)
    load_table(con, "t", {"id": ("INTEGER", np.arange(50)), "input": ("FLOAT[8][5]", x)})
    rows = con.execute("SELECT output FROM PREDICT(MODEL enc, TABLE t) ORDER BY id").fetchall()
    from modelsql.converters import from_torch

    want = run_onnx(from_torch(encoder, torch.zeros(2, 5, 8)), {"input": x})[0]
    np.testing.assert_allclose(np.array([r[0] for r in rows], dtype=np.float32).reshape(want.shape), want,
                               rtol=1e-5, atol=1e-5)
