"""ROC_CURVE's points, counted in NumPy from the predictions EVALUATE read (:mod:`.class_counts`' columns ``t`` the
TARGET and ``s`` the probabilities), so the curve costs no second pass over the input.

One point per distinct probability of the positive class (highest first), with the counts of rows at or above it:
``sklearn.metrics.roc_curve(..., drop_intermediate=False)``'s points, preceded by its first point (threshold
infinity, nothing predicted positive); BigQuery ML's ``ML.ROC_CURVE`` columns. Rows without a TARGET, or without
a probability at the positive class's position, are not counted (as the evaluation's ROC AUC counts them).

Also the micro-averaged one-vs-rest ROC AUC (:func:`pooled_roc_auc`), which pools every row's every probability.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from modelsql.engine.evaluate.class_counts import class_codes
from modelsql.metrics.ranks import flagged_ascending, rank_sum_of

__all__ = ["ROC_COLUMNS", "ROC_SCHEMA", "pooled_roc_auc", "roc_points"]

ROC_COLUMNS = ("threshold", "recall", "false_positive_rate", "true_positives", "false_positives", "true_negatives",
               "false_negatives")
ROC_SCHEMA = pa.schema([(c, pa.float64() if k < 3 else pa.int64()) for k, c in enumerate(ROC_COLUMNS)])


def roc_points(predictions: pa.Table, position: int, positive: Any) -> pa.Table:
    """The curve of ``predictions`` (columns ``t`` and ``s``, a list or fixed-size list of float or double per
    row) for the class ``positive`` (a value of ``t`` as :class:`.class_counts.ClassCounts` gives its classes),
    whose probability is at ``position`` (1-based): a table of :data:`ROC_SCHEMA`, empty without a counted row."""
    x, y = _scores(predictions, position, positive)
    if not len(x):
        return ROC_SCHEMA.empty_table()
    values, flags = _descending(x, y)
    ends = np.append(np.flatnonzero(values[1:] != values[:-1]), len(values) - 1)  # each distinct value's last row
    tp = np.cumsum(flags, dtype=np.int64)[ends]
    fp = ends + 1 - tp
    p, n = int(tp[-1]), int(fp[-1])
    tp, fp = np.append(0, tp), np.append(0, fp)  # scikit-learn's first point: nothing predicted positive
    columns: dict[str, Optional[np.ndarray]] = {
        "threshold": np.append(np.inf, values[ends].astype(np.float64)), "recall": tp / p if p else None,
        "false_positive_rate": fp / n if n else None, "true_positives": tp, "false_positives": fp,
        "true_negatives": n - fp, "false_negatives": p - tp}
    return pa.table([pa.nulls(len(tp), ROC_SCHEMA.field(c).type) if columns[c] is None
                     else pa.array(columns[c], ROC_SCHEMA.field(c).type) for c in ROC_COLUMNS], schema=ROC_SCHEMA)

def pooled_roc_auc(predictions: pa.Table, where: dict[Any, int]) -> Optional[float]:
    """ROC AUC micro-averaged one-vs-rest: every row's probability at each position is one score, positive where the
    position is the row's TARGET class (``where``: class -> position, 1-based; a position of no class of the rows
    holds only negatives), ranked all together: ``sklearn.metrics.roc_auc_score(y, p, multi_class='ovr',
    average='micro', labels=classes)``, which ranks ``label_binarize(y)`` against ``p``, both flattened. None when
    the rows have no probabilities of one width, or the pooled scores are all of one side.

    Args:
        predictions: columns ``t`` (the TARGET) and ``s`` (a list or fixed-size list of float or double per row).
        where: the position of each class of the rows.
    """
    classes, codes = class_codes(predictions.column("t"))
    lists = predictions.column("s").combine_chunks()
    lengths = pc.fill_null(pc.list_value_length(lists), 0).to_numpy(zero_copy_only=False)
    counted = codes < len(classes)
    width = int(lengths[counted].max()) if counted.any() else 0
    if not width or (lengths[counted] != width).any():
        return None
    if not counted.all():
        lists, codes = lists.filter(pa.array(counted)), codes[counted]
    x = lists.flatten().to_numpy(zero_copy_only=False).reshape(len(lists), width)
    position_class = np.full(width, -1, dtype=np.int64)
    for k, label in enumerate(classes):
        if label in where and 1 <= where[label] <= width:
            position_class[where[label] - 1] = k
    flags = codes[:, None] == position_class[None, :]
    positives = int(flags.sum())
    negatives = flags.size - positives
    if not positives or not negatives:
        return None
    ranks = rank_sum_of(np.ascontiguousarray(x).ravel(), flags.ravel())
    return (ranks - positives * (positives + 1) / 2) / (positives * negatives)


def _scores(predictions: pa.Table, position: int, positive: Any) -> tuple[np.ndarray, np.ndarray]:
    """The probabilities at ``position`` of the counted rows, and whether each row is of the positive class."""
    classes, codes = class_codes(predictions.column("t"))
    mine = next((k for k, label in enumerate(classes) if type(label) is type(positive) and label == positive), -1)
    lists = predictions.column("s").combine_chunks()
    lengths = pc.fill_null(pc.list_value_length(lists), 0).to_numpy(zero_copy_only=False)
    counted = (codes < len(classes)) & (lengths >= position)
    if not counted.all():
        lists, codes = lists.filter(pa.array(counted)), codes[counted]
    flat = lists.flatten().to_numpy(zero_copy_only=False)  # (no NULL row is left: each row's values in turn)
    if isinstance(lists, pa.FixedSizeListArray):
        x = flat.reshape(len(lists), lists.type.list_size)[:, position - 1]
    else:
        offsets = lists.offsets.to_numpy()
        x = flat[offsets[:-1] - offsets[0] + position - 1]
    return np.ascontiguousarray(x), codes == mine


def _descending(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The scores highest first and each one's flag. Probabilities (float32 in [0, 1]) sort packed with their flag
    (:func:`~modelsql.metrics.ranks.flagged_ascending`, as the ranks of ROC AUC do; -0.0 becomes 0.0); anything else
    by an argsort."""
    packed = flagged_ascending(x, y)
    if packed is not None:
        packed = packed[::-1]
        return (packed >> np.uint32(1)).view(np.float32), (packed & np.uint32(1)).astype(np.int64)
    x = x + 0.0  # (-0.0 is 0.0)
    order = np.argsort(-x, kind="stable")
    return x[order], y[order].astype(np.int64)
