"""``CREATE MODEL m FROM PYTHON 'pkg.mod:obj' WITH (example = ...)``: a Python program imported for PREDICT.

One statement, two meanings (documented in the README): a factory of hyper-parameters is a *trainable*
(:mod:`.trainables`, trained by TUNE); a ``torch.nn.Module`` (an instance, a subclass built with no
arguments, or a function returning one) with an example input is *importable* for PREDICT, here. The
example comes from ``example = 'pkg.mod:name'`` (a value or a function of no arguments returning the
example batch), ``example = t`` (the rows of table ``t``, bound to ``forward``'s parameters by column name,
or all numeric columns for a single parameter), or the module's own ``example()`` method.

Import tries, in order (JANUS: a graph where it is safe; Terra: co-execution where it is not):

1. a **whole graph** (:func:`modelsql.converters.whole_graph.whole_graph`: strict ``torch.export``, the dynamo
   ONNX exporter, and the safety gate), stored like any ONNX model;
2. else **co-execution** (:mod:`modelsql.operators.backends.coexec`): the module's source digest and
   ``state_dict`` are stored (:mod:`.python_artifacts`) and PREDICT runs it under ``torch.compile`` with
   each captured graph on ONNX Runtime; when co-execution was slower than eager at import (timed on
   PREDICT's chunk shape), the program runs eagerly, and DESCRIBE and EXPLAIN say so.

A program whose rows depend on their batch is run one row per call (see
:func:`modelsql.converters.python_program.row_dependence`). ``DESCRIBE MODEL`` lists which path it took and
why (``execution``, ``whole_graph``, ``graph_breaks``, ``suggestion``, ``timing``).
"""

from __future__ import annotations

import copy
import hashlib
import statistics
import time
from typing import TYPE_CHECKING, Any, Callable, Optional

import numpy as np
import pyarrow as pa
from sqlglot import exp

from modelsql.catalog.lineage import Origin
from modelsql.duckdb_errors import translate
from modelsql.errors import DataError, NotSupportedError, ProgrammingError
from modelsql.analyses.program_checks import batching, check_deterministic
from modelsql.converters.python_program import Program, program, forward_inputs, quiet, to_feeds
from modelsql.converters.whole_graph import whole_graph
from modelsql.operators.backends import devices
from modelsql.operators.backends.coexec import BUCKETS, CHUNK_ROWS, PythonProgramModel, graph_breaks
from modelsql.progress import Meter
from modelsql.sql.models import ImportModel
from modelsql.tuning.factories import resolve_reference, source_file
from modelsql.engine.models import statements as ddl
from modelsql.engine.handlers import catalog_write
from modelsql.engine.artifacts import trust
from modelsql.engine.query.bind_predict import looks_like_key
from modelsql.engine.training_features import input_keys
from modelsql.engine.options import value
from modelsql.engine.options.declared import CREATE_MODEL_FROM_PYTHON
from modelsql.engine.artifacts.python_programs import StoredProgram, helper_sources, program_code, program_digest, program_module, state_tensors
from modelsql.engine.result import Result

if TYPE_CHECKING:
    from modelsql.engine.session import Session

__all__ = ["OPTIONS", "EXECUTIONS", "wants_import", "create_python_model", "store_program"]

OPTIONS = CREATE_MODEL_FROM_PYTHON
"""Options of an importable ``CREATE MODEL ... FROM PYTHON`` (:data:`modelsql.engine.options.declared.
CREATE_MODEL_FROM_PYTHON`). ``device`` (``'auto'``, the default, and ``'cpu'``: the CPU; ``'cuda'`` /
``'cuda:N'``: that GPU) is where PREDICT runs a program kept as Python (co-executed or eager; on a GPU it runs
eagerly, since co-execution's subgraphs are ONNX Runtime CPU sessions). ``'auto'`` stays on the CPU: the
import's checks ran there and a GPU's floats differ in the last digits, so the GPU is used only when asked
for. A program imported as a whole graph is an ONNX model: PREDICT places it like any."""

EXECUTIONS = OPTIONS["execution"].choices
"""``execution``: ``auto`` (the default: a whole graph if the gate passes, else co-execution or eager,
whichever was faster); ``whole_graph`` (a whole graph or an error naming the failed rule); ``coexecute`` and
``eager`` (skip the whole graph)."""

