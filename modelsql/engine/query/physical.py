"""From the logical plan to physical operators, and the statement DuckDB runs.

For each :class:`~modelsql.engine.query.plan.PredictScan`, innermost first, the
cost function (:mod:`modelsql.engine.query.cost`) chooses the operator
(:class:`~modelsql.operators.scan.StreamPredict` or
:class:`~modelsql.operators.scan.BatchPredict`); a batch operator runs here,
before the statement, and a stream operator registers its function. Each
scan's :class:`~modelsql.engine.query.plan.ScanRef` is then replaced by the SQL that
reads the operator, and the statement is generated once as DuckDB SQL
(:mod:`modelsql.engine.query.render_sql`: the lowered pieces are spliced into that text, never parsed again).

This module wires the operators; it is typed against the operator protocols of
:mod:`modelsql.operators.base` (:class:`~modelsql.operators.base.StreamOperator`,
:class:`~modelsql.operators.base.BatchOperator`), which declare every call it makes on them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Optional, Union

import pyarrow as pa

from modelsql.catalog.entries import ModelVersion, PipelineVersion, RoutedModels
from modelsql.engine.artifacts import compiled
from modelsql.engine.artifacts import merged as merged_models
from modelsql.engine.artifacts import sessions as artifacts
from modelsql.engine.query import cost
from modelsql.engine.query.learned_costs import costs_for
from modelsql.engine.query.bind_routed import ROUTE_INPUT
from modelsql.engine.query.context import PlanningContext
from modelsql.engine.query.plan import PredictScan, QueryPlan, ShareGroup
from modelsql.engine.query.render_sql import Lowered, SharedCte, from_item, render
from modelsql.engine.result import Result
from modelsql.operators.backends import BackendModel
from modelsql.operators.backends.pipeline import StepMemo
from modelsql.operators.backends.routed import FamilyMember, RoutedModel, SharedFamily
from modelsql.operators.base import BatchOperator, Operator, StreamOperator
from modelsql.operators.scan import BatchPredict, StreamPredict, shared_member_sql, shared_scan_sql
from modelsql.progress import Meter


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

    operators: dict[int, Operator[PredictScan]] = field(default_factory=dict)
    choices: dict[int, cost.Choice] = field(default_factory=dict)
    memos: dict[int, StepMemo] = field(default_factory=dict)
    families: dict[int, Union[SharedFamily, str, None]] = field(default_factory=dict)
    sql: str = ""
    params: list[int] = field(default_factory=list)


def choose(plan: QueryPlan) -> dict[int, cost.Choice]:
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


@dataclass
class _Lowering:
    """One statement's lowering under way: what :func:`build` was given, and what it has built so far.

    Attributes:
        memos: scan id -> the step memo of its share group (rule ``pipeline_share_steps``).
        family_models: scan id -> its member of a merged family (rule ``predict_merge_family``).
        grouped: ids of the scans of share groups (rule ``predict_share_input``), lowered with their group.
        streams: scan id -> its stream operator.
        lowered: scan id -> the SQL reading its operator (see :data:`~modelsql.engine.query.render_sql.Lowered`).
    """

    plan: QueryPlan
    session: PlanningContext
    params: list[object]
    held: Result
    phys: Physical
    duck_threads: int
    dry: bool
    keep: Optional[dict[str, StreamOperator[PredictScan]]]
    memos: dict[int, StepMemo]
    family_models: dict[int, FamilyMember]
    grouped: set[int]
    streams: dict[int, StreamOperator[PredictScan]] = field(default_factory=dict)
    lowered: Lowered = field(default_factory=dict)


def build(plan: QueryPlan, choices: dict[int, cost.Choice], session: PlanningContext, params: list[object],
          held: Result, *, dry: bool = False, keep: Optional[dict[str, StreamOperator[PredictScan]]] = None
          ) -> Physical:
    """Set up every scan's operator as ``choices`` say; batch operators run here unless ``dry`` (plain EXPLAIN).

    ``held`` collects what is registered (functions, Arrow tables, a snapshot) so the caller's
    :class:`Result` releases it; stream operators' functions go to ``keep`` instead when given
    (function name -> operator, kept registered by a cached plan). Raises what the operators raise.
    """
    phys = Physical(choices=dict(choices))
    duck_threads = session_threads(session)
    low = _Lowering(plan, session, params, held, phys, duck_threads, dry, keep, memos=step_memos(plan, phys),
                    family_models=family_members(plan, session, duck_threads, phys),
                    grouped={m for g in plan.groups for m in g.members})
    for scan in plan.scans:
        _lower_scan(low, scan, choices[scan.id])
    shared_ctes = [_lower_group(low, g) for g in plan.groups]
    phys.sql, phys.params = render(plan.tree, low.lowered, materialized=plan.materialized, extra_ctes=shared_ctes)
    return phys


def step_memos(plan: QueryPlan, phys: Physical) -> dict[int, StepMemo]:
    """Scan id -> the :class:`StepMemo` its share group's pipelines share (rule ``pipeline_share_steps``); each
    group's memo is kept in ``phys.memos``."""
    memos = {}
    for share in plan.step_shares:
        memo = phys.memos[share.group] = StepMemo()
        memos.update({m: memo for m in plan.groups[share.group].members})
    return memos


