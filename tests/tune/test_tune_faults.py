"""TUNE under faults, with real processes and real training: the study's process killed with SIGKILL
part-way (then resumed by re-running the statement, training no finished stage again and ending with
exactly the metrics of an uninterrupted run), a checkpoint write failing for lack of disk space, a
factory raising for some hyper-parameters, and checkpoints no trial can need being collected.

And a study whose process died (issue 21, item 9): one killed with SIGKILL (a real child process) is shown
``interrupted`` by the next connection, with its owner (pid, host, start) recorded, its running stages
``interrupted``; a study whose owner cannot be checked (another host) and sent no heartbeat for the grace
period is ``failed`` (Optuna's heartbeat); one with a recent heartbeat stays ``running``."""

from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import modelsql
from modelsql.catalog.owners import owner_state, this_process
from modelsql.errors import OperationalError
from modelsql.storage.blobstore import BlobStore

from tune_fixtures import CHILD, LONG_SQL, make_db, trial_metrics

TESTS = Path(__file__).resolve().parents[1]  # tests/: where the child processes find tune_fixtures


def _epochs_in_done_stages(con) -> int:
    return con.execute("SELECT coalesce(sum(end_epoch - first_epoch), 0) FROM modelsql.stages "
                       "WHERE status = 'done'").fetchone()[0]


def test_sigkill_part_way_then_rerun_resumes_exactly(tmp_path):
    reference = make_db(str(tmp_path / "reference.duckdb"))
    reference.execute(LONG_SQL)
    expected = trial_metrics(reference, "mlp_study")
    total = _epochs_in_done_stages(reference)
    reference.close()

    db = str(tmp_path / "killed.duckdb")
    make_db(db).close()
    child = subprocess.Popen([sys.executable, "-c", CHILD.format(tests=str(TESTS), db=db)],
                             stdout=subprocess.PIPE, text=True)
    lines = []
    for line in child.stdout:
        lines.append(line)
        if line.startswith("stage") and len(lines) >= 2:
            os.kill(child.pid, signal.SIGKILL)
            break
    child.wait(timeout=60)
    assert child.returncode == -signal.SIGKILL and not any(x.startswith("finished") for x in lines)

    con = modelsql.connect(db)
    before = _epochs_in_done_stages(con)
    assert 0 < before < total
    # its process is dead: shown interrupted at once (issue 21, item 9), not running as the dead process left it
    assert con.execute("SELECT status FROM modelsql.studies").fetchone() == ("interrupted",)
    con.execute("SHOW STUDIES").fetchall()
    out = con.execute(LONG_SQL).fetchone()  # the same statement again resumes the study
    assert out[1] == "finished"
    assert _epochs_in_done_stages(con) == total  # no finished stage trained twice
    assert trial_metrics(con, "mlp_study") == expected  # bit for bit the uninterrupted run
    assert con.execute("SELECT count(*) FROM modelsql.stages WHERE status = 'running'").fetchone() == (0,)
    con.close()


def test_disk_full_while_writing_a_checkpoint_stops_resumably(tmp_path, monkeypatch):
    reference = make_db(str(tmp_path / "reference.duckdb"))
    reference.execute(LONG_SQL)
    expected, total = trial_metrics(reference, "mlp_study"), _epochs_in_done_stages(reference)
    reference.close()

    con = make_db(str(tmp_path / "full.duckdb"))
    put = BlobStore.put
    calls = {"n": 0}

    def put_then_full(self, data):
        calls["n"] += 1
        if calls["n"] > 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        return put(self, data)

    monkeypatch.setattr(BlobStore, "put", put_then_full)
    with pytest.raises(OperationalError) as ei:
        con.execute(LONG_SQL)
    assert ei.value.code == "disk_full" and "TUNE statement again" in str(ei.value)
    assert con.execute("SELECT status FROM modelsql.studies").fetchone() == ("interrupted",)
    assert con.execute("SELECT count(*) FROM modelsql.stages WHERE status = 'running'").fetchone() == (0,)
    statuses = {s for (s,) in con.execute("SELECT status FROM modelsql.trials").fetchall()}
    assert "stopped" in statuses and "failed" not in statuses  # resumable, not terminated
    done = _epochs_in_done_stages(con)
    assert 0 < done < total
    monkeypatch.setattr(BlobStore, "put", put)  # space is free again
    assert con.execute(LONG_SQL).fetchone()[1] == "finished"
    assert _epochs_in_done_stages(con) == total
    assert trial_metrics(con, "mlp_study") == expected
    con.close()


