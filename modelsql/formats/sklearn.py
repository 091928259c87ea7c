"""scikit-learn estimators and pipelines to ONNX, through skl2onnx.

A fitted estimator becomes an ONNX graph with one input and named outputs:

* input ``"input"``: ``FLOAT`` of shape ``["N", n_features]`` (float32 rows);
* classifiers: ``"label"`` (shape ``["N"]``, INT64 or STRING like the training
  labels) and ``"probabilities"`` (``FLOAT`` ``["N", n_classes]``); a matrix,
  never skl2onnx's ZipMap list of dicts;
* regressors: ``"prediction"`` (``FLOAT`` ``["N", 1]`` as skl2onnx emits it);
* anything else (transformers, clusterers): skl2onnx's output names, unchanged.

Translating a classical ML pipeline into a tensor graph is the first step of
"neural translation" of pipelines (Yu et al., 2019; the Hummingbird line of
work): once a pipeline is a graph, modelsql can fuse, share and fine-tune it.
skl2onnx is imported lazily: it is an optional dependency
(``pip install 'modelsql[sklearn]'``).
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import onnx

from modelsql.errors import NotSupportedError, ProgrammingError
from modelsql.formats._graph_edit import dedupe_opsets, name_batch_dim, rename_value
from modelsql.formats.onnx_io import check_model

__all__ = ["from_sklearn", "is_sklearn_estimator", "DEFAULT_OPSET", "ML_OPSET"]

DEFAULT_OPSET = 17
"""Default-domain opset of converted models (supported by onnxruntime >= 1.14)."""

ML_OPSET = 3
"""``ai.onnx.ml`` opset of converted models (TreeEnsemble*/LinearClassifier v3 and earlier)."""

_INSTALL_HINT = "pip install 'modelsql[sklearn]'"


def is_sklearn_estimator(obj: Any) -> bool:
    """True for scikit-learn estimators (and pipelines), without importing scikit-learn.

    An object qualifies if it has ``fit`` and ``get_params`` and its class comes
    from a module named ``sklearn...``.
    """
    cls = type(obj)
    return (
        hasattr(obj, "fit")
        and hasattr(obj, "get_params")
        and (cls.__module__ or "").split(".")[0] == "sklearn"
        and not isinstance(obj, type)
    )


def _final_step(estimator: Any) -> Any:
    """The last estimator of a (possibly nested) Pipeline, or the estimator itself."""
    while hasattr(estimator, "steps") and estimator.steps:
        estimator = estimator.steps[-1][1]
    return estimator


def _selects_columns_by_name(estimator) -> Optional[dict]:
    """For an estimator containing a ColumnTransformer that selects columns by name:
    ``{"text": {columns fed to an encoder fitted on strings}}``; else None."""
    from sklearn.compose import ColumnTransformer

    found = None
    stack = [estimator]
    while stack:
        est = stack.pop()
        if isinstance(est, ColumnTransformer):
            for _, trans, cols in getattr(est, "transformers_", []):
                names = [cols] if isinstance(cols, str) else list(cols) if isinstance(cols, (list, tuple)) else []
                if names and all(isinstance(c, str) for c in names):
                    found = found or {"text": set()}
                    categories = getattr(trans, "categories_", None)
                    if categories is not None:
                        for col, cats in zip(names, categories):
                            if len(cats) and isinstance(cats[0], str):
                                found["text"].add(col)
                if hasattr(trans, "get_params") and not isinstance(trans, str):
                    stack.append(trans)
        for attr in ("steps",):
            for _, step in getattr(est, attr, None) or []:
                if hasattr(step, "get_params"):
                    stack.append(step)
    return found


def from_sklearn(
    estimator: Any,
    *,
    feature_names: Optional[Sequence[str]] = None,
    n_features: Optional[int] = None,
    name: str = "model",
) -> tuple[onnx.ModelProto, Optional[tuple[str, ...]]]:
    """Convert a fitted scikit-learn estimator or Pipeline to ONNX.

    Args:
        estimator: a fitted estimator or ``Pipeline``.
        feature_names: column names for the input's features, used when the
            estimator has no ``feature_names_in_`` (fitted on a plain array).
        n_features: the number of input features, used only when the estimator
            has no ``n_features_in_``; must agree with it otherwise.
        name: the ONNX graph name.

    Returns:
        ``(model, features)``: the checked ModelProto (see the module docstring
        for its inputs and outputs) and the feature names (from
        ``feature_names_in_``, else ``feature_names``, else None).

    Raises:
        NotSupportedError: code ``missing_dependency`` if scikit-learn or skl2onnx is
            not installed; code ``conversion_failed`` if skl2onnx cannot convert it.
        ProgrammingError: code ``not_fitted`` for an unfitted estimator;
            ``n_features_required`` if the feature count is unknown;
            ``feature_count_mismatch`` if the names or ``n_features`` disagree with it.
    """
    try:
        from skl2onnx import convert_sklearn, get_latest_tested_opset_version
        from skl2onnx.common.data_types import FloatTensorType
        from sklearn.base import is_classifier, is_regressor
        from sklearn.exceptions import NotFittedError
        from sklearn.utils.validation import check_is_fitted
    except ImportError as exc:
        raise NotSupportedError(
            f"converting scikit-learn models needs scikit-learn and skl2onnx ({exc}): {_INSTALL_HINT}",
            code="missing_dependency",
        ) from None

    cls_name = type(estimator).__name__
    try:
        check_is_fitted(estimator)
    except NotFittedError:
        raise ProgrammingError(
            f"the {cls_name} is not fitted: call fit() before importing it", code="not_fitted"
        ) from None
    except TypeError as exc:
        raise ProgrammingError(f"{cls_name} is not a scikit-learn estimator: {exc}", code="unsupported_model") from None

    fitted_n = getattr(estimator, "n_features_in_", None)
    if fitted_n is None:
        if n_features is None:
            raise ProgrammingError(
                f"the number of input features of the {cls_name} is unknown: pass n_features",
                code="n_features_required",
            )
        n = int(n_features)
    else:
        n = int(fitted_n)
        if n_features is not None and int(n_features) != n:
            raise ProgrammingError(
                f"n_features={n_features} but the {cls_name} was fitted on {n} features",
                code="feature_count_mismatch",
            )

    features: Optional[tuple[str, ...]] = None
    fitted_names = getattr(estimator, "feature_names_in_", None)
    if fitted_names is not None:
        features = tuple(str(f) for f in fitted_names)
    elif feature_names is not None:
        features = tuple(str(f) for f in feature_names)
    if features is not None and len(features) != n:
        raise ProgrammingError(
            f"{len(features)} feature names given but the {cls_name} takes {n} features",
            code="feature_count_mismatch",
        )

    classifier = bool(is_classifier(estimator))
    regressor = bool(is_regressor(estimator))
    options = {id(_final_step(estimator)): {"zipmap": False}} if classifier else None
    target = {"": min(DEFAULT_OPSET, get_latest_tested_opset_version()), "ai.onnx.ml": ML_OPSET}
    initial_types = [("input", FloatTensorType([None, n]))]
    by_name = _selects_columns_by_name(estimator)
    if by_name:
        if features is None:
            raise ProgrammingError(
                f"the {cls_name} selects columns by name but has no feature_names_in_: fit it on a table "
                "(a pyarrow Table or DataFrame) so its column names are known",
                code="feature_names_required",
            )
        # One [N, 1] input per column, named after it: PREDICT binds each to its column,
        # and skl2onnx can follow the ColumnTransformer's selection by name.
        from skl2onnx.common.data_types import StringTensorType

        initial_types = [
            (f, StringTensorType([None, 1]) if f in by_name["text"] else FloatTensorType([None, 1])) for f in features
        ]
        features = None
    try:
        model = convert_sklearn(
            estimator,
            name,
            initial_types=initial_types,
            options=options,
            target_opset=target,
        )
    except Exception as exc:  # skl2onnx raises RuntimeError, MissingShapeCalculator, NameError ...
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise NotSupportedError(
            f"skl2onnx cannot convert the {cls_name}: {msg}", code="conversion_failed"
        ) from None

    dedupe_opsets(model)
    outputs = [o.name for o in model.graph.output]
    if classifier and len(outputs) == 2:
        for old, new in zip(outputs, ("label", "probabilities")):
            rename_value(model, old, new)
    elif regressor and len(outputs) == 1:
        rename_value(model, outputs[0], "prediction")
    for v in list(model.graph.input) + list(model.graph.output):
        name_batch_dim(v)
    check_model(model, f"the ONNX graph converted from the {cls_name}")
    return model, features
