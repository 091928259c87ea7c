"""Stages trained in the study's own process: what ``executor = 'local'`` does with one worker on the CPU (the
default: ``workers = 1``).

A worker interpreter costs its start, importing torch (about 1.5 s on a 2-core machine, more than a small study's
training), and each stage's checkpoint crosses a pipe twice; Optuna and a hand-written loop pay neither, training
in the caller's process. Training here is as bit-exact as in a worker: :func:`~modelsql.tuning.training.train_stage`
sets the thread count and every seed, or restores them from the parent checkpoint, before it trains, and gives the
caller back its RNG states and thread count after (so the results equal a worker's, bit for bit, and the trees
mix the two freely). A task trains here only when

* no other stage is training in this process (torch's RNGs and thread count are per process: a second study
  running in another thread at the same time sends its tasks to worker processes);
* the factory's code this process has imported is what its file holds now
  (:func:`~modelsql.tuning.factories.loaded_is_current`; a worker imports the edited file anew);

otherwise it goes to the :class:`~modelsql.tuning.executor.LocalExecutor`'s worker processes, as every task does
with several workers, on CUDA (deterministic cuBLAS must be configured before a process's first cuBLAS call), or
with ``executor = 'processes'`` (which also keeps a trainable that crashes its interpreter, a segfault in an
extension, from taking the study's process with it).

Ctrl-C (KeyboardInterrupt) while a stage trains here stops the study, as it does when a worker trains it.
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
import warnings
from typing import Optional

from modelsql.tuning.executor import LocalExecutor, TaskSpec, run_task
from modelsql.tuning.factories import loaded_is_current

__all__ = ["InProcessExecutor"]

_TRAINING = threading.Lock()
"""Held while a stage trains in this process (one at a time)."""


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
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # as a worker: a factory's warnings are not the statement's
                outcome = run_task(spec, data[1], parent, interruptible=True)
        finally:
            _TRAINING.release()
        future: cf.Future = cf.Future()
        future.set_result(outcome)
        return future

    def close(self) -> None:
        """Nothing to stop here (the pool is the process's, kept for the next study)."""
