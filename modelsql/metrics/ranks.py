"""Rank sums per class: the Mann-Whitney statistic behind ROC AUC.

A class's ROC AUC against the rest is ``(R - n(n+1)/2) / (n x m)``: ``R`` the sum of its rows' ranks among all
rows by the score (1 the lowest; tied rows each get the mean of their ranks), ``n`` its rows, ``m`` the others'
(Mann and Whitney 1947; Hanley and McNeil 1982). Ties counted as halves give scikit-learn's trapezoidal
``roc_auc_score`` exactly. One sort of the rows per score column is the whole cost: NumPy's, on keys that pack
the score and the class into one 64-bit integer where the score is float32.
"""

from __future__ import annotations

import numpy as np

__all__ = ["rank_sums"]

_LOW32 = np.uint64(0xFFFFFFFF)


def rank_sums(scores: np.ndarray, classes: np.ndarray, count: int) -> np.ndarray:
    """Per class the sum of its rows' average ranks by ``scores`` (``scipy.stats.rankdata(method='average')``
    summed over the class's rows).

    Args:
        scores: shape ``(n,)``, float32 or float64, no NaN (where a NaN ranks is not defined: refuse them first).
        classes: shape ``(n,)``, integer codes in ``[0, count)``.
        count: the number of classes.

    Returns:
        float64 ``(count,)``; exact (half-integers whose sums stay below 2**53) for ``n`` up to 10**8.
    """
    keys, ordered = _sorted(scores, np.asarray(classes, dtype=np.intp), count)
    n = len(keys)
    sums = np.bincount(ordered, weights=np.arange(1, n + 1, dtype=np.float64), minlength=count)
    tied = keys[1:] == keys[:-1]
    if tied.any():
        sums += _tie_correction(tied, ordered, count)
    return sums


def _sorted(scores: np.ndarray, classes: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """The scores in ascending order (as comparable keys: equal keys are equal scores) and the classes in that
    order. Float32 scores and classes below 2**32 sort as one uint64 array (the score's order-preserving bits
    above the class), several times faster than an argsort."""
    if scores.dtype == np.float32 and count <= 2**32:
        packed = _ordered_bits(scores).astype(np.uint64)
        packed <<= np.uint64(32)
        packed |= classes.astype(np.uint64, copy=False)  # (codes are not negative: the same bits)
        packed.sort()
        return packed >> np.uint64(32), (packed & _LOW32).view(np.intp)
    order = np.argsort(scores)
    return scores[order], classes[order]


def _ordered_bits(scores: np.ndarray) -> np.ndarray:
    """uint32 keys ordered as the float32 ``scores`` (-0.0 and 0.0 one key): a negative number's bits inverted,
    a positive one's sign bit set; where none is negative, the bits as they are (in the same order)."""
    bits = (scores + np.float32(0.0)).view(np.uint32)  # -0.0 + 0.0 is 0.0
    if len(bits) == 0 or scores.min() >= 0:  # (probabilities: no sign bit, so the bits are in order already)
        return bits
    return np.where(bits >> np.uint32(31) == 1, ~bits, bits | np.uint32(0x80000000))


def _tie_correction(tied: np.ndarray, ordered: np.ndarray, count: int) -> np.ndarray:
    """What turns the rows' positions (1..n in sorted order) into average ranks, per class: each row of a run of
    ties gets the run's mean position instead of its own. ``tied[j]``: the rows at ``j`` and ``j + 1`` tie."""
    in_run = np.zeros(len(ordered), dtype=bool)
    in_run[:-1] |= tied
    in_run[1:] |= tied
    rows = np.flatnonzero(in_run)
    begins = np.ones(len(rows), dtype=bool)
    begins[1:] = ~tied[rows[1:] - 1]  # a row opens a run unless it ties with the row before it
    run = np.cumsum(begins) - 1
    mean = rows[begins] + (np.bincount(run) + 1) / 2.0  # a run at positions f+1 .. f+k averages f + (k+1)/2
    return np.bincount(ordered[rows], weights=mean[run] - (rows + 1), minlength=count)
