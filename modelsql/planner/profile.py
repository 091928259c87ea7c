"""``PROFILE MODEL m [VERSION n] [WITH (batch_sizes = (...), threads = (...), repeat = n, warmup = n,
operators = true|false)]``.

Times the model version on ONNX Runtime (the CPU) in every (threads, batch size) configuration, on
synthetic inputs of the model's own types and shapes, with the runs of the configurations interleaved
(:func:`~modelsql.operators.backends.profiling.profile_latency`), records one latency trace per
configuration in ``modelsql.traces`` (every run kept, with the configuration's cost-model features)
and, unless ``operators = false``, the per-operator kernel times ONNX Runtime's profiler reports in
``modelsql.trace_operators`` (:func:`~modelsql.operators.backends.profiling.operator_times`), then,
unless ``train_cost_model = false``, retrains the learned cost model on every trace
(:func:`~modelsql.planner.cost_model.retrain`: Mantis, Chun et al., 2010), and returns the traces' summary.
"""

from __future__ import annotations

from typing import Any

from ..catalog.traces import OperatorRow, TraceRow
from ..errors import ProgrammingError
from ..operators.backends.profiling import LatencyTrace, operator_times, profile_latency
from ..sql.nodes import ProfileModel
from .artifacts import load_model_proto
from .cost_model import retrain, trace_features
from .handlers import run_statement
from .options import no_repeats, value
from .result import Result

__all__ = ["PROFILE_OPTIONS"]

PROFILE_OPTIONS = {"batch_sizes": (1, 8, 64), "threads": (1,), "repeat": 20, "warmup": 2,
                   "backends": ("onnxruntime",), "operators": True,
                   "train_cost_model": True}
"""PROFILE's options and their defaults."""


def _ints(options: dict, key: str, low: int = 1) -> tuple[int, ...]:
    raw = options[key]
    values = raw if isinstance(raw, (tuple, list)) else (raw,)
    if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < low for v in values):
        raise ProgrammingError(f"PROFILE option {key} must be integers >= {low}, got {raw!r}", code="invalid_option")
    return tuple(values)


def _options(stmt: ProfileModel, params: list) -> dict[str, Any]:
    no_repeats(stmt.args.get("options"), f"PROFILE MODEL {stmt.this.model_name}")
    given = {k.lower(): value(v, params) for k, v in stmt.option_values.items()}
    unknown = [k for k in given if k not in PROFILE_OPTIONS]
    if unknown:
        raise ProgrammingError(f"PROFILE: unknown option {unknown[0]!r}; options are {', '.join(PROFILE_OPTIONS)}",
                               code="unknown_option")
    options = dict(PROFILE_OPTIONS, **given)
    backends = options["backends"] if isinstance(options["backends"], (tuple, list)) else (options["backends"],)
    if tuple(str(b).lower() for b in backends) != ("onnxruntime",):
        raise ProgrammingError(f"PROFILE: backends {backends!r}: only 'onnxruntime' can be profiled so far",
                               code="invalid_option")
    for flag in ("operators", "train_cost_model"):
        if not isinstance(options[flag], bool):
            raise ProgrammingError(f"PROFILE option {flag} must be true or false, got {options[flag]!r}",
                                   code="invalid_option")
    return options


def _operators(data: bytes, trace: LatencyTrace) -> tuple[OperatorRow, ...]:
    times = operator_times(data, threads=trace.threads, batch_size=trace.batch_size)
    total = sum(t.median_us for t in times) or 1.0
    return tuple(OperatorRow(t.op_type, t.provider, t.nodes, t.runs, t.median_us, t.median_us / total)
                 for t in times)


@run_statement.register
def _profile(stmt: ProfileModel, session, params: list) -> Result:
    ref = stmt.this
    mv = session.get_model(ref.model_name, ref.version_number, ref)
    options = _options(stmt, params)
    warmup = _ints(options, "warmup", low=0)[0]
    proto = load_model_proto(session.store, mv)
    data = proto.SerializeToString()
    traces = profile_latency(data, batch_sizes=_ints(options, "batch_sizes"), threads=_ints(options, "threads"),
                             repeat=_ints(options, "repeat")[0], warmup=warmup)
    rows = [TraceRow(mv.name, mv.version, t.backend, "cpu", t.threads, t.batch_size, t.seconds, t.median,
                     t.quantile(0.9), t.quantile(0.99), features=trace_features(proto, t.batch_size, backend=t.backend, threads=t.threads),
                     operators=_operators(data, t) if options["operators"] else ()) for t in traces]
    session.check_writable()
    session.commit()
    with session.catalog.transaction(join=False):
        numbers = session.catalog.traces.add(rows)
    session.changed()
    if options["train_cost_model"]:
        retrain(session)
    return Result(session.duck, description=[(n, k, None, None, None, None, True) for n, k in (
        ("trace", "BIGINT"), ("backend", "VARCHAR"), ("threads", "INTEGER"), ("batch_size", "INTEGER"),
        ("median_ms", "DOUBLE"), ("p90_ms", "DOUBLE"), ("p99_ms", "DOUBLE"), ("rows_per_second", "DOUBLE"))],
        rows=[(n, t.backend, t.threads, t.batch_size, t.median * 1e3, t.quantile(0.9) * 1e3, t.quantile(0.99) * 1e3,
               t.rows_per_second) for n, t in zip(numbers, traces)])
