"""What every TUNE algorithm shares: the :class:`Request` / :class:`Algorithm` protocol, the round
bookkeeping (:class:`RoundAlgorithm`), option checking, ranking, and Optuna studies driven through
ask/tell.

An algorithm is driven in *rounds*: ``ask()`` gives every request of the round, the executor trains
them (in any order, on any number of workers), then ``tell`` (or ``tell_failed``) is called once
per request, in trial order. With the same seed and the same metrics an algorithm makes exactly the
same requests, so a study resumes by replaying it against stored metrics (Hippo: Shin et al.,
VLDB 2022, trains the requests of a round as one stage tree).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Optional, Protocol, Sequence

from modelsql import errors

from modelsql.tuning.space import EpochHP, Space

__all__ = [
    "Request", "Algorithm", "RoundAlgorithm", "STATUSES", "rank_key", "worst", "Options",
    "OptunaTrials", "SAMPLERS",
]

STATUSES = ("running", "pruned", "completed", "failed", "stopped")
"""A trial's status; ``stopped`` is a PBT member that reached ``max_t`` (PBT's "completed")."""


@dataclass(frozen=True)
class Request:
    """Train one trial to ``len(sequence)`` epochs.

    Attributes:
        trial: 0-based trial number, assigned in a deterministic order.
        config: the trial's leaf values (for PBT: its current configuration).
        sequence: the hyper-parameters of epochs ``0 .. len(sequence)-1``.
        donor: PBT exploit: the trial whose state at ``branch_epoch`` this request continues
            (``sequence[:branch_epoch]`` is the donor's); None otherwise.
        branch_epoch: the epoch the exploit branches at, or None.
    """

    trial: int
    config: Mapping[str, Any]
    sequence: tuple[EpochHP, ...]
    donor: Optional[int] = None
    branch_epoch: Optional[int] = None

    @property
    def epochs(self) -> int:
        """The number of epochs to train the trial to."""
        return len(self.sequence)


class Algorithm(Protocol):
    """A hyper-parameter search driven in rounds (see the module docstring)."""

    @property
    def finished(self) -> bool:
        """True once the search has nothing more to ask."""

    def ask(self) -> list[Request]:
        """The next round's requests, sorted by trial; ``[]`` once finished."""

    def tell(self, trial: int, metrics: Sequence[float]) -> None:
        """The trial's metric after each epoch ``0 .. len(its sequence)-1`` (the whole history)."""

    def tell_failed(self, trial: int, error: str) -> None:
        """The trial's training failed: it is never requested again."""

    def status(self, trial: int) -> str:
        """One of :data:`STATUSES`."""

    def trials(self) -> dict[int, Mapping[str, Any]]:
        """Every trial's configuration so far."""


def worst(mode: str) -> float:
    """The worst metric under ``mode`` (``"min"``: +inf, ``"max"``: -inf); NaN stands for it."""
    return math.inf if mode == "min" else -math.inf


def rank_key(value: float, mode: str, trial: int) -> tuple:
    """Sort key putting the best metric first under ``mode``; NaN last, ties by trial number."""
    if math.isnan(value):
        return (1, 0.0, trial)
    return (0, value if mode == "min" else -value, trial)


class RoundAlgorithm:
    """Round bookkeeping for an algorithm: pending requests, the trial order of tells, statuses.

    Subclasses implement ``_plan()`` (the next round, called when the previous one is fully
    answered), ``_receive(request, metrics)`` and optionally ``_receive_failure(request, error)``,
    and call ``_start`` / ``_set_status``.
    """

    def __init__(self, space: Space, *, mode: str) -> None:
        self.space = space
        self.mode = mode
        self.configs: dict[int, dict[str, Any]] = {}
        self.statuses: dict[int, str] = {}
        self.metrics: dict[int, tuple[float, ...]] = {}
        self._pending: dict[int, Request] = {}
        self._next: Optional[list[Request]] = None
        self._finished = False

    @property
    def finished(self) -> bool:
        """True once the algorithm has nothing more to request."""
        return self._finished

    def ask(self) -> list[Request]:
        """The next round, sorted by trial; ``[]`` when finished.

        Raises:
            modelsql.errors.InterfaceError: code ``round_not_answered`` while a request of the
                previous round has not been told.
        """
        if self._pending:
            raise errors.InterfaceError(
                f"The round's trials {sorted(self._pending)} have not been told yet.", code="round_not_answered")
        if self._finished:
            return []
        if self._next is None:
            self._close_round()
        out, self._next = sorted(self._next or [], key=lambda r: r.trial), None
        self._pending = {r.trial: r for r in out}
        return out

    def tell(self, trial: int, metrics: Sequence[float]) -> None:
        """Record a request's per-epoch metrics (NaN or None: worst).

        Raises:
            modelsql.errors.InterfaceError: code ``unexpected_tell`` for a trial with no pending
                request, ``tell_out_of_order`` when a lower trial of the round is still pending,
                ``metrics_length`` when there is not one metric per epoch of the request.
        """
        request = self._take(trial)
        values = tuple(math.nan if m is None else float(m) for m in metrics)
        if len(values) != len(request.sequence):
            self._pending[trial] = request
            raise errors.InterfaceError(f"Trial {trial} was asked for {len(request.sequence)} epochs, "
                                        f"told {len(values)} metrics.", code="metrics_length")
        self.metrics[trial] = values
        self._receive(request, values)
        self._after_tell()

    def tell_failed(self, trial: int, error: str) -> None:
        """The trial's training raised ``error``: mark it failed and never request it again.

        Raises as :meth:`tell` (``unexpected_tell``, ``tell_out_of_order``)."""
        request = self._take(trial)
        self._set_status(trial, "failed")
        self._receive_failure(request, error)
        self._after_tell()

    def status(self, trial: int) -> str:
        """The trial's status, one of :data:`STATUSES`.

        Raises:
            modelsql.errors.ProgrammingError: code ``trial_not_found`` for a trial never requested.
        """
        if trial not in self.statuses:
            raise errors.ProgrammingError(f"There is no trial {trial}.", code="trial_not_found")
        return self.statuses[trial]

    def trials(self) -> dict[int, Mapping[str, Any]]:
        """Every trial's configuration so far (PBT: its current one), by trial number."""
        return {t: dict(c) for t, c in sorted(self.configs.items())}

    # -- for subclasses ---------------------------------------------------------------------

    def _start(self, trial: int, config: Mapping[str, Any], epochs: int) -> Request:
        """Record a running trial and its request for epochs ``0 .. epochs-1``."""
        self.configs[trial] = dict(config)
        self.statuses[trial] = "running"
        return Request(trial, dict(config), self.space.sequence(config, epochs))

    def _extend(self, trial: int, epochs: int) -> Request:
        """The request that trains a running trial on to ``epochs`` with its configuration."""
        config = self.configs[trial]
        return Request(trial, dict(config), self.space.sequence(config, epochs))

    def _set_status(self, trial: int, status: str) -> None:
        self.statuses[trial] = status

    def _plan(self) -> list[Request]:
        raise NotImplementedError

    def _receive(self, request: Request, metrics: tuple[float, ...]) -> None:
        raise NotImplementedError

    def _receive_failure(self, request: Request, error: str) -> None:
        """Hook: a request failed (the status is already ``failed``)."""

    # -- round bookkeeping ------------------------------------------------------------------

    def _take(self, trial: int) -> Request:
        if trial not in self._pending:
            raise errors.InterfaceError(f"Trial {trial} has no pending request.", code="unexpected_tell")
        first = min(self._pending)
        if trial != first:
            raise errors.InterfaceError(f"Trial {trial} was told before trial {first}: tell in trial order.",
                                        code="tell_out_of_order")
        return self._pending.pop(trial)

    def _after_tell(self) -> None:
        if not self._pending:
            self._close_round()

    def _close_round(self) -> None:
        self._next = self._plan()
        self._finished = not self._next


class Options:
    """The options of one algorithm: unknown names rejected, values checked on read.

    Args:
        algorithm: the algorithm's name (for messages).
        given: the options as written (names case-insensitive).
        defaults: every accepted option and its default (None: no default, see the reader).

    Raises:
        modelsql.errors.ProgrammingError: code ``unknown_option`` naming an option not accepted and
            listing the accepted ones.
    """

    def __init__(self, algorithm: str, given: Mapping[str, Any], defaults: Mapping[str, Any]) -> None:
        self.algorithm = algorithm
        self.values = dict(defaults)
        for name, value in given.items():
            key = str(name).lower()
            if key not in defaults:
                accepted = ", ".join(sorted(defaults)) or "none"
                raise errors.ProgrammingError(
                    f"Unknown option {name!r} for {algorithm.upper()}; accepted options: {accepted}.",
                    code="unknown_option")
            self.values[key] = value

    def bad(self, name: str, why: str) -> errors.ProgrammingError:
        """The error for a bad value of option ``name``."""
        return errors.ProgrammingError(
            f"Invalid option {name} = {self.values.get(name)!r} for {self.algorithm.upper()}: {why}.",
            code="invalid_option")

    def integer(self, name: str, low: int = 1, high: Optional[int] = None) -> int:
        """Option ``name`` as an int in ``[low, high]``; raises ProgrammingError ``invalid_option``."""
        v = self.values[name]
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if not isinstance(v, int) or isinstance(v, bool) or v < low or (high is not None and v > high):
            raise self.bad(name, f"expected an integer >= {low}" + (f" and <= {high}" if high is not None else ""))
        return v

    def number(self, name: str, low: float, high: float, *, open_low: bool = False) -> float:
        """Option ``name`` as a float in ``[low, high]`` (``(low, high]`` with ``open_low``)."""
        v = self.values[name]
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and (low < v if open_low else low <= v) \
            and v <= high
        if not ok:
            raise self.bad(name, f"expected a number in {'(' if open_low else '['}{low}, {high}]")
        return float(v)

    def choice(self, name: str, accepted: Sequence[str]) -> str:
        """Option ``name`` as one of ``accepted`` (case-insensitive)."""
        v = self.values[name]
        if not isinstance(v, str) or v.lower() not in accepted:
            raise self.bad(name, "expected one of " + ", ".join(repr(a) for a in accepted))
        return v.lower()


SAMPLERS = ("random", "tpe")


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Optuna logs every finished trial at INFO; keep it to warnings while we drive it."""
    import optuna

    level = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        yield
    finally:
        optuna.logging.set_verbosity(level)


class OptunaTrials:
    """One in-memory Optuna study driven through ask/tell; trials are keyed by our trial numbers.

    Args:
        space: the search space (its :meth:`~Space.optuna_distributions` are asked for).
        sampler: ``"random"`` (``RandomSampler``) or ``"tpe"`` (Bergstra et al., NeurIPS 2011,
            ``TPESampler``), seeded with ``seed`` (``0 <= seed < 2**32``).
        mode: ``"min"`` or ``"max"``.
        study_name: the study's name (Optuna hashes it in some pruners: it must be stable).
        pruner: an ``optuna.pruners.BasePruner``, or None.
    """

    def __init__(self, space: Space, *, sampler: str, seed: int, mode: str, study_name: str,
                 pruner: Any = None) -> None:
        import optuna

        self.space = space
        self.mode = mode
        maker = optuna.samplers.TPESampler if sampler == "tpe" else optuna.samplers.RandomSampler
        with _quiet():
            self.study = optuna.create_study(
                storage=optuna.storages.InMemoryStorage(), sampler=maker(seed=seed), pruner=pruner,
                study_name=study_name, direction="minimize" if mode == "min" else "maximize")
        self.distributions = space.optuna_distributions()
        self.trials: dict[int, Any] = {}

    def new(self, trial: int) -> dict[str, Any]:
        """Ask Optuna for trial ``trial``'s configuration."""
        with _quiet():
            t = self.study.ask(self.distributions)
        self.trials[trial] = t
        return self.space.config_from_params(t.params)

    def _finite(self, value: float) -> float:
        return worst(self.mode) if math.isnan(value) else value

    def report(self, trial: int, value: float, step: int) -> None:
        """``trial.report`` (NaN reported as the worst value)."""
        self.trials[trial].report(self._finite(value), step)

    def should_prune(self, trial: int) -> bool:
        """The pruner's decision at the trial's last reported step."""
        return self.trials[trial].should_prune()

    def complete(self, trial: int, value: float) -> None:
        """``study.tell(value)`` (NaN told as the worst value)."""
        self._tell(trial, values=self._finite(value))

    def prune(self, trial: int) -> None:
        """``study.tell(state=PRUNED)``."""
        import optuna

        self._tell(trial, state=optuna.trial.TrialState.PRUNED)

    def fail(self, trial: int) -> None:
        """``study.tell(state=FAIL)``."""
        import optuna

        self._tell(trial, state=optuna.trial.TrialState.FAIL)

    def _tell(self, trial: int, **kwargs: Any) -> None:
        with _quiet():
            self.study.tell(self.trials.pop(trial), **kwargs)
