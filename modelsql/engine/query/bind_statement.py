"""Binding a whole statement into one :class:`~modelsql.engine.query.plan.QueryPlan`.

Every ``PREDICT`` of the statement is bound, innermost first and those in
CTE bodies before the rest (so a PREDICT over another PREDICT, or over a CTE
holding one, sees its input's columns): the model is resolved in the catalog,
the input relation becomes a :class:`~modelsql.engine.query.plan.Relation` node, its
columns are described by DuckDB (``LIMIT 0``, with inner PREDICTs stood in by
typed empty relations, so nothing runs), and columns are bound to model inputs
(:func:`modelsql.engine.query.bind_predict.bind_predict`). The PREDICT leaves a
:class:`~modelsql.engine.query.plan.ScanRef` marker in the statement's tree.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Optional, Sequence

import sqlglot
from sqlglot import exp

from modelsql.engine.artifacts.python_programs import check_source
from modelsql import sql as msql
from modelsql.duckdb_errors import translate
from modelsql.errors import Error, NotSupportedError
from modelsql.catalog.entries import ModelVersion, PipelineVersion, RoutedModels
from modelsql.sql.grammar import ModelRef
from modelsql.sql.predict import ModelSet, PredictTable
from modelsql.engine.artifacts import compiled
from modelsql.engine.query.catalog_entries import entry_of, model_set_of, pointed
from modelsql.engine.query.learned_costs import costs_for
from modelsql.engine.query.bind_predict import Column, PredictModel, bind_predict, parse_options, quote
from modelsql.engine.query.bind_routed import bind_routed
from modelsql.engine.query.column_names import name_columns
from modelsql.engine.options import no_repeats, option_of, value
from modelsql.engine.query.plan import Placement, PredictScan, QueryPlan, Relation, ScanRef
from modelsql.engine.query.references import referenced_names
from modelsql.engine.query.context import PlanningContext


def bind_query(stmt: exp.Expression, session: PlanningContext, params: list[object]) -> QueryPlan:
    """The plan of one statement containing PREDICTs.

    Raises:
        NotSupportedError: PREDICT in a stored definition (``predict_in_view``), or a correlated input.
        ProgrammingError / DataError: whatever binding one PREDICT raises (see :func:`bind_scan`),
            pointing at the model name in the statement text.
    """
    stmt = stmt.copy()
    kind = msql.stored_definition(stmt)
    if kind and stmt.find(PredictTable) is not None:
        # The PREDICT functions live only as long as one result: a stored
        # definition would call a function that no longer exists.
        raise NotSupportedError(
            f"PREDICT cannot be used in CREATE {kind}: the definition would outlive "
            "the statement. Use CREATE TABLE ... AS SELECT ... FROM PREDICT(...) to store predictions.",
            code="predict_in_view",
        )
    name_columns(stmt, qmark_style=session.qmark_style)
    scans: list[PredictScan] = []
    for i, p in enumerate(predicts_in_order(stmt)):
        used = referenced_names(stmt, p.parent if isinstance(p.parent, exp.Table) else p)
        try:
            scan = bind_scan(p, i, params, session, scans, used)
        except Error as err:
            raise pointed(session.text, correlated(err, p) or err,
                          option_of(p.args.get("options"), err) or p.this) from None
        scans.append(scan)
        p.replace(ScanRef(this=exp.Literal.number(i)))
    return QueryPlan(tree=stmt, scans=tuple(scans), kind=result_kind(stmt), costs=costs_for(session))


def _programs(mv: PredictModel) -> list[ModelVersion]:
    """The Python-program versions a PREDICT of ``mv`` runs: itself, a pipeline's steps, a model set's members."""
    if isinstance(mv, PipelineVersion):
        return [s.model for s in mv.steps if s.model.kind == "python"]
    if isinstance(mv, RoutedModels):
        return [m for m in mv.members if m.kind == "python"]
    return [mv] if mv.kind == "python" else []


def bind_scan(p: PredictTable, index: int, params: list[object], session: PlanningContext,
              bound: list[PredictScan], used: Optional[set[str]]) -> PredictScan:
    """One PREDICT as a :class:`PredictScan` (``bound``: the scans bound before it, which its input may read)."""
    ref = p.this
    mv: PredictModel
    if isinstance(ref, ModelSet):
        mv = model_set_of(session, ref)
    else:
        mv = entry_of(session, ref.model_name, ref.version_number, ref, pipeline=bool(ref.args.get("pipeline")))
    for program in _programs(mv):  # trusted and unchanged, refused now, before anything runs (the transaction stays usable)
        check_source(session, program)
    no_repeats(p.args.get("options"), f"PREDICT({mv.ref_sql})")
    options = parse_options({k: value(v, params) for k, v in p.option_values.items()}, mv.ref_sql)
    if options.backend == "tvm":
        compiled.require_artifact(session, mv, options.batch_size)  # refused now, before anything runs
    relation, key_columns = input_relation(p, bound, session)
    in_params = [params[i - 1] for i in relation.params]
    columns = describe(session, relation.sql, in_params, mv.ref_sql)
    if isinstance(mv, RoutedModels):
        binding = bind_routed(mv, columns, options, key_columns)
    else:
        binding = bind_predict(mv, columns, options, key_columns)
    if mv.batch_dependence and options.isolate_rows:
        options = replace(options, batch_size=1)  # each row gets the answer it gets alone (analyses.batch_axis)
    stmt = p.root()
    placement = placement_of(p, stmt, binding.columns, used)
    tvm, declined = compiled.alternative(session, mv) if not options.backend_given else (None, None)
    return PredictScan(
        id=index, model=mv, input=relation, binding=binding, options=options,
        used=frozenset(used) if used is not None else None, placement=placement,
        estimated_rows=estimate_rows(session, relation.sql, in_params), tvm=tvm, tvm_declined=declined,
    )


def input_relation(p: PredictTable, bound: list[PredictScan], session: PlanningContext) -> tuple[Relation, list[str]]:
    """The :class:`Relation` a PREDICT reads, and the key columns of its table (never fed to a model)."""
    source = p.args["expression"]
    key_columns: list[str] = []
    ctes = ctes_in_scope(p)
    table = None
    if isinstance(source, exp.Subquery):
        inner = source.this.copy()
    else:
        inner = exp.select("*").from_(source.copy())
        if not (not source.db and source.name.lower() in {c.alias_or_name.lower() for c in ctes}):
            table = source.name
            key_columns = key_columns_of(session, source)
    ctes = referenced_ctes(inner, ctes)
    if any(c.find(PredictTable) is not None for c in ctes):
        raise NotSupportedError(
            f"PREDICT({_ref_text(p.this)}): its input reads a recursive CTE that holds a PREDICT not yet "
            "computed (itself or one around it); compute the predictions in a CTE of their own first.",
            code="predict_in_recursive_cte",
        )
    if ctes:
        # The input may name CTEs of the enclosing query: it carries them along.
        alias = exp.TableAlias(this=exp.to_identifier("__msql_src"))
        wrapped = exp.select("*").from_(exp.Subquery(this=inner, alias=alias))
        recursive = any(isinstance(c.parent, exp.With) and c.parent.args.get("recursive") for c in ctes)
        wrapped.set("with_", exp.With(expressions=[c.copy() for c in ctes], recursive=recursive or None))
        inner = wrapped
    sql, numbers = renumber(stand_in_tree(inner, bound))
    refs = tuple(sorted({r.scan_id for r in inner.find_all(ScanRef)}))
    return Relation(tree=inner, source=source.copy(), inner=refs, table=table, sql=sql,
                    params=tuple(numbers)), key_columns


def referenced_ctes(tree: exp.Expression, ctes: list[exp.CTE]) -> list[exp.CTE]:
    """The CTEs of ``ctes`` that ``tree`` reads, directly or through another of them, in their order."""
    by_name = {c.alias_or_name.lower(): c for c in ctes}
    wanted: set[str] = set()
    todo = [tree]
    while todo:
        node = todo.pop()
        for t in node.find_all(exp.Table):
            name = t.name.lower()
            if not t.db and name in by_name and name not in wanted:
                wanted.add(name)
                todo.append(by_name[name].this)
    return [c for c in ctes if c.alias_or_name.lower() in wanted]


def stand_in_tree(tree: exp.Expression, scans: Sequence[PredictScan]) -> exp.Expression:
    """A copy of ``tree`` in which each :class:`ScanRef` reads a typed empty stand-in of its scan:
    the scan's input columns and its outputs as NULLs of their types, no rows (nothing runs)."""
    by_id = {s.id: s for s in scans}
    tree = tree.copy()
    for ref in list(tree.find_all(ScanRef)):
        scan = by_id[ref.scan_id]
        outs = ", ".join(f"CAST(NULL AS {o.duckdb_type}) AS {quote(o.column)}" for o in scan.outputs)
        stand_in = sqlglot.parse_one(f'SELECT *, {outs} FROM __msql_input AS "__msql_in" LIMIT 0', read="duckdb")
        table = stand_in.find(exp.Table)
        assert table is not None  # (the FROM item of the text above)
        table.replace(exp.Subquery(this=stand_in_tree(scan.input.tree, scans),
                                   alias=exp.TableAlias(this=exp.to_identifier("__msql_in", quoted=True))))
        put_in_place(ref, stand_in)
    return tree


