"""Weights shared by every ONNX Runtime session (PRETZEL's Object Store, Lee et al., OSDI 2018).

Real ORT sessions over models stored through a real catalog: the shared sessions answer
bit-identically to ordinary sessions with the same prepacking setting, 50 sessions over one
20 MiB weight cost a few MiB of anonymous memory in all (measured in a fresh subprocess,
``RssAnon`` after ``gc.collect()`` and ``malloc_trim(0)``), a corrupt blob is refused, and the
pool lets a weight go when its last session goes.
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import modelsql
from conftest import make_model
from modelsql.errors import DataError
from modelsql.onnxformat.column_major import column_major_inputs
from modelsql.onnxformat.shareable import shareable_initializers, with_external_locations
from modelsql.onnxformat.split import stored_tensors
from modelsql.operators.backends import SESSIONS, SessionKey
from modelsql.operators.backends import shared_weights as sw
from modelsql.operators.backends.onnxruntime import OrtModel
from modelsql.engine.artifacts import sessions as artifacts
from modelsql.storage import BlobStore

F32 = TensorProto.FLOAT
MiB = 1 << 20


# ---------------------------------------------------------------- helpers


def _import(db: Path, models: dict[str, onnx.ModelProto]):
    """Import ``models`` into the catalog at ``db``; their versions, and the database's blob store."""
    con = modelsql.connect(str(db))
    try:
        versions = {name: con.import_model(name, m) for name, m in models.items()}
        con.commit()
    finally:
        con.close()
    return versions, BlobStore.for_database(str(db))


def _import_one(tmp_path: Path, model: onnx.ModelProto):
    versions, store = _import(tmp_path / "db.duckdb", {"m": model})
    return versions["m"], store


def _shared(store: BlobStore, mv, pool: sw.WeightPool = sw.WEIGHTS, **kw) -> OrtModel:
    return sw.shared_model(store.get(mv.graph_digest), store.get, f"model {mv.name}", path_of=store.path,
                           pool=pool, **kw)


def _ordinary(store: BlobStore, mv, *, disable_prepacking: bool = False, threads: int = 1) -> OrtModel:
    return OrtModel(artifacts.load_model_bytes(store, mv), f"model {mv.name}", intra_op_threads=threads,
                    disable_prepacking=disable_prepacking)


def _same(a: OrtModel, b: OrtModel, feeds: dict) -> None:
    for x, y in zip(a.run(feeds), b.run(feeds)):
        assert x.dtype == y.dtype and x.shape == y.shape
        assert np.array_equal(x, y), float(np.abs(x.astype(np.float64) - y).max())


def _matmul_model(w: np.ndarray, b: np.ndarray) -> onnx.ModelProto:
    k, n = w.shape
    return make_model([helper.make_node("MatMul", ["X", "W"], ["T"]), helper.make_node("Add", ["T", "b"], ["Y"])],
                      [("X", F32, ["N", k])], [("Y", F32, ["N", n])], [("W", w), ("b", b)])


def _gather_model(e: np.ndarray) -> onnx.ModelProto:
    return make_model([helper.make_node("Gather", ["E", "ids"], ["Y"], axis=0)],
                      [("ids", TensorProto.INT64, ["N"])], [("Y", F32, ["N", e.shape[1]])], [("E", e)])


def _gemm_model(w: np.ndarray, c: np.ndarray) -> onnx.ModelProto:
    n, k = w.shape
    return make_model([helper.make_node("Gemm", ["X", "W", "C"], ["Y"], transB=1, alpha=0.5)],
                      [("X", F32, ["N", k])], [("Y", F32, ["N", n])], [("W", w), ("C", c)])


def _conv_model(w: np.ndarray, b: np.ndarray) -> onnx.ModelProto:
    cout, cin, kh, kw = w.shape
    return make_model([helper.make_node("Conv", ["X", "W", "B"], ["Y"], pads=[1, 1, 1, 1]),
                       helper.make_node("Relu", ["Y"], ["Z"])],
                      [("X", F32, ["N", cin, 12, 12])], [("Z", F32, ["N", cout, 12, 12])], [("W", w), ("B", b)])


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(7)


