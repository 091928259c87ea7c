"""Tests of modelsql.catalog against real DuckDB files."""

from __future__ import annotations

import dataclasses
import datetime as dt

import duckdb
import pytest

from modelsql import errors
from modelsql.catalog import Catalog, ModelVersion, StoredTensor, TensorSpec, schema


def make_mv(name="digits", version=1, *, tensors=None, graph=None, **kw) -> ModelVersion:
    """A small model version; digests derive from the (lower-cased) name and version."""
    key = name.lower()
    graph = graph or f"g-{key}"
    if tensors is None:
        tensors = (
            StoredTensor("w", f"t-{key}-{version}-w", "FLOAT", (64, 10), 64 * 10 * 4),
            StoredTensor("b", f"t-{key}-{version}-b", "FLOAT", (10,), 40),
        )
    fields = dict(
        name=name,
        version=version,
        graph_digest=f"{graph}-{version}",
        graph_bytes=120,
        opset=17,
        inputs=(TensorSpec("input", "FLOAT", ("N", 64)), TensorSpec("mask", "BOOL", None)),
        outputs=(TensorSpec("label", "INT64", ("N",)), TensorSpec("probs", "FLOAT", ("N", None))),
        tensors=tensors,
        param_count=sum(_prod(t.dims) for t in tensors),
        source=f"{name}.onnx",
    )
    fields.update(kw)
    return ModelVersion(**fields)


def _prod(dims) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


def add(cat: Catalog, mv: ModelVersion) -> None:
    with cat.transaction():
        cat.add_version(mv, {})


@pytest.fixture
def db(tmp_path):
    return str(tmp_path / "test.duckdb")


@pytest.fixture
def con(db):
    c = duckdb.connect(db)
    yield c
    c.close()


@pytest.fixture
def cat(con):
    return Catalog(con)


# ---------------------------------------------------------------- create / open


def test_create_makes_schema_tables_views_and_comments(cat, con):
    assert cat.present
    assert con.execute("SELECT value FROM modelsql.meta WHERE key = 'schema_version'").fetchone() == (str(Catalog.SCHEMA_VERSION),)
    tables = dict(
        con.execute("SELECT table_name, comment FROM duckdb_tables() WHERE schema_name = 'modelsql'").fetchall()
    )
    assert set(tables) == set(schema.TABLES)
    assert all(tables.values()), tables
    views = dict(
        con.execute("SELECT view_name, comment FROM duckdb_views() WHERE schema_name = 'modelsql'").fetchall()
    )
    assert set(views) == set(schema.VIEWS)
    assert con.execute("SELECT * FROM modelsql.models").fetchall() == []
    assert con.execute("SELECT * FROM modelsql.storage").fetchall() == [(0, 0, 0, 0, None)]
    assert Catalog.SCHEMA_VERSION == 12


def test_reopen_keeps_models(db):
    con = duckdb.connect(db)
    add(Catalog(con), make_mv())
    con.close()
    con = duckdb.connect(db)
    cat = Catalog(con)
    assert cat.model_names() == ["digits"]
    assert cat.get("digits") == make_mv()
    con.close()


def test_catalog_lives_beside_user_tables(con, cat):
    con.execute("CREATE TABLE digits AS SELECT 1 AS x")
    add(cat, make_mv())
    assert con.execute("SELECT count(*) FROM digits").fetchone() == (1,)
    assert con.execute("SELECT name FROM modelsql.models").fetchall() == [("digits",)]


# ------------------------------------------------------------------------ reads


def test_round_trip_equality(cat):
    mv = make_mv(
        kind="sklearn",
        features=("a", "b", "c"),
        options=(("zeta", "1"), ("alpha", "x y")),
        created_at=dt.datetime(2024, 5, 1, 12, 30, tzinfo=dt.timezone.utc),
    )
    add(cat, mv)
    got = cat.get("digits", 1)
    assert got == mv
    assert got.options == (("zeta", "1"), ("alpha", "x y"))  # order kept
    assert got.created_at == mv.created_at
    assert got.created_at.tzinfo is not None and got.created_at.utcoffset() == dt.timedelta(0)
    assert got.logical_bytes == mv.logical_bytes


def test_round_trip_edge_values(cat):
    mv = make_mv(
        tensors=(),
        inputs=(TensorSpec("scalar", "FLOAT", ()), TensorSpec("x", "STRING", (None, "batch", 0))),
        outputs=(),
        features=(),
        param_count=0,
    )
    add(cat, mv)
    got = cat.get("digits")
    assert got == mv
    assert got.features == ()
    assert make_mv(name="other").features is None
    add(cat, make_mv(name="other"))
    assert cat.get("other").features is None


def test_created_at_excluded_from_eq_and_defaults_to_now(cat):
    before = dt.datetime.now(dt.timezone.utc)
    add(cat, make_mv())
    got = cat.get("digits")
    assert got == make_mv(created_at=dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc))
    assert before - dt.timedelta(seconds=5) <= got.created_at <= dt.datetime.now(dt.timezone.utc)


def test_case_insensitive_names(cat):
    add(cat, make_mv(name="Digits_MLP"))
    assert cat.model_names() == ["digits_mlp"]
    assert cat.exists("DIGITS_mlp")
    assert cat.versions("DiGiTs_MlP") == [1]
    got = cat.get("DIGITS_MLP")
    assert got.name == "digits_mlp"
    assert got == dataclasses.replace(make_mv(name="Digits_MLP"), name="digits_mlp")
    assert cat.next_version("digits_MLP") == 2