def put_in_place(ref: ScanRef, tree: exp.Expr) -> None:
    """Replace the marker ``ref`` by the subquery ``tree`` (keeping the alias of a ``FROM`` item)."""
    parent = ref.parent
    if isinstance(parent, exp.Table) and parent.this is ref:
        parent.replace(exp.Subquery(this=tree, alias=parent.args.get("alias")))
    else:
        ref.replace(exp.Subquery(this=tree))


def _ref_text(ref: ModelRef | ModelSet) -> str:
    """``MODEL m``, ``PIPELINE p`` or ``MODELS (a, b) ROUTE BY c``, as the PREDICT names its models."""
    if isinstance(ref, ModelSet):
        return ref.sql(dialect=msql.DIALECT)
    return ("PIPELINE " if ref.args.get("pipeline") else "MODEL ") + ref.model_name


def describe(session: PlanningContext, input_sql: str, params: list[object], model: str) -> list[Column]:
    """The columns of the input relation (DuckDB binds it with ``LIMIT 0``: no row is read).

    Raises:
        the PEP 249 error of DuckDB's, prefixed ``PREDICT(MODEL m): the input is not a valid relation``.
    """
    try:
        cur = session.duck.execute(f'SELECT * FROM ({input_sql}) AS "__msql_in" LIMIT 0', params or None)
        desc = cur.description
        cur.fetchall()
    except Exception as exc:
        err = translate(exc)
        raise type(err)(f"PREDICT({model}): the input is not a valid relation: {err}", code=err.code) from exc
    return [Column(d[0], str(d[1])) for d in desc]


