"""From the logical plan to physical operators, and the statement DuckDB runs.

For each :class:`~modelsql.engine.query.plan.PredictScan`, innermost first, the
cost function (:mod:`modelsql.engine.query.cost`) chooses the operator
(:class:`~modelsql.operators.scan.StreamPredict` or
:class:`~modelsql.operators.scan.BatchPredict`); a batch operator runs here,
before the statement, and a stream operator registers its function. Each
scan's :class:`~modelsql.engine.query.plan.ScanRef` is then replaced by the SQL that
reads the operator, and the statement is generated once as DuckDB SQL (the
lowered pieces are spliced into that text, never parsed again).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from typing import Optional
from sqlglot import exp

from modelsql import sql as msql
from modelsql.operators.backends.pipeline import StepMemo
from modelsql.progress import Meter
from modelsql.operators.scan import BatchPredict, StreamPredict, shared_member_sql, shared_scan_sql
from modelsql.engine.artifacts import sessions as artifacts
from modelsql.engine.artifacts import compiled
from modelsql.engine.query import cost
from modelsql.engine.artifacts import merged as merged_models
from modelsql.engine.query.bind_routed import ROUTE_INPUT
from modelsql.engine.query.plan import PredictScan, QueryPlan, ScanRef
from modelsql.engine.result import Result
from modelsql.engine.query.context import PlanningContext

_TOKEN = "__msql_scan_" + uuid.uuid4().hex[:8] + "_"


@dataclass
class Physical:
    """The operators of one statement and the SQL DuckDB runs for it.

    Attributes:
        operators: scan id -> its operator.
        choices: scan id -> the cost function's :class:`~modelsql.engine.query.cost.Choice`.
        sql: the statement (``$1..$m``); ``params``: the statement's parameter numbers behind them.
        memos: share group id -> the :class:`~modelsql.operators.backends.pipeline.StepMemo` its
            pipelines share (rule ``pipeline_share_steps``).
        families: share group id -> the merged run of its family (rule ``predict_merge_family``), or
            the text of why its merge was declined.
    """

    operators: dict = field(default_factory=dict)
    choices: dict = field(default_factory=dict)
    memos: dict = field(default_factory=dict)
    families: dict = field(default_factory=dict)
    sql: str = ""
    params: list = field(default_factory=list)


def choose(plan: QueryPlan) -> dict:
    """Scan id -> the cost function's :class:`~modelsql.engine.query.cost.Choice` (nothing runs yet).

    Raises:
        NotSupportedError: an execution asked for that cannot run (see :func:`cost.choose_execution`).
    """
    grouped = {m for g in plan.groups for m in g.members}
    choices = {}
    for scan in plan.scans:
        choice = cost.choose_execution(scan, plan.costs)
        if scan.id in grouped:
            choice = replace(choice, execution="stream", run_rows=None,
                             reason="shares its input with another PREDICT (predict_share_input)",
                             rejected=(("batch", "the shared scan runs every model in DuckDB's pipeline"),))
        choices[scan.id] = choice
    return choices


def build(plan: QueryPlan, choices: dict, session: PlanningContext, params: list, held: Result, *, dry: bool = False,
          keep: Optional[dict] = None) -> Physical:
    """Set up every scan's operator as ``choices`` say; batch operators run here unless ``dry`` (plain EXPLAIN).

    ``held`` collects what is registered (functions, Arrow tables, a snapshot) so the caller's
    :class:`Result` releases it; stream operators' functions go to ``keep`` instead when given
    (function name -> operator, kept registered by a cached plan). Raises what the operators raise.
    """
    phys = Physical(choices=dict(choices))
    lowered: dict[int, tuple[str, set]] = {}
    grouped = {m for g in plan.groups for m in g.members}
    shared_ctes: list[tuple] = []
    duck_threads = session_threads(session)
    memos = {}  # scan id -> the step memo of its share group (rule pipeline_share_steps)
    for share in plan.step_shares:
        memo = phys.memos[share.group] = StepMemo()
        memos.update({m: memo for m in plan.groups[share.group].members})
    family_models = family_members(plan, session, duck_threads, phys)
    for scan in plan.scans:
        choice = choices[scan.id]
        input_sql, numbers = render(scan.input.tree, lowered)
        in_params = [params[k - 1] for k in numbers]
        sub = None
        if choice.execution == "batch":
            begin_snapshot(session, held)
            op = batch_operator(scan, session, input_sql, in_params, duck_threads, run_rows=choice.run_rows,
                                backend=choice.backend, threads=choice.threads, device=choice.device)
            # read once: the statement's own top-level FROM, with nothing that could read it twice
            op.read_once = scan.placement.top_level_from and not scan.placement.row_dependent
            op.function.progress = predict_meter(session, scan, "batch")
            held.operators.append(op)
            sub = op.run(lambda name, table: _register(session, held, name, table), dry=dry)
            if sub is not None:
                phys.operators[scan.id] = op
                lowered[scan.id] = (sub, set())
                continue
            held.operators.remove(op)
        op = stream_operator(scan, session, duck_threads, memo=memos.get(scan.id), model=family_models.get(scan.id),
                             backend=choice.backend, device=choice.device)
        op.input_sql, op.params, op.param_numbers = input_sql, in_params, numbers
        op.function.progress = predict_meter(session, scan, "stream")
        name = op.register()
        if keep is None:
            held.functions.append(name)
        else:
            keep[name] = op
        held.operators.append(op)
        phys.operators[scan.id] = op
        if scan.id not in grouped:
            source, numbers = from_item(scan.input.source, lowered)
            lowered[scan.id] = (op.sql(source), numbers)
    for g in plan.groups:
        members = [phys.operators[m] for m in g.members]
        source, numbers = from_item(plan.scan(g.members[0]).input.source, lowered)
        body, names = shared_scan_sql(members, source)
        cte = f"__msql_shared_{g.id}"
        shared_ctes.append((cte, body, numbers))
        for m, name in zip(members, names):
            lowered[m.scan.id] = (shared_member_sql(m, names, name, cte), set())
    phys.sql, phys.params = render(plan.tree, lowered, materialized=plan.materialized, extra_ctes=shared_ctes)
    return phys


def predict_meter(session: PlanningContext, scan: PredictScan, execution: str) -> Optional[Meter]:
    """A meter of the rows ``scan`` scores, of DuckDB's estimate of its input's rows, for the session's progress
    hook (:mod:`modelsql.progress`); None when there is no hook."""
    if session.progress is None:
        return None
    return Meter(session.progress, "predict", total=scan.estimated_rows, label=scan.label, scan=scan.id,
                 execution=execution)


def from_item(source: exp.Expression, lowered: dict) -> tuple[str, set]:
    """A PREDICT's input as written, as SQL to put after FROM (a table name, or a parenthesised query),
    and the statement's parameter numbers it carries."""
    sql, numbers = render(source, lowered, renumber_params=False)
    return (sql if isinstance(source, exp.Table) else f"({sql})"), set(numbers)


