"""``EXPLAIN [ANALYZE] <statement>``: the plan, from the plan.

Rows ``(explain_key, explain_value)``, as DuckDB's EXPLAIN gives them:

1. ``modelsql_predict``: one paragraph per PREDICT on how it was bound.
2. ``modelsql_plan``: the statement's plan, one node per line, indented as a
   tree: each PREDICT's operator with its estimated rows and time (the cost
   function's defaults, saying so, while there are no profile traces), the
   execution chosen and each alternative rejected with the reason, its input,
   and the PREDICTs it reads; shared inputs and the rules' notes. ``EXPLAIN
   ANALYZE`` adds each operator's measured rows, calls and time.
3. DuckDB's own plan of the statement it runs.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Optional

from sqlglot import exp

from modelsql import sql as msql
from modelsql.catalog.entries import RoutedModels
from modelsql.errors import NotSupportedError, ProgrammingError
from modelsql.sql.registry import STATEMENT_NODES
from modelsql.sql.evaluate import EvaluateModel, as_table_function
from modelsql.sql.tune import TuneModel
from modelsql.engine.query import cost
from modelsql.engine.handlers import handles, run_default
from modelsql.engine.query.bind_routed import ROUTE_INPUT
from modelsql.engine.query.plan import PredictScan, QueryPlan
from modelsql.engine.query_handler import run_query
from modelsql.engine.profile.run_traces import record_query_traces
from modelsql.engine.result import Result
from modelsql.engine.tune.statements import explain_tune

if TYPE_CHECKING:
    from modelsql.engine.session import Session

_PREFIX = re.compile(r"\s*(ANALYZE\b|\([^()]*\))", re.I)


def explain_parts(stmt: exp.Expression) -> Optional[tuple[str, str]]:
    """``(prefix, body)`` of an ``EXPLAIN [ANALYZE | (options)] <body>`` statement (sqlglot keeps it as a
    Command whose body is text): the prefix to put before the DuckDB statement, ``"EXPLAIN "`` when no
    option is given; None for any other statement."""
    if not (isinstance(stmt, exp.Command) and str(stmt.this).upper() == "EXPLAIN"):
        return None
    body = stmt.expression.name if stmt.expression is not None else ""
    m = _PREFIX.match(body)
    if m is None:
        return "EXPLAIN ", body
    return f"EXPLAIN {m.group(1)} ", body[m.end():]


def _in_place(text: str, body: str) -> str:
    """``body`` (an EXPLAIN's statement) preceded by blanks standing for what comes before it in ``text`` (newlines
    kept): its nodes' offsets are then those of the statement text, so an error points where the user wrote it."""
    at = text.find(body) if text else -1
    return re.sub(r"[^\n]", " ", text[:at]) + body if at > 0 else body


def reads_only_explain(stmt: exp.Expression) -> bool:
    """Whether an EXPLAIN leaves cached plans valid: a plain EXPLAIN of a query (EXPLAIN ANALYZE runs its
    statement, which may write; another command is not ours to judge)."""
    parts = explain_parts(stmt)
    if parts is None or parts[0] != "EXPLAIN ":
        return False
    words = parts[1].upper().split(None, 1)
    return bool(words) and words[0] in ("SELECT", "WITH", "FROM")


