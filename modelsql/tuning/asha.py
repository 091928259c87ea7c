"""ASHA (Li et al., "A System for Massively Parallel Hyperparameter Tuning", MLSys 2020): an
Optuna sampler with Optuna's ``SuccessiveHalvingPruner``, driven through ask/tell in rounds.

Each round, every running trial is trained on to its next rung (``grace_period *
reduction_factor**k`` epochs, the last rung ``max_t``), and new trials fill the round up to
``max_concurrent_trials`` until ``trials`` were asked. After a trial's tell every new epoch's
metric is reported (``step = epoch + 1``) and the pruner decides. Optuna's pruner is asynchronous
(a decision depends on which trials reached the rung before), but rounds told in trial order make
it deterministic.
"""

from __future__ import annotations

from typing import Any

from modelsql.tuning.protocol import SAMPLERS, Options, OptunaTrials, Request, RoundAlgorithm
from modelsql.tuning.space import Space

__all__ = ["ASHA", "OPTIONS", "build", "rung_epochs"]

OPTIONS = {"sampler": "random", "trials": 16, "max_concurrent_trials": 4, "grace_period": 1,
           "reduction_factor": 3, "max_t": None}
"""ASHA's options and their defaults (``max_t`` None: ``max_epochs``)."""


def rung_epochs(grace_period: int, reduction_factor: int, max_t: int) -> tuple[int, ...]:
    """The epochs at which trials are compared: ``grace_period * reduction_factor**k`` below
    ``max_t``, then ``max_t``; e.g. ``(1, 3, 9, 27)`` for ``(1, 3, 27)``."""
    out = []
    r = grace_period
    while r < max_t:
        out.append(r)
        r *= reduction_factor
    return tuple(out) + (max_t,)


class ASHA(RoundAlgorithm):
    """Asynchronous successive halving through Optuna (see the module docstring).

    Statuses: ``pruned`` when the pruner stops a trial at a rung, ``completed`` at ``max_t``.
    """

    def __init__(self, space: Space, *, sampler: str, trials: int, concurrency: int, grace_period: int,
                 reduction_factor: int, max_t: int, mode: str, seed: int, study_name: str) -> None:
        import optuna

        super().__init__(space, mode=mode)
        pruner = optuna.pruners.SuccessiveHalvingPruner(
            min_resource=grace_period, reduction_factor=reduction_factor, min_early_stopping_rate=0,
            bootstrap_count=0)
        self.optuna = OptunaTrials(space, sampler=sampler, seed=seed, mode=mode, study_name=study_name,
                                   pruner=pruner)
        self.n_trials = trials
        self.concurrency = concurrency
        self.max_t = max_t
        self.rungs = rung_epochs(grace_period, reduction_factor, max_t)
        self._reported: dict[int, int] = {}

    def _next_rung(self, trained: int) -> int:
        return next(r for r in self.rungs if r > trained)

    def _plan(self) -> list[Request]:
        running = [t for t, s in sorted(self.statuses.items()) if s == "running"]
        out = [self._extend(t, self._next_rung(len(self.metrics[t]))) for t in running]
        while len(out) < self.concurrency and len(self.configs) < self.n_trials:
            t = len(self.configs)
            out.append(self._start(t, self.optuna.new(t), self.rungs[0]))
        return out

    def _receive(self, request: Request, metrics: tuple[float, ...]) -> None:
        t = request.trial
        for epoch in range(self._reported.get(t, 0), len(metrics)):
            self.optuna.report(t, metrics[epoch], epoch + 1)
        self._reported[t] = len(metrics)
        if len(metrics) >= self.max_t:
            self.optuna.complete(t, metrics[-1])
            self._set_status(t, "completed")
        elif self.optuna.should_prune(t):
            self.optuna.prune(t)
            self._set_status(t, "pruned")

    def _receive_failure(self, request: Request, error: str) -> None:
        self.optuna.fail(request.trial)


def build(space: Space, opts: Options, *, max_epochs: int, mode: str, seed: int, study_name: str) -> ASHA:
    """ASHA from its options (see :data:`OPTIONS`); raises ProgrammingError ``invalid_option``."""
    max_t = max_epochs if opts.values["max_t"] is None else opts.integer("max_t")
    space.validate(max_t)
    kwargs: dict[str, Any] = {
        "sampler": opts.choice("sampler", SAMPLERS), "trials": opts.integer("trials"),
        "concurrency": opts.integer("max_concurrent_trials"),
        "grace_period": opts.integer("grace_period", 1, max_t), "reduction_factor": opts.integer("reduction_factor", 2),
    }
    return ASHA(space, max_t=max_t, mode=mode, seed=seed, study_name=study_name, **kwargs)
