"""Progress of long statements: one message protocol for PREDICT, TUNE, FINETUNE, PROFILE, COMPILE and
``CREATE MODEL ... FROM PYTHON``.

A Python program registers a hook on the connection (``con.progress = callback``); the shell's display
(:class:`modelsql.client.display.ProgressDisplay`) is such a hook. The hook is called with one ``dict`` per
message. Every message has these keys:

* ``kind``: ``"predict"``, ``"tune"``, ``"finetune"``, ``"profile"``, ``"compile"`` or ``"create_model"``
  (:data:`KINDS`; a display shows any other kind generically).
* ``id``: an integer naming the job within the process (a statement with two PREDICTs runs two jobs).
* ``label``: what the job works on (``model "m" version 1``, ``pipeline "p" version 1``, ``study s``, the
  name CREATE MODEL gives).
* ``done``, ``total``: units done, and in all (``total`` None when not known: a PREDICT whose input
  DuckDB gives no row estimate for). A PREDICT's total is DuckDB's estimate of its input's rows, which a
  filter makes approximate; TUNE's is the trials asked so far and PROFILE's of a pipeline adds each step's
  runs as it starts, so both may grow; ``done`` never decreases.
* ``unit``: ``"rows"`` (PREDICT), ``"trials"`` (TUNE, COMPILE), ``"epochs"`` (FINETUNE: full-batch steps),
  ``"runs"`` (PROFILE on synthetic inputs: timed and warm-up model runs), ``"queries"`` (PROFILE ... ON:
  the PREDICT queries it times), ``"stages"`` (CREATE MODEL ... FROM PYTHON: it does not train).
* ``elapsed_s``: seconds since the job started; ``rate``: units per second since then (None before the
  first unit); ``eta_s``: seconds left at that rate (None when the total or the rate is not known).
* ``final``: True on a job's last message, sent once when it ends (also when it fails). A job that ended
  without an error says so with ``ok`` True, and its ``total`` is then ``done``: the units done in all.

Kind-specific keys are listed in :data:`KINDS` (TUNE's are the ones its hook always had: ``study``,
``trials``, ``trials_done``, ``best_trial``, ``best_metric``, ``epochs_trained``, ``epochs_requested``).

Messages are throttled (:data:`MIN_INTERVAL_S`) except TUNE's (after every stage and round), CREATE MODEL's
(as each stage begins) and a job's final one. PREDICT's messages come from DuckDB's worker threads while
the statement runs or, for a query whose rows are fetched as they are made, while the cursor fetches
them; one job's calls never overlap. A hook must not use the connection (the connection refuses it: InterfaceError
``used_from_hook``). An exception the hook raises
ends the statement with it (on a failed job's final message it is dropped: the job's own error stands).
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional

__all__ = ["KINDS", "MIN_INTERVAL_S", "Kind", "Meter", "OnlyKinds", "problem", "tune_meter"]

MIN_INTERVAL_S = 0.25
"""Seconds between two messages of one job, at least (its final message excepted)."""


@dataclass(frozen=True)
class Kind:
    """One kind of job: its unit, its title in a display, and the keys its messages add."""

    unit: str
    title: str
    fields: tuple[str, ...]


KINDS: dict[str, Kind] = {
    "predict": Kind("rows", "PREDICT", ("scan", "execution")),
    "tune": Kind("trials", "TUNE", ("study", "trials", "trials_done", "best_trial", "best_metric", "epochs_trained",
                                    "epochs_requested")),
    "finetune": Kind("epochs", "FINETUNE", ("pipeline", "loss")),
    "profile": Kind("runs", "PROFILE", ()),
    "compile": Kind("trials", "COMPILE", ("target", "batch_size")),
    "create_model": Kind("stages", "CREATE MODEL", ("stage",)),
}
"""The kinds of job, by ``kind``: unit (PROFILE ... ON counts ``queries``), title, kind-specific keys
(``scan``: the PREDICT's number in its statement; ``execution``: ``stream`` or ``batch``; ``loss``: the
training loss of the last step; ``target``:
the TVM target's kind; ``stage``: what CREATE MODEL is doing)."""

COMMON = ("kind", "id", "label", "done", "total", "unit", "elapsed_s", "rate", "eta_s", "final")
"""The keys every message has."""

_IDS = itertools.count(1)


def problem(message: Any) -> Optional[str]:
    """None when ``message`` has the shape of this protocol (a mapping with the :data:`COMMON` keys, a known
    kind, numbers where numbers go), else what is wrong, in a few words."""
    if not isinstance(message, Mapping):
        return f"not a mapping but {type(message).__name__}"
    missing = [k for k in COMMON if k not in message]
    if missing:
        return "no " + ", ".join(missing)
    if message["kind"] not in KINDS:
        return f"unknown kind {message['kind']!r}"
    numbers = ("done", "elapsed_s") + tuple(k for k in ("total", "rate", "eta_s") if message[k] is not None)
    if not all(isinstance(message[k], (int, float)) and not isinstance(message[k], bool) for k in numbers):
        return "a count or time that is not a number"
    return None


class Meter:
    """Counts one job's units and sends its messages to ``hook`` (nothing at all when ``hook`` is None).

    Args:
        hook: the connection's progress callable, or None.
        kind: a key of :data:`KINDS`; ``unit`` defaults to its unit.
        total: units in all, when known. ``label``: what the job works on.
        interval: seconds between messages at least (None: :data:`MIN_INTERVAL_S`; 0: every update is sent).
        fields: kind-specific keys, sent with every message (updated by :meth:`advance` and :meth:`update`).

    Thread-safe: DuckDB's worker threads may advance one meter at once.
    """

    def __init__(self, hook: Optional[Callable[[dict], Any]], kind: str, *, total: Optional[int] = None,
                 unit: Optional[str] = None, label: str = "", interval: Optional[float] = None, **fields: Any) -> None:
        self.hook, self.kind, self.total, self.label = hook, kind, total, label
        self.interval = MIN_INTERVAL_S if interval is None else interval
        self.unit = unit or KINDS[kind].unit
        self.fields = fields
        self.id = next(_IDS)
        self.done = 0
        self.start = self.last = time.perf_counter()
        self.ended = False
        self._lock = threading.Lock()

    def advance(self, n: int = 1, **fields: Any) -> None:
        """Count ``n`` more units done; send a message when :attr:`interval` has passed since the last."""
        if self.hook is None:
            return
        with self._lock:
            self.done += n
            self.fields.update(fields)
            self._maybe_send()

    def update(self, done: int, total: Optional[int] = None, **fields: Any) -> None:
        """Set the units done (never lower than before) and, when given, the total; send as :meth:`advance`."""
        if self.hook is None:
            return
        with self._lock:
            self.done = max(self.done, done)
            self.total = self.total if total is None else total
            self.fields.update(fields)
            self._maybe_send()

    def grow(self, n: int) -> None:
        """Count ``n`` more units in the total (a job that learns its size as it goes: PROFILE of a pipeline)."""
        with self._lock:
            self.total = (self.total or 0) + n

    def finish(self, ok: bool = True, **fields: Any) -> None:
        """Send the job's final message (once; later calls do nothing). ``ok``: it ended without an error; when
        it did not, an exception the hook raises is dropped (the job's own error is the one that matters)."""
        if self.hook is None:
            return
        with self._lock:
            if self.ended:
                return
            self.ended = True
            self.fields.update(fields)
            if ok:
                self.total = self.done
            try:
                self._send(final=True, ok=ok)
            except Exception:
                if ok:
                    raise

    def message(self, final: bool = False) -> dict:
        """The message for the job's state now."""
        elapsed = time.perf_counter() - self.start
        rate = self.done / elapsed if self.done and elapsed > 0 else None
        eta = max(0.0, (self.total - self.done) / rate) if rate and self.total is not None else None
        return {"kind": self.kind, "id": self.id, "label": self.label, "done": self.done, "total": self.total,
                "unit": self.unit, "elapsed_s": elapsed, "rate": rate, "eta_s": eta, "final": final, **self.fields}

    def _maybe_send(self) -> None:
        now = time.perf_counter()
        if now - self.last >= self.interval and not self.ended:
            self._send(final=False)

    def _send(self, final: bool, **extra: Any) -> None:
        self.last = time.perf_counter()
        assert self.hook is not None  # every caller returns early without a hook
        self.hook({**self.message(final), **extra})


def tune_meter(hook: Optional[Callable[[dict], Any]], study: str) -> Meter:
    """The meter of TUNE's study ``study`` (its keys in :data:`KINDS`, none known yet), sending every update."""
    return Meter(hook, "tune", label=f"study {study}", interval=0, study=study, trials=0, trials_done=0,
                 best_trial=None, best_metric=None, epochs_trained=0, epochs_requested=0)


class OnlyKinds:
    """A hook that passes on the messages of some kinds only (``con.tune_progress``: TUNE's alone, as before).

    Attributes:
        kinds: the kinds passed on. callback: the hook they are passed to.
    """

    def __init__(self, kinds: tuple[str, ...], callback: Callable[[dict], Any]) -> None:
        self.kinds, self.callback = kinds, callback

    def __call__(self, message: dict) -> None:
        if message.get("kind") in self.kinds:
            self.callback(message)