@handles(exp.Command, reads_only=reads_only_explain)
def _explain(stmt: exp.Command, session: Session, params: list) -> Result:
    parts = explain_parts(stmt)
    if parts is None:
        return run_default(stmt, session, params)
    prefix, body = parts
    inner = msql.parse(_in_place(session.text, body))
    if len(inner) != 1:
        raise ProgrammingError("EXPLAIN takes exactly one statement.", code="parse_error")
    if isinstance(inner[0], TuneModel):
        if "ANALYZE" in prefix.upper():
            raise NotSupportedError("EXPLAIN ANALYZE TUNE is not supported: it would run the study; run TUNE (its "
                                    "result and modelsql.stages give what was trained) or EXPLAIN TUNE for the plan.",
                                    code="explain_not_supported")
        return explain_tune(inner[0], session, params)
    if isinstance(inner[0], EvaluateModel):
        if "ANALYZE" in prefix.upper():
            raise NotSupportedError("EXPLAIN ANALYZE EVALUATE is not supported: it would run and record the evaluation; "
                                    "run EVALUATE, or EXPLAIN ANALYZE SELECT * FROM EVALUATE(...), which computes the "
                                    "metrics and records nothing.", code="explain_not_supported")
        inner = [as_table_function(inner[0])]  # the plan of its predictions, as EXPLAIN shows the table function's
    elif isinstance(inner[0], tuple(STATEMENT_NODES)):
        written = body.upper().split()
        forms = getattr(type(inner[0]), "WORDS")
        words = next((w for w in forms if written[:len(w)] == list(w)), forms[0])  # as the user wrote it
        raise NotSupportedError(
            f"EXPLAIN {' '.join(words)} is not supported: model statements have no plan to show; "
            "EXPLAIN a query (SELECT, INSERT, CREATE TABLE AS ...) with PREDICT.",
            code="explain_not_supported",
        )
    analyze = "ANALYZE" in prefix.upper()
    out, plan, phys = run_query(inner[0], session, params, prefix=prefix, dry=not analyze)
    try:
        rows = session.duck.fetchall()
    except Exception as exc:
        out.release()
        raise out.error(exc) from exc
    ours = [("modelsql_predict", describe_scan(s, phys.operators[s.id].execution)) for s in plan.scans]
    ours.append(("modelsql_plan", render_plan(plan, phys, analyze=analyze)))
    out.release()
    if analyze:
        record_query_traces(session, plan, phys)  # the cost model's training data: what really ran
    return Result(
        session.duck,
        description=[("explain_key", "VARCHAR", None, None, None, None, True),
                     ("explain_value", "VARCHAR", None, None, None, None, True)],
        rows=ours + [tuple(r) for r in rows],
    )


def render_plan(plan: QueryPlan, phys=None, *, analyze: bool = False) -> str:
    """The plan as indented lines (``phys``: the operators chosen; None before physical planning)."""
    lines = [f"Query {plan.kind}"]
    inner = {i for s in plan.scans for i in s.input.inner}
    for s in plan.scans:
        if s.id not in inner:
            _scan_lines(plan, s, phys, analyze, 1, lines)
    for g in plan.groups:
        names = ", ".join(plan.scan(m).label for m in g.members)
        lines.append(f"  SharedInput #{g.id}: {names} read {_input_text(g.input)} once, on the same chunks")
    for share in plan.step_shares:
        lines += _shared_step_lines(plan, share)
        memo = phys.memos.get(share.group) if phys is not None else None
        if analyze and memo is not None:
            lines.append(f"    measured: {memo.hits:,} step runs answered from the shared steps' memo")
    for family in plan.family_shares:
        lines += _family_lines(plan, family, phys, analyze)
    for name in plan.materialized:
        lines.append(f"  MaterializedCTE {name}: its PREDICTs run once, however often it is read")
    lines += [f"  note: {n}" for n in plan.notes]
    return "\n".join(lines)


