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
``ML.IMPUTER(x, strategy)``                     ``SimpleImputer(strategy=...)``: a NULL is the training  either
                                                rows' ``'mean'``, ``'median'`` (numbers) or
                                                ``'most_frequent'`` value, then the automatic
                                                preprocessing of the column's kind
==============================================  =====================================================  ==========

A plain column in the clause gets the automatic preprocessing (:mod:`.preprocessing`). A column an
``ML.IMPUTER`` reads may be NULL in training and at PREDICT (:func:`imputed_columns`); its other items see
a NULL number as the training mean and NULL text as a category of its own (:data:`NULL_CATEGORY`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

__all__ = ["Transform", "FUNCTIONS", "MAX_BUCKETS", "NULL_CATEGORY", "IMPUTE_STRATEGIES", "null_category_rows",
           "one_hot_encoder", "imputer", "transformer", "transform_columns", "imputed_columns", "transforms_json",
           "transforms_from_json", "transforms_text"]

NULL_CATEGORY = "\u2400"
"""What a NULL in an imputed text column is, in training and when PREDICT feeds it: one text value ("␀",
SYMBOL FOR NULL), so NULL is a category of its own, as BigQuery ML's automatic preprocessing makes it (ONNX
text cannot be NULL, and ONNX Runtime cuts a string at a NUL character)."""


def null_category_rows(values: Any) -> int:
    """How many values of a text column (a pyarrow array, chunked or not, of strings or a dictionary of them)
    are :data:`NULL_CATEGORY` itself: text an imputing model would read as NULL."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_dictionary(values.type):
        values = values.cast(values.type.value_type)
    return int(pc.sum(pc.equal(values, NULL_CATEGORY)).as_py() or 0)


IMPUTE_STRATEGIES = {"mean": "numeric", "median": "numeric", "most_frequent": None}
"""``ML.IMPUTER``'s strategies and the column kind each needs (None: numbers or text)."""


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
    kind: Optional[str]    # the input column's kind: "numeric", "categorical" or None (either)
    arity: tuple[int, int]  # least and most constant arguments after the column
    make: Callable[..., Any]  # make(sparse, kind, *args): the unfitted transformer
    scaler: bool = False   # a monotonic rescaling (nothing for a tree, but float32 rounding: refused there)


def _kbins(sparse: bool, kind: str, n: Any) -> Any:
    from sklearn.preprocessing import KBinsDiscretizer

    return KBinsDiscretizer(n_bins=n, encode="onehot-dense", strategy="quantile",
                            quantile_method="averaged_inverted_cdf", subsample=None)  # every row: deterministic


def _scaler(name: str, **kwargs: Any) -> Callable[[bool, str], Any]:
    def make(sparse: bool, kind: str) -> Any:
        import sklearn.preprocessing as pre

        return getattr(pre, name)(**kwargs)
    return make


def one_hot_encoder(sparse: bool, kind: str = "categorical") -> Any:
    """The one-hot encoding of text, a category training did not see all zeros (``ML.ONE_HOT_ENCODER``'s, and the
    automatic preprocessing's); ``sparse``: its output is a sparse matrix."""
    from sklearn.preprocessing import OneHotEncoder

    return OneHotEncoder(handle_unknown="ignore", sparse_output=sparse)


def _ordinal(sparse: bool, kind: str) -> Any:
    from sklearn.preprocessing import OrdinalEncoder

    return OrdinalEncoder(handle_unknown="use_encoded_value", unknown_value=-1)


def imputer(kind: str, strategy: str = "mean") -> Any:
    """``SimpleImputer`` of a ``kind`` column: a NULL number (NaN) or NULL text (:data:`NULL_CATEGORY`) replaced
    by the training rows' ``strategy`` value (:data:`IMPUTE_STRATEGIES`)."""
    from sklearn.impute import SimpleImputer

    if kind == "numeric":
        return SimpleImputer(strategy=strategy)
    return SimpleImputer(strategy=strategy, missing_values=NULL_CATEGORY)


def _imputer(sparse: bool, kind: str, strategy: str) -> Any:
    return imputer(kind, strategy)


FUNCTIONS: dict[str, _Function] = {
    "STANDARD_SCALER": _Function("numeric", (0, 0), _scaler("StandardScaler"), scaler=True),
    "MIN_MAX_SCALER": _Function("numeric", (0, 0), _scaler("MinMaxScaler", clip=True), scaler=True),
    "MAX_ABS_SCALER": _Function("numeric", (0, 0), _scaler("MaxAbsScaler"), scaler=True),
    "ROBUST_SCALER": _Function("numeric", (0, 0), _scaler("RobustScaler"), scaler=True),
    "QUANTILE_BUCKETIZE": _Function("numeric", (1, 1), _kbins),
    "ONE_HOT_ENCODER": _Function("categorical", (0, 0), one_hot_encoder),
    "LABEL_ENCODER": _Function("categorical", (0, 0), _ordinal),
    "IMPUTER": _Function(None, (1, 1), _imputer),
}
"""The ``ML.`` functions a ``TRANSFORM`` takes, by name (see the module docstring)."""

MAX_BUCKETS = 1_000
"""Most buckets ``ML.QUANTILE_BUCKETIZE`` makes (each becomes a one-hot column, as a category does)."""


def transformer(transform: Transform, sparse: bool = False, kind: str = "numeric") -> Any:
    """The unfitted scikit-learn transformer of one ``ML.`` function item (not a plain column) over a ``kind``
    column; ``sparse``: a one-hot encoder's output may be a sparse matrix."""
    return FUNCTIONS[transform.function].make(sparse, kind, *transform.args)


def transform_columns(transforms: Sequence[Transform]) -> tuple[str, ...]:
    """The columns the items read, each once, in the clause's order: the model's features."""
    return tuple(dict.fromkeys(t.column for t in transforms))


def imputed_columns(transforms: Sequence[Transform]) -> tuple[str, ...]:
    """The columns an ``ML.IMPUTER`` item reads, in the clause's order: those that may be NULL."""
    return tuple(dict.fromkeys(t.column for t in transforms if t.function == "IMPUTER"))


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
