"""The statistics of a classifier's probabilities an evaluation needs, computed in NumPy by a function its query
calls once, over the one list DuckDB aggregates of every scored row.

Ranking is what ROC AUC costs: DuckDB ranks a column of a million rows by a window in about 70 ms on two cores,
NumPy sorts it in about 7 (:mod:`modelsql.metrics.ranks`). The query hands the function
``list({'c': class code, 's': probabilities})`` (the class codes number the TARGET's distinct values, so the
function never sees a label's type) and reads back per (class code ``c``, probability position ``i``, 1-based)
the rows ``n``, the sum ``ln`` of their clipped log-probabilities (log loss), the sum ``r`` of their average
ranks by that position's probability (NULL where the position is not ranked) and the count ``hits`` reaching
the threshold; and over every probability their range ``lo``, ``hi``, the count ``bad`` of rows with a NaN or
infinite one and ``drift``, how far a row's probabilities sum from 1 at most.
"""

from __future__ import annotations

import itertools
import os
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Optional, Sequence

import duckdb
import numpy as np
import pyarrow as pa
from duckdb.func import FunctionNullHandling, PythonUDFType

from modelsql.metrics.ranks import rank_sums

__all__ = ["ScoreFunction", "score_function", "registered", "statistics", "EPS"]

EPS = 2.220446049250313e-16
"""The clip of probabilities in log loss: float64's machine epsilon (scikit-learn's ``log_loss``)."""

_ENTRY = pa.struct([("c", pa.uint32()), ("i", pa.int32()), ("n", pa.int64()), ("ln", pa.float64()),
                    ("r", pa.float64()), ("hits", pa.int64())])
_RESULT = pa.struct([("entries", pa.list_(_ENTRY)), ("lo", pa.float64()), ("hi", pa.float64()),
                     ("bad", pa.int64()), ("drift", pa.float64())])
RESULT_SQL = ("STRUCT(entries STRUCT(c UINTEGER, i INTEGER, n BIGINT, ln DOUBLE, r DOUBLE, hits BIGINT)[], "
              "lo DOUBLE, hi DOUBLE, bad BIGINT, drift DOUBLE)")
_COUNTER = itertools.count(1)


@dataclass(frozen=True)
class ScoreFunction:
    """A function an evaluation's query calls: ``name(list, ranked INTEGER, threshold DOUBLE)`` with ``list``
    of type ``STRUCT(c UINTEGER, s <probabilities' type>)[]``; ``ranked`` 0 ranks every position, else that one
    position; ``threshold`` NULL counts no hits."""

    name: str
    probabilities_type: str

    def register(self, duck: duckdb.DuckDBPyConnection) -> None:
        """Register on the connection (the caller removes it with ``duck.remove_function(name)``)."""
        duck.create_function(
            self.name, _call, [duckdb.sqltype(f"STRUCT(c UINTEGER, s {self.probabilities_type})[]"),
                               duckdb.sqltype("INTEGER"), duckdb.sqltype("DOUBLE")],
            duckdb.sqltype(RESULT_SQL), type=PythonUDFType.ARROW, null_handling=FunctionNullHandling.SPECIAL)


def score_function(probabilities_type: str) -> ScoreFunction:
    """A new function (a name of its own) for probabilities of DuckDB type ``probabilities_type``
    (``FLOAT[3]``, ``DOUBLE[]``)."""
    return ScoreFunction(f"__msql_score_stats_{next(_COUNTER)}", probabilities_type)


