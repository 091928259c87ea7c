"""PREDICT end to end: real DuckDB files, real ONNX Runtime, real models.

Every result is checked against ONNX Runtime (or torch) run directly on the same
model bytes (exported with ``EXPORT MODEL``) and the same data cast with NumPy.
"""

from __future__ import annotations

from decimal import Decimal

import numpy as np
import onnx
import pytest

import modelsql
from conftest import (
    add_model,
    argmax_model,
    identity_model,
    linear_model,
    load_table,
    run_onnx,
    save,
    scale_model,
)


def reference(con, tmp_path, model: str, feeds: dict, version=None) -> list[np.ndarray]:
    """Outputs of ONNX Runtime run directly on the model's exported bytes."""
    path = tmp_path / f"{model}-{version or 'latest'}.onnx"
    ver = f" VERSION {version}" if version is not None else ""
    con.execute(f"EXPORT MODEL {model}{ver} TO '{path}'")
    return run_onnx(path, feeds)


def column_types(cur) -> dict[str, str]:
    return {d[0]: d[1] for d in cur.description}


# ------------------------------------------------------------------ queries


def test_group_by_accuracy_per_class(digits_con, digits, tmp_path):
    X, y = digits
    label, _ = reference(digits_con, tmp_path, "digits", {"input": X.astype(np.float32)})
    rows = digits_con.execute(
        "SELECT target, count(*) AS n, avg(CASE WHEN label = target THEN 1 ELSE 0 END) AS acc "
        "FROM PREDICT(MODEL digits, TABLE digits) GROUP BY target ORDER BY target"
    ).fetchall()
    assert [r[0] for r in rows] == list(range(10))
    for cls, n, acc in rows:
        mask = y == cls
        assert n == mask.sum()
        assert acc == pytest.approx((label[mask] == cls).mean())
    assert (label == y).mean() > 0.95


def test_join_with_another_table(digits_con, digits):
    X, y = digits
    con = digits_con
    load_table(con, "names", {"digit": ("BIGINT", range(10)), "word": ("VARCHAR", [f"w{i}" for i in range(10)])})
    rows = con.execute(
        "SELECT p.id, n.word, t.target FROM PREDICT(MODEL digits, TABLE digits) AS p "
        "JOIN names AS n ON p.label = n.digit JOIN digits AS t ON t.id = p.id ORDER BY p.id"
    ).fetchall()
    assert len(rows) == len(y)
    assert [r[0] for r in rows] == list(range(len(y)))
    assert sum(r[1] == f"w{r[2]}" for r in rows) / len(rows) > 0.95


def test_cte_containing_predict(digits_con, digits):
    X, y = digits
    (correct, total), = digits_con.execute(
        "WITH p AS (SELECT id, label, target FROM PREDICT(MODEL digits, TABLE digits)) "
        "SELECT count(*) FILTER (WHERE label = target), count(*) FROM p"
    ).fetchall()
    assert total == len(y)
    direct = digits_con.execute(
        "SELECT count(*) FROM PREDICT(MODEL digits, TABLE digits) WHERE label = target"
    ).fetchone()[0]
    assert correct == direct


def test_predict_in_where_in_subquery(digits_con):
    wrong = digits_con.execute(
        "SELECT id FROM digits WHERE id IN "
        "(SELECT id FROM PREDICT(MODEL digits, TABLE digits) WHERE label <> target) ORDER BY id"
    ).fetchall()
    expected = digits_con.execute(
        "SELECT id FROM PREDICT(MODEL digits, TABLE digits) WHERE label <> target ORDER BY id"
    ).fetchall()
    assert wrong == expected
    assert 0 < len(wrong) < 100


def test_predict_over_subquery_with_parameters(digits_con, digits, tmp_path):
    X, y = digits
    rows = digits_con.execute(
        "SELECT id, label FROM PREDICT(MODEL digits, (SELECT id, input FROM digits WHERE target = ?)) ORDER BY id",
        [3],
    ).fetchall()
    ids = np.flatnonzero(y == 3)
    assert [r[0] for r in rows] == ids.tolist()
    label, _ = reference(digits_con, tmp_path, "digits", {"input": X[ids].astype(np.float32)})
    assert [r[1] for r in rows] == label.tolist()


def test_parameters_inside_and_outside_predict(digits_con, digits, tmp_path):
    X, y = digits
    label, _ = reference(digits_con, tmp_path, "digits", {"input": X.astype(np.float32)})
    sql = (
        "SELECT id, label FROM PREDICT(MODEL digits, (SELECT id, input FROM digits WHERE target = ? AND id >= ?)) "
        "WHERE label = ? AND id < ? ORDER BY id"
    )
    rows = digits_con.execute(sql, [5, 100, 5, 1500]).fetchall()
    ids = np.arange(len(y))
    want = ids[(y == 5) & (ids >= 100) & (label == 5) & (ids < 1500)]
    assert [r[0] for r in rows] == want.tolist()
    # the same statement with other values: parameters are not baked into anything cached
    rows = digits_con.execute(sql, [7, 0, 7, 10_000]).fetchall()
    want = ids[(y == 7) & (label == 7)]
    assert [r[0] for r in rows] == want.tolist()
    # a parameter before the PREDICT in the text (select list) and after it
    rows = digits_con.execute(
        "SELECT ? AS tag, count(*) FROM PREDICT(MODEL digits, (SELECT input FROM digits WHERE target = ?)) "
        "WHERE label = ?",
        ["x", 2, 2],
    ).fetchall()
    assert rows == [("x", int(((y == 2) & (label == 2)).sum()))]


