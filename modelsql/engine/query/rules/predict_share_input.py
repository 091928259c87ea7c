"""Rule ``predict_share_input``: PREDICTs of one statement over the same input read it once.

Rewrite: two or more PREDICT scans whose input relations are the same (same
text, same parameters) become one :class:`~modelsql.engine.query.plan.ShareGroup`:
the input is scanned once, every model's function runs on the same chunks in
one projection, and each PREDICT reads its own outputs from that shared result
(a MATERIALIZED common table expression), as in the everyday champion/challenger
query::

    SELECT a.id, a.label AS old, b.label AS new
    FROM PREDICT(MODEL m1, TABLE t) a JOIN PREDICT(MODEL m2, TABLE t) b USING (id)

And a CTE whose body holds a PREDICT and that the statement reads more than
once is marked MATERIALIZED, so its model runs once, not once per reference.

This is PRETZEL's sub-plan materialization (Lee et al., "PRETZEL: Opening the
Black Box of Machine Learning Prediction Serving Systems", OSDI 2018, section
4.2: pipelines sharing a prefix over one input compute it once per batch),
applied to the scan that feeds the models.

It applies only where it cannot change an answer: the statement is a SELECT
whose own FROM items are the shared PREDICTs (or the CTE's references) alone
(not inside a subquery, whose CTEs the shared scan could not see), each with
an output the statement reads (one with none never runs alone), with
no LIMIT/OFFSET/QUALIFY, and filters only on the models' outputs (a filter on
an input column, or a join with another table, may push into one PREDICT's
input in DuckDB so that its model never sees, nor fails on, some rows); no
member skips rows (``on_null``/``on_error = 'skip'``) or asks for batch
execution. Otherwise it returns the plan unchanged, with a note saying why.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Optional, Sequence

from sqlglot import exp

from modelsql.engine.query.plan import PredictScan, QueryPlan, ScanRef, ShareGroup

_STOPPERS = (exp.Limit, exp.Offset, exp.Fetch, exp.Qualify, exp.Pivot, exp.Summarize)
_FILTERS = (exp.Where, exp.Having)


def predict_share_input(plan: QueryPlan) -> QueryPlan:
    """Group scans over one input, and materialize CTEs of PREDICTs read twice (see module docstring)."""
    plan = _share_scans(plan)
    return _materialize_ctes(plan)


def _main_body(stmt: exp.Expression) -> exp.Expression:
    """A copy of ``stmt`` without its WITH: what the statement itself reads (CTE bodies are the inputs'
    business, and their columns are not the scans')."""
    body = stmt.copy()
    body.set("with_", None)
    return body


def _skips_rows(scan: PredictScan) -> bool:
    return scan.options.on_null == "skip" or scan.options.on_error == "skip"


def _share_scans(plan: QueryPlan) -> QueryPlan:
    by_input: dict[tuple[str, tuple[int, ...]], list[PredictScan]] = {}
    sharable = [s for s in plan.scans if s.placement.in_main_body and not s.input.inner]
    if len(sharable) < 2:
        return plan  # nothing to share (and no copy of a large statement to make)
    body = _main_body(plan.tree)
    for scan in sharable:
        if _outputs_read(body, scan):
            # (a PREDICT none of whose outputs is read never runs alone: DuckDB drops its call)
            by_input.setdefault(scan.input.key, []).append(scan)
    candidates = [group for group in by_input.values() if len(group) > 1]
    if not candidates:
        return plan
    groups, notes = list(plan.groups), list(plan.notes)
    scans = {s.id: s for s in plan.scans}
    for members in candidates:
        why = _why_not(plan, body, members)
        names = ", ".join(f"{s.model.name}" for s in members)
        if why:
            notes.append(f"predict_share_input declined for {names}: {why}")
            continue
        gid = len(groups)
        groups.append(ShareGroup(gid, tuple(s.id for s in members), members[0].input))
        for s in members:
            scans[s.id] = replace(s, shared=gid)
    if len(groups) == len(plan.groups):
        return replace(plan, notes=tuple(notes))
    return replace(plan, scans=tuple(scans[s.id] for s in plan.scans), groups=tuple(groups), notes=tuple(notes))


def _outputs_read(body: exp.Expression, scan: PredictScan) -> bool:
    """Whether the statement's main ``body`` reads one of ``scan``'s outputs: by a column qualified with
    its alias or unqualified (or through ``*``, when its reads are unknown)."""
    if scan.used is None:
        return True
    alias = next((t.alias_or_name.lower() for t in body.find_all(exp.Table)
                  if isinstance(t.this, ScanRef) and t.this.scan_id == scan.id), "")
    outputs = {o.column.lower() for o in scan.outputs}
    return any(c.name.lower() in outputs and (not c.table or c.table.lower() == alias)
               for c in body.find_all(exp.Column))


_VOLATILE = {"random", "rand", "gen_random_uuid", "uuid", "uuidv4", "uuidv7", "setseed", "nextval", "currval"}
"""Functions whose value differs on every call: two reads of an input using one give different rows."""


def volatile(tree: exp.Expression) -> str:
    """The volatile function or sample in ``tree`` ('' when none): reading it twice is not reading it once."""
    for node in tree.walk():
        if isinstance(node, exp.TableSample):
            return "a sample (USING SAMPLE / TABLESAMPLE)"
        if isinstance(node, exp.Rand):
            return node.sql(dialect="duckdb") or "random()"
        if isinstance(node, exp.Func) and (node.sql_name().lower() in _VOLATILE
                                           or (isinstance(node, exp.Anonymous) and node.name.lower() in _VOLATILE)):
            return node.sql(dialect="duckdb")
    return ""


def _why_not(plan: QueryPlan, body: exp.Expression, members: Sequence[PredictScan]) -> str:
    """Why ``members`` cannot share their input ('' when they can); ``body``: the statement's main body."""
    if not isinstance(plan.tree, exp.Select):
        return "the statement is not a SELECT"
    changing = volatile(members[0].input.tree)
    if changing:
        return f"their input calls {changing}, whose rows differ each time it is read"
    for s in members:
        if _skips_rows(s):
            return f"{s.label} skips rows (on_null / on_error = 'skip')"
        if s.options.execution == "batch":
            return f"{s.label} asks for execution = 'batch'"
    ids = {s.id for s in members}
    outputs = {o.column.lower() for s in members for o in s.outputs}
    return _only_reads(body, lambda t: isinstance(t.this, ScanRef) and t.this.scan_id in ids, outputs)


def _only_reads(stmt: exp.Expression, is_member: Callable[[exp.Table], bool], outputs: set[str]) -> str:
    """'' when the FROM items of ``stmt`` are members alone (``is_member(table)``) and it filters and joins
    only on ``outputs`` or on equalities between two members; else why not."""
    for node in stmt.walk():
        if isinstance(node, _STOPPERS):
            return f"the statement has {type(node).__name__.upper()}, which may stop one PREDICT early"
        if isinstance(node, exp.Table) and not is_member(node):
            return f'it also reads "{node.sql(dialect="duckdb")}", which a join may push into one input'
        if isinstance(node, _FILTERS):
            names = {c.name.lower() for c in node.find_all(exp.Column)}
            if not names <= outputs:
                return "a filter on input columns may push into one PREDICT's input"
        if isinstance(node, exp.Join) and node.args.get("on") is not None:
            for part in node.args["on"].flatten() if isinstance(node.args["on"], exp.And) else [node.args["on"]]:
                if not (_joins_two_sides(part) or {c.name.lower() for c in part.find_all(exp.Column)} <= outputs):
                    return (f"the join condition {part.sql(dialect='duckdb')} tests one side's input columns, "
                            "which DuckDB may push into that PREDICT's input")
        if isinstance(node, (exp.Subquery, exp.Exists, exp.In)) and node is not stmt and not _is_from_item(node):
            return "a subquery expression may read one PREDICT partly"
    return ""


def _joins_two_sides(condition: exp.Expr) -> bool:
    """``a.x = b.y``: an equality of columns of two different FROM items (nothing to push into one side)."""
    if not isinstance(condition, exp.EQ):
        return False
    left, right = condition.this, condition.expression
    return (isinstance(left, exp.Column) and isinstance(right, exp.Column) and bool(left.table) and bool(right.table)
            and left.table.lower() != right.table.lower())


def _is_from_item(node: exp.Expression) -> bool:
    return isinstance(node, exp.Subquery) and isinstance(node.parent, (exp.From, exp.Join))


def _materialize_ctes(plan: QueryPlan) -> QueryPlan:
    stmt = plan.tree
    with_ = stmt.args.get("with_")
    if not isinstance(stmt, exp.Select) or with_ is None:
        return plan
    marked, notes = list(plan.materialized), list(plan.notes)
    for cte in with_.expressions:
        refs = [s for s in cte.this.find_all(ScanRef)]
        if not refs or cte.alias_or_name in marked or cte.args.get("materialized") is not None:
            continue  # (MATERIALIZED or NOT MATERIALIZED as written is kept: DuckDB does what it says)
        name = cte.alias_or_name.lower()
        reads = [t for t in stmt.find_all(exp.Table)
                 if not t.db and t.name.lower() == name and not _inside(t, cte)]
        if len(reads) < 2:
            continue
        scans = [plan.scan(r.scan_id) for r in refs]
        why = next((f"{s.label} skips rows" for s in scans if _skips_rows(s)), "")
        why = why or _only_reads_cte(stmt, name, cte, {o.column.lower() for s in scans for o in s.outputs})
        if why:
            notes.append(f"predict_share_input declined to materialize CTE {cte.alias_or_name}: {why}")
            continue
        marked.append(cte.alias_or_name)
    if len(marked) == len(plan.materialized) and len(notes) == len(plan.notes):
        return plan
    return replace(plan, materialized=tuple(marked), notes=tuple(notes))


def _only_reads_cte(stmt: exp.Select, name: str, cte: exp.CTE, outputs: set[str]) -> str:
    return _only_reads(_main_body(stmt), lambda t: not t.db and t.name.lower() == name, outputs)


def _inside(node: Optional[exp.Expr], ancestor: exp.Expr) -> bool:
    while node is not None:
        if node is ancestor:
            return True
        node = node.parent
    return False
