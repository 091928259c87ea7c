"""The shell (issue 22, item 6): Ctrl-C, repeated ``-c``, ``.help``, history, modules of the working directory
and what a statement imports. Each test drives the real ``modelsql`` command: the interactive shell on
a real terminal (a pty: what a user types, Ctrl-C as the terminal sends it, SIGINT to the foreground
process group), ``-c`` and its SERVE with a real HTTP request, and fresh interpreters for what a
statement imports."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
import urllib.error
import urllib.request
import warnings
from pathlib import Path

import pytest

import modelsql
from modelsql.client.cli import DOT_COMMANDS
from modelsql.sql.registry import STATEMENT_NODES

from conftest import save, scale_model
from tune_fixtures import GRID_SQL, make_db

PROMPT = r"modelsql> "
ROOT = Path(__file__).resolve().parents[2]
CONSOLE_SCRIPT = Path(sys.executable).parent / "modelsql"


def _env(tmp_path: Path, **extra: str) -> dict:
    env = dict(os.environ)
    env.update(HOME=str(tmp_path), MODELSQL_HISTORY=str(tmp_path / "history"), TERM="xterm", INPUTRC="/dev/null")
    for name in ("COLUMNS", "LINES", "MODELSQL_TRACEBACK"):
        env.pop(name, None)
    env.update(extra)
    return env


class Terminal:
    """A program on a real terminal (a pseudo-terminal): the keys typed reach it as a user's would, Ctrl-C
    is the terminal's (SIGINT to its foreground process group), and ``output`` is everything it showed."""

    def __init__(self, argv: list[str], cwd: Path, env: dict, columns: int = 100) -> None:
        with warnings.catch_warnings():  # the child only sets the size, changes folder and execs
            warnings.simplefilter("ignore", DeprecationWarning)
            pid, fd = pty.fork()
        if pid == 0:  # the child: the pty is its controlling terminal and its stdin, stdout and stderr
            try:
                fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
                os.chdir(cwd)
                os.execve(argv[0], argv, env)
            finally:
                os._exit(127)
        self.pid, self.fd = pid, fd
        self.output = ""
        self.seen = 0
        self.status: int | None = None

    def _read(self, timeout: float) -> bool:
        """Read what the program printed within ``timeout`` seconds; False once it closed the terminal."""
        ready, _, _ = select.select([self.fd], [], [], max(timeout, 0))
        if not ready:
            return True
        try:
            data = os.read(self.fd, 65536)
        except OSError:  # EIO: every process holding the terminal is gone
            return False
        self.output += data.decode("utf-8", "replace")
        return bool(data)

    def expect(self, pattern: str, timeout: float = 60.0) -> re.Match:
        """Wait until ``pattern`` appears in what was printed after the last match."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            found = regex.search(self.output, self.seen)
            if found:
                self.seen = found.end()
                return found
            if time.monotonic() > deadline or not self._read(min(1.0, deadline - time.monotonic())):
                raise AssertionError(f"{pattern!r} was not printed; the terminal shows:\n{self.output[-4000:]}")

    def settle(self, seconds: float) -> str:
        """Everything printed in the next ``seconds``."""
        start, deadline = len(self.output), time.monotonic() + seconds
        while time.monotonic() < deadline and self._read(deadline - time.monotonic()):
            pass
        self.seen = len(self.output)
        return self.output[start:]

    def send(self, text: str) -> None:
        os.write(self.fd, text.encode())

    def ctrl_c(self) -> None:
        self.send("\x03")  # the terminal's INTR character: the line discipline sends SIGINT

    def wait(self, timeout: float = 60.0) -> int:
        deadline = time.monotonic() + timeout
        while self.status is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = os.waitstatus_to_exitcode(status)
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"the program did not exit; the terminal shows:\n{self.output[-4000:]}")
            self._read(0.2)
        return self.status

    def close(self) -> None:
        if self.status is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
        os.close(self.fd)


@pytest.fixture
def terminal():
    opened: list[Terminal] = []

    def start(tmp_path: Path, *args: str, program: list[str] | None = None, columns: int = 100) -> Terminal:
        term = Terminal([*(program or [sys.executable, "-m", "modelsql.client.cli"]), *args], tmp_path, _env(tmp_path),
                        columns)
        opened.append(term)
        return term

    yield start
    for term in opened:
        term.close()


def run_cli(tmp_path: Path, *args: str, program: list[str] | None = None, timeout: float = 120):
    return subprocess.run([*(program or [sys.executable, "-m", "modelsql.client.cli"]), *args], cwd=tmp_path,
                          input="", capture_output=True, text=True, env=_env(tmp_path), timeout=timeout)


# ----------------------------------------------------------------------- Ctrl-C


@pytest.mark.slow
def test_ctrl_c_at_the_prompt_after_a_tune_cancels_the_line_without_a_traceback(tmp_path, terminal):
    """The report: after a TUNE, its idle worker processes got the terminal's SIGINT too and each printed
    its own KeyboardInterrupt traceback over the prompt."""
    make_db(str(tmp_path / "tune.duckdb")).close()
    term = terminal(tmp_path, "-d", "tune.duckdb")
    term.expect(PROMPT)
    term.send(" ".join(GRID_SQL.format(extra=", workers = 2").split()) + ";\r")
    term.expect(r"finished", timeout=400)
    term.expect(PROMPT)
    for attempt in range(3):  # typed, not entered; typed-ahead keys may be discarded while the shell switches
        term.settle(1.0)      # the terminal's mode after the TUNE's display (TCSAFLUSH): type again if not echoed
        term.send("SELECT 'half a statement',")
        try:
            term.expect("half a statement", timeout=20)
            break
        except AssertionError:
            if attempt == 2:
                raise
    term.ctrl_c()
    start = len(term.output)
    term.expect(PROMPT, timeout=60)  # a fresh prompt, the line dropped (generous: CI machines are loaded)
    shown = term.output[start:] + term.settle(2.0)
    assert "Traceback" not in shown and "KeyboardInterrupt" not in shown, shown
    term.send("SELECT 6 * 7 AS answer;\r")  # the half statement was dropped: this one runs alone
    term.expect(r"\b42\b")
    term.expect(PROMPT)
    start = len(term.output)
    for _ in range(2):  # twice more at an empty prompt
        term.ctrl_c()
        term.settle(1.5)
    shown = term.output[start:] + term.settle(1.0)
    assert "Traceback" not in shown and "KeyboardInterrupt" not in shown, shown
    for attempt in range(3):  # on a loaded machine a late SIGINT may drop a typed-ahead .quit: type it again
        term.send(".quit\r")
        try:
            status = term.wait(timeout=20)
            break
        except AssertionError:
            if attempt == 2:
                raise
    assert status == 0
    assert "Traceback" not in term.output and "KeyboardInterrupt" not in term.output


SLOW_FACTORY = '''import time

import torch


class Busy(torch.nn.Module):
    """A linear model whose every batch also keeps the CPU busy for 50 ms: a stage that trains for seconds."""

    def __init__(self, in_features, n_outputs):
        super().__init__()
        self.linear = torch.nn.Linear(in_features, n_outputs)

    def forward(self, x):
        end = time.perf_counter() + 0.05
        while time.perf_counter() < end:
            pass
        return self.linear(x)


def busy(in_features, n_outputs):
    return Busy(in_features, n_outputs)
'''


def _workers_of(pid: int) -> list[int]:
    """The TUNE worker processes ``pid`` started."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid and b"modelsql.tuning.worker" in cmdline:
                found.append(int(entry.name))
    return found