def test_order_by_and_limit(digits_con, digits, tmp_path):
    X, y = digits
    rows = digits_con.execute(
        "SELECT id, label FROM PREDICT(MODEL digits, TABLE digits) ORDER BY id DESC LIMIT 5"
    ).fetchall()
    assert [r[0] for r in rows] == [len(y) - i for i in range(1, 6)]
    label, _ = reference(digits_con, tmp_path, "digits", {"input": X[-5:][::-1].astype(np.float32)})
    assert [r[1] for r in rows] == label.tolist()
    rows = digits_con.execute(
        "SELECT id FROM PREDICT(MODEL digits, TABLE digits) ORDER BY probabilities[1] DESC, id LIMIT 3 OFFSET 2"
    ).fetchall()
    assert len(rows) == 3


def test_alias_and_qualified_columns(digits_con):
    rows = digits_con.execute(
        "SELECT p.id, p.label, p.probabilities[p.label + 1] AS conf "
        "FROM PREDICT(MODEL digits, TABLE digits) AS p WHERE p.id < 3 ORDER BY p.id"
    ).fetchall()
    assert [r[0] for r in rows] == [0, 1, 2]
    for _, label, conf in rows:
        assert 0.0 <= conf <= 1.0
    # alias with a column list is DuckDB's: still fine on a PREDICT
    cur = digits_con.execute("SELECT p.label FROM PREDICT(MODEL digits, TABLE digits) p WHERE p.id = 0")
    assert cur.fetchall() == [(0,)]


def test_predict_of_predict_output(digits_con, digits, tmp_path):
    X, y = digits
    con = digits_con
    con.import_model("argmax10", argmax_model(10))
    rows = con.execute(
        "SELECT id, label, best FROM PREDICT(MODEL argmax10, "
        "(SELECT id, label, probabilities FROM PREDICT(MODEL digits, TABLE digits))) ORDER BY id"
    ).fetchall()
    assert len(rows) == len(y)
    assert all(label == best for _, label, best in rows)
    # directly nested, with the inner PREDICT's whole output (input, target, ...) passing through
    cur = con.execute(
        "SELECT * FROM PREDICT(MODEL argmax10, (SELECT * FROM PREDICT(MODEL digits, TABLE digits) WHERE id < 50))"
    )
    names = [d[0] for d in cur.description]
    assert names == ["id", "input", "target", "label", "probabilities", "best"]
    out = cur.fetchall()
    assert len(out) == 50 and all(r[3] == r[5] for r in out)


def test_two_predicts_in_one_statement(digits_con, digits, digits_tree):
    con = digits_con
    con.import_model("tree", digits_tree)
    rows = con.execute(
        "SELECT a.id, a.label, b.label FROM PREDICT(MODEL digits, TABLE digits) AS a "
        "JOIN PREDICT(MODEL tree, TABLE digits) AS b ON a.id = b.id ORDER BY a.id"
    ).fetchall()
    X, y = digits
    assert len(rows) == len(y)
    tree_pred = digits_tree.predict(X.astype(np.float32))
    assert sum(r[2] == t for r, t in zip(rows, tree_pred)) / len(rows) > 0.99


def test_versions_are_addressable(con, tmp_path):
    v1 = save(scale_model(2.0), tmp_path / "v1.onnx")
    v2 = save(scale_model(3.0), tmp_path / "v2.onnx")
    con.execute(f"IMPORT MODEL scaler FROM '{v1}'")
    load_table(con, "t", {"x": ("DOUBLE", [1.0, 2.0, 5.0])})
    assert con.execute("SELECT y FROM PREDICT(MODEL scaler, TABLE t) ORDER BY x").fetchall() == [(2.0,), (4.0,), (10.0,)]
    con.execute(f"CREATE OR REPLACE MODEL scaler FROM '{v2}'")
    assert con.execute("SELECT max(version) FROM modelsql.model_versions WHERE name = 'scaler'").fetchone() == (2,)
    latest = con.execute("SELECT y FROM PREDICT(MODEL scaler, TABLE t) ORDER BY x").fetchall()
    pinned1 = con.execute("SELECT y FROM PREDICT(MODEL scaler VERSION 1, TABLE t) ORDER BY x").fetchall()
    pinned2 = con.execute("SELECT y FROM PREDICT(MODEL scaler VERSION 2, TABLE t) ORDER BY x").fetchall()
    assert latest == pinned2 == [(3.0,), (6.0,), (15.0,)]
    assert pinned1 == [(2.0,), (4.0,), (10.0,)]
    # both versions in one statement
    both = con.execute(
        "SELECT a.x, a.y, b.y FROM PREDICT(MODEL scaler VERSION 1, TABLE t) AS a "
        "JOIN PREDICT(MODEL scaler VERSION 2, TABLE t) AS b USING (x) ORDER BY a.x"
    ).fetchall()
    assert both == [(1.0, 2.0, 3.0), (2.0, 4.0, 6.0), (5.0, 10.0, 15.0)]
    # a fresh connection (no session cache shared by accident across versions) agrees
    con.close()
    from modelsql.operators.backends import onnxruntime as ort_backend

    ort_backend.clear_cache()
    with modelsql.connect(str(tmp_path / "test.duckdb")) as c2:
        assert c2.execute("SELECT y FROM PREDICT(MODEL scaler VERSION 1, TABLE t) ORDER BY x").fetchall() == pinned1
        assert c2.execute("SELECT y FROM PREDICT(MODEL scaler, TABLE t) ORDER BY x").fetchall() == latest