TIMING_CALLS = 15
"""Calls timed per execution mode at import (the median is compared)."""


def wants_import(stmt: ImportModel, params: list) -> bool:
    """True when ``CREATE MODEL ... FROM PYTHON`` imports a program for PREDICT (an ``example`` option, or a
    reference naming a Module or a Module subclass) rather than registering a trainable factory."""
    if "example" in stmt.option_values:
        return True
    try:
        import torch
    except ImportError:
        return False
    obj = resolve_reference(str(value(stmt.args["source"], params)))
    # a function is a trainable factory unless an example says it builds a program for PREDICT
    return isinstance(obj, torch.nn.Module) or (isinstance(obj, type) and issubclass(obj, torch.nn.Module))


def create_python_model(stmt: ImportModel, session: Session, params: list) -> Result:
    """Import the program ``stmt`` names (see the module docstring), reporting its :data:`STAGES` to the
    session's progress hook (:mod:`modelsql.progress`, kind ``create_model``).

    Raises:
        ProgrammingError: ``unknown_option``, ``invalid_option``, ``not_a_module``, ``factory_not_found``,
            ``example_missing``, ``unsupported_input`` / ``unsupported_output`` (what no column carries).
        NotSupportedError: ``whole_graph_refused`` (``execution = 'whole_graph'`` and a gate rule failed).
        IntegrityError: ``duplicate_model``.
        DataError: ``program_failed`` (the program raised on its example).
    """
    session.check_writable()
    name = stmt.this.model_name
    meter = Meter(session.progress, "create_model", total=len(STAGES), label=name.lower(), interval=0)
    begun: list[int] = []

    def stage(i: int) -> None:
        begun.append(i)
        meter.update(i, stage=STAGES[i])  # done: the stages before it

    try:
        out = _create(stmt, session, params, stage)
    except BaseException:
        meter.finish(ok=False)
        raise
    meter.update(len(begun))
    meter.finish()
    return out


STAGES = ("running the example", "checking determinism", "trying a whole graph", "checking batching",
          "timing eager and co-execution, storing")
"""What an importable ``CREATE MODEL ... FROM PYTHON`` does, in order (its progress counts them; a program
imported as a whole graph ends after the third)."""


def _create(stmt: ImportModel, session: Session, params: list, stage) -> Result:
    """:func:`create_python_model`'s work; ``stage(i)`` is called as :data:`STAGES` ``[i]`` begins."""
    name = stmt.this.model_name
    ref = str(value(stmt.args["source"], params))
    options = _options(stmt, params, name)
    if ddl.existing_model(session, name, bool(stmt.args.get("replace")), bool(stmt.args.get("exists"))):
        return Result(session.duck, rowcount=0)
    stage(0)
    module = program_module(ref)
    pristine = copy.deepcopy(module)  # the weights as given: the checks below call forward, which may mutate them
    label = f'model "{name.lower()}" ({ref})'
    prog = program(module, _example(session, module, options.get("example"), name), label=label,
                   output_names=options.get("outputs"))
    stage(1)
    check_deterministic(prog, label)
    described = {"python": ref, **({"description": options["description"]} if "description" in options else {})}
    execution = options.get("execution", "auto")
    placed = {"device": options["device"]} if options["device"] not in ("auto", devices.CPU) else {}
    stage(2)
    gate = whole_graph(prog)
    if execution in ("auto", "whole_graph") and gate.proto is not None:
        ddl.import_model(session, name, gate.proto, replace=bool(stmt.args.get("replace")),
                         options={**described, "execution": "whole_graph", "whole_graph": gate.reason},
                         provenance=("torch", f"python:{ref}"), origin=_python_origin(ref))
        return Result(session.duck, rowcount=1)
    if execution == "whole_graph":
        raise NotSupportedError(f'CREATE MODEL {name}: no whole graph of {ref}: rule "{gate.rule}" failed: '
                                f"{gate.reason}" + (f"; suggestion: {gate.suggestion}" if gate.suggestion else ""),
                                code="whole_graph_refused")
    described.update(whole_graph=(f"refused ({gate.rule}): {gate.reason}" if gate.rule else
                                  f"not used (execution = '{execution}'): the gate passed"),
                     **({"suggestion": gate.suggestion} if gate.suggestion else {}))
    stage(3)
    reason = batching(prog, gate, bool(options.get("row_independent", False)))
    stage(4)
    store_program(session, stmt, ref, prog, execution, {**described, **placed}, row_reason=reason,
                  state=state_tensors(pristine))
    return Result(session.duck, rowcount=1)


