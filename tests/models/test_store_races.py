"""The store and the catalog under concurrent connections (issue 21, items 1-5 and 8): races of VACUUM,
creators of one name, version numbers, import_pipeline and DROP, with real threads, real processes killed
with SIGKILL and real database files.

1. VACUUM never deletes a blob a writer of another connection may still commit.
2. The blob store is resolved once, at connect: ``os.chdir`` afterwards changes nothing.
3. Two connections creating one name at once: one wins, the other gets ``duplicate_model`` /
   ``duplicate_pipeline`` (IF NOT EXISTS: a no-op, as if it ran second); never a silent version 2.
4. Version numbers are never given twice.
5. ``import_pipeline`` is atomic: a failed one leaves no step versions, a killed one nothing half made.
8. A PREDICT racing a DROP of its model gets its answers or a clean ``model_not_found`` naming it.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import modelsql
from modelsql.storage import BlobStore

from conftest import linear_model, save
from store_fixtures import check_catalog, fitted_input, fitted_pipelines

TESTS = Path(__file__).resolve().parents[1]  # tests/: where the child process finds store_fixtures


def _model(factor: float):
    return linear_model(np.full((2, 1), factor, dtype=np.float32))


def _run_threads(*targets, seconds: float = 60.0) -> list:
    """Run each target in a thread; the exceptions they raised (none: [])."""
    errors: list = []

    def wrap(f):
        def run():
            try:
                f()
            except BaseException as exc:  # reported to the test
                errors.append(exc)
        return run

    threads = [threading.Thread(target=wrap(t)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=seconds)
    assert not any(t.is_alive() for t in threads)
    return errors


# ---------------------------------------------------------------- 1. VACUUM and writers


def test_vacuum_keeps_a_blob_another_connection_has_put_but_not_committed(tmp_path):
    db = str(tmp_path / "v.duckdb")
    con = modelsql.connect(db)
    writer_store = BlobStore.for_database(db)  # the store a writer of another connection holds
    put, go_on = threading.Event(), threading.Event()
    digests = []

    def writer():
        with writer_store.writing():
            digests.append(writer_store.put(b"weights a writer has not committed yet"))
            put.set()
            go_on.wait(30)

    t = threading.Thread(target=writer)
    t.start()
    assert put.wait(30)
    assert con.execute("VACUUM MODELS").fetchone() == (0, 0)
    assert writer_store.has(digests[0])
    go_on.set()
    t.join()
    # the writer never committed: its blob is garbage now
    assert con.execute("VACUUM MODELS").fetchone()[0] == 1
    assert not writer_store.has(digests[0])
    con.close()


def test_vacuum_keeps_a_blob_another_thread_put_outside_a_lease(tmp_path):
    db = str(tmp_path / "v.duckdb")
    con = modelsql.connect(db)
    digests = []
    t = threading.Thread(target=lambda: digests.append(BlobStore.for_database(db).put(b"a checkpoint")))
    t.start()
    t.join()
    assert con.execute("VACUUM MODELS").fetchone() == (0, 0)  # kept for the grace period
    assert BlobStore.for_database(db).has(digests[0])
    con.close()


def test_imports_racing_vacuum_leave_every_model_readable(tmp_path):
    db = str(tmp_path / "race.duckdb")
    modelsql.connect(db).close()
    deadline = time.monotonic() + 3.0

    def importer():
        con = modelsql.connect(db)
        k = 0
        while time.monotonic() < deadline:
            k += 1
            con.import_model("m", _model(float(k)), replace=True)
            if k % 3 == 0:
                con.execute(f"DROP MODEL IF EXISTS m VERSION {k - 2}")
        con.close()

    def vacuumer():
        con = modelsql.connect(db)
        while time.monotonic() < deadline:
            con.execute("VACUUM MODELS").fetchall()
        con.close()

    assert _run_threads(importer, vacuumer) == []
    check_catalog(db)
    con = modelsql.connect(db)
    con.execute("CREATE TABLE t AS SELECT [1.0, 1.0]::FLOAT[] AS x")
    for (v,) in con.execute("SELECT version FROM modelsql.model_versions").fetchall():
        assert con.execute(f"SELECT y FROM PREDICT(MODEL m VERSION {v}, TABLE t)").fetchone()[0] > 0
    con.close()


# ---------------------------------------------------------------- 2. the store is resolved at connect


def test_store_is_resolved_once_at_connect(tmp_path, monkeypatch):
    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    here.mkdir()
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    other = modelsql.connect("models.duckdb")  # another database of the same name, in the other folder
    other.import_model("theirs", _model(2.0))
    other.close()
    theirs = set(BlobStore(elsewhere / "models.duckdb.blobs").digests())
    assert theirs

    monkeypatch.chdir(here)
    con = modelsql.connect("models.duckdb")
    con.import_model("mine", _model(3.0))
    con.execute("CREATE TABLE t AS SELECT [1.0, 1.0]::FLOAT[] AS x")
    con.commit()
    os.chdir(elsewhere)  # a notebook's %cd
    con.execute("DROP MODEL mine")
    con.import_model("mine", _model(5.0))  # written beside its own database
    assert con.execute("VACUUM MODELS").fetchone()[0] > 0  # the first "mine"'s blobs
    assert con.execute("SELECT y FROM PREDICT(MODEL mine, TABLE t)").fetchone() == (10.0,)
    con.close()
    assert set(BlobStore(elsewhere / "models.duckdb.blobs").digests()) == theirs  # untouched
    assert (here / "models.duckdb.blobs").is_dir()


# ---------------------------------------------------------------- 3. one name, two creators


def _race(db: str, work, n: int = 2) -> list:
    """Run ``work(con)`` on ``n`` connections started together; each one's result or error."""
    cons = [modelsql.connect(db) for _ in range(n)]
    barrier = threading.Barrier(n)
    out: list = [None] * n

    def one(i):
        def run():
            barrier.wait(30)
            try:
                out[i] = work(cons[i], i)
            except modelsql.Error as exc:
                out[i] = exc
        return run

    assert _run_threads(*[one(i) for i in range(n)]) == []
    for c in cons:
        c.close()
    return out