def _shared_step_lines(plan: QueryPlan, share) -> list[str]:
    """The steps pipelines of one shared input compute once per chunk, and the loading they save."""
    shared = share.shared
    names = {f"#{m}": plan.scan(m).model.name for m in plan.groups[share.group].members}
    lines = [f"  SharedSteps #{share.group}: {len(shared.nodes)} distinct steps for {shared.steps_total} pipeline "
             f"steps; each shared step runs once per chunk (saves loading {_bytes(shared.bytes_saved())})"]
    for node in shared.shared:
        users = ", ".join(names[m] for m in sorted(node.members))
        lines.append(f"    step {node.name} ({node.model.label}) for pipelines {users}")
    return lines


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def _scan_lines(plan: QueryPlan, s: PredictScan, phys, analyze: bool, depth: int, lines: list) -> None:
    pad = "  " * depth
    op = phys.operators.get(s.id) if phys is not None else None
    choice = phys.choices.get(s.id) if phys is not None else None
    name = op.name if op is not None else "PredictScan"
    est = cost.estimate(s, choice.execution if choice else "stream", plan.costs, choice.run_rows if choice else None,
                        choice.backend if choice else "onnxruntime", choice.threads if choice else None)
    rows = f"{est.rows:,}" + ("" if s.estimated_rows is not None else " (no DuckDB estimate)")
    backend = "python" if s.model.kind == "python" else (choice.backend if choice is not None else s.options.backend)
    device = choice.device if choice is not None else "cpu"
    if device != "cpu" and choice is not None:
        est = cost.device_estimate(s, device, plan.costs, choice)
    lines.append(f"{pad}{name} {s.label} [{backend}, {device}] "
                 f"est. rows={rows} time={duration(est.ms)} ({est.source})")
    if choice is not None:
        lines += _device_lines(choice, op, pad)
        rejected = "; ".join(f"{alt} ({why})" for alt, why in choice.rejected)
        if choice.backend_rejected:
            others = "; ".join(f"{alt} ({why})" for alt, why in choice.backend_rejected)
            lines.append(f"{pad}  backend: {choice.backend}" + (f" ({choice.backend_reason})" if choice.backend_reason
                                                                else "") + f"; rejected: {others}")
        run_rows = (f"; rows per run: {choice.run_rows:,} on {choice.threads} thread{'s' if choice.threads > 1 else ''}"
                    if choice.run_rows else "")
        lines.append(f"{pad}  execution: {op.explain()['execution'] if op else choice.execution} ({choice.reason})"
                     + run_rows + (f"; rejected: {rejected}" if rejected else ""))
    outs = ", ".join(o.column for o in s.outputs)
    lines.append(f"{pad}  outputs: {outs}" + (f"; shared input #{s.shared}" if s.shared is not None else ""))
    if analyze and op is not None:
        measured = op.measured()
        lines.append(f"{pad}  actual: " + " ".join(f"{k}={v}" for k, v in measured.items()))
    if s.model.kind == "models":
        lines += _route_lines(s, op, analyze, pad)
    program = _program_line(s.model)
    if program:
        lines.append(f"{pad}  {program}")
    lines.append(f"{pad}  input: {_input_text(s.input)}")
    for i in s.input.inner:
        _scan_lines(plan, plan.scan(i), phys, analyze, depth + 2, lines)


def _device_lines(choice, op, pad: str) -> list[str]:
    """The device chosen and the devices rejected (none on a machine with the CPU alone, unless asked for),
    and what a CUDA session captured as CUDA graphs."""
    lines = []
    if choice.device_reason:
        others = "; ".join(f"{alt} ({why})" for alt, why in choice.device_rejected)
        lines.append(f"{pad}  device: {choice.device} ({choice.device_reason})" + (f"; rejected: {others}" if others
                                                                                    else ""))
    model = getattr(getattr(op, "function", None), "model", None)
    describe = getattr(model, "explain", None) if choice.device != "cpu" else None
    if callable(describe):
        lines.append(f"{pad}  cuda graphs: {describe()}")
    return lines


def _program_line(model) -> Optional[str]:
    """How a model imported FROM PYTHON runs (whole graph, co-executed or eager, and why), or None."""
    options = dict(getattr(model, "options", ()) or ())
    if "python" not in options:
        return None
    how = {"whole_graph": "one ONNX graph (torch.export, safety gate passed)",
           "coexecute": "co-executed (torch.compile, captured graphs on ONNX Runtime, Python between them)",
           "eager": "eager PyTorch (co-execution was slower at import)"}.get(str(options.get("execution")), "?")
    rows = "; one row per call (batch-dependent)" if getattr(model, "batch_dependence", None) and \
        options.get("execution") != "whole_graph" else ""
    timing = f"; {options['timing']}" if "timing" in options else ""
    return f"program: {options['python']} as {how}{rows}{timing}"