def test_versions_latest_and_next(cat):
    assert cat.next_version("digits") == 1
    assert cat.versions("digits") == []
    assert not cat.exists("digits")
    for v in (1, 2, 3):
        add(cat, make_mv(version=v, opset=10 + v))
    assert cat.versions("digits") == [1, 2, 3]
    assert cat.get("digits").version == 3
    assert cat.get("digits").opset == 13
    assert cat.get("digits", 2).opset == 12
    assert cat.next_version("digits") == 4


def test_model_not_found_did_you_mean(cat):
    add(cat, make_mv(name="digits_mlp"))
    with pytest.raises(errors.ProgrammingError) as ei:
        cat.get("digits_mpl")
    assert ei.value.code == "model_not_found"
    assert str(ei.value) == 'Model "digits_mpl" does not exist. Did you mean "digits_mlp"?'
    with pytest.raises(errors.ProgrammingError) as ei:
        cat.get("zzz")
    assert str(ei.value) == 'Model "zzz" does not exist.'


def test_version_not_found_lists_versions(cat):
    add(cat, make_mv(version=1))
    add(cat, make_mv(version=2))
    for missing in (7, 2**31, 10**40):  # (numbers past the version column's type too)
        with pytest.raises(errors.ProgrammingError) as ei:
            cat.get("digits", missing)
        assert ei.value.code == "version_not_found"
        assert "1, 2" in str(ei.value) and str(missing) in str(ei.value)


def test_invalid_arguments(cat):
    with pytest.raises(errors.ProgrammingError) as ei:
        cat.get("")
    assert ei.value.code == "invalid_name"
    add(cat, make_mv())
    with pytest.raises(errors.ProgrammingError) as ei:
        cat.get("digits", "1")
    assert ei.value.code == "invalid_version"


def test_referenced_digests_and_blob_sizes(cat):
    add(cat, make_mv())
    mv = make_mv()
    expected = {mv.graph_digest} | {t.digest for t in mv.tensors}
    assert cat.referenced_digests() == expected
    assert cat.blob_sizes() == {mv.graph_digest: 120, "t-digits-1-w": 2560, "t-digits-1-b": 40}


# ----------------------------------------------------------------------- writes


def test_add_version_must_be_next(cat):
    with pytest.raises(errors.IntegrityError) as ei:
        add(cat, make_mv(version=2))
    assert ei.value.code == "version_conflict"
    add(cat, make_mv(version=1))
    with pytest.raises(errors.IntegrityError) as ei:
        add(cat, make_mv(version=1))
    assert ei.value.code == "version_conflict"
    assert cat.versions("digits") == [1]


def test_add_version_blob_kinds(cat, con):
    mv = make_mv()
    with cat.transaction():
        cat.add_version(mv, {mv.graph_digest: "graph", "t-digits-1-w": "tensor", "unrelated": "tensor"})
    kinds = dict(con.execute("SELECT digest, kind FROM modelsql.blobs").fetchall())
    assert kinds == {mv.graph_digest: "graph", "t-digits-1-w": "tensor", "t-digits-1-b": "tensor"}
    with pytest.raises(errors.ProgrammingError) as ei:
        cat.add_version(make_mv(version=2), {"x": "weights"})
    assert ei.value.code == "invalid_blob_kind"


def test_add_version_blob_size_mismatch(cat):
    shared = StoredTensor("w", "shared", "FLOAT", (4,), 16)
    add(cat, make_mv(name="a", tensors=(shared,)))
    bad = StoredTensor("w", "shared", "FLOAT", (8,), 32)
    with pytest.raises(errors.IntegrityError) as ei:
        add(cat, make_mv(name="b", tensors=(bad,)))
    assert ei.value.code == "blob_size_mismatch"
    assert not cat.exists("b")


def test_same_tensor_twice_in_one_model(cat):
    t = StoredTensor("w1", "same", "FLOAT", (4,), 16)
    mv = make_mv(tensors=(t, StoredTensor("w2", "same", "FLOAT", (4,), 16)))
    add(cat, mv)
    assert cat.get("digits") == mv
    assert cat.blob_sizes()["same"] == 16


def test_empty_symbolic_dims_read_back_unknown(cat):
    add(cat, make_mv(inputs=(TensorSpec("x", "FLOAT", ("", "?", "N")),)))
    assert cat.get("digits").inputs == (TensorSpec("x", "FLOAT", (None, None, "N")),)


def test_invalid_symbolic_dims_rejected(cat):
    for dim in ("3", "-1", True, 2.5):
        mv = make_mv(inputs=(TensorSpec("x", "FLOAT", (dim,)),))
        with pytest.raises(errors.DataError) as ei:
            add(cat, mv)
        assert ei.value.code == "invalid_shape"
    assert cat.model_names() == []


def test_duplicate_options_rejected(cat):
    with pytest.raises(errors.ProgrammingError) as ei:
        add(cat, make_mv(options=(("a", "1"), ("a", "2"))))
    assert ei.value.code == "duplicate_option"


def test_drop_one_version(cat, con):
    add(cat, make_mv(version=1))
    add(cat, make_mv(version=2))
    with cat.transaction():
        assert cat.drop("DIGITS", 1) == 1
    assert cat.versions("digits") == [2]
    for table in ("model_inputs", "model_outputs", "model_tensors", "model_versions"):
        assert con.execute(f"SELECT DISTINCT version FROM modelsql.{table}").fetchall() == [(2,)]
    assert "t-digits-1-w" not in cat.blob_sizes()
    assert "t-digits-2-w" in cat.blob_sizes()


