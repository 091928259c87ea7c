"""Rank sums per class: the Mann-Whitney statistic behind ROC AUC.

A class's ROC AUC against the rest is ``(R - n(n+1)/2) / (n x m)``: ``R`` the sum of its rows' ranks among all
rows by the score (1 the lowest; tied rows each get the mean of their ranks), ``n`` its rows, ``m`` the others'
(Mann and Whitney 1947; Hanley and McNeil 1982). Ties counted as halves give scikit-learn's trapezoidal
``roc_auc_score`` exactly. One sort of the rows per score column is the whole cost: NumPy's, on keys that pack
the score and the class into one integer where the score is float32: 32 bits where the scores are probabilities
(in [0, 1]: 30 bits) of at most four classes, else 64.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

__all__ = ["rank_sums", "rank_sum_of", "flagged_ascending"]

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
    tied, ordered = _sorted(scores, np.asarray(classes, dtype=np.intp), count)
    n = len(ordered)
    sums = np.bincount(ordered, weights=np.arange(1, n + 1, dtype=np.float64), minlength=count)
    if tied.any():
        sums += _tie_correction(tied, ordered, count)
    return sums


def rank_sum_of(scores: np.ndarray, mine: np.ndarray) -> float:
    """The sum of the average ranks by ``scores`` of the rows ``mine`` (one class against the rest: ``rank_sums``
    of two classes, the second's).

    Args:
        scores: shape ``(n,)``, float32 or float64, no NaN.
        mine: shape ``(n,)``, bool.

    Probabilities sort packed with the row's flag in 32 bits (:func:`flagged_ascending`), and the flagged rows'
    positions are summed as a dot product of float64 integers (exact below 2**53: ``n`` up to 10**8; ``einsum``, not ``dot``: BLAS's
    threads would fight the caller's)."""
    mine = np.asarray(mine, dtype=bool)
    packed = flagged_ascending(scores, mine)
    if packed is None:
        return float(rank_sums(scores, mine.view(np.int8), 2)[1])
    flags = packed & np.uint32(1)
    total = float(np.einsum("i,i->", flags.astype(np.float64), np.arange(1, len(packed) + 1, dtype=np.float64)))
    tied = (packed[1:] ^ packed[:-1]) < 2
    if tied.any():
        total += float(_tie_correction(tied, flags.view(np.int32).astype(np.intp), 2)[1])
    return total


def flagged_ascending(scores: np.ndarray, flags: np.ndarray) -> Optional[np.ndarray]:
    """Probabilities (float32 in [0, 1]: the sign bit and bit 30 are 0) with a flag per row, sorted ascending in one
    uint32 each: the score's bits shifted one left (which drops -0.0's sign: it sorts as 0.0), the flag in bit 0.
    None for other scores (float64, outside [0, 1], NaN) or none.

    Args:
        scores: shape ``(n,)``; flags: shape ``(n,)``, bool.
    """
    if scores.dtype != np.float32 or not len(scores) or not _probabilities(scores):
        return None
    packed = scores.view(np.uint32) << np.uint32(1)
    np.bitwise_or(packed, flags, out=packed)
    packed.sort()
    return packed


def _sorted(scores: np.ndarray, classes: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Which rows tie in ascending order of ``scores`` (``tied[j]``: the rows at ``j`` and ``j + 1`` have equal
    scores) and the classes in that order. Float32 scores sort packed with their class in one integer array,
    several times faster than an argsort."""
    if scores.dtype == np.float32 and count <= 4 and len(scores) and _probabilities(scores):
        packed32 = (scores + np.float32(0.0)).view(np.uint32) << np.uint32(2)  # (bits 31 and 30 are 0 in [0, 1])
        packed32 |= classes.astype(np.uint32)
        packed32.sort()
        return (packed32[1:] ^ packed32[:-1]) < 4, (packed32 & np.uint32(3)).astype(np.intp)
    if scores.dtype == np.float32 and count <= 2**32:
        packed = _ordered_bits(scores).astype(np.uint64)
        packed <<= np.uint64(32)
        packed |= classes.astype(np.uint64, copy=False)  # (codes are not negative: the same bits)
        packed.sort()
        return (packed[1:] ^ packed[:-1]) <= _LOW32, (packed & _LOW32).view(np.intp)
    order = np.argsort(scores)
    ordered = scores[order]
    return ordered[1:] == ordered[:-1], classes[order]


def _probabilities(scores: np.ndarray) -> bool:
    """Every score lies in [0, 1] (-0.0 too; no NaN)."""
    return bool(scores.min() >= 0 and scores.max() <= 1)


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
