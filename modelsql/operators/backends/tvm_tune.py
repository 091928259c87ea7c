"""Tuning a TVM-compiled model with MetaSchedule, resumable from a JSON database in a work folder.

The path (apache-tvm 0.27; ``tvm.s_tir.meta_schedule``, ``ms`` below)::

    mod = import_onnx(bind_batch(model, batch_size))            # static shapes: tuning needs them
    fused = LegalizeOps, AnnotateTIROpPattern, FoldConstant, FuseOps, FuseTIR   (under the target)
    tasks = ms.relax_integration.extract_tasks(fused, target)   # one per fused TIR function
    ms.tune_tasks(tasks, ..., database=JSONDatabase(work_dir), builder=<in-process>)
    ex = ms.relax_integration.compile_relax(database, mod, target, None)   # MetaScheduleApplyDatabase
    ex.export_library(path)

The static-shape pipeline (``relax.pipeline.static_shape_tuning_pipeline``, the
``MetaScheduleTuneIRMod`` pass) is not used: it always builds with ``LocalBuilder``, whose fresh
worker processes each import ``tvm.s_tir.tensor_intrin`` (~40-70 s on a 2-core machine), longer
than its 30 s timeout, so every build fails (measured when
the TVM backend was built). Here candidates are built in this process (:class:`_InProcessBuilder`, 0.04 s each);
they still run in MetaSchedule's ``LocalRunner`` worker (a separate process, so a bad candidate
cannot take this one down). ``tensor_intrin`` is also imported by ``TuneContext`` itself; of its
53-69 s, 35 s are CUDA intrinsics: :func:`_cpu_intrinsics_only` imports just this CPU's.

Resume: MetaSchedule itself re-runs every trial when called again with the same database (measured:
a second 16-trial call added 16 more records). :func:`tune` gives each task (fused operator) an
even share of the trials and counts what it already had: its valid records in the database, or the
share an earlier call gave it (``work_dir/modelsql_trials.json``: a task whose search space ran out
early, or whose candidates failed, is not searched again). Only the missing trials run; the
evolutionary search then starts from the database's best records (its ``init_measured_ratio``).

Cost: ~2 s per trial on 2 cores; untuned TVM is 50-200x slower than ONNX Runtime and minutes of
tuning still left it 3-5x slower on CPU (same measurements, Q1), so tuning is an explicit offline step.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import logging
import math
import os
import platform
import sys
import threading
import types
import warnings
from typing import Callable, Optional

from modelsql.errors import NotSupportedError
from modelsql.operators.backends import tvm as tvm_backend

__all__ = ["unavailable_reason", "tune", "records_in"]

_XGB_WARMUP = 100
"""Measurements MetaSchedule's XGBoost cost model needs before it ranks candidates (its default)."""

_TUNING = threading.Lock()
"""One tuning at a time per process: MetaSchedule re-configures process-wide loggers for each."""

_RUNNER_TIMEOUT_S = 120.0
"""Seconds one candidate may take in the runner worker (its first task includes starting the worker)."""


_NEEDED = (("xgboost", "xgboost-cpu", "MetaSchedule's cost model, an XGBoost ranker"),
           ("psutil", "psutil", "MetaSchedule's search counts the cores with it"),
           ("cloudpickle", "cloudpickle", "MetaSchedule's runner worker process receives its work pickled with it"))
"""(module, distribution, why) of each package tuning imports beyond TVM: all in the ``modelsql[tvm]`` extra."""


def unavailable_reason() -> Optional[str]:
    """None when tuning can run, else one sentence: TVM unusable (:func:`.tvm.unavailable_reason`) or a package
    of :data:`_NEEDED` missing, named with the extra that installs it."""
    reason = tvm_backend.unavailable_reason()
    if reason is not None:
        return reason
    for module, dist, why in _NEEDED:
        if importlib.util.find_spec(module) is None:
            return (f"Tuning with MetaSchedule needs {dist} ({why}), which is not installed: "
                    f"pip install 'modelsql[tvm]' (or pip install {dist}).")
    return None


