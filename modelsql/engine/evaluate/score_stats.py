"""The statistics of a classifier's probabilities an evaluation needs, computed in NumPy over every row with a
TARGET and probabilities (:mod:`.class_counts` hands them over).

Ranking is what ROC AUC costs: DuckDB ranks a column of a million rows by a window in about 70 ms on two cores,
NumPy sorts it in about 7 (:mod:`modelsql.metrics.ranks`). Per (class code ``c``, probability position ``i``,
1-based) the rows ``n``, the sum ``ln`` of their clipped log-probabilities (log loss), the sum ``r`` of their
average ranks by that position's probability (None where the position is not ranked) and the count ``hits``
reaching the threshold; and over every probability their range ``lo``, ``hi``, the count ``bad`` of rows with a
NaN or infinite one and ``drift``, how far a row's probabilities sum from 1 at most.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import pyarrow as pa

from modelsql.metrics.ranks import rank_sum_of, rank_sums

__all__ = ["Scores", "statistics", "EPS"]

EPS = 2.220446049250313e-16
"""The clip of probabilities in log loss: float64's machine epsilon (scikit-learn's ``log_loss``)."""


def statistics(scores: "Scores", count: int, ranked: Optional[int], threshold: Optional[float],
               logged: Optional[dict[int, int]] = None) -> dict[str, Any]:
    """The statistics of the rows ``scores`` whose class codes lie in ``[0, count)`` (see the module):
    ``{"entries": [{"c", "i", "n", "ln", "r", "hits"}, ...], "lo", "hi", "bad", "drift"}``. ``ranked``: the one
    position ranked (1-based), None for every one; ``threshold`` None counts no hits; ``logged``, when the class
    of each position is known before (the model names its classes), maps a position (1-based) to the one class
    code whose ``ln`` log loss and ``r`` one-vs-rest ROC AUC read there (the others' are None; a position not in
    it has none).

    Each position's ranking and its counting are two tasks for the process's few threads kept for them (NumPy
    lets go of the GIL), the overall figures worked out meanwhile: threads
    started per call got their large arrays from memory the system had taken back, and faulting it in again
    cost more than the work (two to four times the time, in system time, on a virtual machine)."""
    pool = _pool()
    shared = np.bincount(scores.codes, minlength=count) if scores.offsets is None else None  # (every position's)
    ranks, counts = {}, []
    for i in range(scores.positions):
        x, codes = scores.position(i)
        of = None if logged is None else logged.get(i + 1, -1)
        if ranked in (None, i + 1):
            ranks[i] = pool.submit(_rank_sums, x, codes, count, of)
        counts.append(pool.submit(_counted, x, codes, count, threshold, of, shared))
    overall = _overall(scores)  # (here, while the threads work)
    entries = []
    for i, counted in enumerate(counts):
        entries += _entries(i, *counted.result(), ranks[i].result() if i in ranks else None)
    return {"entries": entries, **overall}


_POOL: dict[int, ThreadPoolExecutor] = {}
_POOL_LOCK = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    """The threads :func:`statistics` works in: as many as the cores, at most four, started on first use in this
    process (a process forked from one that had them has none of its threads: it starts its own)."""
    with _POOL_LOCK:
        pid = os.getpid()
        if pid not in _POOL:
            _POOL.clear()
            _POOL[pid] = ThreadPoolExecutor(max_workers=max(1, min(4, os.cpu_count() or 1)),
                                            thread_name_prefix="modelsql-scores")
        return _POOL[pid]


@dataclass(frozen=True)
class Scores:
    """The rows' class codes ``(n,)`` and probabilities: ``values`` flat, row ``j`` at
    ``values[offsets[j]:offsets[j + 1]]``, or at ``values[j * width:(j + 1) * width]`` when every row has
    ``width`` (then ``offsets`` is None)."""

    codes: np.ndarray
    values: np.ndarray
    width: Optional[int]
    offsets: Optional[np.ndarray]

    @staticmethod
    def of(codes: np.ndarray, lists: pa.Array) -> "Scores":
        """The rows' class codes ``(n,)`` and their probabilities: ``lists`` an Arrow list or fixed-size list
        array of ``n`` rows, none of them NULL."""
        values = lists.flatten().to_numpy(zero_copy_only=False)  # (respects a sliced array's offset)
        if isinstance(lists, pa.FixedSizeListArray):
            return Scores(codes, values, lists.type.list_size, None)
        offsets = lists.offsets.to_numpy()
        offsets = offsets - offsets[0]
        lengths = np.diff(offsets)
        if len(lengths) and lengths[0] > 0 and (lengths == lengths[0]).all():
            return Scores(codes, values, int(lengths[0]), None)
        return Scores(codes, values, None, offsets)

    @property
    def positions(self) -> int:
        """The most probabilities a row has."""
        if self.offsets is None:
            return self.width or 0
        return int(np.diff(self.offsets).max()) if len(self.codes) else 0

    def position(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """The probabilities at position ``i`` (0-based) of the rows having it, and those rows' class codes."""
        if self.offsets is None:
            return np.ascontiguousarray(self.values.reshape(-1, self.width or 1)[:, i]), self.codes
        have = np.diff(self.offsets) > i
        return self.values[self.offsets[:-1][have] + i], self.codes[have]

    def first_largest(self) -> np.ndarray:
        """Each row's 0-based position of its largest probability, the first of equal ones (a NaN is the largest,
        as DuckDB's ``list_position(s, list_max(s))`` has it); -1 for a row with none."""
        if self.offsets is None:
            if not self.width:
                return np.full(len(self.codes), -1, dtype=np.intp)
            return np.argmax(self.values.reshape(-1, self.width), axis=1)  # (the first NaN, where a row has one)
        lengths = np.diff(self.offsets)
        out = np.full(len(lengths), -1, dtype=np.intp)
        rows = np.flatnonzero(lengths > 0)
        if not len(rows):
            return out
        starts = self.offsets[:-1][rows]
        best = np.maximum.reduceat(self.values, starts)  # (NaN where a row has one: maximum propagates it)
        for i in range(int(lengths.max())):
            open_ = (lengths[rows] > i) & (out[rows] < 0)
            value, top = self.values[starts[open_] + i], best[open_]
            hit = (value == top) | (np.isnan(value) & np.isnan(top))
            out[rows[open_][hit]] = i
        return out

    def rows_not_finite(self) -> int:
        """The rows with a NaN or infinite probability."""
        bad = ~np.isfinite(self.values)
        if not bad.any():
            return 0
        if self.offsets is None:
            return int(bad.reshape(-1, self.width or 1).any(axis=1).sum())
        starts = self.offsets[:-1][np.diff(self.offsets) > 0]
        return int(np.logical_or.reduceat(bad, starts).sum())

    def row_sums(self) -> np.ndarray:
        """Each non-empty row's sum, float64."""
        if self.offsets is None:
            if not self.width:
                return np.zeros(0)
            rows = self.values.reshape(-1, self.width)
            out = rows[:, 0].astype(np.float64)
            for i in range(1, self.width):  # column by column: several times faster than .sum(axis=1)
                out += rows[:, i]
            return out
        starts = self.offsets[:-1][np.diff(self.offsets) > 0]
        return np.add.reduceat(self.values.astype(np.float64), starts) if len(starts) else np.zeros(0)


