"""Where stages train: worker processes on this machine (the default) or Ray tasks (``executor = 'ray'``,
:mod:`modelsql.tuning.ray_executor`).

A task is a pure function (:func:`run_task`): the factory, the study seed and thread count, the
stages' epochs and the parent checkpoint in; each stage's checkpoint and metrics out. The process
that owns the DuckDB connection submits tasks and writes every result (DuckDB has one writer per
file); workers never touch the catalog or the store.

Workers are processes, not threads: torch's RNGs and thread count are per process, and a stage is
bit-exact only when its process has exactly the state the stage restores (the recipe
measured when the stage tree was designed). Each is a fresh interpreter
(:mod:`modelsql.tuning.worker`; not a fork of a process holding DuckDB and ONNX Runtime threads,
nor a ``multiprocessing`` spawn, which re-imports the user's ``__main__``), kept for the next study
and stopped after :data:`IDLE_SECONDS` without a task. A worker runs in a session of its own, so a
terminal's Ctrl-C reaches the study's process alone (which stops the study); cancelling a running
task (:meth:`LocalExecutor.submit`'s future) interrupts it in its worker, as the Ray executor does.
"""

from __future__ import annotations

import atexit
import concurrent.futures as cf
import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, Callable, Optional

from modelsql.errors import OperationalError
from modelsql.tuning.stage_tree import EpochHP
from modelsql.tuning.messages import read_message, write_message

if TYPE_CHECKING:
    from modelsql.tuning.training import StageResult

__all__ = ["TaskSpec", "TaskOutcome", "run_task", "LocalExecutor", "local_executor", "IDLE_SECONDS"]

IDLE_SECONDS = 30.0
"""How long a worker process waits for the next task before it is stopped (a study's rounds follow each
other at once; a worker kept longer only holds memory and torch's threads)."""


@dataclass(frozen=True)
class TaskSpec:
    """What one task trains.

    Attributes:
        factory: ``package.module:function`` of the trainable.
        factory_params: sorted constant keyword arguments of the factory.
        seed: the study seed (every stage of a tree uses it: per-trial seeds would share nothing).
        threads: torch intra-op threads of the worker (part of the result: 1 and 2 threads differ).
        stages: ``(first_epoch, training hyper-parameters of each epoch)`` per stage, in order; each
            stage starts from the previous one's end, the first from the task's parent checkpoint.
        device: ``"cpu"`` or ``"cuda:N"``: where the worker trains (several workers share one GPU, each
            process with its own CUDA context).
    """

    factory: str
    factory_params: tuple[tuple[str, Any], ...]
    seed: int
    threads: int
    stages: tuple[tuple[int, tuple[EpochHP, ...]], ...]
    device: str = "cpu"


@dataclass(frozen=True)
class TaskOutcome:
    """What a task gave back: one :class:`~modelsql.tuning.training.StageResult` per stage trained, and the
    error that stopped it (``(class name, code, message)``), or None when every stage trained."""

    results: tuple
    error: Optional[tuple[str, str, str]] = None
    worker: str = ""


def run_task(spec: TaskSpec, data, parent: Optional[bytes], *,
             interrupted: Optional[Callable[[], bool]] = None) -> TaskOutcome:
    """Train ``spec``'s stages one after the other from ``parent`` (None: from scratch).

    A stage that raises ends the task: the stages before it are returned with the error, as plain
    values (exceptions with extra state do not always pickle back across processes). A KeyboardInterrupt
    is such an error too (a worker's task cancelled; a factory raising it), except when ``interrupted()``
    says it was a Ctrl-C in the study's own process (a task trained there: the study stops), when it is raised.
    """
    from modelsql.tuning.training import StageSpec, train_stage

    results: list[StageResult] = []
    state = parent
    for first, epochs in spec.stages:
        stage = StageSpec(spec.factory, spec.factory_params, epochs, first, spec.seed, spec.threads, spec.device)
        try:
            result = train_stage(stage, data, state)
        except BaseException as exc:  # noqa: BLE001 - reported to the study, which marks the trials failed
            if isinstance(exc, KeyboardInterrupt) and interrupted is not None and interrupted():
                raise
            exc_code = getattr(exc, "code", None)
            ours = isinstance(exc_code, str)  # a modelsql error: its code is registered
            code = exc_code if isinstance(exc_code, str) else "trial_failed"
            message = str(exc) if ours else "".join(traceback.format_exception_only(type(exc), exc)).strip()
            return TaskOutcome(tuple(results), (_pep249_class(exc), code, message), _worker_name())
        results.append(result)
        state = result.checkpoint
    return TaskOutcome(tuple(results), None, _worker_name())


def _pep249_class(exc: BaseException) -> str:
    """The name of the PEP 249 class (in :mod:`modelsql.errors`) ``exc`` is, or its own class name."""
    for cls in type(exc).__mro__:
        if cls.__module__ == "modelsql.errors":
            return cls.__name__
    return type(exc).__name__


def _worker_name() -> str:
    return f"local:{os.getpid()}"