# ---------------------------------------------------------------- onnxformat helpers


def test_shareable_initializers_lists_large_numeric_top_level_tensors(tmp_path: Path, rng) -> None:
    w = rng.standard_normal((64, 64), dtype=np.float32)
    mv, store = _import_one(tmp_path, _matmul_model(w, np.ones(64, np.float32)))
    graph = store.get(mv.graph_digest)
    listed = shareable_initializers(graph, min_bytes=1024)
    assert [(t.name, t.dtype, t.dims, t.nbytes) for t in listed] == [("W", np.dtype("<f4"), (64, 64), w.nbytes)]
    assert listed[0].digest == BlobStore.digest_of(w.tobytes())
    assert [t.name for t in shareable_initializers(graph)] == ["W", "b"]
    referring = with_external_locations(graph, {"W": "ab/cd"})
    (tensor,) = [t for t in referring.graph.initializer if t.name == "W"]
    assert [(e.key, e.value) for e in tensor.external_data] == [("location", "ab/cd")]
    assert [t.name for t in stored_tensors(referring)] == ["b"]  # what join_model still fills in
    with pytest.raises(modelsql.ProgrammingError):
        with_external_locations(graph, {"nope": "x"})


# ---------------------------------------------------------------- (b) answers


def test_matmul_gather_gemm_conv_share_and_answer_as_ordinary_sessions(tmp_path: Path, rng) -> None:
    def normal(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape, dtype=np.float32)

    models = {
        "mm": _matmul_model(normal(300, 200), normal(200)),
        "emb": _gather_model(normal(1000, 32)),
        "gemm": _gemm_model(normal(96, 300), normal(96)),
        "conv": _conv_model(normal(32, 16, 3, 3), normal(32)),
    }
    versions, store = _import(tmp_path / "db.duckdb", models)
    feeds = {
        "mm": {"X": rng.standard_normal((64, 300), dtype=np.float32)},
        "emb": {"ids": rng.integers(0, 1000, 64)},
        "gemm": {"X": rng.standard_normal((64, 300), dtype=np.float32)},
        "conv": {"X": rng.standard_normal((8, 16, 12, 12), dtype=np.float32)},
    }
    for name, mv in versions.items():
        shared = _shared(store, mv, min_bytes=1024)
        listed = shareable_initializers(store.get(mv.graph_digest), 1024)
        assert set(shared.initializers) == {t.name for t in listed} and len(listed) == 1
        for t in listed:  # the session computes on the pool's mapping itself
            mapped = sw.WEIGHTS.get(t.digest, t.dtype, t.dims, store.path)
            assert shared.initializers[t.name].data_ptr() == mapped.data_ptr()
        for f in (feeds[name], {k: v[:1] for k, v in feeds[name].items()}):  # batch 64 (8) and 1
            _same(shared, _ordinary(store, mv, disable_prepacking=True), f)
            two = sw.shared_model(store.get(mv.graph_digest), store.get, name, path_of=store.path,
                                  min_bytes=1024, intra_op_threads=2)  # Gemm rounds differently on 2 threads
            _same(two, _ordinary(store, mv, disable_prepacking=True, threads=2), f)
        _same(_shared(store, mv, min_bytes=1024, prepack=True), _ordinary(store, mv), feeds[name])
        for x, y in zip(shared.run(feeds[name]), _ordinary(store, mv).run(feeds[name])):
            np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-4)  # prepacked MLAS kernels round differently


def test_two_models_map_one_weight_once(tmp_path: Path, rng) -> None:
    e = rng.standard_normal((512, 16), dtype=np.float32)
    versions, store = _import(tmp_path / "db.duckdb", {"a": _gather_model(e), "b": _gather_model(e.copy())})
    pool = sw.WeightPool()
    a, b = (_shared(store, mv, pool=pool, min_bytes=1024) for mv in versions.values())
    assert pool.stats() == sw.PoolStats(1, e.nbytes)
    assert a.initializers["E"].data_ptr() == b.initializers["E"].data_ptr()
    assert BlobStore.digest_of(e.tobytes()) in pool