def test_versions_of_two_different_sklearn_models(digits_con, digits, digits_tree, tmp_path):
    X, y = digits
    con = digits_con
    con.import_model("digits", digits_tree, replace=True)
    v1 = con.execute("SELECT label FROM PREDICT(MODEL digits VERSION 1, TABLE digits) ORDER BY id").fetchall()
    v2 = con.execute("SELECT label FROM PREDICT(MODEL digits VERSION 2, TABLE digits) ORDER BY id").fetchall()
    latest = con.execute("SELECT label FROM PREDICT(MODEL digits, TABLE digits) ORDER BY id").fetchall()
    ref1, _ = reference(con, tmp_path, "digits", {"input": X.astype(np.float32)}, version=1)
    ref2, _ = reference(con, tmp_path, "digits", {"input": X.astype(np.float32)}, version=2)
    assert [r[0] for r in v1] == ref1.tolist()
    assert [r[0] for r in v2] == ref2.tolist() == [r[0] for r in latest]
    assert ref1.tolist() != ref2.tolist()


# ------------------------------------------------------------------ outputs


def test_output_types_in_description(digits_con):
    cur = digits_con.execute("SELECT * FROM PREDICT(MODEL digits, TABLE digits) WHERE id < 2")
    types = column_types(cur)
    assert types["label"] == "BIGINT"
    assert types["label"] == modelsql.NUMBER
    assert types["probabilities"] == "FLOAT[10]"
    rows = cur.fetchall()
    for row in rows:
        label, probs = row[3], row[4]
        assert isinstance(label, int)
        assert len(probs) == 10 and abs(sum(probs) - 1.0) < 1e-4
        assert label == int(np.argmax(probs))


def test_passthrough_of_all_input_columns(con, tmp_path):
    model = save(linear_model(np.eye(2, 1)), tmp_path / "m.onnx")
    con.execute(f"IMPORT MODEL lin FROM '{model}'")
    con.execute(
        "CREATE TABLE t AS SELECT * FROM (VALUES "
        "(1, 'one', DATE '2024-01-02', [1, 2], 0.5::DOUBLE, 1.5::DOUBLE, TRUE), "
        "(2, NULL, NULL, NULL, 2.5::DOUBLE, 3.5::DOUBLE, NULL)) AS v(id, name, day, tags, a, b, flag)"
    )
    cur = con.execute("SELECT * FROM PREDICT(MODEL lin, TABLE t, features = (a, b)) ORDER BY id")
    names = [d[0] for d in cur.description]
    assert names == ["id", "name", "day", "tags", "a", "b", "flag", "y"]
    types = column_types(cur)
    assert types["name"] == "VARCHAR" and types["day"] == "DATE" and types["tags"] == "INTEGER[]"
    rows = cur.fetchall()
    plain = con.execute("SELECT * FROM t ORDER BY id").fetchall()
    assert [r[:7] for r in rows] == plain
    assert [r[7] for r in rows] == [0.5, 2.5]  # an [N, 1] output is a scalar column


def test_output_named_like_input_column_is_renamed(con, tmp_path):
    model = save(scale_model(2.0, input_name="x", output_name="y"), tmp_path / "m.onnx")
    con.execute(f"IMPORT MODEL s FROM '{model}'")
    load_table(con, "t", {"x": ("DOUBLE", [1.0]), "y": ("DOUBLE", [9.0])})
    cur = con.execute("SELECT * FROM PREDICT(MODEL s, TABLE t)")
    assert [d[0] for d in cur.description] == ["x", "y", "predicted_y"]
    assert cur.fetchall() == [(1.0, 9.0, 2.0)]


# ------------------------------------------------------------------ binding


def _digits_wide(con, X, y, *, reverse=False):
    cols = {"id": ("INTEGER", np.arange(len(y)))}
    order = range(63, -1, -1) if reverse else range(64)
    for j in order:
        cols[f"px{j}"] = ("DOUBLE", X[:, j])
    cols["target"] = ("BIGINT", y)
    load_table(con, "wide", cols)


def test_binding_by_feature_names_given_at_import(con, digits, digits_pipe, tmp_path):
    X, y = digits
    names = [f"px{j}" for j in range(64)]
    _digits_wide(con, X, y, reverse=True)  # table order differs from feature order
    con.import_model("named", digits_pipe, features=names)
    rows = con.execute("SELECT id, label FROM PREDICT(MODEL named, TABLE wide) ORDER BY id").fetchall()
    label, _ = reference(con, tmp_path, "named", {"input": X.astype(np.float32)})
    assert [r[1] for r in rows] == label.tolist()


def test_binding_by_features_option(con, digits, digits_pipe, tmp_path):
    X, y = digits
    _digits_wide(con, X, y, reverse=True)
    con.import_model("anon", digits_pipe)
    feats = ", ".join(f"px{j}" for j in range(64))
    rows = con.execute(f"SELECT id, label FROM PREDICT(MODEL anon, TABLE wide, features = ({feats})) ORDER BY id").fetchall()
    label, _ = reference(con, tmp_path, "anon", {"input": X.astype(np.float32)})
    assert [r[1] for r in rows] == label.tolist()
    # the option overrides names given at import
    con.import_model("named", digits_pipe, features=[f"px{63 - j}" for j in range(64)])
    rows2 = con.execute(f"SELECT id, label FROM PREDICT(MODEL named, TABLE wide, features = ({feats})) ORDER BY id").fetchall()
    assert rows2 == rows


