"""Rule ``predict_prune_outputs``: compute only the model outputs the query reads.

Rewrite: a PREDICT scan whose statement never names one of its output
columns (and has no ``*`` that could pass it on) drops that output, so ONNX
Runtime runs only the part of the graph the remaining outputs need and no
unused tensor is converted back to Arrow. At least one output is kept in the
plan; when the query reads none at all (``SELECT count(*) FROM PREDICT(...)``)
DuckDB's own optimizer drops the call, so the model does not run and a NULL
input is not reported: the answer never depends on the predictions.

This is projection pushdown through a model, one of the cross-optimizations
of SQL and ML inference in Raven (Karanasos et al., "Extending Relational
Query Processing with ML Inference", CIDR 2020); PRETZEL (OSDI 2018) prunes
pipeline stages whose results no consumer reads in the same spirit.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

from sqlglot import exp

from ..plan import PredictScan, QueryPlan


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


def predict_prune_outputs(plan: QueryPlan) -> QueryPlan:
    """Each scan keeps only the outputs its statement may read (all when that is unknown);
    returns ``plan`` itself when nothing is pruned."""
    scans = tuple(_pruned(s) for s in plan.scans)
    if all(a is b for a, b in zip(scans, plan.scans)):
        return plan
    return replace(plan, scans=scans)


def _pruned(scan: PredictScan) -> PredictScan:
    if scan.used is None:
        return scan
    outputs = scan.binding.outputs
    kept = tuple(o for o in outputs if o.column.lower() in scan.used) or outputs[:1]
    if len(kept) == len(outputs):
        return scan
    return replace(scan, binding=replace(scan.binding, outputs=kept))
