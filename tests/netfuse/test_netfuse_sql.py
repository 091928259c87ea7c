"""NetFuse from SQL and the server: model families in the catalog, PREDICT(MODELS (...) ROUTE BY c, ...),
PREDICTs of one family over one input, the merged-graph cache, EXPLAIN, bad input, and served
families whose batches run merged. Real DuckDB files, real ONNX Runtime sessions, a real server on
127.0.0.1 answering real HTTP requests."""

from __future__ import annotations

import http.client
import json
import threading

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import modelsql
from modelsql import errors
from modelsql.datasets import architectures as A
from modelsql.engine.serve.statements import SERVERS, stop_all

N_MEMBERS = 4
SIZES = (8, 16, 4)


def _write(tmp_path, name: str, data: bytes) -> str:
    path = tmp_path / f"{name}.onnx"
    path.write_bytes(data)
    return str(path)


@pytest.fixture(scope="module")
def family_bytes():
    return A.family("mlp", N_MEMBERS, sizes=SIZES, seed=11)


@pytest.fixture
def db(tmp_path, family_bytes):
    con = modelsql.connect(str(tmp_path / "nf.duckdb"))
    cur = con.cursor()
    for i, data in enumerate(family_bytes):
        cur.execute(f"CREATE MODEL m{i} FROM '{_write(tmp_path, f'm{i}', data)}'")
    other = A.family("mlp", 1, sizes=(8, 32, 4), seed=99)[0]
    cur.execute(f"CREATE MODEL wide FROM '{_write(tmp_path, 'wide', other)}'")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((40, SIZES[0])).astype(np.float32)
    cur.execute("CREATE TABLE req (id INTEGER, model_name VARCHAR, input FLOAT[8])")
    cur.executemany("INSERT INTO req VALUES (?, ?, ?)",
                    [(i, f"M{i % N_MEMBERS}" if i % 5 == 0 else f"m{i % N_MEMBERS}", x[i].tolist())
                     for i in range(40)])
    con.commit()
    yield con, cur, x
    con.close()


def _expected(family_bytes, x, routes) -> np.ndarray:
    sessions = [ort.InferenceSession(b, providers=["CPUExecutionProvider"]) for b in family_bytes]
    return np.stack([sessions[int(r.lower()[1:])].run(None, {"input": x[i: i + 1]})[0][0]
                     for i, r in enumerate(routes)])


ROUTED = "SELECT id, model_name, output FROM PREDICT(MODELS ({members}) ROUTE BY model_name, TABLE req{opts}) ORDER BY id"


def test_family_view_and_fingerprints(db):
    con, cur, _ = db
    fams = cur.execute("SELECT family, models, members FROM modelsql.families").fetchall()
    assert ("m0", N_MEMBERS, [f"m{i}" for i in range(N_MEMBERS)]) in fams
    assert ("wide", 1, ["wide"]) in fams
    counts = sorted(r[1] for r in cur.execute("SELECT fingerprint, count(*) FROM modelsql.models GROUP BY ALL").fetchall())
    assert counts == [1, N_MEMBERS]
    flops = cur.execute("SELECT flops FROM modelsql.model_versions WHERE name = 'm0'").fetchone()[0]
    assert flops >= 2 * (8 * 16 + 16 * 4)  # the two dense layers' multiply-adds at least


@pytest.mark.parametrize("opts", ["", ", merge = 'always'", ", merge = 'never'", ", execution = 'batch'",
                                  ", merge = 'always', execution = 'batch'"])
def test_routed_predict_gives_each_row_its_own_models_answer(db, family_bytes, opts):
    con, cur, x = db
    members = ", ".join(f"m{i}" for i in range(N_MEMBERS))
    rows = cur.execute(ROUTED.format(members=members, opts=opts)).fetchall()
    assert [r[0] for r in rows] == list(range(40))
    got = np.array([r[2] for r in rows], dtype=np.float32)
    want = _expected(family_bytes, x, [r[1] for r in rows])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    con.optimize = False
    again = cur.execute(ROUTED.format(members=members, opts=opts)).fetchall()
    np.testing.assert_allclose(np.array([r[2] for r in again], dtype=np.float32), got, rtol=1e-5, atol=1e-6)


