"""The validation split of a model trained in SQL: which of the query's rows train and which validate.

Methods (``validation``), BigQuery ML's ``data_split_method`` in modelsql's words:

* ``'auto'``: no split under 500 rows; a random 20% up to 50,000 rows; above that, 10,000 random rows
  (BigQuery ML's ``AUTO_SPLIT``);
* ``'random'`` (or a fraction, ``validation = 0.1``): that fraction of the rows (``validation_size``,
  default 0.2), drawn as ``sklearn.model_selection.train_test_split(range(n), test_size=fraction,
  random_state=seed)`` draws them;
* ``'seq'``: the last fraction of the rows in the query's order (``ORDER BY`` decides; ``shuffle=False``);
* ``'none'``: every row trains; the evaluation recorded is on the training rows.

Both parts keep the query's order of rows, so ``train.sort()`` after ``train_test_split`` gives the rows an
estimator fitted by hand sees.
"""

from __future__ import annotations

import math
from typing import Union

import numpy as np

from modelsql.errors import DataError

__all__ = ["SPLITS", "DEFAULT_FRACTION", "validation_rows"]

SPLITS = ("auto", "random", "seq", "none")
"""The named split methods (a number in (0, 1) is ``'random'`` with that fraction)."""

DEFAULT_FRACTION = 0.2
"""The validation fraction of ``'random'`` and ``'seq'`` when ``validation_size`` is not given."""

_AUTO_SMALL, _AUTO_LARGE, _AUTO_ROWS = 500, 50_000, 10_000


def _auto(n: int) -> tuple[str, Union[float, int]]:
    if n < _AUTO_SMALL:
        return "none", 0.0
    if n <= _AUTO_LARGE:
        return "random", DEFAULT_FRACTION
    return "random", _AUTO_ROWS


def validation_rows(n: int, method: Union[str, float], fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The positions (int64, ascending) of the training rows and of the validation rows among ``n`` rows.

    Args:
        n: the query's row count.
        method: one of :data:`SPLITS`, or a fraction in (0, 1) (``'random'`` with it).
        fraction: the validation fraction of ``'random'`` / ``'seq'``, in (0, 1).
        seed: ``random_state`` of the random draw.

    Raises:
        DataError: ``too_few_rows`` when a part would have no row.
    """
    all_rows = np.arange(n, dtype=np.int64)
    if not isinstance(method, str):
        method, fraction = "random", float(method)
    size: Union[float, int] = fraction
    if method == "auto":
        method, size = _auto(n)
    if method == "none":
        return all_rows, all_rows[:0]
    held = size if isinstance(size, int) else math.ceil(size * n)
    if held < 1 or held >= n:
        raise DataError(f"the query has {n} rows: too few to hold out {held} for validation and train on the rest "
                        "(give more rows, or hold none out where the statement can).", code="too_few_rows")
    if method == "seq":
        return all_rows[: n - held], all_rows[n - held:]
    from sklearn.model_selection import train_test_split

    train, valid = train_test_split(all_rows, test_size=held, random_state=seed, shuffle=True)
    return np.sort(train), np.sort(valid)