@contextmanager
def registered(functions: Sequence[ScoreFunction], duck: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """``functions`` registered on ``duck`` while the block runs."""
    done: list[str] = []
    try:
        for function in functions:
            function.register(duck)
            done.append(function.name)
        yield
    finally:
        for name in done:
            try:
                duck.remove_function(name)
            except duckdb.Error:
                pass  # (in a transaction a failure aborted: DuckDB refuses, as it does the stream PREDICT's)


def _call(scored: Any, ranked: Any, threshold: Any) -> pa.Array:
    """The Arrow function DuckDB calls (a chunk of rows; the query's one row, in practice)."""
    scored, ranked, threshold = (_whole(a) for a in (scored, ranked, threshold))
    out: list[Optional[dict[str, Any]]] = []
    for k in range(len(scored)):
        value = scored[k]
        if not value.is_valid:
            out.append(None)
            continue
        at, thr = ranked[k].as_py(), threshold[k].as_py()
        out.append(statistics(value.values, at or None, thr))
    return pa.array(out, type=_RESULT)


def _whole(array: Any) -> pa.Array:
    return array.combine_chunks() if isinstance(array, pa.ChunkedArray) else array


def statistics(rows: pa.StructArray, ranked: Optional[int], threshold: Optional[float]) -> dict[str, Any]:
    """The statistics of the scored rows ``rows`` (fields ``c``, ``s``); see the module. ``ranked``: the one
    position ranked (1-based), None for every one. The positions are worked on in threads (NumPy's sorts let go
    of the GIL)."""
    scores = _Scores.of(rows)
    codes, values = scores.codes, scores.values
    count = int(codes.max()) + 1 if len(codes) else 0
    work = [(i, ranked in (None, i + 1)) for i in range(scores.positions)]
    with ThreadPoolExecutor(max_workers=max(1, min(len(work), os.cpu_count() or 1))) as pool:
        parts = pool.map(lambda w: _entries(w[0], *scores.position(w[0]), w[1], count, threshold), work)
        entries = [e for part in parts for e in part]
    sums = scores.row_sums()
    return {"entries": entries, "lo": float(values.min()) if len(values) else None,
            "hi": float(values.max()) if len(values) else None, "bad": scores.rows_not_finite(),
            "drift": float(np.abs(sums - 1.0).max()) if len(sums) else None}


@dataclass(frozen=True)
class _Scores:
    """The rows' class codes ``(n,)`` and probabilities: ``values`` flat, row ``j`` at
    ``values[offsets[j]:offsets[j + 1]]``, or at ``values[j * width:(j + 1) * width]`` when every row has
    ``width`` (then ``offsets`` is None)."""

    codes: np.ndarray
    values: np.ndarray
    width: Optional[int]
    offsets: Optional[np.ndarray]

    @staticmethod
    def of(rows: pa.StructArray) -> "_Scores":
        code_array, lists = rows.flatten()  # (respects the struct's offset, as .field() does not)
        codes = code_array.to_numpy(zero_copy_only=False).astype(np.intp)
        values = lists.flatten().to_numpy(zero_copy_only=False)
        if isinstance(lists, pa.FixedSizeListArray):
            return _Scores(codes, values, lists.type.list_size, None)
        offsets = lists.offsets.to_numpy()
        offsets = offsets - offsets[0]
        lengths = np.diff(offsets)
        if len(lengths) and lengths[0] > 0 and (lengths == lengths[0]).all():
            return _Scores(codes, values, int(lengths[0]), None)
        return _Scores(codes, values, None, offsets)

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


def _entries(i: int, x: np.ndarray, codes: np.ndarray, ranked: bool, count: int,
             threshold: Optional[float]) -> list[dict[str, Any]]:
    """The entries of position ``i`` (0-based), one per class present."""
    rows = np.bincount(codes, minlength=count)
    wide = x.astype(np.float64)
    with np.errstate(invalid="ignore"):
        hits = (np.bincount(codes, weights=wide >= threshold, minlength=count) if threshold is not None
                else np.zeros(count))
        ln = np.bincount(codes, weights=np.log(np.clip(wide, EPS, 1 - EPS, out=wide), out=wide), minlength=count)
    r = rank_sums(x, codes, count) if ranked else None
    return [{"c": c, "i": i + 1, "n": int(rows[c]), "ln": float(ln[c]), "r": float(r[c]) if r is not None else None,
             "hits": int(hits[c])} for c in range(count) if rows[c]]
