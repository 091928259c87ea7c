"""Trust: code in a database file runs only when its user trusts it, and SQL names no Python where the
connection says it may not (issue 21, items 11 and 12).

A user's own database is made once (module fixture) with the user's key: a Python program (its module writes a
marker file when imported), a trainable factory (likewise) and an ONNX model. A *crafted* copy is that file as
it arrives from elsewhere, made by code: its signatures are another key's (and one forged with the user's key
id), plus a Python-program row that calls ``os:system`` (with the digest of this machine's own ``os.py``) and, in
the TVM test, a ``checked`` compiled-library row whose library has a constructor that writes a marker. Nothing
of it may run on PREDICT, TUNE or ``backend = 'tvm'`` (read-only connections too) until TRUST MODEL, COMPILE
or ``trust_code=True``; the user's own models need no step.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import numpy as np
import pytest

pytest.importorskip("torch")

import modelsql  # noqa: E402
from modelsql.catalog import Catalog  # noqa: E402
from modelsql.errors import NotSupportedError, OperationalError  # noqa: E402
from modelsql.engine.artifacts.python_programs import read_program  # noqa: E402
from modelsql.signing import KEY_ENV, load_key, signature_of  # noqa: E402
from modelsql.storage import BlobStore  # noqa: E402
from modelsql.tuning.factories import factory_digest  # noqa: E402

from conftest import linear_model  # noqa: E402

MODULES = ("trust_prog_mod", "trust_fac_mod", "trust_new_mod")

PROGRAM = '''
import pathlib
pathlib.Path({marker!r}).write_text("imported")
import torch

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.lin(x) * 2

def example():
    return torch.ones(3, 4)
'''

FACTORY = '''
import pathlib
pathlib.Path({marker!r}).write_text("imported")
import torch

def make(in_features, n_outputs, hidden=4):
    return torch.nn.Sequential(torch.nn.Linear(in_features, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, n_outputs))
'''

TUNE = "TUNE MODEL fac ON TABLE train TARGET label SEARCH (lr = 0.1) USING GRID WITH (max_epochs = 1)"


@dataclasses.dataclass
class Made:
    root: Path
    own: Path
    markers: dict
    key: Path


def _forget(made: Made) -> None:
    """As in a fresh process: the test modules not imported, no marker written."""
    for name in MODULES:
        sys.modules.pop(name, None)
    for marker in made.markers.values():
        Path(marker).unlink(missing_ok=True)


def _ran(made: Made) -> set:
    return {k for k, m in made.markers.items() if Path(m).exists()}


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """The user's own database (their key, their code): program ``prog``, trainable ``fac``, ONNX model ``lin``."""
    root = tmp_path_factory.mktemp("trust")
    code = root / "code"
    code.mkdir()
    markers = {k: str(root / f"{k}.ran") for k in ("prog", "fac", "new", "shell", "lib")}
    (code / "trust_prog_mod.py").write_text(PROGRAM.format(marker=markers["prog"]))
    (code / "trust_fac_mod.py").write_text(FACTORY.format(marker=markers["fac"]))
    (code / "trust_new_mod.py").write_text(PROGRAM.format(marker=markers["new"]))
    sys.path.insert(0, str(code))
    mp = pytest.MonkeyPatch()
    mp.setenv(KEY_ENV, str(root / "user.key"))
    own = root / "own" / "own.duckdb"
    own.parent.mkdir()
    con = modelsql.connect(str(own))
    cur = con.cursor()
    cur.execute("CREATE TABLE t AS SELECT i AS id, [1.0, 2.0, 3.0, i::FLOAT]::FLOAT[4] AS x FROM range(5) r(i)")
    cur.execute("CREATE TABLE train AS SELECT (i % 7)::FLOAT AS a, (i % 5)::FLOAT AS b, (i % 2)::BIGINT AS label "
                "FROM range(40) r(i)")
    cur.execute("CREATE TABLE lin_in AS SELECT (i * 0.1)::FLOAT AS c0, 1.0::FLOAT AS c1 FROM range(6) r(i)")
    cur.execute("CREATE MODEL prog FROM PYTHON 'trust_prog_mod:Net' WITH (example = 'trust_prog_mod:example', "
                "execution = 'eager')")
    cur.execute("CREATE MODEL fac FROM PYTHON 'trust_fac_mod:make'")
    con.import_model("lin", linear_model(np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)))
    con.commit()
    con.close()
    result = Made(root, own, markers, root / "user.key")
    _forget(result)
    yield result
    mp.undo()
    sys.path.remove(str(code))