def tune(model_bytes: bytes, *, target: dict, batch_size: int, trials: int, work_dir: str,
         progress: Optional[Callable[[int, int], None]] = None, seed: Optional[int] = None) -> bytes:
    """Tune an ONNX model for one batch size with MetaSchedule; the tuned library's bytes.

    Args:
        model_bytes: a serialized, self-contained ONNX ModelProto.
        target: a TVM target as a dict (:func:`.tvm.cpu_target`).
        batch_size: rows per run; the library has this fixed batch (load it with
            ``Signature.from_onnx(model_bytes, batch_size)``).
        trials: measured schedules in all, split evenly over the tuning tasks (fused operators):
            ``ceil(trials / tasks)`` each; trials already in ``work_dir`` count. 0: no tuning, just
            apply what ``work_dir`` holds.
        work_dir: folder of the JSON database (``database_workload.json``,
            ``database_tuning_record.json``), the trials given per task (``modelsql_trials.json``) and
            MetaSchedule's logs (``logs/``); created if missing.
            Use one folder per (model, batch size, target): a second call resumes from it.
        progress: called as ``progress(trials done, trials in all)`` first and after each measured batch
            of candidates; done includes the trials reused from ``work_dir``, and the unused share of
            a task whose search space ran out. "In all" is the per-task share times the tasks.
        seed: seed of the search (None: random).

    Returns:
        ``export_library`` bytes (see :func:`.tvm.compile_onnx`); functions without a tuning record
        keep TVM's default lowering.

    Raises:
        NotSupportedError: TVM unusable or a package tuning needs missing (``"tvm_unavailable"``, naming the
            package and the ``modelsql[tvm]`` extra: :func:`unavailable_reason`); TVM cannot import or
            compile the model (``"tvm_import_failed"``); MetaSchedule failed (``"tvm_tune_failed"``);
            ``fixed_batch`` as in :func:`.tvm.bind_batch`.

    Candidates are timed by MetaSchedule's ``LocalRunner`` (its default: the mean of one repeat of at
    least 100 ms)
    in a worker process whose TVM thread pool has ``TVM_NUM_THREADS`` threads (all cores unless set,
    see :mod:`.tvm`); ``target["num-cores"]`` is what the schedules parallelize for. Calls in one
    process run one at a time.
        DataError: not an ONNX model (``"invalid_onnx"``).
    """
    reason = unavailable_reason()
    if reason is not None:
        raise NotSupportedError(reason, code="tvm_unavailable")
    tvm = tvm_backend.load_tvm()
    import tvm.s_tir.meta_schedule as ms

    mod = tvm_backend.import_onnx(tvm_backend.bind_batch(tvm_backend.parse_onnx(model_bytes), batch_size))
    tvm_target = tvm.target.Target(target)
    os.makedirs(work_dir, exist_ok=True)
    _cpu_intrinsics_only()
    tasks = ms.relax_integration.extract_tasks(_fused(mod, tvm_target), tvm_target)
    database = ms.database.JSONDatabase(work_dir=work_dir, module_equality="structural")
    if tasks and trials > 0:
        with _TUNING, _quiet_logs():
            _tune_missing(tasks, database, trials, work_dir, progress, seed)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            executable = ms.relax_integration.compile_relax(database, mod, tvm_target, None)
    except Exception as exc:  # TVM raises TVMError subclasses and Python built-ins alike
        raise NotSupportedError(f"TVM cannot compile the tuned model: {tvm_backend.error_text(exc)}",
                                code="tvm_import_failed") from exc
    return tvm_backend.export_library(executable)


def records_in(work_dir: str) -> int:
    """The number of tuning records in ``work_dir``'s JSON database (0 when there is none)."""
    if not os.path.exists(os.path.join(work_dir, "database_tuning_record.json")):
        return 0
    tvm_backend.load_tvm()
    import tvm.s_tir.meta_schedule as ms

    return len(ms.database.JSONDatabase(work_dir=work_dir, module_equality="structural").get_all_tuning_records())