def test_drop_whole_model_and_orphaned_blobs(cat, con):
    shared = StoredTensor("emb", "shared-emb", "FLOAT", (100, 8), 3200)
    add(cat, make_mv(name="a", tensors=(shared,)))
    add(cat, make_mv(name="a", version=2, tensors=(shared,)))
    add(cat, make_mv(name="b", tensors=(shared,)))
    with cat.transaction():
        assert cat.drop("a") == 2
    assert cat.model_names() == ["b"]
    assert "shared-emb" in cat.blob_sizes()  # b still references it
    with cat.transaction():
        assert cat.drop("b") == 1
    assert cat.model_names() == []
    assert cat.blob_sizes() == {}
    for table in schema.TABLES[1:]:
        if table != "version_marks":
            assert con.execute(f"SELECT count(*) FROM modelsql.{table}").fetchone() == (0,)
    # a dropped name's numbers are never given again: a pinned VERSION 1 never means another model
    assert cat.next_version("a") == 3
    add(cat, make_mv(name="a", version=3, tensors=(shared,)))
    assert cat.get("a").version == 3


def test_drop_and_readd_in_one_transaction(cat):
    add(cat, make_mv())
    with cat.transaction():
        cat.drop("digits")
        cat.add_version(make_mv(version=2, opset=9), {})  # a dropped number is not given again
    assert cat.get("digits").opset == 9 and cat.versions("digits") == [2]


def test_get_hands_out_a_version_read_before_only_while_its_row_is_the_same(cat, con):
    """A version read once is handed out again (its stamp read, not the whole version), and never after a
    rolled-back version's number was written again with other content."""
    add(cat, make_mv())
    first = cat.get("digits", 1)
    assert cat.get("DIGITS") is first and cat.get("digits", 1) is first
    con.execute("BEGIN TRANSACTION")
    cat.add_version(make_mv(version=2, opset=9), {})
    assert cat.get("digits").opset == 9 and cat.get("digits", 2).opset == 9
    con.execute("ROLLBACK")
    assert cat.get("digits") is first
    with pytest.raises(errors.ProgrammingError, match="has no version 2"):
        cat.get("digits", 2)
    add(cat, make_mv(version=2, opset=11, graph="other"))
    assert cat.get("digits").opset == 11 and cat.get("digits", 2).graph_digest == "other-2"


def test_drop_missing(cat):
    with pytest.raises(errors.ProgrammingError) as ei:
        cat.drop("nope")
    assert ei.value.code == "model_not_found"
    assert cat.drop("nope", missing_ok=True) == 0
    add(cat, make_mv())
    with pytest.raises(errors.ProgrammingError) as ei:
        cat.drop("digits", 5)
    assert ei.value.code == "version_not_found"
    assert cat.drop("digits", 5, missing_ok=True) == 0
    assert cat.versions("digits") == [1]


def test_forget_blobs(cat, con):
    add(cat, make_mv())
    con.execute("INSERT INTO modelsql.blobs VALUES ('orphan', 5, 'tensor')")
    with pytest.raises(errors.IntegrityError) as ei:
        cat.forget_blobs(["orphan", "t-digits-1-w"])
    assert ei.value.code == "blob_in_use"
    assert "orphan" in cat.blob_sizes()
    assert cat.forget_blobs(["orphan", "never-registered"]) == 1
    assert "orphan" not in cat.blob_sizes()
    assert cat.forget_blobs([]) == 0


# ------------------------------------------------------------------------ views


def test_models_view(cat, con):
    add(cat, make_mv(name="b_model", version=1))
    add(cat, make_mv(name="b_model", version=2, opset=18))
    add(cat, make_mv(name="a_model", kind="torch", source="torch:Net"))
    rows = con.execute(
        "SELECT name, version, versions, kind, source, inputs, outputs, opset, param_count, logical_bytes "
        "FROM modelsql.models ORDER BY name"
    ).fetchall()
    mv = make_mv()
    assert rows == [
        ("a_model", 1, 1, "torch", "torch:Net", "input: FLOAT[N, 64], mask: BOOL",
         "label: INT64[N], probs: FLOAT[N, ?]", 17, 650, mv.logical_bytes),
        ("b_model", 2, 2, "onnx", "b_model.onnx", "input: FLOAT[N, 64], mask: BOOL",
         "label: INT64[N], probs: FLOAT[N, ?]", 18, 650, mv.logical_bytes),
    ]
    cols = [d[0] for d in con.execute("SELECT * FROM modelsql.models").description]
    assert cols == ["name", "version", "versions", "kind", "source", "inputs", "outputs", "opset",
                    "param_count", "logical_bytes", "features", "batch_dependent", "created_at", "fingerprint",
                    "aliases"]


def test_storage_view_dedup(cat, con):
    shared = StoredTensor("emb", "shared-emb", "FLOAT", (1000, 16), 64000)
    add(cat, make_mv(name="a", tensors=(shared, StoredTensor("h", "a-head", "FLOAT", (16,), 64))))
    add(cat, make_mv(name="b", tensors=(shared, StoredTensor("h", "b-head", "FLOAT", (16,), 64))))
    add(cat, make_mv(name="b", version=2, tensors=(shared, StoredTensor("h", "b-head", "FLOAT", (16,), 64))))
    models, versions, logical, stored, ratio = con.execute("SELECT * FROM modelsql.storage").fetchone()
    assert (models, versions) == (2, 3)
    assert logical == 3 * 120 + 3 * (64000 + 64)
    # graphs g-a-1, g-b-1, g-b-2 are distinct; the embedding and b-head are shared
    assert stored == 3 * 120 + 64000 + 64 + 64
    assert stored < logical
    assert ratio == pytest.approx(logical / stored)
    assert stored == sum(cat.blob_sizes().values())


