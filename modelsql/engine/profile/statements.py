"""``PROFILE MODEL m [VERSION n] [WITH (batch_sizes = (...), threads = (...), merge_factors = (...), repeat = n,
warmup = n, operators = true|false, train_cost_model = true|false)]``.

Times the model version on ONNX Runtime (the CPU) in every (threads, batch size) configuration, on
synthetic inputs of the model's own types and shapes, with the runs of the configurations interleaved
(:func:`~modelsql.operators.backends.profiling.profile_latency`), records one latency trace per
configuration in ``modelsql.traces`` (every run kept, with the configuration's cost-model features)
and, unless ``operators = false``, the per-operator kernel times ONNX Runtime's profiler reports in
``modelsql.trace_operators`` (:func:`~modelsql.operators.backends.profiling.operator_times`), then,
unless ``train_cost_model = false``, retrains the learned cost model on every trace
(:func:`~modelsql.engine.profile.fit_cost_model.retrain`: Mantis, Chun et al., 2010), and returns the traces' summary. A merge factor N above 1 times a NetFuse merge of N copies of the model on a
shared input (as the planner would run N fine-tuned copies of it; Jeong et al., 2020), so the cost model
learns when merging pays.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

import onnx
from onnx import numpy_helper
from sqlglot import exp

from modelsql import sql as msql

from modelsql.catalog.traces import OperatorRow, TraceRow
from modelsql.errors import NotSupportedError, ProgrammingError
from modelsql.netfuse import MergeDeclined, merge_models
from modelsql.sql.dialect import ModelSQL
from modelsql.operators.backends.profiling import LatencyTrace, operator_times, profile_latency
from modelsql.sql.profile import ProfileModel
from modelsql.operators.backends import devices
from modelsql.progress import Meter
from modelsql.engine.artifacts.sessions import load_model_proto
from modelsql.engine.artifacts.compiled import tvm_session
from modelsql.engine.profile.fit_cost_model import retrain, trace_features
from modelsql.engine.artifacts.merge_gain import CONV_MAX_ROWS
from modelsql.engine.handlers import catalog_write, handles
from modelsql.engine.options.declared import PROFILE
from modelsql.engine.query_handler import run_query
from modelsql.engine.result import Result
from modelsql.engine.profile.run_traces import run_trace_rows

if TYPE_CHECKING:
    from modelsql.engine.session import Session

__all__ = ["PROFILE_OPTIONS"]

PROFILE_OPTIONS = PROFILE
"""PROFILE's options and their defaults (:data:`modelsql.engine.options.declared.PROFILE`)."""


def _options(stmt: ProfileModel, params: list) -> dict[str, Any]:
    options = PROFILE_OPTIONS.parse(stmt, params, where=f"PROFILE MODEL {stmt.this.model_name}")
    out = dict(options, given=options.given)
    out["devices"] = _devices(options["devices"])
    return out


def _devices(named: tuple[str, ...]) -> tuple[str, ...]:
    """PROFILE's ``devices`` (read by the schema): ``'auto'`` (every device present:
    :func:`~modelsql.operators.backends.devices.available`) or the devices named, each there.

    Raises:
        NotSupportedError: ``device_not_available``.
    """
    if "auto" in named:
        return devices.available()
    return tuple(devices.require(d, "PROFILE") for d in named)


def _operators(data: bytes, trace: LatencyTrace) -> tuple[OperatorRow, ...]:
    times = operator_times(data, threads=trace.threads, batch_size=trace.batch_size)
    total = sum(t.median_us for t in times) or 1.0
    return tuple(OperatorRow(t.op_type, t.provider, t.nodes, t.runs, t.median_us, t.median_us / total)
                 for t in times)


def _lowerings(n: int, batch_sizes: tuple[int, ...]) -> list[tuple[str, tuple[int, ...]]]:
    """``(dense lowering, batch sizes)`` groups for merge factor ``n``: as the planner lowers a merge
    (grouped 1x1 Conv up to :data:`~modelsql.engine.artifacts.merge_gain.CONV_MAX_ROWS` rows per member)."""
    if n == 1:
        return [("", batch_sizes)]
    small = tuple(b for b in batch_sizes if b <= CONV_MAX_ROWS)
    large = tuple(b for b in batch_sizes if b > CONV_MAX_ROWS)
    return [(d, g) for d, g in (("conv", small), ("matmul", large)) if g]


