"""Bad input: each raises the right PEP 249 class with a clear message naming the
thing, and leaves the catalog and the blob store exactly as they were.

The catalog snapshot is every row of ``modelsql.model_versions`` and
``modelsql.blobs``; the store snapshot is every file (name and size) under
``<db>.blobs/``. Where a failed statement aborts the transaction (DuckDB, like
PostgreSQL, then refuses statements until ROLLBACK; psycopg behaves the same),
the snapshot is taken after ``rollback()``.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import numpy as np
import pytest

import modelsql
from conftest import add_model, linear_model, load_table, save
from modelsql.operators.backends import onnxruntime as ort_backend


# ------------------------------------------------------------------ helpers


def snapshot(con, db: str):
    con.rollback()
    versions = sorted(map(repr, con.execute("SELECT * FROM modelsql.model_versions").fetchall()))
    blobs = sorted(map(repr, con.execute("SELECT * FROM modelsql.blobs").fetchall()))
    tensors = sorted(map(repr, con.execute("SELECT * FROM modelsql.model_tensors").fetchall()))
    root = Path(db + ".blobs")
    files = sorted((str(p.relative_to(root)), p.stat().st_size) for p in root.rglob("*") if p.is_file())
    return versions, blobs, tensors, files


@contextlib.contextmanager
def unchanged(con, db: str):
    """Assert the catalog and the store are the same after the block as before it."""
    before = snapshot(con, db)
    yield
    after = snapshot(con, db)
    assert after == before


def raises(con, db, cls, sql, params=None, *, code=None, contains=()):
    """Run ``sql``, expect ``cls`` (exactly that PEP 249 class or a subclass), check the
    catalog/store are unchanged, and return the error."""
    with unchanged(con, db):
        with pytest.raises(cls) as info:
            cur = con.execute(sql, params)
            cur.fetchall()
    err = info.value
    if code is not None:
        assert err.code == code, (err.code, str(err))
    for text in contains:
        assert text in str(err), (text, str(err))
    return err


@pytest.fixture
def env(con, db, tmp_path):
    """A database with model ``lin`` (input "x" FLOAT[N, 2] -> y [N, 1]), model ``adder``
    (inputs a, b) and some tables; autocommit off (the PEP 249 default)."""
    con.import_model("lin", linear_model(np.array([[1.0], [10.0]])))
    con.import_model("adder", add_model())
    load_table(con, "t", {"id": ("INTEGER", range(5)), "a": ("DOUBLE", np.arange(5.0)), "b": ("DOUBLE", np.arange(5.0) * 2)})
    con.execute(
        "CREATE TABLE mixed AS SELECT i AS id, i::DOUBLE AS a, 'txt' || i AS s, DATE '2024-01-01' + i::INTEGER AS d, "
        "[i, i + 1]::DOUBLE[] AS l, [i + 0.5, 1.5] AS dl, {'k': i} AS st FROM range(4) r(i)"
    )
    con.commit()
    return con, db, tmp_path


# ------------------------------------------------------------------ models and versions


def test_missing_model_has_did_you_mean(env):
    con, db, _ = env
    err = raises(con, db, modelsql.ProgrammingError, "SELECT * FROM PREDICT(MODEL lim, TABLE t)",
                 code="model_not_found", contains=('"lim"', 'Did you mean "lin"?'))
    assert isinstance(err, modelsql.DatabaseError)
    err = raises(con, db, modelsql.ProgrammingError, "SELECT * FROM PREDICT(MODEL zzzzzz, TABLE t)", code="model_not_found")
    assert "Did you mean" not in str(err)
    for sql in ("DESCRIBE MODEL lni", "EXPORT MODEL lni TO 'x.onnx'", "DROP MODEL lni"):
        raises(con, db, modelsql.ProgrammingError, sql, code="model_not_found", contains=('Did you mean "lin"?',))


def test_missing_version(env):
    con, db, _ = env
    raises(con, db, modelsql.ProgrammingError, "SELECT * FROM PREDICT(MODEL lin VERSION 7, TABLE t)",
           code="version_not_found", contains=('"lin"', "7", "Existing versions: 1"))
    raises(con, db, modelsql.ProgrammingError, "DROP MODEL lin VERSION 7", code="version_not_found")
    raises(con, db, modelsql.ProgrammingError, "EXPORT MODEL lin VERSION 2 TO 'x.onnx'", code="version_not_found")


def test_drop_missing_model(env):
    con, db, _ = env
    raises(con, db, modelsql.ProgrammingError, "DROP MODEL nothere", code="model_not_found", contains=('"nothere"',))
    with unchanged(con, db):
        cur = con.execute("DROP MODEL IF EXISTS nothere")
        assert cur.rowcount == 0


# ------------------------------------------------------------------ columns


def test_misnamed_feature_column_is_an_error(env):
    con, db, _ = env
    raises(con, db, modelsql.ProgrammingError, "SELECT * FROM PREDICT(MODEL lin, TABLE t, features = (a, bb))",
           code="column_not_found", contains=('"bb"', 'Did you mean "b"?'))


def test_feature_names_from_import_missing_in_table(env):
    con, db, _ = env
    con.import_model("named", linear_model(np.array([[1.0], [1.0]])), features=["a", "c"])
    # t has exactly two usable numeric columns (a, b): they must not be fed in place of (a, c)
    raises(con, db, modelsql.ProgrammingError, "SELECT * FROM PREDICT(MODEL named, TABLE t)",
           code="column_not_found", contains=('"c"',))


def test_input_named_column_missing(env):
    con, db, _ = env
    load_table(con, "ac", {"a": ("DOUBLE", [1.0]), "c": ("DOUBLE", [2.0])})
    raises(con, db, modelsql.ProgrammingError, "SELECT * FROM PREDICT(MODEL adder, TABLE ac)",
           code="column_not_found", contains=('"b"',))


def test_key_column_never_fed(env):
    con, db, _ = env
    load_table(con, "keyed", {"id": ("INTEGER", range(3)), "a": ("DOUBLE", [1.0, 2.0, 3.0])})
    err = raises(con, db, modelsql.ProgrammingError, "SELECT * FROM PREDICT(MODEL lin, TABLE keyed)",
                 code="feature_mismatch", contains=("id",))
    assert "never fed" in str(err)
    load_table(con, "keyed2", {"customer_id": ("BIGINT", range(3)), "a": ("DOUBLE", [1.0, 2.0, 3.0])})
    raises(con, db, modelsql.ProgrammingError, "SELECT * FROM PREDICT(MODEL lin, TABLE keyed2)",
           code="feature_mismatch", contains=("customer_id",))
    # a primary key with an ordinary name is a key too
    con.execute("CREATE TABLE pk (code INTEGER PRIMARY KEY, a DOUBLE)")
    con.execute("INSERT INTO pk VALUES (1, 1.0), (2, 2.0)")
    con.commit()
    raises(con, db, modelsql.ProgrammingError, "SELECT * FROM PREDICT(MODEL lin, TABLE pk)",
           code="feature_mismatch", contains=("code",))
    # named explicitly, a key column may be fed: the user said so
    rows = con.execute("SELECT id, y FROM PREDICT(MODEL lin, TABLE keyed, features = (id, a)) ORDER BY id").fetchall()
    assert rows == [(0, 10.0), (1, 21.0), (2, 32.0)]


def test_too_many_numeric_columns_without_names(env):
    con, db, _ = env
    load_table(con, "three", {"a": ("DOUBLE", [1.0]), "b": ("DOUBLE", [1.0]), "c": ("DOUBLE", [1.0])})
    raises(con, db, modelsql.ProgrammingError, "SELECT * FROM PREDICT(MODEL lin, TABLE three)",
           code="feature_mismatch", contains=("exactly 2",))


@pytest.mark.parametrize(
    "column, typename",
    [("s", "VARCHAR"), ("d", "DATE"), ("l", "DOUBLE[]"), ("dl", "DECIMAL"), ("st", "STRUCT")],
)
def test_non_numeric_feature_column(env, column, typename):
    con, db, _ = env
    raises(con, db, modelsql.ProgrammingError, f"SELECT * FROM PREDICT(MODEL lin, TABLE mixed, features = (a, {column}))",
           code="wrong_column_type", contains=(f'"{column}"', typename))


def test_non_numeric_column_bound_by_input_name(env):
    con, db, _ = env
    raises(con, db, modelsql.ProgrammingError, "SELECT * FROM PREDICT(MODEL lin, (SELECT s AS x FROM mixed))",
           code="wrong_column_type", contains=('"x"', "VARCHAR"))
    raises(con, db, modelsql.ProgrammingError, "SELECT * FROM PREDICT(MODEL lin, (SELECT ['p', 'q'] AS x FROM mixed))",
           code="wrong_column_type", contains=('"x"', "VARCHAR[]"))
    raises(con, db, modelsql.ProgrammingError, "SELECT * FROM PREDICT(MODEL adder, (SELECT a, d AS b FROM mixed))",
           code="wrong_column_type", contains=('"b"', "DATE"))


def test_array_column_of_wrong_width(env):
    con, db, _ = env
    raises(con, db, modelsql.ProgrammingError, "SELECT * FROM PREDICT(MODEL lin, (SELECT [1.0, 2.0, 3.0]::FLOAT[3] AS x))",
           contains=('"x"', "FLOAT[3]", "2"))


def test_list_column_of_wrong_length_is_a_data_error(env):
    con, db, _ = env
    # a variable-length list column: its length is only known row by row
    err = raises(con, db, modelsql.DataError, "SELECT * FROM PREDICT(MODEL lin, (SELECT [1.0, 2.0, 3.0]::DOUBLE[] AS x))")
    assert "__modelsql" not in str(err).lower()


def _row_sum_model(keep_axes=True):
    from onnx import TensorProto, helper

    from conftest import make_model

    if keep_axes:
        return make_model([helper.make_node("ReduceSum", ["x", "ax"], ["s"], keepdims=0)],
                          [("x", TensorProto.FLOAT, ["N", "F"])], [("s", TensorProto.FLOAT, ["N"])],
                          [("ax", np.array([1], dtype=np.int64))])
    # no axes: sums everything into one scalar, although the output is declared [N]
    return make_model([helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0)],
                      [("x", TensorProto.FLOAT, ["N", "F"])], [("s", TensorProto.FLOAT, ["N"])])


def test_ragged_lists_for_a_dynamic_input(env):
    con, db, _ = env
    con.import_model("rowsum", _row_sum_model())
    con.execute("CREATE TABLE even AS SELECT * FROM (VALUES (1, [1.0, 2.0, 3.0]), (2, [4.0, 5.0, 6.0])) v(id, x)")
    con.execute("CREATE TABLE ragged AS SELECT * FROM (VALUES (1, [1.0, 2.0]), (2, [3.0, 4.0, 5.0, 6.0])) v(id, x)")
    con.commit()
    assert con.execute("SELECT id, s FROM PREDICT(MODEL rowsum, TABLE even) ORDER BY id").fetchall() == [(1, 6.0), (2, 15.0)]
    # never silently re-split [1, 2, 3, 4, 5, 6] into rows of three
    raises(con, db, modelsql.DataError, "SELECT * FROM PREDICT(MODEL rowsum, TABLE ragged)",
           code="ragged_input", contains=('"x"', "2 to 4", '"rowsum"'))


def test_model_output_with_the_wrong_number_of_rows(env):
    con, db, _ = env
    con.import_model("allsum", _row_sum_model(keep_axes=False))
    con.execute("CREATE TABLE even AS SELECT * FROM (VALUES (1, [1.0, 2.0, 3.0]), (2, [4.0, 5.0, 6.0])) v(id, x)")
    con.commit()
    raises(con, db, modelsql.DataError, "SELECT * FROM PREDICT(MODEL allsum, TABLE even)",
           code="wrong_output_shape", contains=('"s"', '"allsum"'))


def test_nulls_in_input_column(env):
    con, db, _ = env
    con.execute("CREATE TABLE n AS SELECT i AS id, CASE WHEN i % 4 = 0 THEN NULL ELSE i END::DOUBLE AS a, "
                "i::DOUBLE AS b FROM range(5000) r(i)")
    con.commit()
    err = raises(con, db, modelsql.DataError, "SELECT * FROM PREDICT(MODEL lin, TABLE n, features = (a, b))",
                 code="null_input", contains=('"a" (1250 rows)', "on_null"))
    assert '"b"' not in str(err)  # b has no NULLs: never blamed
    # in autocommit mode too, and over a parameterized subquery
    con.autocommit = True
    raises(con, db, modelsql.DataError,
           "SELECT * FROM PREDICT(MODEL lin, (SELECT a, b FROM n WHERE id < ?), features = (a, b))", [100],
           code="null_input", contains=('"a" (25 rows)',))
    # NULLs in several columns: each named with its own count
    con.execute("CREATE TABLE n2 AS SELECT i AS id, CASE WHEN i % 4 = 0 THEN NULL ELSE i END::DOUBLE AS a, "
                "CASE WHEN i < 3 THEN NULL ELSE i END::DOUBLE AS b FROM range(100) r(i)")
    raises(con, db, modelsql.DataError, "SELECT * FROM PREDICT(MODEL lin, TABLE n2, features = (a, b))",
           code="null_input", contains=('"a" (25 rows)', '"b" (3 rows)', "in all, 27 rows"))


def test_null_found_while_streaming_is_still_a_data_error(env):
    con, db, _ = env
    # the NULL sits far past the first chunk: execute() succeeds and the error surfaces in fetch
    con.execute("CREATE TABLE late AS SELECT i AS id, CASE WHEN i = 150000 THEN NULL ELSE i END::DOUBLE AS a, "
                "(i % 7)::DOUBLE AS b FROM range(200000) r(i)")
    con.commit()
    for fetch in ("fetchall", "fetchmany", "iterate"):
        with unchanged(con, db):
            cur = con.execute("SELECT id, y FROM PREDICT(MODEL lin, TABLE late, features = (a, b), execution = 'stream')")
            with pytest.raises(modelsql.DataError) as info:
                if fetch == "fetchall":
                    cur.fetchall()
                elif fetch == "fetchmany":
                    while cur.fetchmany(5000):
                        pass
                else:
                    for _ in cur:
                        pass
        assert info.value.code == "null_input", str(info.value)
        assert '"a" (1 row)' in str(info.value)


def test_null_found_in_batch_execution_is_a_data_error_at_execute(env):
    con, db, _ = env
    # batch execution runs the model before execute() returns, so the error comes from execute itself
    con.execute("CREATE TABLE late AS SELECT i AS id, CASE WHEN i = 150000 THEN NULL ELSE i END::DOUBLE AS a, "
                "(i % 7)::DOUBLE AS b FROM range(200000) r(i)")
    con.commit()
    for execution in ("batch", "auto"):
        with unchanged(con, db), pytest.raises(modelsql.DataError) as info:
            con.execute(f"SELECT id, y FROM PREDICT(MODEL lin, TABLE late, features = (a, b), execution = '{execution}')")
        assert info.value.code == "null_input", str(info.value)
        assert '"a" (1 row)' in str(info.value)
        con.rollback()


def test_nulls_in_uncommitted_data(env):
    con, db, _ = env
    # the failed statement aborts the transaction, so its uncommitted rows cannot be
    # counted afterwards: the error gives the count seen so far, as a lower bound
    with unchanged(con, db):
        con.execute("CREATE TABLE fresh AS SELECT CASE WHEN i % 2 = 0 THEN NULL ELSE i END::DOUBLE AS a, "
                    "i::DOUBLE AS b FROM range(100) r(i)")
        with pytest.raises(modelsql.DataError) as info:
            con.execute("SELECT * FROM PREDICT(MODEL lin, TABLE fresh, features = (a, b))").fetchall()
    err = info.value
    assert err.code == "null_input"
    assert '"a" (at least ' in str(err) or '"a" (50 rows)' in str(err), str(err)
    assert '"b"' not in str(err)


def test_nulls_in_array_column(env):
    con, db, _ = env
    con.execute("CREATE TABLE na AS SELECT * FROM (VALUES (1, [1.0, 2.0]), (2, [NULL, 1.0]), (3, NULL)) v(id, x)")
    con.commit()
    raises(con, db, modelsql.DataError, "SELECT * FROM PREDICT(MODEL lin, TABLE na)",
           code="null_input", contains=('"x" (2 rows)',))


def test_empty_table_is_not_an_error(env):
    con, db, _ = env
    con.execute("CREATE TABLE e (id INTEGER, a DOUBLE, b DOUBLE)")
    con.commit()
    with unchanged(con, db):
        cur = con.execute("SELECT * FROM PREDICT(MODEL lin, TABLE e, features = (a, b))")
        assert [d[0] for d in cur.description] == ["id", "a", "b", "y"]
        assert cur.fetchall() == []


# ------------------------------------------------------------------ model files


def _import_raises(con, db, cls, sql, code=None, contains=()):
    return raises(con, db, cls, sql, code=code, contains=contains)


def test_model_file_that_is_not_onnx(env):
    con, db, tmp = env
    p = tmp / "notes.onnx"
    p.write_text("this is a text file, not an ONNX model\n")
    _import_raises(con, db, modelsql.DataError, f"IMPORT MODEL bad FROM '{p}'", code="invalid_onnx", contains=(str(p),))
    with unchanged(con, db):
        with pytest.raises(modelsql.DataError):
            con.import_model("bad", str(p))
    assert "bad" not in [r[0] for r in con.execute("SHOW MODELS").fetchall()]


def test_truncated_onnx_file(env):
    con, db, tmp = env
    good = save(linear_model(np.ones((2, 1))), tmp / "good.onnx")
    data = Path(good).read_bytes()
    for cut in (len(data) // 2, len(data) - 3, 10):
        p = tmp / f"cut{cut}.onnx"
        p.write_bytes(data[:cut])
        _import_raises(con, db, modelsql.DataError, f"IMPORT MODEL bad FROM '{p}'", code="invalid_onnx")


def test_onnx_that_onnxruntime_cannot_load(env):
    con, db, tmp = env
    model = linear_model(np.ones((2, 1)))
    model.graph.node[0].op_type = "NoSuchOperator"
    p = tmp / "unknown_op.onnx"
    p.write_bytes(model.SerializeToString())
    _import_raises(con, db, modelsql.DataError, f"IMPORT MODEL bad FROM '{p}'", code="invalid_onnx")


def test_model_file_that_does_not_exist(env):
    con, db, tmp = env
    p = tmp / "nothere.onnx"
    _import_raises(con, db, modelsql.ProgrammingError, f"IMPORT MODEL bad FROM '{p}'", code="file_not_found", contains=(str(p),))


def test_unsupported_python_object(env):
    con, db, _ = env
    with unchanged(con, db):
        with pytest.raises(modelsql.ProgrammingError) as info:
            con.import_model("bad", {"not": "a model"})
    assert info.value.code == "unsupported_model"


def test_duplicate_model_name(env):
    con, db, tmp = env
    p = save(linear_model(np.ones((2, 1))), tmp / "m.onnx")
    _import_raises(con, db, modelsql.IntegrityError, f"IMPORT MODEL lin FROM '{p}'", code="duplicate_model", contains=('"lin"',))
    _import_raises(con, db, modelsql.IntegrityError, f"IMPORT MODEL LIN FROM '{p}'", code="duplicate_model")
    with unchanged(con, db):
        with pytest.raises(modelsql.IntegrityError):
            con.import_model("lin", str(p))
    with unchanged(con, db):
        con.execute(f"IMPORT MODEL IF NOT EXISTS lin FROM '{p}'")


def test_create_model_without_replace_is_a_duplicate(env):
    con, db, tmp = env
    p = save(linear_model(np.ones((2, 1))), tmp / "m.onnx")
    _import_raises(con, db, modelsql.IntegrityError, f"CREATE MODEL lin FROM '{p}'", code="duplicate_model")


def test_feature_names_that_do_not_fit_the_model(env):
    con, db, _ = env
    with unchanged(con, db):
        with pytest.raises(modelsql.ProgrammingError) as info:
            con.import_model("x", linear_model(np.ones((2, 1))), features=["only_one"])
    assert "2" in str(info.value) and "1" in str(info.value)
    with unchanged(con, db):
        with pytest.raises(modelsql.ProgrammingError):
            con.import_model("x", linear_model(np.ones((2, 1))), features=["a", "A"])


def test_torch_module_that_cannot_be_exported(env, torch_mlp):
    torch = pytest.importorskip("torch")
    con, db, _ = env
    net, _ = torch_mlp
    with unchanged(con, db):
        with pytest.raises(modelsql.DatabaseError):
            con.import_model("bad", net, example_input=torch.randn(2, 5))  # net takes 8 features
    with unchanged(con, db):
        with pytest.raises(modelsql.ProgrammingError) as info:
            con.import_model("bad", net)  # no example input
    assert info.value.code == "example_missing"


def test_invalid_model_name(env):
    con, db, tmp = env
    with unchanged(con, db):
        with pytest.raises(modelsql.ProgrammingError):
            con.import_model("bad name!", linear_model(np.ones((2, 1))))


# ------------------------------------------------------------------ statements


@pytest.mark.parametrize(
    "sql, line, column, offending",
    [
        ("SELECT * FROM PREDICT(MODEL lin TABLE t)", 1, 33, "TABLE"),
        ("IMPORT MODEL FROM 'x.onnx'", 1, 14, "FROM"),
        ("SELECT *\nFROM PREDICT(MODEL lin, TABLE t,\n  features = (a, b) WHERE)", 3, 21, "WHERE"),
        ("SELECT * FORM t", 1, 15, "t"),
        ("SELECT a,\n  b\nFROM t\nWHERE a = = 1", 4, 11, "="),
        ("IMPORT MODEL m FROM 'unterminated.onnx", 1, 21, "'"),
    ],
)
def test_malformed_statement_points_at_the_text(env, sql, line, column, offending):
    con, db, _ = env
    err = raises(con, db, modelsql.ProgrammingError, sql)
    assert (err.line, err.column) == (line, column), str(err)
    text = str(err)
    assert f"LINE {line}:" in text
    excerpt_line, caret_line = [ln for ln in text.splitlines() if ln.startswith(f"LINE {line}:") or set(ln.strip()) == {"^"}][-2:]
    prefix = len(f"LINE {line}: ")
    caret = caret_line.index("^") - prefix
    assert excerpt_line[prefix:].startswith(sql.splitlines()[line - 1][:10]) or "..." in excerpt_line
    assert sql.splitlines()[line - 1][column - 1 :].startswith(offending)
    assert caret == column - 1 or "..." in excerpt_line


def test_unknown_column_outside_predict_points_at_user_text(env):
    con, db, _ = env
    err = raises(con, db, modelsql.ProgrammingError, "SELECT nope FROM PREDICT(MODEL lin, TABLE t, features = (a, b))")
    assert "nope" in str(err)
    assert "__modelsql" not in str(err).lower() and "__msql" not in str(err)
    assert (err.line, err.column) == (1, 8)


def test_wrong_number_of_parameters(env):
    con, db, _ = env
    for sql, params in [
        ("SELECT * FROM PREDICT(MODEL lin, TABLE t, features = (a, b)) WHERE id = ?", []),
        ("SELECT * FROM PREDICT(MODEL lin, TABLE t, features = (a, b)) WHERE id = ?", [1, 2]),
        ("SELECT * FROM PREDICT(MODEL lin, (SELECT * FROM t WHERE id < ?), features = (a, b))", None),
        ("SELECT * FROM t WHERE id = ?", []),
        ("SELECT * FROM t WHERE id = ?", [1, 2]),
    ]:
        err = raises(con, db, modelsql.ProgrammingError, sql, params)
        assert "parameter" in str(err).lower()


def test_unknown_predict_option(env):
    con, db, _ = env
    raises(con, db, modelsql.ProgrammingError, "SELECT * FROM PREDICT(MODEL lin, TABLE t, on_nul = 'skip')",
           code="unknown_option", contains=('"on_nul"', 'Did you mean "on_null"?'))
    raises(con, db, modelsql.ProgrammingError, "SELECT * FROM PREDICT(MODEL lin, TABLE t, on_null = 'ignore')",
           code="invalid_option", contains=("on_null",))
    raises(con, db, modelsql.ProgrammingError, "SELECT * FROM PREDICT(MODEL lin, TABLE t, batch_size = 0)",
           code="invalid_option", contains=("batch_size",))
    raises(con, db, modelsql.ProgrammingError, "SELECT * FROM PREDICT(MODEL lin, TABLE t, backend = 'nope')",
           code="invalid_option", contains=("backend", "'onnxruntime', 'tvm'"))


def test_predict_in_a_view_is_refused(env):
    con, db, _ = env
    raises(con, db, modelsql.NotSupportedError,
           "CREATE VIEW v AS SELECT * FROM PREDICT(MODEL lin, TABLE t, features = (a, b))",
           code="predict_in_view", contains=("CREATE TABLE",))
    assert con.execute("SELECT count(*) FROM duckdb_views() WHERE view_name = 'v'").fetchone() == (0,)
    # a table of predictions is fine: it is computed once
    con.execute("CREATE TABLE p AS SELECT * FROM PREDICT(MODEL lin, TABLE t, features = (a, b))")
    assert con.execute("SELECT count(*) FROM p").fetchone() == (5,)


# ------------------------------------------------------------------ store and files


def test_corrupted_blob_on_disk(env):
    con, db, _ = env
    digest, tensor = con.execute(
        "SELECT digest, tensor_name FROM modelsql.model_tensors WHERE name = 'lin' ORDER BY nbytes DESC LIMIT 1"
    ).fetchone()
    con.close()
    path = Path(db + ".blobs") / digest[:2] / digest[2:]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    ort_backend.clear_cache()
    with modelsql.connect(db) as c2:
        err = raises(c2, db, modelsql.DataError, "SELECT * FROM PREDICT(MODEL lin, TABLE t, features = (a, b))",
                     code="blob_corrupt", contains=('"lin"', f'"{tensor}"'))
        assert digest in str(err)
        raises(c2, db, modelsql.DataError, f"EXPORT MODEL lin TO '{db}.out.onnx'", code="blob_corrupt")
        assert not os.path.exists(db + ".out.onnx")
        # other models still work
        assert c2.execute("SELECT sum FROM PREDICT(MODEL adder, TABLE t)").fetchall()


def test_missing_blob_on_disk(env):
    con, db, _ = env
    digest, tensor = con.execute(
        "SELECT digest, tensor_name FROM modelsql.model_tensors WHERE name = 'lin' LIMIT 1"
    ).fetchone()
    con.close()
    (Path(db + ".blobs") / digest[:2] / digest[2:]).unlink()
    ort_backend.clear_cache()
    with modelsql.connect(db) as c2:
        raises(c2, db, modelsql.DataError, "SELECT * FROM PREDICT(MODEL lin, TABLE t, features = (a, b))",
               code="blob_missing", contains=('"lin"', f'"{tensor}"'))


def test_export_to_unwritable_path(env):
    con, db, tmp = env
    raises(con, db, modelsql.OperationalError, f"EXPORT MODEL lin TO '{tmp}/no/such/dir/m.onnx'",
           code="io_error", contains=("no/such/dir",))
    ro = tmp / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        if os.access(ro, os.W_OK):  # running as root: permissions are not enforced
            target = "/proc/version"
        else:
            target = str(ro / "m.onnx")
        raises(con, db, modelsql.OperationalError, f"EXPORT MODEL lin TO '{target}'", code="io_error")
    finally:
        ro.chmod(0o700)
    # a directory as the target
    raises(con, db, modelsql.OperationalError, f"EXPORT MODEL lin TO '{tmp}'", code="io_error")


def test_read_only_connection_refuses_writes(env):
    con, db, tmp = env
    p = save(linear_model(np.ones((2, 1))), tmp / "m.onnx")
    con.close()
    ro = modelsql.connect(db, read_only=True)
    try:
        with unchanged(ro, db):
            for sql in (f"IMPORT MODEL other FROM '{p}'", "DROP MODEL lin", "VACUUM MODELS", f"CREATE OR REPLACE MODEL lin FROM '{p}'"):
                with pytest.raises(modelsql.OperationalError) as info:
                    ro.execute(sql)
                assert info.value.code == "read_only", sql
            with pytest.raises(modelsql.OperationalError):
                ro.import_model("other", str(p))
        # reading works
        assert ro.execute("SELECT y FROM PREDICT(MODEL lin, TABLE t, features = (a, b)) ORDER BY id").fetchall()[1] == (21.0,)
        assert [r[0] for r in ro.execute("SHOW MODELS").fetchall()] == ["adder", "lin"]
    finally:
        ro.close()


def test_missing_model_error_points_at_the_name(tmp_path):
    con = modelsql.connect(str(tmp_path / "pos.duckdb"))
    con.execute("CREATE TABLE t AS SELECT 1.0 AS a")
    with pytest.raises(modelsql.ProgrammingError) as info:
        con.execute("SELECT *\nFROM PREDICT(MODEL nosuch, (SELECT a FROM t WHERE a > ?))", [0])
    err = info.value
    assert err.code == "model_not_found"
    assert (err.line, err.column) == (2, 20)
    assert "LINE 2: FROM PREDICT(MODEL nosuch" in str(err)
    assert str(err).splitlines()[-1].strip() == "^^^^^^"
    con.close()