def _tune_missing(tasks: list, database, trials: int, work_dir: str,
                  progress: Optional[Callable[[int, int], None]], seed: Optional[int]) -> None:
    """Give each task the trials it still lacks of ``ceil(trials / tasks)``, one task at a time.

    A task's trials so far are the larger of its valid records in ``database`` and the budget an
    earlier call already gave it (:class:`_Ledger`: a task whose search space ran out before its
    budget, or whose candidates failed, is not searched again). Tasks are tuned one by one (one
    ``tune_tasks`` call each, sharing the builder, runner worker and cost model), so each gets
    exactly its share, which MetaSchedule's gradient scheduler over all of them does not guarantee.
    """
    import tvm.s_tir.meta_schedule as ms
    import tvm_ffi

    ledger = _Ledger(work_dir)
    per_task = max(1, math.ceil(trials / len(tasks)))
    keys = [str(tvm_ffi.structural_hash(t.dispatched[0])) for t in tasks]  # the database's own key
    done = [min(per_task, max(ledger.given(k), _valid_records(database, t.dispatched[0]))) for t, k in zip(tasks, keys)]
    counter = _Progress(progress, sum(done), per_task * len(tasks))
    counter.report()
    todo = [i for i, d in enumerate(done) if d < per_task]
    if not todo:
        return
    try:
        contexts, weights = ms.relax_integration.extracted_tasks_to_tune_contexts(
            [tasks[i] for i in todo], work_dir, seed=seed)
    except Exception as exc:  # TVM turns a Python error in its callbacks into a RuntimeError
        raise NotSupportedError(f"MetaSchedule cannot set up its tuning tasks: {tvm_backend.error_text(exc)}",
                                code="tvm_tune_failed") from exc
    shared = dict(builder=_InProcessBuilder(), runner=ms.runner.LocalRunner(timeout_sec=_RUNNER_TIMEOUT_S),
                  cost_model=_cost_model(sum(per_task - done[i] for i in todo), contexts[0].num_threads))
    for i, context, weight in zip(todo, contexts, weights):
        missing = per_task - done[i]
        try:
            ms.tune_tasks(tasks=[context], task_weights=[weight], work_dir=work_dir, max_trials_global=missing,
                          max_trials_per_task=missing, num_trials_per_iter=min(64, missing), database=database,
                          measure_callbacks=[*ms.MeasureCallback.create("default"), counter.callback()], **shared)
        except Exception as exc:  # records measured so far stay in the database: a new call resumes
            raise NotSupportedError(f"MetaSchedule failed tuning {context.task_name}: {tvm_backend.error_text(exc)}",
                                    code="tvm_tune_failed") from exc
        counter.finish_task(missing)  # also when its search space ran out first
        ledger.give(keys[i], per_task)


def _cost_model(trials: int, cores: int):
    """MetaSchedule's XGBoost cost model, or its random one when XGBoost would never be consulted.

    ``XGBModel.predict`` returns uniform random scores until it holds ``num_warmup_samples`` (100)
    measurements, and it starts empty each call; with at most 100 trials to run it is trained after
    every round (~6 s each on 2 cores) and never used, so the random model searches the same way.
    """
    import tvm.s_tir.meta_schedule as ms

    if trials <= _XGB_WARMUP:
        return ms.CostModel.create("random")
    return ms.CostModel.create("xgb", num_tuning_cores=cores, tree_method="auto", num_warmup_samples=_XGB_WARMUP)


def _valid_records(database, task_mod) -> int:
    if not database.has_workload(task_mod):
        return 0
    return len(database.get_top_k(database.commit_workload(task_mod), 1 << 30))


class _Ledger:
    """``work_dir/modelsql_trials.json``: task -> trials given so far.

    A task is keyed by the structural hash of its TIR function, the key MetaSchedule's JSON database
    stores for a workload (stable across processes).
    """

    def __init__(self, work_dir: str) -> None:
        self.path = os.path.join(work_dir, "modelsql_trials.json")
        try:
            with open(self.path) as f:
                self.entries = dict(json.load(f))
        except (OSError, ValueError):
            self.entries = {}

    def given(self, key: str) -> int:
        return int(self.entries.get(key, 0))

    def give(self, key: str, trials: int) -> None:
        self.entries[key] = max(trials, self.given(key))
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.entries, f)
        os.replace(tmp, self.path)


class _Progress:
    """Counts measured candidates over all tasks and reports ``(done, total)``."""

    def __init__(self, report: Optional[Callable[[int, int], None]], done: int, total: int) -> None:
        self.report_to, self.done, self.total, self.task_start = report, done, total, done

    def report(self) -> None:
        if self.report_to is not None:
            self.report_to(min(self.done, self.total), self.total)

    def measured(self, count: int) -> None:
        self.done += count
        self.report()

    def finish_task(self, budget: int) -> None:
        """End of a task given ``budget`` trials: what its search did not use counts as done."""
        if self.done < self.task_start + budget:
            self.done = self.task_start + budget
            self.report()
        self.task_start = self.done

    def callback(self):
        """A MetaSchedule measure callback calling :meth:`measured` after each measured batch."""
        return _measure_callback_class()(self.measured)


