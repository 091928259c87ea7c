"""The cost function: estimated rows and time of each PREDICT, and the choice of its operator.

A PREDICT's time is its model's inference (the runs it makes, each on so many rows) plus its operator's
own cost (per fed value and per call). Inference comes from the learned cost model when the catalog
has one (:class:`~modelsql.engine.query.learned_costs.Costs`: Mantis-style, trained on ``modelsql.traces`` by
``PROFILE``); without one it is the documented default :data:`PS_PER_PARAM_ROW`. The operator's own
costs are the defaults below, measured with ``benchmarks/predict_overhead.py`` (1,000,000 rows x 64
FLOAT columns, 2 cores, onnxruntime 1.32, DuckDB 2.0). EXPLAIN says which source each estimate used.

:func:`choose_execution` picks the physical operator for one scan: ``stream``
(a vectorized function inside DuckDB's pipeline,
:class:`~modelsql.operators.scan.StreamPredict`) or ``batch`` (the input read to
large Arrow record batches first, :class:`~modelsql.operators.scan.BatchPredict`), and, in batch mode
with a learned cost model, the rows per model run (:data:`RUN_ROWS_CANDIDATES`), with the estimate of
each alternative and the reason it was rejected.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Optional

from modelsql.catalog.entries import ModelVersion, RoutedModels
from modelsql.errors import NotSupportedError
from modelsql.operators.backends import devices
from modelsql.operators.backends.cuda import MAX_BUCKET
from modelsql.operators.predict import ONNX_TO_DUCKDB, InputArg
from modelsql.engine.artifacts.sessions import default_threads
from modelsql.engine.artifacts.python_programs import program_device
from modelsql.engine.artifacts import merge_gain
from modelsql.engine.query.learned_costs import LEARNED_MIN_GAIN, NO_COSTS, Costs
from modelsql.engine.query.plan import PredictScan

BATCH_MIN_ROWS = 65_536
"""``execution = 'auto'`` runs a PREDICT in batch mode only over at least this many (estimated) input rows:
below it the fixed cost of a second query and an Arrow registration outweighs the per-row gain."""
ROW_GROUP_ROWS = 122_880
"""Rows per DuckDB row group, its unit of scan parallelism."""
BATCH_MAX_PARAMS = 50_000
"""``execution = 'auto'`` runs models with more parameters streaming: parameters ~ multiply-adds per row for
dense networks. In ``benchmarks/predict_overhead.py`` batch execution made the light model (2,410 parameters)
1.5x faster and the heavy one (300K) 1.1x slower (inference dominates, and streaming overlaps it with the scan)."""
BATCH_MEMORY = 256 << 20
"""Bytes ``execution = 'auto'`` lets batch mode keep (passthrough columns read + outputs); past twice this
while running, the PREDICT is run again streaming."""
BATCH_ROWS = 32_768
"""Largest Arrow record batch a batch-mode PREDICT reads from DuckDB (fewer rows for wide inputs: about 32 MiB
of features); 32K-row batches beat fetching the whole table in the benchmark's hand-written glue too."""
RUN_ROWS = 8_192
"""Rows per model run in batch mode for a model of more than :data:`BATCH_MAX_PARAMS` parameters: the size at
which ONNX Runtime ran the heavy benchmark model fastest (larger slices spill activations out of cache). A light
model runs on whole record batches (1.1x faster than 8K-row slices there)."""

