"""Which names a statement may read a PREDICT's columns by (for output pruning and batch execution)."""

from __future__ import annotations

from typing import Optional

from sqlglot import exp


def referenced_names(statement: exp.Expression, predict: exp.Expression) -> Optional[set[str]]:
    """Lower-cased names the statement may read a column by, outside ``predict``'s own subtree.

    Conservative: every column reference, its qualifiers (``st.k`` may be field
    ``k`` of struct column ``st``) and every other identifier count. Returns
    None when columns may be read without their names (then nothing can be
    pruned): a ``*`` or ``COLUMNS(...)`` outside that subtree, a positional
    ``#n``, a column alias list (``AS q(a, b)``), the PREDICT's alias read as
    a whole row (``SELECT q``), PIVOT/UNPIVOT or SUMMARIZE.
    """
    alias = predict.args.get("alias")
    if isinstance(alias, exp.TableAlias) and alias.columns:
        return None
    own = alias.name.lower() if isinstance(alias, exp.TableAlias) and alias.name else None
    inside = {id(n) for n in predict.walk()}
    names: set[str] = set()
    for node in statement.walk():
        if id(node) in inside:
            continue
        if isinstance(node, exp.Star) and not isinstance(node.parent, exp.Func):
            return None  # SELECT * / t.* may pass every column on (count(*) does not)
        if isinstance(node, exp.Columns) or (isinstance(node, exp.Anonymous) and node.name.upper() == "COLUMNS"):
            return None  # DuckDB's COLUMNS('regex') selects columns by pattern
        if isinstance(node, exp.PositionalColumn) or (isinstance(node, exp.TableAlias) and node.columns):
            return None  # #n, or AS q(a, b): columns by position
        if isinstance(node, (exp.Pivot, exp.Summarize)) or type(node).__name__ == "Unpivot":
            return None  # PIVOT groups by, and SUMMARIZE reads, every column it is not told about
        if isinstance(node, exp.Join) and str(node.args.get("method") or "").upper() == "NATURAL":
            return None  # NATURAL JOIN matches on every column name the two sides share
        if own and isinstance(node, exp.Column) and not node.table and node.name.lower() == own:
            return None  # SELECT q / q['x'] / to_json(q): the whole row of the PREDICT, as a struct
        if isinstance(node, exp.Identifier):
            names.add(node.name.lower())  # note.upper(), struct fields: any name may name a column
        if isinstance(node, exp.Column):
            names.add(node.name.lower())
            # ``st.k`` may be field k of a struct column st: a qualifier may name a column too
            names.update(part.lower() for part in (node.table, node.db, node.catalog) if part)
    return names