def _cpu_seconds(pid: int) -> float | None:
    """CPU seconds ``pid`` has used (utime + stime); None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cpu_used(pids: list[int], seconds: float) -> float:
    """CPU seconds the processes use in the next ``seconds`` (one that exits meanwhile counts as none)."""
    before = {p: _cpu_seconds(p) for p in pids}
    time.sleep(seconds)
    after = {p: _cpu_seconds(p) for p in pids}
    return sum(after[p] - before[p] for p in pids if before[p] is not None and after[p] is not None)


BUSY_TUNE = ("TUNE MODEL busy ON TABLE train VALIDATE ON TABLE val TARGET label SEARCH (lr = CHOICE(0.1), "
             "batch_size = 64) USING GRID WITH (max_epochs = 200, seed = 0, workers = 1{extra});\r")


def _busy_shell(tmp_path, terminal):
    make_db(str(tmp_path / "tune.duckdb")).close()
    (tmp_path / "busymod.py").write_text(SLOW_FACTORY)
    term = terminal(tmp_path, "-d", "tune.duckdb")  # python -m: the working directory is on sys.path
    term.expect(PROMPT)
    term.send("CREATE MODEL busy FROM PYTHON 'busymod:busy';\r")
    term.expect(PROMPT)
    return term


@pytest.mark.slow
def test_ctrl_c_during_a_tune_trained_in_the_shell_process_stops_the_study(tmp_path, terminal):
    """One worker on the CPU trains in the shell's own process: Ctrl-C stops the stage and the study (resumable),
    with no traceback, and the shell stops using the CPU."""
    term = _busy_shell(tmp_path, terminal)
    term.send(BUSY_TUNE.format(extra=""))
    deadline = time.monotonic() + 120
    while _cpu_used([term.pid], 2.0) < 0.3:  # training
        assert time.monotonic() < deadline, term.output[-3000:]
    assert not _workers_of(term.pid)  # no worker process: the stages train in the shell
    term.ctrl_c()
    term.expect(r"study_stopped|[Ii]nterrupted", timeout=60)
    term.expect(PROMPT)
    time.sleep(1.0)
    assert _cpu_used([term.pid], 3.0) < 0.3  # training stopped with the study
    term.send("SELECT status FROM modelsql.studies;\r")
    term.expect("stopped")
    term.expect(PROMPT)
    term.send(".quit\r")
    assert term.wait() == 0
    assert "Traceback" not in term.output


def test_ctrl_c_during_a_tune_stops_the_stage_training_in_its_worker(tmp_path, terminal):
    """The workers no longer get the terminal's SIGINT, so the study's process stops the task it abandons: a
    worker does not train on, unseen, after Ctrl-C stopped the study."""
    term = _busy_shell(tmp_path, terminal)
    term.send(BUSY_TUNE.format(extra=", executor = 'processes'"))
    deadline = time.monotonic() + 120
    while not (workers := _workers_of(term.pid)) or _cpu_used(workers, 2.0) < 0.3:  # training
        assert time.monotonic() < deadline, term.output[-3000:]
        term.settle(0.5)
    term.ctrl_c()
    term.expect(r"study_stopped|[Ii]nterrupted", timeout=60)
    term.expect(PROMPT)
    time.sleep(1.0)
    assert _cpu_used(workers, 3.0) < 0.3  # the stage's training stopped with the study
    term.send(".quit\r")
    assert term.wait() == 0
    assert "Traceback" not in term.output


# ----------------------------------------------------------------------- -c


def test_repeated_c_runs_each_in_order_and_stops_at_the_first_error(tmp_path):
    r = run_cli(tmp_path, "-d", "c.duckdb", "-c", "CREATE TABLE t AS SELECT 20 AS x",
                "-c", "INSERT INTO t VALUES (21)", "-c", "SELECT sum(x) + 1 AS total FROM t")
    assert r.returncode == 0, r.stderr
    assert re.search(r"\b42\b", r.stdout) and "total" in r.stdout
    r = run_cli(tmp_path, "-d", "c.duckdb", "-c", "SELECT 'first ran' AS a", "-c", "SELECT nope FROM t",
                "-c", "SELECT 'third ran' AS c")
    assert r.returncode == 1
    assert "first ran" in r.stdout and "third ran" not in r.stdout and "nope" in r.stderr
    assert "Traceback" not in r.stderr


def _served_model(tmp_path: Path) -> str:
    db = str(tmp_path / "serve.duckdb")
    with modelsql.connect(db) as con:
        con.import_model("m", save(scale_model(2.0), tmp_path / "m.onnx"))
    return db


def _read_until(stream, pattern: str, timeout: float) -> tuple[re.Match | None, str]:
    text, deadline = "", time.monotonic() + timeout
    regex = re.compile(pattern)
    while time.monotonic() < deadline:
        ready, _, _ = select.select([stream], [], [], 0.5)
        if ready:
            chunk = os.read(stream.fileno(), 65536).decode()
            if not chunk:
                break
            text += chunk
            found = regex.search(text)
            if found:
                return found, text
    return None, text


def _infer(url: str, values: list[float]) -> list[float]:
    body = json.dumps({"inputs": [{"name": "x", "shape": [len(values)], "datatype": "FP32", "data": values}]})
    request = urllib.request.Request(f"{url}/v2/models/m/infer", data=body.encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=30) as response:
        answer = json.loads(response.read())
    return next(o["data"] for o in answer["outputs"] if o["name"] == "y")


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_serve_from_c_serves_until_interrupted(tmp_path, stop):
    """The report: ``modelsql -c "SERVE MODEL m ON PORT 8000"`` printed the server and exited 0, and the
    server went with it. Now it serves until SIGINT or SIGTERM, as ``modelsql serve`` does, then stops."""
    db = _served_model(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "modelsql.client.cli", "-d", db, "-c", "SERVE MODEL m ON PORT 0"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(tmp_path))
    try:
        found, text = _read_until(proc.stderr, r"serving at (http://127\.0\.0\.1:\d+)", 120)
        assert found, (text, proc.poll())
        url = found.group(1)
        time.sleep(0.5)
        assert proc.poll() is None  # still there
        assert _infer(url, [1.5, 2.0]) == [3.0, 4.0]
        proc.send_signal(stop)
        assert proc.wait(timeout=60) == 0
        assert b"Traceback" not in proc.stderr.read()
        with pytest.raises(urllib.error.URLError):  # the server is gone with the process
            _infer(url, [1.0])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# ----------------------------------------------------------------------- .help


def _says(text: str, words: tuple[str, ...]) -> bool:
    """One line of ``text`` has ``words`` in order."""
    pattern = re.compile(r"\b" + r"\b.*?\b".join(words) + r"\b")
    return any(pattern.search(line) for line in text.splitlines())


def test_help_lists_every_registered_statement_and_every_dot_command(tmp_path, terminal):
    term = terminal(tmp_path, "-d", ":memory:", columns=80)
    term.expect(PROMPT)
    term.send(".help\r")
    term.expect(r"leave the shell")
    help_text = term.output
    missing = [" ".join(seq) for node in STATEMENT_NODES for seq in node.WORDS if not _says(help_text, seq)]
    assert not missing, f".help does not mention {missing}"
    for word in ("EXPLAIN", "PREDICT(MODEL", "PREDICT(PIPELINE", "EXPORT DATABASE", "IMPORT DATABASE"):
        assert word in help_text, word
    for names, _, _ in DOT_COMMANDS:
        for name in names:
            assert re.search(rf"(^|\s){re.escape(name)}\b", help_text, re.M), name
    # every dot command listed is one the shell runs
    term.send("CREATE TABLE pets AS SELECT 1 AS legs;\r")
    term.expect(PROMPT)
    for names, args, _ in DOT_COMMANDS:
        if ".quit" in names:
            continue
        line = names[0] + (" pets" if "TABLE" in args else "")
        start = len(term.output)
        term.send(line + "\r")
        term.expect(PROMPT)  # the command ran and the shell asks for the next line
        shown = term.output[start:]
        assert "Unknown command" not in shown and "Error" not in shown, (line, shown)
    term.send(".exit\r")
    assert term.wait() == 0


# ----------------------------------------------------------------------- history


UP = "\x1b[A"


def test_a_multi_line_statement_is_one_history_entry(tmp_path, terminal):
    term = terminal(tmp_path, "-d", ":memory:")
    term.expect(PROMPT)
    for line in ("SELECT 'first' AS one,", "       'second' AS two", "  ;"):
        term.send(line + "\r")
    term.expect(r"second")
    term.expect(PROMPT)
    term.send("SELECT 'other' AS three;\r")
    term.expect(r"other")
    term.expect(PROMPT)
    term.send(UP + UP + "\r")  # two entries back: the whole multi-line statement, not its last line
    term.expect(r"\bone\b[\s\S]*\bfirst\b")  # its result table: the echo says 'first' AS one
    term.expect(PROMPT)
    term.send(".quit\r")
    assert term.wait() == 0
    # saved as one entry a line, its line breaks kept, and recalled whole by the next shell
    saved = (tmp_path / "history").read_text().splitlines()
    assert "SELECT 'first' AS one,\x01       'second' AS two\x01  ;" in saved, saved
    assert not {"SELECT 'first' AS one,", "       'second' AS two", "  ;"} & set(saved), saved
    term = terminal(tmp_path, "-d", ":memory:")
    term.expect(PROMPT)
    term.send(UP + UP + "\r")
    term.expect(r"\bone\b[\s\S]*\btwo\b[\s\S]*\bsecond\b")
    term.send(".quit\r")
    assert term.wait() == 0


# ----------------------------------------------------------------------- modules of the working directory


FACTORY = '''def mlp(hidden=8):
    import torch

    return torch.nn.Sequential(torch.nn.Linear(4, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 2))
'''


@pytest.mark.skipif(not CONSOLE_SCRIPT.exists(), reason="the modelsql console script is not installed")
def test_from_python_finds_modules_of_the_working_directory_as_python_c_does(tmp_path, terminal):
    """The report: ``CREATE MODEL ... FROM PYTHON 'mynets.nets:Net'`` worked from ``python`` in the folder
    of ``mynets`` but not from the ``modelsql`` shell there (``No module named 'mynets'``)."""
    (tmp_path / "mynets").mkdir()
    (tmp_path / "mynets" / "__init__.py").write_text("")
    (tmp_path / "mynets" / "nets.py").write_text(FACTORY)
    create = "CREATE MODEL m FROM PYTHON 'mynets.nets:mlp' WITH (hidden = 4)"
    assert subprocess.run([sys.executable, "-c", "import mynets.nets"], cwd=tmp_path).returncode == 0
    r = run_cli(tmp_path, "-d", "p.duckdb", "-f", "csv", "-c", create, "-c", "SHOW MODELS",
                program=[str(CONSOLE_SCRIPT)])
    assert r.returncode == 0, r.stderr
    assert "mynets.nets:mlp" in r.stdout
    term = terminal(tmp_path, "-d", "q.duckdb", program=[str(CONSOLE_SCRIPT)])
    term.expect(PROMPT)
    term.send(create + ";\r")
    term.expect(PROMPT)
    term.send(".mode line\r")
    term.send(".models\r")
    term.expect(r"mynets\.nets:mlp")
    term.send(".quit\r")
    assert term.wait() == 0
    assert "No module named" not in term.output
    # --no-python still refuses FROM PYTHON, before anything is imported
    r = run_cli(tmp_path, "--no-python", "-d", "r.duckdb", "-c", create, program=[str(CONSOLE_SCRIPT)])
    assert r.returncode == 1 and "python_disabled" in r.stderr, r.stderr


# ----------------------------------------------------------------------- what a statement imports


HEAVY = ("torch", "tvm", "sklearn", "optuna", "ray", "uvicorn", "skl2onnx", "starlette")


def _imported(code: str, cwd: Path, watched: tuple[str, ...] = HEAVY) -> list[str]:
    probe = code + f"\nimport sys\nprint(sorted(m for m in {watched!r} if m in sys.modules))"
    r = subprocess.run([sys.executable, "-c", probe], cwd=cwd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1].replace("'", '"'))


def test_plain_sql_and_a_predict_import_no_heavy_package(tmp_path):
    """Cold ``SELECT 1`` imported the server (uvicorn, Starlette) and every statement's handler with ONNX; nothing
    of a statement's may be imported before a statement needs it: plain SQL needs none of them."""
    plain = "import modelsql\ncon = modelsql.connect(':memory:')\ncon.execute('SELECT 1')"
    assert _imported(plain, tmp_path, HEAVY + ("onnx", "onnxruntime")) == []
    db = _served_model(tmp_path)
    code = (f"import modelsql\ncon = modelsql.connect({db!r})\n"
            "con.execute('CREATE TABLE t AS SELECT 1.5::FLOAT AS x')\n"
            "assert con.execute('SELECT y FROM PREDICT(MODEL m, TABLE t)').fetchall() == [(3.0,)]")
    assert _imported(code, tmp_path) == []
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "modelsql.client.cli", "-d", ":memory:", "-c", "SELECT 1"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    imported = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in r.stderr.splitlines() if "|" in line}
    assert not imported & {*HEAVY, "onnx", "onnxruntime"}, imported


