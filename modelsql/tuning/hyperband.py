"""Synchronous Hyperband (Li et al., "Hyperband: A Novel Bandit-Based Approach to Hyperparameter
Optimization", JMLR 2018), deterministic whatever order the executor trains in.

With ``R = max_t``, ``eta = reduction_factor`` and ``r_min = grace_period``, bracket ``s`` (from
``s_max = floor(log_eta(R / r_min))`` down to 0) starts ``n = ceil((s_max + 1) / (s + 1) * eta**s)``
configurations at ``R * eta**-s`` epochs. Every round, every bracket advances one rung: its live
trials are trained to the rung's budget, then the best ``floor(n_i / eta)`` (ties by trial number)
go on and the rest are pruned. Unlike Optuna's asynchronous pruners, a decision sees the whole rung,
the property Hippo's breadth-first stage trees want (Shin et al., VLDB 2022).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Optional

from modelsql.tuning.protocol import SAMPLERS, Options, OptunaTrials, Request, RoundAlgorithm, rank_key
from modelsql.tuning.space import Space

__all__ = ["Bracket", "plan_brackets", "Hyperband", "OPTIONS", "build"]

OPTIONS = {"sampler": "random", "grace_period": 1, "reduction_factor": 3, "max_t": None, "brackets": None}
"""Hyperband's options and their defaults (``max_t`` None: ``max_epochs``; ``brackets``: run only the
first that many brackets, from ``s = s_max`` down; None: all)."""


@dataclass(frozen=True)
class Bracket:
    """One bracket: ``sizes[i]`` trials trained to ``budgets[i]`` epochs at rung ``i``."""

    s: int
    sizes: tuple[int, ...]
    budgets: tuple[int, ...]


def plan_brackets(max_t: int, eta: int, r_min: int = 1) -> list[Bracket]:
    """Li et al.'s brackets, ``s = s_max .. 0``, in exact integer arithmetic (budgets rounded half
    up, at least 1). For ``(27, 3)`` the first bracket's sizes are ``(27, 9, 3, 1)`` at budgets
    ``(1, 3, 9, 27)``."""
    s_max = 0
    while r_min * eta ** (s_max + 1) <= max_t:
        s_max += 1
    out = []
    for s in range(s_max, -1, -1):
        n = -(-(s_max + 1) * eta**s // (s + 1))
        sizes = tuple(n // eta**i for i in range(s + 1))
        budgets = tuple(max(1, math.floor(Fraction(max_t * eta**i, eta**s) + Fraction(1, 2))) for i in range(s + 1))
        out.append(Bracket(s, sizes, budgets))
    return out


class Hyperband(RoundAlgorithm):
    """Synchronous Hyperband over ``brackets`` (see the module docstring).

    All brackets start in the first round (each asks all its configurations of the Optuna sampler
    then); trial numbers go bracket by bracket. Statuses: ``pruned`` when cut at a rung,
    ``completed`` after the bracket's last rung.
    """

    def __init__(self, space: Space, *, brackets: list[Bracket], eta: int, sampler: str, mode: str, seed: int,
                 study_name: str) -> None:
        super().__init__(space, mode=mode)
        self.optuna = OptunaTrials(space, sampler=sampler, seed=seed, mode=mode, study_name=study_name)
        self.brackets = brackets
        self.eta = eta
        self._live: list[list[int]] = []
        self._rung: list[Optional[int]] = []

    def _plan(self) -> list[Request]:
        if not self._rung:
            return self._begin()
        out = []
        for b, bracket in enumerate(self.brackets):
            self._advance(b)
            rung = self._rung[b]
            if rung is not None:
                out += [self._extend(t, bracket.budgets[rung]) for t in self._live[b]]
        return out

    def _begin(self) -> list[Request]:
        out: list[Request] = []
        for bracket in self.brackets:
            trials = list(range(len(self.configs), len(self.configs) + bracket.sizes[0]))
            out += [self._start(t, self.optuna.new(t), bracket.budgets[0]) for t in trials]
            self._live.append(trials)
            self._rung.append(0)
        return out

    def _advance(self, b: int) -> None:
        """Decide bracket ``b``'s rung that was just trained: promote, prune or complete."""
        rung = self._rung[b]
        if rung is None:
            return
        live = [t for t in self._live[b] if self.statuses[t] == "running"]
        ranked = sorted(live, key=lambda t: rank_key(self.metrics[t][-1], self.mode, t))
        last = rung == len(self.brackets[b].budgets) - 1
        keep = 0 if last else self.brackets[b].sizes[rung] // self.eta
        for t in ranked[keep:]:
            if last:
                self.optuna.complete(t, self.metrics[t][-1])
            else:
                self.optuna.prune(t)
            self._set_status(t, "completed" if last else "pruned")
        self._live[b] = sorted(ranked[:keep])
        self._rung[b] = rung + 1 if self._live[b] else None

    def _receive(self, request: Request, metrics: tuple[float, ...]) -> None:
        self.optuna.report(request.trial, metrics[-1], len(metrics))

    def _receive_failure(self, request: Request, error: str) -> None:
        self.optuna.fail(request.trial)


def build(space: Space, opts: Options, *, max_epochs: int, mode: str, seed: int, study_name: str) -> Hyperband:
    """Hyperband from its options (see :data:`OPTIONS`); raises ProgrammingError ``invalid_option``."""
    max_t = max_epochs if opts.values["max_t"] is None else opts.integer("max_t")
    space.validate(max_t)
    eta = opts.integer("reduction_factor", 2)
    brackets = plan_brackets(max_t, eta, opts.integer("grace_period", 1, max_t))
    if opts.values["brackets"] is not None:
        brackets = brackets[: opts.integer("brackets", 1, len(brackets))]
    return Hyperband(space, brackets=brackets, eta=eta, sampler=opts.choice("sampler", SAMPLERS), mode=mode,
                     seed=seed, study_name=study_name)