def test_binding_by_input_name_array_column(digits_con, digits, tmp_path):
    X, y = digits
    # digits_con's table has a FLOAT[64] column named "input", the ONNX input's name
    rows = digits_con.execute("SELECT label FROM PREDICT(MODEL digits, TABLE digits) ORDER BY id").fetchall()
    label, _ = reference(digits_con, tmp_path, "digits", {"input": X.astype(np.float32)})
    assert [r[0] for r in rows] == label.tolist()
    # a DOUBLE[] list column named "INPUT" (case-insensitive) works too
    rows = digits_con.execute(
        "SELECT label FROM PREDICT(MODEL digits, (SELECT id, input::DOUBLE[] AS INPUT FROM digits)) ORDER BY id"
    ).fetchall()
    assert [r[0] for r in rows] == label.tolist()


def test_binding_by_input_name_scalar_column(con, tmp_path):
    con.import_model("s", scale_model(0.5))
    load_table(con, "t", {"id": ("INTEGER", [1, 2, 3]), "other": ("DOUBLE", [7, 7, 7]), "x": ("DOUBLE", [2.0, 4.0, -6.0])})
    rows = con.execute("SELECT id, y FROM PREDICT(MODEL s, TABLE t) ORDER BY id").fetchall()
    assert rows == [(1, 1.0), (2, 2.0), (3, -3.0)]
    # an [N, 1] input binds a scalar column the same way
    con.import_model("one", identity_model(1))
    rows = con.execute("SELECT id, y FROM PREDICT(MODEL one, TABLE t) ORDER BY id").fetchall()
    assert [r[1] for r in rows] == [2.0, 4.0, -6.0]


def test_exact_width_numeric_binding(con, tmp_path):
    w = np.array([[1.0], [10.0], [100.0]], dtype=np.float32)
    con.import_model("lin", linear_model(w, input_name="features"))
    con.execute(
        "CREATE TABLE t AS SELECT i AS id, 'r' || i AS name, i::DOUBLE AS a, (i * 2)::INTEGER AS b, "
        "(i % 3)::DECIMAL(6, 2) AS c FROM range(5) r(i)"
    )
    rows = con.execute("SELECT id, name, y FROM PREDICT(MODEL lin, TABLE t) ORDER BY id").fetchall()
    for i, (rid, name, y) in enumerate(rows):
        assert (rid, name) == (i, f"r{i}")
        assert y == pytest.approx(i + 10 * 2 * i + 100 * (i % 3))


def test_multi_input_model_binds_by_column_names(con):
    con.import_model("adder", add_model())
    load_table(con, "t", {"id": ("INTEGER", range(4)), "b": ("INTEGER", [10, 20, 30, 40]), "a": ("DOUBLE", [0.5, 1.5, 2.5, 3.5])})
    rows = con.execute("SELECT id, sum FROM PREDICT(MODEL adder, TABLE t) ORDER BY id").fetchall()
    assert rows == [(0, 10.5), (1, 21.5), (2, 32.5), (3, 43.5)]
    rows = con.execute("SELECT sum FROM PREDICT(MODEL adder, (SELECT b AS a, a AS b FROM t)) ORDER BY 1").fetchall()
    assert [r[0] for r in rows] == [10.5, 21.5, 32.5, 43.5]


@pytest.mark.parametrize("batch", [1, 8])
def test_fixed_batch_dimension_serves_any_table_size(con, batch):
    rng = np.random.default_rng(batch)
    w = rng.normal(size=(4, 2)).astype(np.float32)
    b = rng.normal(size=2).astype(np.float32)
    model = linear_model(w, b, batch=batch)
    con.import_model("fixed", model)
    data = rng.normal(size=(1000, 4)).astype(np.float32)
    load_table(con, "t", {"id": ("INTEGER", range(1000)), "x": ("FLOAT[4]", data)})
    rows = con.execute("SELECT id, y FROM PREDICT(MODEL fixed, TABLE t) ORDER BY id").fetchall()
    assert [r[0] for r in rows] == list(range(1000))
    got = np.array([r[1] for r in rows], dtype=np.float32)
    np.testing.assert_allclose(got, data @ w + b, rtol=1e-5, atol=1e-5)
    # and with a batch_size that is not a multiple of the fixed batch
    rows = con.execute("SELECT y FROM PREDICT(MODEL fixed, TABLE t, batch_size = 13) ORDER BY id").fetchall()
    np.testing.assert_allclose(np.array([r[0] for r in rows]), data @ w + b, rtol=1e-5, atol=1e-5)
    # fewer rows than the fixed batch
    rows = con.execute("SELECT y FROM PREDICT(MODEL fixed, (SELECT * FROM t WHERE id < 3)) ORDER BY id").fetchall()
    np.testing.assert_allclose(np.array([r[0] for r in rows]), data[:3] @ w + b, rtol=1e-5, atol=1e-5)