def test_show_models_sql(cat, con):
    add(cat, make_mv(name="zeta"))
    add(cat, make_mv(name="alpha"))
    cur = con.execute(cat.show_models_sql())
    assert [d[0] for d in cur.description] == [
        "name", "version", "versions", "kind", "inputs", "outputs", "features", "param_count", "logical_bytes",
        "created_at", "aliases",
    ]
    rows = cur.fetchall()
    assert [r[0] for r in rows] == ["alpha", "zeta"]
    assert rows[0][4] == "input: FLOAT[N, 64], mask: BOOL"


def test_describe_model_sql(cat, con):
    add(cat, make_mv(version=1))
    add(cat, make_mv(version=2, outputs=(TensorSpec("y", "DOUBLE", (1,)),)))
    sql, params = cat.describe_model_sql("DIGITS")
    cur = con.execute(sql, params)
    assert [d[0] for d in cur.description] == ["role", "position", "name", "elem_type", "shape", "detail"]
    assert cur.fetchall() == [
        ("input", 0, "input", "FLOAT", "[N, 64]", None),
        ("input", 1, "mask", "BOOL", None, None),
        ("output", 0, "y", "DOUBLE", "[1]", None),
        ("property", 0, "version", None, None, "2"),
        ("property", 1, "aliases", None, None, None),
        ("property", 2, "features", None, None, None),
        ("property", 3, "batch_dependence", None, None, "none"),
        ("property", 4, "conversion_check", None, None, None),
    ]
    cat.aliases.set("digits", "champion", 2)
    cat.aliases.set("digits", "challenger", 2)
    assert ("property", 1, "aliases", None, None, "challenger, champion") in con.execute(sql, params).fetchall()
    sql, params = cat.describe_model_sql("digits", 1)
    outputs = [r for r in con.execute(sql, params).fetchall() if r[0] == "output"]
    assert outputs[-1] == ("output", 1, "probs", "FLOAT", "[N, ?]", None)
    with pytest.raises(errors.ProgrammingError) as ei:
        cat.describe_model_sql("digit")
    assert ei.value.code == "model_not_found"


def test_views_work_when_attached_under_another_name(db, tmp_path):
    con = duckdb.connect(db)
    add(Catalog(con), make_mv())
    con.close()
    other = duckdb.connect(str(tmp_path / "other.duckdb"))
    other.execute(f"ATTACH '{db}' AS mine")
    assert other.execute("SELECT name FROM mine.modelsql.models").fetchall() == [("digits",)]
    assert other.execute("SELECT models FROM mine.modelsql.storage").fetchall() == [(1,)]
    other.close()


# -------------------------------------------------------- versions / migrations


def _set_version(db, value):
    con = duckdb.connect(db)
    Catalog(con)
    con.execute("UPDATE modelsql.meta SET value = ? WHERE key = 'schema_version'", [value])
    con.close()


def test_newer_schema_version_is_refused(db):
    newer = Catalog.SCHEMA_VERSION + 1
    _set_version(db, str(newer))
    con = duckdb.connect(db)
    with pytest.raises(errors.OperationalError) as ei:
        Catalog(con)
    assert ei.value.code == "catalog_version_unsupported"
    msg = str(ei.value)
    assert str(newer) in msg and str(newer - 1) in msg and "Upgrade modelsql" in msg
    con.close()


def test_migration_runs_for_older_version(db, monkeypatch):
    last = Catalog.SCHEMA_VERSION - 1
    _set_version(db, str(last))
    calls = []

    def migrate_to_current(con):
        calls.append(con)
        con.execute("INSERT INTO modelsql.meta VALUES ('migrated', 'yes')")

    monkeypatch.setitem(schema.MIGRATIONS, last, migrate_to_current)
    con = duckdb.connect(db)
    cat = Catalog(con)
    assert calls == [con]
    assert cat.present
    assert dict(con.execute("SELECT * FROM modelsql.meta").fetchall()) == {
        "schema_version": str(Catalog.SCHEMA_VERSION), "migrated": "yes"
    }
    Catalog(con)  # already current: no second run
    assert len(calls) == 1
    con.close()


def _to_schema_11(con) -> None:
    """Take a current catalog back to schema 11: the models view without aliases."""
    con.execute("DROP VIEW modelsql.models")
    con.execute(schema._MODELS_VIEW_V4.format(s="modelsql"))
    con.execute("UPDATE modelsql.meta SET value = '11' WHERE key = 'schema_version'")


def _to_schema_10(con) -> None:
    """Take a current catalog back to schema 10: no origins, tags or lineage view."""
    _to_schema_11(con)
    con.execute("DROP VIEW modelsql.lineage")
    con.execute("DROP TABLE modelsql.model_origins")
    con.execute("DROP TABLE modelsql.model_tags")
    con.execute("UPDATE modelsql.meta SET value = '10' WHERE key = 'schema_version'")


