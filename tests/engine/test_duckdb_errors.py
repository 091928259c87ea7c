"""modelsql.duckdb_errors: real DuckDB exceptions become modelsql's PEP 249 errors, with stable codes."""

import ast
import pathlib

import duckdb
import pytest

from modelsql import duckdb_errors, errors


def _raised(con, sql):
    with pytest.raises(duckdb.Error) as info:
        con.execute(sql)
    return info.value


@pytest.fixture
def con():
    c = duckdb.connect()
    c.execute("CREATE TABLE t (i INTEGER PRIMARY KEY)")
    c.execute("INSERT INTO t VALUES (1)")
    yield c
    c.close()


def test_missing_table_is_a_programming_error(con):
    exc = _raised(con, "SELECT * FROM no_such_table")
    err = duckdb_errors.translate(exc)
    assert type(err) is errors.ProgrammingError and err.code == "catalog_error"
    assert not isinstance(err, duckdb.Error)
    assert str(err) == str(exc).replace('\nDid you mean "pg_tables"?', "")  # (DuckDB's system-table suggestion)


def test_a_suggested_system_table_is_dropped_and_a_users_table_kept(con):
    con.execute("CREATE TABLE items (a INTEGER)")
    exc = _raised(con, "SELECT * FROM nosuch")
    assert 'Did you mean "pg_' in str(exc) or 'Did you mean "sqlite_' in str(exc)  # DuckDB's own text
    assert "Did you mean" not in str(duckdb_errors.translate(exc))
    assert 'Did you mean "items"?' in str(duckdb_errors.translate(_raised(con, "SELECT * FROM item")))
    con.execute("CREATE TABLE pg_mine (a INTEGER)")
    other = duckdb.connect()
    other.execute("CREATE TABLE customers (a INTEGER)")
    both = _raised(other, "SELECT * FROM t1")  # DuckDB: Did you mean "customers or pg_tables"?
    assert " or " in str(both) and 'Did you mean "customers"?' in str(duckdb_errors.translate(both))
    assert 'Did you mean "pg_mine"?' in str(duckdb_errors.translate(_raised(con, "SELECT * FROM pg_min")))
    assert 'Did you mean "pg_typeof"?' in str(duckdb_errors.translate(_raised(con, "SELECT pg_typeo(1)")))


def test_missing_table_in_catalog_sql_has_the_catalog_code_and_prefix(con):
    exc = _raised(con, "SELECT * FROM no_such_table")
    err = duckdb_errors.translate_catalog(exc)
    assert type(err) is errors.ProgrammingError and err.code == "catalog_object_missing"
    assert str(err) == f"Catalog error: {exc}".replace('\nDid you mean "pg_tables"?', "")


def test_binder_error_codes(con):
    exc = _raised(con, "SELECT no_such_column FROM t")
    assert duckdb_errors.translate(exc).code == "binder_error"
    assert duckdb_errors.translate(exc, catalog=True).code == "catalog_binder_error"


def test_parse_error(con):
    err = duckdb_errors.translate(_raised(con, "SELEC 1"))
    assert type(err) is errors.ProgrammingError and err.code == "parse_error"


def test_constraint_violation_is_an_integrity_error(con):
    err = duckdb_errors.translate(_raised(con, "INSERT INTO t VALUES (1)"))
    assert type(err) is errors.IntegrityError and err.code == "constraint_violation"


def test_conversion_error_is_a_data_error(con):
    err = duckdb_errors.translate(_raised(con, "SELECT 'abc'::INTEGER"))
    assert type(err) is errors.DataError and err.code == "conversion_error"


def test_division_by_zero_is_a_data_error(con):
    exc = _raised(con, "SELECT 1 // 0")
    assert isinstance(exc, duckdb.InvalidInputException)
    err = duckdb_errors.translate(exc)
    assert type(err) is errors.DataError and err.code == "division_by_zero"


def test_write_write_conflict_is_a_transaction_error(con):
    a, b = con.cursor(), con.cursor()
    a.execute("BEGIN")
    b.execute("BEGIN")
    a.execute("UPDATE t SET i = 2 WHERE i = 1")
    err = duckdb_errors.translate(_raised(b, "UPDATE t SET i = 3 WHERE i = 1"))
    assert type(err) is errors.OperationalError and err.code == "transaction_error"
    a.execute("ROLLBACK")
    b.execute("ROLLBACK")


@pytest.mark.parametrize("catalog", [False, True])
def test_aborted_transaction_says_to_roll_back(con, catalog):
    con.execute("BEGIN")
    _raised(con, "SELECT * FROM no_such_table")
    exc = _raised(con, "SELECT 1")
    assert isinstance(exc, duckdb.TransactionException)
    err = duckdb_errors.translate(exc, catalog=catalog)
    assert type(err) is errors.OperationalError and err.code == "transaction_aborted"
    assert "rollback()" in str(err) and "TransactionContext" not in str(err) and "Catalog error" not in str(err)
    con.execute("ROLLBACK")


@pytest.mark.parametrize("catalog", [False, True])
def test_a_second_database_written_in_one_transaction_is_named(con, catalog):
    """DuckDB lets a transaction write to one attached database; a catalog write says the catalog is the other."""
    con.execute("ATTACH ':memory:' AS other")
    con.execute("CREATE TABLE other.t2 (i INTEGER)")
    con.execute("CREATE TABLE mine (i INTEGER)")
    con.execute("BEGIN")
    con.execute("INSERT INTO other.t2 VALUES (1)")
    err = duckdb_errors.translate(_raised(con, "INSERT INTO mine VALUES (1)"), catalog=catalog)
    assert type(err) is errors.OperationalError and err.code == "cross_database_write"
    assert '"other"' in str(err) and ("catalog (where EVALUATE records" in str(err)) == catalog
    con.execute("ROLLBACK")
    con.execute("DETACH other")


def test_catalog_wording_of_an_aborted_transaction_is_recognised(con):
    con.execute("BEGIN")
    _raised(con, "SELECT * FROM no_such_table")
    old = errors.OperationalError(f"Catalog error: {_raised(con, 'SELECT 1')}", code="transaction_error")
    assert duckdb_errors.translate(old).code == "transaction_aborted"
    con.execute("ROLLBACK")


def test_modelsql_errors_and_other_exceptions():
    mine = errors.ProgrammingError("no such model", code="model_not_found")
    assert duckdb_errors.translate(mine) is mine
    err = duckdb_errors.translate(OSError("Conversion Error: Could not convert string 'x' to INT32"))
    assert type(err) is errors.DataError and err.code == "conversion_error"
    assert duckdb_errors.translate(KeyboardInterrupt()).code == "interrupted"
    err = duckdb_errors.translate(ValueError("boom"))
    assert type(err) is errors.InternalError and str(err) == "ValueError: boom"


def test_the_old_names_are_the_shared_map():
    from modelsql.client import dbapi
    from modelsql.catalog import catalog

    assert dbapi.translate_duckdb_error is duckdb_errors.translate
    assert catalog.convert_duckdb_error is duckdb_errors.translate_catalog


def test_imports_nothing_that_imports_it():
    tree = ast.parse(pathlib.Path(duckdb_errors.__file__).read_text())
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert names <= {"__future__", "functools", "re", "typing", "duckdb", "modelsql.errors"}, names