def test_works_from_any_working_directory(tmp_path: Path, rng, monkeypatch) -> None:
    mv, store = _import_one(tmp_path, _gather_model(rng.standard_normal((512, 16), np.float32)))
    monkeypatch.chdir("/")
    model = _shared(store, mv, min_bytes=1024)
    assert model.run({"ids": np.array([3, 1])})[0].shape == (2, 16)


def test_a_rewrite_of_the_model_keeps_the_weights_shared(tmp_path: Path, rng) -> None:
    w = rng.standard_normal((300, 200), dtype=np.float32)
    mv, store = _import_one(tmp_path, _matmul_model(w, np.zeros(200, np.float32)))
    rewrite = lambda data: column_major_inputs(data, ["X"])  # noqa: E731
    shared = _shared(store, mv, min_bytes=1024, transform=rewrite)
    assert set(shared.initializers) == {"W"}
    ordinary = OrtModel(rewrite(artifacts.load_model_bytes(store, mv)), "m", intra_op_threads=1, disable_prepacking=True)
    _same(shared, ordinary, {"X__columns": rng.standard_normal((300, 5), dtype=np.float32)})  # fed as (F, N)


def test_cached_shared_session_keeps_its_own_key(tmp_path: Path, rng) -> None:
    mv, store = _import_one(tmp_path, _gather_model(rng.standard_normal((512, 16), np.float32)))
    key = SessionKey(artifacts.artifact_digest(mv), "onnxruntime", "cpu", ())
    try:
        first = sw.get_shared_model(key, lambda: store.get(mv.graph_digest), store.get, "m", path_of=store.path)
        again = sw.get_shared_model(key, lambda: store.get(mv.graph_digest), store.get, "m", path_of=store.path)
        ordinary = artifacts.model_session(store, mv, intra=1)
        assert first is again and ordinary is not first
        assert any(dict(k.options).get("shared_weights") for k, v in SESSIONS.items() if v is first)
    finally:
        SESSIONS.clear()


# ---------------------------------------------------------------- (c) corrupt, (d) release


def test_corrupt_blob_is_refused(tmp_path: Path, rng) -> None:
    e = rng.standard_normal((512, 16), dtype=np.float32)
    mv, store = _import_one(tmp_path, _gather_model(e))
    digest = BlobStore.digest_of(e.tobytes())
    path = store.path(digest)
    data = bytearray(path.read_bytes())
    data[100] ^= 0xFF
    path.chmod(0o644)
    path.write_bytes(bytes(data))
    with pytest.raises(DataError) as info:
        _shared(store, mv, pool=sw.WeightPool(), min_bytes=1024)
    assert info.value.code == "blob_corrupt" and digest in str(info.value) and '"E"' in str(info.value)
    path.write_bytes(bytes(data[:-4]))  # truncated: refused before mapping
    with pytest.raises(DataError) as info:
        _shared(store, mv, pool=sw.WeightPool(), min_bytes=1024)
    assert info.value.code == "blob_corrupt" and digest in str(info.value)
    path.unlink()
    with pytest.raises(DataError) as info:
        _shared(store, mv, pool=sw.WeightPool(), min_bytes=1024)
    assert info.value.code == "blob_missing" and digest in str(info.value)


def test_dropping_every_session_releases_the_weight(tmp_path: Path, rng) -> None:
    e = rng.standard_normal((512, 16), dtype=np.float32)
    versions, store = _import(tmp_path / "db.duckdb", {"a": _gather_model(e), "b": _gather_model(e * 2)})
    pool = sw.WeightPool()
    a1, a2 = (_shared(store, versions["a"], pool=pool, min_bytes=1024) for _ in range(2))
    b = _shared(store, versions["b"], pool=pool, min_bytes=1024)
    assert pool.stats() == sw.PoolStats(2, 2 * e.nbytes)
    del a1
    gc.collect()
    assert pool.stats() == sw.PoolStats(2, 2 * e.nbytes)
    assert a2.run({"ids": np.array([5])})[0].tolist() == [e[5].tolist()]
    del a2
    gc.collect()
    assert pool.stats() == sw.PoolStats(1, e.nbytes)
    del b
    gc.collect()
    assert pool.stats() == sw.PoolStats(0, 0)