def _to_schema_9(con) -> None:
    """Take a current catalog back to schema 9: no evaluations (and no sequence numbering them)."""
    _to_schema_10(con)
    con.execute("DROP TABLE modelsql.evaluations")
    con.execute("DROP SEQUENCE modelsql.evaluation_numbers")
    con.execute("DROP TABLE modelsql.model_aliases")
    con.execute("UPDATE modelsql.meta SET value = '9' WHERE key = 'schema_version'")


def _to_schema_8(con) -> None:
    """Take a current catalog back to schema 8: no version marks, no study owners."""
    _to_schema_9(con)
    con.execute("DROP TABLE modelsql.version_marks")
    for column in ("owner_host", "owner_start", "heartbeat_at"):
        con.execute(f"ALTER TABLE modelsql.studies DROP COLUMN {column}")
    con.execute("UPDATE modelsql.meta SET value = '8' WHERE key = 'schema_version'")


def _to_schema_7(con) -> None:
    """Take a current catalog back to schema 7: no code signatures."""
    _to_schema_8(con)
    con.execute("DROP TABLE modelsql.code_signatures")
    con.execute("UPDATE modelsql.meta SET value = '7' WHERE key = 'schema_version'")


def _to_schema_6(con) -> None:
    """Take a current catalog back to schema 6: traces without features; no operator times, compiled
    artifacts or cost-model fits."""
    _to_schema_7(con)
    for table in ("trace_operators", "compiled", "cost_models"):
        con.execute(f"DROP TABLE modelsql.{table}")
    con.execute("ALTER TABLE modelsql.traces DROP COLUMN features")
    con.execute("UPDATE modelsql.meta SET value = '6' WHERE key = 'schema_version'")


def _to_schema_5(con) -> None:
    """Take a current catalog back to schema 5: no traces."""
    _to_schema_6(con)
    con.execute("DROP TABLE modelsql.traces")
    con.execute("UPDATE modelsql.meta SET value = '5' WHERE key = 'schema_version'")


def _to_schema_4(con) -> None:
    """Take a current catalog back to schema 4: no trainables, studies, trials or stages."""
    _to_schema_5(con)
    con.execute("DROP VIEW modelsql.trainables")
    for table in ("trainable_versions", "studies", "trials", "stages"):
        con.execute(f"DROP TABLE modelsql.{table}")
    con.execute("UPDATE modelsql.meta SET value = '4' WHERE key = 'schema_version'")


def _to_schema_3(con) -> None:
    """Take a current catalog back to schema 3: no fingerprints, families or merged graphs."""
    _to_schema_4(con)
    con.execute("DROP VIEW modelsql.families")
    con.execute("DROP TABLE modelsql.merged_graphs")
    con.execute("DROP VIEW modelsql.models")
    con.execute("ALTER TABLE modelsql.model_versions DROP COLUMN fingerprint")
    for column in ("flops", "conv_flops", "gemm_flops", "nodes"):
        con.execute(f"ALTER TABLE modelsql.model_versions DROP COLUMN {column}")
    con.execute(schema._MODELS_VIEW_V2.format(s="modelsql"))
    con.execute("UPDATE modelsql.meta SET value = '3' WHERE key = 'schema_version'")


def _to_schema_2(con) -> None:
    """Take a current catalog back to schema 2: no pipelines, no content digests."""
    _to_schema_3(con)
    con.execute("DROP VIEW modelsql.pipelines")
    for table in ("pipeline_versions", "pipeline_steps", "pipeline_feeds"):
        con.execute(f"DROP TABLE modelsql.{table}")
    con.execute("DROP VIEW modelsql.models")
    con.execute("ALTER TABLE modelsql.model_versions DROP COLUMN content_digest")
    con.execute((schema._MODELS_VIEW_V2).format(s="modelsql"))
    con.execute("UPDATE modelsql.meta SET value = '2' WHERE key = 'schema_version'")


def test_real_migration_from_schema_1(db):
    """A catalog of schema 1 (no batch_dependence / check columns, the old models view) opens as
    schema 3: its versions are marked not analysed, so PREDICT runs them one row at a time."""
    con = duckdb.connect(db)
    add(Catalog(con), make_mv(name="old"))
    _to_schema_2(con)
    con.execute("DROP VIEW modelsql.models")
    for column in ("batch_dependence", "check_rows", "check_max_abs_diff", "check_label_mismatches"):
        con.execute(f"ALTER TABLE modelsql.model_versions DROP COLUMN {column}")
    con.execute("CREATE VIEW modelsql.models AS SELECT name FROM modelsql.model_versions")
    con.execute("UPDATE modelsql.meta SET value = '1' WHERE key = 'schema_version'")
    cat = Catalog(con)
    assert cat.get("old").batch_dependence == schema.NOT_ANALYSED
    assert con.execute("SELECT name, batch_dependent FROM modelsql.models").fetchall() == [("old", True)]
    assert con.execute("SELECT value FROM modelsql.meta WHERE key = 'schema_version'").fetchone() == (str(Catalog.SCHEMA_VERSION),)
    con.close()


def test_real_migration_from_schema_2(db):
    """A catalog of schema 2 opens as schema 3: pipeline tables and view appear, its versions have
    no content digest (never recognised as identical to another), and new models get one."""
    con = duckdb.connect(db)
    add(Catalog(con), make_mv(name="old"))
    _to_schema_2(con)
    cat = Catalog(con)
    assert cat.get("old").content_digest is None
    assert con.execute("SELECT count(*) FROM modelsql.pipelines").fetchone() == (0,)
    assert con.execute("SELECT value FROM modelsql.meta WHERE key = 'schema_version'").fetchone() == (str(Catalog.SCHEMA_VERSION),)
    con.close()