@pytest.fixture(autouse=True)
def user_key(made, monkeypatch):
    """Every test runs as the user who made ``own``."""
    monkeypatch.setenv(KEY_ENV, str(made.key))
    _forget(made)
    yield
    _forget(made)


def _copy(made: Made, dest: Path) -> Path:
    dest.mkdir()
    path = dest / made.own.name
    shutil.copy(made.own, path)
    shutil.copytree(str(made.own) + ".blobs", str(path) + ".blobs")
    return path


@pytest.fixture
def crafted(made, tmp_path) -> Path:
    """The user's database as a file from elsewhere, made by code: every signature replaced by another key's, one
    forged under the user's key id, and model ``shell``: a Python-program row calling ``os:system``."""
    path = _copy(made, tmp_path / "crafted")
    other = tmp_path / "other.key"
    os.environ[KEY_ENV] = str(other)
    theirs = load_key(create=True)
    os.environ[KEY_ENV] = str(made.key)
    mine = load_key()
    duck = duckdb.connect(str(path))
    catalog, store = Catalog(duck), BlobStore.for_database(str(path))
    prog = catalog.get("prog")
    stored = read_program(store.get(prog.graph_digest))
    shell = dataclasses.replace(stored, reference="os:system", params={"command": f"touch {made.markers['shell']}"},
                                source_digest=factory_digest("os:system"), sources={})
    digest = store.put(shell.to_bytes())
    with catalog.transaction():
        catalog.add_version(dataclasses.replace(prog, name="shell", version=1, graph_digest=digest,
                                                source="python:os:system", content_digest=digest, created_at=None),
                            {digest: "graph"})
        rows = duck.execute("SELECT kind, digest, subject FROM modelsql.code_signatures").fetchall()
        duck.execute("DELETE FROM modelsql.code_signatures")
        for kind, d, subject in rows + [("python", digest, "shell")]:
            duck.execute("INSERT INTO modelsql.code_signatures VALUES (?, ?, ?, ?, ?, now())",
                         [d, kind, theirs.key_id, signature_of(theirs, kind, d), subject])
            duck.execute("INSERT INTO modelsql.code_signatures VALUES (?, ?, ?, ?, ?, now())",  # forged
                         [d, kind, mine.key_id, signature_of(theirs, kind, d), subject])
    duck.close()
    return path


def _refused(con, sql: str, *words: str) -> str:
    with pytest.raises(NotSupportedError) as ei:
        con.execute(sql).fetchall()
    assert ei.value.code == "untrusted_code", ei.value
    for word in words:
        assert word in str(ei.value), (word, str(ei.value))
    return str(ei.value)


# ---------------------------------------------------------------- the key


def test_key_file_is_made_private_once_and_checked(tmp_path, monkeypatch):
    path = tmp_path / "cfg" / "modelsql" / "key"
    monkeypatch.delenv(KEY_ENV)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    assert load_key() is None and not path.exists()  # verifying never makes a key
    key = load_key(create=True)
    assert path.exists() and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert load_key(create=True) == key == load_key() and len(key.key_id) == 16
    assert key.secret.hex() not in repr(key)
    path.chmod(0o644)
    with pytest.raises(OperationalError) as ei:
        load_key()
    assert ei.value.code == "bad_key_file" and "chmod 600" in str(ei.value) and str(path) in str(ei.value)
    path.chmod(0o600)
    path.write_text("not a key\n")
    with pytest.raises(OperationalError) as ei:
        load_key()
    assert ei.value.code == "bad_key_file"
    monkeypatch.setenv(KEY_ENV, str(tmp_path / "elsewhere"))
    assert load_key(create=True).path == tmp_path / "elsewhere"


# ---------------------------------------------------------------- item 11: a crafted file runs nothing


def test_a_users_own_code_runs_with_no_step(made):
    con = modelsql.connect(str(made.own), read_only=True)
    rows = con.execute("SELECT id, output FROM PREDICT(MODEL prog, TABLE t) ORDER BY id").fetchall()
    assert len(rows) == 5 and len(rows[0][1]) == 2
    assert con.execute(f"EXPLAIN {TUNE}").fetchall()
    con.close()
    assert _ran(made) == {"prog", "fac"}