def key_columns_of(session: PlanningContext, table: exp.Table) -> list[str]:
    """The PRIMARY KEY and UNIQUE columns of ``table`` (never fed to a model by position), resolved as
    DuckDB resolves the name: the database and schema written, else a temporary table of that name,
    else the current database and schema."""
    try:  # most tables have no key: one look at the constraints (1.5 ms) spares resolving the name (6 ms)
        keyed = session.duck.execute(
            "SELECT count(*) FROM duckdb_constraints() WHERE lower(table_name) = lower(?) "
            "AND constraint_type IN ('PRIMARY KEY', 'UNIQUE')", [table.name]).fetchall()[0][0]
        if not keyed:
            return []
        rows = session.duck.execute(
            "SELECT t.database_name, t.schema_name, c.constraint_column_names, current_database(), current_schema() "
            "FROM duckdb_tables() t LEFT JOIN duckdb_constraints() c ON c.table_oid = t.table_oid "
            "AND c.constraint_type IN ('PRIMARY KEY', 'UNIQUE') WHERE lower(t.table_name) = lower(?)",
            [table.name],
        ).fetchall()
    except Exception:
        return []
    if not rows:
        return []
    here_db, here_schema = rows[0][3], rows[0][4]
    places = {(r[0].lower(), r[1].lower()) for r in rows}
    if table.catalog:
        want = (table.catalog.lower(), (table.db or "main").lower())
    elif table.db:
        want = next(((d, sch) for d, sch in places if sch == table.db.lower() and d == here_db.lower()),
                    next(((d, sch) for d, sch in places if d == table.db.lower()), (here_db.lower(), table.db.lower())))
    elif ("temp", "main") in places:
        want = ("temp", "main")
    else:
        want = (here_db.lower(), here_schema.lower())
    return [c for r in rows if (r[0].lower(), r[1].lower()) == want for c in (r[2] or [])]


def estimate_rows(session: PlanningContext, input_sql: str, params: list[object]) -> Optional[int]:
    """DuckDB's estimated cardinality of the input, or None when it gives none."""
    try:
        row = session.duck.execute(f"EXPLAIN (FORMAT JSON) {input_sql}", params or None).fetchall()
        return int(json.loads(row[0][1])[0]["extra_info"]["Estimated Cardinality"])
    except Exception:
        return None


