"""Files that EXPORT writes and IMPORT reads (issue 21, items 7, 10, 13 and 14): atomic EXPORT and a full
disk, EXPORT never destroying a database, IMPORT reading regular files only, EXPORT / IMPORT DATABASE.

Real files, real DuckDB databases, a real full disk: a 1 MiB tmpfs mounted for the test where the
test can mount one (root with CAP_SYS_ADMIN, as CI runs); where it cannot, those tests skip and
``test_a_write_over_the_file_size_limit_keeps_the_old_file`` still runs a real kernel refusal (the
process's ``RLIMIT_FSIZE``, so ``write`` fails with ``EFBIG``, in a child process). No mocks.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import numpy as np
import onnx
import pytest

import modelsql
from conftest import linear_model, save


def _tree(folder: Path) -> dict:
    """Every file under ``folder`` with its bytes' digest."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def db(tmp_path):
    path = str(tmp_path / "main.duckdb")
    small = save(linear_model(np.eye(3, dtype=np.float32)), tmp_path / "small.onnx")
    with modelsql.connect(path) as con:
        con.execute("IMPORT MODEL m FROM ?", [small])
        con.execute("CREATE TABLE t AS SELECT range AS i FROM range(100)")
    return path


@pytest.fixture
def small_disk(tmp_path):
    """A real 1 MiB tmpfs (skips where this process may not mount one)."""
    where = tmp_path / "disk"
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.decode().strip()}); the RLIMIT_FSIZE test covers it")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def _big_model(tmp_path) -> str:
    """An ONNX file of about 1.4 MB (more than the small disk holds with anything else on it)."""
    rng = np.random.default_rng(0)
    return save(linear_model(rng.random((600, 600), dtype=np.float32)), tmp_path / "big.onnx")


# ---------------------------------------------------------------- item 7: atomic EXPORT, disk full


def test_a_failed_export_keeps_the_file_it_would_replace(db, tmp_path, small_disk):
    with modelsql.connect(db) as con:
        con.execute("IMPORT MODEL big FROM ?", [_big_model(tmp_path)])
        target = small_disk / "model.onnx"
        con.execute("EXPORT MODEL m TO ?", [str(target)])  # a good export, which the next must not destroy
        before = target.read_bytes()
        with pytest.raises(modelsql.OperationalError) as info:
            con.execute("EXPORT MODEL big TO ?", [str(target)])
        assert info.value.code == "disk_full" and "model.onnx" in str(info.value)
        assert target.read_bytes() == before
        assert os.listdir(small_disk) == ["model.onnx"]  # no temporary file left
        onnx.checker.check_model(onnx.load(str(target)))


def test_disk_full_during_import_is_an_operational_error_and_leaves_nothing_partial(tmp_path, small_disk):
    path = str(small_disk / "full.duckdb")
    with modelsql.connect(path) as con:
        con.autocommit = True
        with pytest.raises(modelsql.OperationalError) as info:
            con.execute("IMPORT MODEL big FROM ?", [_big_model(tmp_path)])
        assert info.value.code == "disk_full"
        assert con.execute("SELECT count(*) FROM modelsql.models").fetchall() == [(0,)]
        store = small_disk / "full.duckdb.blobs"
        for blob in (p for p in store.rglob("*") if p.is_file()):
            assert not blob.name.startswith("."), f"partial file {blob}"
            assert hashlib.sha256(blob.read_bytes()).hexdigest() == blob.parent.name + blob.name
        con.execute("VACUUM MODELS")
        con.execute("IMPORT MODEL m FROM ?", [save(linear_model(np.eye(3, dtype=np.float32)), tmp_path / "s.onnx")])
        assert con.execute("SELECT count(*) FROM modelsql.models").fetchall() == [(1,)]


def test_disk_full_during_python_import_model_is_an_operational_error(tmp_path, small_disk):
    """The Python API's ``import_model`` and ``import_pipeline`` too: never a raw OSError."""
    path = str(small_disk / "full.duckdb")
    with modelsql.connect(path) as con:
        con.autocommit = True
        with pytest.raises(modelsql.OperationalError) as info:
            con.import_model("big", onnx.load(_big_model(tmp_path)))
        assert info.value.code == "disk_full" and "'big'" in str(info.value)
        assert con.execute("SELECT count(*) FROM modelsql.models").fetchall() == [(0,)]


