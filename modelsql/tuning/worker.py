"""A local training worker: ``python -m modelsql.tuning.worker``, one process, one task at a time.

The parent writes length-prefixed pickled messages to the worker's stdin and reads the answers from
its stdout (see :class:`~modelsql.tuning.executor.LocalExecutor`):

* ``("data", key, TrainData)``: keep the study's arrays under ``key`` (sent once per worker);
* ``("task", key, TaskSpec, parent checkpoint bytes | None)``: answered with a ``TaskOutcome``.

The worker is a fresh interpreter started with ``-m`` (not a ``multiprocessing`` child, which would
re-import the user's ``__main__``); it exits when its stdin closes, so it never outlives its parent.
SIGINT interrupts the task being trained (answered as a failed task: the parent sends it to cancel the
task); between tasks it is ignored, so a message is never cut in half.
"""

from __future__ import annotations

import signal
import sys
import warnings
from typing import Any


def main() -> None:
    """Serve tasks until stdin closes."""
    training = [False]

    def interrupt(signum, frame) -> None:
        if training[0]:
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, interrupt)
    from modelsql.tuning.executor import run_task
    from modelsql.tuning.messages import read_message, write_message

    warnings.simplefilter("ignore")
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # anything a factory prints must not corrupt the message stream
    data: dict[str, Any] = {}
    while True:
        message = read_message(inp)
        if message is None:
            return
        kind, key = message[0], message[1]
        if kind == "data":
            data.clear()
            data[key] = message[2]
            continue
        _, _, spec, parent = message
        training[0] = True
        try:
            outcome = run_task(spec, data[key], parent)
        finally:
            training[0] = False
        write_message(out, outcome)


if __name__ == "__main__":
    main()