def test_a_crafted_program_is_not_imported_until_trusted(made, crafted):
    for read_only in (True, False):
        con = modelsql.connect(str(crafted), read_only=read_only)
        described = con.execute("DESCRIBE MODEL prog").fetchall()  # looking at it runs nothing
        assert any("trust_prog_mod:Net" in str(r) for r in described)
        text = _refused(con, "SELECT * FROM PREDICT(MODEL prog, TABLE t)", 'model "prog" version 1',
                        "trust_prog_mod:Net", "trust_code=True")
        assert ("TRUST MODEL prog VERSION 1" in text) is not read_only
        _refused(con, "SELECT * FROM PREDICT(MODEL shell, TABLE t)", "os:system", "touch")
        _refused(con, "EXPLAIN SELECT * FROM PREDICT(MODEL prog, TABLE t)")
        assert con.execute("SELECT count(*) FROM t").fetchone() == (5,)  # the refusal aborted nothing
        con.close()
        assert _ran(made) == set() and "trust_prog_mod" not in sys.modules
    con = modelsql.connect(str(crafted))
    rows = con.execute("TRUST MODEL prog").fetchall()
    assert [r[:4] for r in rows] == [("prog", 1, "python", "the Python program trust_prog_mod:Net")]
    assert con.execute("TRUST MODEL prog").fetchall()[0][5] is False  # signed once
    assert len(con.execute("SELECT * FROM PREDICT(MODEL prog, TABLE t)").fetchall()) == 5
    _refused(con, "SELECT * FROM PREDICT(MODEL shell, TABLE t)")
    con.close()
    assert _ran(made) == {"prog"}


def test_trust_code_connects_to_a_file_whose_code_you_trust(made, crafted):
    con = modelsql.connect(str(crafted), read_only=True, trust_code=True)
    assert con.trust_code and len(con.execute("SELECT * FROM PREDICT(MODEL prog, TABLE t)").fetchall()) == 5
    with pytest.raises(modelsql.Error):  # the shell command is what the crafted row does once trusted
        con.execute("SELECT * FROM PREDICT(MODEL shell, TABLE t)").fetchall()
    con.close()
    assert _ran(made) == {"prog", "shell"}


def test_a_crafted_trainable_is_not_imported_by_tune(made, crafted):
    con = modelsql.connect(str(crafted))
    _refused(con, TUNE, 'model "fac" version 1', "trust_fac_mod:make", "TRUST MODEL fac VERSION 1")
    _refused(con, f"EXPLAIN {TUNE}")
    assert _ran(made) == set() and "trust_fac_mod" not in sys.modules
    assert [r[2] for r in con.execute("TRUST MODEL fac").fetchall()] == ["trainable"]
    assert con.execute(f"EXPLAIN {TUNE}").fetchall()
    con.close()
    assert _ran(made) == {"fac"}


def test_a_fake_checked_library_is_not_loaded_until_trusted_and_compile_rebuilds_it(made, crafted):
    tvm_backend = pytest.importorskip("modelsql.operators.backends.tvm")
    if tvm_backend.unavailable_reason() is not None:
        pytest.skip(f"TVM backend unavailable: {tvm_backend.unavailable_reason()}")
    from modelsql.catalog.compiled import CompiledArtifact
    from modelsql.engine.artifacts.compiled import tvm_target

    source = crafted.parent / "lib.c"
    source.write_text(textwrap.dedent(f"""
        #include <stdio.h>
        __attribute__((constructor)) static void ran(void) {{
            FILE *f = fopen("{made.markers['lib']}", "w");
            if (f) {{ fputs("loaded", f); fclose(f); }}
        }}"""))
    compiler = shutil.which("cc")
    if compiler:
        subprocess.run([compiler, "-shared", "-fPIC", "-o", str(crafted.parent / "lib.so"), str(source)], check=True)
    library = (crafted.parent / "lib.so").read_bytes() if compiler else b"\x7fELF not a library"
    target = tvm_target("llvm")
    duck = duckdb.connect(str(crafted))
    catalog = Catalog(duck)
    digest = BlobStore.for_database(str(crafted)).put(library)
    with catalog.transaction():
        catalog.compiled.put(CompiledArtifact("lin", 1, "tvm", target.key, 0, target.tvm_version, target.ffi_version,
                                              "checked", None, digest, len(library), 0.0, 0.0, 0, 1.0))
    duck.close()
    predict = "SELECT y FROM PREDICT(MODEL lin, TABLE lin_in{}) ORDER BY c0"
    con = modelsql.connect(str(crafted))
    expected = con.execute(predict.format("")).fetchall()  # ONNX Runtime: the untrusted library is no alternative
    made.key.chmod(0o644)
    try:  # a key file it cannot use trusts nothing, and ONNX Runtime still runs the model
        assert con.execute(predict.format(", execution = 'batch'")).fetchall() == expected
    finally:
        made.key.chmod(0o600)
    _refused(con, predict.format(", backend = 'tvm'"), "TVM library", "COMPILE MODEL lin VERSION 1 FOR 'llvm'")
    assert _ran(made) == set()
    con.close()
    con = modelsql.connect(str(crafted), read_only=True)
    _refused(con, predict.format(", backend = 'tvm'"))
    con.close()
    assert _ran(made) == set()
    con = modelsql.connect(str(crafted))
    if compiler:  # trusted, it is loaded: the row was a live attack
        assert [r[2] for r in con.execute("TRUST MODEL lin").fetchall()] == ["compiled"]
        with pytest.raises(modelsql.Error) as ei:
            con.execute(predict.format(", backend = 'tvm'")).fetchall()
        assert ei.value.code == "invalid_library"
        con.rollback()
        assert _ran(made) == {"lib"}
    assert con.execute("COMPILE MODEL lin FOR 'llvm'").fetchone()[5] == "checked"  # rebuilt here, signed
    got = con.execute(predict.format(", backend = 'tvm'")).fetchall()
    np.testing.assert_allclose(np.array([r[0] for r in got]), np.array([r[0] for r in expected]), rtol=1e-5)
    con.close()


