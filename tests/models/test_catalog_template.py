"""The empty-catalog template (modelsql.catalog.template): a new database gets, copied from a cached DuckDB
file, exactly the catalog the DDL makes; where no template can be used the DDL runs, and nothing is lost."""

from __future__ import annotations

import os
import time

import duckdb
import pytest

from modelsql.catalog import Catalog, schema, template

_DESCRIBE = {
    "tables": "SELECT table_name, comment, has_primary_key, column_count, sql FROM duckdb_tables() "
              "WHERE database_name = current_database() AND schema_name = 'modelsql'",
    "columns": "SELECT table_name, column_name, column_index, comment, column_default, is_nullable, data_type "
               "FROM duckdb_columns() WHERE database_name = current_database() AND schema_name = 'modelsql'",
    "views": "SELECT view_name, comment, sql FROM duckdb_views() "
             "WHERE database_name = current_database() AND schema_name = 'modelsql'",
    "sequences": "SELECT sequence_name, comment, start_value, increment_by, last_value FROM duckdb_sequences() "
                 "WHERE database_name = current_database()",
    "constraints": "SELECT table_name, constraint_type, constraint_text, expression FROM duckdb_constraints() "
                   "WHERE database_name = current_database() AND schema_name = 'modelsql'",
    "schemas": "SELECT schema_name, comment FROM duckdb_schemas() WHERE database_name = current_database()",
    "meta": "SELECT key, value FROM modelsql.meta",
}


def describe(con: duckdb.DuckDBPyConnection) -> dict:
    """Everything DuckDB says about the catalog in the current database (its stored SQL names no database, so
    catalogs in files of different names compare)."""
    out = {}
    for what, sql in _DESCRIBE.items():
        rows = con.execute(sql).fetchall()
        out[what] = sorted(tuple(str(v) for v in row) for row in rows)
    return out


def by_ddl(path: str) -> dict:
    """The description of a catalog the DDL makes in a new file (which this process learns as its reference)."""
    con = duckdb.connect(path)
    name = os.path.splitext(os.path.basename(path))[0]
    con.execute("BEGIN TRANSACTION")
    schema.create(con, '"' + name + '".modelsql')
    con.execute("COMMIT")
    template.learn(con, name)
    try:
        return describe(con)
    finally:
        con.close()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(folder))
    return folder / template.CACHE_FOLDER


def test_a_copied_catalog_is_the_one_the_ddl_makes(tmp_path, cache):
    expected = by_ddl(str(tmp_path / "ddl_catalog.duckdb"))
    con = duckdb.connect(str(tmp_path / "copied_catalog.duckdb"))
    assert template.copy_into(con, "copied_catalog")
    assert [p.name for p in cache.iterdir()] == [template.template_name()]
    copied = describe(con)
    con.close()
    assert copied == expected
    assert len(copied["columns"]) > 200 and sum(1 for c in copied["columns"] if c[3] != "None") > 100


def test_the_template_is_made_once_and_other_templates_are_removed(tmp_path, cache):
    cache.mkdir(parents=True)
    stale = cache / "catalog-template-11-0123456789abcdef.duckdb"  # built eight days ago
    stale.write_bytes(b"an older schema's template")
    os.utime(stale, (time.time() - 8 * 86400, time.time() - 8 * 86400))
    other = cache / "catalog-template-12-fedcba9876543210.duckdb"  # another DuckDB release's, in use
    other.write_bytes(b"another install's template")
    died = cache / ".building-dead.duckdb"  # a process died building the template two hours ago
    died.write_bytes(b"half a database")
    os.utime(died, (time.time() - 7200, time.time() - 7200))
    building = cache / ".building-now.duckdb"  # another process is building it now
    building.write_bytes(b"half a database")
    path = template.template_path()
    assert path is not None and not stale.exists() and not died.exists() and building.exists() and other.exists()
    building.unlink()
    other.unlink()
    made = os.stat(path).st_mtime_ns
    by_ddl(str(tmp_path / "ddl_catalog.duckdb"))
    for i in range(2):
        Catalog(duckdb.connect(str(tmp_path / f"db{i}.duckdb")))
    assert os.stat(path).st_mtime_ns == made
    assert sorted(p.name for p in cache.iterdir()) == [template.template_name()]


def test_a_database_attached_under_another_name_gets_its_catalog(tmp_path, cache):
    by_ddl(str(tmp_path / "ddl_catalog.duckdb"))
    con = duckdb.connect()
    con.execute(f"ATTACH '{tmp_path / 'other.duckdb'}' AS elsewhere")
    con.execute("USE elsewhere")
    cat = Catalog(con)
    assert cat.present and cat.database == "elsewhere"
    assert con.execute("SELECT count(*) FROM elsewhere.modelsql.lineage").fetchall() == [(0,)]
    con.execute("USE memory")
    assert con.execute("SELECT count(*) FROM duckdb_schemas() WHERE database_name = 'memory' "
                       "AND schema_name = 'modelsql'").fetchall() == [(0,)]


