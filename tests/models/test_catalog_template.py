"""The empty-catalog template (modelsql.catalog.template): a new database gets, copied from a cached DuckDB
file, exactly the catalog the DDL makes; where no template can be used the DDL runs, and nothing is lost."""

from __future__ import annotations

import os

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
    """Everything DuckDB says about the catalog in the current database, with the database's own name
    (one that occurs nowhere else) taken out of stored SQL, so catalogs in files of different names compare."""
    name = con.execute("SELECT current_database()").fetchall()[0][0]
    out = {}
    for what, sql in _DESCRIBE.items():
        rows = con.execute(sql).fetchall()
        out[what] = sorted(tuple(str(v).replace(f'"{name}".', "").replace(f"{name}.", "") for v in row)
                           for row in rows)
    return out


def by_ddl(path: str) -> dict:
    con = duckdb.connect(path)
    con.execute("BEGIN TRANSACTION")
    schema.create(con, '"' + os.path.splitext(os.path.basename(path))[0] + '".modelsql')
    con.execute("COMMIT")
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
    con = duckdb.connect(str(tmp_path / "copied_catalog.duckdb"))
    assert template.copy_into(con, "copied_catalog")
    assert [p.name for p in cache.iterdir()] == [template.template_name()]
    copied = describe(con)
    con.close()
    expected = by_ddl(str(tmp_path / "ddl_catalog.duckdb"))
    assert copied == expected
    assert len(copied["columns"]) > 200 and sum(1 for c in copied["columns"] if c[3] != "None") > 100


def test_the_template_is_made_once_and_other_templates_are_removed(tmp_path, cache):
    cache.mkdir(parents=True)
    stale = cache / (template._PREFIX + "11-0123456789abcdef.duckdb")
    stale.write_bytes(b"an older schema's template")
    path = template.template_path()
    assert path is not None and not stale.exists()
    made = os.stat(path).st_mtime_ns
    for i in range(2):
        Catalog(duckdb.connect(str(tmp_path / f"db{i}.duckdb")))
    assert os.stat(path).st_mtime_ns == made
    assert sorted(p.name for p in cache.iterdir()) == [template.template_name()]


def test_a_database_attached_under_another_name_gets_its_catalog(tmp_path, cache):
    con = duckdb.connect()
    con.execute(f"ATTACH '{tmp_path / 'other.duckdb'}' AS elsewhere")
    con.execute("USE elsewhere")
    cat = Catalog(con)
    assert cat.present and cat.database == "elsewhere"
    assert con.execute("SELECT count(*) FROM elsewhere.modelsql.lineage").fetchall() == [(0,)]
    con.execute("USE memory")
    assert con.execute("SELECT count(*) FROM duckdb_schemas() WHERE database_name = 'memory' "
                       "AND schema_name = 'modelsql'").fetchall() == [(0,)]


@pytest.mark.parametrize("how", ["cache_is_a_file", "damaged_template", "no_external_access"])
def test_without_a_usable_template_the_ddl_makes_the_same_catalog(tmp_path, cache, how):
    config = {}
    if how == "cache_is_a_file":
        cache.parent.mkdir(parents=True)
        cache.write_text("not a folder")
    elif how == "damaged_template":
        cache.mkdir(parents=True)
        (cache / template.template_name()).write_bytes(b"DUCK" * 4096)
    else:
        config = {"enable_external_access": "false"}
    con = duckdb.connect(str(tmp_path / "fallback_catalog.duckdb"), config=config)
    assert not template.copy_into(con, "fallback_catalog")
    assert con.execute("SELECT count(*) FROM duckdb_schemas() WHERE schema_name = 'modelsql'").fetchall() == [(0,)]
    assert [r[0] for r in con.execute("SELECT database_name FROM duckdb_databases() "
                                      "WHERE NOT internal ORDER BY 1").fetchall()] == ["fallback_catalog"]
    cat = Catalog(con)
    assert cat.present
    made = describe(con)
    con.close()
    assert made == by_ddl(str(tmp_path / "ddl_catalog.duckdb"))


def test_a_template_of_another_schema_version_is_not_used(tmp_path, cache):
    con = duckdb.connect(str(tmp_path / "db.duckdb"))
    assert not template.copy_into(con, "db", schema.SCHEMA_VERSION - 1)
    assert not cache.exists()
