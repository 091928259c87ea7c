"""The query handler: a statement with PREDICTs, from tree to result.

``bind`` (:mod:`~modelsql.planner.binder`) -> rules (:mod:`~modelsql.planner.rules`,
unless ``session.optimize`` is off) -> physical operators and the DuckDB
statement (:mod:`~modelsql.planner.physical`) -> run -> :class:`Result`.
"""

from __future__ import annotations

from sqlglot import exp

from ..errors import Error
from .binder import bind_query
from .handlers import register_default
from .physical import Physical, build, choose
from .plan import QueryPlan
from .predict_errors import predict_error
from .result import Result
from .rules import apply_rules


def plan_query(stmt: exp.Expression, session, params: list) -> QueryPlan:
    """The logical plan after the rules (none when ``session.optimize`` is False)."""
    plan = bind_query(stmt, session, params)
    return apply_rules(plan) if session.optimize else plan


def run_query(stmt: exp.Expression, session, params: list, *, prefix: str = "", dry: bool = False
              ) -> tuple[Result, QueryPlan, Physical]:
    """Plan and run one statement; ``prefix`` (``EXPLAIN [ANALYZE] ``) is put before the DuckDB statement.

    Returns the result (streaming when it has rows), the plan and its operators. On failure everything
    registered is released and an engine-begun snapshot rolled back; the error is the modelsql error.
    """
    plan = plan_query(stmt, session, params)
    choices = choose(plan)
    session.begin_if_needed()
    held = Result(session.duck)

    def failed(exc: BaseException) -> Error:
        return predict_error(exc, held.operators, session.duck)

    try:
        try:
            phys = build(plan, choices, session, params, held, dry=dry)
        except Exception as exc:
            err = failed(exc)
            if session.in_transaction:
                # A failing statement aborts DuckDB's transaction; leave the same state a streaming
                # PREDICT's failure leaves, whichever way this one ran.
                try:
                    session.duck.execute("SELECT error(?)", [str(err)[:200]])
                except Exception:
                    pass
            raise err from (None if err is exc else exc)
        session.run(prefix + phys.sql, [params[k - 1] for k in phys.params], failed)
        out = session.duckdb_result("SELECT" if prefix else plan.kind)
        out.adopt(held)
        out.translate = lambda exc: predict_error(exc, out.operators, session.duck)
        if not out.streaming:
            out.release()
        return out, plan, phys
    except BaseException:
        held.rollback()
        raise


def _query(stmt: exp.Expression, session, params: list) -> Result:
    return run_query(stmt, session, params)[0]


register_default(_query)