def test_real_migration_from_schema_3(db):
    """A catalog of schema 3 opens as schema 4: models shows a fingerprint column (NULL for the old
    versions: in no family), families and merged_graphs appear, and new versions get one."""
    con = duckdb.connect(db)
    add(Catalog(con), make_mv(name="old"))
    _to_schema_3(con)
    assert "fingerprint" not in [r[0] for r in con.execute("DESCRIBE modelsql.models").fetchall()]
    cat = Catalog(con)
    assert cat.get("old").fingerprint is None
    assert con.execute("SELECT name, fingerprint FROM modelsql.models").fetchall() == [("old", None)]
    assert con.execute("SELECT count(*) FROM modelsql.families").fetchone() == (0,)
    assert con.execute("SELECT count(*) FROM modelsql.merged_graphs").fetchone() == (0,)
    add(cat, make_mv(name="new", fingerprint="f" * 64))
    assert con.execute("SELECT family, models FROM modelsql.families").fetchall() == [("new", 1)]
    assert con.execute("SELECT value FROM modelsql.meta WHERE key = 'schema_version'").fetchone() == (str(Catalog.SCHEMA_VERSION),)
    con.close()


def test_real_migration_from_schema_4(db):
    """A catalog of schema 4 opens as schema 5: the study tables and the trainables view appear, empty,
    and the models stay as they were."""
    con = duckdb.connect(db)
    add(Catalog(con), make_mv(name="old"))
    _to_schema_4(con)
    assert con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'studies'").fetchone() == (0,)
    cat = Catalog(con)
    assert cat.get("old").name == "old"
    for table in ("trainables", "studies", "trials", "stages"):
        assert con.execute(f"SELECT count(*) FROM modelsql.{table}").fetchone() == (0,)
    assert con.execute("SELECT value FROM modelsql.meta WHERE key = 'schema_version'").fetchone() == (str(Catalog.SCHEMA_VERSION),)
    con.close()


def test_real_migration_from_schema_5(db):
    """A catalog of schema 5 opens as schema 7: the traces table appears, empty."""
    con = duckdb.connect(db)
    add(Catalog(con), make_mv(name="old"))
    _to_schema_5(con)
    Catalog(con)
    assert con.execute("SELECT count(*) FROM modelsql.traces").fetchone() == (0,)
    assert con.execute("SELECT value FROM modelsql.meta WHERE key = 'schema_version'").fetchone() == (str(Catalog.SCHEMA_VERSION),)
    con.close()


def test_failed_migration_rolls_back(db, monkeypatch):
    _set_version(db, "0")

    def broken(con):
        con.execute("INSERT INTO modelsql.meta VALUES ('half', 'done')")
        con.execute("SELECT * FROM no_such_table")

    monkeypatch.setitem(schema.MIGRATIONS, 0, broken)
    con = duckdb.connect(db)
    with pytest.raises(errors.ProgrammingError) as ei:
        Catalog(con)
    assert not isinstance(ei.value, duckdb.Error)
    assert dict(con.execute("SELECT * FROM modelsql.meta").fetchall()) == {"schema_version": "0"}
    con.close()


def test_missing_migration(db):
    _set_version(db, "-3")
    con = duckdb.connect(db)
    with pytest.raises(errors.InternalError) as ei:
        Catalog(con)
    assert ei.value.code == "catalog_migration_missing"
    con.close()


def test_older_version_read_only_needs_migration(db, monkeypatch):
    _set_version(db, "0")
    monkeypatch.setitem(schema.MIGRATIONS, 0, lambda con: None)
    con = duckdb.connect(db, read_only=True)
    with pytest.raises(errors.OperationalError) as ei:
        Catalog(con, read_only=True)
    assert ei.value.code == "catalog_migration_required"
    con.close()


def test_schema_without_meta_is_corrupt(con):
    con.execute("CREATE SCHEMA modelsql; CREATE TABLE modelsql.something(x INT)")
    with pytest.raises(errors.OperationalError) as ei:
        Catalog(con)
    assert ei.value.code == "catalog_corrupt"


@pytest.mark.parametrize("value", ["one", None, ""])
def test_unparseable_version_is_corrupt(db, value):
    _set_version(db, value)
    con = duckdb.connect(db)
    with pytest.raises(errors.OperationalError) as ei:
        Catalog(con)
    assert ei.value.code == "catalog_corrupt"
    con.close()


def test_missing_version_row_is_corrupt(db):
    con = duckdb.connect(db)
    Catalog(con)
    con.execute("DELETE FROM modelsql.meta")
    with pytest.raises(errors.OperationalError) as ei:
        Catalog(con)
    assert ei.value.code == "catalog_corrupt"
    con.close()


def test_missing_table_is_corrupt(db):
    con = duckdb.connect(db)
    Catalog(con)
    con.execute("DROP VIEW modelsql.models")
    with pytest.raises(errors.OperationalError) as ei:
        Catalog(con)
    assert ei.value.code == "catalog_corrupt"
    assert "modelsql.models" in str(ei.value)
    con.close()


# -------------------------------------------------------------------- read-only