def test_two_imports_of_one_name_at_once_one_wins(tmp_path):
    db = str(tmp_path / "dup.duckdb")
    paths = [save(_model(float(i + 1)), tmp_path / f"m{i}.onnx") for i in range(2)]
    modelsql.connect(db).close()
    for round_ in range(6):
        name = f"churn{round_}"
        out = _race(db, lambda con, i: con.execute(f"IMPORT MODEL {name} FROM '{paths[i]}'").rowcount)
        losers = [r for r in out if isinstance(r, Exception)]
        assert len(losers) == 1, out
        assert isinstance(losers[0], modelsql.IntegrityError) and losers[0].code == "duplicate_model"
        assert name in str(losers[0])
        con = modelsql.connect(db)
        assert con.execute("SELECT version FROM modelsql.model_versions WHERE name = ?", [name]).fetchall() == [(1,)]
        con.close()


def test_two_imports_if_not_exists_add_one_version(tmp_path):
    db = str(tmp_path / "dup.duckdb")
    paths = [save(_model(float(i + 1)), tmp_path / f"m{i}.onnx") for i in range(2)]
    modelsql.connect(db).close()
    for round_ in range(4):
        name = f"churn{round_}"
        out = _race(db, lambda con, i: con.execute(f"IMPORT MODEL IF NOT EXISTS {name} FROM '{paths[i]}'").rowcount)
        assert not any(isinstance(r, Exception) for r in out), out
        con = modelsql.connect(db)
        assert con.execute("SELECT version FROM modelsql.model_versions WHERE name = ?", [name]).fetchall() == [(1,)]
        con.close()


def test_two_create_pipelines_of_one_name_at_once(tmp_path):
    db = str(tmp_path / "dup.duckdb")
    con = modelsql.connect(db)
    con.import_model("s1", _model(1.0))
    con.import_model("s2", linear_model(np.full((1, 1), 2.0, dtype=np.float32)))
    con.close()
    for round_ in range(5):
        exists = round_ % 2 == 1
        sql = f"CREATE PIPELINE {'IF NOT EXISTS ' if exists else ''}p{round_} AS (s1, s2)"
        out = _race(db, lambda c, i: c.execute(sql).rowcount)
        errors = [r for r in out if isinstance(r, Exception)]
        if exists:
            assert errors == [], out
        else:
            assert len(errors) == 1 and isinstance(errors[0], modelsql.IntegrityError), out
            assert errors[0].code == "duplicate_pipeline"
        con = modelsql.connect(db)
        assert con.execute("SELECT version FROM modelsql.pipeline_versions WHERE name = ?",
                           [f"p{round_}"]).fetchall() == [(1,)]
        con.close()


# ---------------------------------------------------------------- 4. version numbers


def test_a_dropped_version_number_is_never_given_again(tmp_path):
    con = modelsql.connect(str(tmp_path / "v.duckdb"))
    con.execute("CREATE TABLE t AS SELECT [1.0, 1.0]::FLOAT[] AS x")
    con.import_model("m", _model(1.0))
    con.import_model("m", _model(2.0), replace=True)
    con.import_model("m", _model(3.0), replace=True)
    con.execute("DROP MODEL m VERSION 3")
    con.execute("DROP MODEL m VERSION 2")
    assert con.import_model("m", _model(4.0), replace=True).version == 4
    with pytest.raises(modelsql.ProgrammingError) as ei:  # a pinned VERSION 3 never means another model
        con.execute("SELECT y FROM PREDICT(MODEL m VERSION 3, TABLE t)")
    assert ei.value.code == "version_not_found"
    con.execute("CREATE PIPELINE p AS (m)")
    con.execute("CREATE OR REPLACE PIPELINE p AS (m VERSION 1)")
    con.execute("DROP PIPELINE p VERSION 2")
    con.execute("CREATE OR REPLACE PIPELINE p AS (m)")
    assert con.execute("SELECT max(version) FROM modelsql.pipeline_versions WHERE name = 'p'").fetchone() == (3,)
    con.close()


