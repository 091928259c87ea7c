"""Stages trained in the study's own process (``workers = 1`` on the CPU, the default; issue 25, TUNE's fixed
costs): bit for bit what worker processes train, the caller's torch and NumPy state given back, an edited factory
never run from a stale import, and two studies at once in two threads each still exact."""

from __future__ import annotations

import importlib
import os
import random
import sys
import threading
import time
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import modelsql  # noqa: E402

from tune_fixtures import GRID_SQL, make_db, trial_metrics  # noqa: E402

HERE = f"local:{os.getpid()}"


def _workers(con, study: str) -> set[str]:
    return {w for (w,) in con.execute("SELECT DISTINCT worker FROM modelsql.stages WHERE study = ?",
                                      [study]).fetchall()}


def test_one_worker_trains_here_bit_for_bit_as_worker_processes(tmp_path):
    here, there = make_db(str(tmp_path / "a.duckdb")), make_db(str(tmp_path / "b.duckdb"))
    here.execute(GRID_SQL.format(extra=", workers = 1"))
    there.execute(GRID_SQL.format(extra=", workers = 1, executor = 'processes'"))
    assert _workers(here, "mlp_study") == {HERE}
    assert HERE not in _workers(there, "mlp_study") and _workers(there, "mlp_study")
    ours = trial_metrics(here, "mlp_study")
    assert ours == trial_metrics(there, "mlp_study") and all(s == "completed" for s, _ in ours.values())
    for con in (here, there):
        con.close()


def test_the_callers_rng_states_and_thread_count_are_given_back(tmp_path):
    con = make_db(str(tmp_path / "t.duckdb"))
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        random.seed(7)
        np.random.seed(7)
        torch.manual_seed(7)
        expected = (random.random(), np.random.random(), torch.rand(1).item())
        random.seed(7)
        np.random.seed(7)
        torch.manual_seed(7)
        con.execute(GRID_SQL.format(extra=", threads = 1"))
        assert _workers(con, "mlp_study") == {HERE}
        assert (random.random(), np.random.random(), torch.rand(1).item()) == expected
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)  # (the tests that run after this one in its process get theirs)
    con.close()


FACTORY = '''import torch


def net(in_features, n_outputs):
    torch.manual_seed(0)
    return torch.nn.Linear(in_features, n_outputs, bias={bias})
'''


def test_an_edited_factory_trains_in_a_worker_from_the_file_as_it_is_now(tmp_path, monkeypatch):
    """The process imported the factory's module, then its file changed: the stages train in a fresh worker
    interpreter (which imports the edited file), not from the stale import."""
    module = tmp_path / "inproc_factory_mod.py"
    module.write_text(FACTORY.format(bias=True))
    monkeypatch.syspath_prepend(str(tmp_path))
    con = make_db(str(tmp_path / "t.duckdb"))
    con.execute("CREATE MODEL lin FROM PYTHON 'inproc_factory_mod:net'")
    sql = GRID_SQL.replace("mlp", "lin").format(extra=", study_name = '{name}'")
    con.execute(sql.format(name="before"))
    assert _workers(con, "before") == {HERE}
    time.sleep(0.01)
    module.write_text(FACTORY.format(bias=False))  # a model without bias: other metrics
    con.execute(sql.format(name="after"))
    assert HERE not in _workers(con, "after")
    stale = sys.modules["inproc_factory_mod"].net(3, 2)
    assert stale.bias is not None  # this process still holds the old code, which the study did not run
    fresh = make_db(str(tmp_path / "f.duckdb"))  # the edited factory trained from a clean import, for comparison
    importlib.reload(sys.modules["inproc_factory_mod"])
    fresh.execute("CREATE MODEL lin FROM PYTHON 'inproc_factory_mod:net'")
    fresh.execute(sql.format(name="after"))
    assert trial_metrics(con, "after") == trial_metrics(fresh, "after") != trial_metrics(con, "before")
    for c in (con, fresh):
        c.close()


