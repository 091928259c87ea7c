"""Automatic preprocessing (BigQuery ML's): a table's columns made an estimator's input, inside the model.

A trained model is the scikit-learn ``Pipeline``::

    Pipeline([("preprocess", ColumnTransformer([
                  ("numeric", StandardScaler() if scaled else "passthrough", numeric columns),
                  ("categorical", OneHotEncoder(handle_unknown="ignore", sparse_output=sparse), text columns)],
                  sparse_threshold=0.3 if sparse else 0)),
              ("model", estimator)])

  (``scaled`` and ``sparse`` are the model type's: :attr:`~.model_types.ModelType.scaled`, ``accepts_sparse``)

* numeric columns (integers, floats, decimals, booleans; read as float64) are standardised for estimators that
  depend on scale (linear models, neighbours, neural networks, k-means) and passed through for trees;
* text columns (``VARCHAR``, ``ENUM``) are one-hot encoded; a category PREDICT meets that training did not is all
  zeros (``handle_unknown="ignore"``). A text column with more than :data:`MAX_CATEGORIES` distinct values is
  refused: it is free text or an identifier, not a category.

A ``TRANSFORM`` clause replaces the two parts by one per item (:mod:`.transforms`).

Imputed columns (``on_null = 'impute'``, BigQuery ML's automatic imputation, or those an ``ML.IMPUTER`` reads) may
be NULL in training and when PREDICT feeds them: a NULL number is the training rows' mean (a ``SimpleImputer``
before the column's part), NULL text a category of its own (:data:`~.transforms.NULL_CATEGORY`, what the rows
and PREDICT feed for it).

The preprocessing is converted with the estimator into one ONNX graph with one input per column, named as the
column (:mod:`modelsql.converters.sklearn`), so PREDICT binds the columns by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import pyarrow as pa

from modelsql.estimators.model_types import ModelType
from modelsql.estimators.transforms import Transform, imputer, one_hot_encoder, transformer

__all__ = ["MAX_CATEGORIES", "ColumnKinds", "column_kind", "build_pipeline"]

MAX_CATEGORIES = 1_000
"""Most distinct values a text column may have to be one-hot encoded."""


@dataclass(frozen=True)
class ColumnKinds:
    """The feature columns by how they are encoded, each in the query's order."""

    numeric: tuple[str, ...]
    categorical: tuple[str, ...]

    @property
    def columns(self) -> tuple[str, ...]:
        return (*self.numeric, *self.categorical)

    def kind_of(self, column: str) -> Optional[str]:
        """``"numeric"``, ``"categorical"`` or None (not a feature column)."""
        return "numeric" if column in self.numeric else "categorical" if column in self.categorical else None


def column_kind(arrow_type: pa.DataType) -> Optional[str]:
    """``"numeric"``, ``"categorical"`` or None (a type no encoding takes: dates, lists, structs, blobs)."""
    if pa.types.is_dictionary(arrow_type):
        arrow_type = arrow_type.value_type
    if pa.types.is_integer(arrow_type) or pa.types.is_floating(arrow_type) or pa.types.is_decimal(arrow_type) \
            or pa.types.is_boolean(arrow_type):
        return "numeric"
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type) or pa.types.is_string_view(arrow_type):
        return "categorical"
    return None


def build_pipeline(kinds: ColumnKinds, estimator: Any, model_type: ModelType,
                   transforms: Optional[Sequence[Transform]] = None, imputed: Sequence[str] = ()) -> Any:
    """The unfitted ``Pipeline`` of the module docstring (``sklearn.pipeline.Pipeline``) for an estimator of
    ``model_type`` (``estimator`` itself, or None for the preprocessing alone); with ``transforms`` (a
    ``TRANSFORM`` clause, :mod:`.transforms`), one part per item, in the clause's order: a
    plain column gets the automatic preprocessing of its kind, an ``ML.`` function its transformer. For a model
    type fitted on sparse rows as on dense ones (:attr:`~.model_types.ModelType.accepts_sparse`) the one-hot
    encodings are sparse, and the encoded rows stay a sparse matrix when under 30% of their values are not zero
    (``ColumnTransformer``'s ``sparse_threshold``): wide categories (1,000,000 rows of a 1,000-value column are
    8 GB dense) take the memory of their rows, not of their width. ``imputed``: the columns that may be NULL
    (see the module docstring; without transforms, all of the numeric columns or none)."""
    from sklearn.compose import ColumnTransformer
    from sklearn.pipeline import Pipeline

    scaled, sparse = model_type.scaled, model_type.accepts_sparse
    if transforms is not None:  # parts named by position: an output name may be one ColumnTransformer reserves
        parts = [(f"transform{i}", _item(t, kinds.kind_of(t.column), scaled, sparse, t.column in imputed),
                  [t.column]) for i, t in enumerate(transforms)]
    else:
        parts = [(kind, _imputing(_automatic(kind, scaled, sparse), kind, any(c in imputed for c in columns)),
                  list(columns))
                 for kind, columns in (("numeric", kinds.numeric), ("categorical", kinds.categorical)) if columns]
    return Pipeline([("preprocess", ColumnTransformer(parts, sparse_threshold=0.3 if sparse else 0.0)),
                     ("model", estimator)])


def _item(transform: Transform, kind: Optional[str], scaled: bool, sparse: bool, imputed: bool) -> Any:
    """One ``TRANSFORM`` item's part: ``ML.IMPUTER``'s imputer, then the automatic preprocessing; another
    function's transformer, or a plain column's automatic preprocessing, after the mean of an imputed number."""
    from sklearn.pipeline import Pipeline

    kind = kind or "numeric"
    if transform.function == "IMPUTER":
        then = _automatic(kind, scaled, sparse)
        fill = transformer(transform, sparse, kind)
        return fill if then == "passthrough" else Pipeline([("impute", fill), ("encode", then)])
    part = transformer(transform, sparse, kind) if transform.function else _automatic(kind, scaled, sparse)
    return _imputing(part, kind, imputed)


def _imputing(part: Any, kind: Optional[str], imputed: bool) -> Any:
    """``part`` after the training mean of a NULL number (NULL text is already a category of its own)."""
    from sklearn.pipeline import Pipeline

    if not imputed or kind != "numeric":
        return part
    return imputer("numeric") if part == "passthrough" else Pipeline([("impute", imputer("numeric")), ("then", part)])


def _automatic(kind: Optional[str], scaled: bool, sparse: bool) -> Any:
    from sklearn.preprocessing import StandardScaler

    if kind == "numeric":
        return StandardScaler() if scaled else "passthrough"
    return one_hot_encoder(sparse)
