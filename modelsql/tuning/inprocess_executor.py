"""Stages trained in the study's own process: what ``executor = 'local'`` does with one worker on the CPU (the
default: ``workers = 1``).

A worker interpreter costs its start, importing torch (about 1.5 s on a 2-core machine, more than a small study's
training), and each stage's checkpoint crosses a pipe twice; Optuna and a hand-written loop pay neither, training
in the caller's process. Training here is as bit-exact as in a worker: :func:`~modelsql.tuning.training.train_stage`
sets the thread count and every seed, or restores them from the parent checkpoint, trains from torch's defaults
whatever the caller set, and gives the caller back what it changed (so the results equal a worker's, bit for bit,
and the trees mix the two freely). A task trains here only when

* no other stage is training in this process (torch's RNGs and thread count are per process: a second study
  running in another thread at the same time sends its tasks to worker processes);
* the factory's code this process has imported is what its file holds now
  (:func:`~modelsql.tuning.factories.loaded_is_current`; a worker imports the edited file anew);

otherwise it goes to the :class:`~modelsql.tuning.executor.LocalExecutor`'s worker processes, as every task does
with several workers, on CUDA (deterministic cuBLAS must be configured before a process's first cuBLAS call), or
with ``executor = 'processes'`` (which also keeps a trainable that crashes its interpreter, a segfault in an
extension, from taking the study's process with it).

Ctrl-C while a stage trains here stops the study, as it does when a worker trains it: in the main thread a SIGINT
handler (chained to the caller's) tells a real Ctrl-C from a KeyboardInterrupt a factory raises, which fails its
trial as in a worker; torch's compiler front end, which ``torch.optim`` imports on first use, is imported first with
Ctrl-C held until it is in (an import cut short by KeyboardInterrupt left the interpreter to exit killed by SIGINT).
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import importlib
import signal
import threading
import warnings
from typing import Any, Iterator, Optional

from modelsql.tuning.executor import LocalExecutor, TaskSpec, run_task
from modelsql.tuning.factories import loaded_is_current

__all__ = ["InProcessExecutor", "training_here"]

_TRAINING = threading.Lock()
"""Held while a stage trains in this process, or another training that seeds torch's global RNG (FINETUNE): one at
a time."""


@contextlib.contextmanager
def training_here() -> Iterator[None]:
    """Hold this process's torch training (waiting for a stage training here to end): for a training in the
    caller's process that seeds or draws from torch's global RNG, so neither it nor a TUNE stage disturbs the
    other's draws (a stage that finds it held trains in a worker process)."""
    with _TRAINING:
        yield


class InProcessExecutor:
    """Trains each task in the calling thread when it can (see the module docstring), else in ``pool``'s workers.

    Args:
        pool: the worker processes for the tasks that cannot train here (one worker: ``workers`` is 1).
    """

    name = "local"
    workers = 1

    def __init__(self, pool: LocalExecutor) -> None:
        self.pool = pool

    def put_data(self, data, code_digest: str = ""):
        """The handle tasks receive for the training data (the pool's: a task may go there)."""
        return self.pool.put_data(data, code_digest)

    def submit(self, spec: TaskSpec, data, parent: Optional[bytes]) -> cf.Future:
        """Train one task here, returning its finished future, or queue it in the pool. ``data``: what
        :meth:`put_data` gave.

        Raises:
            KeyboardInterrupt: Ctrl-C while the task trained here (the study stops).
        """
        if spec.device != "cpu" or not loaded_is_current(spec.factory) or not _TRAINING.acquire(blocking=False):
            return self.pool.submit(spec, data, parent)
        try:
            with _SigintWatch() as watch, warnings.catch_warnings():
                warnings.simplefilter("ignore")  # as a worker: a factory's warnings are not the statement's
                with watch.held():
                    importlib.import_module("torch._dynamo")
                outcome = run_task(spec, data[1], parent, interrupted=lambda: watch.fired)
        finally:
            _TRAINING.release()
        future: cf.Future = cf.Future()
        future.set_result(outcome)
        return future

    def close(self) -> None:
        """Nothing to stop here (the pool is the process's, kept for the next study)."""


class _SigintWatch:
    """While a task trains in the main thread: a SIGINT handler that notes a Ctrl-C came (``fired``), then does
    what the caller's handler does (Python's raises KeyboardInterrupt; one that ignores SIGINT is honoured), or,
    within :meth:`held`, keeps it until the block ends and raises KeyboardInterrupt then. Elsewhere (another
    thread: no signal reaches it) it installs nothing and never fires."""

    def __init__(self) -> None:
        self.fired = False
        self._holding = False
        self._pending = False
        self._previous: Any = None
        self._installed = False

    def __enter__(self) -> "_SigintWatch":
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.getsignal(signal.SIGINT)
            if self._previous is not signal.SIG_IGN:
                signal.signal(signal.SIGINT, self._handle)
                self._installed = True
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._installed:  # None: a handler not set from Python, which Python cannot put back; its default
            signal.signal(signal.SIGINT, self._previous if self._previous is not None else signal.SIG_DFL)

    def _handle(self, signum: int, frame: Any) -> None:
        self.fired = True
        if self._holding:
            self._pending = True
            return
        if callable(self._previous):
            self._previous(signum, frame)
        else:  # SIG_DFL (or a handler not set from Python): stop as Python's default handler does
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        self._holding = True
        try:
            yield
        finally:
            self._holding = False
        if self._pending:
            self._pending = False
            self._handle(signal.SIGINT, None)