def test_empty_input_returns_zero_rows_and_columns(digits_con):
    cur = digits_con.execute("SELECT * FROM PREDICT(MODEL digits, (SELECT * FROM digits WHERE id < 0))")
    assert [d[0] for d in cur.description] == ["id", "input", "target", "label", "probabilities"]
    assert column_types(cur)["probabilities"] == "FLOAT[10]"
    assert cur.fetchall() == []
    digits_con.execute("CREATE TABLE empty AS SELECT * FROM digits LIMIT 0")
    cur = digits_con.execute("SELECT label, count(*) FROM PREDICT(MODEL digits, TABLE empty) GROUP BY label")
    assert cur.fetchall() == []


def test_empty_input_with_fixed_batch_model(con):
    con.import_model("fixed", linear_model(np.ones((4, 2)), batch=8))
    con.execute("CREATE TABLE t (id INTEGER, x FLOAT[4])")
    cur = con.execute("SELECT * FROM PREDICT(MODEL fixed, TABLE t)")
    assert [d[0] for d in cur.description] == ["id", "x", "y"]
    assert cur.fetchall() == []


def _null_table(con):
    con.execute(
        "CREATE TABLE t AS SELECT * FROM (VALUES (1, 1.0, 2.0), (2, NULL, 3.0), (3, 4.0, NULL), (4, 5.0, 6.0)) "
        "AS v(id, a, b)"
    )
    con.commit()


def test_on_null_skip_leaves_rows_out(con):
    con.import_model("lin", linear_model(np.array([[1.0], [1.0]])))
    _null_table(con)
    rows = con.execute("SELECT id, y FROM PREDICT(MODEL lin, TABLE t, on_null = 'skip') ORDER BY id").fetchall()
    assert rows == [(1, 3.0), (4, 11.0)]


def test_on_null_null_returns_null_predictions(con):
    con.import_model("lin", linear_model(np.array([[1.0], [1.0]])))
    _null_table(con)
    rows = con.execute("SELECT id, y FROM PREDICT(MODEL lin, TABLE t, on_null = 'null') ORDER BY id").fetchall()
    assert rows == [(1, 3.0), (2, None), (3, None), (4, 11.0)]


def test_on_null_with_array_column(con):
    con.import_model("lin", linear_model(np.array([[1.0], [1.0]])))
    con.execute("CREATE TABLE t AS SELECT * FROM (VALUES (1, [1.0, 2.0]), (2, [NULL, 1.0]), (3, NULL), (4, [3.0, 3.0])) v(id, x)")
    rows = con.execute("SELECT id, y FROM PREDICT(MODEL lin, TABLE t, on_null = 'null') ORDER BY id").fetchall()
    assert rows == [(1, 3.0), (2, None), (3, None), (4, 6.0)]
    rows = con.execute("SELECT id FROM PREDICT(MODEL lin, TABLE t, on_null = 'skip') ORDER BY id").fetchall()
    assert rows == [(1,), (4,)]


def test_numeric_types_cast_like_numpy_float32(con):
    con.import_model("ident", identity_model(3))
    doubles = [0.1, 1 / 3, 1e-40, 3.4028234663852886e38, -2.5e-8, 16777217.0]
    ints = [16777217, -7, 0, 2**24 + 3, 123456789, 1]
    decimals = [Decimal("1.005"), Decimal("0.100"), Decimal("-3.333"), Decimal("16777217.001"), Decimal("0.001"), Decimal("2.675")]
    load_table(
        con,
        "t",
        {
            "id": ("INTEGER", range(6)),
            "d": ("DOUBLE", doubles),
            "i": ("INTEGER", ints),
            "m": ("DECIMAL(12, 3)", decimals),
        },
    )
    rows = con.execute("SELECT y FROM PREDICT(MODEL ident, TABLE t, features = (d, i, m)) ORDER BY id").fetchall()
    got = np.array([r[0] for r in rows], dtype=np.float32)
    want = np.stack(
        [
            np.array(doubles, dtype=np.float64).astype(np.float32),
            np.array(ints, dtype=np.int64).astype(np.float32),
            np.array([float(x) for x in decimals], dtype=np.float64).astype(np.float32),
        ],
        axis=1,
    )
    np.testing.assert_array_equal(got, want)


def test_double_out_of_float32_range_is_a_data_error(con):
    con.import_model("ident", identity_model(2))
    load_table(con, "t", {"a": ("DOUBLE", [1.0, 1e300]), "big": ("DOUBLE", [2.0, 1e300])})
    with pytest.raises(modelsql.DataError) as info:
        con.execute("SELECT * FROM PREDICT(MODEL ident, TABLE t, features = (a, big))").fetchall()
    assert "out of range" in str(info.value) and "FLOAT" in str(info.value)
    assert "__modelsql" not in str(info.value).lower()  # no generated SQL in the message


def test_predictions_equal_onnxruntime(digits_con, digits, tmp_path):
    X, y = digits
    rows = digits_con.execute("SELECT label, probabilities FROM PREDICT(MODEL digits, TABLE digits) ORDER BY id").fetchall()
    label, probs = reference(digits_con, tmp_path, "digits", {"input": X.astype(np.float32)})
    np.testing.assert_array_equal(np.array([r[0] for r in rows]), label)
    np.testing.assert_allclose(np.array([r[1] for r in rows], dtype=np.float32), probs, rtol=1e-6, atol=1e-7)
    # and with the sklearn pipeline's own answer (float32 input, as every peer casts)
    assert (label == y).mean() > 0.95