@pytest.mark.slow
def test_two_studies_in_two_threads_at_once_each_match_a_study_alone(tmp_path):
    """torch's RNGs are per process: while one study trains here, the other's stages go to a worker process;
    both equal the same study run alone."""
    path = str(tmp_path / "t.duckdb")
    make_db(path).close()
    results: dict[str, object] = {}

    def run(name: str) -> None:
        try:
            with modelsql.connect(path) as con:
                con.execute(GRID_SQL.format(extra=f", study_name = '{name}', execution = 'trials'"))
        except Exception as exc:  # noqa: BLE001 - reported below
            results[name] = exc

    threads = [threading.Thread(target=run, args=(n,)) for n in ("one", "two")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert not results, results
    alone = make_db(str(tmp_path / "alone.duckdb"))
    alone.execute(GRID_SQL.format(extra=", study_name = 'alone', execution = 'trials'"))
    with modelsql.connect(path) as con:
        one, two = trial_metrics(con, "one"), trial_metrics(con, "two")
        workers = _workers(con, "one") | _workers(con, "two")
    assert one == two == trial_metrics(alone, "alone")
    assert HERE in workers and any(w != HERE for w in workers)  # both ways ran
    alone.close()


def test_the_callers_torch_settings_neither_change_the_training_nor_are_changed(tmp_path):
    """Under the caller's no_grad, inference_mode, float64 default dtype or bfloat16 autocast a stage trains as a
    fresh worker does, and the caller keeps its settings."""
    base = make_db(str(tmp_path / "base.duckdb"))
    base.execute(GRID_SQL.format(extra=""))
    expected = trial_metrics(base, "mlp_study")
    base.close()
    for i, setting in enumerate(("no_grad", "inference_mode", "float64", "autocast")):
        con = make_db(str(tmp_path / f"s{i}.duckdb"))
        if setting == "autocast":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                con.execute(GRID_SQL.format(extra=""))
                assert torch.is_autocast_enabled("cpu")
        elif setting == "float64":
            torch.set_default_dtype(torch.float64)
            try:
                con.execute(GRID_SQL.format(extra=""))
                assert torch.get_default_dtype() == torch.float64
            finally:
                torch.set_default_dtype(torch.float32)
        else:
            with getattr(torch, setting)():
                con.execute(GRID_SQL.format(extra=""))
                assert not torch.is_grad_enabled()
        assert trial_metrics(con, "mlp_study") == expected, setting
        con.close()


HOSTILE = '''import os
import sys
import warnings

import torch


class Hostile(torch.nn.Module):
    """Changes the process's settings on every forward; raises KeyboardInterrupt itself when ``boom`` (training)."""

    def __init__(self, in_features, n_outputs, boom):
        super().__init__()
        self.linear = torch.nn.Linear(in_features, n_outputs)
        self.boom = boom

    def forward(self, x):
        if self.boom and self.training:  # not in TUNE's check of the factory's output shape (eval mode)
            raise KeyboardInterrupt("raised by the model, not Ctrl-C")
        os.chdir("/")
        sys.path.append("/nowhere")
        torch.set_anomaly_enabled(True)
        torch.set_float32_matmul_precision("medium")
        os.environ["INPROC_HOSTILE"] = "1"
        warnings.simplefilter("error")
        return self.linear(x)


def net(in_features, n_outputs, boom=0):
    return Hostile(in_features, n_outputs, boom)
'''


def test_a_factory_changing_the_process_or_raising_keyboardinterrupt_stays_in_its_trial(tmp_path, monkeypatch):
    (tmp_path / "inproc_hostile_mod.py").write_text(HOSTILE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    con = make_db(str(tmp_path / "t.duckdb"))
    con.execute("CREATE MODEL hostile FROM PYTHON 'inproc_hostile_mod:net'")
    path = list(sys.path)
    row = con.execute("TUNE MODEL hostile ON TABLE train VALIDATE ON TABLE val TARGET label SEARCH (boom = CHOICE(0, 1), "
                      "lr = 0.1, batch_size = 64) USING GRID WITH (max_epochs = 2, seed = 0)").fetchone()
    assert row[1] == "finished"  # the interrupt the model raised failed its trial; the study went on
    statuses = dict(con.execute("SELECT trial, status FROM modelsql.trials").fetchall())
    assert sorted(statuses.values()) == ["completed", "failed"]
    error = con.execute("SELECT error FROM modelsql.trials WHERE status = 'failed'").fetchone()[0]
    assert "KeyboardInterrupt" in error
    assert os.getcwd() == str(tmp_path) and sys.path == path and not torch.is_anomaly_enabled()
    assert torch.get_float32_matmul_precision() == "highest" and "INPROC_HOSTILE" not in os.environ
    with warnings.catch_warnings(record=True):
        warnings.warn("the caller's filters are its own")  # an error had the model's filter leaked
    assert _workers(con, "hostile_study") == {HERE}
    con.close()


CHILD = """
import sys, time
sys.path[:0] = [{tests!r}, {here!r}]
import modelsql
from tune_fixtures import make_db
con = make_db({db!r})
con.execute("CREATE MODEL busy FROM PYTHON 'inproc_busy_mod:busy'")


def announce():  # "ready" once the study runs (a busy machine can take longer than the test waits to bind it)
    watcher = modelsql.connect({db!r})
    watcher.autocommit = True  # each read a snapshot of its own
    while not watcher.execute("SELECT count(*) FROM modelsql.studies WHERE status = 'running'").fetchall()[0][0]:
        time.sleep(0.02)
    watcher.close()
    print("ready", flush=True)


import threading
threading.Thread(target=announce, daemon=True).start()
try:
    con.execute("TUNE MODEL busy ON TABLE train VALIDATE ON TABLE val TARGET label SEARCH (lr = CHOICE(0.1), "
                "batch_size = 64) USING GRID WITH (max_epochs = 200, seed = 0)")
except modelsql.OperationalError as err:
    print("stopped", err.code, flush=True)
print(con.execute("SELECT status FROM modelsql.studies").fetchone()[0], flush=True)
"""

BUSY = '''import time

import torch


class Busy(torch.nn.Module):
    def __init__(self, in_features, n_outputs):
        super().__init__()
        self.linear = torch.nn.Linear(in_features, n_outputs)

    def forward(self, x):
        time.sleep(0.01)
        return self.linear(x)


def busy(in_features, n_outputs):
    return Busy(in_features, n_outputs)
'''


@pytest.mark.parametrize("delay", [0.0, pytest.param(1.5, marks=pytest.mark.slow)])
def test_ctrl_c_in_a_script_stops_the_study_and_the_script_exits_normally(tmp_path, delay):
    """SIGINT while the script's own process trains (at once, possibly while torch's compiler front end is being
    imported, or later): the statement raises study_stopped, the study is stopped, and the script ends with
    status 0, not killed by SIGINT."""
    import signal
    import subprocess

    (tmp_path / "inproc_busy_mod.py").write_text(BUSY)
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = CHILD.format(tests=tests, here=str(tmp_path), db=str(tmp_path / "t.duckdb"))
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    time.sleep(0.3 + delay)
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0, (child.returncode, out, err[-2000:])
    assert out.split() == ["stopped", "study_stopped", "stopped"], (out, err[-2000:])