def result_kind(stmt: exp.Expression) -> str:
    """``SELECT`` (rows), ``INSERT``/``UPDATE``/``DELETE``/``MERGE_INTO`` (a count) or ``CREATE``."""
    if stmt.args.get("returning"):
        return "SELECT"  # INSERT/UPDATE/DELETE ... RETURNING: its rows are the result
    if isinstance(stmt, (exp.Insert, exp.Update, exp.Delete)):
        return type(stmt).__name__.upper()
    if isinstance(stmt, exp.Merge):
        return "MERGE_INTO"
    if isinstance(stmt, exp.Create):
        return "CREATE"
    return "SELECT"


# ---------------------------------------------------------------- where a PREDICT sits

ROW_DEPENDENT = (exp.Where, exp.Limit, exp.Fetch, exp.Having, exp.Qualify, exp.Join, exp.Offset, exp.Pivot,
                 exp.Summarize)
"""Nodes that may stop a streaming PREDICT early or push into its input."""


def placement_of(p: PredictTable, stmt: exp.Expr, columns: Sequence[Column], used: Optional[set[str]]) -> Placement:
    """Where ``p`` sits in ``stmt`` (see :class:`~modelsql.engine.query.plan.Placement`)."""
    kept = kept_columns(columns, used, stmt)
    return Placement(
        top_level_from=in_top_level_from(p, stmt),
        row_dependent=any(isinstance(n, ROW_DEPENDENT)
                          for n in stmt.walk(prune=lambda n: isinstance(n, PredictTable))),
        in_main_body=_under_from_only(p, stmt),
        kept_columns=tuple(kept),
        arrow_unsafe=tuple(c for c in kept if arrow_unsafe(c.type)),
        renamed=isinstance(p.parent, exp.Table) and bool(getattr(p.parent.args.get("alias"), "columns", None)),
    )


def _under_from_only(node: exp.Expression, stmt: exp.Expr) -> bool:
    """``node`` is a FROM or JOIN item of the top-level SELECT itself (no subquery around it, so every
    CTE its input can name is one of the statement's own)."""
    table = node.parent
    if not isinstance(table, exp.Table):
        return False
    holder = table.parent
    if isinstance(holder, exp.From):
        holder = holder.parent
    elif isinstance(holder, exp.Join):
        holder = holder.parent
    else:
        return False
    return holder is stmt and isinstance(stmt, exp.Select)


def in_top_level_from(node: exp.Expression, stmt: exp.Expr) -> bool:
    """Whether a PREDICT is read by the top-level FROM of ``stmt`` (so ``stmt`` consumes all of it): only FROM,
    table and FROM-subquery nodes lie between it and the top SELECT (of an INSERT or CTAS too)."""
    child, parent = node, node.parent
    while child is not stmt and parent is not None:
        if isinstance(parent, exp.Select):
            if child is not parent.args.get("from_") and child is not parent.args.get("from"):
                return False
        elif isinstance(parent, exp.Subquery):
            if not isinstance(parent.parent, exp.From):
                return False
        elif isinstance(parent, (exp.Insert, exp.Create)):
            if child is not parent.expression:
                return False
        elif not isinstance(parent, (exp.From, exp.Table)):
            return False
        child, parent = parent, parent.parent
    return True


def kept_columns(columns: Sequence[Column], used: Optional[set[str]], stmt: exp.Expr) -> list[Column]:
    """The input columns a batch-mode PREDICT passes through: all of them, or, when the statement's
    column references are known (:func:`~modelsql.engine.query.references.referenced_names`: ``USING`` names count,
    ``NATURAL`` joins make them unknown), only those it names (as the stream plan's projection pushdown would)."""
    if used is None:
        return list(columns)
    aliases = {t.alias_or_name.lower() for t in stmt.find_all(exp.Table)} | {
        s.alias.lower() for s in stmt.find_all(exp.Subquery) if s.alias
    }
    if used & aliases:
        return list(columns)  # a table alias selected as a struct of its columns
    return [c for c in columns if c.name.lower() in used]


_ARROW_UNSAFE = re.compile(r"\b(TIME WITH TIME ZONE|TIMETZ|BIT|BITSTRING|UHUGEINT)\b")
"""DuckDB types whose values an Arrow round trip changes (TIMETZ loses its offset, BIT its length, UHUGEINT
overflows): a batch-mode PREDICT does not carry them ('auto' streams; 'batch' refuses)."""