def test_exported_model_bytes_are_the_imported_ones(con, tmp_path):
    model = linear_model(np.arange(6).reshape(3, 2), np.array([0.5, -0.5]))
    src = save(model, tmp_path / "m.onnx")
    con.execute(f"IMPORT MODEL m FROM '{src}'")
    out = tmp_path / "out.onnx"
    con.execute(f"EXPORT MODEL m TO '{out}'")
    exported = onnx.load(str(out))
    assert {p.key for p in exported.metadata_props} == {"modelsql.outputs", "modelsql.version", "modelsql.source"}
    del exported.metadata_props[:]  # what the catalog adds; the rest is the imported model byte for byte
    assert exported.SerializeToString() == model.SerializeToString()


@pytest.mark.parametrize("batch_size", [1, 7, 64, 100_000])
def test_batch_size_option(digits_con, digits, tmp_path, batch_size):
    X, y = digits
    rows = digits_con.execute(
        f"SELECT label, probabilities FROM PREDICT(MODEL digits, TABLE digits, batch_size = {batch_size}) ORDER BY id"
    ).fetchall()
    label, probs = reference(digits_con, tmp_path, "digits", {"input": X.astype(np.float32)})
    np.testing.assert_array_equal(np.array([r[0] for r in rows]), label)
    np.testing.assert_allclose(np.array([r[1] for r in rows], dtype=np.float32), probs, rtol=1e-5, atol=1e-6)


def test_batch_size_option_as_parameter(digits_con, digits):
    X, y = digits
    n = digits_con.execute("SELECT count(*) FROM PREDICT(MODEL digits, TABLE digits, batch_size = ?)", [5]).fetchone()
    assert n == (len(y),)