class _Worker:
    """One worker process (``python -m modelsql.tuning.worker``) and the data key it holds."""

    def __init__(self, env: tuple) -> None:
        # A session of its own: a terminal's Ctrl-C goes to the foreground process group, and a worker in it
        # would die with its own traceback (idle) or fail its task, instead of the study stopping it.
        self.proc = subprocess.Popen([sys.executable, "-m", "modelsql.tuning.worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=worker_env(env[1]), start_new_session=True)
        assert self.proc.stdin is not None and self.proc.stdout is not None  # both are pipes
        self.stdin: IO[bytes] = self.proc.stdin
        self.stdout: IO[bytes] = self.proc.stdout
        self.env = env
        self.data_key: Optional[str] = None

    def call(self, key: str, data, spec: TaskSpec, parent: Optional[bytes]) -> TaskOutcome:
        if self.data_key != key:
            write_message(self.stdin, ("data", key, data))
            self.data_key = key
        write_message(self.stdin, ("task", key, spec, parent))
        outcome = read_message(self.stdout)
        if outcome is None:
            raise OperationalError(f"the training worker process {self.proc.pid} died "
                                   f"(exit status {self.proc.wait()})", code="worker_died")
        return outcome

    def interrupt(self) -> None:
        """Stop the task it is training (the worker answers it as failed and waits for the next one)."""
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):
                os.kill(self.proc.pid, signal.SIGINT)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        if self.proc.poll() is None:
            self.proc.kill()


def worker_env(path: tuple[str, ...]) -> dict:
    """The worker's environment: this process's, with its ``sys.path`` (so the factory imports the same) and
    ``CUBLAS_WORKSPACE_CONFIG`` (deterministic cuBLAS; it must be set before the worker first uses CUDA, and
    changes nothing on the CPU) unless already set."""
    from modelsql.tuning.training import CUBLAS_WORKSPACE

    env = dict(os.environ)
    env.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join([root, *path, env.get("PYTHONPATH", "")]).strip(os.pathsep)
    return env


class _TaskFuture(cf.Future):
    """A task's future whose :meth:`cancel` also interrupts the task when a worker is training it (its
    result, if one still comes, lands on a future nobody reads)."""

    worker: Optional[_Worker] = None
    interrupted = False

    def cancel(self) -> bool:
        if super().cancel():
            return True
        worker = self.worker
        if worker is not None and not self.done():
            self.interrupted = True
            worker.interrupt()
        return False


class LocalExecutor:
    """``workers`` worker processes on this machine that run :func:`run_task`, one task each at a time.

    Args:
        workers: how many stages train at once.
    """

    name = "local"

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._queue: queue.Queue = queue.Queue()
        self._threads = [threading.Thread(target=self._serve, daemon=True, name=f"modelsql-worker-{i}")
                         for i in range(workers)]
        for thread in self._threads:
            thread.start()

    def _serve(self) -> None:
        worker: Optional[_Worker] = None
        while True:
            try:
                item = self._queue.get(timeout=IDLE_SECONDS if worker is not None else None)
            except queue.Empty:  # idle: stop the process; the next task starts a fresh one
                assert worker is not None  # without a worker the get has no timeout
                worker.close()
                worker = None
                continue
            if item is None:
                break
            future, env, args = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                if worker is not None and (worker.env != env or worker.proc.poll() is not None):
                    worker.close()  # another factory version or import path: a fresh interpreter imports it anew
                    worker = None
                worker = worker or _Worker(env)
                future.worker = worker
                try:
                    outcome = worker.call(*args)
                finally:
                    future.worker = None
                if future.interrupted:  # stopped part-way: the next task gets an interpreter in a known state
                    worker.close()
                    worker = None
                future.set_result(outcome)
            except BaseException as exc:  # noqa: BLE001 - the future carries it to the study
                if worker is not None:
                    worker.close()
                worker = None
                future.set_exception(exc)
        if worker is not None:
            worker.close()

    def submit(self, spec: TaskSpec, data, parent: Optional[bytes]) -> cf.Future:
        """Queue one task; the future gives its :class:`TaskOutcome`. ``data`` is what :meth:`put_data` gave."""
        future = _TaskFuture()
        key, arrays, env = data
        self._queue.put((future, env, (key, arrays, spec, parent)))
        return future

    def put_data(self, data, code_digest: str = ""):
        """The handle tasks receive for the training data: (a key, the arrays, the worker environment). The
        arrays are sent once to each worker; a worker started for another ``code_digest`` (the trainable's
        source) or another ``sys.path`` is replaced, so a changed factory is never run from a stale import."""
        env = (code_digest, tuple(p or os.getcwd() for p in sys.path))
        return (f"{id(data)}:{os.getpid()}:{time.monotonic_ns()}", data, env)

    def close(self) -> None:
        """Stop the worker processes (a task still running finishes first)."""
        for _ in self._threads:
            self._queue.put(None)


_POOLS: dict[int, LocalExecutor] = {}
_LOCK = threading.Lock()


def local_executor(workers: int) -> LocalExecutor:
    """The process's pool of ``workers`` processes, started on first use and kept for the next study
    (spawning a worker imports torch: seconds)."""
    with _LOCK:
        pool = _POOLS.get(workers)
        if pool is None:
            pool = _POOLS[workers] = LocalExecutor(workers)
        return pool


@atexit.register
def _close_pools() -> None:
    for pool in list(_POOLS.values()):
        pool.close()