def _options(stmt: ImportModel, params: list, name: str) -> dict:
    """The statement's options (:data:`OPTIONS`), ``device`` checked against the machine.

    Raises:
        ProgrammingError: ``duplicate_option``, ``unknown_option``, ``invalid_option``.
        NotSupportedError: ``device_not_available``.
    """
    where = f"CREATE MODEL {name} FROM PYTHON"
    out = dict(OPTIONS.parse(stmt, params, where=where))
    out["device"] = devices.require(out["device"], f"{where} option device")
    return {k: v for k, v in out.items() if v is not None}


def _example(session: Session, module, given, name: str):
    """The example batch: from a reference, a table, or the module's ``example()``."""
    if isinstance(given, tuple) and given[0] == "table":
        return _table_example(session, module, given[1], name)
    if given is not None:
        obj = resolve_reference(str(given))
        return _called(obj, str(given)) if callable(obj) and not hasattr(obj, "shape") else obj
    own = getattr(module, "example", None)
    if callable(own):
        return _called(own, f"{type(module).__name__}.example()")
    raise ProgrammingError(f"CREATE MODEL {name} FROM PYTHON needs an example input: WITH (example = "
                           "'package.module:name') or WITH (example = some_table), or an example() method on the "
                           "module.", code="example_missing")


def _is_number(t) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)


def _called(fn, what: str):
    """``fn()``, the example's maker; its failure is a DataError ``program_failed`` naming it."""
    try:
        return fn()
    except Exception as exc:  # the user's code: any error is its own
        raise DataError(f"the example {what} failed: {type(exc).__name__}: {exc}", code="program_failed") from exc


def _table_example(session: Session, module, table: str, name: str) -> tuple:
    """The rows of ``table`` as arguments of ``forward``: a column per parameter of that name, else (one
    parameter) the numeric columns that are not keys (PREDICT's rule: key-like names, the table's PRIMARY KEY and
    UNIQUE columns) as a float32 matrix."""
    import torch

    try:
        frame = session.duck.sql(f'SELECT * FROM "{table}"').to_arrow_table()
    except Exception as exc:  # DuckDB's error (no such table), as the PEP 249 class it stands for
        err = translate(exc)
        raise type(err)(f"CREATE MODEL {name}: example table {table}: {err}", code=err.code) from None
    if frame.num_rows == 0:
        raise ProgrammingError(f"CREATE MODEL {name}: example table {table} has no rows", code="example_missing")
    columns = {c.lower(): c for c in frame.column_names}
    params = forward_inputs(module)
    if not all(p.lower() in columns for p in params):
        if len(params) != 1:
            raise ProgrammingError(f"CREATE MODEL {name}: example table {table} has no column named "
                                   f"{next(p for p in params if p.lower() not in columns)!r} for forward's input.",
                                   code="example_missing")
        keys = input_keys(session, exp.Table(this=exp.to_identifier(table)))
        numeric = [c for c in frame.column_names
                   if not looks_like_key(c, keys) and _is_number(frame.schema.field(c).type)]
        if not numeric:
            raise ProgrammingError(f"CREATE MODEL {name}: example table {table} has no numeric column (other than "
                                   f"keys) for forward's input {params[0]!r}", code="example_missing")
        matrix = np.column_stack([np.asarray(frame.column(c).to_numpy(), dtype=np.float64) for c in numeric]
                                 ).astype(np.float32)
        return (torch.from_numpy(matrix),)
    out: list[Any] = []
    for p in params:
        col = frame.column(columns[p.lower()]).to_pylist()
        if col and isinstance(col[0], str):
            out.append([str(v) for v in col])
        else:
            array = np.asarray(col)
            out.append(torch.from_numpy(array.astype(np.float32) if array.dtype.kind == "f" else array))
    return tuple(out)