def test_torch_model_matches_torch(con, torch_mlp):
    torch = pytest.importorskip("torch")
    net, example = torch_mlp
    con.import_model("mlp", net, example_input=example)
    rng = np.random.default_rng(0)
    data = rng.normal(size=(300, 8)).astype(np.float32)
    load_table(con, "t", {"id": ("INTEGER", range(300)), "input": ("FLOAT[8]", data)})
    cur = con.execute("SELECT * FROM PREDICT(MODEL mlp, TABLE t) ORDER BY id")
    assert column_types(cur)["output"] == "FLOAT[3]"
    got = np.array([r[2] for r in cur.fetchall()], dtype=np.float32)
    with torch.no_grad():
        want = net(torch.from_numpy(data)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    # features named at import feed the same module from scalar columns
    con.import_model("mlp_named", net, example_input=example, features=[f"f{j}" for j in range(8)])
    load_table(con, "w", {"id": ("INTEGER", range(300)), **{f"f{j}": ("DOUBLE", data[:, j]) for j in range(8)}})
    got2 = np.array(
        [r[0] for r in con.execute("SELECT output FROM PREDICT(MODEL mlp_named, TABLE w) ORDER BY id").fetchall()],
        dtype=np.float32,
    )
    np.testing.assert_allclose(got2, want, rtol=1e-4, atol=1e-5)


def test_large_table_every_row_exactly_once(con):
    n = 25_000
    w = np.array([[1.0], [1000.0]], dtype=np.float32)
    con.import_model("lin", linear_model(w))
    con.execute(f"CREATE TABLE big AS SELECT i AS id, (i % 1000)::DOUBLE AS a, (i // 1000)::DOUBLE AS b FROM range({n}) r(i)")
    con.commit()
    total, distinct, bad, lo, hi = con.execute(
        "SELECT count(*), count(DISTINCT id), count(*) FILTER (WHERE y <> id), min(id), max(id) "
        "FROM PREDICT(MODEL lin, TABLE big, features = (a, b))"
    ).fetchone()
    assert (total, distinct, bad, lo, hi) == (n, n, 0, 0, n - 1)
    # streamed through the cursor, in order, with fetchmany
    cur = con.execute("SELECT id, y FROM PREDICT(MODEL lin, TABLE big, features = (a, b)) ORDER BY id")
    seen = []
    while True:
        chunk = cur.fetchmany(4096)
        if not chunk:
            break
        seen.extend(chunk)
    assert len(seen) == n
    assert all(i == v for i, v in seen)
    # without ORDER BY: still every row once
    ids = sorted(r[0] for r in con.execute("SELECT id FROM PREDICT(MODEL lin, TABLE big, features = (a, b))").fetchall())
    assert ids == list(range(n))


def test_insert_and_create_table_as_from_predict(digits_con, digits):
    X, y = digits
    con = digits_con
    con.execute("CREATE TABLE preds AS SELECT id, label FROM PREDICT(MODEL digits, TABLE digits)")
    assert con.execute("SELECT count(*) FROM preds").fetchone() == (len(y),)
    con.execute("CREATE TABLE preds2 (id INTEGER, label BIGINT)")
    cur = con.execute("INSERT INTO preds2 SELECT id, label FROM PREDICT(MODEL digits, TABLE digits) WHERE id < 10")
    assert cur.rowcount == 10
    assert cur.description is None
    assert con.execute("SELECT * FROM preds2 ORDER BY id").fetchall() == con.execute(
        "SELECT * FROM preds WHERE id < 10 ORDER BY id"
    ).fetchall()


def test_multiple_statements_last_result_returned(digits_con):
    cur = digits_con.execute(
        "CREATE TABLE few AS SELECT * FROM digits WHERE id < 4; "
        "SELECT id, label FROM PREDICT(MODEL digits, TABLE few) ORDER BY id"
    )
    assert [r[0] for r in cur.fetchall()] == [0, 1, 2, 3]


def test_classifier_with_string_labels(con):
    from sklearn.datasets import load_iris
    from sklearn.linear_model import LogisticRegression

    X, y = load_iris(return_X_y=True)
    species = np.array(["setosa", "versicolor", "virginica"])[y]
    clf = LogisticRegression(max_iter=500).fit(X, species)
    con.import_model("iris", clf, features=["sl", "sw", "pl", "pw"])
    load_table(con, "iris", {"id": ("INTEGER", range(len(y))), "sl": ("DOUBLE", X[:, 0]), "sw": ("DOUBLE", X[:, 1]),
                             "pl": ("DOUBLE", X[:, 2]), "pw": ("DOUBLE", X[:, 3]), "species": ("VARCHAR", species)})
    cur = con.execute("SELECT id, label, probabilities FROM PREDICT(MODEL iris, TABLE iris) ORDER BY id")
    types = column_types(cur)
    assert types["label"] == "VARCHAR" == modelsql.STRING and types["probabilities"] == "FLOAT[3]"
    rows = cur.fetchall()
    assert [r[1] for r in rows] == clf.predict(X.astype(np.float32)).tolist()


def test_regressor_output_is_a_scalar_float(con):
    from sklearn.datasets import load_diabetes
    from sklearn.linear_model import Ridge

    X, y = load_diabetes(return_X_y=True)
    reg = Ridge().fit(X, y)
    con.import_model("diab", reg)
    load_table(con, "diab", {"id": ("INTEGER", range(len(y))), "x": ("DOUBLE[10]", X)})
    cur = con.execute("SELECT id, prediction FROM PREDICT(MODEL diab, (SELECT id, x AS input FROM diab)) ORDER BY id")
    assert column_types(cur)["prediction"] == "FLOAT"
    got = np.array([r[1] for r in cur.fetchall()], dtype=np.float32)
    np.testing.assert_allclose(got, reg.predict(X.astype(np.float32)), rtol=1e-4, atol=1e-3)


def test_nulls_in_columns_that_are_not_fed_are_fine(con):
    con.import_model("lin", linear_model(np.array([[1.0], [1.0]])))
    con.execute(
        "CREATE TABLE t AS SELECT * FROM (VALUES (1, NULL, 1.0, 2.0), (2, 'b', 3.0, NULL), (3, NULL, 4.0, 4.0)) "
        "AS v(id, note, a, b)"
    )
    rows = con.execute("SELECT id, note, y FROM PREDICT(MODEL lin, (SELECT * FROM t WHERE id <> 2), features = (a, b)) ORDER BY id").fetchall()
    assert rows == [(1, None, 3.0), (3, None, 8.0)]
    rows = con.execute("SELECT id, note, y FROM PREDICT(MODEL lin, TABLE t, features = (a, b), on_null = 'skip') ORDER BY id").fetchall()
    assert rows == [(1, None, 3.0), (3, None, 8.0)]


def test_torch_cnn_reshapes_an_array_column(con, digits):
    torch = pytest.importorskip("torch")
    X, y = digits
    torch.manual_seed(1)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 10)
    ).eval()
    con.import_model("cnn", net, example_input=torch.randn(2, 1, 8, 8))
    described = con.execute("DESCRIBE MODEL cnn").fetchall()
    assert [r[4] for r in described if r[0] == "input"] == ["[N, 1, 8, 8]"]
    load_table(con, "img", {"id": ("INTEGER", range(200)), "input": ("FLOAT[64]", X[:200])})
    got = np.array(
        [r[0] for r in con.execute("SELECT output FROM PREDICT(MODEL cnn, TABLE img) ORDER BY id").fetchall()],
        dtype=np.float32,
    )
    with torch.no_grad():
        want = net(torch.from_numpy(X[:200].astype(np.float32).reshape(-1, 1, 8, 8))).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_import_statement_with_features_option(con, tmp_path):
    p = save(linear_model(np.array([[1.0], [100.0]])), tmp_path / "m.onnx")
    con.execute(f"IMPORT MODEL named FROM '{p}' WITH (features = (b, a))")
    load_table(con, "t", {"a": ("DOUBLE", [1.0]), "b": ("DOUBLE", [2.0]), "c": ("DOUBLE", [3.0])})
    assert con.execute("SELECT y FROM PREDICT(MODEL named, TABLE t)").fetchall() == [(102.0,)]


def test_dropped_and_reimported_model_gives_new_outputs(con):
    load_table(con, "t", {"x": ("DOUBLE", [1.0])})
    con.import_model("m", scale_model(2.0))
    assert con.execute("SELECT y FROM PREDICT(MODEL m, TABLE t)").fetchall() == [(2.0,)]
    con.execute("DROP MODEL m")
    con.import_model("m", scale_model(3.0))  # version 2: a number is never given twice, even after DROP MODEL
    assert con.execute("SELECT y FROM PREDICT(MODEL m, TABLE t)").fetchall() == [(3.0,)]
    con.import_model("m", scale_model(4.0), replace=True)
    con.execute("DROP MODEL m VERSION 3")
    con.import_model("m", scale_model(5.0), replace=True)  # version 4: numbers are not reused
    assert con.execute("SELECT y FROM PREDICT(MODEL m VERSION 4, TABLE t)").fetchall() == [(5.0,)]
    assert con.execute("SELECT y FROM PREDICT(MODEL m, TABLE t)").fetchall() == [(5.0,)]
    assert con.execute("SELECT y FROM PREDICT(MODEL m VERSION 2, TABLE t)").fetchall() == [(3.0,)]


