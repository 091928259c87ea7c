"""The physical operators on their own (operators.base.Operator): each gives its schema and yields Arrow
record batches from ``execute()`` equal to what the statement reads through it."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from conftest import linear_model
from modelsql.engine.query import cost
from modelsql.engine.query import physical
from modelsql.engine.query.bind_statement import bind_query
from modelsql.engine.result import Result
from modelsql.sql import parse


@pytest.fixture
def planned(con):
    con.import_model("lin", linear_model(np.array([[1.0], [2.0]], dtype=np.float32)), features=["a", "b"])
    con.execute("CREATE TABLE t AS SELECT i AS id, i::DOUBLE AS a, 1.0::DOUBLE AS b FROM range(5000) r(i)")
    session = con._session  # the connection's own session: this test drives the planner below the client
    plan = bind_query(parse("SELECT * FROM PREDICT(MODEL lin, TABLE t)")[0], session, [])
    return con, session, plan


def expected(n: int = 5000) -> list[tuple]:
    return [(i, float(i), 1.0, float(i + 2)) for i in range(n)]


def rows(batches) -> list[tuple]:
    table = pa.Table.from_batches(list(batches))
    return sorted(zip(*[c.to_pylist() for c in table.columns]))


def test_stream_operator_executes_alone(planned):
    con, session, plan = planned
    scan = plan.scans[0]
    op = physical.stream_operator(scan, session, physical.session_threads(session))
    op.input_sql, op.params = scan.input.sql, []
    assert op.schema == [("id", "BIGINT"), ("a", "DOUBLE"), ("b", "DOUBLE"), ("y", "FLOAT")]
    assert rows(op.execute()) == expected()
    assert op.measured()["rows"] == "5000" and int(op.measured()["calls"]) >= 1
    assert op.explain() == {"execution": "stream"}


def test_batch_operator_executes_alone(planned, monkeypatch):
    con, session, plan = planned
    monkeypatch.setattr(cost, "BATCH_ROWS", 1024)
    scan = plan.scans[0]
    op = physical.batch_operator(scan, session, scan.input.sql, [], physical.session_threads(session))
    batches = list(op.execute())
    assert len(batches) == 5 and all(b.num_rows <= 1024 for b in batches)  # one batch per model run
    assert rows(batches) == expected()
    assert op.measured()["rows"] == "5000"
    assert op.execution.startswith("batch")


def test_build_releases_what_it_registered(planned):
    con, session, plan = planned
    held = Result(session.duck)
    phys = physical.build(plan, physical.choose(plan), session, [], held)
    assert held.functions and phys.sql
    held.release()
    left = con.execute("SELECT count(*) FROM duckdb_functions() WHERE function_name LIKE '__modelsql_predict%'")
    assert left.fetchone() == (0,)
