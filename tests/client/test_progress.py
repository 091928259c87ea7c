"""Progress of long statements (issue 22, items 5 and 7) through one hook (modelsql/progress.py), drawn by the
shell (modelsql/client/display.py), and COMPILE ... WITH (tune_trials = n) working from the documented install.

PREDICT (stream and batch, CREATE TABLE AS, a cached plan), FINETUNE, PROFILE (synthetic and ON), CREATE MODEL
... FROM PYTHON and a tiny tuned COMPILE report their kind of message from Python; the display renders every
kind (and unknown ones) without an error; ``modelsql -c`` runs a tuned COMPILE and prints its progress line;
a missing psutil is a NotSupportedError naming it and the extra.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

import modelsql
from modelsql import progress as progress_module
from modelsql.client.display import ProgressDisplay, progress_line
from modelsql.progress import KINDS, Meter, problem

from conftest import linear_model

TESTS = str(Path(__file__).resolve().parents[1])  # tests/: where the child process finds tvm_fixtures


@pytest.fixture
def every_message(monkeypatch):
    """Messages are sent on every update (no throttling), so a short statement shows its steps."""
    monkeypatch.setattr(progress_module, "MIN_INTERVAL_S", 0.0)


def _hooked(con) -> list:
    messages: list = []
    con.progress = messages.append
    return messages


def _check_job(messages: list, kind: str) -> dict:
    """The job's messages are well formed, of ``kind``, with ``done`` never decreasing, and end with one final
    message of an ok job; that message."""
    assert messages and all(problem(m) is None for m in messages), [problem(m) for m in messages]
    assert {m["kind"] for m in messages} == {kind} and len({m["id"] for m in messages}) == 1
    dones = [m["done"] for m in messages]
    assert dones == sorted(dones)
    assert [m["final"] for m in messages] == [False] * (len(messages) - 1) + [True]
    last = messages[-1]
    assert last["ok"] is True and last["done"] == last["total"]
    assert kind == "profile" or last["unit"] == KINDS[kind].unit
    return last


@pytest.fixture
def lin(con):
    con.import_model("lin", linear_model(np.random.default_rng(0).standard_normal((8, 3)).astype(np.float32)))
    con.execute("CREATE TABLE t AS SELECT " + ", ".join(f"(random() - 0.5)::FLOAT AS c{i}" for i in range(8))
                + " FROM range(5000)")
    return con


@pytest.mark.parametrize("execution", ["stream", "batch"])
def test_a_predict_reports_rows_scored_to_the_connections_hook(lin, every_message, execution):
    messages = _hooked(lin)
    sql = f"SELECT * FROM PREDICT(MODEL lin, TABLE t, execution = '{execution}', batch_size = 512)"
    assert len(lin.execute(sql).fetchall()) == 5000
    last = _check_job(messages, "predict")
    assert last["done"] == 5000 and last["execution"] == execution and last["label"] == 'model "lin" version 1'
    scored = [m["done"] for m in messages[:-1]]  # one message per call of the model's function, then the final one
    assert len(set(scored)) == len(scored) >= (3 if execution == "stream" else 1)  # strictly increasing
    assert all(m["total"] == 5000 for m in messages)  # DuckDB's estimate of a table is its row count
    assert all(m["rate"] > 0 and m["eta_s"] >= 0 for m in messages)


def test_create_table_as_a_predict_and_a_cached_plan_report_too(lin, every_message):
    messages = _hooked(lin)
    lin.execute("CREATE TABLE scored AS SELECT * FROM PREDICT(MODEL lin, TABLE t)")
    assert _check_job(messages, "predict")["done"] == 5000
    cur = lin.cursor()
    for _ in range(2):  # the second run is a cached plan whose function stays registered
        messages.clear()
        cur.execute("SELECT y FROM PREDICT(MODEL lin, (SELECT * FROM t WHERE c0 > ?))", [0.0])
        n = len(cur.fetchall())
        assert _check_job(messages, "predict")["done"] == n  # a filter's estimate is corrected at the end


def test_without_a_hook_nothing_is_metered_and_messages_are_throttled(lin):
    lin.execute("SELECT * FROM PREDICT(MODEL lin, TABLE t)").fetchall()
    messages = _hooked(lin)
    lin.execute("SELECT * FROM PREDICT(MODEL lin, TABLE t)").fetchall()
    assert messages[-1]["final"] and len(messages) <= 1 + messages[-1]["elapsed_s"] / progress_module.MIN_INTERVAL_S


def test_the_old_tune_hook_gets_tune_messages_only(lin):
    seen = []
    lin.tune_progress = seen.append
    assert lin.tune_progress == seen.append and lin.progress is not None
    lin.execute("SELECT * FROM PREDICT(MODEL lin, TABLE t)").fetchall()
    assert seen == []
    lin.tune_progress = None
    assert lin.progress is None and lin.tune_progress is None
    with pytest.raises(modelsql.InterfaceError):
        lin.progress = 3


def test_a_hook_that_uses_its_own_connection_is_refused_not_hung(lin, every_message):
    """A hook runs while its connection's statement runs (for a streaming PREDICT, on DuckDB's threads): a statement
    of the same connection from it hung (waiting for the one running) or cut the result short; it is refused with
    InterfaceError ``used_from_hook``, which ends the statement."""
    import threading

    lin.progress = lambda message: lin.execute("SELECT 42").fetchall()
    outcome: list = []

    def work() -> None:
        try:
            cur = lin.cursor()
            cur.execute("SELECT c0 FROM PREDICT(MODEL lin, TABLE t, execution = 'stream', batch_size = 256)")
            outcome.append(len(cur.fetchall()))
        except modelsql.Error as exc:
            outcome.append(exc)

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "the statement hung"
    assert isinstance(outcome[0], modelsql.InterfaceError) and outcome[0].code == "used_from_hook", outcome
    lin.progress = None
    assert lin.execute("SELECT count(*) FROM PREDICT(MODEL lin, TABLE t)").fetchone() == (5000,)


def test_a_tune_hook_that_uses_its_connection_stops_the_study_resumably(tmp_path):
    """TUNE's hook running a statement on the same connection made TUNE fail with transaction_aborted (the real
    cause hidden) and left its study and trials ``running``."""
    con = modelsql.connect(str(tmp_path / "h.duckdb"))
    con.execute("CREATE TABLE d AS SELECT (i % 7)::FLOAT AS a, (i % 5)::FLOAT AS b, i % 2 AS y FROM range(120) r(i)")
    con.execute("CREATE MODEL mlp FROM PYTHON 'modelsql.zoo:mlp' WITH (hidden = 8)")
    con.commit()
    con.tune_progress = lambda message: con.execute("SELECT 1").fetchall()
    with pytest.raises(modelsql.InterfaceError, match="must not use the connection") as info:
        con.execute("TUNE MODEL mlp ON TABLE d TARGET y SEARCH (lr = CHOICE(0.01, 0.05)) USING GRID "
                    "WITH (max_epochs = 2)")
    assert info.value.code == "used_from_hook"
    con.tune_progress = None
    con.rollback()
    assert con.execute("SELECT status FROM modelsql.studies").fetchall() == [("interrupted",)]
    con.close()


def test_reading_duckdbs_progress_bar_setting_keeps_a_streaming_result(lin):
    """The setting's getter ran its own query on the DuckDB connection a cursor was streaming from, and the cursor
    then gave 10 of its rows."""
    cur = lin.cursor()
    cur.execute("SELECT * FROM range(100000)")
    first = cur.fetchmany(10)
    assert lin.duckdb_progress_bar in (True, False)
    lin.duckdb_progress_bar = True
    assert len(first) + len(cur.fetchall()) == 100000


@pytest.mark.parametrize("execution", ["stream", "batch"])
def test_a_hook_that_raises_ends_the_job_not_ok(lin, every_message, execution):
    """The hook's exception ends the statement; the job's final message says it failed (a streaming PREDICT's said
    ``ok`` True, with ``done`` short of its rows)."""
    messages: list = []

    def hook(message: dict) -> None:
        messages.append(message)
        if not message["final"] and message["done"] >= 100000:  # (half the rows: a stream is being fetched)
            raise ValueError("a hook that fails")

    lin.execute("CREATE TABLE many AS SELECT t.* FROM t, range(40)")  # 200,000 rows: a stream fails as it is read
    lin.progress = hook
    cur = lin.cursor()
    with pytest.raises(modelsql.Error, match="a hook that fails"):  # (a streaming one's, as its rows are fetched)
        cur.execute(f"SELECT y FROM PREDICT(MODEL lin, TABLE many, execution = '{execution}', batch_size = 256)")
        while cur.fetchmany(10000):
            pass
    lin.progress = None
    lin.rollback()
    assert messages[-1]["final"] is True and messages[-1]["ok"] is False


def test_tune_of_a_model_type_reports_its_trials(tmp_path):
    """TUNE of a scikit-learn model type sent no progress message at all (a torch study sends one per stage)."""
    con = modelsql.connect(str(tmp_path / "e.duckdb"))
    con.execute("CREATE TABLE d AS SELECT (i % 7)::DOUBLE AS a, (i % 5)::DOUBLE AS b, (i % 7 > 3) AS y "
                "FROM range(200) r(i)")
    messages = _hooked(con)
    row = con.execute("TUNE MODEL lr ON TABLE d TARGET y SEARCH (C = CHOICE(0.1, 1.0, 10.0)) USING GRID "
                      "WITH (model_type = 'logistic_reg')").fetchone()
    last = _check_job(messages, "tune")
    assert last["trials_done"] == last["done"] == 3 and last["study"] == row[0]
    assert last["best_trial"] == row[3] and last["best_metric"] == pytest.approx(row[4])
    con.close()

def test_profile_reports_runs_and_queries(lin, every_message):
    messages = _hooked(lin)
    lin.execute("PROFILE MODEL lin WITH (batch_sizes = (1, 8), threads = (1, 2), repeat = 5, warmup = 1, "
                "operators = false, train_cost_model = false)").fetchall()
    last = _check_job(messages, "profile")
    assert last["unit"] == "runs" and last["done"] == 2 * 2 * (5 + 1)
    assert all(m["total"] == 24 for m in messages)
    messages.clear()
    lin.execute("PROFILE MODEL lin ON TABLE t WITH (batch_sizes = 64, repeat = 3, train_cost_model = false)")
    jobs = [m for m in messages if m["kind"] == "profile"]
    last = _check_job(jobs, "profile")
    assert last["unit"] == "queries" and last["done"] == 6
    assert any(m["kind"] == "predict" for m in messages)  # the PREDICTs it times report their rows as well


def test_finetune_reports_epochs(tmp_path, every_message):
    pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    import pyarrow as pa
    from sklearn.datasets import load_breast_cancer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x, y = load_breast_cancer(return_X_y=True)
    x = x.astype(np.float32)
    con = modelsql.connect(str(tmp_path / "ft.duckdb"))
    con.register("train_arrow", pa.table({**{f"p{i}": x[:, i] for i in range(x.shape[1])}, "label": y}))
    con.execute("CREATE TABLE train AS SELECT * FROM train_arrow")
    pipe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)).fit(x, y)
    con.import_pipeline("pl", pipe, example_input=x[:20], features=[f"p{i}" for i in range(x.shape[1])])
    messages = _hooked(con)
    con.execute("FINETUNE PIPELINE pl ON TABLE train TARGET label WITH (epochs = 12, seed = 0)").fetchall()
    last = _check_job(messages, "finetune")
    assert last["done"] == 12 and last["pipeline"] == "pl" and np.isfinite(last["loss"])
    assert [m["done"] for m in messages[:-1]] == list(range(1, 13))
    con.close()


def test_create_model_from_python_reports_its_stages(con, every_message):
    pytest.importorskip("torch")
    messages = _hooked(con)
    con.execute("CREATE MODEL loop FROM PYTHON 'modelsql.datasets.programs:WhileLoop' WITH (execution = 'eager')")
    last = _check_job(messages, "create_model")
    assert last["done"] == 5 and last["label"] == "loop"
    from modelsql.engine.models.from_python import STAGES

    assert [(m["done"], m["stage"]) for m in messages[:5]] == list(enumerate(STAGES))  # as each stage begins


def test_a_failed_job_ends_with_a_final_message_that_is_not_ok(lin):
    messages = _hooked(lin)
    lin.execute("CREATE TABLE bad AS SELECT 1.0::FLOAT AS c0")
    with pytest.raises(modelsql.ProgrammingError):
        lin.execute("SELECT * FROM PREDICT(MODEL lin, TABLE bad)").fetchall()
    assert all(not m["final"] or m["ok"] is False for m in messages)
    hook_errors = []

    def raising(message):
        hook_errors.append(message)
        raise ValueError("stop here")

    meter = Meter(raising, "compile", total=3)
    meter.finish(ok=False)  # the job's own error matters: the hook's is dropped
    with pytest.raises(ValueError):
        Meter(raising, "compile", total=3).finish()
    assert len(hook_errors) == 2


# --------------------------------------------------------------------------- the display

_SAMPLES = {
    "predict": dict(done=2048, total=5000, unit="rows", rate=1365.3, eta_s=2.1, scan=0, execution="stream"),
    "tune": dict(done=3, total=4, unit="trials", rate=0.25, eta_s=4.0, study="s", trials=4, trials_done=3,
                 best_trial=1, best_metric=0.91, epochs_trained=12, epochs_requested=30),
    "finetune": dict(done=120, total=300, unit="epochs", rate=40.0, eta_s=4.5, pipeline="p", loss=0.1234),
    "profile": dict(done=200, total=660, unit="runs", rate=66.6, eta_s=7.0),
    "compile": dict(done=4, total=8, unit="trials", rate=0.13, eta_s=30.0, target="llvm", batch_size=8),
    "create_model": dict(done=2, total=5, unit="stages", rate=0.6, eta_s=5.0, stage="trying a whole graph"),
}
_EXPECTED = {
    "predict": "PREDICT m: 2,048/5,000 rows · 1,365 rows/s · 0:03 elapsed, 0:02 left",
    "tune": "TUNE m: 3/4 trials · 0.25 trials/s · 0:03 elapsed, 0:04 left · best 0.91 (trial 1) · 12 epochs trained, "
            "30 trial-based (2.50x)",
    "finetune": "FINETUNE m: 120/300 epochs · 40.0 epochs/s · 0:03 elapsed, 0:04 left · loss 0.1234",
    "profile": "PROFILE m: 200/660 runs · 66.6 runs/s · 0:03 elapsed, 0:07 left",
    "compile": "COMPILE m: 4/8 trials · 0.13 trials/s · 0:03 elapsed, 0:30 left · for llvm batch 8",
    "create_model": "CREATE MODEL m: stage 3/5 · 0:03 elapsed · trying a whole graph",
}


def _message(kind: str, job: int, **over) -> dict:
    return {"kind": kind, "id": job, "label": "m", "elapsed_s": 3.0, "final": False, **_SAMPLES.get(kind, {}), **over}


def test_every_kind_renders_as_a_line():
    assert set(_SAMPLES) == set(KINDS)
    for kind in KINDS:
        message = _message(kind, 1)
        assert problem(message) is None
        assert progress_line(message) == _EXPECTED[kind]
    final = progress_line(_message("predict", 1, done=5000, total=5000, final=True, ok=True))
    assert final.startswith("PREDICT m: 5,000/5,000 rows") and "done in 0:03" in final
    assert "stopped after 0:03" in progress_line(_message("tune", 1, final=True, ok=False))


@pytest.mark.parametrize("message,expected", [
    ({"kind": "import", "id": 1, "label": "x", "done": 7, "total": None, "unit": "files", "elapsed_s": 2.0,
      "rate": None, "eta_s": None, "final": False}, "import x: 7 files · 0:02 elapsed"),
    ({"job": "compile", "model": "m", "trials_done": 2, "trials": 8},  # COMPILE's message before the protocol
     "progress: job='compile', model='m', trials_done=2, trials=8"),
    ({"kind": "tune", "study": "s", "trials": 4}, "TUNE: best -"),  # a TUNE message without its counts
    ({"kind": "finetune", "done": "many", "loss": "low"}, "FINETUNE: done='many', loss='low'"),
    ("not a message", "progress: 'not a message'"),
])
def test_unknown_or_malformed_messages_render_without_an_error(message, expected):
    assert progress_line(message) == expected
    ProgressDisplay(Console(file=io.StringIO()))(message)


def test_the_display_draws_on_a_terminal_and_clears_when_done():
    out = io.StringIO()
    display = ProgressDisplay(Console(file=out, force_terminal=True, width=200))
    display(_message("predict", 99, elapsed_s=0.2))  # under a second: not shown
    for job, kind in enumerate(KINDS):
        display(_message(kind, job))
    display({"kind": "mystery", "id": 50, "label": "x", "done": 1, "elapsed_s": 2.0})
    time.sleep(0.3)  # rich redraws on its own thread
    for job, kind in enumerate(KINDS):
        display(_message(kind, job, final=True, ok=True))
    assert display._bars is not None  # the unknown job is still running
    display.stop()
    drawn = out.getvalue()
    for kind in KINDS:
        assert _EXPECTED[kind].split(": ", 1)[1].split(" · ")[0] in drawn
    assert "PREDICT m: 2,048" not in drawn  # the head and the text are columns around the bar
    assert "mystery x" in drawn and display._bars is None
    assert drawn.endswith("\x1b[1A\x1b[2K")  # transient: its lines are erased when it stops


def test_the_display_prints_long_jobs_once_when_not_on_a_terminal():
    out = io.StringIO()
    display = ProgressDisplay(Console(file=out, width=200))
    for job, kind in enumerate(KINDS):
        display(_message(kind, job))
        display(_message(kind, job, final=True, ok=True))
    display(_message("predict", 20, elapsed_s=0.1, final=True, ok=True))  # a short job prints nothing
    lines = out.getvalue().splitlines()
    assert len(lines) == len(KINDS) and all("done in 0:03" in line for line in lines)


def test_the_shell_silences_duckdbs_own_bar_for_statements_it_draws(lin):
    """On a terminal, a statement naming models is drawn by the display alone (DuckDB's bar would share the
    terminal with it); plain SQL keeps DuckDB's bar. Off a terminal nothing changes."""
    from modelsql.client.cli import Runner

    out = io.StringIO()
    runner = Runner(lin, Console(file=out), Console(file=io.StringIO(), force_terminal=True))
    assert lin.progress is runner.progress and lin.duckdb_progress_bar is True
    runner.execute_one("SELECT count(*) FROM PREDICT(MODEL lin, TABLE t)")
    assert lin.duckdb_progress_bar is False
    runner.execute_one("SELECT count(*) FROM t")
    assert lin.duckdb_progress_bar is True and out.getvalue().count("5000") == 2
    piped = Runner(lin, Console(file=out), Console(file=io.StringIO()))
    piped.execute_one("SELECT count(*) FROM PREDICT(MODEL lin, TABLE t)")
    assert lin.duckdb_progress_bar is True