def shared_threads(cores: int, duck_threads: int) -> int:
    """Intra-op threads of a session that DuckDB's ``duck_threads`` workers call at once."""
    return max(1, cores // max(1, duck_threads))


def family_members(plan: QueryPlan, session: PlanningContext, duck_threads: int, phys: Physical) -> dict:
    """scan id -> its :class:`~modelsql.operators.backends.routed.FamilyMember`, for the share groups the
    plan merges (:class:`~modelsql.engine.query.plan.FamilyShare`); a declined merge is noted in ``phys.families``."""
    out = {}
    intra = shared_threads(artifacts.default_threads(), duck_threads)
    for share in plan.family_shares:
        if not share.merge:
            continue
        chosen = {phys.choices[m].device for m in share.members if m in phys.choices}
        device = chosen.pop() if len(chosen) == 1 else "cpu"  # members chosen onto different devices: the CPU
        members, declined = merged_models.shared_family(
            session, [plan.scan(m).model for m in share.members], share.dense, intra, device)
        phys.families[share.group] = members[0].family if members else declined
        out.update(dict(zip(share.members, members or [])))
    return out


def stream_operator(scan: PredictScan, session: PlanningContext, duck_threads: int, memo=None, model=None,
                    backend: str = "onnxruntime", device: str = "cpu") -> StreamPredict:
    """A :class:`StreamPredict` with the cached session of the scan's model on ``device`` (threads:
    :func:`cost.stream_threads`); a pipeline of a :class:`~modelsql.engine.query.plan.StepShare` gets its group's step
    ``memo``; ``model`` overrides the session (a member of a merged family)."""
    if model is not None:
        return StreamPredict(scan, model, session.duck)
    cores = artifacts.default_threads()
    intra = cost.stream_threads(scan, duck_threads, cores) or shared_threads(cores, duck_threads)
    if memo is not None:
        model = artifacts.pipeline_session(session.store, scan.model, intra=intra, memo=memo, device=device)
    elif scan.model.kind == "models":
        model = routed_model(scan, session, intra, device)
    else:
        model = scan_session(scan, session, intra, backend=backend, device=device)
    return StreamPredict(scan, model, session.duck)


def scan_session(scan: PredictScan, session: PlanningContext, intra: int, column_major: tuple[str, ...] = (),
                 backend: str = "onnxruntime", device: str = "cpu"):
    """The loaded model a scan runs on ``backend`` and ``device``: its checked TVM artifact
    (:func:`~modelsql.engine.artifacts.compiled.tvm_session`), or the ONNX Runtime session (on a CUDA device: a
    :class:`~modelsql.operators.backends.cuda.CudaModel`)."""
    if backend == "tvm":
        return compiled.tvm_session(session, scan.model, intra=intra, batch_size=scan.options.batch_size,
                                    device=device)
    return artifacts.model_session(session.store, scan.model, intra=intra, column_major=column_major, device=device)


def routed_model(scan: PredictScan, session: PlanningContext, intra: int, device: str = "cpu"):
    """The routed model of a ``MODELS (...) ROUTE BY`` scan on ``device``: merged when its :class:`RoutePlan`
    says so (a declined merge is kept on the model as ``declined`` for EXPLAIN)."""
    route = scan.route
    merge = (route.layout, route.dense) if route is not None and route.merge else None
    model, declined = merged_models.routed_session(session, scan.model, ROUTE_INPUT, intra=intra, merge=merge,
                                                   costs=session.costs(), device=device,
                                                   always=scan.options.merge == "always")
    model.declined = declined
    return model


def batch_operator(scan: PredictScan, session: PlanningContext, input_sql: str, params: list, duck_threads: int,
                   run_rows: Optional[int] = None, backend: str = "onnxruntime",
                   threads: Optional[int] = None, device: str = "cpu") -> BatchPredict:
    """A :class:`BatchPredict` on every core; a ``matrix`` input is fed column-major when the model allows;
    ``run_rows``: rows per model run the cost model chose (None: the default, :func:`cost.default_run_rows`);
    ``threads``: the intra-op threads it chose for them (None: every core)."""
    cores = threads or artifacts.default_threads()
    if scan.model.kind == "models":  # runs as it is: the routed model is never transposed
        stream = model = routed_model(scan, session, cores, device)
    else:
        stream = scan_session(scan, session, shared_threads(cores, duck_threads), backend=backend, device=device)
    b, o = scan.binding, scan.options
    transposable = (not o.batch_size and stream.fixed_batch is None and backend == "onnxruntime"
                    and device == "cpu" and scan.model.kind not in ("pipeline", "models"))
    column_major = tuple(
        a.input_name for a in b.args
        if transposable and a.kind == "matrix" and len(a.shape) == 1 and len(stream.input_shapes.get(a.input_name, ())) == 2
    )
    if scan.model.kind != "models":
        model = scan_session(scan, session, cores, column_major, backend=backend, device=device)
    feature_bytes = sum(cost.arg_bytes(a, t) for a, t in zip(b.args, b.arg_types)) or 1
    rows_per_batch = max(64, min(cost.BATCH_ROWS, (32 << 20) // feature_bytes))
    return BatchPredict(
        scan, model, session.duck, input_sql, params, column_major=column_major,
        original_inputs=tuple(stream.input_names), rows_per_batch=rows_per_batch,
        run_rows=run_rows or (cost.RUN_ROWS if scan.model.param_count > cost.BATCH_MAX_PARAMS else rows_per_batch),
        memory_limit=2 * cost.BATCH_MEMORY if o.execution == "auto" else None,
    )


def begin_snapshot(session: PlanningContext, held: Result) -> None:
    """A batch operator's input runs before the statement: one transaction gives both one snapshot
    (one may be open though the session did not begin it: a BEGIN inside a multi-statement text)."""
    if not session.in_transaction and not held.own_snapshot and not session.catalog.in_transaction():
        session.duck.execute("BEGIN TRANSACTION")
        held.own_snapshot = True


def _register(session: PlanningContext, held: Result, name: str, table) -> None:
    session.duck.register(name, table)
    held.sources.append(name)


def session_threads(session: PlanningContext) -> int:
    """DuckDB's thread setting on the session's connection."""
    try:
        return int(session.duck.execute("SELECT current_setting('threads')").fetchall()[0][0])
    except Exception:
        return 1


def render(tree: exp.Expression, lowered: dict[int, tuple[str, set]], *, renumber_params: bool = True,
           materialized: tuple[str, ...] = (), extra_ctes: tuple = ()) -> tuple[str, list[int]]:
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
        node = exp.CTE(this=exp.Table(this=exp.to_identifier(token)),
                       alias=exp.TableAlias(this=exp.to_identifier(name, quoted=True)), materialized=True)
        with_ = t.args.get("with_")
        if with_ is None:
            t.set("with_", exp.With(expressions=[node]))
        else:
            with_.append("expressions", node)
    sql = msql.to_duckdb_sql(t)
    for token, piece in pieces.items():
        sql = sql.replace(token, piece)
    numbers = sorted(used)
    if renumber_params and numbers != list(range(1, len(numbers) + 1)):
        sql = msql.renumber_placeholders(sql, {k: i + 1 for i, k in enumerate(numbers)})
    return sql, numbers
