"""TUNE on Ray (``executor = 'ray'``): stages as Ray tasks on a real local Ray, checkpoints through its object
store, this process the only writer of the catalog and the blob store.

CI runs one test (Ray's start-up alone takes 5 to 12 s): the GRID study on Ray against the same study on the
local executor, bit for bit. The others carry the marker ``ray_full`` (registered in pyproject.toml) and are
skipped unless it is selected::

    pytest tests/test_tune_ray.py -m ray_full

Every Ray of this module keeps its files in a temporary folder of its own (``RAY_TMPDIR``), removed at the end.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'modelsql[ray]'): the Ray executor is untested")

from tune_fixtures import GRID_SQL, make_db, trial_metrics  # noqa: E402


@pytest.fixture(scope="module")
def ray_tmp():
    """A short temporary root for Ray's session files (its socket paths must stay under 108 bytes)."""
    root = tempfile.mkdtemp(prefix="msray", dir="/tmp" if os.path.isdir("/tmp") else None)
    saved = {k: os.environ.get(k) for k in ("RAY_TMPDIR", "RAY_AUTH_MODE")}
    os.environ["RAY_TMPDIR"] = root
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    yield root
    if ray.is_initialized():
        ray.shutdown()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def local_ray(ray_tmp):
    """No Ray running when the test starts: the executor starts its own local one (kept for the module)."""
    return ray_tmp


@pytest.fixture
def full_selected(request):
    """Skip unless the run selected the extra Ray tests (``-m ray_full``)."""
    if "ray_full" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("the extra Ray tests run only with -m ray_full")


def _tune(con, sql):
    cur = con.cursor()
    cur.execute(sql)
    return dict(zip([d[0] for d in cur.description], cur.fetchone()))


def _check_blobs(con, db: str, study: str) -> None:
    """Each of the study's trial checkpoints is a file of the blob store ``<db>.blobs/``."""
    rows = con.execute("SELECT checkpoint FROM modelsql.trials WHERE study = ?", [study]).fetchall()
    assert rows and all(digest for (digest,) in rows)
    blobs = Path(db + ".blobs")
    files = {p.name for p in blobs.rglob("*") if p.is_file()}
    for (digest,) in rows:
        assert any(digest in name for name in files), f"checkpoint {digest} is not in {blobs}"


def test_grid_on_ray_matches_local_executor_bit_for_bit(local_ray, tmp_path):
    db = str(tmp_path / "tune.duckdb")
    con = make_db(db)
    try:
        on_ray = _tune(con, GRID_SQL.format(extra=", executor = 'ray', workers = 2, study_name = 'on_ray'"))
        local = _tune(con, GRID_SQL.format(extra=", workers = 2, study_name = 'local', execution = 'trials'"))
        assert on_ray["status"] == local["status"] == "finished"
        assert on_ray["trials"] == local["trials"] == 4
        a, b = trial_metrics(con, "on_ray"), trial_metrics(con, "local")
        assert a == b and all(status == "completed" and len(ms) == 4 for status, ms in a.values())
        assert on_ray["best_trial"] == local["best_trial"] and on_ray["best_metric"] == local["best_metric"]
        workers = con.execute("SELECT DISTINCT worker FROM modelsql.stages WHERE study = 'on_ray'").fetchall()
        assert workers and all(w.startswith("ray:") for (w,) in workers), workers
        local_workers = con.execute("SELECT DISTINCT worker FROM modelsql.stages WHERE study = 'local'").fetchall()
        assert local_workers and all(w.startswith("local:") for (w,) in local_workers), local_workers
        _check_blobs(con, db, "on_ray")
    finally:
        con.close()
