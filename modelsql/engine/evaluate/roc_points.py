"""ROC_CURVE's points, counted in NumPy from the predictions EVALUATE read (:mod:`.class_counts`' columns ``t`` the
TARGET and ``s`` the probabilities), so the curve costs no second pass over the input.

One point per distinct probability of the positive class (highest first), with the counts of rows at or above it:
``sklearn.metrics.roc_curve(..., drop_intermediate=False)``'s points, preceded by its first point (threshold
infinity, nothing predicted positive); BigQuery ML's ``ML.ROC_CURVE`` columns. Rows without a TARGET, or without
a probability at the positive class's position, are not counted (as the evaluation's ROC AUC counts them).
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from modelsql.engine.evaluate.class_counts import class_codes
from modelsql.metrics.ranks import flagged_ascending

__all__ = ["ROC_COLUMNS", "ROC_SCHEMA", "roc_points"]

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
