"""The statement registry (modelsql/engine/handlers.py): every statement node has its handler, a node
without one is named when the handlers load (never an InternalError when it runs), one node has one
handler, and whether a statement only reads comes from its registration (issue 23; SHOW STUDIES and
DESCRIBE STUDY used to drop every cached plan)."""

from __future__ import annotations

import pytest
from sqlglot import exp

import modelsql
from modelsql import sql as msql
from modelsql.engine import handlers, session as session_module
from modelsql.engine.plan_cache import database_key, generation
from modelsql.errors import InternalError
from modelsql.sql.registry import STATEMENT_NODES


@pytest.fixture(scope="module", autouse=True)
def loaded():
    session_module.register_handlers()


def test_every_statement_node_has_a_handler_of_its_own():
    assert STATEMENT_NODES and handlers.missing_handlers(STATEMENT_NODES) == []
    table = handlers.registered()
    for node in STATEMENT_NODES:
        assert table[node].node is node and table[node].run.__module__.startswith("modelsql.engine."), node


def test_a_statement_node_without_a_handler_is_named_when_the_handlers_load(monkeypatch):
    class FooModel(exp.Expression):
        """A statement added to the grammar whose handler was forgotten."""

    assert handlers.missing_handlers([FooModel]) == [FooModel]
    monkeypatch.setattr(session_module, "STATEMENT_NODES", [*STATEMENT_NODES, FooModel])
    with pytest.raises(InternalError, match="statements without a handler: FooModel"):
        session_module.register_handlers()


def test_one_node_has_one_handler():
    with pytest.raises(ValueError, match="ShowModels already has a handler"):
        handlers.handles(msql.ShowModels)(lambda stmt, session, params: None)
    assert handlers.registered()[msql.ShowModels].run.__module__ == "modelsql.engine.models.statements"


@pytest.mark.parametrize("text, reads", [
    ("SELECT 1", True), ("SHOW MODELS", True), ("DESCRIBE MODEL m", True), ("SHOW PIPELINES", True),
    ("SHOW SERVERS", True), ("SHOW STUDIES", True), ("DESCRIBE STUDY s", True), ("EXPORT MODEL m TO 'f.onnx'", True),
    ("EXPLAIN SELECT 1", True), ("EXPLAIN ANALYZE SELECT 1", False), ("DROP STUDY s", False),
    ("DROP MODEL m", False), ("VACUUM MODELS", False), ("INSERT INTO t VALUES (1)", False),
    ("CREATE TABLE t AS SELECT 1", False), ("TRUST MODEL m", False),
])
def test_whether_a_statement_only_reads_comes_from_its_registration(text, reads):
    (stmt,) = msql.parse(text)
    assert handlers.reads_only(stmt) is reads


def test_show_studies_and_describe_study_keep_cached_plans(tmp_path):
    db = str(tmp_path / "r.duckdb")
    with modelsql.connect(db) as con:
        key = database_key(str(tmp_path / "r.duckdb"))
        con.execute("SHOW MODELSQL MODELS").fetchall()
        before = generation(key)
        con.execute("SHOW STUDIES").fetchall()
        with pytest.raises(modelsql.ProgrammingError):
            con.execute("DESCRIBE STUDY nope")
        con.execute("SHOW MODELSQL PIPELINES").fetchall()
        assert generation(key) == before
        con.execute("CREATE TABLE t (x INTEGER)")
        assert generation(key) > before  # a statement that writes still marks plans stale