def _lower_scan(low: _Lowering, scan: PredictScan, choice: cost.Choice) -> None:
    """Set up ``scan``'s operator: a batch operator run now where ``choice`` says so, else (or when it gave up)
    a stream operator registered."""
    input_sql, numbers = render(scan.input.tree, low.lowered)
    in_params = [low.params[k - 1] for k in numbers]
    if choice.execution == "batch" and _run_batch(low, scan, choice, input_sql, in_params):
        return
    _register_stream(low, scan, choice, input_sql, in_params, numbers)


def _run_batch(low: _Lowering, scan: PredictScan, choice: cost.Choice, input_sql: str,
               in_params: list[object]) -> bool:
    """Run ``scan``'s batch operator (on no rows when ``low.dry``) and lower the scan to the SQL reading its
    result; False when it outgrew its memory limit (the scan then streams)."""
    session, held = low.session, low.held
    begin_snapshot(session, held)
    op = batch_operator(scan, session, input_sql, in_params, low.duck_threads, run_rows=choice.run_rows,
                        backend=choice.backend, threads=choice.threads, device=choice.device)
    # read once: the statement's own top-level FROM, with nothing that could read it twice
    op.read_once = scan.placement.top_level_from and not scan.placement.row_dependent
    op.function.progress = predict_meter(session, scan, "batch")
    held.operators.append(op)

    def register(name: str, table: Union[pa.Table, pa.RecordBatchReader]) -> None:
        _register(session, held, name, table)

    sub = op.run(register, dry=low.dry)
    if sub is None:
        held.operators.remove(op)
        return False
    low.phys.operators[scan.id] = op
    low.lowered[scan.id] = (sub, set())
    return True


def _register_stream(low: _Lowering, scan: PredictScan, choice: cost.Choice, input_sql: str,
                     in_params: list[object], numbers: list[int]) -> None:
    """Register ``scan``'s stream operator and, unless a share group reads it, lower the scan to the SQL
    calling it over its input as written."""
    op = stream_operator(scan, low.session, low.duck_threads, memo=low.memos.get(scan.id),
                         model=low.family_models.get(scan.id), backend=choice.backend, device=choice.device)
    op.input_sql, op.params, op.param_numbers = input_sql, in_params, numbers
    op.function.progress = predict_meter(low.session, scan, "stream")
    name = op.register()
    if low.keep is None:
        low.held.functions.append(name)
    else:
        low.keep[name] = op
    low.held.operators.append(op)
    low.phys.operators[scan.id] = op
    low.streams[scan.id] = op
    if scan.id not in low.grouped:
        source, source_numbers = from_item(scan.input.source, low.lowered)
        low.lowered[scan.id] = (op.sql(source), source_numbers)


