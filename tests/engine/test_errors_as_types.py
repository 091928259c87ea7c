"""Errors raised inside a PREDICT operator reach the user as the same modelsql error object (issue 7):
no message is parsed to learn what went wrong, in either execution, while executing or while fetching."""

from __future__ import annotations

import numpy as np
import pytest

import modelsql
from conftest import linear_model
from modelsql.operators import predict as predict_op


@pytest.fixture
def lin(con):
    con.import_model("lin", linear_model(np.ones((2, 1), dtype=np.float32)), features=["a", "b"])
    con.execute("CREATE TABLE t AS SELECT i AS id, i::DOUBLE AS a, 1.0::DOUBLE AS b FROM range(200000) r(i)")
    con.commit()
    return con


@pytest.mark.parametrize("execution", ["stream", "batch"])
def test_the_operators_error_object_is_what_the_user_gets(lin, monkeypatch, execution):
    # a message that looks like DuckDB's UDF wrapping and like the old NULL marker: nothing may parse it
    raised = modelsql.DataError("Python exception occurred while executing the UDF: modelsql-null-input:0:a",
                                code="custom_failure")
    real = predict_op.PredictFunction._call
    calls = {"n": 0}

    def failing(self, *arrays):
        calls["n"] += 1
        if calls["n"] == 3:  # after some chunks streamed: the error surfaces in fetch for 'stream'
            raise raised
        return real(self, *arrays)

    monkeypatch.setattr(predict_op.PredictFunction, "_call", failing)
    with pytest.raises(modelsql.DataError) as info:
        lin.execute(f"SELECT id, y FROM PREDICT(MODEL lin, TABLE t, execution = '{execution}')").fetchall()
    assert info.value is raised
    assert info.value.code == "custom_failure"
    lin.rollback()


def test_a_null_input_is_typed_and_counted(lin):
    lin.execute("UPDATE t SET a = NULL WHERE id IN (7, 150000)")
    lin.commit()  # (uncommitted, the failed statement's transaction could count only the failing chunk's)
    with pytest.raises(modelsql.DataError) as info:
        lin.execute("SELECT id, y FROM PREDICT(MODEL lin, TABLE t, execution = 'stream')").fetchall()
    assert info.value.code == "null_input"
    assert '"a" (2 rows)' in str(info.value)
    assert not isinstance(info.value, predict_op.NullInput)  # the operator's signal never reaches the user