def test_predict_over_a_cte_of_the_enclosing_query(con):
    con.import_model("s", scale_model(2.0))
    con.import_model("s3", scale_model(3.0, input_name="y", output_name="z"))
    load_table(con, "t", {"x": ("DOUBLE", [0.0, 1.0, 2.0])})
    assert con.execute(
        "WITH w AS (SELECT CAST(? AS DOUBLE) AS x) SELECT y, ? FROM PREDICT(MODEL s, TABLE w)", [5, "tag"]
    ).fetchall() == [(10.0, "tag")]
    assert con.execute(
        "WITH w AS (SELECT x FROM t WHERE x > ?) SELECT y FROM PREDICT(MODEL s, (SELECT * FROM w)) ORDER BY y", [0]
    ).fetchall() == [(2.0,), (4.0,)]
    # a chain of CTEs, each a PREDICT over the one before
    rows = con.execute(
        "WITH a AS (SELECT * FROM t WHERE x > ?), b AS (SELECT * FROM PREDICT(MODEL s, TABLE a)) "
        "SELECT x, y, z FROM PREDICT(MODEL s3, TABLE b) ORDER BY x",
        [0],
    ).fetchall()
    assert rows == [(1.0, 2.0, 6.0), (2.0, 4.0, 12.0)]
    # the CTE is used deeper in the query than it is defined
    rows = con.execute(
        "WITH a AS (SELECT * FROM PREDICT(MODEL s, TABLE t)) "
        "SELECT x, z FROM (SELECT * FROM (SELECT * FROM PREDICT(MODEL s3, TABLE a))) ORDER BY x"
    ).fetchall()
    assert rows == [(0.0, 0.0), (1.0, 6.0), (2.0, 12.0)]
    # a CTE shadows a table of the same name, as in plain SQL
    assert con.execute("WITH t AS (SELECT 100.0::DOUBLE AS x) SELECT y FROM PREDICT(MODEL s, TABLE t)").fetchall() == [(200.0,)]
    rows = con.execute(
        "WITH RECURSIVE r(x) AS (SELECT 1.0::DOUBLE UNION ALL SELECT x + 1 FROM r WHERE x < 3) "
        "SELECT y FROM PREDICT(MODEL s, TABLE r) ORDER BY y"
    ).fetchall()
    assert rows == [(2.0,), (4.0,), (6.0,)]


def test_parameter_with_cast_inside_predict(con):
    con.import_model("s", scale_model(2.0))
    assert con.execute("SELECT y FROM PREDICT(MODEL s, (SELECT CAST(? AS DOUBLE) AS x))", [1.5]).fetchall() == [(3.0,)]
    assert con.execute("SELECT y FROM PREDICT(MODEL s, (SELECT (?)::DOUBLE AS x))", [1.5]).fetchall() == [(3.0,)]


def test_parameter_with_cast_shorthand_inside_predict(con):
    """``?::DOUBLE`` is a placeholder, as in plain DuckDB SQL."""
    con.import_model("s", scale_model(2.0))
    assert con.execute("SELECT y FROM PREDICT(MODEL s, (SELECT ?::DOUBLE AS x))", [1.5]).fetchall() == [(3.0,)]


def test_casts_to_other_element_types_follow_sql_cast(con):
    from onnx import TensorProto, helper

    from conftest import make_model

    ints = make_model([helper.make_node("Identity", ["x"], ["y"])], [("x", TensorProto.INT64, ["N", 3])], [("y", TensorProto.INT64, ["N", 3])])
    doubles = make_model([helper.make_node("Identity", ["x"], ["y"])], [("x", TensorProto.DOUBLE, ["N", 3])], [("y", TensorProto.DOUBLE, ["N", 3])])
    con.import_model("ints", ints)
    con.import_model("doubles", doubles)
    con.execute(
        "CREATE TABLE t AS SELECT * FROM (VALUES (1, 2.5::DOUBLE, -2.5::DECIMAL(5, 2), TRUE), "
        "(2, 1e15::DOUBLE, 7.49::DECIMAL(5, 2), FALSE), (3, 0.1::FLOAT, 0.01::DECIMAL(5, 2), TRUE)) v(id, a, m, flag)"
    )
    cur = con.execute("SELECT id, y FROM PREDICT(MODEL ints, TABLE t, features = (a, m, flag)) ORDER BY id")
    assert column_types(cur)["y"] == "BIGINT[3]"
    got = [r[1] for r in cur.fetchall()]
    want = con.execute("SELECT [a::BIGINT, m::BIGINT, flag::BIGINT] FROM t ORDER BY id").fetchall()
    assert got == [tuple(w[0]) for w in want]
    got = [r[0] for r in con.execute("SELECT y FROM PREDICT(MODEL doubles, TABLE t, features = (a, m, flag)) ORDER BY id").fetchall()]
    want = con.execute("SELECT [a::DOUBLE, m::DOUBLE, flag::DOUBLE] FROM t ORDER BY id").fetchall()
    assert got == [tuple(w[0]) for w in want]
