"""Output column names: each column keeps the name DuckDB gives the text the user wrote.

The planner sends DuckDB a statement as sqlglot writes it back (``today()`` as
``CURRENT_DATE``, ``1_000`` as ``1000``, ``ARRAY[1, 2]`` as ``list_value(1, 2)``),
and DuckDB names an unaliased column by its reading of the text it gets. So
before the rewrite, :func:`name_columns` gives each unaliased select-list and
RETURNING expression what keeps the user's name: its own text, or an alias
with the name DuckDB gives that text (``duckdb.SQLExpression(text).get_name()``,
which parses without binding).
"""

from __future__ import annotations

import re
from typing import Optional

import duckdb
from sqlglot import exp

from modelsql import sql as msql
from modelsql.sql.predict import PredictTable

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def name_columns(stmt: exp.Expression, *, qmark_style: bool) -> None:
    """Give each unaliased select-list and RETURNING expression of ``stmt`` (in place) the column name
    DuckDB gives the text the user wrote (:func:`_named`).

    Placeholders are named as DuckDB names them: with ``qmark_style`` (the user wrote ``?``, which the
    planner numbered ``$k``) a ``?`` by its place in the statement; a user's ``$n`` as written.
    """
    mapping: dict[int, int] = {}
    if qmark_style:
        numbers = sorted({int(p.this) for p in stmt.find_all(exp.Placeholder) if str(p.this).isdigit()})
        mapping = {k: i + 1 for i, k in enumerate(numbers)}
    for node in list(stmt.find_all(exp.Select, exp.Returning)):
        aliased = isinstance(node, exp.Select)
        node.set("expressions", [_named(e, mapping, alias=aliased) for e in node.expressions])


def _named(e: exp.Expression, mapping: dict[int, int], *, alias: bool = True) -> exp.Expression:
    """``e`` as it must reach DuckDB for its column to keep the name DuckDB gives the user's text.

    An expression that names nothing (:func:`_reads_nothing`: ``today()``, ``1_000``) is written back
    as the user's text (``meta["source_text"]``), which DuckDB then names itself. Another is aliased
    with the name DuckDB gives that text (:func:`_duckdb_name`) when ``alias`` (a select list: DuckDB
    names RETURNING columns by their bound form) and sqlglot's rendering would be named otherwise,
    unless the name is a plain word, which DuckDB's select-list alias lookup would read as a column.
    Aliased expressions, column references and stars (:func:`_names_itself`) stay as they are. One
    holding a PREDICT that DuckDB cannot read is named as sqlglot writes it, never by the rewrite's text.
    """
    if isinstance(e, exp.Alias) or _names_itself(e):
        return e
    text = e.meta.get("source_text")
    if text is not None and _reads_nothing(e):
        return exp.Var(this=text)
    if not alias:
        return e
    name = _duckdb_name(e, mapping)
    if name is None and e.find(PredictTable) is not None:
        name = e.sql(dialect=msql.DIALECT)
    elif name is None or _NAME_RE.match(name):
        return e
    elif e.find(exp.Placeholder, PredictTable) is None and name == _expression_name(e.sql(dialect="duckdb")):
        return e
    return exp.Alias(this=e, alias=exp.to_identifier(name, quoted=True))


_READS = (exp.Identifier, exp.Placeholder, exp.Parameter, exp.Query, exp.PositionalColumn, PredictTable)


def _reads_nothing(e: exp.Expression) -> bool:
    """Whether ``e`` names no column or anything else (no identifier, parameter, query, ``#n``, nor a star
    but ``count(*)``'s): written back as text, it hides nothing the planner looks for
    (:func:`~modelsql.engine.query.rules.referenced_names` counts every name)."""
    return not any(isinstance(n, _READS) or (isinstance(n, exp.Star) and not isinstance(n.parent, exp.Func))
                   for n in e.walk())


def _expression_name(text: str) -> Optional[str]:
    """DuckDB's name for an unaliased select expression written ``text`` (parsed, not bound), or None."""
    try:
        return duckdb.SQLExpression(text).get_name()
    except Exception:
        return None


def _names_itself(e: exp.Expression) -> bool:
    """A column reference (DuckDB names ``t.a`` and ``(t.a)`` ``a``, as sqlglot writes them back), a star,
    or an expression that expands to several columns (``COLUMNS(...)``, ``UNPACK``): left unaliased."""
    inner = e.unnest()
    if isinstance(inner, (exp.Column, exp.Star)):
        return True
    if isinstance(inner, exp.Dot) and all(isinstance(n, (exp.Dot, exp.Column, exp.Identifier)) for n in inner.walk()):
        return True  # a struct field path, t.s.x.y
    return any(isinstance(n, exp.Columns) or (isinstance(n, exp.Anonymous) and n.name.upper() == "UNPACK")
               for n in e.walk())


def _duckdb_name(e: exp.Expression, mapping: dict[int, int]) -> Optional[str]:
    """The name DuckDB gives an unaliased select expression written as ``e``'s source text
    (``meta["source_text"]``, read by ``duckdb.SQLExpression``, which parses without binding), its
    ``$k`` renumbered by ``mapping``; a PREDICT in it stands as sqlglot writes it. None without a text
    or when DuckDB cannot read it."""
    text = e.meta.get("source_text")
    if text is None:
        return None
    stand_ins: dict[str, str] = {}
    for j, p in enumerate(e.find_all(PredictTable)):
        written = p.meta.get("source_text")
        if written and written in text:  # not one inside another PREDICT, already stood in for
            stand_ins[f"__msql_predict_{j}"] = msql.renumber_placeholders(p.sql(dialect=msql.DIALECT), mapping)
            text = text.replace(written, f"__msql_predict_{j}")
    for scan in e.find_all(exp.Identifier):  # a table function computed before planning, scanned by its name
        written, ours = scan.meta.get("computed") or (None, None)
        if written and ours and written in text:
            stand_ins[scan.name] = msql.renumber_placeholders(str(ours), mapping)
            text = text.replace(written, scan.name)
    name = _expression_name(msql.renumber_placeholders(text, mapping))
    if name is None:
        return None
    for stand_in, written in stand_ins.items():
        name = name.replace(stand_in, written)
    return name
