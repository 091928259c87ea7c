"""Issue 21, item 9: a study whose process was killed (SIGKILL, a real child process) is shown
``interrupted`` by the next connection, with its owner (pid, host, start) recorded, its running stages
``interrupted``; a study whose owner cannot be checked (another host) and sent no heartbeat for the grace
period is ``failed`` (Optuna's heartbeat); one with a recent heartbeat stays ``running``."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import modelsql
from modelsql.catalog.owners import owner_state, this_process

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))
from test_tune_faults import CHILD, LONG_SQL  # noqa: E402
from tune_fixtures import make_db  # noqa: E402


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