def _lower_group(low: _Lowering, group: ShareGroup) -> SharedCte:
    """The one scan of a share group's input calling every member's function, as a MATERIALIZED CTE; each
    member is lowered to the SQL reading its own outputs from it."""
    members = [low.streams[m] for m in group.members]
    source, numbers = from_item(low.plan.scan(group.members[0]).input.source, low.lowered)
    body, names = shared_scan_sql(members, source)
    cte = f"__msql_shared_{group.id}"
    for m, name in zip(members, names):
        low.lowered[m.scan.id] = (shared_member_sql(m, names, name, cte), set())
    return cte, body, numbers


def predict_meter(session: PlanningContext, scan: PredictScan, execution: str) -> Optional[Meter]:
    """A meter of the rows ``scan`` scores, of DuckDB's estimate of its input's rows, for the session's progress
    hook (:mod:`modelsql.progress`); None when there is no hook."""
    if session.progress is None:
        return None
    return Meter(session.progress, "predict", total=scan.estimated_rows, label=scan.label, scan=scan.id,
                 execution=execution)


def shared_threads(cores: int, duck_threads: int) -> int:
    """Intra-op threads of a session that DuckDB's ``duck_threads`` workers call at once."""
    return max(1, cores // max(1, duck_threads))


def family_members(plan: QueryPlan, session: PlanningContext, duck_threads: int, phys: Physical
                   ) -> dict[int, FamilyMember]:
    """scan id -> its :class:`~modelsql.operators.backends.routed.FamilyMember`, for the share groups the
    plan merges (:class:`~modelsql.engine.query.plan.FamilyShare`); a declined merge is noted in ``phys.families``."""
    out: dict[int, FamilyMember] = {}
    intra = shared_threads(artifacts.default_threads(), duck_threads)
    for share in plan.family_shares:
        if not share.merge:
            continue
        chosen = {phys.choices[m].device for m in share.members if m in phys.choices}
        device = chosen.pop() if len(chosen) == 1 else "cpu"  # members chosen onto different devices: the CPU
        models = [_one_model(plan.scan(m)) for m in share.members]
        members: Optional[list[FamilyMember]]
        declined: Optional[str]
        members, declined = merged_models.shared_family(session, models, share.dense, intra, device)
        phys.families[share.group] = members[0].family if members else declined
        out.update(dict(zip(share.members, members or [])))
    return out


def _one_model(scan: PredictScan) -> ModelVersion:
    """The model version of a scan that runs one (a member of a family share: never a pipeline or routed models)."""
    if not isinstance(scan.model, ModelVersion):
        raise TypeError(f"{scan.label} is not one model version")
    return scan.model


def stream_operator(scan: PredictScan, session: PlanningContext, duck_threads: int, memo: Optional[StepMemo] = None,
                    model: Optional[FamilyMember] = None, backend: str = "onnxruntime", device: str = "cpu"
                    ) -> StreamOperator[PredictScan]:
    """A :class:`StreamPredict` with the cached session of the scan's model on ``device`` (threads:
    :func:`cost.stream_threads`); a pipeline of a :class:`~modelsql.engine.query.plan.StepShare` gets its group's step
    ``memo``; ``model`` overrides the session (a member of a merged family)."""
    if model is not None:
        return StreamPredict(scan, model, session.duck)
    cores = artifacts.default_threads()
    intra = cost.stream_threads(scan, duck_threads, cores) or shared_threads(cores, duck_threads)
    loaded: BackendModel
    if memo is not None:
        loaded = artifacts.pipeline_session(session.store, scan.model, intra=intra, memo=memo, device=device)
    elif isinstance(scan.model, RoutedModels):
        loaded = routed_model(scan, scan.model, session, intra, device)
    else:
        loaded = scan_session(scan, session, intra, backend=backend, device=device)
    return StreamPredict(scan, loaded, session.duck)


def scan_session(scan: PredictScan, session: PlanningContext, intra: int, column_major: tuple[str, ...] = (),
                 backend: str = "onnxruntime", device: str = "cpu") -> BackendModel:
    """The loaded model a scan runs on ``backend`` and ``device``: its checked TVM artifact
    (:func:`~modelsql.engine.artifacts.compiled.tvm_session`), or the ONNX Runtime session (on a CUDA device: a
    :class:`~modelsql.operators.backends.cuda.CudaModel`; a pipeline's: its steps' sessions)."""
    loaded: BackendModel
    mv = scan.model
    if backend == "tvm":
        loaded = compiled.tvm_session(session, mv, intra=intra, batch_size=scan.options.batch_size, device=device)
    elif isinstance(mv, PipelineVersion):  # (what model_session does with a pipeline version)
        loaded = artifacts.pipeline_session(session.store, mv, intra=intra, device=device)
    elif isinstance(mv, ModelVersion):
        loaded = artifacts.model_session(session.store, mv, intra=intra, column_major=column_major, device=device)
    else:
        raise TypeError(f"{scan.label} runs through routed_model")
    return loaded


def routed_model(scan: PredictScan, models: RoutedModels, session: PlanningContext, intra: int,
                 device: str = "cpu") -> RoutedModel:
    """The routed model of a ``MODELS (...) ROUTE BY`` scan (``models``: its model) on ``device``: merged when its
    :class:`RoutePlan` says so (a declined merge is kept on the model as ``declined`` for EXPLAIN)."""
    route = scan.route
    merge = (route.layout, route.dense) if route is not None and route.merge else None
    model: RoutedModel
    declined: Optional[str]
    model, declined = merged_models.routed_session(session, models, ROUTE_INPUT, intra=intra, merge=merge,
                                                   costs=costs_for(session), device=device,
                                                   always=scan.options.merge == "always")
    model.declined = declined
    return model


def batch_operator(scan: PredictScan, session: PlanningContext, input_sql: str, params: list[object],
                   duck_threads: int, run_rows: Optional[int] = None, backend: str = "onnxruntime",
                   threads: Optional[int] = None, device: str = "cpu") -> BatchOperator[PredictScan]:
    """A :class:`BatchPredict` on every core; a ``matrix`` input is fed column-major when the model allows;
    ``run_rows``: rows per model run the cost model chose (None: the default, :func:`cost.default_run_rows`);
    ``threads``: the intra-op threads it chose for them (None: every core)."""
    cores = threads or artifacts.default_threads()
    stream: BackendModel
    model: BackendModel
    if isinstance(scan.model, RoutedModels):  # runs as it is: the routed model is never transposed
        stream = model = routed_model(scan, scan.model, session, cores, device)
    else:
        stream = scan_session(scan, session, shared_threads(cores, duck_threads), backend=backend, device=device)
    b, o = scan.binding, scan.options
    transposable = (not o.batch_size and stream.fixed_batch is None and backend == "onnxruntime"
                    and device == "cpu" and scan.model.kind not in ("pipeline", "models"))
    column_major = tuple(
        a.input_name for a in b.args
        if transposable and a.kind == "matrix" and len(a.shape) == 1 and len(stream.input_shapes.get(a.input_name, ())) == 2
    )
    if not isinstance(scan.model, RoutedModels):
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


def _register(session: PlanningContext, held: Result, name: str, table: Union[pa.Table, pa.RecordBatchReader]) -> None:
    session.duck.register(name, table)
    held.sources.append(name)


def session_threads(session: PlanningContext) -> int:
    """DuckDB's thread setting on the session's connection."""
    try:
        return int(session.duck.execute("SELECT current_setting('threads')").fetchall()[0][0])
    except Exception:
        return 1