def _merged(proto, n: int, dense: str, label: str) -> bytes:
    """A NetFuse merge of ``n`` copies of ``proto`` on a shared input, each copy's float weights scaled
    differently (equal weights would be stored once, which is not what a family of fine-tuned models is).

    Raises:
        NotSupportedError: ``merge_declined``, naming the node the merge has no counterpart for.
    """
    copies = []
    for i in range(n):
        copy = onnx.ModelProto()
        copy.CopyFrom(proto)
        for t in copy.graph.initializer:
            if t.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE):
                t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t) * (1.0 + 1e-3 * i), t.name))
        copies.append(copy)
    try:
        return merge_models(copies, shared_input=True, dense=dense).SerializeToString()
    except MergeDeclined as exc:
        raise NotSupportedError(f"PROFILE {label} WITH (merge_factors = ...): the model cannot be merged: {exc}",
                                code="merge_declined") from None


def _trace_row(mv, proto, data: bytes, t: LatencyTrace, n: int, operators: bool) -> TraceRow:
    operators = operators and t.backend == "onnxruntime"  # the per-operator times are ONNX Runtime's profiler's
    operators = operators and t.device == "cpu"
    return TraceRow(mv.name, mv.version, t.backend, t.device, t.threads, t.batch_size, t.seconds, t.median,
                    t.quantile(0.9), t.quantile(0.99),
                    features=trace_features(proto, t.batch_size, backend=t.backend, threads=t.threads, merge_factor=n,
                                            device=t.device.split(":")[0]),
                    operators=_operators(data, t) if operators else ())


def fixed_batch(proto) -> "int | None":
    """The fixed leading dimension of the model's inputs, when they all have the same one."""
    initializers = {t.name for t in proto.graph.initializer}
    firsts = {tuple(i.type.tensor_type.shape.dim)[0].dim_value if i.type.tensor_type.shape.dim else 0
              for i in proto.graph.input if i.name not in initializers}
    return firsts.pop() if len(firsts) == 1 and 0 not in firsts else None


def _planned_runs(options: dict, tvm: int, cuda: int) -> int:
    """The model runs (warm-up included) :func:`_synthetic` makes of one model with ``tvm`` TVM runners and
    ``cuda`` CUDA devices: what PROFILE's progress counts."""
    per_config = options["warmup"] + options["repeat"]
    ort = len(options["threads"]) + cuda if "onnxruntime" in options["backends"] else 0
    return sum(len(batches) * (ort + (tvm if n == 1 else 0)) * per_config
               for n in options["merge_factors"] for _, batches in _lowerings(n, options["batch_sizes"]))


def _synthetic(session: Session, mv, options: dict, meter: Meter) -> tuple[list[TraceRow], list[int]]:
    """Traces of ``mv`` on synthetic inputs, per (merge factor, backend, threads, batch size); ``meter`` counts
    the model runs (its total grows by this model's when it starts)."""
    warmup, repeat = options["warmup"], options["repeat"]
    proto = load_model_proto(session.store, mv)
    fixed = fixed_batch(proto)
    if fixed is not None and "batch_sizes" not in options["given"]:
        options = dict(options, batch_sizes=(fixed,))  # the default sizes would all be refused
    rows, factors = [], []
    threads, backends = options["threads"], options["backends"]
    tvm = [("tvm", t, tvm_session(session, mv, intra=t)) for t in threads] if "tvm" in backends else []
    cuda = [d for d in options["devices"] if d != "cpu"] if "onnxruntime" in backends else []
    meter.grow(_planned_runs(options, len(tvm), len(cuda)))
    for n in options["merge_factors"]:
        for dense, batches in _lowerings(n, options["batch_sizes"]):
            data = proto.SerializeToString() if n == 1 else _merged(proto, n, dense, mv.label)
            traces = profile_latency(data, batch_sizes=batches, threads=threads, repeat=repeat, warmup=warmup,
                                     others=tvm if n == 1 else (), onnxruntime="onnxruntime" in backends,
                                     cuda=cuda, progress=meter.advance)
            rows += [_trace_row(mv, proto, data, t, n, options["operators"]) for t in traces]
            factors += [n] * len(traces)
    return rows, factors


_ON_INPUT_ONLY = ("batch_sizes", "repeat", "backends", "train_cost_model", "devices")


def _on_input(stmt: ProfileModel, session: Session, params: list, mv, options: dict,
              meter: Meter) -> tuple[list[TraceRow], list[int]]:
    """Traces of ``mv`` on the rows of ``ON ...``: per batch size and backend, the PREDICT run as the planner
    plans it with that ``batch_size``, its model runs timed (one warm-up query, then queries until ``repeat``
    runs of each size are kept or five queries ran). ``meter`` counts the queries, of :data:`_QUERIES` per
    configuration (those a configuration did not need count as done when it ends)."""
    given = sorted(k for k in options["given"] if k not in _ON_INPUT_ONLY)
    if given:
        raise ProgrammingError(f"PROFILE ... ON: option {given[0]!r} applies only to synthetic inputs; with ON the "
                               f"options are {', '.join(_ON_INPUT_ONLY)}", code="invalid_option")
    source = stmt.args["source"]
    source_sql = (f"TABLE {source.sql(dialect=ModelSQL)}" if isinstance(source, exp.Table)
                  else source.sql(dialect=ModelSQL))
    rows = []
    configs = list(itertools.product(options["backends"], options["batch_sizes"], options["devices"]))
    meter.grow(len(configs) * _QUERIES)
    for i, (backend, b, device) in enumerate(configs):
        sql = (f'SELECT * FROM PREDICT(MODEL "{mv.name}" VERSION {mv.version}, {source_sql}, '
               f"batch_size = {b}, backend = '{backend}', device = '{device}')")
        runs, threads = _query_runs(session, sql, params, options["repeat"], meter)
        meter.update((i + 1) * _QUERIES)
        rows += run_trace_rows(session, mv, runs, backend, threads, "profile", sizes=None, device=device)
    return rows, [1] * len(rows)


