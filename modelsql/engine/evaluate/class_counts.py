"""What a classifier's evaluation counts, from its predictions as Arrow columns.

EVALUATE's query of a classifier reads its PREDICT once and hands over four columns as Arrow (never Python objects):
``t`` the TARGET, ``p`` the predicted class, ``s`` the probabilities when the model gives them, ``h`` each input
row's hash. Here Arrow's hash kernels number the classes (``pyarrow.compute.unique`` and ``index_in``: text
compared byte for byte, as ``COLLATE c`` and scikit-learn compare it) and NumPy counts: the rows, those whose
TARGET is NULL, the fingerprint (the sum of the hashes modulo 2**64), the confusion counts per (true, predicted)
value, per predicted value the rows whose largest probability is at each position, and the statistics of the
probabilities (:mod:`.score_stats`). One read of the predictions, vectorized work over it; where ROC AUC needs
every row ranked, NumPy sorts about ten times faster than DuckDB's windows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from modelsql.engine.evaluate.score_stats import Scores, statistics

__all__ = ["ClassCounts", "class_counts", "class_codes"]


@dataclass(frozen=True)
class ClassCounts:
    """A classifier's counts over the rows read (see the module).

    Attributes:
        rows: every row read; ``null_targets``: those whose TARGET is NULL; ``digest``: the sum of the rows'
            hashes modulo 2**64 (:func:`.queries.fingerprint_text` writes it).
        confusion: per (true value ``t``, predicted value ``p``, None for a NULL prediction) present among the
            rows with a TARGET, their count ``n``.
        positions: per predicted value ``p`` and 1-based position ``i``, the rows ``n`` whose largest probability
            (the first of equal ones) is at ``i``; empty when not asked for or without probabilities.
        classes: the TARGET's distinct values; the ``k``-th is numbered ``k`` in ``scores``.
        scores: :func:`.score_stats.statistics` over the rows with a TARGET and probabilities (None without
            probabilities).
    """

    rows: int
    null_targets: int
    digest: int
    confusion: list[dict[str, Any]]
    positions: list[dict[str, Any]]
    classes: list[Any]
    scores: Optional[dict[str, Any]]


def class_counts(table: pa.Table, positions: bool, ranked: Optional[int], threshold: Optional[float],
                 model_classes: Optional[Sequence[Any]] = None) -> ClassCounts:
    """The counts of the predictions ``table`` (columns ``t``, ``p``, ``h`` and optionally ``s``, a list or
    fixed-size list of float or double).

    Args:
        positions: count where each row's largest probability is (:attr:`ClassCounts.positions`).
        ranked: the one probability position ROC AUC reads (1-based), None for every one.
        threshold: the probability from which the positive class is predicted (counted per position), or None.
        model_classes: the classes the model names, in its probabilities' order, when it names them: then the
            log-probabilities are summed only where log loss reads them (each class's own position).
    """
    classes, target_codes = _codes(_labels(table.column("t")))
    values, predicted_codes = _codes(_labels(table.column("p")))
    valid = target_codes < len(classes)
    everyone = bool(valid.all())
    confusion = _pairs(target_codes if everyone else target_codes[valid],
                       predicted_codes if everyone else predicted_codes[valid], len(classes), len(values))
    labels, predictions = _python(classes), _python(values)
    found = [{"t": labels[a], "p": predictions[b] if b < len(values) else None, "n": n} for a, b, n in confusion]
    scores, where = None, []
    if "s" in table.column_names:
        lists = _whole(table.column("s"))
        rows = _with_scores(target_codes, valid, lists)
        logged = _logged(model_classes, labels, rows.positions)
        scores = statistics(rows, len(classes), ranked, threshold, logged)
        if positions:
            where = _where(_with_scores(predicted_codes, np.ones(len(valid), dtype=bool), lists), predictions)
    digest = int(np.add.reduce(table.column("h").to_numpy(), dtype=np.uint64)) if table.num_rows else 0
    return ClassCounts(table.num_rows, int(len(valid) - valid.sum()), digest, found, where, labels, scores)


def class_codes(column: pa.ChunkedArray) -> tuple[list[Any], np.ndarray]:
    """A column of class values' distinct values (Python values, as :attr:`ClassCounts.classes` gives them) and
    each row's number among them (their count for NULL)."""
    values, codes = _codes(_labels(column))
    return _python(values), codes


def _with_scores(codes: np.ndarray, valid: np.ndarray, lists: pa.Array) -> Scores:
    """The rows ``valid`` that have probabilities (``lists`` not NULL), with their ``codes``."""
    if lists.null_count:
        valid = valid & lists.is_valid().to_numpy(zero_copy_only=False)
    if valid.all():
        return Scores.of(codes, lists)
    return Scores.of(codes[valid], lists.filter(pa.array(valid)))


def _logged(model_classes: Optional[Sequence[Any]], labels: list[Any], width: int) -> Optional[dict[int, int]]:
    """Per probability position (1-based), the code of the TARGET's class the model puts there, when the model
    names one class per position (:func:`.queries.positions_of` reads the same); None otherwise."""
    if model_classes is None or len(model_classes) != width:
        return None
    where = {label: k + 1 for k, label in enumerate(model_classes)}
    return {where[label]: c for c, label in enumerate(labels) if label in where}


def _whole(column: pa.ChunkedArray) -> pa.Array:
    return column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)


