"""Population Based Training (Jaderberg et al., "Population Based Training of Neural Networks",
2017), written for stage trees: an exploit is a branch from the donor's node, not a weight copy.

A population of ``trials`` members (sampled with a private ``random.Random(seed)``) trains in
rounds of ``perturbation_interval`` epochs. At each interval's end ``t`` the members are ranked by
their metric at that epoch; each member of the bottom ``quantile_fraction`` picks a donor uniformly
from the top one and continues from the donor's state at ``t`` with ``explore(donor's config)``:
numbers times 0.8 or 1.2 (clipped; INTEGER rounded), a CHOICE moved to a neighbouring value, and
with ``resample_probability`` a leaf drawn afresh. A member's sequence is its own history of
per-epoch hyper-parameters (after an exploit, the donor's up to ``t``). Members end at ``max_t``.
"""

from __future__ import annotations

import math
import random
from typing import Any, Mapping, Optional

from modelsql.tuning.protocol import Options, Request, RoundAlgorithm, rank_key
from modelsql.tuning.space import Choice, IntRange, LogUniform, Space

__all__ = ["PBT", "OPTIONS", "build", "sample_config", "explore"]

OPTIONS = {"trials": 8, "perturbation_interval": 4, "quantile_fraction": 0.25, "resample_probability": 0.25,
           "max_t": None}
"""PBT's options and their defaults (``trials``: the population; ``max_t`` None: ``max_epochs``)."""


def _sample_leaf(d: Any, rng: random.Random) -> Any:
    if isinstance(d, Choice):
        return d.values[rng.randrange(len(d.values))]
    if isinstance(d, IntRange):
        return rng.randint(d.low, d.high)
    if isinstance(d, LogUniform):
        return math.exp(rng.uniform(math.log(d.low), math.log(d.high)))
    return rng.uniform(d.low, d.high)


def _perturb(d: Any, value: Any, rng: random.Random) -> Any:
    if isinstance(d, Choice):
        i = d.values.index(value) + rng.choice((-1, 1))
        return d.values[min(max(i, 0), len(d.values) - 1)]
    x = value * rng.choice((0.8, 1.2))
    x = int(round(x)) if isinstance(d, IntRange) else x
    return min(max(x, d.low), d.high)


def sample_config(space: Space, rng: random.Random) -> dict[str, Any]:
    """A configuration with every sampled leaf drawn from ``rng`` (leaves in written order)."""
    return space.resolve({leaf: _sample_leaf(d, rng) for leaf, d in space.dimensions().items()})


def explore(space: Space, config: Mapping[str, Any], rng: random.Random, resample_probability: float) -> dict:
    """PBT's explore step on ``config`` (see the module docstring); constants are kept."""
    new = dict(config)
    for leaf, d in space.dimensions().items():
        resample = rng.random() < resample_probability
        new[leaf] = _sample_leaf(d, rng) if resample else _perturb(d, config[leaf], rng)
    return new


class PBT(RoundAlgorithm):
    """Synchronous PBT (see the module docstring). Statuses: ``stopped`` at ``max_t``."""

    def __init__(self, space: Space, *, population: int, interval: int, quantile: float, resample: float,
                 max_t: int, mode: str, seed: int) -> None:
        super().__init__(space, mode=mode)
        self._rng = random.Random(seed)
        self._initial = [sample_config(space, self._rng) for _ in range(population)]
        self.interval, self.quantile, self.resample, self.max_t = interval, quantile, resample, max_t
        self.epoch = 0
        self._seq: dict[int, tuple] = {}

    def _plan(self) -> list[Request]:
        end = min(self.epoch + self.interval, self.max_t)
        if self.epoch == 0:
            out = [self._start(t, c, end) for t, c in enumerate(self._initial)]
        else:
            live = [t for t, s in sorted(self.statuses.items()) if s == "running"]
            if self.epoch >= self.max_t:
                for t in live:
                    self._set_status(t, "stopped")
                return []
            donors = self._exploit(live)
            out = [self._member(t, end, donors.get(t)) for t in live]
        self._seq.update((r.trial, r.sequence) for r in out)
        self.epoch = end
        return out

    def _member(self, t: int, end: int, donor: Optional[int]) -> Request:
        start = self.epoch
        head = self._seq[t if donor is None else donor][:start]
        tail = self.space.sequence(self.configs[t], end)[start:end]
        branch = None if donor is None else start
        return Request(t, dict(self.configs[t]), head + tail, donor, branch)

    def _exploit(self, live: list[int]) -> dict[int, int]:
        """Pick each bottom member's donor and give it ``explore(donor's config)``."""
        ranked = sorted(live, key=lambda t: rank_key(self.metrics[t][-1], self.mode, t))
        q = math.ceil(round(len(ranked) * self.quantile, 9))
        q = len(ranked) // 2 if q > len(ranked) / 2 else q
        if q == 0:
            return {}
        top, donors = sorted(ranked[:q]), {}
        for t in sorted(ranked[-q:]):
            donors[t] = self._rng.choice(top)
            self.configs[t] = explore(self.space, self.configs[donors[t]], self._rng, self.resample)
        return donors

    def _receive(self, request: Request, metrics: tuple[float, ...]) -> None:
        """Nothing to decide until the round is complete."""


def build(space: Space, opts: Options, *, max_epochs: int, mode: str, seed: int, study_name: str) -> PBT:
    """PBT from its options (see :data:`OPTIONS`); raises ProgrammingError ``invalid_option``."""
    max_t = max_epochs if opts.values["max_t"] is None else opts.integer("max_t")
    space.validate(max_t)
    return PBT(space, population=opts.integer("trials"), interval=opts.integer("perturbation_interval"),
               quantile=opts.number("quantile_fraction", 0.0, 0.5, open_low=True),
               resample=opts.number("resample_probability", 0.0, 1.0), max_t=max_t, mode=mode, seed=seed)
