"""How well a latency model predicts: the share of runs predicted within a tolerance, the median relative
error, the noise ceiling of the measurements themselves, and the splits they are measured on (Mantis,
Chun et al. 2010: a random small share of the runs for training, the rest held out; nn-Meter, Zhang et
al. 2021, and LitePred, NSDI 2024: the share of predictions within 10% of the measurement, and models
never seen in training).
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np
from numpy.typing import ArrayLike

from modelsql.errors import DataError, ProgrammingError

__all__ = ["relative_errors", "within", "median_relative_error", "noise_ceiling", "random_splits", "group_folds",
           "evaluate_splits"]


def _pair(predicted: ArrayLike, measured: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    p, m = np.asarray(predicted, dtype=np.float64).ravel(), np.asarray(measured, dtype=np.float64).ravel()
    if p.shape != m.shape or p.size == 0:
        raise ProgrammingError(f"need two equally long non-empty arrays, got {p.size} and {m.size} values",
                               code="invalid_option")
    if not (np.isfinite(m) & (m > 0)).all() or not np.isfinite(p).all():
        raise DataError("measurements must be finite and positive, predictions finite", code="invalid_latency")
    return p, m


def relative_errors(predicted: ArrayLike, measured: ArrayLike) -> np.ndarray:
    """float64 ``[n]``: ``|predicted - measured| / measured``, elementwise (same units on both sides).

    Raises:
        ProgrammingError: ``invalid_option`` for arrays of different or zero length.
        DataError: ``invalid_latency`` for a measurement that is not finite and positive, or a NaN prediction.
    """
    p, m = _pair(predicted, measured)
    return np.abs(p - m) / m


def within(predicted: ArrayLike, measured: ArrayLike, tol: float = 0.10) -> float:
    """The share (0..1) of points whose prediction is within ``tol`` (relative) of the measurement: nn-Meter's
    "±10% accuracy". Raises as :func:`relative_errors`."""
    return float(np.mean(relative_errors(predicted, measured) <= tol + 1e-12))


def median_relative_error(predicted: ArrayLike, measured: ArrayLike) -> float:
    """The median of :func:`relative_errors`. Raises as it."""
    return float(np.median(relative_errors(predicted, measured)))


def noise_ceiling(first_medians: Sequence[float], second_medians: Sequence[float], tol: float = 0.10) -> float:
    """The share of points whose median latency in one measurement pass is within ``tol`` of the same point's
    median in a second, independent pass: :func:`within` with the first pass as the "prediction" of the second.
    No model predicting one pass from anything can be expected to do much better. Raises as :func:`within`."""
    return within(first_medians, second_medians, tol)


def random_splits(n: int, train_share: float = 0.10, splits: int = 10, seed: int = 0,
                  min_train: int = 1) -> list[tuple[np.ndarray, np.ndarray]]:
    """``splits`` random (train, test) index partitions of ``range(n)``, each with ``max(min_train,
    ceil(train_share * n))`` training points (Mantis's "<10% training data") and the rest held out.

    Raises:
        ProgrammingError: ``invalid_option`` when that leaves no test point, or for a share outside (0, 1).
    """
    if not 0 < train_share < 1:
        raise ProgrammingError(f"train_share must be in (0, 1), got {train_share!r}", code="invalid_option")
    k = max(min_train, math.ceil(train_share * n))
    if k >= n:
        raise ProgrammingError(f"{n} points leave none to test with {k} for training", code="invalid_option")
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(splits):
        order = rng.permutation(n)
        out.append((np.sort(order[:k]), np.sort(order[k:])))
    return out


def group_folds(groups: Sequence[str], folds: int = 5, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """Leave-groups-out (train, test) index partitions: the distinct ``groups`` (model names) are shuffled and
    dealt into ``folds`` folds; each fold's points are the test set of one partition, every other point trains.
    Every point is tested exactly once, by a model that never saw its group.

    Raises:
        ProgrammingError: ``invalid_option`` for fewer than two groups or ``folds < 2``.
    """
    names = sorted(set(groups))
    if len(names) < 2 or folds < 2:
        raise ProgrammingError(f"leave-groups-out needs 2+ groups and folds, got {len(names)} and {folds}",
                               code="invalid_option")
    order = [names[i] for i in np.random.default_rng(seed).permutation(len(names))]
    dealt = [set(order[i::min(folds, len(names))]) for i in range(min(folds, len(names)))]
    g = np.asarray(groups)
    return [(np.flatnonzero(~np.isin(g, list(d))), np.flatnonzero(np.isin(g, list(d)))) for d in dealt]


def evaluate_splits(fit_predict: Callable[[np.ndarray, np.ndarray], np.ndarray], measured: Sequence[float],
                    splits: Sequence[tuple[np.ndarray, np.ndarray]], tol: float = 0.10) -> dict:
    """Score ``fit_predict(train_idx, test_idx) -> predictions for test_idx`` on each split.

    Returns:
        ``{"within": [per split], "median_rel_error": [per split], "pooled_within", "pooled_median_rel_error",
        "predicted": float64 [n] (mean prediction of each point over the splits that tested it, NaN if none)}``.
    """
    m = np.asarray(measured, dtype=np.float64)
    sums, counts = np.zeros(len(m)), np.zeros(len(m))
    per_within, per_median, errors = [], [], []
    for train, test in splits:
        p = np.asarray(fit_predict(train, test), dtype=np.float64)
        per_within.append(within(p, m[test], tol))
        per_median.append(median_relative_error(p, m[test]))
        errors.append(relative_errors(p, m[test]))
        sums[test] += p
        counts[test] += 1
    pooled = np.concatenate(errors)
    return {"within": per_within, "median_rel_error": per_median,
            "pooled_within": float(np.mean(pooled <= tol + 1e-12)), "pooled_median_rel_error": float(np.median(pooled)),
            "predicted": np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)}
