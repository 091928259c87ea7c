"""Classification metrics from a confusion matrix, as ``sklearn.metrics`` defines them.

``confusion[i][j]`` counts the rows whose true class is ``labels[i]`` and whose predicted class is
``labels[j]`` (``sklearn.metrics.confusion_matrix(y_true, y_pred, labels=labels)``); ``labels`` are the
classes present in either, sorted (``sklearn.utils.multiclass.unique_labels``). A ratio whose denominator
is zero is 0.0, as scikit-learn's default ``zero_division`` gives (it also warns).
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

__all__ = ["AVERAGES", "as_positive", "classification_metrics", "default_positive", "per_class"]

AVERAGES = ("binary", "macro", "weighted", "micro")
"""How precision, recall and F1 combine over classes (``sklearn.metrics.precision_recall_fscore_support``'s
``average``): ``binary`` reports the positive class alone."""


def _ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else 0.0


def per_class(confusion: Sequence[Sequence[int]]) -> list[tuple[int, int, int, int]]:
    """``(tp, fp, fn, support)`` of each class, in ``labels`` order."""
    n = len(confusion)
    out = []
    for k in range(n):
        tp = confusion[k][k]
        predicted = sum(confusion[i][k] for i in range(n))
        support = sum(confusion[k])
        out.append((tp, predicted - tp, support - tp, support))
    return out


def _scores(tp: int, fp: int, fn: int) -> tuple[float, float, float]:
    """Precision, recall and F1 of one class (F1 as scikit-learn computes F-beta: 2tp / (2tp + fp + fn))."""
    return _ratio(tp, tp + fp), _ratio(tp, tp + fn), _ratio(2 * tp, 2 * tp + fp + fn)


def _plain(labels: Sequence[Any]) -> list[Any]:
    """The labels as Python values (a fitted estimator's ``classes_`` holds NumPy scalars)."""
    return [v.item() if hasattr(v, "item") and not isinstance(v, (str, bytes)) else v for v in labels]


def _integers(labels: Sequence[Any]) -> bool:
    return bool(labels) and all(isinstance(v, int) and not isinstance(v, bool) for v in labels)


def _number(text: str) -> Any:
    """``'1'`` as 1, ``'2.0'`` as 2.0, ``'true'`` as True; other text as given."""
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        try:
            return kind(lowered)
        except ValueError:
            pass
    return text


def default_positive(labels: Sequence[Any]) -> Any:
    """The positive class of a binary task when none is named: ``True`` for booleans; for integers ``1``, as
    scikit-learn's ``pos_label=1``, when it is one of them or the only class is ``0`` (rows of one class 0 have no
    positive one), else the greatest (classes 0 and 2: 2, where scikit-learn refuses ``pos_label=1``); for text,
    the last class in sorted order. NumPy scalars count as the Python values they hold."""
    plain = _plain(labels)
    if plain and all(isinstance(label, bool) for label in plain):
        return True
    if _integers(plain):
        return 1 if 1 in plain or set(plain) <= {0} else max(plain)
    return sorted(plain)[-1]


def as_positive(option: Any, labels: Sequence[Any]) -> Any:
    """A ``positive`` option (or default) as the classes spell it: text is the number or boolean it spells for classes
    that are no text (EVALUATE's row shows classes as text); ``true`` / ``false`` is 1 / 0 for integer classes (a
    classifier fitted on a BOOLEAN target learned them as 0 / 1), and an integer is that number for classes of
    whole-number floats (a DOUBLE target); anything else as given."""
    plain = _plain(labels)
    if isinstance(option, str) and plain and not any(isinstance(v, str) for v in plain):
        option = _number(option)  # the text EVALUATE's row shows ('1') names the class 1
    if isinstance(option, bool) and _integers(plain):
        return int(option)
    if isinstance(option, int) and not isinstance(option, bool) and plain \
            and all(isinstance(v, float) for v in plain):
        return float(option)
    return option


def classification_metrics(confusion: Sequence[Sequence[int]], labels: Sequence[Any], average: str,
                           positive: Optional[Any] = None) -> dict[str, float]:
    """``accuracy``, ``precision``, ``recall`` and ``f1_score`` under ``average`` (one of :data:`AVERAGES`).

    ``binary`` scores the class ``positive`` (it must be one of ``labels``; when it is absent from both the
    true and the predicted classes every score is 0.0, as scikit-learn gives); ``micro`` pools the counts of
    every class (for single-label data each equals the accuracy).

    Raises:
        ValueError: an unknown ``average``, or ``positive`` missing for ``binary``.
    """
    classes = per_class(confusion)
    total = sum(support for *_, support in classes)
    accuracy = _ratio(sum(tp for tp, *_ in classes), total)
    if average == "binary":
        if positive is None:
            raise ValueError("average 'binary' needs the positive class")
        k = list(labels).index(positive) if positive in labels else None
        precision, recall, f1 = _scores(*classes[k][:3]) if k is not None else (0.0, 0.0, 0.0)
    elif average == "micro":
        precision, recall, f1 = _scores(sum(c[0] for c in classes), sum(c[1] for c in classes),
                                        sum(c[2] for c in classes))
    elif average in ("macro", "weighted"):
        each = [_scores(tp, fp, fn) for tp, fp, fn, _ in classes]
        weights = [float(s) for *_, s in classes] if average == "weighted" else [1.0] * len(classes)
        scale = sum(weights)
        precision, recall, f1 = (_ratio(sum(w * s[i] for w, s in zip(weights, each)), scale) for i in range(3))
    else:
        raise ValueError(f"unknown average {average!r}: one of {', '.join(AVERAGES)}")
    return {"accuracy": accuracy, "precision": precision, "recall": recall, "f1_score": f1}
