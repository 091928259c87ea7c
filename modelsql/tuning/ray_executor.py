"""Stages as Ray tasks: ``TUNE ... WITH (executor = 'ray' [, address = '...'], workers = W)``.

The same contract as :class:`~modelsql.tuning.executor.LocalExecutor`: a task is
:func:`~modelsql.tuning.executor.run_task` (a pure function), here run as a Ray remote function that
asks for ``spec.threads`` CPUs. The study's :class:`~modelsql.tuning.training.TrainData` goes into
Ray's object store once (:meth:`RayExecutor.put_data`); the parent checkpoint's bytes go in as a task
argument, and the task returns its :class:`~modelsql.tuning.executor.TaskOutcome`, each stage's
checkpoint bytes in it, through the object store. The process that owns the DuckDB connection stays
the only writer of the catalog and the blob store: tasks never touch either.

Bit-exactness is the local executor's: the same ``run_task``, the same thread count per stage
(``train_stage`` sets torch's threads from the spec, whatever ``OMP_NUM_THREADS`` Ray gives its
workers), and a reused Ray worker carries no state into a stage, which restores or seeds all of it.
As a local worker is replaced when the trainable's source or ``sys.path`` changes, a study's tasks
carry a runtime environment naming both (an environment variable with the trainable's code digest;
on a local Ray, ``PYTHONPATH`` as this process's ``sys.path``): Ray keeps a pool of workers per
runtime environment, so a changed factory never runs from a worker's stale import.

Ray is optional (``pip install 'modelsql[ray]'``) and imported on first use. Without ``address``
the process starts one local Ray (``ray.init``, about 5 to 12 s, measured on a
2-core machine) and keeps it for the next study; with one
it connects to that cluster, whose nodes need modelsql, torch and the trainable's module importable.
A Ray the caller already initialized is used as it is.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import logging
import os
import sys
import threading
import warnings
from typing import Any, Optional

from modelsql.errors import NotSupportedError
from modelsql.tuning.executor import TaskOutcome, TaskSpec, run_task, worker_env

__all__ = ["RayExecutor", "ray_executor"]

_LOCK = threading.Lock()
_STARTED: Optional[tuple[str, int]] = None  # (GCS address, CPUs) of the last local Ray this process started
_REMOTE: Any = None                # the remote function, made once per process


def _import_ray():
    try:
        import ray
    except ImportError as exc:
        raise NotSupportedError("executor = 'ray' needs Ray, which is not installed: pip install 'modelsql[ray]'",
                                code="ray_not_installed") from exc
    return ray


def _local_cpus(ray) -> Optional[int]:
    """The CPUs of the Ray this process is connected to when this module started it, else None."""
    if _STARTED is None or not ray.is_initialized() or ray.get_runtime_context().gcs_address != _STARTED[0]:
        return None
    return _STARTED[1]


def _ray_task(spec: TaskSpec, data, parent: Optional[bytes]) -> TaskOutcome:
    """Runs in a Ray worker: :func:`run_task`, its outcome naming the worker ``ray:<node ip>:<pid>``."""
    import ray

    with warnings.catch_warnings():
        # as in modelsql.tuning.worker; e.g. torch warns that the object store's arrays are read-only
        warnings.simplefilter("ignore")
        outcome = run_task(spec, data, parent)
    return dataclasses.replace(outcome, worker=f"ray:{ray.util.get_node_ip_address()}:{os.getpid()}")


def _start(ray, workers: int, threads: Optional[int], address: Optional[str]) -> None:
    """Start (no address) or join (an address) Ray, once per process; keep a running one."""
    global _STARTED, _REMOTE
    with _LOCK:
        if not ray.is_initialized():
            quiet = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
            if address is None:
                # explicit, so that Ray neither enables token auth by default (writing ~/.ray/auth_token) nor
                # warns about it; a value the user set wins
                os.environ.setdefault("RAY_AUTH_MODE", "disabled")
                cpus = workers * threads if threads else (os.cpu_count() or workers)
                ray.init(num_cpus=cpus, **quiet)
                _STARTED = (ray.get_runtime_context().gcs_address, cpus)
            else:
                ray.init(address=address, **quiet)
        if _REMOTE is None:
            # a worker that dies (OOM, a crash in native code) is retried once: a stage is a pure function
            _REMOTE = ray.remote(max_retries=1)(_ray_task)


class RayExecutor:
    """Runs :func:`~modelsql.tuning.executor.run_task` as Ray tasks, at most ``workers`` at once (the study
    submits no more).

    Args:
        workers: how many stages train at once.
        address: a Ray cluster to connect to; None starts a local Ray.
        threads: the study's torch threads per stage, for the size of a local Ray (None: all CPUs).
    """

    name = "ray"

    def __init__(self, workers: int, address: Optional[str] = None, threads: Optional[int] = None) -> None:
        self._ray = _import_ray()
        self.workers = workers
        self.address = address
        _start(self._ray, workers, threads, address)

    def put_data(self, data, code_digest: str = "") -> tuple:
        """The handle tasks get: the training data's ObjectRef (put in Ray's object store once per study) and the
        tasks' runtime environment, for ``code_digest`` (the trainable's source) and this process's ``sys.path``."""
        env_vars = {"MODELSQL_TRAINABLE_DIGEST": code_digest or "-"}
        if _local_cpus(self._ray) is not None:  # a Ray this process started: its workers import as this one
            env_vars["PYTHONPATH"] = worker_env(tuple(p or os.getcwd() for p in sys.path))["PYTHONPATH"]
        return self._ray.put(data), {"env_vars": env_vars}

    def submit(self, spec: TaskSpec, data_handle: tuple, parent: Optional[bytes]) -> cf.Future:
        """Start one task; the future gives its :class:`~modelsql.tuning.executor.TaskOutcome`, or raises
        Ray's error when the worker died. ``data_handle`` is what :meth:`put_data` gave."""
        ref, runtime_env = data_handle
        local = _local_cpus(self._ray)
        cpus = spec.threads if local is None else min(spec.threads, local)  # never unschedulable here
        task = _REMOTE.options(num_cpus=cpus, runtime_env=runtime_env).remote(spec, ref, parent)
        return _RayFuture(self._ray, task)

    def close(self) -> None:
        """Nothing to stop: Ray stays up for the next study (``ray.shutdown()`` ends it; Ray also does at exit)."""


class _RayFuture(cf.Future):
    """``ref.future()``, except that cancelling also cancels the Ray task (a queued one never starts, a running
    one is interrupted and its result dropped) and a late result does not land on the cancelled future."""

    def __init__(self, ray, ref) -> None:
        super().__init__()
        self._ray_module, self.object_ref = ray, ref
        ref.future().add_done_callback(self._copy)

    def _copy(self, inner: cf.Future) -> None:
        if not self.set_running_or_notify_cancel():
            return
        exc = inner.exception()
        if exc is None:
            self.set_result(inner.result())
        else:
            self.set_exception(exc)

    def cancel(self) -> bool:
        if not super().cancel():
            return False
        try:
            self._ray_module.cancel(self.object_ref)
        except Exception:  # noqa: BLE001 - already finished, or Ray is going down
            pass
        return True


def ray_executor(workers: int, address: Optional[str], threads: Optional[int] = None) -> RayExecutor:
    """A :class:`RayExecutor` of ``workers`` concurrent tasks on the Ray at ``address`` (None: a local Ray,
    started on first use and kept for the next study).

    Raises:
        NotSupportedError: ``ray_not_installed`` when Ray is not installed.
    """
    return RayExecutor(workers, address, threads)
