"""The SQL of physical lowering: a statement's sqlglot tree, each PREDICT's :class:`~modelsql.engine.query.plan.ScanRef`
read through the SQL its operator gave, generated once as DuckDB SQL.

:func:`render` generates the tree with a unique token where each marker was and splices the lowered pieces
into the text (they are never parsed again); it also marks CTEs MATERIALIZED, adds the shared scans' CTEs,
and renumbers the statement's parameters ``$1..$m``. :func:`from_item` renders a PREDICT's input as written,
for a streaming operator to read in place.
"""

from __future__ import annotations

import uuid
from typing import Sequence

from sqlglot import exp

from modelsql import sql as msql
from modelsql.engine.query.plan import ScanRef

__all__ = ["Lowered", "SharedCte", "render", "from_item"]

Lowered = dict[int, tuple[str, set[int]]]
"""Scan id -> the SQL that reads its operator, and the statement's parameter numbers that SQL carries."""

SharedCte = tuple[str, str, set[int]]
"""A shared scan's CTE: its name, its body's SQL, and the statement's parameter numbers the body carries."""

_TOKEN = "__msql_scan_" + uuid.uuid4().hex[:8] + "_"


def render(tree: exp.Expression, lowered: Lowered, *, renumber_params: bool = True,
           materialized: tuple[str, ...] = (), extra_ctes: Sequence[SharedCte] = ()) -> tuple[str, list[int]]:
    """DuckDB SQL of ``tree`` with each :class:`ScanRef` read through its lowered SQL.

    ``lowered``: scan id -> (its SQL, the statement's parameter numbers that SQL carries).
    ``extra_ctes``: ``(name, body SQL, numbers)`` appended, MATERIALIZED, to the top-level WITH.
    Returns the SQL and the statement's parameter numbers it uses; with ``renumber_params`` they
    are renumbered ``$1..$m`` in the text (otherwise the statement's own ``$k`` are kept).
    """
    t = tree.copy()
    used = {int(p.this) for p in t.find_all(exp.Placeholder) if str(p.this).isdigit()}
    pieces: dict[str, str] = {}
    for ref in list(t.find_all(ScanRef)):
        sub, numbers = lowered[ref.scan_id]
        token = f"{_TOKEN}{ref.scan_id}_"  # (the closing "_": no token is a prefix of another)
        pieces[token] = f"({sub})"
        used |= numbers
        ref.replace(exp.to_identifier(token))
    for cte in t.find_all(exp.CTE):
        if cte.alias_or_name in materialized:
            cte.set("materialized", True)
    for name, body, numbers in extra_ctes:
        token = f"{_TOKEN}cte_{name}_"
        pieces[token] = body
        used |= numbers
        _append_cte(t, exp.CTE(this=exp.Table(this=exp.to_identifier(token)),
                               alias=exp.TableAlias(this=exp.to_identifier(name, quoted=True)), materialized=True))
    sql = msql.to_duckdb_sql(t, copy=False)  # t is this call's own copy
    for token, piece in pieces.items():
        sql = sql.replace(token, piece)
    ordered = sorted(used)
    if renumber_params and ordered != list(range(1, len(ordered) + 1)):
        sql = msql.renumber_placeholders(sql, {k: i + 1 for i, k in enumerate(ordered)})
    return sql, ordered


def _append_cte(tree: exp.Expression, cte: exp.CTE) -> None:
    """Add ``cte`` last to the top-level WITH of ``tree`` (a WITH of its own when it has none)."""
    with_ = tree.args.get("with_")
    if with_ is None:
        tree.set("with_", exp.With(expressions=[cte]))
    else:
        with_.append("expressions", cte)


def from_item(source: exp.Expression, lowered: Lowered) -> tuple[str, set[int]]:
    """A PREDICT's input as written, as SQL to put after FROM (a table name, or a parenthesised query),
    and the statement's parameter numbers it carries."""
    sql, numbers = render(source, lowered, renumber_params=False)
    return (sql if isinstance(source, exp.Table) else f"({sql})"), set(numbers)