def store_program(session: Session, stmt: ImportModel, ref: str, prog: Program, execution: str, described: dict,
                  params: Optional[dict] = None, *, row_reason: Optional[str] = None, state=None,
                  origin: Optional[Origin] = None) -> None:
    """Store a program that is not a whole graph (kind ``"python"``): co-executed or eager, whichever was
    faster at import (or as ``execution`` says). ``params``: the arguments ``ref`` is built with;
    ``row_reason``: why it runs one row per call (:func:`~modelsql.analyses.program_checks.batching`), or None;
    ``state``: its :func:`~.python_artifacts.state_tensors` (default: the module's now); ``origin``: where it
    came from (default: the reference and its source's digest)."""
    if ddl.existing_model(session, stmt.this.model_name, bool(stmt.args.get("replace")), bool(stmt.args.get("exists"))):
        return
    key = trust.signing_key()  # before anything is written: a key that cannot be made fails the statement first
    dependence = row_reason
    described["batching"] = f"one row per call: {dependence}" if dependence else "batched: rows are independent"
    mode, start_rows, timing, breaks = _choose_mode(prog, execution, dependence is not None)
    described.update(execution=mode, timing=timing, **({"graph_breaks": breaks} if breaks else {}))
    with session.store.writing():  # the blobs stay pending (VACUUM keeps them) until the catalog names them
        source_path = source_file(ref)
        source = open(source_path, "rb").read() if source_path else b""
        stored = StoredProgram(ref, program_digest(ref, params), session.store.put(source), mode, dependence is not None,
                               tuple(prog.output_names), dict(params or {}), helper_sources(ref), start_rows)
        tensors = state if state is not None else state_tensors(prog.module)
        blob = stored.to_bytes()
        graph_digest = session.store.put(blob)
        for t, data in tensors:
            session.store.put(data)
        content = hashlib.sha256(blob + b"".join(t.digest.encode() for t, _ in tensors)).hexdigest()
        fields = dict(name=stmt.this.model_name.lower(), graph_digest=graph_digest, graph_bytes=len(blob), opset=0,
                      inputs=prog.inputs, outputs=prog.outputs, tensors=tuple(t for t, _ in tensors),
                      param_count=sum(int(np.prod(t.dims)) for t, _ in tensors), source=f"python:{ref}", kind="python",
                      options=tuple(sorted((k, str(v)) for k, v in described.items())), batch_dependence=dependence,
                      content_digest=content)
        kinds = {graph_digest: "graph", stored.source_blob: "graph", **{t.digest: "tensor" for t, _ in tensors}}
        code = program_code(stored, graph_digest, fields["name"], None)
        with catalog_write(session):  # signed first (by content): no reader sees it unsigned
            trust.sign(session, code, key)
        try:  # (the version in a transaction of its own, retried on a conflict: ddl.add_version)
            ddl.add_version(session.catalog, fields, kinds, replace=bool(stmt.args.get("replace")),
                            if_not_exists=bool(stmt.args.get("exists")), origin=origin or _python_origin(ref))
        finally:
            session.changed()


def _python_origin(ref: str) -> Origin:
    """The origin of a version imported FROM PYTHON: the reference and the digest of its module's source."""
    path = source_file(ref)
    digest = hashlib.sha256(open(path, "rb").read()).hexdigest() if path else None
    return Origin("python", ref, f"sha256:{digest}" if digest else None)


def _choose_mode(prog: Program, execution: str, row_calls: bool) -> tuple[str, int, str, str]:
    """(mode, fewest rows co-executed, timing note, graph-break note): eager against co-execution, timed on
    PREDICT's call shapes: one row, and (a batched program) :data:`CHUNK_ROWS` rows, whose straight-line cost
    model gives the chunk size from which co-execution pays (only eager is timed when ``execution`` is
    ``"eager"``)."""
    sizes = (1,) if row_calls else (1, CHUNK_ROWS)
    feeds = [[_feeds(prog, n, draw) for draw in range(TIMING_CALLS + 1)] for n in sizes]
    eager = PythonProgramModel(prog.module, prog.inputs, prog.output_names, mode="eager", row_calls=row_calls,
                               label="the program")
    t_eager = [_median_us(eager, f) for f in feeds]
    if execution == "eager":
        return "eager", 1, _timing(sizes, t_eager) + " (co-execution not tried: execution = 'eager')", ""
    coexec = PythonProgramModel(prog.module, prog.inputs, prog.output_names, mode="coexecute", row_calls=row_calls,
                                label="the program")
    start = time.perf_counter()
    with quiet():  # dynamo's graph-break notes: DESCRIBE's graph_breaks says what matters
        for f in feeds:
            coexec.run(f[0])
        compile_s = time.perf_counter() - start
        t_coexec = _coexecuted_us(coexec, feeds)
    stats = coexec.stats()
    breaks = (graph_breaks(prog.module, prog.example) + f"; {stats['graphs']} captured graphs compiled, "
              f"{stats['on_onnx']} on ONNX Runtime" + (f"; stayed FX: {stats['fallbacks'][0]}" if stats["fallbacks"]
                                                     else ""))
    if t_coexec is None:  # it compiles again on new rows, as it would under PREDICT: eager, unless asked for
        timing = (_timing(sizes, t_eager) + "; co-execution compiled again on a timed call of new rows of the same "
                  f"shape (its guards test input values; compiled in {compile_s:.1f} s before timing)")
        return ("coexecute", 1, timing, breaks) if execution == "coexecute" else ("eager", 1, timing, breaks)
    start_rows = 1 if execution == "coexecute" else _crossover(sizes, t_eager, t_coexec)
    mode = "eager" if start_rows is None else "coexecute"
    timing = (_timing(sizes, t_eager, t_coexec) + f" (compiled in {compile_s:.1f} s)"
              + (f"; co-executed from {start_rows} rows per call, eager below" if mode == "coexecute" and start_rows > 1
                 else ""))
    return mode, start_rows or 1, timing, breaks