def _labels(column: pa.ChunkedArray) -> pa.Array:
    """A column of class values as one array; floating values with -0.0 made 0.0 (one class, as DuckDB groups
    them)."""
    array = _whole(column)
    if pa.types.is_floating(array.type):
        array = pc.add(array, pa.scalar(0.0, array.type))
    return array


def _codes(array: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """The distinct non-NULL values of ``array`` and each row's number among them (their count for NULL):
    integers without NULL spanning no more values than rows by a table, anything else by Arrow's hashing."""
    if pa.types.is_integer(array.type) and len(array) and not array.null_count:
        numbers = array.to_numpy()
        low, high = int(numbers.min()), int(numbers.max())
        if high - low <= len(numbers) + 1024:
            base = np.uint64(low % 2**64)
            if low == 0 and numbers.dtype == np.int64:
                offsets = numbers.view(np.intp)  # (classes 0, 1, ...: their own offsets)
            else:  # in uint64, where subtraction wraps: a value's distance from the lowest, whatever its width
                offsets = (numbers.astype(np.uint64) - base).astype(np.intp)
            present = np.flatnonzero(np.bincount(offsets, minlength=high - low + 1))
            values = (present.astype(np.uint64) + base).astype(numbers.dtype)  # (the wrap undone)
            if len(present) == high - low + 1:
                return pa.array(values, type=array.type), offsets  # every value between: offsets are codes
            table = np.zeros(high - low + 1, dtype=np.intp)
            table[present] = np.arange(len(present))
            return pa.array(values, type=array.type), table[offsets]
    values = pc.unique(array.drop_null()) if array.null_count else pc.unique(array)
    codes = pc.index_in(array, value_set=values)
    if codes.null_count:
        codes = pc.fill_null(codes, len(values))
    return values, codes.to_numpy().astype(np.intp)


def _python(values: pa.Array) -> list[Any]:
    """Class values as Python values, as DuckDB gives them: a HUGEINT's (read as a decimal of scale 0) an int."""
    found = values.to_pylist()
    if pa.types.is_decimal(values.type) and values.type.scale == 0:
        return [None if v is None else int(v) for v in found]
    return found


def _pairs(first: np.ndarray, second: np.ndarray, firsts: int, seconds: int) -> list[tuple[int, int, int]]:
    """The distinct ``(first, second)`` code pairs (``second`` up to ``seconds`` inclusive) and their counts."""
    span = seconds + 1
    keys = first * span + second
    if firsts * span <= 4 * len(keys) + 1024:
        counts = np.bincount(keys, minlength=firsts * span)
        present = np.flatnonzero(counts)
        counted = counts[present]
    else:  # many distinct values (a TARGET of identifiers): sort them instead of a table of every pair
        present, counted = np.unique(keys, return_counts=True)
    return [(int(k // span), int(k % span), int(n)) for k, n in zip(present, counted)]


def _where(rows: Scores, values: list[Any]) -> list[dict[str, Any]]:
    """Per predicted value (``values[code]``; NULL past them) and position, the rows whose largest probability is
    first at that position."""
    at = rows.first_largest()
    have = at >= 0
    pairs = _pairs(rows.codes[have], at[have], len(values) + 1, max(rows.positions - 1, 0))
    return [{"p": values[a] if a < len(values) else None, "i": b + 1, "n": n} for a, b, n in pairs]
