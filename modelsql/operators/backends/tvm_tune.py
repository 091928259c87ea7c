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
than its 30 s timeout, so every build fails (../shared/research/merge-tvm-costmodel-measurements.md,
section 0.4). Here candidates are built in this process (:class:`_InProcessBuilder`, 0.04 s each);
they still run in MetaSchedule's ``LocalRunner`` worker (a separate process, so a bad candidate
cannot take this one down). ``tensor_intrin`` is also imported by ``TuneContext`` itself; of its
53-69 s, 35 s are CUDA intrinsics: :func:`_cpu_intrinsics_only` imports just this CPU's.

Resume: MetaSchedule itself re-runs every trial when called again with the same database (measured:
a second 16-trial call added 16 more records). :func:`tune` counts the valid records each task
already has in ``work_dir`` and tunes only what is missing; the evolutionary search then starts from
the database's best records (its ``init_measured_ratio``) and skips schedules already measured.

Cost: ~2 s per trial on 2 cores; untuned TVM is 50-200x slower than ONNX Runtime and minutes of
tuning still left it 3-5x slower on CPU (same measurements, Q1), so tuning is an explicit offline step.
"""

from __future__ import annotations

import importlib
import logging
import math
import os
import platform
import sys
import types
import warnings
from typing import Callable, Optional

from ...errors import NotSupportedError
from . import tvm as tvm_backend

__all__ = ["unavailable_reason", "tune", "records_in"]

_RUNNER_TIMEOUT_S = 120.0
"""Seconds one candidate may take in the runner worker (its first task includes starting the worker)."""


def unavailable_reason() -> Optional[str]:
    """None when tuning can run, else one sentence: TVM unusable (:func:`.tvm.unavailable_reason`) or no
    xgboost (MetaSchedule's default cost model, an XGBoost ranker)."""
    reason = tvm_backend.unavailable_reason()
    if reason is not None:
        return reason
    if importlib.util.find_spec("xgboost") is None:
        return "MetaSchedule's cost model needs xgboost, which is not installed: install modelsql[tvm]."
    return None


def tune(model_bytes: bytes, *, target: dict, batch_size: int, trials: int, work_dir: str,
         progress: Optional[Callable[[int, int], None]] = None, seed: Optional[int] = None) -> bytes:
    """Tune an ONNX model for one batch size with MetaSchedule; the tuned library's bytes.

    Args:
        model_bytes: a serialized, self-contained ONNX ModelProto.
        target: a TVM target as a dict (:func:`.tvm.cpu_target`).
        batch_size: rows per run; the library has this fixed batch (load it with
            ``Signature.from_onnx(model_bytes, batch_size)``).
        trials: measured schedules in all, split evenly over the tuning tasks (fused operators),
            at least one each; records already in ``work_dir`` count.
        work_dir: folder of the JSON database (``database_workload.json``,
            ``database_tuning_record.json``) and MetaSchedule's logs (``logs/``); created if missing.
            Use one folder per (model, batch size, target): a second call resumes from it.
        progress: called as ``progress(trials done, trials in all)`` after each measured batch of
            candidates (done includes the trials reused from ``work_dir``).
        seed: seed of the search (None: random).

    Returns:
        ``export_library`` bytes (see :func:`.tvm.compile_onnx`); functions without a tuning record
        keep TVM's default lowering.

    Raises:
        NotSupportedError: TVM or xgboost unusable (``"tvm_unavailable"``); TVM cannot import or
            compile the model (``"tvm_import_failed"``); ``fixed_batch`` as in :func:`.tvm.bind_batch`.
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
    _quiet_console()
    tasks = ms.relax_integration.extract_tasks(_fused(mod, tvm_target), tvm_target)
    database = ms.database.JSONDatabase(work_dir=work_dir, module_equality="structural")
    if tasks:
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
    """Run the trials each task still lacks (``ceil(trials / tasks)`` each, less its records)."""
    import tvm.s_tir.meta_schedule as ms

    per_task = max(1, math.ceil(trials / len(tasks)))
    done = [min(per_task, _valid_records(database, t.dispatched[0])) for t in tasks]
    missing = [(t, per_task - d) for t, d in zip(tasks, done) if d < per_task]
    total = per_task * len(tasks)
    if progress is not None:
        progress(sum(done), total)
    if not missing:
        return
    contexts, weights = ms.relax_integration.extracted_tasks_to_tune_contexts(
        [t for t, _ in missing], work_dir, seed=seed)
    most = max(m for _, m in missing)
    callbacks = list(ms.MeasureCallback.create("default"))
    if progress is not None:
        callbacks.append(_Progress(progress, sum(done), total))
    ms.tune_tasks(
        tasks=contexts, task_weights=weights, work_dir=work_dir,
        max_trials_global=sum(m for _, m in missing), max_trials_per_task=most,
        num_trials_per_iter=min(64, most), builder=_InProcessBuilder(),
        runner=ms.runner.LocalRunner(timeout_sec=_RUNNER_TIMEOUT_S), database=database,
        cost_model="xgb", measure_callbacks=callbacks)


def _valid_records(database, task_mod) -> int:
    if not database.has_workload(task_mod):
        return 0
    return len(database.get_top_k(database.commit_workload(task_mod), 1 << 30))


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


def _quiet_console() -> None:
    """Keep MetaSchedule's per-iteration tables off stdout (they still go to ``work_dir/logs``).

    Its loggers' console handler takes the level of the ``tvm.s_tir.meta_schedule`` logger, DEBUG when
    unset; set to WARNING here unless the application configured it.
    """
    logger = logging.getLogger("tvm.s_tir.meta_schedule")
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.WARNING)


def _progress_callback_class():
    import tvm.s_tir.meta_schedule as ms
    from tvm.ir.utils import derived_object

    @derived_object
    class Progress(ms.measure_callback.PyMeasureCallback):
        """Calls ``progress(done, total)`` after each measured batch of candidates."""

        def __init__(self, report: Callable[[int, int], None], done: int, total: int) -> None:
            super().__init__()
            self.report, self.done, self.total = report, done, total

        def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results) -> None:
            self.done += len(measure_candidates)
            self.report(min(self.done, self.total), self.total)

    return Progress


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


def _Progress(report: Callable[[int, int], None], done: int, total: int):
    """A new progress measure callback."""
    return _progress_callback_class()(report, done, total)