# ---------------------------------------------------------------- 5. import_pipeline is atomic


def test_failed_import_pipeline_adds_no_step_versions(tmp_path):
    con = modelsql.connect(str(tmp_path / "p.duckdb"))
    first, second = fitted_pipelines()[:2]
    con.import_pipeline("p", first, example_input=fitted_input())
    before = con.execute("SELECT name, version FROM modelsql.model_versions ORDER BY ALL").fetchall()
    with pytest.raises(modelsql.IntegrityError) as ei:
        con.import_pipeline("p", second, example_input=fitted_input())
    assert ei.value.code == "duplicate_pipeline" and '"p"' in str(ei.value)
    assert con.execute("SELECT name, version FROM modelsql.model_versions ORDER BY ALL").fetchall() == before
    con.close()


KILLED_CHILD = """
import sys
sys.path.insert(0, {tests!r})
import numpy as np
import modelsql
from sklearn.linear_model import LinearRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from store_fixtures import fitted_input
con = modelsql.connect({db!r})
x = fitted_input()
print("ready", flush=True)
k = 0
while True:
    k += 1
    pipe = make_pipeline(StandardScaler(), LinearRegression()).fit(x + k, x @ np.array([k, 1.0], dtype=np.float32))
    con.import_pipeline("p", pipe, example_input=x, replace=True)
"""


def test_sigkill_during_import_pipeline_leaves_nothing_half_made(tmp_path):
    rnd = random.Random(21)
    for trial in range(3):
        db = str(tmp_path / f"killed{trial}.duckdb")
        child = subprocess.Popen([sys.executable, "-c", KILLED_CHILD.format(tests=str(TESTS), db=db)],
                                 stdout=subprocess.PIPE, text=True)
        assert child.stdout.readline().strip() == "ready"
        time.sleep(rnd.uniform(0.3, 2.0))
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=60)
        check_catalog(db)
        con = modelsql.connect(db)
        orphans = con.execute(  # every step model is a step of some version of the pipeline
            "SELECT name, version FROM modelsql.model_versions v WHERE name LIKE 'p\\_\\_%' ESCAPE '\\' AND NOT "
            "EXISTS (SELECT 1 FROM modelsql.pipeline_steps s WHERE s.model = v.name AND s.model_version = v.version)"
        ).fetchall()
        assert orphans == []
        for (v,) in con.execute("SELECT version FROM modelsql.pipeline_versions").fetchall():
            con.execute(f"DESCRIBE PIPELINE p VERSION {v}").fetchall()  # every step is there
        con.close()


# ---------------------------------------------------------------- 8. reads race DROP


def test_predict_racing_drop_gets_answers_or_a_clean_error(tmp_path):
    db = str(tmp_path / "r.duckdb")
    con = modelsql.connect(db)
    con.execute("CREATE TABLE t AS SELECT [1.0, 1.0]::FLOAT[] AS x")
    con.commit()
    con.close()
    path = save(_model(1.0), tmp_path / "m.onnx")
    deadline = time.monotonic() + 4.0
    seen: dict = {"answers": 0, "not_found": 0, "bad": []}

    def dropper():
        c = modelsql.connect(db)
        c.autocommit = True
        while time.monotonic() < deadline:
            c.execute(f"CREATE OR REPLACE MODEL m FROM '{path}'")
            c.execute("DROP MODEL m")
        c.close()

    def predictor():
        c = modelsql.connect(db)
        c.autocommit = True
        while time.monotonic() < deadline:
            try:
                assert c.execute("SELECT y FROM PREDICT(MODEL m, TABLE t)").fetchall() == [(2.0,)]
                seen["answers"] += 1
            except modelsql.ProgrammingError as exc:
                if exc.code != "model_not_found" or '"m"' not in str(exc) or "Did you mean" in str(exc):
                    seen["bad"].append(repr(exc))
                seen["not_found"] += 1
            except Exception as exc:  # IndexError, a raw DuckDB error: the bug
                seen["bad"].append(repr(exc))
        c.close()

    assert _run_threads(dropper, predictor, predictor, predictor) == []
    assert seen["bad"] == [], seen["bad"][:5]
    assert seen["answers"] + seen["not_found"] > 0