# ---------------------------------------------------------------- item 12: SQL that names Python


def test_read_only_from_python_is_refused_before_anything_is_imported(made):
    con = modelsql.connect(str(made.own), read_only=True)
    for sql in ("CREATE MODEL n FROM PYTHON 'trust_new_mod:Net' WITH (example = t)",
                "CREATE MODEL n FROM PYTHON 'trust_new_mod:Net' WITH (example = 'trust_new_mod:example')",
                "CREATE MODEL n FROM PYTHON 'trust_new_mod:Net'"):
        with pytest.raises(OperationalError) as ei:
            con.execute(sql)
        assert ei.value.code == "read_only"
    con.close()
    assert _ran(made) == set() and "trust_new_mod" not in sys.modules


def test_allow_python_false_refuses_from_python_and_trust(made, tmp_path):
    path = _copy(made, tmp_path / "served")
    con = modelsql.connect(str(path), allow_python=False)
    assert con.allow_python is False
    for sql in ("CREATE MODEL n FROM PYTHON 'os:abort' WITH (example = t)",
                "CREATE MODEL n FROM PYTHON 'trust_new_mod:Net' WITH (example = 'builtins:breakpoint')",
                "CREATE OR REPLACE MODEL fac FROM PYTHON 'trust_new_mod:Net'",
                "TRUST MODEL prog"):
        with pytest.raises(NotSupportedError) as ei:
            con.execute(sql)
        assert ei.value.code == "python_disabled" and "allow_python=False" in str(ei.value)
    assert len(con.execute("SELECT * FROM PREDICT(MODEL prog, TABLE t)").fetchall()) == 5  # the owner's code runs
    assert con.execute("SELECT count(*) FROM modelsql.model_versions WHERE name = 'n'").fetchone() == (0,)
    con.close()
    assert "trust_new_mod" not in sys.modules and "new" not in _ran(made)


def test_the_shell_flag_no_python(made, tmp_path):
    path = _copy(made, tmp_path / "shell")
    env = {**os.environ, KEY_ENV: str(made.key)}
    out = subprocess.run([sys.executable, "-c", "import sys; from modelsql.client.cli import main; sys.exit(main())",
                          "--no-python", "-d", str(path), "-c",
                          "CREATE MODEL m FROM PYTHON 'os:abort' WITH (example = t)"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 1, (out.returncode, out.stderr)  # refused: not killed by SIGABRT (-6)
    assert "allow_python=False" in out.stderr and "--no-python" in out.stderr


def test_a_pipeline_of_the_users_own_program_runs_in_a_fresh_process(made, tmp_path):
    """A signed program as a pipeline step is checked when the PREDICT is bound, as the program alone is (a fresh
    process has checked nothing yet)."""
    db = _copy(made, tmp_path / "pipe.duckdb")
    con = modelsql.connect(str(db))
    con.execute("CREATE PIPELINE pp AS (prog)")
    con.commit()
    con.close()
    script = ("import modelsql; c = modelsql.connect(%r, read_only=True); "
              "print(len(c.execute('SELECT * FROM PREDICT(PIPELINE pp, TABLE t)').fetchall()))" % str(db))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(made.root / "code"), *sys.path]))
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "5"


def test_serve_refuses_a_python_program_clearly(made, tmp_path):
    db = _copy(made, tmp_path / "serve.duckdb")
    con = modelsql.connect(str(db))
    con.execute("CREATE PIPELINE pp AS (prog)")
    for sql in ("SERVE MODEL prog ON PORT 0", "SERVE PIPELINE pp ON PORT 0"):
        with pytest.raises(NotSupportedError) as e:
            con.execute(sql)
        assert e.value.code == "no_onnx_graph" and "prog" in str(e.value)
    assert con.execute("SHOW SERVERS").fetchall() == []
    con.close()