def test_session_cache_eviction_releases_the_weight(tmp_path: Path, rng) -> None:
    e = rng.standard_normal((512, 16), dtype=np.float32)
    mv, store = _import_one(tmp_path, _gather_model(e))
    key = SessionKey(artifacts.artifact_digest(mv), "onnxruntime", "cpu", ())
    digest = BlobStore.digest_of(e.tobytes())
    SESSIONS.clear()
    gc.collect()
    sw.get_shared_model(key, lambda: store.get(mv.graph_digest), store.get, "m", path_of=store.path)
    assert digest in sw.WEIGHTS
    SESSIONS.clear()
    gc.collect()
    assert digest not in sw.WEIGHTS


# ---------------------------------------------------------------- (e) what is not shared


def test_string_attribute_and_subgraph_tensors_are_joined_inline(tmp_path: Path, rng) -> None:
    vocab = np.array([f"w{i}" for i in range(4000)], dtype=object)
    e = rng.standard_normal((4000, 8), dtype=np.float32)
    big = rng.standard_normal((8, 512), dtype=np.float32)
    scale = rng.standard_normal(8).astype(np.float32)
    then_branch = helper.make_graph([helper.make_node("MatMul", ["Y", "B"], ["out"])], "then", [],
                                    [helper.make_tensor_value_info("out", F32, [None, None])],
                                    [numpy_helper.from_array(big, "B")])
    else_branch = helper.make_graph([helper.make_node("Identity", ["Y"], ["out"])], "else", [],
                                    [helper.make_tensor_value_info("out", F32, [None, None])])
    nodes = [
        helper.make_node("Gather", ["vocab", "ids"], ["L"], axis=0),  # a STRING initializer
        helper.make_node("Gather", ["E", "ids"], ["Y0"], axis=0),
        helper.make_node("Constant", [], ["S"], value_floats=scale.tolist()),  # a FLOATS attribute, stored as a blob
        helper.make_node("Mul", ["Y0", "S"], ["Y"]),
        helper.make_node("If", ["flag"], ["Z"], then_branch=then_branch, else_branch=else_branch),
    ]
    model = make_model(nodes, [("ids", TensorProto.INT64, ["N"]), ("flag", TensorProto.BOOL, [])],
                       [("L", TensorProto.STRING, ["N"]), ("Z", F32, [None, None])], [("vocab", vocab), ("E", e)])
    mv, store = _import_one(tmp_path, model)
    assert {t.name for t in mv.tensors} >= {"vocab", "E", "B"} and len(mv.tensors) == 4
    pool = sw.WeightPool()
    shared = _shared(store, mv, pool=pool, min_bytes=1)
    assert set(shared.initializers) == {"E"}  # not the strings, the attribute or the subgraph's B
    assert pool.stats() == sw.PoolStats(1, e.nbytes)
    for flag in (True, False):
        feeds = {"ids": np.array([3, 3999, 0]), "flag": np.array(flag)}
        _same(shared, _ordinary(store, mv, disable_prepacking=True), feeds)
        assert shared.run(feeds)[0].tolist() == ["w3", "w3999", "w0"]


def test_graph_input_initializer_and_small_tensors(tmp_path: Path, rng) -> None:
    """An initializer that is also a graph input (overridable, IR < 4 style) is shared and can still be fed."""
    e = rng.standard_normal((64, 8), dtype=np.float32)
    model = _gather_model(e)
    model.graph.input.append(helper.make_tensor_value_info("E", F32, [64, 8]))
    mv, store = _import_one(tmp_path, model)
    shared = _shared(store, mv, pool=sw.WeightPool(), min_bytes=1)
    assert set(shared.initializers) == {"E"}
    _same(shared, _ordinary(store, mv), {"ids": np.array([0, 63])})
    _same(shared, _ordinary(store, mv), {"ids": np.array([0, 63]), "E": -e})
    inline = _shared(store, mv, pool=sw.WeightPool())  # 2 KiB is under SHARE_MIN_BYTES: joined inline
    assert inline.initializers == {}
    _same(inline, _ordinary(store, mv), {"ids": np.array([1])})