def test_family_form_and_explain_say_merged_or_not_and_why(db):
    con, cur, _ = db
    text = "\n".join(r[1] for r in cur.execute(
        "EXPLAIN ANALYZE SELECT * FROM PREDICT(MODELS FAMILY m2 ROUTE BY model_name, TABLE req, merge = 'always')"
    ).fetchall())
    assert "routed by model_name to 4 models: m0, m1, m2, m3" in text
    assert "merge: yes" in text and "merge = 'always'" in text
    assert "1 merged runs" in text or "merged runs" in text
    text = "\n".join(r[1] for r in cur.execute(
        "EXPLAIN SELECT * FROM PREDICT(MODELS (m0, wide) ROUTE BY model_name, TABLE req)").fetchall())
    assert 'merge: no: not merged: model "wide" has another architecture than model "m0"' in text
    text = "\n".join(r[1] for r in cur.execute(
        "EXPLAIN SELECT * FROM PREDICT(MODELS FAMILY m0 ROUTE BY model_name, TABLE req, merge = 'never')").fetchall())
    assert "merge: no" in text and "merge = 'never'" in text


def test_auto_merges_small_routed_batches_and_not_big_ones(db, tmp_path):
    """A few rows over four tiny models: merging removes three runtime calls (the rule merges); two
    wider models (0.5 MFLOP a row) over a chunk of rows each: the work dominates, the rule runs them
    separately."""
    con, cur, _ = db
    small = "\n".join(r[1] for r in cur.execute(
        "EXPLAIN SELECT * FROM PREDICT(MODELS FAMILY m0 ROUTE BY model_name, (SELECT * FROM req LIMIT 8))").fetchall())
    assert "merge: yes" in small
    for i, data in enumerate(A.family("mlp", 2, sizes=(8, 512, 512, 4), seed=5)):
        cur.execute(f"CREATE MODEL big{i} FROM '{_write(tmp_path, f'big{i}', data)}'")
    cur.execute("CREATE TABLE big AS SELECT i AS id, 'big' || (i % 2) AS model_name, "
                "[random() for _ in range(8)]::FLOAT[8] AS input FROM range(200000) t(i)")
    big = "\n".join(r[1] for r in cur.execute(
        "EXPLAIN SELECT * FROM PREDICT(MODELS FAMILY big0 ROUTE BY model_name, TABLE big)").fetchall())
    assert "merge: no" in big and "run separately" in big


def test_merged_graph_is_cached_in_the_store_without_a_second_copy_of_the_weights(db):
    con, cur, _ = db
    before = cur.execute("SELECT stored_bytes FROM modelsql.storage").fetchone()[0]
    cur.execute(ROUTED.format(members="m0, m1, m2, m3", opts=", merge = 'always'")).fetchall()
    rows = cur.execute("SELECT members, layout, graph_bytes, max_rel_diff FROM modelsql.merged_graphs").fetchall()
    assert rows == [(["m0:1", "m1:1", "m2:1", "m3:1"], "stacked", rows[0][2], rows[0][3])]
    assert rows[0][3] <= 1e-4
    member_digests = {r[0] for r in cur.execute(
        "SELECT digest FROM modelsql.model_tensors WHERE name IN ('m0', 'm1', 'm2', 'm3')").fetchall()}
    stored_graph = rows[0][2]
    after = cur.execute("SELECT sum(nbytes) FROM modelsql.blobs").fetchone()[0]
    assert after - before == stored_graph  # one graph blob: every weight is the members' own blob
    digest = cur.execute("SELECT graph_digest FROM modelsql.merged_graphs").fetchone()[0]
    graph = onnx.ModelProto.FromString(modelsql.storage.BlobStore.for_database(con.database).get(digest))
    external = [t for t in graph.graph.initializer if t.data_location == TensorProto.EXTERNAL]
    refs = {e.value for t in external for e in t.external_data if e.key == "digest"}
    assert len(external) == 4 * 4 and refs == member_digests  # 4 members x (2 weights + 2 biases), as stored
    inline = [t for t in graph.graph.initializer if t.data_location != TensorProto.EXTERNAL]
    assert all(t.data_type == TensorProto.INT64 for t in inline)  # only shape constants are the graph's own
    cur.execute(ROUTED.format(members="m0, m1, m2, m3", opts=", merge = 'always'")).fetchall()
    assert cur.execute("SELECT count(*) FROM modelsql.merged_graphs").fetchone() == (1,)
    cur.execute("DROP MODEL m3")
    assert cur.execute("SELECT count(*) FROM modelsql.merged_graphs").fetchone() == (0,)


