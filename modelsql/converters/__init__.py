"""Bringing models in as ONNX: :func:`to_onnx` takes anything modelsql imports (an ONNX file, bytes or
ModelProto, a fitted scikit-learn estimator or pipeline, a torch module), and the converters behind it:
scikit-learn (sklearn.py, the pipeline split into steps in sklearn_steps.py, exact text featurizers and
linear heads in text.py, the conversion check in conversion_check.py), torch (torch.py), Python programs
(python_program.py, the whole-graph attempt in whole_graph.py), a study's labels as a model output
(label_values.py) and the graph edits they share (graph_edit.py).

Only this package imports converters (skl2onnx, torch.onnx); both are imported
lazily, so modelsql works without them (docs/architecture.md).
"""

from __future__ import annotations

import os
from typing import Any, Optional, Sequence

from onnx import ModelProto

from modelsql.converters.conversion_check import ConversionCheck, check_conversion
from modelsql.converters.sklearn import from_sklearn, is_sklearn_estimator
from modelsql.converters.sklearn_steps import check_chain, split_pipeline
from modelsql.converters.torch import from_torch, is_torch_module
from modelsql.errors import ProgrammingError
from modelsql.onnxformat.describe import signature
from modelsql.onnxformat.load import load_model
from modelsql.onnxformat.metadata import metadata_features

__all__ = [
    "to_onnx",
    "split_pipeline",
    "check_chain",
    "from_sklearn",
    "check_conversion",
    "ConversionCheck",
    "from_torch",
    "is_sklearn_estimator",
    "is_torch_module",
]


def _check_feature_count(model: ModelProto, features: tuple[str, ...], what: str) -> None:
    inputs, _, _ = signature(model)
    if len(inputs) == 1 and inputs[0].shape is not None and len(inputs[0].shape) == 2:
        n = inputs[0].shape[1]
        if isinstance(n, int) and n != len(features):
            raise ProgrammingError(
                f"{len(features)} feature names given but {what} takes {n} features",
                code="feature_mismatch",
            )


def _features_from_metadata(model: ModelProto, source: str) -> Optional[tuple[str, ...]]:
    """The feature names an earlier ``EXPORT MODEL`` wrote into ``model``'s metadata, checked against its
    input; the errors say the names came from the file (naming features at import overrides them)."""
    features = metadata_features(model, source)
    if features is None:
        return None
    inputs, _, _ = signature(model)
    hint = f"{source}'s metadata entry modelsql.features names {len(features)} feature(s)"
    if len(inputs) != 1:
        raise ProgrammingError(
            f"{hint}, but the model has {len(inputs)} inputs (features apply to a model with one input); "
            "name the features at import to override the entry.",
            code="feature_mismatch",
        )
    try:
        _check_feature_count(model, features, source)
    except ProgrammingError as exc:
        raise ProgrammingError(f"{hint}, which do not fit: {exc}; name the features at import to override the entry.",
                               code=exc.code) from None
    return features


def to_onnx(
    obj: Any,
    *,
    example_input: Any = None,
    feature_names: Optional[Sequence[str]] = None,
    input_names: Optional[Sequence[str]] = None,
    output_names: Optional[Sequence[str]] = None,
) -> tuple[ModelProto, str, str, Optional[tuple[str, ...]]]:
    """Turn anything modelsql can import into a checked ONNX model.

    Args:
        obj: a path (``str`` / ``os.PathLike``) to an ``.onnx`` file, serialized ONNX
            bytes, an ``onnx.ModelProto``, a fitted scikit-learn estimator/Pipeline,
            or a ``torch.nn.Module``.
        example_input: required for torch modules (see :func:`from_torch`); ignored otherwise.
        feature_names: names of the features of a single 2-D input, when the
            model does not carry them (scikit-learn's ``feature_names_in_`` wins).
        input_names, output_names: names of a torch module's graph inputs and
            outputs (default ``("input",)`` and ``("output",)``; one name per
            returned tensor); ignored for other objects.

    Returns:
        ``(model, kind, source, features)``: kind is ``"onnx"``, ``"sklearn"`` or
        ``"torch"``; source is the path, ``"<bytes>"`` / ``"<ModelProto>"``,
        ``"sklearn:<ClassName>"`` or ``"torch:<ClassName>"``; features as above or None.

    Raises:
        ProgrammingError: code ``unsupported_model`` for other objects,
            ``example_missing`` for a torch module without example input,
            ``file_not_found``, ``not_fitted``, ``feature_mismatch``.
        DataError: code ``invalid_onnx``.
        NotSupportedError: codes ``missing_dependency``, ``conversion_failed``.
    """
    features = tuple(str(f) for f in feature_names) if feature_names is not None else None
    if isinstance(obj, (str, os.PathLike, bytes, bytearray, memoryview, ModelProto)):
        model = load_model(obj)
        if isinstance(obj, (str, os.PathLike)):
            source = os.fspath(obj)
        elif isinstance(obj, ModelProto):
            source = "<ModelProto>"
        else:
            source = "<bytes>"
        if features is not None:
            _check_feature_count(model, features, source)
        else:
            features = _features_from_metadata(model, source)
        return model, "onnx", source, features
    if is_sklearn_estimator(obj):
        model, features = from_sklearn(obj, feature_names=feature_names)
        return model, "sklearn", f"sklearn:{type(obj).__name__}", features
    if is_torch_module(obj):
        if example_input is None:
            raise ProgrammingError(
                f"importing the torch module {type(obj).__name__} needs an example input "
                "(a tensor with the batch on dimension 0)",
                code="example_missing",
            )
        names: dict[str, Any] = {}
        if input_names is not None:
            names["input_names"] = input_names if isinstance(input_names, str) else tuple(input_names)
        if output_names is not None:
            names["output_names"] = tuple(output_names)
        model = from_torch(obj, example_input, **names)
        if features is not None:
            _check_feature_count(model, features, f"torch:{type(obj).__name__}")
        return model, "torch", f"torch:{type(obj).__name__}", features
    raise ProgrammingError(
        f"cannot import a model from a {type(obj).__module__}.{type(obj).__qualname__}: expected an ONNX "
        "file path, ONNX bytes, an onnx.ModelProto, a fitted scikit-learn estimator or a torch.nn.Module",
        code="unsupported_model",
    )
