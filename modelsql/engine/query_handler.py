"""The query handler: a statement with PREDICTs, from tree to result (the statement family of queries: it
sits on the query package, the PREDICT planner, and runs what it plans through the session).

``bind`` (:mod:`~modelsql.engine.query.bind_statement`) -> rules (:mod:`~modelsql.engine.query.rules`,
unless ``session.optimize`` is off) -> physical operators and the DuckDB
statement (:mod:`~modelsql.engine.query.physical`) -> run -> :class:`Result`.
"""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING, Optional

from sqlglot import exp

from modelsql import sql as msql
from modelsql.errors import Error, NotSupportedError
from modelsql.sql.predict import PredictTable
from modelsql.engine.options import uses_parameters
from modelsql.engine.plan_cache import CachedPlan
from modelsql.engine.query.bind_statement import bind_query
from modelsql.engine.handlers import computed_tables, handles, release_computed
from modelsql.engine.query.physical import Physical, build, choose, predict_meter
from modelsql.engine.query.cost import Choice
from modelsql.engine.query.plan import PredictScan, QueryPlan
from modelsql.engine.query.predict_errors import predict_error
from modelsql.engine.result import Result
from modelsql.engine.query.rules import apply_rules
from modelsql.operators.base import StreamOperator

if TYPE_CHECKING:
    from modelsql.engine.session import Session


def plan_query(stmt: exp.Expression, session: Session, params: list[object]) -> QueryPlan:
    """The logical plan after the rules (none when ``session.optimize`` is False)."""
    plan = bind_query(stmt, session, params)
    return apply_rules(plan) if session.optimize else plan


def run_query(stmt: exp.Expression, session: Session, params: list[object], *, prefix: str = "", suffix: str = "",
              dry: bool = False, cache_key: Optional[tuple[object, ...]] = None,
              arrow: bool = False, row_hash: bool = False) -> tuple[Result, QueryPlan, Physical]:
    """Plan and run one statement; ``prefix`` (``EXPLAIN [ANALYZE] ``) is put before the DuckDB statement and
    ``suffix`` after it (plain DuckDB SQL without parameters: EVALUATE's aggregates around its predictions' query,
    which is then a CTE's body; the plan is made for the statement alone, as if its rows were all read).

    With ``cache_key`` the plan is kept in the session's :class:`~modelsql.engine.plan_cache.PlanCache`
    (unless a PREDICT option is a parameter) and a plan whose every scan streams keeps its functions
    registered, so the next execution of the text only runs the statement (:func:`run_cached`).

    Table functions computed before planning (``EVALUATE(...)``, :func:`~modelsql.engine.handlers.computes`)
    are computed first and scanned where they were called; such a statement's plan is not kept. With ``dry``
    (EXPLAIN) they are not computed: an empty table of their columns stands in, and the plan's notes say what
    each would run.

    With ``arrow`` every row is read at once into the result's :attr:`~modelsql.engine.result.Result.table` (the
    statement's resources released); with ``row_hash`` too, the table's last column is each row's hash
    (:meth:`~modelsql.engine.session.Session.run_arrow`).

    Returns the result (streaming when it has rows), the plan and its operators. On failure everything
    registered is released and a snapshot begun for the statement rolled back; the error is the modelsql error.
    """
    stmt, computed, notes = computed_tables(stmt, session, params, dry=dry)
    try:
        out, plan, phys = _plan_and_run(stmt, session, params, prefix=prefix, suffix=suffix, dry=dry,
                                        cache_key=None if computed or suffix else cache_key, arrow=arrow,
                                        row_hash=row_hash)
    except BaseException:
        release_computed(session, computed)
        raise
    out.sources += computed
    return out, dataclasses.replace(plan, notes=(*notes, *plan.notes)) if notes else plan, phys


def columns_of(sql: str, session: Session, params: list[object]) -> list[tuple[str, str]]:
    """``(name, DuckDB type)`` of each column of the query ``sql`` (modelsql SQL: a PREDICT in it is planned),
    described with nothing run: a batch PREDICT runs on no rows and a table function of ours in it is not computed,
    as under EXPLAIN.

    Raises:
        the query's errors, as :func:`run_query` raises them.
    """
    out, _, _ = run_query(msql.parse(f"SELECT * FROM ({sql}) LIMIT 0")[0], session, params, dry=True)
    try:
        return [(str(d[0]), str(d[1])) for d in out.description or []]
    finally:
        session.duck.fetchall()
        out.release()


def _plan_and_run(stmt: exp.Expression, session: Session, params: list[object], *, prefix: str, suffix: str,
                  dry: bool, cache_key: Optional[tuple[object, ...]],
                  arrow: bool = False, row_hash: bool = False) -> tuple[Result, QueryPlan, Physical]:
    generation = session.generation()
    plan = plan_query(stmt, session, params)
    choices = choose(plan)
    entry = None
    if (cache_key is not None and not any(uses_parameters(p.args.get("options")) for p in stmt.find_all(PredictTable))
            and not reads_outside_the_catalog(stmt, session)):
        by_value = table_arguments(stmt)
        entry = CachedPlan(plan, choices, generation, session.text, session.qmark_style, by_value,
                           tuple(params[k - 1] for k in by_value))
    keep: Optional[dict[str, StreamOperator[PredictScan]]] = (
        {} if entry is not None and all(c.execution == "stream" for c in choices.values()) else None)
    out, phys = _run(plan, choices, session, params, prefix=prefix, suffix=suffix, dry=dry, keep=keep, arrow=arrow,
                     row_hash=row_hash)
    if entry is not None and cache_key is not None:  # (an entry is made only with a key)
        if keep is not None:
            entry.persistent, entry.sql, entry.params = keep, phys.sql, phys.params
        session.plans.put(cache_key, entry)
    return out, plan, phys