_QUERIES = 6
"""Queries PROFILE ... ON runs per configuration at most: one warm-up, then up to five timed."""


def _query_runs(session: Session, sql: str, params: list, repeat: int, meter: Meter) -> tuple[list, int]:
    """The model runs (rows, seconds) of a one-PREDICT query run up to five times after a warm-up; ``meter``
    counts the queries."""
    runs, threads = [], 1
    for attempt in range(_QUERIES):
        out, plan, phys = run_query(msql.parse(sql)[0], session, params)
        try:
            session.duck.fetchall()
        finally:
            out.release()
        meter.advance()
        function = phys.operators[plan.scans[0].id].function
        threads = int(getattr(function.model, "intra_op_threads", 1))
        if attempt:
            runs += function.runs
        if attempt and max((sum(1 for n, _ in runs if n == m) for m, _ in runs), default=0) >= repeat:
            break
    return runs, threads


def _steps(entry) -> list:
    """The model versions a PROFILE profiles: the model, or each distinct step model of a pipeline."""
    if entry.kind != "pipeline":
        return [entry]
    seen, out = set(), []
    for step in entry.steps:
        if (step.model.name, step.model.version) not in seen:
            seen.add((step.model.name, step.model.version))
            out.append(step.model)
    return out


def _traces(stmt: ProfileModel, session: Session, params: list, entry, options: dict, meter: Meter):
    """(trace rows, merge factor of each): on the rows of ``ON ...`` or on synthetic inputs (each step of a
    pipeline); ``meter`` counts the queries or the model runs."""
    if stmt.args.get("source") is not None:
        return _on_input(stmt, session, params, entry, options, meter)
    rows: list[TraceRow] = []
    factors: list[int] = []
    for mv in _steps(entry):
        r, f = _synthetic(session, mv, options, meter)
        rows, factors = rows + r, factors + f
    return rows, factors


@handles(ProfileModel)
def _profile(stmt: ProfileModel, session: Session, params: list) -> Result:
    ref = stmt.this
    options = _options(stmt, params)
    entry = session.get_model(ref.model_name, ref.version_number, ref, pipeline=bool(ref.args.get("pipeline")))
    for mv in _steps(entry):
        if mv.kind == "python":
            load_model_proto(session.store, mv)  # raises no_onnx_graph: a Python program is not profiled
    if stmt.args.get("source") is not None:
        if entry.kind == "pipeline":
            raise NotSupportedError("PROFILE PIPELINE ... ON: a pipeline's runs are not one graph's; profile it "
                                    "without ON (each step on synthetic inputs), or PROFILE MODEL a step ON its "
                                    "input", code="profile_not_supported")
    meter = Meter(session.progress, "profile", total=0, label=entry.label,
                  unit="queries" if stmt.args.get("source") is not None else "runs")
    try:
        rows, factors = _traces(stmt, session, params, entry, options, meter)
    except BaseException:
        meter.finish(ok=False)
        raise
    meter.finish()
    with catalog_write(session) as catalog:
        numbers = catalog.traces.add(rows)
    if options["train_cost_model"]:
        retrain(session)
    return Result(session.duck, description=[(n, k, None, None, None, None, True) for n, k in (
        ("trace", "BIGINT"), ("backend", "VARCHAR"), ("threads", "INTEGER"), ("batch_size", "INTEGER"),
        ("merge_factor", "INTEGER"), ("median_ms", "DOUBLE"), ("p90_ms", "DOUBLE"), ("p99_ms", "DOUBLE"),
        ("rows_per_second", "DOUBLE"), ("model", "VARCHAR"), ("version", "INTEGER"), ("device", "VARCHAR"))],
        rows=[(n, r.backend, r.threads, r.batch_size, f, r.median_s * 1e3, r.p90_s * 1e3, r.p99_s * 1e3,
               r.batch_size / r.median_s if r.median_s > 0 else None, r.model, r.version, r.device)
              for n, r, f in zip(numbers, rows, factors)])