def test_a_write_over_the_file_size_limit_keeps_the_old_file(db, tmp_path):
    """The same failure, injected at the kernel: RLIMIT_FSIZE makes ``write`` fail with EFBIG."""
    target = tmp_path / "out.onnx"
    target.write_bytes(b"the old export")
    big = _big_model(tmp_path)
    with modelsql.connect(db) as con:
        con.execute("IMPORT MODEL big FROM ?", [big])
    script = textwrap.dedent(f"""
        import resource, signal, modelsql
        con = modelsql.connect({db!r})
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))
        try:
            con.execute("EXPORT MODEL big TO ?", [{str(target)!r}])
        except modelsql.OperationalError as e:
            print(e.code)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "io_error", out.stderr
    assert target.read_bytes() == b"the old export"
    assert sorted(os.listdir(tmp_path)) == sorted(["big.onnx", "main.duckdb", "main.duckdb.blobs", "out.onnx",
                                                   "small.onnx"] + (["main.duckdb.wal"] if os.path.exists(db + ".wal") else []))


def test_export_keeps_the_replaced_files_mode_and_follows_a_link(db, tmp_path):
    real = tmp_path / "real.onnx"
    real.write_bytes(b"old")
    os.chmod(real, 0o640)
    link = tmp_path / "link.onnx"
    link.symlink_to(real)
    with modelsql.connect(db) as con:
        con.execute("EXPORT MODEL m TO ?", [str(link)])
    assert link.is_symlink() and (real.stat().st_mode & 0o777) == 0o640
    onnx.checker.check_model(onnx.load(str(real)))


@pytest.mark.timeout(30)
def test_export_to_a_fifo_or_a_directory_is_refused(db, tmp_path):
    fifo = tmp_path / "pipe.onnx"
    os.mkfifo(fifo)
    with modelsql.connect(db) as con:
        with pytest.raises(modelsql.OperationalError) as info:
            con.execute("EXPORT MODEL m TO ?", [str(fifo)])
        assert info.value.code == "export_target_not_a_file" and "FIFO" in str(info.value)
        with pytest.raises(modelsql.OperationalError) as info:
            con.execute("EXPORT MODEL m TO ?", [str(tmp_path)])
        assert info.value.code == "io_error" and "directory" in str(info.value)
    assert fifo.is_fifo()


# ---------------------------------------------------------------- item 13: EXPORT never destroys a database


def test_export_refuses_an_attached_database_and_hard_links_of_one(db, tmp_path):
    other = str(tmp_path / "att.duckdb")
    with modelsql.connect(other) as con:
        con.execute("CREATE TABLE keep AS SELECT 42 AS answer")
    os.link(db, tmp_path / "alias.onnx")
    os.link(other, tmp_path / "alias2.onnx")
    (tmp_path / "sub").mkdir()
    before = {p: hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in (db, other)}
    with modelsql.connect(db) as con:
        con.autocommit = True
        con.execute(f"ATTACH '{other}' AS att")
        for target in (other, tmp_path / "alias.onnx", tmp_path / "alias2.onnx", db,
                       tmp_path / "sub" / ".." / "att.duckdb", other + ".wal", db + ".wal"):
            for statement in ("EXPORT MODEL m TO ?", "EXPORT MODEL m VERSION 1 TO ?"):
                with pytest.raises(modelsql.ProgrammingError) as info:
                    con.execute(statement, [str(target)])
                assert info.value.code == "export_target_in_use"
        assert "att" in str(info.value) or "main" in str(info.value)
        con.execute("DETACH att")
    assert {p: hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in (db, other)} == before
    with modelsql.connect(other) as con:
        assert con.execute("SELECT answer FROM keep").fetchall() == [(42,)]


def test_export_refuses_the_store_by_identity(db, tmp_path):
    store = Path(db + ".blobs")
    blob = next(p for p in store.rglob("*") if p.is_file())
    os.link(blob, tmp_path / "blob.onnx")
    (tmp_path / "store_link").symlink_to(store)
    before = _tree(store)
    with modelsql.connect(db) as con:
        for target in (tmp_path / "blob.onnx", tmp_path / "store_link" / "x.onnx", store / "new.onnx", blob):
            with pytest.raises(modelsql.ProgrammingError) as info:
                con.execute("EXPORT MODEL m TO ?", [str(target)])
            assert info.value.code == "export_target_in_use"
    assert _tree(store) == before


# ---------------------------------------------------------------- item 14: IMPORT reads regular files only


_IMPORT_IN_A_CHILD = """
import resource, sys, modelsql
resource.setrlimit(resource.RLIMIT_DATA, (3 << 30, 3 << 30))  # a regression fails here, not the machine
con = modelsql.connect(":memory:")
for call in (lambda: con.execute("IMPORT MODEL z FROM ?", [sys.argv[1]]), lambda: con.import_model("z", sys.argv[1])):
    try:
        call()
    except modelsql.Error as e:
        print(type(e).__name__, e.code, sys.argv[1] in str(e))
print(con.execute("SELECT count(*) FROM modelsql.models").fetchall()[0][0])
"""


@pytest.mark.parametrize("kind", ["dev_zero", "fifo", "link_to_dev_zero"])
def test_import_refuses_what_is_not_a_regular_file(tmp_path, kind):
    """Run in a child process under a memory limit and a timeout, so that a regression (reading
    /dev/zero for ever, blocking on the FIFO) fails this test without hanging CI or filling memory."""
    source = {"dev_zero": "/dev/zero", "fifo": str(tmp_path / "pipe.onnx"),
              "link_to_dev_zero": str(tmp_path / "zero.onnx")}[kind]
    if kind == "fifo":
        os.mkfifo(source)
    elif kind == "link_to_dev_zero":
        os.symlink("/dev/zero", source)
    out = subprocess.run([sys.executable, "-c", _IMPORT_IN_A_CHILD, source], capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.split("\n") == ["ProgrammingError not_a_regular_file True"] * 2 + ["0", ""], out.stderr[-2000:]


@pytest.mark.timeout(30)
def test_import_refuses_an_external_data_file_that_is_a_fifo(tmp_path):
    folder = tmp_path / "ext"
    folder.mkdir()
    model = linear_model(np.ones((4, 4), dtype=np.float32))
    onnx.save_model(model, str(folder / "m.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights.bin", size_threshold=0)
    (folder / "weights.bin").unlink()
    os.mkfifo(folder / "weights.bin")
    with modelsql.connect(":memory:") as con:
        with pytest.raises(modelsql.ProgrammingError) as info:
            con.execute("IMPORT MODEL e FROM ?", [str(folder / "m.onnx")])
        assert info.value.code == "not_a_regular_file" and "weights.bin" in str(info.value)


def test_import_bounds_what_it_reads(tmp_path):
    from modelsql.storage.files import MAX_READ_BYTES

    huge = tmp_path / "huge.onnx"
    with open(huge, "wb") as f:
        f.truncate(MAX_READ_BYTES + 1)  # sparse: no disk used
    with modelsql.connect(":memory:") as con:
        with pytest.raises(modelsql.DataError) as info:
            con.execute("IMPORT MODEL h FROM ?", [str(huge)])
        assert info.value.code == "file_too_large" and "huge.onnx" in str(info.value)
        assert str(MAX_READ_BYTES) in str(info.value)


def test_a_regular_file_still_imports(tmp_path):
    path = save(linear_model(np.eye(2, dtype=np.float32)), tmp_path / f"{uuid.uuid4().hex}.onnx")
    with modelsql.connect(":memory:") as con:
        con.execute("IMPORT MODEL ok FROM ?", [path])
        con.execute("CREATE TABLE x AS SELECT [1.0, 2.0]::FLOAT[2] AS x")
        assert con.execute("SELECT y FROM PREDICT(MODEL ok, TABLE x)").fetchall() == [((1.0, 2.0),)]


# ---------------------------------------------------------------- item 10: EXPORT / IMPORT DATABASE carry the models


def _predict(con):
    return con.execute("SELECT y FROM PREDICT(MODEL m, TABLE x) ORDER BY ALL").fetchall()


@pytest.mark.parametrize("options", ["", " (FORMAT parquet)"])
def test_export_and_import_database_carry_the_models(tmp_path, options):
    src = str(tmp_path / "src.duckdb")
    with modelsql.connect(src) as con:
        con.execute("IMPORT MODEL m FROM ?", [save(linear_model(np.eye(2, dtype=np.float32) * 3), tmp_path / "a.onnx")])
        con.execute("CREATE OR REPLACE MODEL m FROM ?",
                    [save(linear_model(np.eye(2, dtype=np.float32) * 5), tmp_path / "b.onnx")])
        con.execute("CREATE TABLE x AS SELECT [1.0, 2.0]::FLOAT[2] AS x")
        con.execute("CREATE VIEW shown AS SELECT name, version FROM modelsql.models")
        expected = _predict(con)
        con.autocommit = True
        con.execute(f"EXPORT DATABASE '{tmp_path / 'dump'}'{options}")
    os.rename(tmp_path / "dump", tmp_path / "moved")  # the folder is self-contained
    os.remove(src)
    for p in Path(src + ".blobs").rglob("*"):
        if p.is_file():
            p.unlink()
    with modelsql.connect(str(tmp_path / "copy.duckdb")) as con:
        con.autocommit = True
        con.execute(f"IMPORT DATABASE '{tmp_path / 'moved'}'")
        assert _predict(con) == expected == [((5.0, 10.0),)]
        assert con.execute("SELECT * FROM shown").fetchall() == [("m", 2)]
        assert con.execute("SELECT y FROM PREDICT(MODEL m VERSION 1, TABLE x)").fetchall() == [((3.0, 6.0),)]
        with pytest.raises(modelsql.ProgrammingError) as info:  # a second import into a catalog with models
            con.execute(f"IMPORT DATABASE '{tmp_path / 'moved'}'")
        assert info.value.code == "import_target_not_empty"


def test_import_database_of_a_dump_without_the_blobs_is_refused_with_the_way_that_works(tmp_path):
    import duckdb

    src = str(tmp_path / "src.duckdb")
    with modelsql.connect(src) as con:
        con.execute("IMPORT MODEL m FROM ?", [save(linear_model(np.eye(2, dtype=np.float32)), tmp_path / "a.onnx")])
    raw = duckdb.connect(src)  # DuckDB's own export: the catalog tables, no blobs
    raw.execute(f"EXPORT DATABASE '{tmp_path / 'plain'}'")
    raw.close()
    with modelsql.connect(str(tmp_path / "copy.duckdb")) as con:
        con.autocommit = True
        with pytest.raises(modelsql.NotSupportedError) as info:
            con.execute(f"IMPORT DATABASE '{tmp_path / 'plain'}'")
        assert info.value.code == "export_without_store" and "EXPORT DATABASE" in str(info.value)
        assert con.execute("SELECT count(*) FROM modelsql.models").fetchall() == [(0,)]


def test_import_database_verifies_every_blob_and_changes_nothing_when_one_is_damaged(tmp_path):
    src = str(tmp_path / "src.duckdb")
    with modelsql.connect(src) as con:
        con.autocommit = True
        con.execute("IMPORT MODEL m FROM ?", [save(linear_model(np.eye(2, dtype=np.float32)), tmp_path / "a.onnx")])
        con.execute("CREATE TABLE keep AS SELECT 1 AS i")
        con.execute(f"EXPORT DATABASE '{tmp_path / 'dump'}'")
    blob = next(p for p in (tmp_path / "dump" / "modelsql" / "blobs").rglob("*") if p.is_file())
    blob.write_bytes(blob.read_bytes() + b"!")
    with modelsql.connect(str(tmp_path / "copy.duckdb")) as con:
        con.autocommit = True
        with pytest.raises(modelsql.DataError) as info:
            con.execute(f"IMPORT DATABASE '{tmp_path / 'dump'}'")
        assert info.value.code == "blob_corrupt"
        assert con.execute("SELECT count(*) FROM modelsql.models").fetchall() == [(0,)]
        assert con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'keep'").fetchall() == [(0,)]


def _dumped(tmp_path):
    src = str(tmp_path / "src.duckdb")
    with modelsql.connect(src) as con:
        con.autocommit = True
        con.execute("IMPORT MODEL m FROM ?", [save(linear_model(np.eye(2, dtype=np.float32)), tmp_path / "a.onnx")])
        con.execute(f"EXPORT DATABASE '{tmp_path / 'dump'}'")
    return tmp_path / "dump" / "modelsql"


def _import_refused(tmp_path, error, code):
    with modelsql.connect(str(tmp_path / "copy.duckdb")) as con:
        con.autocommit = True
        with pytest.raises(error) as info:
            con.execute(f"IMPORT DATABASE '{tmp_path / 'dump'}'")
        assert info.value.code == code, info.value
        assert con.execute("SELECT count(*) FROM modelsql.model_versions").fetchall() == [(0,)]


def test_import_database_with_blobs_missing_imports_nothing(tmp_path):
    for p in (_dumped(tmp_path) / "blobs").rglob("*"):
        if p.is_file():
            p.unlink()
    _import_refused(tmp_path, modelsql.DataError, "blob_missing")


@pytest.mark.parametrize("damage", ["deleted", "a_list", "other_tables"])
def test_import_database_with_a_damaged_manifest_imports_nothing(tmp_path, damage):
    manifest = _dumped(tmp_path) / "manifest.json"
    if damage == "deleted":
        manifest.unlink()
    elif damage == "a_list":
        manifest.write_text("[1, 2]")
    else:
        data = json.loads(manifest.read_text())
        manifest.write_text(json.dumps(dict(data, tables=["../../../etc/passwd"])))
    _import_refused(tmp_path, modelsql.OperationalError, "io_error" if damage == "a_list" else "bad_export")


def test_a_plain_dump_without_a_catalog_still_imports(tmp_path):
    import duckdb

    raw = duckdb.connect(str(tmp_path / "plain.duckdb"))
    raw.execute("CREATE TABLE t AS SELECT 7 AS i")
    raw.execute(f"EXPORT DATABASE '{tmp_path / 'plain'}'")
    raw.close()
    with modelsql.connect(str(tmp_path / "copy.duckdb")) as con:
        con.execute(f"IMPORT DATABASE '{tmp_path / 'plain'}'")
        assert con.execute("SELECT i FROM t").fetchall() == [(7,)]


def test_export_refuses_a_database_another_connection_of_the_process_has_open(tmp_path):
    """DuckDB's COPY TO refuses every database of its instance; EXPORT refuses those of other modelsql
    connections of this process too, until they close."""
    import torch

    a = modelsql.connect(str(tmp_path / "a.duckdb"))
    b = modelsql.connect(str(tmp_path / "b.duckdb"))
    a.import_model("m", torch.nn.Linear(2, 1), example_input=torch.zeros(1, 2))
    b.execute("CREATE TABLE keep AS SELECT 1 AS x")
    b.commit()
    with pytest.raises(modelsql.ProgrammingError) as e:
        a.execute(f"EXPORT MODEL m TO '{tmp_path / 'b.duckdb'}'")
    assert e.value.code == "export_target_in_use"
    assert b.execute("SELECT x FROM keep").fetchall() == [(1,)]
    b.close()
    a.execute(f"EXPORT MODEL m TO '{tmp_path / 'b.duckdb'}'")  # closed: an ordinary file to replace
    a.close()


def test_external_data_must_be_the_size_its_tensor_needs(tmp_path):
    """A tensor of 3 floats whose external file is 1 GiB (sparse) is refused before anything is read."""
    w = onnx.helper.make_tensor("W", onnx.TensorProto.FLOAT, [1, 3], [1.0, 2.0, 3.0])
    w.ClearField("float_data")
    w.data_location = onnx.TensorProto.EXTERNAL
    entry = w.external_data.add()
    entry.key, entry.value = "location", "w.bin"
    graph = onnx.helper.make_graph([onnx.helper.make_node("MatMul", ["x", "W"], ["y"])], "g",
                                   [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["n", 1])],
                                   [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["n", 3])], [w])
    path = tmp_path / "e.onnx"
    path.write_bytes(onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)]).SerializeToString())
    with open(tmp_path / "w.bin", "wb") as f:
        f.truncate(1 << 30)
    with modelsql.connect(":memory:") as con:
        with pytest.raises(modelsql.DataError) as info:
            con.execute("IMPORT MODEL e FROM ?", [str(path)])
        assert info.value.code == "invalid_onnx" and "needs 12" in str(info.value)
    (tmp_path / "w.bin").write_bytes(np.array([1, 2, 3], np.float32).tobytes())
    with modelsql.connect(":memory:") as con:
        con.execute("IMPORT MODEL e FROM ?", [str(path)])
        con.execute("CREATE TABLE x AS SELECT [2.0]::FLOAT[1] AS x")
        assert con.execute("SELECT y FROM PREDICT(MODEL e, TABLE x)").fetchall() == [((2.0, 4.0, 6.0),)]


def test_import_database_carries_the_evaluations_and_numbers_after_them(tmp_path):
    from sklearn.linear_model import LinearRegression

    src = str(tmp_path / "src.duckdb")
    with modelsql.connect(src) as con:
        con.autocommit = True
        con.execute("CREATE TABLE d AS SELECT range::DOUBLE AS a, 2 * range::DOUBLE + 1 AS y FROM range(20)")
        con.import_model("r", LinearRegression().fit(np.arange(20.0).reshape(-1, 1), 2 * np.arange(20.0) + 1))
        for _ in range(3):
            con.execute("EVALUATE MODEL r ON TABLE d TARGET y").fetchall()
        con.execute(f"EXPORT DATABASE '{tmp_path / 'dump'}'")
    with modelsql.connect(str(tmp_path / "copy.duckdb")) as con:
        con.autocommit = True
        con.execute(f"IMPORT DATABASE '{tmp_path / 'dump'}'")
        assert con.execute("SELECT list(evaluation ORDER BY evaluation) FROM modelsql.evaluations").fetchone() == (
            [1, 2, 3],)
        assert con.execute("EVALUATE MODEL r ON TABLE d TARGET y").fetchone()[0] == 4
