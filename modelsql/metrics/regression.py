"""Regression metrics from sums over the rows, as ``sklearn.metrics`` defines them (``force_finite=True``:
a constant target gives R2 and explained variance 1.0 when predicted exactly, else 0.0)."""

from __future__ import annotations

import math
from typing import Optional

__all__ = ["regression_metrics"]


def _one_minus(numerator: float, denominator: float) -> float:
    """``1 - numerator / denominator`` with scikit-learn's finite answers for a zero denominator."""
    if denominator == 0.0:
        return 1.0 if numerator == 0.0 else 0.0
    return 1.0 - numerator / denominator


def regression_metrics(*, rows: int, abs_error_sum: float, squared_error_sum: float, median_abs_error: float,
                       target_var_pop: float, error_var_pop: float) -> dict[str, Optional[float]]:
    """The metrics of ``rows`` predictions from their sums: ``abs_error_sum`` = sum |y - p|,
    ``squared_error_sum`` = sum (y - p)^2, ``median_abs_error`` = median |y - p|, ``target_var_pop`` = the
    population variance of y, ``error_var_pop`` = that of y - p. Returns ``mean_absolute_error``,
    ``mean_squared_error``, ``root_mean_squared_error``, ``median_absolute_error``, ``r2_score`` and
    ``explained_variance`` (``explained_variance_score``); ``r2_score`` is None for one row (scikit-learn:
    not defined, NaN).

    Raises:
        ValueError: ``rows`` is not positive.
    """
    if rows <= 0:
        raise ValueError("no rows to evaluate")
    mse = squared_error_sum / rows
    return {"mean_absolute_error": abs_error_sum / rows, "mean_squared_error": mse,
            "root_mean_squared_error": math.sqrt(mse), "median_absolute_error": median_abs_error,
            "r2_score": _one_minus(squared_error_sum, target_var_pop * rows) if rows >= 2 else None,
            "explained_variance": _one_minus(error_var_pop, target_var_pop)}
