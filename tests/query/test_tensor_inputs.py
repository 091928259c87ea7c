"""Tensor inputs of PREDICT (issue 6, items 4 and 5): rows wider than DuckDB's 100,000-value ``ARRAY``,
nested arrays and lists, and boolean tensors.

Real DuckDB files and real ONNX Runtime: an image CNN (torch layers, random weights) exported by
modelsql's own ``import_model``, tiny graphs built with ``onnx.helper``; every result is compared with
ONNX Runtime run directly on the exported model and the same NumPy array, in both execution modes.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from onnx import TensorProto, helper

import modelsql
from conftest import identity_model, load_table, make_model, run_onnx

MODES = ("stream", "batch")


def reference(con, tmp_path, model: str, feeds: dict) -> list[np.ndarray]:
    """Outputs of ONNX Runtime run directly on the model's exported bytes."""
    path = tmp_path / f"{model}.onnx"
    con.execute(f"EXPORT MODEL {model} TO '{path}'")
    return run_onnx(path, feeds)


def nested_table(con, tmp_path, name: str, rows: np.ndarray, typ: str, *, nested: bool = True) -> None:
    """``CREATE TABLE name (id INTEGER, input typ)`` from ``rows`` (one row per first index), through a
    Parquet file: each row nested as its NumPy shape, or flat (``nested=False``)."""
    col = pa.array(np.ascontiguousarray(rows).reshape(-1))
    for d in reversed(rows.shape[1:] if nested else (rows[0].size,)):
        col = pa.FixedSizeListArray.from_arrays(col, d)
    path = tmp_path / f"{name}.parquet"
    pq.write_table(pa.table({"id": pa.array(np.arange(len(rows), dtype=np.int32)), "input": col}), path)
    con.execute(f"CREATE TABLE {name} AS SELECT id, input::{typ} AS input FROM read_parquet('{path}')")
    con.commit()


def predicted(con, sql: str, column: str, dtype=np.float32) -> np.ndarray:
    cur = con.execute(sql)
    names = [d[0] for d in cur.description]
    return np.array([r[names.index(column)] for r in cur.fetchall()], dtype=dtype)


# ------------------------------------------------------------------ item 4: wide and nested rows


@pytest.fixture(scope="module")
def images() -> np.ndarray:
    """64 random 3x224x224 float32 images (150,528 values each)."""
    return np.random.default_rng(6).random((64, 3, 224, 224), dtype=np.float32)