def _lrn_member(seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array(rng.standard_normal((4, 2, 1, 1)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["input", "w"], ["c"]), helper.make_node("LRN", ["c"], ["l"], size=3),
             helper.make_node("Flatten", ["l"], ["output"])]
    g = helper.make_graph(nodes, "lrn", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 2, 1, 1])],
                          [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", 4])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_a_declined_merge_runs_the_members_separately_and_explain_names_the_node(tmp_path):
    con = modelsql.connect(str(tmp_path / "lrn.duckdb"))
    cur = con.cursor()
    members = [_lrn_member(s) for s in (1, 2)]
    for i, data in enumerate(members):
        cur.execute(f"CREATE MODEL l{i} FROM '{_write(tmp_path, f'l{i}', data)}'")
    cur.execute("CREATE TABLE r AS SELECT i AS id, 'l' || (i % 2) AS m, [i, -i]::FLOAT[2] AS input FROM range(6) t(i)")
    q = "SELECT id, m, output FROM PREDICT(MODELS (l0, l1) ROUTE BY m, TABLE r, merge = 'always') ORDER BY id"
    got = cur.execute(q).fetchall()
    sessions = [ort.InferenceSession(b, providers=["CPUExecutionProvider"]) for b in members]
    for i, m, out in got:
        want = sessions[int(m[1])].run(None, {"input": np.array([[[[i]], [[-i]]]], np.float32)})[0][0]
        np.testing.assert_allclose(out, want, rtol=1e-6)
    text = "\n".join(r[1] for r in cur.execute("EXPLAIN " + q).fetchall())
    assert "merge declined, the members run separately" in text and "LRN" in text
    con.close()


def test_bad_routed_input_gets_clear_errors_and_changes_nothing(db):
    con, cur, _ = db
    models_before = cur.execute("SELECT * FROM modelsql.model_versions ORDER BY name").fetchall()
    cases = [
        ("SELECT * FROM PREDICT(MODELS (m0, m1) ROUTE BY model_name, TABLE req)", errors.DataError, "route_unknown",
         "m2"),
        ("SELECT * FROM PREDICT(MODELS (m0, m1) ROUTE BY modelname, TABLE req)", errors.ProgrammingError,
         "column_not_found", "model_name"),
        ("SELECT * FROM PREDICT(MODELS (m0, m9) ROUTE BY model_name, TABLE req)", errors.ProgrammingError,
         "model_not_found", "m9"),
        ("SELECT * FROM PREDICT(MODELS (m0, m0) ROUTE BY model_name, TABLE req)", errors.ProgrammingError,
         "duplicate_model", "m0"),
        ("SELECT * FROM PREDICT(MODELS (m0, wide) ROUTE BY model_name, TABLE req)", errors.DataError,
         "route_unknown", "m1"),
        ("SELECT * FROM PREDICT(MODELS FAMILY nope ROUTE BY model_name, TABLE req)", errors.ProgrammingError,
         "family_not_found", "nope"),
        ("SELECT * FROM PREDICT(MODELS (m0, m1) ROUTE BY input, TABLE req)", errors.ProgrammingError,
         "route_column_fed", "input"),
        ("SELECT * FROM PREDICT(MODELS (m0) ROUTE BY model_name, TABLE req, merge = 'sometimes')",
         errors.ProgrammingError, "invalid_option", "merge"),
        ("SELECT * FROM PREDICT(MODELS (m0, m1) ROUTE BY model_name, (SELECT model_name, id AS input FROM req))",
         errors.ProgrammingError, "wrong_column_type", "PREDICT(MODELS (m0, m1) ROUTE BY model_name)"),
        ("SELECT * FROM PREDICT(MODELS FAMILY ROUTE BY model_name, TABLE req)", errors.ProgrammingError,
         "parse_error", "Expected a family name"),
        ("SELECT * FROM PREDICT(MODELS (m0, m1, m2, m3) ROUTE BY model_name, "
         "(SELECT id, input, CASE WHEN id = 3 THEN NULL ELSE model_name END AS model_name FROM req))",
         errors.DataError, None, "model_name"),
    ]
    for sql, cls, code, needle in cases:
        with pytest.raises(cls) as ei:
            cur.execute(sql).fetchall()
        if code is not None:
            assert ei.value.code == code, (sql, ei.value)
        assert needle in str(ei.value), (sql, str(ei.value))
        con.rollback()
    assert cur.execute("SELECT * FROM modelsql.model_versions ORDER BY name").fetchall() == models_before
    nulls = cur.execute(
        "SELECT id, output FROM PREDICT(MODELS (m0, m1, m2, m3) ROUTE BY model_name, "
        "(SELECT id, input, CASE WHEN id = 3 THEN NULL ELSE model_name END AS model_name FROM req), "
        "on_null = 'null') ORDER BY id").fetchall()
    assert nulls[3][1] is None and all(r[1] is not None for r in nulls if r[0] != 3)


def test_members_with_other_inputs_cannot_be_routed_together(tmp_path):
    con = modelsql.connect(str(tmp_path / "mix.duckdb"))
    cur = con.cursor()
    cur.execute(f"CREATE MODEL a FROM '{_write(tmp_path, 'a', A.family('mlp', 1, sizes=(8, 4))[0])}'")
    cur.execute(f"CREATE MODEL b FROM '{_write(tmp_path, 'b', A.family('mlp', 1, sizes=(6, 4))[0])}'")
    cur.execute("CREATE TABLE t AS SELECT 'a' AS m, [1, 2, 3, 4, 5, 6, 7, 8]::FLOAT[8] AS input")
    with pytest.raises(errors.ProgrammingError) as ei:
        cur.execute("SELECT * FROM PREDICT(MODELS (a, b) ROUTE BY m, TABLE t)")
    assert ei.value.code == "model_set_mismatch" and '"b"' in str(ei.value)
    con.close()


def test_predicts_of_one_family_over_one_input_run_one_merged_graph(db):
    con, cur, _ = db
    q = ("SELECT a.id, a.output AS o0, b.output AS o1, c.output AS o2 FROM PREDICT(MODEL m0, TABLE req{o}) a "
         "JOIN PREDICT(MODEL m1, TABLE req{o}) b USING (id) JOIN PREDICT(MODEL m2, TABLE req{o}) c USING (id) "
         "ORDER BY id")
    merged = cur.execute(q.format(o=", merge = 'always'")).fetchall()
    text = "\n".join(r[1] for r in cur.execute("EXPLAIN ANALYZE " + q.format(o=", merge = 'always'")).fetchall())
    assert "MergedFamily #0: models m0, m1, m2: merged" in text and "measured: 1 merged runs" in text
    con.optimize = False
    separate = cur.execute(q.format(o="")).fetchall()
    np.testing.assert_allclose(np.array([r[1:] for r in merged]), np.array([r[1:] for r in separate]),
                               rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------------------------- the server
def _infer(host: str, name: str, x: np.ndarray) -> np.ndarray:
    conn = http.client.HTTPConnection(host, timeout=20)
    body = {"inputs": [{"name": "input", "shape": list(x.shape), "datatype": "FP32", "data": x.ravel().tolist()}]}
    conn.request("POST", f"/v2/models/{name}/infer", body=json.dumps(body))
    resp = conn.getresponse()
    out = json.loads(resp.read())
    conn.close()
    assert resp.status == 200, out
    return np.array(out["outputs"][0]["data"], dtype=np.float32).reshape(out["outputs"][0]["shape"])


def test_served_family_members_batch_together_and_run_merged(db, family_bytes):
    con, cur, x = db
    cur.execute("SERVE MODEL m0, MODEL m1, MODEL m2, MODEL m3 ON PORT 0 WITH (max_batch_size = 16, "
                "max_queue_delay_ms = 30, threads = 2)")
    host = cur.fetchall()[0][0].split("//")[1]
    try:
        repo = next(iter(SERVERS.values())).repository
        assert len({repo.get(f"m{i}").group for i in range(N_MEMBERS)}) == 1  # one batching group
        answers: dict = {}

        def client(k: int) -> None:
            for j in range(6):
                i = (k + j) % N_MEMBERS
                answers[(k, j)] = (i, _infer(host, f"m{i}", x[k * 6 + j: k * 6 + j + 1]))

        threads = [threading.Thread(target=client, args=(k,)) for k in range(6)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        sessions = [ort.InferenceSession(b, providers=["CPUExecutionProvider"]) for b in family_bytes]
        for (k, j), (i, got) in answers.items():
            want = sessions[i].run(None, {"input": x[k * 6 + j: k * 6 + j + 1]})[0]
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        stats = next(iter(repo.family_stats().values()))
        assert stats["members"] == [f"m{i}" for i in range(N_MEMBERS)]
        assert stats["merged_runs"] >= 1, stats  # concurrent requests for several members ran as one merged batch
    finally:
        stop_all()


def test_serve_without_family_merging_keeps_members_apart(db):
    con, cur, _ = db
    cur.execute("SERVE MODEL m0, MODEL m1 ON PORT 0 WITH (merge_families = false)")
    try:
        repo = next(iter(SERVERS.values())).repository
        assert repo.get("m0").group != repo.get("m1").group and repo.family_stats() == {}
    finally:
        stop_all()


def test_members_with_a_fixed_batch_dimension_route_and_merge(tmp_path):
    """Members exported with a fixed batch of 2 rows: the merged graph runs in rounds of 2 rows per member
    (padded), the separate members in slices of 2; both give each row its own model's answer."""
    con = modelsql.connect(str(tmp_path / "fixed.duckdb"))
    cur = con.cursor()
    fam = A.family("mlp", 3, sizes=SIZES, dynamic_batch=False, seed=3)
    for i, data in enumerate(fam):
        cur.execute(f"CREATE MODEL f{i} FROM '{_write(tmp_path, f'f{i}', data)}'")
    cur.execute("CREATE TABLE r AS SELECT i AS id, 'f' || (i % 3) AS m, "
                "[random() for _ in range(8)]::FLOAT[8] AS input FROM range(11) t(i)")
    sessions = [ort.InferenceSession(b, providers=["CPUExecutionProvider"]) for b in fam]
    assert sessions[0].get_inputs()[0].shape[0] == 2
    for mode in ("always", "never"):
        rows = cur.execute(f"SELECT id, m, input, output FROM PREDICT(MODELS FAMILY f0 ROUTE BY m, TABLE r, "
                           f"merge = '{mode}') ORDER BY id").fetchall()
        assert len(rows) == 11
        for _, m, x, out in rows:
            want = sessions[int(m[1])].run(None, {"input": np.array([x, x], np.float32)})[0][0]
            np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
    con.close()
