"""TUNE's search algorithms: :func:`make_algorithm`, grid search, and random / TPE search.

Every algorithm follows the round protocol of :mod:`modelsql.tuning.protocol` (re-exported here:
:class:`Request`, :class:`Algorithm`). Grid, random and TPE (Bergstra et al., "Algorithms for
Hyper-Parameter Optimization", NeurIPS 2011) train every trial to ``max_epochs``; the early
stopping ones live in :mod:`~modelsql.tuning.asha` (Li et al., MLSys 2020),
:mod:`~modelsql.tuning.hyperband` (Li et al., JMLR 2018) and :mod:`~modelsql.tuning.pbt`
(Jaderberg et al., 2017). Hippo (Shin et al., VLDB 2022) trains a round's requests as one stage
tree, so configurations that repeat or share a schedule prefix are trained once.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from modelsql import errors

from modelsql.tuning import asha, hyperband, pbt
from modelsql.tuning.protocol import Algorithm, Options, OptunaTrials, Request, RoundAlgorithm
from modelsql.tuning.space import Space

__all__ = ["Request", "Algorithm", "GridSearch", "SampledSearch", "make_algorithm", "check_algorithm", "ALGORITHMS"]


class GridSearch(RoundAlgorithm):
    """Every configuration of :meth:`Space.grid`, each to ``max_epochs``, in one round.

    Enumerated here rather than with Optuna's ``GridSampler`` (its last ``tell`` raises,
    optuna#5141). Raises ProgrammingError ``grid_needs_choices`` as :meth:`Space.grid`.
    """

    def __init__(self, space: Space, *, max_epochs: int, mode: str) -> None:
        super().__init__(space, mode=mode)
        self.max_epochs = max_epochs
        self._grid = space.grid()
        self._asked = False

    def _plan(self) -> list[Request]:
        if self._asked:
            return []
        self._asked = True
        return [self._start(i, config, self.max_epochs) for i, config in enumerate(self._grid)]

    def _receive(self, request: Request, metrics: tuple[float, ...]) -> None:
        self._set_status(request.trial, "completed")


class SampledSearch(RoundAlgorithm):
    """``trials`` configurations from an Optuna sampler (random or TPE), ``concurrency`` per round,
    each trained to ``max_epochs``; the final epoch's metric is told to Optuna."""

    def __init__(self, space: Space, *, sampler: str, trials: int, concurrency: int, max_epochs: int,
                 mode: str, seed: int, study_name: str) -> None:
        super().__init__(space, mode=mode)
        self.optuna = OptunaTrials(space, sampler=sampler, seed=seed, mode=mode, study_name=study_name)
        self.n_trials = trials
        self.concurrency = concurrency
        self.max_epochs = max_epochs

    def _plan(self) -> list[Request]:
        first = len(self.configs)
        count = min(self.concurrency, self.n_trials - first)
        return [self._start(t, self.optuna.new(t), self.max_epochs) for t in range(first, first + count)]

    def _receive(self, request: Request, metrics: tuple[float, ...]) -> None:
        self.optuna.complete(request.trial, metrics[-1])
        self._set_status(request.trial, "completed")

    def _receive_failure(self, request: Request, error: str) -> None:
        self.optuna.fail(request.trial)


SAMPLED_OPTIONS = {"trials": 16, "max_concurrent_trials": 4}


def _grid(space: Space, opts: Options, **common: Any) -> Algorithm:
    space.validate(common["max_epochs"])
    return GridSearch(space, max_epochs=common["max_epochs"], mode=common["mode"])


def _sampled(sampler: str) -> Any:
    def build(space: Space, opts: Options, **common: Any) -> Algorithm:
        space.validate(common["max_epochs"])
        return SampledSearch(space, sampler=sampler, trials=opts.integer("trials"),
                             concurrency=opts.integer("max_concurrent_trials"), **common)
    return build


ALGORITHMS: dict[str, tuple[Mapping[str, Any], Callable[..., Algorithm]]] = {
    "grid": ({}, _grid),
    "random": (SAMPLED_OPTIONS, _sampled("random")),
    "tpe": (SAMPLED_OPTIONS, _sampled("tpe")),
    "asha": (asha.OPTIONS, asha.build),
    "hyperband": (hyperband.OPTIONS, hyperband.build),
    "pbt": (pbt.OPTIONS, pbt.build),
}
"""name -> (accepted options and their defaults, builder)."""


def check_algorithm(name: str) -> str:
    """``name`` lower-cased, one of :data:`ALGORITHMS`.

    Raises:
        modelsql.errors.ProgrammingError: ``unknown_algorithm`` (with a "did you mean" and the algorithms).
    """
    key = str(name).lower()
    if key not in ALGORITHMS:
        raise errors.ProgrammingError(f"Unknown tuning algorithm {name!r}.{errors.did_you_mean(key, list(ALGORITHMS))} "
                                      f"Expected one of {', '.join(ALGORITHMS)}.", code="unknown_algorithm")
    return key


def make_algorithm(name: str, space: Space, *, max_epochs: int, mode: str = "min", seed: int = 0,
                   study_name: str, options: Mapping[str, Any]) -> Algorithm:
    """The algorithm ``name`` (case-insensitive) over ``space``.

    Args:
        name: ``grid``, ``random``, ``tpe``, ``asha``, ``hyperband`` or ``pbt``.
        space: the search space; validated here for ``max_epochs`` (or the algorithm's ``max_t``).
        max_epochs: epochs of a fully trained trial (>= 1).
        mode: ``"min"`` or ``"max"``: which metric is better (NaN counts as the worst).
        seed: the study seed, ``0 <= seed < 2**32``; with the same seed and the same told metrics
            the algorithm makes the same requests.
        study_name: the Optuna study's name (kept stable: some Optuna pruners hash it).
        options: the algorithm's own options (names case-insensitive). ``grid``: none;
            ``random``/``tpe``: ``trials`` (16), ``max_concurrent_trials`` (4); ``asha``:
            those and ``sampler`` ('random'|'tpe'), ``grace_period`` (1), ``reduction_factor`` (3),
            ``max_t``; ``hyperband``: ``sampler``, ``grace_period``, ``reduction_factor``,
            ``max_t``, ``brackets``; ``pbt``: ``trials`` (8), ``perturbation_interval`` (4),
            ``quantile_fraction`` (0.25), ``resample_probability`` (0.25), ``max_t``. The options
            common to every algorithm (``max_epochs``, ``seed``, ``metric``, ``mode``,
            ``study_name``, ``executor``, ``workers``, ``threads``, ``address``,
            ``validation_fraction``, ``features``) are the caller's and never passed here.

    Raises:
        modelsql.errors.ProgrammingError: code ``unknown_algorithm`` for another name;
            ``unknown_option`` naming an option the algorithm does not accept (and listing those it
            does); ``invalid_option`` for a bad value (of an option, ``max_epochs``, ``mode`` or
            ``seed``); ``invalid_search_space`` / ``grid_needs_choices`` from the space.
    """
    key = check_algorithm(name)
    defaults, build = ALGORITHMS[key]
    opts = Options(key, options, defaults)
    common = Options(key, {}, {"max_epochs": max_epochs, "mode": mode, "seed": seed})
    common_values = {"max_epochs": common.integer("max_epochs"), "mode": common.choice("mode", ("min", "max")),
                     "seed": common.integer("seed", 0, 2**32 - 1), "study_name": study_name}
    return build(space, opts, **common_values)