def arrow_unsafe(type_text: str) -> bool:
    return bool(_ARROW_UNSAFE.search(re.sub(r"'(?:[^']|'')*'", "''", type_text)))  # not inside ENUM labels


# ---------------------------------------------------------------- order and scope


def predicts_in_order(tree: exp.Expression) -> list[PredictTable]:
    """The PREDICTs of ``tree`` in post-order with WITH clauses first: every PREDICT comes
    after the PREDICTs inside its input and after those in the CTEs it can name."""
    out: list[PredictTable] = []
    stack: list[tuple[exp.Expression, bool]] = [(tree, False)]
    while stack:
        node, done = stack.pop()
        if done:
            if isinstance(node, PredictTable):
                out.append(node)
            continue
        stack.append((node, True))
        children = list(node.iter_expressions())
        w = node.args.get("with_")
        at = next((i for i, c in enumerate(children) if c is w), None) if w is not None else None
        if at:
            children.insert(0, children.pop(at))
        for child in reversed(children):
            stack.append((child, False))
    return out


def ctes_in_scope(node: exp.Expr) -> list[exp.CTE]:
    """The CTEs a table reference at ``node`` can name, outermost first (inner ones shadow outer ones)."""
    scopes: list[list[exp.CTE]] = []
    child: exp.Expr = node
    parent = node.parent
    while parent is not None:
        if isinstance(parent, exp.With):
            ctes = list(parent.expressions)
            at = next((i for i, c in enumerate(ctes) if c is child), len(ctes))
            scopes.append(ctes[: at + 1] if parent.args.get("recursive") else ctes[:at])
        else:
            w = parent.args.get("with_")
            if isinstance(w, exp.With) and w is not child:
                scopes.append(list(w.expressions))
        child, parent = parent, parent.parent
    merged: dict[str, exp.CTE] = {}
    for scope in reversed(scopes):
        for cte in scope:
            merged.pop(cte.alias_or_name.lower(), None)
            merged[cte.alias_or_name.lower()] = cte
    return list(merged.values())


def renumber(tree: exp.Expression) -> tuple[str, list[int]]:
    """DuckDB SQL of ``tree`` with its ``$k`` placeholders renumbered 1..m; returns (sql, original k's)."""
    tree = tree.copy()
    holders = [p for p in tree.find_all(exp.Placeholder) if str(p.this).isdigit()]
    distinct = sorted({int(p.this) for p in holders})
    mapping = {k: i + 1 for i, k in enumerate(distinct)}
    for p in holders:
        p.set("this", str(mapping[int(p.this)]))
    return msql.to_duckdb_sql(tree, copy=False), distinct  # (the copy above is this call's own)


# ---------------------------------------------------------------- correlated inputs

_MISSING_TABLE = re.compile(r'Referenced table "([^"]+)" not found')
_NO_FROM = re.compile(r'Referenced column "[^"]+" was not found because the FROM clause is missing')


def correlated(err: Error, p: PredictTable) -> Optional[NotSupportedError]:
    """The known-limit error for a PREDICT whose input did not bind because it refers to the enclosing
    query (names one of its tables, or has no FROM of its own inside one); None for any other error."""
    if err.code != "binder_error":
        return None
    text = str(err)
    inside = {id(n) for n in p.walk()}
    outer = {
        n.alias_or_name.lower()
        for n in p.root().find_all(exp.Table, exp.Subquery, exp.Lateral)
        if id(n) not in inside and n is not p.parent and n.alias_or_name
    }
    missing = _MISSING_TABLE.search(text)
    if not ((missing and missing.group(1).lower() in outer) or (outer and _NO_FROM.search(text))):
        return None
    where = text[text.find("\nLINE "):] if "\nLINE " in text else ""
    model = _ref_text(p.this)
    return NotSupportedError(
        f"PREDICT({model}): its input refers to the enclosing query"
        + (f' (table "{missing.group(1)}")' if missing else "")
        + ", which is a known limit: a PREDICT's input is bound on its own, so a correlated LATERAL or "
        "subquery cannot reach outer columns (see Known limits in the README). Join the predictions to the "
        f"outer table instead, e.g. SELECT ... FROM t JOIN PREDICT({model}, TABLE t) AS p ON p.id = t.id."
        + where,
        code="correlated_predict",
    )