# --------------------------------------------------------------------------- COMPILE with tune_trials

def _tvm_tuning():
    tvm_tune = pytest.importorskip("modelsql.operators.backends.tvm_tune")
    reason = tvm_tune.unavailable_reason()
    if reason is not None:
        pytest.skip(f"TVM tuning is unavailable: {reason}")


def _run(args: list, cwd, timeout: int = 300, **env):
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "HOME": str(cwd), "COLUMNS": "200", **env})


@pytest.mark.slow
def test_compile_with_tune_trials_reports_progress_from_python_and_in_the_shell(tmp_path):
    """The fast representative of the tuned COMPILE (2 trials on the 16-32-4 MLP: two tasks of one trial)."""
    _tvm_tuning()
    import onnx
    from tvm_fixtures import mlp

    db = str(tmp_path / "c.duckdb")
    con = modelsql.connect(db)
    con.import_model("m", onnx.load_from_string(mlp()))
    messages = _hooked(con)
    row = con.execute("COMPILE MODEL m FOR 'llvm' WITH (tune_trials = 2, batch_size = 8)").fetchone()
    assert row[5] == "checked", row
    last = _check_job(messages, "compile")
    assert last["done"] == 2 and last["target"] == "llvm" and last["batch_size"] == 8
    con.close()
    # the shell drew TUNE's messages alone and crashed on COMPILE's (KeyError: 'study'); this one resumes the
    # tuning above (its progress says 2 of 2 trials at once), so it takes seconds, not a second tuning
    sql = "COMPILE MODEL m FOR 'llvm' WITH (tune_trials = 2, batch_size = 8)"
    out = _run([sys.executable, "-m", "modelsql.client.cli", "-d", db, "-c", sql], tmp_path)
    assert out.returncode == 0, out.stderr
    assert "checked" in out.stdout
    # off a terminal the display prints a job's last line when it ran a second or more (a resumed one may not)
    assert out.stderr == "" or out.stderr.startswith('COMPILE model "m" version 1: 2/2 trials · '), out.stderr


_WITHOUT_PSUTIL = """
import sys
sys.modules["psutil"] = None  # as where psutil is not installed
sys.path.insert(0, {tests!r})
import onnx, modelsql
from tvm_fixtures import mlp
con = modelsql.connect({db!r})
con.import_model("m", onnx.load_from_string(mlp()))
try:
    con.execute("COMPILE MODEL m FOR 'llvm' WITH (tune_trials = 2, batch_size = 8)")
except modelsql.NotSupportedError as exc:
    print("refused", exc.code, exc)
"""


def test_tuning_without_psutil_is_refused_naming_it_and_the_extra(tmp_path):
    _tvm_tuning()
    code = _WITHOUT_PSUTIL.format(tests=TESTS, db=str(tmp_path / "p.duckdb"))
    out = _run([sys.executable, "-c", code], tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("refused tvm_unavailable") and "psutil" in out.stdout, out.stdout
    assert "modelsql[tvm]" in out.stdout
