"""A process killed with SIGKILL in the middle of an IMPORT leaves no half model.

A real child process (``sys.executable -c ...``) imports a ~50 MB ONNX MLP
(12 dense layers of random float32 weights, built with ``onnx.helper``) into a
file database and is killed with ``SIGKILL`` at several delays after it
announces the import, from right away to nearly the end. After each kill the
database is reopened and checked:

* the model is either absent from the catalog, or fully present: every tensor's
  blob is there and verifies, ``PREDICT`` gives ONNX Runtime's answer on the
  original file, and ``EXPORT MODEL`` gives back the original bytes;
* every digest the catalog references (``modelsql.blobs``, graph digests,
  tensor digests) is in the store and hashes to its name;
* models imported before the crash are untouched;
* ``VACUUM MODELS`` removes the stray blobs of the killed import, after which the
  store holds exactly the referenced blobs (writes in progress, ``.tmp-*``
  files, are removed once stale, as :meth:`BlobStore.collect` documents).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import modelsql
from conftest import linear_model, make_model, run_onnx
from modelsql.operators.backends import onnxruntime as ort_backend
from modelsql.storage import BlobStore

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL (POSIX)")

WIDTH = 1024
LAYERS = 12

CHILD = r"""
import sys
import modelsql
db, name, path = sys.argv[1], sys.argv[2], sys.argv[3]
con = modelsql.connect(db)
print("importing", flush=True)
con.execute(f"IMPORT MODEL {name} FROM '{path}'")
print("imported", flush=True)
con.close()
"""


def build_big_model(folder: Path, seed: int):
    """(path, bytes, example input, expected output) of a ~50 MB MLP whose weights depend on ``seed``
    (so no two imports share a blob: every import writes all its blobs)."""
    rng = np.random.default_rng(seed)
    nodes, inits, prev = [], [], "x"
    for i in range(LAYERS):
        nodes += [
            helper.make_node("MatMul", [prev, f"W{i}"], [f"h{i}"]),
            helper.make_node("Add", [f"h{i}", f"B{i}"], [f"a{i}"]),
            helper.make_node("Tanh", [f"a{i}"], [f"t{i}"]),
        ]
        inits.append((f"W{i}", rng.standard_normal((WIDTH, WIDTH), dtype=np.float32) / np.float32(np.sqrt(WIDTH))))
        inits.append((f"B{i}", rng.standard_normal(WIDTH, dtype=np.float32)))
        prev = f"t{i}"
    nodes.append(helper.make_node("ReduceSum", [prev, "axes"], ["y"], keepdims=0))
    inits.append(("axes", np.array([1], dtype=np.int64)))
    model = make_model(nodes, [("x", TensorProto.FLOAT, ["N", WIDTH])], [("y", TensorProto.FLOAT, ["N"])], inits)
    path = folder / f"big{seed}.onnx"
    onnx.save_model(model, str(path))
    data = path.read_bytes()
    assert len(data) > 48 * 2**20
    x = rng.standard_normal((3, WIDTH), dtype=np.float32)
    (y,) = run_onnx(path, {"x": x})
    return str(path), data, x, y


def _spawn(db: str, name: str, path: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, db, name, path],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=os.getcwd(),
    )


def _check_store(db: str, present: set[str]) -> None:
    """The invariants that must hold after any crash (see module docstring)."""
    store = BlobStore(db + ".blobs")
    with modelsql.connect(db) as con:
        names = {r[0] for r in con.execute("SELECT DISTINCT name FROM modelsql.model_versions").fetchall()}
        assert present <= names
        registered = {r[0]: r[1] for r in con.execute("SELECT digest, nbytes FROM modelsql.blobs").fetchall()}
        used = {r[0] for r in con.execute(
            "SELECT graph_digest FROM modelsql.model_versions UNION SELECT digest FROM modelsql.model_tensors"
        ).fetchall()}
        assert used == set(registered), "catalog references and modelsql.blobs disagree"
        for digest, nbytes in registered.items():
            store.verify(digest)  # raises if missing or corrupt
            assert store.size(digest) == nbytes
        # every tensor row of every version points at a registered blob
        for name, version, count in con.execute(
            "SELECT name, version, count(*) FROM modelsql.model_tensors GROUP BY ALL"
        ).fetchall():
            assert count > 0
    return names


def _check_big(db: str, name: str, big_model, tmp_path: Path) -> None:
    path, data, x, y = big_model
    ort_backend.clear_cache()
    with modelsql.connect(db) as con:
        (n_tensors,) = con.execute(
            "SELECT count(*) FROM modelsql.model_tensors WHERE name = ? AND version = "
            "(SELECT max(version) FROM modelsql.model_versions WHERE name = ?)",
            [name, name],
        ).fetchone()
        assert n_tensors == 2 * LAYERS + 1
        con.execute(f"CREATE TEMP TABLE xin AS SELECT unnest(?::FLOAT[{WIDTH}][]) AS x, unnest([0, 1, 2]) AS k", [x.tolist()])
        rows = con.execute(f"SELECT k, y FROM PREDICT(MODEL {name}, TABLE xin) ORDER BY k").fetchall()
        np.testing.assert_allclose(np.array([r[1] for r in rows], dtype=np.float32), y, rtol=1e-4, atol=1e-4)
        out = tmp_path / f"{name}.onnx"
        con.execute(f"EXPORT MODEL {name} TO '{out}'")
        exported = onnx.load(str(out))
        del exported.metadata_props[:]  # the catalog's modelsql.* entries; the rest is the imported bytes
        assert exported.SerializeToString() == data
        out.unlink()


def _vacuum_and_check_exact(db: str) -> None:
    store = BlobStore(db + ".blobs")
    with modelsql.connect(db) as con:
        con.execute("VACUUM MODELS").fetchall()
        referenced = {r[0] for r in con.execute("SELECT digest FROM modelsql.blobs").fetchall()}
    assert set(store.digests()) == referenced
    others = [p for p in Path(store.root).rglob("*") if p.is_file() and len(p.parent.name + p.name) != 64]
    # only interrupted writes (.tmp-*) may remain; once stale they go too
    assert all(p.name.startswith(".tmp-") for p in others), others
    if others:
        old = time.time() - 3600
        for p in others:
            os.utime(p, (old, old))
        with modelsql.connect(db) as con:
            con.execute("VACUUM MODELS").fetchall()
    remaining = sorted(p for p in Path(store.root).rglob("*") if p.is_file())
    assert sorted(store.root / d[:2] / d[2:] for d in referenced) == remaining


@pytest.mark.slow
def test_sigkill_during_import_leaves_no_half_model(tmp_path):
    models = tmp_path / "models"
    models.mkdir()
    db = str(tmp_path / "crash.duckdb")
    with modelsql.connect(db) as con:
        con.import_model("small", linear_model(np.array([[1.0], [2.0]])))
        con.execute("CREATE TABLE t AS SELECT 1.0::DOUBLE AS a, 1.0::DOUBLE AS b")

    # calibrate: one import that is allowed to finish
    calibration = build_big_model(models, 100)
    child = _spawn(db, "calibration", calibration[0])
    assert child.stdout.readline().strip() == "importing"
    t0 = time.monotonic()
    assert child.stdout.readline().strip() == "imported"
    duration = time.monotonic() - t0
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err
    _check_store(db, {"small", "calibration"})
    _check_big(db, "calibration", calibration, tmp_path)

    outcomes = []
    for i, fraction in enumerate([0.0, 0.1, 0.2, 0.3, 0.45, 0.6, 0.8, 1.05]):
        name = f"big{i}"
        big = build_big_model(models, i)
        child = _spawn(db, name, big[0])
        line = child.stdout.readline().strip()
        assert line == "importing", child.stderr.read()
        time.sleep(fraction * duration)
        alive = child.poll() is None
        if alive:
            os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=60)
        child.stdout.close()
        child.stderr.close()
        names = _check_store(db, {"small", "calibration"})
        if name in names:
            _check_big(db, name, big, tmp_path)
            outcomes.append((fraction, alive, "present"))
        else:
            outcomes.append((fraction, alive, "absent"))
        with modelsql.connect(db) as con:
            assert con.execute("SELECT y FROM PREDICT(MODEL small, TABLE t)").fetchall() == [(3.0,)]
        _vacuum_and_check_exact(db)
        os.unlink(big[0])
    # most kills landed while the import was running (not after it had finished); the calibration run is
    # often slower than the later ones (cold caches), so the early fractions carry this check
    assert sum(alive for _, alive, _ in outcomes) >= 4, outcomes
    assert any(state == "absent" for _, _, state in outcomes), outcomes
    print("kill outcomes (fraction of import time, alive when killed, model):", outcomes)

    # after all that, the database takes a new version of a model cleanly
    with modelsql.connect(db) as con:
        con.execute(f"CREATE OR REPLACE MODEL calibration FROM '{calibration[0]}'")
    _check_big(db, "calibration", calibration, tmp_path)
    _vacuum_and_check_exact(db)