def _fused(mod, target):
    """``mod`` lowered as ``compile_relax`` lowers it before applying the database, so task keys match."""
    import tvm
    from tvm import relax
    from tvm.relax import pipeline

    try:
        dispatch = list(pipeline.library_dispatch_passes(target))
    except (ValueError, AttributeError):  # as compile_relax: targets without a registered pipeline
        dispatch = []
    passes = [*dispatch, relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(),
              relax.transform.FoldConstant(), relax.transform.FuseOps(), relax.transform.FuseTIR()]
    try:
        with target:
            return tvm.transform.Sequential(passes)(mod)
    except Exception as exc:
        raise NotSupportedError(f"TVM cannot lower the model for tuning: {tvm_backend.error_text(exc)}",
                                code="tvm_import_failed") from exc


def _cpu_intrinsics_only() -> None:
    """Register only this CPU's tensor intrinsics before MetaSchedule imports ``tvm.s_tir.tensor_intrin``.

    The package ``__init__`` imports CUDA (35 s on 2 cores), ROCm (7 s), Hexagon (3 s), Arm (4 s) and
    x86 (0.6 s) intrinsics, all TVMScript parsed at import. If it was not imported yet, an empty package
    module (with the real ``__path__``, so ``tensor_intrin.cuda`` etc. still import on request) takes
    its place and just the host's module is imported: ``x86`` (VNNI / AVX-512 dot products the x86
    schedule rules use), ``arm_cpu`` or ``riscv_cpu``.
    """
    name = "tvm.s_tir.tensor_intrin"
    if name in sys.modules:
        return
    import tvm.s_tir

    package = types.ModuleType(name, "Tensor intrinsics (only the host CPU's, see modelsql's tvm_tune).")
    package.__path__ = [os.path.join(os.path.dirname(tvm.s_tir.__file__), "tensor_intrin")]
    package.__package__ = name
    sys.modules[name] = package
    tvm.s_tir.tensor_intrin = package
    machine = platform.machine().lower()
    host = "x86" if machine in ("x86_64", "amd64", "i686") else "arm_cpu" if machine.startswith(("arm", "aarch")) \
        else "riscv_cpu" if machine.startswith("riscv") else None
    if host is not None:
        importlib.import_module(f"{name}.{host}")


@contextlib.contextmanager
def _quiet_logs():
    """Keep MetaSchedule's per-iteration tables off stdout while tuning (they still go to ``work_dir/logs``).

    Each ``tune_tasks`` call re-configures the ``tvm.s_tir.meta_schedule`` logger (``logging.config.
    dictConfig``): its console handler takes that logger's level, DEBUG when unset. Unless the
    application set a level, it is WARNING during tuning and unset again after. Handlers without a
    name are removed first: TVM formats every handler name of that logger (``create_loggers``) and
    raises on None (pytest's log capture adds such handlers), and its dictConfig replaces them anyway.
    """
    logger = logging.getLogger("tvm.s_tir.meta_schedule")
    for handler in [h for h in logger.handlers if h.get_name() is None]:
        logger.removeHandler(handler)
    unset = logger.level == logging.NOTSET
    if unset:
        logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        if unset:
            logger.setLevel(logging.NOTSET)


@functools.lru_cache(maxsize=None)
def _measure_callback_class():
    import tvm.s_tir.meta_schedule as ms
    from tvm.ir.utils import derived_object

    @derived_object
    class Measured(ms.measure_callback.PyMeasureCallback):
        """Calls ``count(number of candidates)`` after each measured batch of candidates."""

        def __init__(self, count: Callable[[int], None]) -> None:
            super().__init__()
            self.count = count

        def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results) -> None:
            self.count(len(measure_candidates))

    return Measured


@functools.lru_cache(maxsize=None)
def _builder_class():
    import tvm
    import tvm.s_tir.meta_schedule as ms
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.builder.local_builder import default_export
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    @derived_object
    class InProcessBuilder(ms.builder.PyBuilder):
        """Builds candidates in this process: ``LocalBuilder``'s ``default_build`` without its worker.

        Returns ``tvm.tirx.build`` modules (what the deprecated ``tvm.driver.build`` calls) exported as
        tar files (``default_export``), which the runner loads; a ``tvm.compile`` result fails in
        ``export_library`` (measured, see the module docstring's source).
        """

        def build(self, build_inputs):
            results = []
            for item in build_inputs:
                try:
                    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(item.mod)
                    path = default_export(tvm.tirx.build(mod, item.target))
                    results.append(ms.builder.BuilderResult(path, None))
                except Exception as exc:  # a failed candidate is recorded as such, tuning goes on
                    results.append(ms.builder.BuilderResult(None, f"in-process build failed: {exc}"))
            return results

    return InProcessBuilder


def _InProcessBuilder():
    """A new in-process MetaSchedule builder (the class is made on first use: it needs tvm)."""
    return _builder_class()()