def _counted(x: np.ndarray, codes: np.ndarray, count: int, threshold: Optional[float], logged: Optional[int],
             rows: Optional[np.ndarray]) -> tuple[np.ndarray, np.ndarray, list[Optional[float]]]:
    """Per class: the rows having probabilities ``x`` (``rows`` when counted already), those reaching
    ``threshold`` and the sum of their log-probabilities (of the class ``logged`` only when given; -1: of
    none)."""
    if rows is None:
        rows = np.bincount(codes, minlength=count)
    with np.errstate(invalid="ignore"):
        hits = (np.bincount(codes, weights=x >= np.float64(threshold), minlength=count) if threshold is not None
                else np.zeros(count))
    if logged is None:
        return rows, hits, np.bincount(codes, weights=_log(x), minlength=count).tolist()
    ln: list[Optional[float]] = [None] * count
    if logged >= 0:
        ln[logged] = float(_log(x[codes == logged]).sum())
    return rows, hits, ln


def _rank_sums(x: np.ndarray, codes: np.ndarray, count: int, logged: Optional[int]) -> list[Optional[float]]:
    """Per class the sum of its rows' average ranks by ``x``; of the class ``logged`` alone when given (-1: of
    none; the others None), ranked against the rest (:func:`~modelsql.metrics.ranks.rank_sum_of`: probabilities
    sort in 32 bits whatever the number of classes)."""
    if logged is None:
        return rank_sums(x, codes, count).tolist()
    out: list[Optional[float]] = [None] * count
    if logged >= 0:
        out[logged] = rank_sum_of(x, codes == logged)
    return out


def _entries(i: int, rows: np.ndarray, hits: np.ndarray, ln: list[Optional[float]],
             r: Optional[list[Optional[float]]]) -> list[dict[str, Any]]:
    """The entries of position ``i`` (0-based), one per class present."""
    return [{"c": c, "i": i + 1, "n": int(rows[c]), "ln": ln[c], "r": r[c] if r is not None else None,
             "hits": int(hits[c])} for c in range(len(rows)) if rows[c]]


def _overall(scores: "Scores") -> dict[str, Any]:
    """Over every probability: their range ``lo``, ``hi``, the rows ``bad`` with a NaN or infinite one and
    ``drift``, how far a row's probabilities sum from 1 at most."""
    values, sums = scores.values, scores.row_sums()
    return {"lo": float(values.min()) if len(values) else None, "hi": float(values.max()) if len(values) else None,
            "bad": scores.rows_not_finite(), "drift": float(np.abs(sums - 1.0).max()) if len(sums) else None}


def _log(x: np.ndarray) -> np.ndarray:
    """ln of the probabilities ``x`` clipped to [EPS, 1 - EPS], float64."""
    wide = x.astype(np.float64)
    with np.errstate(invalid="ignore"):
        return np.log(np.clip(wide, EPS, 1 - EPS, out=wide), out=wide)