@pytest.fixture(scope="module")
def image_net():
    """A small image CNN with random weights: Conv2d, ReLU, AvgPool2d, Linear to 5 outputs."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(6)
    nn = torch.nn
    layers = (nn.Conv2d(3, 4, 5, stride=4), nn.ReLU(), nn.AvgPool2d(5), nn.Flatten(), nn.Linear(484, 5))
    return nn.Sequential(*layers).eval()


def _import_image_net(con, image_net) -> None:
    import torch

    con.import_model("img", image_net, example_input=torch.zeros(1, 3, 224, 224))


@pytest.mark.parametrize(
    "typ, nested",
    [("FLOAT[]", False), ("FLOAT[224][224][3]", True), ("FLOAT[][][]", True), ("DOUBLE[]", False)],
)
def test_image_model_over_rows_of_150528_values(con, tmp_path, images, image_net, typ, nested):
    _import_image_net(con, image_net)
    assert [r[4] for r in con.execute("DESCRIBE MODEL img").fetchall() if r[0] == "input"] == ["[N, 3, 224, 224]"]
    nested_table(con, tmp_path, "imgs", images, typ, nested=nested)
    want, = reference(con, tmp_path, "img", {"input": images})
    for mode in MODES:
        sql = f"SELECT id, output FROM PREDICT(MODEL img, TABLE imgs, execution = '{mode}') ORDER BY id"
        np.testing.assert_allclose(predicted(con, sql, "output"), want, rtol=1e-5, atol=1e-6, err_msg=mode)


def test_channels_last_nested_array_is_refused_not_reinterpreted(con, image_net):
    # DuckDB writes the innermost size first: FLOAT[3][224][224] holds rows of 224 x 224 x 3 (channels last),
    # which read row-major would silently be another image; the error says which type holds 3 x 224 x 224.
    _import_image_net(con, image_net)
    with pytest.raises(modelsql.ProgrammingError) as info:
        con.execute("SELECT * FROM PREDICT(MODEL img, (SELECT NULL::FLOAT[3][224][224] AS input))").fetchall()
    assert info.value.code == "wrong_column_type"
    for text in ('"input"', "FLOAT[3][224][224]", "[224, 224, 3]", "FLOAT[224][224][3]", "FLOAT[] list"):
        assert text in str(info.value), text


@pytest.mark.parametrize("typ", ["FLOAT[8][8]", "FLOAT[][]", "FLOAT[64][1]"])
def test_nested_array_of_the_input_size_feeds_a_cnn(con, tmp_path, digits, typ):
    torch = pytest.importorskip("torch")
    X = digits[0][:300].astype(np.float32).reshape(-1, 8, 8)
    torch.manual_seed(1)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 10)
    ).eval()
    con.import_model("cnn", net, example_input=torch.randn(2, 1, 8, 8))
    rows = X if typ != "FLOAT[64][1]" else X.reshape(-1, 1, 64)
    load_table(con, "img", {"id": ("INTEGER", range(len(X))), "input": (typ, rows)})
    want, = reference(con, tmp_path, "cnn", {"input": X.reshape(-1, 1, 8, 8)})
    for mode in MODES:
        sql = f"SELECT id, output FROM PREDICT(MODEL cnn, TABLE img, execution = '{mode}') ORDER BY id"
        np.testing.assert_allclose(predicted(con, sql, "output"), want, rtol=1e-5, atol=1e-6, err_msg=mode)


def _row_sum_model(width: int):
    return make_model(
        [helper.make_node("ReduceSum", ["x", "ax"], ["s"], keepdims=0)],
        [("x", TensorProto.FLOAT, ["N", width])],
        [("s", TensorProto.FLOAT, ["N"])],
        [("ax", np.array([1], dtype=np.int64))],
    )


def _wide_rows(con, name: str, lengths: list[int]) -> None:
    parts = " UNION ALL ".join(
        f"SELECT {k} AS id, list((i % 3)::FLOAT ORDER BY i) AS x FROM range({n}) r(i)" for k, n in enumerate(lengths)
    )
    con.execute(f"CREATE TABLE {name} AS {parts}")
    con.commit()


def test_wide_list_rows_and_their_length_errors(con):
    width = 100_001
    con.import_model("rowsum", _row_sum_model(width))
    _wide_rows(con, "good", [width, width])
    _wide_rows(con, "ragged", [width, width - 1])
    _wide_rows(con, "short", [width - 1, width - 1])
    con.autocommit = True
    want = float((np.arange(width) % 3).sum())  # exact in float32, whatever the summation order
    for mode in MODES:
        got = predicted(con, f"SELECT id, s FROM PREDICT(MODEL rowsum, TABLE good, execution = '{mode}')", "s")
        assert got.tolist() == [want, want], mode
        for table, code in (("ragged", "ragged_input"), ("short", "wrong_input_shape")):
            with pytest.raises(modelsql.DataError) as info:
                con.execute(f"SELECT * FROM PREDICT(MODEL rowsum, TABLE {table}, execution = '{mode}')").fetchall()
            assert info.value.code == code, (mode, str(info.value))
            assert '"x"' in str(info.value) and '"rowsum"' in str(info.value)


def test_ragged_nested_lists_are_a_data_error(con):
    con.import_model("sq", _identity_2x3())
    con.execute("CREATE TABLE t AS SELECT * FROM (VALUES (1, [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]), "
                "(2, [[1.0, 2.0], [3.0, 4.0, 5.0, 6.0]])) v(id, x)")
    con.commit()
    con.autocommit = True
    for mode in MODES:
        with pytest.raises(modelsql.DataError) as info:
            con.execute(f"SELECT * FROM PREDICT(MODEL sq, TABLE t, execution = '{mode}')").fetchall()
        assert info.value.code == "ragged_input" and '"x"' in str(info.value) and "2 to 4" in str(info.value)


def _identity_2x3():
    return make_model(
        [helper.make_node("Identity", ["x"], ["y"])],
        [("x", TensorProto.FLOAT, ["N", 2, 3])],
        [("y", TensorProto.FLOAT, ["N", 2, 3])],
    )


@pytest.mark.parametrize("typ", ["FLOAT[3][2]", "FLOAT[][]"])
def test_nulls_inside_nested_rows(con, typ):
    # row 2: a NULL inner list; row 3: a NULL inner element; row 4: the row itself NULL
    con.import_model("sq", _identity_2x3())
    con.execute(
        f"CREATE TABLE t AS SELECT id, x::{typ} AS x FROM (VALUES (1, [[1, 2, 3], [4, 5, 6]]), (2, [[1, 2, 3], NULL]), "
        "(3, [[1, NULL, 3], [4, 5, 6]]), (4, NULL), (5, [[6, 5, 4], [3, 2, 1]])) v(id, x)"
    )
    con.commit()
    con.autocommit = True
    for mode in MODES:
        sql = f"SELECT id, y FROM PREDICT(MODEL sq, TABLE t, execution = '{mode}', on_null = '{{}}') ORDER BY id"
        rows = con.execute(sql.format("null")).fetchall()
        assert rows == [(1, [1, 2, 3, 4, 5, 6]), (2, None), (3, None), (4, None), (5, [6, 5, 4, 3, 2, 1])], mode
        assert [r[0] for r in con.execute(sql.format("skip")).fetchall()] == [1, 5], mode
        with pytest.raises(modelsql.DataError) as info:
            con.execute(sql.format("error")).fetchall()
        assert info.value.code == "null_input" and '"x" (3 rows)' in str(info.value), (mode, str(info.value))


# ------------------------------------------------------------------ item 5: boolean tensors


def _not_model():
    """``y = NOT x`` and ``f = CAST(x AS FLOAT)`` over a BOOL ``[N, 3]`` input."""
    return make_model(
        [helper.make_node("Not", ["x"], ["y"]), helper.make_node("Cast", ["x"], ["f"], to=TensorProto.FLOAT)],
        [("x", TensorProto.BOOL, ["N", 3])],
        [("y", TensorProto.BOOL, ["N", 3]), ("f", TensorProto.FLOAT, ["N", 3])],
    )


@pytest.mark.parametrize("typ", ["BOOLEAN[3]", "BOOLEAN[]"])
def test_boolean_arrays_feed_a_bool_input(con, tmp_path, typ):
    con.import_model("neg", _not_model())
    x = np.random.default_rng(5).random((500, 3)) < 0.5
    load_table(con, "b", {"id": ("INTEGER", range(len(x))), "x": (typ, x)})
    want_y, want_f = reference(con, tmp_path, "neg", {"x": x})
    for mode in MODES:
        sql = f"SELECT id, y, f FROM PREDICT(MODEL neg, TABLE b, execution = '{mode}') ORDER BY id"
        np.testing.assert_array_equal(predicted(con, sql, "y", dtype=bool), want_y, err_msg=mode)
        np.testing.assert_array_equal(predicted(con, sql, "f"), want_f, err_msg=mode)


def test_boolean_array_feeds_a_numeric_input_bound_by_name(con):
    # as a scalar BOOLEAN column named for a numeric input is: TRUE is 1, FALSE is 0
    con.import_model("ident", identity_model(3))
    con.execute("CREATE TABLE b AS SELECT * FROM (VALUES (1, [true, false, true]::BOOLEAN[3])) v(id, x)")
    assert con.execute("SELECT y FROM PREDICT(MODEL ident, TABLE b)").fetchall() == [((1.0, 0.0, 1.0),)]


@pytest.mark.parametrize("model, takes", [("neg", "booleans (BOOL)"), ("ident", "numbers (FLOAT)")])
def test_text_arrays_are_refused_for_bool_and_numeric_inputs(con, model, takes):
    con.import_model("neg", _not_model())
    con.import_model("ident", identity_model(3))
    with pytest.raises(modelsql.ProgrammingError) as info:
        con.execute(f"SELECT * FROM PREDICT(MODEL {model}, (SELECT ['a', 'b', 'c'] AS x))").fetchall()
    assert info.value.code == "wrong_column_type"
    assert '"x"' in str(info.value) and "VARCHAR[]" in str(info.value) and takes in str(info.value)
