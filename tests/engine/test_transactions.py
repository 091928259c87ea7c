"""Transactions: BEGIN / COMMIT / ROLLBACK in any statement text are honoured as DuckDB honours them
(issue 21, item 6).

Real DuckDB files, real connections; the row is read back from a fresh connection after close, so a
transaction the session did not see (and close rolled back) shows as a lost row.
"""

from __future__ import annotations

import numpy as np
import pytest

import modelsql
from conftest import linear_model, save


@pytest.fixture
def db(tmp_path):
    path = str(tmp_path / "tx.duckdb")
    with modelsql.connect(path) as con:
        con.execute("CREATE TABLE a (x INTEGER)")
    return path


def _rows(path):
    with modelsql.connect(path) as con:
        return con.execute("SELECT x FROM a ORDER BY x").fetchall()


@pytest.mark.parametrize("autocommit", [False, True])
def test_begin_inside_a_parameterised_text_is_followed(db, autocommit):
    con = modelsql.connect(db)
    con.autocommit = autocommit
    cur = con.cursor()
    cur.execute("BEGIN; INSERT INTO a VALUES (?)", [1])
    cur.execute("COMMIT")
    con.close()  # closing rolls back an open transaction: the COMMIT must have ended it
    assert _rows(db) == [(1,)]


def test_parameters_go_to_their_own_statement(db):
    con = modelsql.connect(db)
    con.autocommit = True
    con.execute("BEGIN; INSERT INTO a VALUES (?); INSERT INTO a VALUES (?), (?); COMMIT", [1, 2, 3])
    con.execute("BEGIN; INSERT INTO a VALUES (?); ROLLBACK", [9])
    con.close()
    assert _rows(db) == [(1,), (2,), (3,)]


@pytest.mark.parametrize("autocommit", [False, True])
@pytest.mark.parametrize("text", ["COMMIT", "ROLLBACK", "END", "ABORT", "-- c\nCOMMIT", "SELECT 1; COMMIT; COMMIT"])
def test_commit_or_rollback_with_no_transaction_raises(db, autocommit, text):
    con = modelsql.connect(db)
    con.autocommit = autocommit
    # (in PEP 249 mode right after connect nothing is open either: the COMMIT opens nothing to end)
    with pytest.raises(modelsql.OperationalError, match="no transaction is active") as info:
        con.execute(text)
    assert info.value.code == "transaction_error"
    con.execute("INSERT INTO a VALUES (5)")  # the connection is usable
    con.commit()
    con.close()
    assert _rows(db) == [(5,)]


def test_pep249_commit_and_rollback_stay_no_ops(db):
    with modelsql.connect(db) as con:
        con.commit()
        con.rollback()
        con.autocommit = True
        con.commit()
        con.rollback()


def test_begin_inside_begin_raises_but_adopts_the_implicit_transaction(db):
    con = modelsql.connect(db)
    con.execute("INSERT INTO a VALUES (1)")  # PEP 249's implicit transaction is open
    con.execute("BEGIN")  # adopts it
    with pytest.raises(modelsql.OperationalError, match="within a transaction"):
        con.execute("BEGIN")
    con.execute("ROLLBACK")
    con.close()
    assert _rows(db) == []


def test_a_model_statement_inside_begin_keeps_the_commit_valid(db, tmp_path):
    onnx_path = save(linear_model(np.eye(2, dtype=np.float32)), tmp_path / "m.onnx")
    con = modelsql.connect(db)
    con.autocommit = True
    # the model statement commits before and after; the user's transaction goes on after it
    con.execute("BEGIN; INSERT INTO a VALUES (?); IMPORT MODEL m FROM ?; INSERT INTO a VALUES (?)", [1, onnx_path, 2])
    con.execute("ROLLBACK")  # ends what came after the IMPORT (the 2)
    with pytest.raises(modelsql.OperationalError, match="no transaction is active"):
        con.execute("COMMIT")
    con.execute("BEGIN")
    con.execute("DROP MODEL m")
    con.execute("INSERT INTO a VALUES (3)")
    con.execute("COMMIT")
    con.close()
    assert _rows(db) == [(1,), (3,)]
    with modelsql.connect(db) as con:
        assert con.execute("SELECT count(*) FROM modelsql.models").fetchall() == [(0,)]


def test_transaction_words_among_model_statements_with_dollar_parameters(db, tmp_path):
    onnx_path = save(linear_model(np.eye(2, dtype=np.float32)), tmp_path / "m.onnx")
    con = modelsql.connect(db)
    con.autocommit = True
    con.execute("BEGIN; IMPORT MODEL m FROM $1; COMMIT", [onnx_path])
    with pytest.raises(modelsql.OperationalError, match="no transaction is active"):
        con.execute("SHOW MODELS; ROLLBACK")
    con.close()
