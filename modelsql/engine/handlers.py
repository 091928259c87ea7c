"""Statement handlers: one registration per statement node.

``run_statement(node, session, params)`` dispatches on the node's class
(:func:`functools.singledispatch`). A statement registers its handler next to
its code::

    @run_statement.register
    def _(stmt: DropModel, session, params) -> Result: ...

Anything no node class claims (a DuckDB query that contains ``PREDICT``) goes to
the query handler, which :mod:`modelsql.engine.query.handler` registers for
``exp.Expression`` itself.
:class:`~modelsql.engine.session.Session` imports the modules that register.
"""

from __future__ import annotations

from functools import singledispatch

from sqlglot import exp

from modelsql.errors import InternalError


@singledispatch
def run_statement(stmt, session, params: list):
    """Carry out one parsed statement; returns a :class:`~modelsql.engine.result.Result`."""
    raise InternalError(f"no handler for {type(stmt).__name__}", code="internal_error")


def run_default(stmt: exp.Expression, session, params: list):
    """Run ``stmt`` with the handler of ``exp.Expression`` (for a handler that declines a node of its class)."""
    return run_statement.dispatch(exp.Expression)(stmt, session, params)


@run_statement.register(exp.Transaction)
@run_statement.register(exp.Commit)
@run_statement.register(exp.Rollback)
def _transaction(stmt: exp.Expression, session, params: list):
    """BEGIN / COMMIT / ROLLBACK among modelsql statements: as plain SQL (the session follows them)."""
    return session.passthrough(stmt.sql(dialect="duckdb"), None)


@run_statement.register(exp.Column)
def _end_or_abort(stmt: exp.Column, session, params: list):
    """``END`` / ``ABORT`` parse as a bare column name: the transaction statements they are."""
    if not stmt.table and stmt.name.upper() in ("END", "ABORT"):
        return session.passthrough(stmt.sql(dialect="duckdb"), None)
    return run_default(stmt, session, params)
