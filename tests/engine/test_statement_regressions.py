"""Statements end to end where a fresh user found problems (each once a real bug): EXPORT targets, placeholders
in PREDICT texts, options and features named twice, import checks, autocommit and transaction statements,
error classes, the names of PREDICT's columns, torch inputs."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

import modelsql
from conftest import linear_model, save


@pytest.fixture
def lin(con):
    con.import_model("m", linear_model(np.ones((3, 1), dtype=np.float32)))
    con.execute("CREATE TABLE t AS SELECT range AS id, range::DOUBLE AS a, 1.0 AS b, 2.0 AS c FROM range(10)")
    con.commit()
    return con


def test_export_refuses_the_open_database_and_store(lin, db):
    con = lin
    for target in (db, db + ".wal", os.path.join(db + ".blobs", "x.onnx")):
        with pytest.raises(modelsql.ProgrammingError) as info:
            con.execute(f"EXPORT MODEL m TO '{target}'")
        assert info.value.code == "export_target_in_use"
    con.close()
    again = modelsql.connect(db)
    assert again.execute("SELECT count(*) FROM t").fetchone() == (10,)
    assert again.execute("SELECT count(*) FROM modelsql.model_versions").fetchone() == (1,)
    again.close()


def test_adjacent_qmark_placeholders_in_a_predict_statement(lin):
    rows = lin.execute(
        "SELECT id, y FROM PREDICT(MODEL m, (SELECT * FROM t WHERE id IN (?,?))) WHERE a IN (?,?) ORDER BY id",
        [1, 2, 2, 9],
    ).fetchall()
    assert rows == [(2, 5.0)]
    assert lin.execute("SELECT coalesce(?,?) FROM PREDICT(MODEL m, TABLE t) LIMIT 1", [None, 7]).fetchone() == (7,)


def test_dollar_placeholders_in_a_predict_statement(lin):
    rows = lin.execute("SELECT id FROM PREDICT(MODEL m, TABLE t) WHERE id < $1 ORDER BY id", [2]).fetchall()
    assert rows == [(0,), (1,)]
    with pytest.raises(modelsql.ProgrammingError) as info:
        lin.execute("SELECT id FROM PREDICT(MODEL m, TABLE t) WHERE id < $2", [2])
    assert info.value.code == "parameter_count"


def test_reexecute_does_not_read_the_rest_of_a_huge_result(lin):
    cur = lin.cursor()
    cur.execute("SELECT * FROM PREDICT(MODEL m, (SELECT i::DOUBLE AS a, 1.0 AS b, 2.0 AS c FROM range(1000000000) t(i)))")
    assert cur.fetchone() is not None
    started = time.perf_counter()
    assert cur.execute("SELECT 1").fetchall() == [(1,)]
    cur.execute("SELECT * FROM PREDICT(MODEL m, (SELECT i::DOUBLE AS a, 1.0 AS b, 2.0 AS c FROM range(1000000000) t(i)))")
    cur.fetchone()
    cur.close()
    assert lin.execute("SELECT 2").fetchall() == [(2,)]
    assert time.perf_counter() - started < 10  # reading 10^9 rows would take minutes


def test_features_named_twice_in_predict_are_refused(lin):
    with pytest.raises(modelsql.ProgrammingError) as info:
        lin.execute("SELECT * FROM PREDICT(MODEL m, TABLE t, features = (a, a, c))")
    assert info.value.code == "invalid_option" and '"a"' in str(info.value)


def test_options_given_twice_are_refused(lin, tmp_path):
    with pytest.raises(modelsql.ProgrammingError) as info:
        lin.execute("SELECT * FROM PREDICT(MODEL m, TABLE t, on_null = 'skip', on_null = 'null')")
    assert info.value.code == "duplicate_option"
    assert info.value.line == 1  # points at the PREDICT's model name


def test_unknown_import_option_is_refused_and_nothing_is_stored(lin, tmp_path, db):
    path = save(linear_model(np.ones((3, 1), dtype=np.float32)), tmp_path / "x.onnx")
    before = lin.execute("SELECT name, version FROM modelsql.model_versions").fetchall()
    with pytest.raises(modelsql.ProgrammingError) as info:
        lin.execute(f"IMPORT MODEL x FROM '{path}' WITH (on_nul = 'skip')")
    assert info.value.code == "unknown_option" and "on_nul" in str(info.value)
    assert lin.execute("SELECT name, version FROM modelsql.model_versions").fetchall() == before
    lin.execute(f"IMPORT MODEL x FROM '{path}' WITH (description = 'a tiny linear model')")
    assert lin.execute("SELECT options FROM modelsql.model_versions WHERE name = 'x'").fetchone()[0] == {
        "description": "a tiny linear model"
    }


def test_reimport_repairs_a_corrupt_blob(lin, db, tmp_path):
    con = lin
    digest = con.execute("SELECT digest FROM modelsql.model_tensors WHERE name = 'm' LIMIT 1").fetchone()[0]
    blob = os.path.join(db + ".blobs", digest[:2], digest[2:])
    data = bytearray(open(blob, "rb").read())
    data[0] ^= 0xFF
    open(blob, "wb").write(bytes(data))
    from modelsql.operators.backends.onnxruntime import clear_cache

    clear_cache()
    with pytest.raises(modelsql.DataError):
        con.execute("SELECT * FROM PREDICT(MODEL m, TABLE t)").fetchall()
    con.rollback()
    con.import_model("m2", linear_model(np.ones((3, 1), dtype=np.float32)))  # the same tensors again
    assert con.execute("SELECT sum(y) FROM PREDICT(MODEL m, TABLE t)").fetchone() == (75.0,)
    assert con.execute("SELECT sum(y) FROM PREDICT(MODEL m2, TABLE t)").fetchone() == (75.0,)


def test_register_numpy_scalars_and_fetch_arrow(con, recwarn):
    con.register("src", {"a": np.arange(5, dtype=np.float64), "b": np.ones(5), "c": np.zeros(5)})
    con.execute("CREATE TABLE t AS SELECT * FROM src")
    con.unregister("src")
    con.import_model("m", linear_model(np.ones((3, 1), dtype=np.float32)))
    cur = con.execute("SELECT a, y FROM PREDICT(MODEL m, TABLE t) WHERE a > ? ORDER BY a", [np.float32(2.5)])
    table = cur.fetch_arrow()
    assert table.column("a").to_pylist() == [3.0, 4.0]
    assert table.column("y").to_pylist() == [4.0, 5.0]
    assert not [w for w in recwarn if issubclass(w.category, UserWarning)]


def test_run_refuses_a_binary_file(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "model.onnx"
    path.write_bytes(bytes(range(256)))
    out = subprocess.run(
        [sys.executable, "-m", "modelsql.client.cli", "-d", ":memory:", "run", str(path)], capture_output=True, text=True
    )
    assert out.returncode == 1
    assert "not a UTF-8 text file" in " ".join(out.stderr.split()) and "Traceback" not in out.stderr


def test_pipeline_with_a_column_transformer_selecting_by_name(con):
    """A ColumnTransformer picks columns by name (numbers and a text column one-hot encoded):
    it imports as one input per column, and PREDICT binds each to its column."""
    import pyarrow as pa
    from sklearn.compose import ColumnTransformer
    from sklearn.datasets import load_wine
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import MinMaxScaler, OneHotEncoder, StandardScaler

    data = load_wine()
    cols = [n.replace("/", "_") for n in data.feature_names]
    color = np.array(["red", "white"])[np.random.default_rng(0).integers(0, 2, len(data.target))]
    table = pa.table({**{c: data.data[:, i] for i, c in enumerate(cols)}, "color": color})
    ct = ColumnTransformer(
        [("a", StandardScaler(), cols[:6]), ("b", MinMaxScaler(), cols[6:]), ("c", OneHotEncoder(), ["color"])]
    )
    pipe = Pipeline([("ct", ct), ("lr", LogisticRegression(max_iter=2000))]).fit(table, data.target)
    con.register("src", table.append_column("id", pa.array(np.arange(len(color)))))
    con.execute("CREATE TABLE wine AS SELECT * FROM src")
    con.import_model("wine", pipe)
    inputs = [r[2:5] for r in con.execute("DESCRIBE MODEL wine").fetchall() if r[0] == "input"]
    assert ("color", "STRING", "[N, 1]") in inputs and ("alcohol", "FLOAT", "[N, 1]") in inputs
    got = [r[0] for r in con.execute("SELECT label FROM PREDICT(MODEL wine, TABLE wine) ORDER BY id").fetchall()]
    np.testing.assert_array_equal(np.array(got), pipe.predict(table))


def test_switching_autocommit_on_commits_the_open_transaction(db):
    con = modelsql.connect(db)
    con.execute("CREATE TABLE t(i INT)")
    con.commit()
    con.execute("INSERT INTO t VALUES (1)")
    con.autocommit = True
    con.execute("INSERT INTO t VALUES (2)")
    con.close()
    again = modelsql.connect(db)
    assert again.execute("SELECT i FROM t ORDER BY i").fetchall() == [(1,), (2,)]
    again.close()


@pytest.mark.parametrize("features", [[1, 2, 3], ["a", "b", None], 5, "abc", ["a", "b", ""], []])
def test_import_features_must_be_column_names(con, features):
    with pytest.raises(modelsql.ProgrammingError) as info:
        con.import_model("m", linear_model(np.ones((3, 1), dtype=np.float32)), features=features)
    assert info.value.code == "invalid_option"
    assert con.execute("SELECT count(*) FROM modelsql.model_versions").fetchone() == (0,)


def test_import_features_as_numbers_in_sql(con, tmp_path):
    path = save(linear_model(np.ones((3, 1), dtype=np.float32)), tmp_path / "x.onnx")
    with pytest.raises(modelsql.ProgrammingError) as info:
        con.execute(f"IMPORT MODEL m FROM '{path}' WITH (features = (1, 2, 3))")
    assert info.value.code == "invalid_option"


def test_model_without_outputs_is_refused(con, tmp_path):
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([], "empty", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2])], [])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "empty.onnx"
    onnx.save(model, path)
    with pytest.raises(modelsql.DataError) as info:
        con.execute(f"IMPORT MODEL e FROM '{path}'")
    assert info.value.code == "invalid_onnx" and "no graph outputs" in str(info.value)


def test_create_or_replace_with_if_not_exists_is_refused(con, tmp_path):
    path = save(linear_model(np.ones((3, 1), dtype=np.float32)), tmp_path / "x.onnx")
    with pytest.raises(modelsql.ProgrammingError):
        con.execute(f"CREATE OR REPLACE MODEL IF NOT EXISTS m FROM '{path}'")


def test_drop_if_exists_of_a_missing_version_is_silent(lin):
    cur = lin.execute("DROP MODEL IF EXISTS m VERSION 9")
    assert cur.rowcount == 0
    assert lin.execute("SELECT count(*) FROM modelsql.model_versions").fetchone() == (1,)
    with pytest.raises(modelsql.ProgrammingError) as info:
        lin.execute("DROP MODEL m VERSION 9")
    assert info.value.code == "version_not_found" and info.value.line == 1


def test_null_parameter_meets_the_on_null_rule(lin):
    with pytest.raises(modelsql.DataError) as info:
        lin.execute("SELECT y FROM PREDICT(MODEL m, (SELECT ? AS a, ? AS b, ? AS c))", [1, 2, None]).fetchall()
    assert info.value.code == "null_input" and '"c"' in str(info.value)
    lin.rollback()
    rows = lin.execute(
        "SELECT y FROM PREDICT(MODEL m, (SELECT ? AS a, ? AS b, ? AS c), on_null = 'null')", [1, 2, None]
    ).fetchall()
    assert rows == [(None,)]


def test_concurrent_versions_from_several_connections(db, tmp_path):
    import threading

    path = save(linear_model(np.ones((3, 1), dtype=np.float32)), tmp_path / "x.onnx")
    first = modelsql.connect(db)
    first.execute(f"IMPORT MODEL m FROM '{path}'")
    errors = []

    def work():
        c = modelsql.connect(db)
        try:
            for _ in range(4):
                c.execute(f"CREATE OR REPLACE MODEL m FROM '{path}'")
        except Exception as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)
        finally:
            c.close()

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    versions = [v for (v,) in first.execute("SELECT version FROM modelsql.model_versions ORDER BY version").fetchall()]
    assert versions == list(range(1, 14))
    first.close()


def test_interrupted_query_is_an_operational_error(lin):
    import threading

    timer = threading.Timer(0.5, lin._duck.interrupt)
    timer.start()
    with pytest.raises(modelsql.OperationalError) as info:
        lin.execute(
            "SELECT sum(y) FROM PREDICT(MODEL m, (SELECT i::DOUBLE AS a, 1.0 AS b, 2.0 AS c FROM range(2000000000) t(i)))"
        ).fetchall()
    timer.cancel()
    assert info.value.code == "interrupted"


def test_input_column_named_like_the_rewrites_own(con):
    con.import_model("lin", linear_model(np.ones((2, 1), dtype=np.float32)))
    con.execute("CREATE TABLE t AS SELECT i::DOUBLE AS a, 1.0::DOUBLE AS b, i AS __msql_p FROM range(4) r(i)")
    rows = con.execute("SELECT __msql_p, y FROM PREDICT(MODEL lin, TABLE t, features = (a, b), execution = 'stream') "
                       "ORDER BY 1").fetchall()
    assert [r[0] for r in rows] == [0, 1, 2, 3] and rows[1][1] == pytest.approx(2.0)


def test_insert_returning_and_merge_from_predict(con):
    con.import_model("lin", linear_model(np.ones((2, 1), dtype=np.float32)))
    con.execute("CREATE TABLE t AS SELECT i + 7 AS id, i::DOUBLE AS a, 1.0::DOUBLE AS b FROM range(3) r(i)")
    con.execute("CREATE TABLE out (id BIGINT PRIMARY KEY, y FLOAT)")
    cur = con.execute("INSERT INTO out SELECT id, y FROM PREDICT(MODEL lin, TABLE t, features = (a, b)) RETURNING id")
    assert cur.description[0][0] == "id"
    assert sorted(r[0] for r in cur.fetchall()) == [7, 8, 9]
    cur = con.execute("MERGE INTO out USING (SELECT id, y FROM PREDICT(MODEL lin, TABLE t, features = (a, b))) AS p "
                      "ON out.id = p.id WHEN MATCHED THEN UPDATE SET y = p.y + 1")
    assert cur.rowcount == 3


def test_explain_with_options(con):
    con.import_model("lin", linear_model(np.ones((2, 1), dtype=np.float32)))
    con.execute("CREATE TABLE t AS SELECT i::DOUBLE AS a, 1.0::DOUBLE AS b FROM range(3) r(i)")
    rows = con.execute("EXPLAIN (FORMAT JSON) SELECT y FROM PREDICT(MODEL lin, TABLE t, features = (a, b))").fetchall()
    assert rows[0][0] == "modelsql_predict"
    import json

    json.loads(rows[-1][1])  # DuckDB's plan, as JSON


def test_division_by_zero_is_a_data_error_and_read_only_writes_operational(tmp_path):
    con = modelsql.connect(":memory:")
    con.autocommit = True
    with pytest.raises(modelsql.DataError) as info:
        con.execute("SELECT 1 // 0").fetchall()
    assert info.value.code == "division_by_zero"
    path = str(tmp_path / "ro.duckdb")
    w = modelsql.connect(path)
    w.execute("CREATE TABLE t (i INTEGER)")
    w.commit()
    w.close()
    ro = modelsql.connect(path, read_only=True)
    with pytest.raises(modelsql.OperationalError) as info:
        ro.execute("INSERT INTO t VALUES (1)")
    assert info.value.code == "read_only"
    ro.close()


def test_torch_module_with_two_inputs_imports_under_forward_names(con):
    torch = pytest.importorskip("torch")

    class Two(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(3, 2)
            self.b = torch.nn.Linear(1, 2)

        def forward(self, pixels, scale):
            return self.a(pixels) * self.b(scale)

    torch.manual_seed(0)
    net = Two().eval()
    con.import_model("two", net, example_input=(torch.zeros(4, 3), torch.zeros(4, 1)))
    names = [r[0] for r in con.execute("SELECT tensor_name FROM modelsql.model_inputs WHERE name = 'two' ORDER BY position").fetchall()]
    assert names == ["pixels", "scale"]
    con.import_model("two_named", net, example_input=(torch.zeros(4, 3), torch.zeros(4, 1)), input_names=["p", "s"])
    con.execute("CREATE TABLE t AS SELECT [1.0, 2.0, 3.0]::FLOAT[3] AS pixels, 0.5::FLOAT AS scale")
    (out,) = con.execute("SELECT output FROM PREDICT(MODEL two, TABLE t)").fetchone()
    with torch.no_grad():
        expected = net(torch.tensor([[1.0, 2.0, 3.0]]), torch.tensor([[0.5]]))[0].tolist()
    assert out == pytest.approx(expected, rel=1e-5)


def test_transaction_statements_inside_plain_sql_texts(con):
    con.execute("CREATE TABLE k (x INTEGER)")
    con.commit()
    with pytest.raises(modelsql.DataError):
        con.execute("BEGIN; INSERT INTO k VALUES ('oops'); COMMIT")
    con.rollback()  # recovers: the connection followed the BEGIN
    assert con.execute("SELECT count(*) FROM k").fetchall() == [(0,)]
    con.execute("BEGIN; INSERT INTO k VALUES (1); COMMIT")  # after the connection's own transaction began
    con.execute("INSERT INTO k VALUES (4); ROLLBACK; INSERT INTO k VALUES (5)")
    con.rollback()  # the 5 was in a new transaction
    con.execute("-- a comment\nBEGIN; INSERT INTO k VALUES (6); COMMIT")
    with pytest.raises(modelsql.OperationalError, match="no transaction is active"):
        con.execute("COMMIT; COMMIT")  # as DuckDB: the second COMMIT has no transaction to end (issue 21)
    con.rollback()
    assert con.execute("SELECT x FROM k ORDER BY x").fetchall() == [(1,), (6,)]


def test_error_classes_do_not_follow_the_users_own_text(con):
    with pytest.raises(modelsql.ProgrammingError) as info:
        con.execute("SELECT 'division by zero' FRO t")
    assert info.value.code == "parse_error"


def test_predict_expression_columns_are_named_by_the_users_text_everywhere(con):
    con.import_model("lin", linear_model(np.ones((2, 1), dtype=np.float32)))
    con.execute("CREATE TABLE t AS SELECT i::DOUBLE AS a, 1.0::DOUBLE AS b FROM range(3) r(i)")
    for q in ("CREATE TABLE ct AS SELECT (SELECT max(y) FROM PREDICT(MODEL lin, TABLE t, features = (a, b)))",
              "CREATE TABLE cu AS SELECT (SELECT max(y) FROM PREDICT(MODEL lin, TABLE t, features = (a, b))) UNION ALL SELECT 2",
              "CREATE TABLE cw AS WITH w AS (SELECT (SELECT max(y) FROM PREDICT(MODEL lin, TABLE t, features = (a, b)))) "
              "SELECT * FROM w"):
        con.execute(q)
    for table in ("ct", "cu", "cw"):
        (name,) = con.execute(f"SELECT column_name FROM duckdb_columns() WHERE table_name = '{table}'").fetchone()
        assert "__msql" not in name and "__modelsql" not in name and "PREDICT(MODEL lin" in name, (table, name)


def test_torch_input_names_are_checked(con):
    torch = pytest.importorskip("torch")

    class Two(torch.nn.Module):
        def forward(self, u, v):
            return u + v

    ex = (torch.zeros(2, 3), torch.zeros(2, 3))
    for bad in (("u2", "u2"), "ab"):
        with pytest.raises(modelsql.ProgrammingError):
            con.import_model("two", Two(), example_input=ex, input_names=bad)


def test_natural_join_on_a_predict_keeps_the_outputs_it_matches_on(con):
    from onnx import TensorProto, helper

    from conftest import make_model

    two = make_model([helper.make_node("Identity", ["x"], ["y"]), helper.make_node("Identity", ["x"], ["z"])],
                     [("x", TensorProto.FLOAT, ["N", 1])],
                     [("y", TensorProto.FLOAT, ["N", 1]), ("z", TensorProto.FLOAT, ["N", 1])])
    con.import_model("two", two)
    con.execute("CREATE TABLE t AS SELECT i AS id, i::FLOAT AS x FROM range(3) r(i)")
    con.execute("CREATE TABLE o AS SELECT 1 AS id, 5.0::FLOAT AS z")
    q = "SELECT id, y FROM PREDICT(MODEL two, TABLE t) NATURAL JOIN o ORDER BY id"
    con.optimize = False
    plain = con.execute(q).fetchall()
    con.optimize = True
    assert con.execute(q).fetchall() == plain == []  # z never equals 5.0: the join matches on id and z