PS_PER_PARAM_ROW = 13.0
"""Default inference time: picoseconds per model parameter per row. Measured: the heavy MLP (300K parameters)
ran 1M rows in 3.79 s (12.6 ps), the light one (2,410) in 0.044 s (18 ps), on 2 cores."""
STREAM_NS_PER_VALUE = 4.1
"""Default cost of streaming, per fed value (row x column), beyond inference: the light model's stream plan
took 0.309 s against 0.044 s of inference over 64M values."""
BATCH_NS_PER_VALUE = 2.3
"""Default cost of batch execution per fed value: the light model's batch plan took 0.190 s."""
CALL_MS = 0.05
"""Default fixed cost of one call of a PREDICT's function (Python entry, Arrow to NumPy and back): DuckDB
calls a streaming PREDICT once per chunk of :data:`CHUNK_ROWS` rows, a batch PREDICT once per record batch."""
CHUNK_ROWS = 2048
"""Rows DuckDB hands a vectorized function per call."""
BATCH_FIXED_MS = 1.0
"""Default fixed cost of batch execution: a second query for the input and an Arrow table registration."""
DEFAULT_ROWS = 1000
"""Rows assumed when DuckDB gives no estimate."""
RUN_ROWS_CANDIDATES = (1024, 4096, RUN_ROWS, BATCH_ROWS)
"""Rows per model run a batch-mode PREDICT may be given when the learned cost model chooses."""
CUDA_RUN_MS = 0.25
"""Default fixed time of one model run on a CUDA device: a captured CUDA graph's replay of a small network
(a width-16 ResNet-18, a 4-layer BERT-style encoder) took 0.25 ms on an H200; an uncaptured run 0.7-1.0 ms."""
CUDA_SPEEDUP = 30.0
"""Default speed of a CUDA device's inference over the CPU default :data:`PS_PER_PARAM_ROW`: ResNet-50 over 256
rows took 2.12 s on 16 cores and 0.063 s on an H200 (34x)."""
H2D_BYTES_PER_MS = 10e6
"""Default host-to-device copy rate (bytes per millisecond: 10 GB/s, pageable memory over PCIe 5)."""
DEVICE_MIN_GAIN = 1.25
"""The estimated speedup a CUDA device needs over the CPU before ``device = 'auto'`` takes it."""
GPU_KINDS = ("onnx", "sklearn", "torch")
"""Model kinds ``device = 'auto'`` may put on a CUDA device (pipelines and Python programs run there only when
asked; routed families by :func:`routed_device`)."""
BACKEND_MIN_GAIN = 1.5
"""The estimated speedup a checked TVM artifact needs over ONNX Runtime before the planner runs it (the
feasibility study: a wrong TVM pick cost up to 100x, while the cost model's errors are tens of percent)."""


@dataclass(frozen=True)
class Estimate:
    """What the cost function expects of one scan under one operator.

    Attributes:
        rows: input rows (DuckDB's estimate, or :data:`DEFAULT_ROWS`).
        ms: milliseconds of the scan (inference plus the operator's own cost).
        source: where the figures come from.
    """

    rows: int
    ms: float
    source: str = "defaults, no profile traces yet"
    run_rows: Optional[int] = None


@dataclass(frozen=True)
class Choice:
    """The operator chosen for one scan, and each alternative with the reason it was rejected.

    Attributes:
        execution: ``"stream"`` or ``"batch"``.
        reason: why.
        rejected: ``(alternative, why rejected)`` pairs.
        run_rows: rows per model run the learned cost model chose for a batch-mode scan (None: the default).
        threads: intra-op threads it chose for those runs (None: every core).
        backend: ``"onnxruntime"`` or ``"tvm"`` (a checked artifact).
        backend_reason, backend_rejected: why, and the other backend with why not ("" / () when the model
            has no other backend to weigh).
        device: ``"cpu"`` or ``"cuda:N"`` (:func:`choose_device`); device_reason, device_rejected: why, and
            each other device present with its estimate ("" / () on a machine with the CPU alone).
    """

    execution: str
    reason: str
    rejected: tuple[tuple[str, str], ...] = ()
    run_rows: Optional[int] = None
    threads: Optional[int] = None
    backend: str = "onnxruntime"
    backend_reason: str = ""
    backend_rejected: tuple[tuple[str, str], ...] = ()
    device: str = "cpu"
    device_reason: str = ""
    device_rejected: tuple[tuple[str, str], ...] = ()


def _rows(scan: PredictScan) -> int:
    return scan.estimated_rows if scan.estimated_rows is not None else DEFAULT_ROWS