# ---------------------------------------------------------------- (a) memory, in a fresh process

_MEASURE = textwrap.dedent(
    """
    import ctypes, gc, json, sys, time
    import duckdb, numpy as np
    from modelsql.catalog import Catalog
    from modelsql.operators.backends import shared_weights as sw
    from modelsql.operators.backends.onnxruntime import OrtModel
    from modelsql.engine.artifacts import sessions as artifacts
    from modelsql.storage import BlobStore

    db, mode, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    duck = duckdb.connect(db, read_only=True)
    catalog, store = Catalog(duck, read_only=True), BlobStore.for_database(db)
    versions = [catalog.get(f"m{i}") for i in range(count + 1)]
    x = np.ones((1, 2560), np.float32)

    def anon():
        gc.collect()
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        for line in open("/proc/self/status"):
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024

    def make(mv):
        if mode == "shared":
            return sw.shared_model(store.get(mv.graph_digest), store.get, mv.name, path_of=store.path)
        return OrtModel(artifacts.load_model_bytes(store, mv), mv.name, intra_op_threads=1)

    keep = [make(versions[0])]  # the first session pays for ORT's one-time set-up
    keep[0].run({"X": x})
    before = anon()
    start = time.perf_counter()
    for mv in versions[1:]:
        keep.append(make(mv))
    ms = (time.perf_counter() - start) * 1e3 / count
    outs = [m.run({"X": x})[0] for m in keep]
    print(json.dumps({"anon_bytes": anon() - before, "create_ms": ms, "pool": sw.WEIGHTS.stats().bytes,
                      "distinct": len({o.tobytes() for o in outs})}))
    """
)


def _measure(db: Path, mode: str, count: int) -> dict:
    out = subprocess.run([sys.executable, "-c", _MEASURE, str(db), mode, str(count)], capture_output=True,
                         text=True, timeout=300, cwd=str(Path(__file__).resolve().parents[2]))
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_fifty_sessions_over_one_20_mib_weight_cost_a_few_mib(tmp_path: Path, rng) -> None:
    w = rng.standard_normal((2560, 2048), dtype=np.float32)  # 20 MiB
    assert w.nbytes == 20 * MiB
    db = tmp_path / "db.duckdb"
    _import(db, {f"m{i}": _matmul_model(w, np.full(2048, i, np.float32)) for i in range(51)})
    shared = _measure(db, "shared", 50)
    ordinary = _measure(db, "ordinary", 8)
    assert shared["distinct"] == 51 and shared["pool"] == 20 * MiB
    assert shared["anon_bytes"] <= 8 * MiB, shared  # 50 sessions, in all
    assert ordinary["anon_bytes"] / 8 >= 20 * MiB, ordinary  # each ordinary session: its own (packed) copy
    assert ordinary["anon_bytes"] / 8 >= 50 * shared["anon_bytes"] / 50


def test_conv_weights_stay_shared_without_the_nchwc_transformer(tmp_path: Path, rng) -> None:
    mv, store = _import_one(tmp_path, _conv_model(rng.standard_normal((32, 16, 3, 3), dtype=np.float32),
                                                  rng.standard_normal(32).astype(np.float32)))
    skip = ("NchwcTransformer",)  # else each session keeps its own reordered copy of W
    shared = _shared(store, mv, min_bytes=1024, disabled_optimizers=skip)
    ordinary = OrtModel(artifacts.load_model_bytes(store, mv), "conv", intra_op_threads=1, disable_prepacking=True,
                        disabled_optimizers=skip)
    _same(shared, ordinary, {"X": rng.standard_normal((4, 16, 12, 12), dtype=np.float32)})