def _coexecuted_us(coexec: PythonProgramModel, feeds: list) -> Optional[list]:
    """Median microseconds per co-executed call for each size's feeds, or None as soon as a timed call compiles
    a new graph: a program whose dynamo guards test input values (a tokenizer's strings) compiles again on new
    rows under PREDICT too, up to dynamo's recompile limit, seconds each, so its timing would only say
    that it is slow (a tokenizer's import took 32 s of such compiles)."""
    medians = []
    for f in feeds:
        graphs = coexec.stats()["graphs"]
        times = _call_us(coexec, f, stop=lambda: coexec.stats()["graphs"] > graphs)
        if times is None:
            return None
        medians.append(statistics.median(times))
    return medians


def _feeds(prog: Program, rows: int, draw: int = 0) -> dict:
    """``rows`` rows drawn from the example (draw ``draw`` of a seeded sequence): every timed call gets other rows,
    so a program whose dynamo guards test input values (a tokenizer's strings) recompiles at import as it would
    under PREDICT, and co-execution is timed with that cost."""
    idx = np.random.default_rng(draw).integers(0, prog.rows(), rows) if rows > 1 else np.array([draw % prog.rows()])
    return to_feeds(tuple([a[i] for i in idx] if isinstance(a, list) else a[idx] for a in prog.example), prog.inputs)


def _crossover(sizes: tuple, eager: list, coexec: list):
    """The fewest rows per call (a size of :data:`BUCKETS`) from which co-execution is faster, or None, from the
    straight lines through the timings."""
    if coexec[-1] >= eager[-1]:
        return None
    if len(sizes) == 1 or coexec[0] < eager[0]:
        return 1
    slope_e, slope_c = ((t[1] - t[0]) / (sizes[1] - sizes[0]) for t in (eager, coexec))
    rows = (coexec[0] - eager[0]) / (slope_e - slope_c) + sizes[0]
    return next(b for b in BUCKETS if b >= rows)


def _timing(sizes: tuple, eager: list, coexec: Optional[list] = None) -> str:
    parts = []
    for k, n in enumerate(sizes):
        text = f"{n} row{'s' if n > 1 else ''}: eager {eager[k]:.0f} us"
        parts.append(text + (f", co-executed {coexec[k]:.0f} us" if coexec else ""))
    return "per call of " + "; of ".join(parts)


def _median_us(model: PythonProgramModel, feeds: list) -> float:
    """Median microseconds per call over ``feeds`` (one call each, after a warm-up call on the first)."""
    times = _call_us(model, feeds)
    assert times is not None  # no stop condition
    return statistics.median(times)


def _call_us(model: PythonProgramModel, feeds: list, stop: Optional[Callable[[], bool]] = None) -> Optional[list]:
    """Microseconds of each call over ``feeds[1:]``, after a warm-up call on ``feeds[0]``; None as soon as
    ``stop()`` is true after a timed call."""
    model.run(feeds[0])
    times = []
    for f in feeds[1:]:
        start = time.perf_counter()
        model.run(f)
        times.append((time.perf_counter() - start) * 1e6)
        if stop is not None and stop():
            return None
    return times