def test_read_only_without_catalog_is_empty(db):
    duckdb.connect(db).close()  # an empty database file
    con = duckdb.connect(db, read_only=True)
    cat = Catalog(con, read_only=True)
    assert not cat.present
    assert cat.model_names() == []
    assert not cat.exists("x")
    assert cat.versions("x") == []
    assert cat.referenced_digests() == set()
    assert cat.blob_sizes() == {}
    with pytest.raises(errors.ProgrammingError) as ei:
        cat.get("x")
    assert ei.value.code == "model_not_found"
    cur = con.execute(cat.show_models_sql())
    assert cur.fetchall() == []
    assert len(cur.description) == 11  # name ... created_at, aliases
    with pytest.raises(errors.OperationalError) as ei:
        cat.add_version(make_mv(), {})
    assert ei.value.code == "read_only"
    con.close()


def test_read_only_flag_on_writable_connection_creates_nothing(con):
    cat = Catalog(con, read_only=True)
    assert not cat.present
    assert con.execute("SELECT count(*) FROM duckdb_schemas() WHERE schema_name = 'modelsql'").fetchone() == (0,)


def test_read_only_connection_implies_read_only(db):
    duckdb.connect(db).close()
    con = duckdb.connect(db, read_only=True)
    cat = Catalog(con)  # read_only not passed: detected from the connection
    assert cat.read_only and not cat.present
    con.close()


def test_read_only_with_catalog(db):
    con = duckdb.connect(db)
    add(Catalog(con), make_mv())
    con.close()
    con = duckdb.connect(db, read_only=True)
    cat = Catalog(con, read_only=True)
    assert cat.present
    assert cat.get("digits") == make_mv()
    assert con.execute(cat.show_models_sql()).fetchall()[0][0] == "digits"
    for write in (
        lambda: cat.add_version(make_mv(version=2), {}),
        lambda: cat.drop("digits"),
        lambda: cat.forget_blobs(["x"]),
    ):
        with pytest.raises(errors.OperationalError) as ei:
            write()
        assert ei.value.code == "read_only"
    con.close()


# ----------------------------------------------------------------- transactions


def test_transaction_rollback_leaves_nothing(cat, con):
    add(cat, make_mv(name="kept"))
    with pytest.raises(RuntimeError):
        with cat.transaction():
            cat.add_version(make_mv(), {})
            cat.drop("kept")
            assert cat.exists("digits")
            raise RuntimeError("boom")
    assert cat.model_names() == ["kept"]
    assert set(cat.blob_sizes()) == cat.referenced_digests() == {
        "g-kept-1", "t-kept-1-w", "t-kept-1-b"
    }
    for table in ("model_inputs", "model_outputs", "model_tensors"):
        assert con.execute(f"SELECT DISTINCT name FROM modelsql.{table}").fetchall() == [("kept",)]


def test_transaction_rollback_after_catalog_error(cat):
    with pytest.raises(errors.IntegrityError):
        with cat.transaction():
            cat.add_version(make_mv(), {})
            cat.add_version(make_mv(), {})  # version 1 again: version_conflict
    assert cat.model_names() == []
    add(cat, make_mv())  # the connection is usable again
    assert cat.model_names() == ["digits"]


def test_transaction_joins_callers_transaction(cat, con):
    con.execute("BEGIN TRANSACTION")
    with cat.transaction():
        cat.add_version(make_mv(), {})
    assert cat.exists("digits")  # not committed yet, visible inside
    con.execute("ROLLBACK")
    assert not cat.exists("digits")


def test_catalog_opened_inside_callers_transaction(db):
    con = duckdb.connect(db)
    con.execute("BEGIN TRANSACTION")
    cat = Catalog(con)
    assert cat.present
    con.execute("COMMIT")
    assert Catalog(con).present
    con.close()


def test_duckdb_errors_are_converted(cat, con):
    add(cat, make_mv())
    con.execute("DROP TABLE modelsql.model_tensors")
    with pytest.raises(errors.ProgrammingError) as ei:
        cat.get("digits")
    err = ei.value
    assert not isinstance(err, duckdb.Error)
    assert err.__cause__ is None and err.__suppress_context__
    assert err.code == "catalog_object_missing"
    assert "model_tensors" in str(err)


def test_write_write_conflict_is_operational_error(db):
    con1 = duckdb.connect(db)
    cat1 = Catalog(con1)
    add(cat1, make_mv())
    con2 = con1.cursor()  # another connection to the same database
    cat2 = Catalog(con2)
    with pytest.raises(errors.OperationalError) as ei:
        with cat1.transaction():
            cat1.drop("digits")
            with cat2.transaction():
                cat2.drop("digits")
    assert not isinstance(ei.value, duckdb.Error)
    assert ei.value.code == "transaction_error"
    assert cat1.model_names() == cat2.model_names() == ["digits"]  # both rolled back
    con1.close()


def test_many_tensors(cat):
    tensors = tuple(StoredTensor(f"w{i}", f"d{i}", "FLOAT", (i, 2), i * 8) for i in range(2000))
    mv = make_mv(tensors=tensors)
    add(cat, mv)
    assert cat.get("digits") == mv
    assert len(cat.blob_sizes()) == 2001


def test_version_numbers_are_never_reused(tmp_path):
    import numpy as np
    import sys

    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parents[1]))
    import modelsql
    from conftest import linear_model

    con = modelsql.connect(str(tmp_path / "v.duckdb"))
    m = linear_model(np.ones((3, 1), dtype=np.float32))
    con.import_model("m", m)
    con.import_model("m", m, replace=True)
    con.execute("DROP MODEL m VERSION 2")
    assert con.import_model("m", m, replace=True).version == 3
    con.execute("DROP MODEL m VERSION 1")
    assert con.import_model("m", m, replace=True).version == 4
    assert [v for (v,) in con.execute("SELECT version FROM modelsql.model_versions ORDER BY version").fetchall()] == [3, 4]
    con.execute("DROP MODEL m")
    assert con.import_model("m", m).version == 5  # nor after the whole model is dropped (issue 21, item 4)
    assert con.import_model("m", m, replace=True).version == 6
    con.close()


