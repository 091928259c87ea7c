"""Scoring an estimator on validation rows for TUNE: EVALUATE's metrics (scikit-learn's definitions, EVALUATE's
defaults: ``'binary'`` averaging for two classes with the positive class of
:func:`modelsql.metrics.default_positive`, else ``'macro'``), computed from predictions in memory, once per
boosting stage for a boosted model (``staged_predict_proba``), so a trial of ``n`` trees has a metric after each.
"""

from __future__ import annotations

from typing import Any, Iterator, Optional, Sequence

import numpy as np

from modelsql.errors import ProgrammingError
from modelsql.metrics import default_positive

__all__ = ["CLASSIFICATION_METRICS", "REGRESSION_METRICS", "HIGHER_IS_BETTER", "LOWER_IS_BETTER", "score",
           "staged_scores", "metric_for", "checked_mode"]

CLASSIFICATION_METRICS = ("accuracy", "precision", "recall", "f1_score", "log_loss", "roc_auc")
REGRESSION_METRICS = ("mean_absolute_error", "mean_squared_error", "root_mean_squared_error",
                      "median_absolute_error", "r2_score", "explained_variance")
HIGHER_IS_BETTER = ("accuracy", "precision", "recall", "f1_score", "roc_auc", "r2_score", "explained_variance")
LOWER_IS_BETTER = ("log_loss", "mean_absolute_error", "mean_squared_error", "root_mean_squared_error",
                   "median_absolute_error")


def checked_mode(metric: str, direction: str, mode: Optional[str]) -> str:
    """TUNE's ``mode`` for ``metric``, better when ``direction`` (``'min'`` / ``'max'``): the option's, which may
    only agree (the other way would pick the worst trial).

    Raises:
        ProgrammingError: ``invalid_option`` (option ``mode``).
    """
    if mode is not None and mode != direction:
        err = ProgrammingError(f"TUNE option mode = '{mode}' would pick the worst trial: {metric} is better "
                               f"{'higher' if direction == 'max' else 'lower'} (mode '{direction}'); leave mode out.",
                               code="invalid_option")
        err.option = "mode"
        raise err
    return direction


def metric_for(metric: str, task: str) -> str:
    """The EVALUATE metric a TUNE ``metric`` names for ``task``: ``val_loss`` is the log loss of a classifier and
    the mean squared error of a regressor, ``val_accuracy`` the accuracy; an EVALUATE name is itself.

    Raises:
        ProgrammingError: ``invalid_option`` (a metric of the other task, or ``train_loss``).
    """
    named = {"val_loss": "log_loss" if task == "classification" else "mean_squared_error",
             "val_accuracy": "accuracy"}.get(metric, metric)
    allowed = CLASSIFICATION_METRICS if task == "classification" else REGRESSION_METRICS
    if named not in allowed:
        err = ProgrammingError(f"TUNE option metric = {metric!r} does not score a {task} model; use one of "
                               f"{', '.join(allowed)}.", code="invalid_option")
        err.option = "metric"
        raise err
    return named


def _classification(metric: str, y: np.ndarray, proba: np.ndarray, classes: Sequence[Any]) -> float:
    from sklearn import metrics as M

    predicted = np.asarray(classes)[np.argmax(proba, axis=1)]  # the classes' own dtype: ints, or text as objects
    truth = np.asarray(y)
    if metric == "accuracy":
        return float(M.accuracy_score(truth, predicted))
    binary = len(classes) == 2
    positive = default_positive(list(classes)) if binary else None
    if metric == "log_loss":
        return float(M.log_loss(truth, proba, labels=list(classes)))
    if metric == "roc_auc":
        if binary:
            column = list(classes).index(positive)
            return float(M.roc_auc_score(truth == positive, proba[:, column]))
        return float(M.roc_auc_score(truth.astype(str), proba, multi_class="ovr", average="macro",
                                     labels=[str(c) for c in classes]))
    scorer = {"precision": M.precision_score, "recall": M.recall_score, "f1_score": M.f1_score}[metric]
    kwargs = {"average": "binary", "pos_label": positive} if binary else {"average": "macro", "labels": list(classes)}
    return float(scorer(truth, predicted, zero_division=0.0, **kwargs))


def _regression(metric: str, y: np.ndarray, predicted: np.ndarray) -> float:
    from sklearn import metrics as M

    if metric == "root_mean_squared_error":
        return float(np.sqrt(M.mean_squared_error(y, predicted)))
    scorer = {"mean_absolute_error": M.mean_absolute_error, "mean_squared_error": M.mean_squared_error,
              "median_absolute_error": M.median_absolute_error, "r2_score": M.r2_score,
              "explained_variance": M.explained_variance_score}[metric]
    return float(scorer(y, predicted))


def score(model: Any, x: Any, y: np.ndarray, metric: str, task: str) -> float:
    """``metric`` of a fitted ``model`` on rows ``x`` with truth ``y``. A classifier without probabilities
    (``SVC``, ``LinearSVC``) is scored by its labels: its ``log_loss`` and ``roc_auc`` are NaN, as EVALUATE's are
    NULL.

    Raises:
        ProgrammingError: ``invalid_option`` for ``log_loss`` or ``roc_auc`` of a classifier without probabilities.
    """
    if task != "classification":
        return _regression(metric, y, np.ravel(model.predict(x)))
    classes = list(model.classes_)
    if hasattr(model, "predict_proba"):
        return _classification(metric, y, model.predict_proba(x), classes)
    if metric in ("log_loss", "roc_auc"):
        err = ProgrammingError(f"TUNE option metric = {metric!r} needs the model's probabilities; "
                               f"{type(model).__name__} gives none: use accuracy, precision, recall or f1_score.",
                               code="invalid_option")
        err.option = "metric"
        raise err
    predicted = np.asarray(model.predict(x))
    one_hot = (predicted[:, None] == np.asarray(classes)[None, :]).astype(np.float64)
    return _classification(metric, y, one_hot, classes)


def staged_scores(model: Any, x: Any, y: np.ndarray, metric: str, task: str, start: int) -> Iterator[float]:
    """``metric`` after each boosting stage from ``start`` (0-based) of a fitted gradient-boosting ``model``."""
    stages = model.staged_predict_proba(x) if task == "classification" else model.staged_predict(x)
    for i, values in enumerate(stages):
        if i < start:
            continue
        if task == "classification":
            yield _classification(metric, y, values, list(model.classes_))
        else:
            yield _regression(metric, y, np.ravel(values))