def test_a_model_raising_in_training_fails_those_trials_only(tmp_path, monkeypatch):
    # the factory builds its model (TUNE checks that before training), but the model's forward raises on a real
    # mini-batch for one of the searched widths: those trials fail with the error, the others complete
    (tmp_path / "picky.py").write_text(
        "import torch\n"
        "from modelsql.zoo import mlp\n\n"
        "class Picky(torch.nn.Module):\n"
        "    def __init__(self, inner, hidden):\n"
        "        super().__init__()\n"
        "        self.inner, self.hidden = inner, hidden\n"
        "    def forward(self, x):\n"
        "        if self.hidden == 13 and x.shape[0] > 2:\n"
        "            raise ValueError('13 hidden units are unlucky')\n"
        "        return self.inner(x)\n\n"
        "def net(hidden=16, **kw):\n"
        "    return Picky(mlp(hidden=hidden, **kw), hidden)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    con = make_db(str(tmp_path / "picky.duckdb"))
    con.execute("CREATE MODEL picky FROM PYTHON 'picky:net'")
    out = con.execute("TUNE MODEL picky ON TABLE train VALIDATE ON TABLE val TARGET label "
                      "SEARCH (lr = 0.1, hidden = CHOICE(8, 13, 16)) USING GRID WITH (max_epochs = 2)").fetchone()
    assert out[1] == "finished"
    rows = con.execute("SELECT config, status, error FROM modelsql.trials ORDER BY trial").fetchall()
    assert [r[1] for r in rows] == ["completed", "failed", "completed"]
    assert "unlucky" in rows[1][2]
    # when every trial fails, the statement fails (with the first failure's class and code) and says so
    with pytest.raises(modelsql.DataError) as ei:
        con.execute("TUNE MODEL picky ON TABLE train VALIDATE ON TABLE val TARGET label "
                    "SEARCH (lr = CHOICE(1e6, 1e7)) USING GRID WITH (max_epochs = 2, study_name = 'doomed')")
    assert ei.value.code == "training_diverged" and "every trial failed" in str(ei.value)
    assert con.execute("SELECT status FROM modelsql.studies WHERE name = 'doomed'").fetchone() == ("failed",)
    con.close()


def test_checkpoints_of_pruned_trials_are_collected(tmp_path):
    con = make_db(str(tmp_path / "asha.duckdb"))
    out = con.execute("""TUNE MODEL mlp ON TABLE train VALIDATE ON TABLE val TARGET label
        SEARCH (lr = CHOICE(0.3, 0.1, 0.03, 0.01), batch_size = 64)
        USING ASHA WITH (max_epochs = 9, trials = 6, max_concurrent_trials = 6, grace_period = 1,
                         reduction_factor = 3, seed = 1)""").fetchone()
    assert out[1] == "finished"
    rows = con.execute("SELECT status, checkpoint FROM modelsql.trials").fetchall()
    assert {s for s, _ in rows} == {"pruned", "completed"}
    assert all((c is None) == (s == "pruned") for s, c in rows)
    store = BlobStore.for_database(str(tmp_path / "asha.duckdb"))
    kept = {c for (c,) in con.execute("SELECT checkpoint FROM modelsql.stages WHERE checkpoint IS NOT NULL").fetchall()}
    assert kept == {c for s, c in rows if c is not None} and all(store.has(c) for c in kept)
    # blobs of collected checkpoints are gone: the store holds the kept ones and nothing else of the study
    assert set(store.digests()) >= kept
    assert len([d for d in store.digests()]) == len(kept)
    con.close()


CHILD_INTERRUPTED = """
import sys, time
sys.path.insert(0, {tests!r})
import modelsql
from tune_fixtures import LONG_SQL
con = modelsql.connect({db!r})
def progress(p):
    print("stage", p["epochs_trained"], flush=True)
    time.sleep(0.4)
con.tune_progress = progress
try:
    con.execute(LONG_SQL)
except modelsql.OperationalError as exc:
    print("stopped", exc.code, flush=True)
"""


def test_ctrl_c_stops_the_study_resumably(tmp_path):
    db = str(tmp_path / "interrupted.duckdb")
    make_db(db).close()
    child = subprocess.Popen([sys.executable, "-c", CHILD_INTERRUPTED.format(tests=str(TESTS), db=db)],
                             stdout=subprocess.PIPE, text=True)
    lines = []
    for line in child.stdout:
        lines.append(line)
        if line.startswith("stage") and len(lines) == 2:
            os.kill(child.pid, signal.SIGINT)
    child.wait(timeout=60)
    assert lines[-1].strip() == "stopped study_stopped", lines
    con = modelsql.connect(db)
    assert con.execute("SELECT status FROM modelsql.studies").fetchone() == ("stopped",)
    assert con.execute("SELECT count(*) FROM modelsql.stages WHERE status = 'running'").fetchone() == (0,)
    assert {s for (s,) in con.execute("SELECT status FROM modelsql.trials").fetchall()} <= {"stopped", "completed"}
    before = _epochs_in_done_stages(con)
    assert con.execute(LONG_SQL).fetchone()[1] == "finished"
    assert _epochs_in_done_stages(con) > before
    con.close()


# ---------------------------------------------------------------- a study whose process died (issue 21, item 9)


def _kill_part_way(db: str) -> int:
    child = subprocess.Popen([sys.executable, "-c", CHILD.format(tests=str(TESTS), db=db)],
                             stdout=subprocess.PIPE, text=True)
    seen = 0
    for line in child.stdout:
        if line.startswith("stage"):
            seen += 1
            if seen == 2:
                os.kill(child.pid, signal.SIGKILL)
                break
    child.wait(timeout=60)
    assert child.returncode == -signal.SIGKILL
    return child.pid


def test_a_killed_study_is_interrupted_with_its_owner_recorded(tmp_path):
    db = str(tmp_path / "killed.duckdb")
    make_db(db).close()
    pid = _kill_part_way(db)

    con = modelsql.connect(db, read_only=True)  # a reader sees the dead owner's row as it was left...
    status, owner, host, start, beat = con.execute(
        "SELECT status, owner_pid, owner_host, owner_start, heartbeat_at FROM modelsql.studies").fetchone()
    running = con.execute("SELECT count(*) FROM modelsql.stages WHERE status = 'running'").fetchone()[0]
    con.close()
    assert (status, owner, host) == ("running", pid, socket.gethostname()) and beat is not None
    assert owner_state(owner, host, start, beat) == "dead"  # ...and can tell it is dead

    con = modelsql.connect(db)  # the first writable connection shows it interrupted, owner kept
    status, owner, error = con.execute("SELECT status, owner_pid, error FROM modelsql.studies").fetchone()
    assert (status, owner) == ("interrupted", pid) and str(pid) in error and "TUNE statement again" in error
    assert con.execute("SELECT count(*) FROM modelsql.stages WHERE status = 'running'").fetchone() == (0,)
    assert con.execute("SELECT count(*) FROM modelsql.stages WHERE status = 'interrupted'").fetchone() == (running,)
    assert con.execute("SELECT count(*) FROM modelsql.trials WHERE status = 'running'").fetchone() == (0,)
    assert con.execute(LONG_SQL).fetchone()[1] == "finished"  # and it resumes
    assert con.execute("SELECT owner_pid, owner_host FROM modelsql.studies").fetchone() == (None, None)
    con.close()


@pytest.mark.slow
def test_a_study_owned_elsewhere_fails_after_the_grace_period(tmp_path):
    db = str(tmp_path / "lost.duckdb")
    make_db(db).close()
    _kill_part_way(db)
    con = modelsql.connect(db, read_only=True)
    con.close()
    import duckdb

    raw = duckdb.connect(db)  # as a process on another host would have left it
    raw.execute("UPDATE modelsql.studies SET owner_host = 'elsewhere', heartbeat_at = now() - INTERVAL 2 HOUR")
    raw.execute("INSERT INTO modelsql.studies SELECT * REPLACE ('fresh' AS name, now() AS heartbeat_at) "
                "FROM modelsql.studies")
    raw.close()
    con = modelsql.connect(db)
    got = dict(con.execute("SELECT name, status FROM modelsql.studies").fetchall())
    assert got == {"mlp_study": "failed", "fresh": "running"}  # a recent heartbeat: alive as far as we know
    error = con.execute("SELECT error FROM modelsql.studies WHERE name = 'mlp_study'").fetchone()[0]
    assert "heartbeat" in error and "elsewhere" in error
    assert con.execute("SELECT count(*) FROM modelsql.stages WHERE study = 'mlp_study' AND status = 'running'"
                       ).fetchone() == (0,)
    con.close()


def test_this_process_is_alive_and_a_reused_pid_is_not():
    me = this_process()
    assert owner_state(me.pid, me.host, me.start, None) == "alive"
    if me.start:  # Linux: the pid with another start identity is another process
        assert owner_state(me.pid, me.host, me.start + "0", None) == "dead"