def test_real_migration_from_schema_6(db):
    """A catalog of schema 6 opens as schema 7: its traces are kept (features NULL), and the operator,
    compiled-artifact and cost-model tables appear, empty."""
    con = duckdb.connect(db)
    cat = Catalog(con)
    add(cat, make_mv(name="old"))
    from modelsql.catalog.traces import TraceRow
    cat.traces.add([TraceRow("old", 1, "onnxruntime", "cpu", 1, 8, (0.001, 0.002), 0.0015, 0.002, 0.002)])
    _to_schema_6(con)
    Catalog(con)
    assert con.execute("SELECT trace, batch_size, features FROM modelsql.traces").fetchall() == [(0, 8, None)]
    for table in ("trace_operators", "compiled", "cost_models"):
        assert con.execute(f"SELECT count(*) FROM modelsql.{table}").fetchone() == (0,)
    assert con.execute("SELECT value FROM modelsql.meta WHERE key = 'schema_version'").fetchone() == (str(Catalog.SCHEMA_VERSION),)
    con.close()


def test_real_migration_from_schema_8_keeps_version_marks(db):
    """A catalog of schema 8 kept a dropped latest version's number in meta (``last_version:<name>``)
    only while the model existed: schema 9 moves it to version_marks, with every name's highest
    version, so the next number is still new."""
    con = duckdb.connect(db)
    cat = Catalog(con)
    for v in (1, 2, 3):
        add(cat, make_mv(name="m", version=v))
    add(cat, make_mv(name="n"))
    with cat.transaction():
        cat.drop("m", 3)
    _to_schema_8(con)
    con.execute("INSERT INTO modelsql.meta VALUES ('last_version:m', '3')")
    cat = Catalog(con)
    assert dict(con.execute("SELECT name, last_version FROM modelsql.version_marks").fetchall()) == {"m": 3, "n": 1}
    assert con.execute("SELECT count(*) FROM modelsql.meta WHERE key LIKE 'last%'").fetchone() == (0,)
    assert cat.next_version("m") == 4 and cat.next_version("n") == 2
    assert con.execute("SELECT value FROM modelsql.meta WHERE key = 'schema_version'").fetchone() == (
        str(Catalog.SCHEMA_VERSION),)
    con.close()


def test_real_migration_from_schema_9_adds_an_empty_evaluations_table(db):
    con = duckdb.connect(db)
    cat = Catalog(con)
    add(cat, make_mv(name="m"))
    _to_schema_9(con)
    Catalog(con)
    assert con.execute("SELECT count(*) FROM modelsql.evaluations").fetchone() == (0,)
    assert con.execute("SELECT value FROM modelsql.meta WHERE key = 'schema_version'").fetchone() == (str(Catalog.SCHEMA_VERSION),)
    con.close()


def test_real_migration_from_schema_10_adds_origins_tags_and_the_lineage_view(db):
    con = duckdb.connect(db)
    cat = Catalog(con)
    add(cat, make_mv(name="m"))
    _to_schema_10(con)
    Catalog(con)
    assert con.execute("SELECT count(*) FROM modelsql.model_origins").fetchone() == (0,)
    assert con.execute("SELECT count(*) FROM modelsql.model_tags").fetchone() == (0,)
    assert con.execute("SELECT count(*) FROM modelsql.lineage").fetchone() == (0,)
    assert con.execute("SELECT value FROM modelsql.meta WHERE key = 'schema_version'").fetchone() == (str(Catalog.SCHEMA_VERSION),)
    con.close()


def test_real_migration_from_schema_11_shows_aliases_in_the_models_view(db):
    con = duckdb.connect(db)
    cat = Catalog(con)
    add(cat, make_mv(name="m", options=(("hyperparameters", "{'C': 0.5, 'hidden_layer_sizes': (16,)}"),
                                        ("model_type", "logistic_reg"))))
    add(cat, make_mv(name="m", version=2, options=(("hyperparameters", '{"C": 2}'),)))
    cat.aliases.set("m", "champion", 1)
    _to_schema_11(con)
    assert "aliases" not in [d[0] for d in con.execute("SELECT * FROM modelsql.models").description]
    Catalog(con)
    assert con.execute("SELECT name, version, aliases FROM modelsql.models").fetchall() == [("m", 2, "champion = 1")]
    assert con.execute("SELECT comment FROM duckdb_columns() WHERE table_name = 'models' AND column_name = "
                       "'aliases'").fetchone()[0].startswith("The model's aliases")
    con.execute("SELECT count(*) FROM modelsql.families").fetchall()  # the view over it still binds
    assert con.execute("SELECT value FROM modelsql.meta WHERE key = 'schema_version'").fetchone() == ("12",)
    assert con.execute("SELECT version, options['hyperparameters'], options['model_type'] FROM "
                       "modelsql.model_versions ORDER BY version").fetchall() == [
        (1, '{"C": 0.5, "hidden_layer_sizes": [16]}', "logistic_reg"), (2, '{"C": 2}', None)]  # JSON, the rest kept
    con.close()