def _family_lines(plan: QueryPlan, share, phys, analyze: bool) -> list[str]:
    """A share group of one model family: merged on a shared input or not, and why."""
    names = ", ".join(plan.scan(m).model.name for m in share.members)
    lines = [f"  MergedFamily #{share.group}: models {names}: {'merged' if share.merge else 'not merged'}: "
             f"{share.reason}"]
    built = phys.families.get(share.group) if phys is not None else None
    if isinstance(built, str):
        lines.append(f"    merge declined, each PREDICT runs its own model: {built}")
    elif analyze and built is not None:
        lines.append(f"    measured: {built.runs:,} merged runs")
    return lines


def _route_lines(s: PredictScan, op, analyze: bool, pad: str) -> list[str]:
    """How a routed PREDICT runs its members: merged or not, and why (rule ``predict_merge_family``)."""
    models = s.model
    assert isinstance(models, RoutedModels)  # a scan of kind "models"
    lines = [f"{pad}  routed by {models.route} to {len(models.members)} models: {', '.join(models.names)}"]
    if s.route is None:
        lines.append(f"{pad}  merge: no, the members run separately (rules off: connection.optimize = False)")
        return lines
    lines.append(f"{pad}  merge: {'yes' if s.route.merge else 'no'}: {s.route.reason}")
    model = op.function.model if op is not None else None
    declined = getattr(model, "declined", None)
    if declined:
        lines.append(f"{pad}  merge declined, the members run separately: {declined}")
    if analyze and model is not None and hasattr(model, "merged_runs"):
        lines.append(f"{pad}  measured: {model.merged_runs:,} merged runs, {model.separate_runs:,} separate member runs")
    return lines


def duration(ms: float) -> str:
    """A time in the unit that reads best: ``0.4 µs``, ``12 µs``, ``3.1 ms``, ``2.5 s``."""
    if ms < 1:
        return f"{ms * 1000:.2g} µs"
    if ms < 1000:
        return f"{ms:.3g} ms"
    return f"{ms / 1000:.3g} s"


def _input_text(relation) -> str:
    if relation.table:
        return f"TABLE {relation.table}"
    text = relation.source.sql(dialect="duckdb") if not relation.inner else "a query over the PREDICTs below"
    return text if len(text) <= 80 else text[:77] + "..."


def _feed_text(a) -> str:
    """``input FLOAT[32] <- a, b`` (a routed PREDICT's route column: ``route <- c``)."""
    if a.input_name == ROUTE_INPUT:
        return f"route <- {a.columns[0]}"
    cols = (", ".join(a.columns) if len(a.columns) <= 8
            else f"{', '.join(a.columns[:4])}, ... {a.columns[-1]} ({len(a.columns)} columns)")
    return f"{a.input_name} {a.elem_type}{list(a.shape)} <- {cols}"


def describe_scan(scan: PredictScan, execution: str = "stream") -> str:
    """One readable paragraph on how a PREDICT was bound (the ``modelsql_predict`` rows of EXPLAIN)."""
    b = scan.binding
    feeds = "; ".join(_feed_text(a) for a in b.args)
    outs = ", ".join(f"{o.column} {o.duckdb_type}" for o in b.outputs)
    opts = scan.options
    return (
        f"PREDICT {scan.label} [{'python' if scan.model.kind == 'python' else opts.backend}]\n"
        f"inputs: {feeds}\noutputs: {outs}\n"
        f"on_null: {opts.on_null}" + (f", on_error: {opts.on_error}" if opts.on_error != "error" else "")
        + (f", batch_size: {opts.batch_size}" if opts.batch_size else "")
        + (f"\nexecution: {execution}" if execution and execution != "stream" else "")
        + (f"\nrows run one at a time: {scan.model.batch_dependence}"
           if scan.model.batch_dependence and opts.isolate_rows else "")
    )