_FILE_NAME = re.compile(r"[./\\:*]")
"""A table name DuckDB reads as a file (``'data.parquet'``, ``'s3://...'``, ``'*.csv'``) rather than a table."""


def reads_outside_the_catalog(stmt: exp.Expression, session: Session) -> bool:
    """Whether ``stmt`` reads a table function (``read_parquet('f')``, ``range(n)``) or a view: what they
    return can change with no statement on this database (a file rewritten), so no plan of it is kept."""
    tables = list(stmt.find_all(exp.Table))
    if any(isinstance(t.this, exp.Func) for t in tables):
        return True
    if any(_FILE_NAME.search(t.name) for t in tables if isinstance(t.this, exp.Identifier)):
        return True  # FROM 'data.parquet': DuckDB reads the file (a replacement scan)
    names = {t.name.lower() for t in tables if isinstance(t.this, exp.Identifier)}
    if not names:
        return False
    try:
        views = session.duck.execute(
            "SELECT count(*) FROM duckdb_views() WHERE NOT internal AND lower(view_name) IN (SELECT unnest(?))",
            [sorted(names)]).fetchall()[0][0]
    except Exception:
        return True
    return int(views) > 0


def table_arguments(stmt: exp.Expression) -> tuple[int, ...]:
    """Numbers of the ``$k`` parameters that are arguments of a FROM item (``read_parquet(?)``,
    ``range(?)``): their values decide an input's columns and types, so a plan holds for those values only."""
    found = set()
    for p in stmt.find_all(exp.Placeholder):
        node = p.parent
        while node is not None and not isinstance(node, (exp.Select, exp.Where, exp.Join, exp.Having, exp.Subquery)):
            if isinstance(node, exp.Table):
                if str(p.this).isdigit():
                    found.add(int(p.this))
                break
            node = node.parent
    return tuple(sorted(found))


def run_cached(entry: CachedPlan, session: Session, params: list[object]) -> Result:
    """Execute a cached plan with new parameter values."""
    if entry.sql is None:
        return _run(entry.plan, entry.choices, session, params)[0]
    session.begin_if_needed()
    out = None
    ops: list[StreamOperator[PredictScan]] = list(entry.persistent.values())
    for op in ops:
        op.reset([params[k - 1] for k in op.param_numbers])
        op.function.progress = predict_meter(session, op.scan, op.execution)
    try:
        session.run(entry.sql, [params[k - 1] for k in entry.params],
                    lambda exc: predict_error(exc, ops, session.duck))
        out = session.duckdb_result(entry.plan.kind)
    finally:
        if out is None:
            for op in ops:
                op.function.error = None
    out.operators = ops
    out.translate = lambda exc: predict_error(exc, ops, session.duck)
    return out


def _run(plan: QueryPlan, choices: dict[int, Choice], session: Session, params: list[object], *, prefix: str = "",
         suffix: str = "", dry: bool = False, keep: Optional[dict[str, StreamOperator[PredictScan]]] = None,
         arrow: bool = False, row_hash: bool = False) -> tuple[Result, Physical]:
    session.begin_if_needed()
    held = Result(session.duck)

    def failed(exc: BaseException) -> Error:
        return predict_error(exc, held.operators, session.duck)

    try:
        try:
            phys = build(plan, choices, session, params, held, dry=dry, keep=keep)
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
        text, values = prefix + phys.sql + suffix, [params[k - 1] for k in phys.params]
        if arrow:
            table, description = session.run_arrow(text, values, failed, row_hash=row_hash)
            out = Result(session.duck, description=description, table=table)
            out.adopt(held)
            out.release()
            return out, phys
        session.run(text, values, failed)
        out = session.duckdb_result("SELECT" if prefix or suffix else plan.kind)
        out.adopt(held)
        out.translate = lambda exc: predict_error(exc, out.operators, session.duck)
        if not out.streaming:
            out.release()
        return out, phys
    except BaseException:
        held.rollback()
        if keep:
            for name in keep:
                try:
                    session.duck.remove_function(name)
                except Exception:
                    pass
            keep.clear()
        raise


@handles(exp.Expression, reads_only=lambda stmt: isinstance(stmt, exp.Select))
def _query(stmt: exp.Expression, session: Session, params: list[object]) -> Result:
    if isinstance(stmt, exp.Command):
        raise NotSupportedError(
            f"PREDICT (and EVALUATE(...), CONFUSION_MATRIX(...), ROC_CURVE(...)) cannot be used in "
            f"{str(stmt.this).upper()}: modelsql plans the statement when it runs. "
            "Run it with cursor.execute and ? parameters instead (its plan is kept for the next run).",
            code="predict_in_command",
        )
    return run_query(stmt, session, params, cache_key=session.cache_key)[0]

