"""Finding the rows a model fails on, and the column and value that make it fail.

ONNX Runtime fails a whole run when one row is bad (a ``OneHotEncoder`` meeting
a category it never saw: "Unknown Category and zeros = 0"), and its message
names no row. When a run over ``n`` rows fails, :func:`failing_rows` re-runs it
in halves (bisection) until it holds the failing rows: ``O(k log n)`` runs for
``k`` failing rows. :func:`culprit` then takes the first failing row and, one
input column at a time, swaps its value for that of a row that succeeded: the
column whose swap makes the row succeed is the one named, with its value.

These serve PREDICT's ``on_error`` option: ``'error'`` (the default) raises a
:class:`~modelsql.errors.DataError` from :func:`row_error`; ``'null'`` and
``'skip'`` run the rows that succeed and give the failing ones NULL outputs or
leave them out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np

from modelsql.errors import DataError

Feeds = dict[str, np.ndarray]
Run = Callable[[Feeds], list]
"""Runs the model on feeds whose first axis is the rows; raises DataError when ONNX Runtime fails."""

MAX_CULPRIT_TRIES = 256
"""At most this many single-column swaps are tried to name the failing column (wide inputs stop early)."""


@dataclass(frozen=True)
class Culprit:
    """The column, and its value, that make a row fail; ``column`` None when no single swap helps
    (or no row succeeds), ``value`` then the failing row's fed values as text."""

    column: Optional[str]
    value: object


def _rows(feeds: Feeds, index) -> Feeds:
    return {k: v[index] for k, v in feeds.items()}


def _fails(run: Run, feeds: Feeds) -> Optional[DataError]:
    try:
        run(feeds)
    except DataError as exc:
        return exc
    return None


def failing_rows(run: Run, feeds: Feeds, n: int) -> np.ndarray:
    """Indices (sorted, int64) of the rows in ``range(n)`` on which ``run`` fails, found by bisection.

    A row counts as failing when a run over a slice holding only it fails.
    """
    bad: list[int] = []
    stack = [(0, n)]
    while stack:
        lo, hi = stack.pop()
        if hi <= lo or _fails(run, _rows(feeds, slice(lo, hi))) is None:
            continue
        if hi - lo == 1:
            bad.append(lo)
            continue
        mid = (lo + hi) // 2
        stack += [(mid, hi), (lo, mid)]
    return np.array(sorted(bad), dtype=np.int64)


def _cells(args: Sequence, feeds: Feeds) -> list[tuple[str, str, Optional[int]]]:
    """``(column, input name, flat element or None for the whole row)`` for every fed column."""
    cells: list[tuple[str, str, Optional[int]]] = []
    for a in args:
        width = int(np.prod(feeds[a.input_name].shape[1:], dtype=np.int64))
        if a.kind == "matrix" and len(a.columns) == width:
            cells += [(col, a.input_name, j) for j, col in enumerate(a.columns)]
        else:
            cells.append((a.columns[0], a.input_name, None))
    return cells


def culprit(run: Run, feeds: Feeds, args: Sequence, row: int, good: Optional[int]) -> Culprit:
    """The column whose value makes ``row`` fail: the first whose value, taken from row ``good``
    (one that succeeds), makes ``row`` succeed. Without a good row, or when no single column
    does it, ``Culprit(None, None)``."""
    if good is None:
        return Culprit(None, _row_text(args, feeds, row))
    for column, name, j in _cells(args, feeds)[:MAX_CULPRIT_TRIES]:
        trial = _rows(feeds, slice(row, row + 1))
        trial = {k: v.copy() for k, v in trial.items()}
        if j is None:
            trial[name][0] = feeds[name][good]
        else:
            trial[name].reshape(1, -1)[0, j] = feeds[name][good].reshape(-1)[j]
        if _fails(run, trial) is None:
            value = feeds[name][row] if j is None else feeds[name][row].reshape(-1)[j]
            return Culprit(column, _plain(value))
    return Culprit(None, _row_text(args, feeds, row))


def _row_text(args: Sequence, feeds: Feeds, row: int) -> str:
    """The fed values of ``row`` as ``col = value, ...`` (at most 8 columns), to show with the error."""
    parts = []
    for column, name, j in _cells(args, feeds)[:8]:
        value = feeds[name][row] if j is None else feeds[name][row].reshape(-1)[j]
        parts.append(f"{column} = {_plain(value)!r}")
    return ", ".join(parts)


def _plain(value):
    value = np.asarray(value)
    if value.ndim == 0:
        return value.item()
    flat = value.reshape(-1).tolist()
    if len(flat) == 1:
        return flat[0]
    return flat if len(flat) <= 8 else flat[:8] + ["..."]


def row_error(model: str, first: DataError, bad: np.ndarray, n: int, who: Culprit) -> DataError:
    """The DataError for rows the model fails on: the column and value, how many rows, the fix."""
    rows = f"{len(bad)} of the {n} rows" if len(bad) != 1 else f"1 of the {n} rows"
    if who.column is not None:
        what = f'on column "{who.column}" value {who.value!r} ({rows} of the batch that failed)'
    else:
        what = f"on {rows} of the batch that failed (row {int(bad[0]) + 1} of that batch first"
        what += f": {who.value})" if who.value else ")"
    reason = str(first)  # "ONNX Runtime failed running <model>: [ONNXRuntimeError] ... Status Message: <why>"
    reason = reason.split("Status Message: ", 1)[1] if "Status Message: " in reason else reason.split(": ", 1)[-1]
    reason = reason.strip().rstrip(".")
    runner = "ONNX Runtime" if "ONNX Runtime" in str(first) else "the model"
    return DataError(
        f"PREDICT({model}): {runner} fails {what}: {reason}. Add on_error = 'null' to return "
        "NULL outputs for the rows it fails on, or on_error = 'skip' to leave them out.",
        code="inference_failed",
    )
