"""TUNE on Ray (``executor = 'ray'``): stages as Ray tasks on a real local Ray, checkpoints through its object
store, this process the only writer of the catalog and the blob store.

CI runs one test on Ray (Ray's start-up alone takes 5 to 12 s): the GRID study on Ray against the same study
on the local executor, bit for bit. The others on Ray carry the marker ``ray_full`` (registered in
pyproject.toml) and are skipped unless it is selected::

    pytest tests/tune/test_tune_ray.py -m ray_full

Every Ray this module starts keeps its files under a temporary folder of its own (``RAY_TMPDIR``), removed
at the end, and is shut down there.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from modelsql.errors import NotSupportedError

from tune_fixtures import GRID_SQL, make_db, trial_metrics


@pytest.fixture(scope="module")
def ray_root():
    """Ray itself (skipped when it is not installed) and a short temporary root for its session files (its
    socket paths must stay under 108 bytes); Ray is shut down and the folder removed after the module."""
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'modelsql[ray]')")
    root = tempfile.mkdtemp(prefix="msray", dir="/tmp" if os.path.isdir("/tmp") else None)
    saved = dict(os.environ)  # ray.init also sets PYTHONBREAKPOINT, RAY_USAGE_STATS_ENABLED, ... for good
    os.environ["RAY_TMPDIR"] = root
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    yield ray, root
    if ray.is_initialized():
        ray.shutdown()
    os.environ.clear()
    os.environ.update(saved)
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def full_selected(request):
    """Skip unless the run selected the extra Ray tests (``-m ray_full``)."""
    if "ray_full" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("the extra Ray tests run only with -m ray_full")


def _tune(con, sql):
    cur = con.cursor()
    cur.execute(sql)
    return dict(zip([d[0] for d in cur.description], cur.fetchone()))


def _workers(con, study: str) -> set[str]:
    return {w for (w,) in con.execute("SELECT DISTINCT worker FROM modelsql.stages WHERE study = ?", [study]).fetchall()}


def _check_blobs(con, db: str, study: str) -> None:
    """Each of the study's trial checkpoints is a blob of the store ``<db>.blobs/`` (``<2 hex>/<62 hex>``), its
    bytes hashing to its name."""
    rows = con.execute("SELECT checkpoint FROM modelsql.trials WHERE study = ?", [study]).fetchall()
    assert rows and all(digest for (digest,) in rows)
    for (digest,) in rows:
        blob = Path(db + ".blobs") / digest[:2] / digest[2:]
        assert blob.is_file(), f"checkpoint {digest} is not in {db}.blobs/"
        assert hashlib.sha256(blob.read_bytes()).hexdigest() == digest


def _local_reference(tmp_path, extra: str) -> tuple[dict, dict, set]:
    """The study ``local`` on the local executor, in a database of its own (in the Ray study's database it
    would reuse that study's stages instead of training them: the executor is not part of the tree)."""
    con = make_db(str(tmp_path / "local.duckdb"))
    try:
        out = _tune(con, GRID_SQL.format(extra=f", workers = 2, study_name = 'local'{extra}"))
        return out, trial_metrics(con, "local"), _workers(con, "local")
    finally:
        con.close()


# ---------------------------------------------------------------- CI


def test_grid_on_ray_matches_the_local_executor_bit_for_bit(ray_root, tmp_path):
    db = str(tmp_path / "tune.duckdb")
    con = make_db(db)
    try:
        start = time.perf_counter()
        on_ray = _tune(con, GRID_SQL.format(extra=", executor = 'ray', workers = 2, study_name = 'on_ray'"))
        print(f"\nstudy on Ray (Ray's start included): {time.perf_counter() - start:.1f} s")
        metrics, workers = trial_metrics(con, "on_ray"), _workers(con, "on_ray")
        _check_blobs(con, db, "on_ray")
        # a trial's checkpoint came back from Ray as bytes: its model predicts in this process
        cur = con.cursor()
        cur.execute(f"CREATE MODEL best FROM STUDY on_ray TRIAL {on_ray['best_trial']}")
        assert cur.execute("SELECT count(*) FROM PREDICT(MODEL best, TABLE val)").fetchone() == (120,)
    finally:
        con.close()
    local, local_metrics, local_workers = _local_reference(tmp_path, "")
    assert on_ray["status"] == local["status"] == "finished"
    assert on_ray["trials"] == local["trials"] == 4
    assert on_ray["epochs_trained"] == local["epochs_trained"] == 2 * (2 + 2 * 2)  # the stage tree shared prefixes
    assert metrics == local_metrics and all(s == "completed" and len(ms) == 4 for s, ms in metrics.values())
    assert on_ray["best_trial"] == local["best_trial"] and on_ray["best_metric"] == local["best_metric"]
    assert workers and all(w.startswith("ray:") for w in workers), workers
    assert local_workers and all(w.startswith("local:") for w in local_workers), local_workers


def test_without_ray_installed_the_error_says_how_to_get_it(monkeypatch):
    from modelsql.tuning.ray_executor import ray_executor

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    with pytest.raises(NotSupportedError) as info:
        ray_executor(2, None)
    assert info.value.code == "ray_not_installed" and "pip install 'modelsql[ray]'" in str(info.value)


# ---------------------------------------------------------------- ray_full


@pytest.mark.ray_full
def test_failing_trials_on_ray_are_marked_and_the_study_goes_on(full_selected, ray_root, tmp_path):
    # lr = 1e6 diverges (a NaN loss): its trial fails with the error the Ray task returned, the other completes
    con = make_db(str(tmp_path / "tune.duckdb"))
    try:
        out = _tune(con, """TUNE MODEL mlp ON TABLE train VALIDATE ON TABLE val TARGET label
            SEARCH (lr = CHOICE(0.1, 1000000.0), batch_size = 64) USING GRID
            WITH (max_epochs = 2, executor = 'ray', workers = 2)""")
        assert out["status"] == "finished"
        rows = con.execute("SELECT trial, status, error FROM modelsql.trials ORDER BY trial").fetchall()
        assert rows[0][1] == "completed" and rows[1][1] == "failed"
        assert "training_diverged" in rows[1][2] and "epoch" in rows[1][2]
        failed = con.execute("SELECT worker FROM modelsql.stages WHERE status = 'failed'").fetchall()
        assert len(failed) == 1 and failed[0][0].startswith("ray:")
        assert con.execute("SELECT count(*) FROM modelsql.stages WHERE status = 'running'").fetchone() == (0,)
    finally:
        con.close()


@pytest.mark.ray_full
def test_two_threads_per_stage_on_ray_match_the_local_executor(full_selected, ray_root, tmp_path):
    # 2 threads give other floats than 1: the Ray task must train with the study's threads, as a local worker does
    con = make_db(str(tmp_path / "tune.duckdb"))
    try:
        on_ray = _tune(con, GRID_SQL.format(extra=", executor = 'ray', workers = 2, threads = 2, "
                                                  "study_name = 'on_ray'"))
        metrics = trial_metrics(con, "on_ray")
    finally:
        con.close()
    local, local_metrics, _ = _local_reference(tmp_path, ", threads = 2")
    assert on_ray["status"] == local["status"] == "finished"
    assert on_ray["epochs_trained"] == local["epochs_trained"]
    assert metrics == local_metrics


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ray_cluster(ray_root):
    """A Ray cluster of its own (``ray start --head --block``), its address; stopped afterwards by its process
    group. The module's local Ray is shut down first: a process holds one Ray connection, and the executor
    uses the one it finds."""
    ray, root = ray_root
    if ray.is_initialized():
        ray.shutdown()
    port = _free_port()
    temp = os.path.join(root, "cluster")
    cli = os.path.join(os.path.dirname(sys.executable), "ray")
    proc = subprocess.Popen([cli, "start", "--head", f"--port={port}", "--num-cpus=2", "--include-dashboard=false",
                             "--disable-usage-stats", f"--temp-dir={temp}", "--block"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if "Ray runtime started" in line:
                break
            if time.monotonic() > deadline:
                break
        else:
            pytest.fail("ray start --head exited:\n" + "".join(lines))
        yield f"127.0.0.1:{port}"
    finally:
        if ray.is_initialized():
            ray.shutdown()
        proc.terminate()  # `ray start --block` stops its Ray processes on SIGTERM (about 2 s)
        try:
            proc.wait(timeout=30)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # whatever of its process group is left
            proc.wait()


@pytest.mark.ray_full
def test_a_study_on_a_ray_cluster_at_an_address(full_selected, ray_cluster, tmp_path):
    db = str(tmp_path / "tune.duckdb")
    con = make_db(db)
    try:
        on_ray = _tune(con, GRID_SQL.format(extra=f", executor = 'ray', address = '{ray_cluster}', workers = 2, "
                                                  "study_name = 'on_ray'"))
        metrics, workers = trial_metrics(con, "on_ray"), _workers(con, "on_ray")
        _check_blobs(con, db, "on_ray")
    finally:
        con.close()
    local, local_metrics, _ = _local_reference(tmp_path, "")
    assert on_ray["status"] == "finished" and on_ray["epochs_trained"] == local["epochs_trained"]
    assert metrics == local_metrics
    assert workers and all(w.startswith("ray:") for w in workers), workers
