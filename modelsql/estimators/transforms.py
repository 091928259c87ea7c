"""Manual preprocessing (BigQuery ML's ``TRANSFORM`` clause): what each ``ML.<function>(column) OVER ()`` of a
model's ``TRANSFORM`` fits on the training rows, as a scikit-learn transformer inside the model.

BigQuery ML's analytic preprocessing functions compute statistics over the training rows (``OVER ()``) and apply
the same statistics when the model predicts; here each is the scikit-learn transformer that does so, fitted in the
model's ``ColumnTransformer`` on its one input column and converted with the estimator into the model's ONNX graph
(so PREDICT, SERVE and EXPORT apply it too):

==============================================  =====================================================  ==========
function                                        scikit-learn                                           column
==============================================  =====================================================  ==========
``ML.STANDARD_SCALER(x)``                       ``StandardScaler()``                                   number
``ML.MIN_MAX_SCALER(x)``                        ``MinMaxScaler(clip=True)`` (values past the training  number
                                                range are capped to 0 or 1, as BigQuery ML does)
``ML.MAX_ABS_SCALER(x)``                        ``MaxAbsScaler()``                                     number
``ML.ROBUST_SCALER(x)``                         ``RobustScaler()`` (median, interquartile range)       number
``ML.QUANTILE_BUCKETIZE(x, n)``                 ``KBinsDiscretizer(n, strategy="quantile")``, one-hot   number
                                                encoded (BigQuery ML's buckets are categories)
``ML.ONE_HOT_ENCODER(c)``                       ``OneHotEncoder(handle_unknown="ignore")``             text
``ML.LABEL_ENCODER(c)``                         ``OrdinalEncoder`` (an unseen value is -1)             text
==============================================  =====================================================  ==========

A plain column in the clause gets the automatic preprocessing (:mod:`.preprocessing`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

__all__ = ["Transform", "FUNCTIONS", "MAX_BUCKETS", "one_hot_encoder", "transformer", "transform_columns",
           "transforms_json", "transforms_from_json", "transforms_text"]


@dataclass(frozen=True)
class Transform:
    """One item of a ``TRANSFORM`` clause: its output ``name``, the ``function`` (upper case, without ``ML.``; the
    empty string for a plain column), its input ``column`` and the function's constant arguments after it."""

    name: str
    function: str
    column: str
    args: tuple = ()


@dataclass(frozen=True)
class _Function:
    kind: str              # the input column's kind: "numeric" or "categorical"
    arity: tuple[int, int]  # least and most constant arguments after the column
    make: Callable[..., Any]  # make(sparse, *args): the unfitted transformer
    scaler: bool = False   # a monotonic rescaling (nothing for a tree, but float32 rounding: refused there)


def _kbins(sparse: bool, n: Any) -> Any:
    from sklearn.preprocessing import KBinsDiscretizer

    return KBinsDiscretizer(n_bins=n, encode="onehot-dense", strategy="quantile",
                            quantile_method="averaged_inverted_cdf", subsample=None)  # every row: deterministic


def _scaler(name: str, **kwargs: Any) -> Callable[[bool], Any]:
    def make(sparse: bool) -> Any:
        import sklearn.preprocessing as pre

        return getattr(pre, name)(**kwargs)
    return make


def one_hot_encoder(sparse: bool) -> Any:
    """The one-hot encoding of text, a category training did not see all zeros (``ML.ONE_HOT_ENCODER``'s, and the
    automatic preprocessing's); ``sparse``: its output is a sparse matrix."""
    from sklearn.preprocessing import OneHotEncoder

    return OneHotEncoder(handle_unknown="ignore", sparse_output=sparse)


def _ordinal(sparse: bool) -> Any:
    from sklearn.preprocessing import OrdinalEncoder

    return OrdinalEncoder(handle_unknown="use_encoded_value", unknown_value=-1)


FUNCTIONS: dict[str, _Function] = {
    "STANDARD_SCALER": _Function("numeric", (0, 0), _scaler("StandardScaler"), scaler=True),
    "MIN_MAX_SCALER": _Function("numeric", (0, 0), _scaler("MinMaxScaler", clip=True), scaler=True),
    "MAX_ABS_SCALER": _Function("numeric", (0, 0), _scaler("MaxAbsScaler"), scaler=True),
    "ROBUST_SCALER": _Function("numeric", (0, 0), _scaler("RobustScaler"), scaler=True),
    "QUANTILE_BUCKETIZE": _Function("numeric", (1, 1), _kbins),
    "ONE_HOT_ENCODER": _Function("categorical", (0, 0), one_hot_encoder),
    "LABEL_ENCODER": _Function("categorical", (0, 0), _ordinal),
}
"""The ``ML.`` functions a ``TRANSFORM`` takes, by name (see the module docstring)."""

MAX_BUCKETS = 1_000
"""Most buckets ``ML.QUANTILE_BUCKETIZE`` makes (each becomes a one-hot column, as a category does)."""


def transformer(transform: Transform, sparse: bool = False) -> Any:
    """The unfitted scikit-learn transformer of one ``ML.`` function item (not a plain column); ``sparse``: a
    one-hot encoder's output may be a sparse matrix."""
    return FUNCTIONS[transform.function].make(sparse, *transform.args)


def transform_columns(transforms: Sequence[Transform]) -> tuple[str, ...]:
    """The columns the items read, each once, in the clause's order: the model's features."""
    return tuple(dict.fromkeys(t.column for t in transforms))


def transforms_json(transforms: Sequence[Transform]) -> str:
    """The items as JSON (``[[name, function, column, [args]], ...]``), as the catalog keeps them for TUNE and
    ``CREATE MODEL ... FROM STUDY`` to fit the same preprocessing."""
    return json.dumps([[t.name, t.function, t.column, list(t.args)] for t in transforms])


def transforms_from_json(text: Optional[str]) -> Optional[tuple[Transform, ...]]:
    """The items :func:`transforms_json` wrote (None for None)."""
    if text is None:
        return None
    return tuple(Transform(name, function, column, tuple(args)) for name, function, column, args in json.loads(text))


def transforms_text(transforms: Sequence[Transform]) -> str:
    """The items as a ``TRANSFORM`` clause writes them (DESCRIBE MODEL of a version made from a study)."""
    return ", ".join(f"ML.{t.function}({', '.join([t.column, *map(repr, t.args)])}) OVER () AS {t.name}"
                     if t.function else t.column if t.name == t.column else f"{t.column} AS {t.name}"
                     for t in transforms)
