"""Which common table expressions a node of a statement sees, and a FROM item carried out of its statement with
them: a table function computed before its query runs (``EVALUATE(MODEL m, TABLE h, ...)`` under
``WITH h AS (...)``) reads the CTE ``h``, as the query would, never a table of that name.

SQL's scoping (as DuckDB applies it): a query sees the CTEs of every WITH clause around it (a query's, or one
written before INSERT, UPDATE or DELETE); an inner clause's name hides an outer one's; a CTE's own body sees the
CTEs listed before it (and, in a ``WITH RECURSIVE``, itself, which a table function computed before the query
cannot read).
"""

from __future__ import annotations

from typing import Any, Optional

from sqlglot import exp

__all__ = ["enclosing_withs", "with_enclosing_ctes"]


def enclosing_withs(node: exp.Expression) -> list[exp.With]:
    """The WITH clauses whose CTEs ``node`` sees, innermost first, each holding only the CTEs visible at ``node``
    (copies; none empty)."""
    found: list[exp.With] = []
    cte: Optional[exp.CTE] = None  # the nearest CTE whose body holds node
    child: Any = node
    parent: Any = node.parent
    while parent is not None:
        if isinstance(parent, exp.CTE):
            cte = parent
        clause = parent.args.get("with_")  # (a query's, or an INSERT's, UPDATE's, DELETE's written before it)
        if isinstance(clause, exp.With):
            ctes = list(clause.expressions)
            if child is clause:  # node is in a CTE's body: those before it (a recursive one's self-reference is
                ctes = ctes[:next(i for i, c in enumerate(ctes) if c is cte)]  # not computable before the query)
            if ctes:
                found.append(exp.With(expressions=[c.copy() for c in ctes], recursive=clause.args.get("recursive")))
        child, parent = parent, parent.parent
    return found


def _reads(source: exp.Expression, names: set[str]) -> bool:
    """Whether ``source`` names one of ``names`` (lower case) as an unqualified table."""
    return any(isinstance(t.this, exp.Identifier) and not t.args.get("db") and t.name.lower() in names
               for t in source.find_all(exp.Table))


def with_enclosing_ctes(source: exp.Expression, at: exp.Expression) -> exp.Expression:
    """``source`` (a FROM item, ``exp.Table`` or ``exp.Subquery``, read by the node ``at`` of a statement) as a
    subquery under the WITH clauses visible at ``at`` (:func:`enclosing_withs`), nested as they were, so it reads
    the same rows outside its statement; ``source`` itself when it names none of their CTEs."""
    withs = enclosing_withs(at)
    names = {c.alias_or_name.lower() for w in withs for c in w.expressions}
    if not withs or not _reads(source, names):
        return source
    wrapped = source.copy()
    for clause in withs:  # innermost first: each outer clause wraps the inner ones
        body = wrapped.this if isinstance(wrapped, exp.Subquery) and isinstance(wrapped.this, exp.Select) else None
        if body is not None and body.args.get("with_") is None:
            query = body.copy()
        else:
            query = exp.select("*").from_(wrapped.copy())
        query.set("with_", clause)
        wrapped = exp.Subquery(this=query)
    return wrapped