def _tvm_missing() -> str | None:
    from modelsql.operators.backends import tvm as tvm_backend  # the module imports no TVM

    return tvm_backend.install_reason()


@pytest.mark.slow
@pytest.mark.skipif(_tvm_missing() is not None, reason="TVM is not installed (modelsql[tvm])")
def test_predict_of_a_compiled_model_that_onnx_runtime_runs_imports_neither_tvm_nor_torch(tmp_path):
    """The report: the first PREDICT of a compiled model in a new process imported TVM and torch (15-30 s) to
    learn this CPU's TVM target, though the cost function then chose ONNX Runtime."""
    db = _served_model(tmp_path)
    env = _env(tmp_path, XDG_CACHE_HOME=str(tmp_path / "cache"))
    compile_it = (f"import modelsql\ncon = modelsql.connect({db!r})\n"
                  "con.execute('CREATE TABLE t AS SELECT 1.5::FLOAT AS x')\n"
                  "assert con.execute(\"COMPILE MODEL m FOR 'llvm'\").fetchone()[5] == 'checked'")
    r = subprocess.run([sys.executable, "-c", compile_it], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    predict = (f"import modelsql, sys\ncon = modelsql.connect({db!r})\n"
               "plan = con.execute('EXPLAIN SELECT y FROM PREDICT(MODEL m, TABLE t)').fetchall()[0][1]\n"
               "assert '[onnxruntime]' in plan, plan\n"
               "assert con.execute('SELECT y FROM PREDICT(MODEL m, TABLE t)').fetchall() == [(3.0,)]\n"
               f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", predict], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[-2] == "[]", r.stdout