@pytest.mark.parametrize("how", ["cache_is_a_file", "damaged_template", "no_external_access", "more_in_main",
                                 "more_in_the_catalog", "a_macro", "only_the_meta_row"])
def test_without_a_usable_template_the_ddl_makes_the_same_catalog(tmp_path, cache, how):
    """A template is copied only when it holds exactly the catalog the DDL makes (the copy takes everything in
    the file): one that holds more or less is removed, and the DDL makes the catalog."""
    expected = by_ddl(str(tmp_path / "ddl_catalog.duckdb"))
    config = {}
    foreign = {"more_in_main": "CREATE TABLE main.users AS SELECT 'injected' AS who",
               "more_in_the_catalog": "CREATE TABLE modelsql.fake AS SELECT 1 AS x",
               "a_macro": "CREATE MACRO main.lower(x) AS 'pwned'",
               "only_the_meta_row": "DROP VIEW modelsql.lineage"}
    if how in foreign:
        path = template.template_path()
        assert path is not None
        os.unlink(path)
        made = duckdb.connect(path)
        schema.create(made, "modelsql")
        made.execute(foreign[how])
        made.close()
    elif how == "cache_is_a_file":
        cache.parent.mkdir(parents=True)
        cache.write_text("not a folder")
    elif how == "damaged_template":
        cache.mkdir(parents=True)
        (cache / template.template_name()).write_bytes(b"DUCK" * 4096)
    else:
        config = {"enable_external_access": "false"}
    con = duckdb.connect(str(tmp_path / "fallback_catalog.duckdb"), config=config)
    assert not template.copy_into(con, "fallback_catalog")
    if how in foreign or how == "damaged_template":
        assert not (cache / template.template_name()).exists()  # removed: the next new database builds it again
    if how == "no_external_access":
        assert not cache.exists()  # nothing written that this connection could never read
    assert con.execute("SELECT count(*) FROM duckdb_schemas() WHERE schema_name = 'modelsql'").fetchall() == [(0,)]
    assert [r[0] for r in con.execute("SELECT database_name FROM duckdb_databases() "
                                      "WHERE NOT internal ORDER BY 1").fetchall()] == ["fallback_catalog"]
    cat = Catalog(con)
    assert cat.present
    made = describe(con)
    assert con.execute("SELECT lower('ABC')").fetchall() == [("abc",)]
    con.close()
    assert made == expected


def test_a_template_of_another_schema_version_is_not_used(tmp_path, cache):
    con = duckdb.connect(str(tmp_path / "db.duckdb"))
    assert not template.copy_into(con, "db", schema.SCHEMA_VERSION - 1)
    assert not cache.exists()


def test_the_description_check_is_not_fooled_by_names(tmp_path, cache):
    """Databases named like a view's alias or a table (``a``, ``model_versions``) describe alike."""
    first = by_ddl(str(tmp_path / "a.duckdb"))
    assert first == by_ddl(str(tmp_path / "ref.duckdb"))
    con = duckdb.connect(str(tmp_path / "model_versions.b.duckdb"))  # (DuckDB names it up to the first dot)
    assert template.copy_into(con, "model_versions")
    assert describe(con) == first
    con.close()


def test_a_relative_cache_home_is_ignored_as_xdg_says(tmp_path, monkeypatch):
    from modelsql.xdg import cache_home, config_home

    monkeypatch.setenv("HOME", str(tmp_path))
    for value in ("relcache", "~/xdg", ""):
        monkeypatch.setenv("XDG_CACHE_HOME", value)
        monkeypatch.setenv("XDG_CONFIG_HOME", value)
        assert cache_home() == str(tmp_path / ".cache") and config_home() == str(tmp_path / ".config")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "abs"))
    assert cache_home() == str(tmp_path / "abs")


@pytest.mark.parametrize("file", ["modelsql.duckdb", "modelsql.v2.duckdb", "MODELSQL.backup.db", "modelsql"])
def test_a_file_named_modelsql_up_to_its_first_dot_gets_its_catalog_unambiguously(tmp_path, cache, file):
    """DuckDB names a database after its file up to the first dot: ``modelsql.v2.duckdb`` would be the database
    ``modelsql``, beside the schema ``modelsql``, and ``modelsql.models`` ambiguous."""
    import modelsql

    with modelsql.connect(str(tmp_path / file)) as con:
        assert con.execute("SELECT count(*) FROM modelsql.models").fetchall() == [(0,)]
        assert con.execute("SHOW MODELS").fetchall() == []