def estimate(scan: PredictScan, execution: str, costs: Costs = NO_COSTS, run_rows: Optional[int] = None,
             backend: str = "onnxruntime", threads: Optional[int] = None) -> Estimate:
    """The estimate of ``scan`` run by ``execution`` (``"stream"`` or ``"batch"``) on ``backend``: inference from
    ``costs`` where it answers (``run_rows`` rows per run in batch mode: the default when None; a TVM
    artifact tuned for a fixed batch runs that many), else the defaults (which know ONNX Runtime only)."""
    rows = _rows(scan)
    fed = max(1, len(scan.binding.fed_columns))
    per_value = BATCH_NS_PER_VALUE if execution == "batch" else STREAM_NS_PER_VALUE
    calls = -(-rows // (BATCH_ROWS if execution == "batch" else CHUNK_ROWS))
    fixed = calls * CALL_MS + (BATCH_FIXED_MS if execution == "batch" else 0.0)
    overhead = rows * fed * per_value / 1e6 + fixed
    per_run = scan.options.batch_size or (run_rows or default_run_rows(scan) if execution == "batch" else CHUNK_ROWS)
    if backend == "tvm" and scan.tvm is not None and scan.tvm.batch_size:
        per_run = scan.tvm.batch_size
    per_run = max(1, min(per_run, rows))
    callers = 1 if execution == "batch" else max(1, min(default_threads(), -(-rows // ROW_GROUP_ROWS)))
    threads = threads or (default_threads() if execution == "batch" else max(1, default_threads() // callers))
    learned = costs.run_ms(scan.model, per_run, threads=threads, backend=backend)
    if learned is None:
        source = costs.source if not costs.learned else "defaults: the cost model cannot describe this model here"
        return Estimate(rows=rows, ms=rows * scan.model.param_count * PS_PER_PARAM_ROW / 1e9 + overhead, source=source)
    # streaming: DuckDB's threads call the model at once, one per row group (cost.stream_threads)
    return Estimate(rows=rows, ms=-(-rows // per_run) * learned / callers + overhead, source=costs.source,
                    run_rows=per_run)


def default_run_rows(scan: PredictScan) -> int:
    """Rows per model run of a batch-mode scan when no cost model chooses."""
    return RUN_ROWS if scan.model.param_count > BATCH_MAX_PARAMS else BATCH_ROWS


def best_run_rows(scan: PredictScan, costs: Costs) -> tuple[Optional[int], Optional[int], tuple[tuple[str, str], ...]]:
    """The rows per run (of :data:`RUN_ROWS_CANDIDATES`) and intra-op threads (one, or every core) the learned
    cost model expects fastest in batch mode, and the other pairs with their estimates; ``(None, None, ())``
    without a cost model or with ``batch_size`` given."""
    if not costs.learned or scan.options.batch_size:
        return None, None, ()
    rows = _rows(scan)
    options = [(r, t) for r in sorted({min(r, rows) for r in RUN_ROWS_CANDIDATES}) for t in sorted({1, default_threads()})]
    estimates = {o: estimate(scan, "batch", costs, o[0], threads=o[1]).ms for o in options}
    best = min(options, key=lambda o: (estimates[o], -o[0], -o[1]))
    others = tuple((f"{r:,}-row runs on {t} thread{'s' if t > 1 else ''}", f"estimated {estimates[(r, t)]:.1f} ms")
                   for r, t in options if (r, t) != best)
    return best[0], best[1], others


def choose_execution(scan: PredictScan, costs: Costs = NO_COSTS) -> Choice:
    """``stream`` or ``batch`` for one scan (option ``execution``; ``auto`` decides by the rules below), in
    batch mode the rows per run (:func:`best_run_rows`), and the backend (:func:`choose_backend`).

    Raises:
        NotSupportedError: ``execution = 'batch'`` asked for a column Arrow cannot carry
            (code ``"batch_type_not_supported"``).
    """
    choice = _choose_execution(scan, costs)
    backend, why, rejected = choose_backend(scan, costs, choice)
    choice = replace(choice, backend=backend, backend_reason=why, backend_rejected=rejected)
    device, why, rejected = choose_device(scan, costs, choice)
    return replace(choice, device=device, device_reason=why, device_rejected=rejected)


def device_estimate(scan: PredictScan, device: str, costs: Costs = NO_COSTS, choice: Optional[Choice] = None
                    ) -> Estimate:
    """The estimate of ``scan`` on ``device``: the CPU's is :func:`estimate`; a CUDA device's is the operator's
    own cost, the host-to-device copies of the fed bytes (:data:`H2D_BYTES_PER_MS`) and its runs (of at most
    :data:`~modelsql.operators.backends.cuda.MAX_BUCKET` rows) from the learned cost model's traces of that
    device, else the defaults :data:`CUDA_RUN_MS` + inference :data:`CUDA_SPEEDUP` times faster."""
    execution = choice.execution if choice else "stream"
    cpu = estimate(scan, execution, costs, choice.run_rows if choice else None, threads=choice.threads if choice else None)
    if device == "cpu":
        return cpu
    rows = _rows(scan)
    fed = max(1, len(scan.binding.fed_columns))
    per_value = BATCH_NS_PER_VALUE if execution == "batch" else STREAM_NS_PER_VALUE
    copies = rows * sum(arg_bytes(a, t) for a, t in zip(scan.binding.args, scan.binding.arg_types)) / H2D_BYTES_PER_MS
    overhead = rows * fed * per_value / 1e6 + copies
    per_run = max(1, min(rows, scan.options.batch_size or MAX_BUCKET))
    runs = -(-rows // per_run)
    learned = costs.run_ms(scan.model, per_run, threads=1, device=device)
    if learned is not None:
        return Estimate(rows=rows, ms=runs * learned + overhead, source=costs.source, run_rows=per_run)
    infer = rows * scan.model.param_count * PS_PER_PARAM_ROW / 1e9 / CUDA_SPEEDUP
    return Estimate(rows=rows, ms=runs * CUDA_RUN_MS + infer + overhead, source="defaults, no profile traces of "
                    f"{device} yet" if costs.learned else cpu.source, run_rows=per_run)


def choose_device(scan: PredictScan, costs: Costs, choice: Choice) -> tuple[str, str, tuple[tuple[str, str], ...]]:
    """``(device, why, rejected alternatives)`` for a scan run as ``choice`` says: the one asked for (option
    ``device``); else, where a CUDA device is present, the device with the lowest :func:`device_estimate` when
    it is :data:`DEVICE_MIN_GAIN` times faster than the CPU (ONNX Runtime, kinds :data:`GPU_KINDS` only); else
    the CPU. On a machine without CUDA, ``("cpu", "", ())``."""
    asked = scan.options.device
    if asked != "auto":
        return asked, f"device = '{asked}' was asked for", ()
    present = devices.available()
    gpus = [d for d in present if d != "cpu"]
    if not gpus:
        return "cpu", "", ()
    if isinstance(scan.model, RoutedModels):
        return routed_device(scan, costs)
    if isinstance(scan.model, ModelVersion) and scan.model.kind == "python":
        own = program_device(scan.model)
        return own, "auto: the program's own device (CREATE MODEL ... FROM PYTHON ... WITH (device = ...))", ()
    if scan.model.kind not in GPU_KINDS or choice.backend != "onnxruntime":
        what = "backend " + choice.backend if choice.backend != "onnxruntime" else f"a {scan.model.kind} model"
        return "cpu", "auto", tuple((g, f"{what} runs on a CUDA device only when device = '{g}' is asked for")
                                    for g in gpus)
    return _cheapest({d: device_estimate(scan, d, costs, choice).ms for d in ["cpu"] + gpus})


def _cheapest(ms: dict[str, float]) -> tuple[str, str, tuple[tuple[str, str], ...]]:
    """``(device, why, rejected)`` from ``ms`` (device -> estimated milliseconds, the CPU among them): the GPU
    estimated fastest when it is :data:`DEVICE_MIN_GAIN` times faster than the CPU, else the CPU."""
    cpu = ms["cpu"]
    best = min((d for d in ms if d != "cpu"), key=ms.__getitem__)
    gpu = ms[best]
    if gpu > 0 and cpu / gpu >= DEVICE_MIN_GAIN:
        return best, f"auto: estimated {gpu:.1f} ms against {cpu:.1f} ms on the CPU", (("cpu", f"estimated {cpu:.1f} ms"),)
    return "cpu", "auto", ((best, f"estimated {gpu:.1f} ms against {cpu:.1f} ms on the CPU (under "
                                  f"{DEVICE_MIN_GAIN}x)"),)


def routed_device(scan: PredictScan, costs: Costs = NO_COSTS) -> tuple[str, str, tuple[tuple[str, str], ...]]:
    """``(device, why, rejected)`` for a routed scan (``MODELS (...) ROUTE BY c``): the one asked for; else, with
    ``device = 'auto'`` where a CUDA device is present, the device whose best NetFuse policy
    (:func:`~modelsql.engine.artifacts.merge_gain.estimate`: members, members captured, merged) over the scan's calls
    (:data:`CHUNK_ROWS` rows each, spread evenly over the members) is :data:`DEVICE_MIN_GAIN` times faster
    than the CPU's best; else the CPU."""
    asked = scan.options.device
    if asked != "auto":
        return asked, f"device = '{asked}' was asked for", ()
    gpus = [d for d in devices.available() if d != "cpu"]
    if not gpus:
        return "cpu", "", ()
    models = scan.model
    assert isinstance(models, RoutedModels), "routed_device: a scan of MODELS (...) ROUTE BY c"
    return _cheapest({d: _routed_ms(scan, models, costs, d) for d in ["cpu"] + gpus})


def _routed_ms(scan: PredictScan, models: RoutedModels, costs: Costs, device: str) -> float:
    """Estimated ms of a routed scan's (``models``') runs on ``device``: its calls times the cheapest policy of
    one call (merged only for a family of one architecture)."""
    rows = _rows(scan)
    per_call = min(rows, CHUNK_ROWS)
    n = len(models.members)
    want = [max(1.0, per_call / n)] * n
    est = merge_gain.estimate(merge_gain.member_cost(models.first), n, want, device=device,
                              learned=costs.device_runs(models.first, device))
    options = [ms for policy, ms in est.estimates if policy != "merged" or models.one_architecture]
    return -(-rows // per_call) * min(options)


def choose_backend(scan: PredictScan, costs: Costs, choice: Choice) -> tuple[str, str, tuple[tuple[str, str], ...]]:
    """``(backend, why, rejected alternatives)`` for a scan run as ``choice`` says: the one asked for; else a
    checked TVM artifact (``scan.tvm``) when the learned cost model expects it :data:`BACKEND_MIN_GAIN`
    times faster than ONNX Runtime; else ONNX Runtime."""
    if scan.options.backend_given:
        other = "onnxruntime" if scan.options.backend == "tvm" else "tvm"
        return scan.options.backend, f"backend = '{scan.options.backend}' was asked for", ((other, "not asked for"),)
    if scan.tvm is None:
        return ("onnxruntime", "", (("tvm", f"declined: {scan.tvm_declined}"),) if scan.tvm_declined else ())
    ort = estimate(scan, choice.execution, costs, choice.run_rows, threads=choice.threads)
    tvm = estimate(scan, choice.execution, costs, choice.run_rows, backend="tvm", threads=choice.threads)
    if not costs.learned or tvm.source != costs.source:
        return "onnxruntime", "auto", (("tvm", "checked artifact, but no traces of it to estimate it by: PROFILE "
                                               f"MODEL {scan.model.name} WITH (backends = ('onnxruntime', 'tvm'))"),)
    if ort.ms <= 0 or tvm.ms <= 0:
        return "onnxruntime", "auto", (("tvm", f"estimated {tvm.ms:.1f} ms against {ort.ms:.1f} ms: nothing to gain"),)
    gain = ort.ms / tvm.ms
    if gain >= BACKEND_MIN_GAIN:
        return "tvm", f"auto: estimated {gain:.2f}x faster", (("onnxruntime", f"estimated {ort.ms:.1f} ms"),)
    return "onnxruntime", "auto", (("tvm", f"estimated {tvm.ms:.1f} ms ({gain:.2f}x, under {BACKEND_MIN_GAIN}x)"),)


def _choose_execution(scan: PredictScan, costs: Costs) -> Choice:
    mode = scan.options.execution
    place = scan.placement
    if scan.used is not None and not any(o.column.lower() in scan.used for o in scan.outputs):
        return Choice("stream", "no output is read: DuckDB drops the call, so the model never runs",
                      (("batch", "would run the model for nothing"),))
    if mode == "batch":
        if place.arrow_unsafe:
            c = place.arrow_unsafe[0]
            raise NotSupportedError(
                f'PREDICT({scan.model.ref_sql}): column "{c.name}" ({c.type}) does not pass through '
                "execution = 'batch' unchanged (Arrow does not carry it); use execution = 'stream', or leave "
                "the column out of what the statement reads.",
                code="batch_type_not_supported",
            )
        run_rows, threads, others = best_run_rows(scan, costs)
        return Choice("batch", "execution = 'batch' was asked for", (("stream", "not asked for"), *others), run_rows,
                      threads)
    if mode == "stream":
        return Choice("stream", "execution = 'stream' was asked for", (("batch", "not asked for"),))
    reason = _stream_reason(scan, costs)
    if reason:
        return Choice("stream", "auto", (("batch", reason),))
    run_rows, threads, others = best_run_rows(scan, costs)
    batch = estimate(scan, "batch", costs, run_rows, threads=threads).ms
    return Choice("batch", "auto", (("stream", f"estimated {estimate(scan, 'stream', costs).ms:.1f} ms against "
                                                f"{batch:.1f} ms in batch"), *others), run_rows, threads)


def _stream_reason(scan: PredictScan, costs: Costs = NO_COSTS) -> Optional[str]:
    """Why ``auto`` must stream this scan, or None when batch is allowed and cheaper (by the learned cost
    model where there is one; by the measured rules of thumb below where not)."""
    place = scan.placement
    if not place.top_level_from:
        return ("not the only item of the statement's top-level FROM (a JOIN, CTE, subquery or expression "
                "may read it partly)")
    if place.row_dependent:
        return ("a filter, limit or join may stop a streaming PREDICT early or push into its input; "
                "batch would read every row")
    if place.arrow_unsafe:
        return f'column "{place.arrow_unsafe[0].name}" ({place.arrow_unsafe[0].type}) does not survive Arrow'
    if place.renamed:
        return ("a column alias list (AS p(a, b)) hides which outputs are read: streaming runs the model only "
                "where one is (batch would run it for nothing)")
    rows = scan.estimated_rows
    if costs.learned and rows is not None:
        run_rows, threads, _ = best_run_rows(scan, costs)
        stream = estimate(scan, "stream", costs).ms
        batch = estimate(scan, "batch", costs, run_rows, threads=threads).ms
        if stream < LEARNED_MIN_GAIN * batch:
            return (f"estimated {batch:.1f} ms against {stream:.1f} ms streaming (batch must be estimated "
                    f"{LEARNED_MIN_GAIN}x faster)")
    elif scan.model.param_count > BATCH_MAX_PARAMS:
        return (f"{scan.model.param_count:,} parameters > {BATCH_MAX_PARAMS:,}: inference dominates, "
                "and streaming overlaps it with the scan")
    elif rows is None or rows < BATCH_MIN_ROWS:
        return f"estimated {rows if rows is not None else 'unknown'} rows < {BATCH_MIN_ROWS:,}"
    width = sum(type_bytes(c.type) for c in place.kept_columns) + sum(type_bytes(o.duckdb_type) for o in scan.outputs)
    if rows * width > BATCH_MEMORY:
        return f"would keep about {rows * width >> 20} MiB > {BATCH_MEMORY >> 20} MiB"
    return None


def stream_threads(scan: PredictScan, duck_threads: int, cores: int) -> Optional[int]:
    """Intra-op threads for a streaming PREDICT's session: the cores DuckDB's scan leaves idle.

    DuckDB scans a table in parallel by row group (:data:`ROW_GROUP_ROWS` rows), so an input of fewer
    row groups than DuckDB has threads keeps only that many threads calling the model. Each session
    then gets ``cores // callers`` threads instead of ``cores // duckdb_threads`` (None: that default):
    on two cores, a 100,000-row input ran the heavy benchmark model 1.66x faster.
    """
    rows = scan.estimated_rows
    if scan.options.batch_size or scan.options.backend != "onnxruntime" or scan.tvm is not None or rows is None:
        return None
    callers = max(1, min(duck_threads, -(-rows // ROW_GROUP_ROWS)))
    return max(1, cores // callers)


_TYPE_BYTES = {
    "BOOLEAN": 1, "TINYINT": 1, "UTINYINT": 1, "SMALLINT": 2, "USMALLINT": 2, "INTEGER": 4, "UINTEGER": 4,
    "FLOAT": 4, "REAL": 4, "DATE": 4, "BIGINT": 8, "UBIGINT": 8, "DOUBLE": 8, "TIMESTAMP": 8, "TIME": 8,
    "HUGEINT": 16, "UHUGEINT": 16, "UUID": 16, "INTERVAL": 16,
}


def arg_bytes(arg: InputArg, type_text: str) -> int:
    """Rough bytes per row of one PREDICT argument: its type's, or its input's per-row size (a list's is a guess)."""
    known = [d for d in arg.shape if d > 0]
    return max(type_bytes(type_text), type_bytes(ONNX_TO_DUCKDB.get(arg.elem_type, "FLOAT")) * math.prod(known))


def type_bytes(type_text: str) -> int:
    """Rough in-memory bytes per value of a DuckDB type (arrays multiply; text and lists are guesses)."""
    t = type_text.strip().upper()
    m = re.match(r"^(.*)\[(\d*)\]$", t)
    if m:
        inner = type_bytes(m.group(1))
        return inner * int(m.group(2)) if m.group(2) else 8 + inner * 16
    if t.startswith("DECIMAL"):
        return 16
    return _TYPE_BYTES.get(t, 32)
