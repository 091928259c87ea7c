"""Checking an imported model's claim that it imputes NULLs (the ONNX metadata entry ``modelsql.imputed`` that
``EXPORT MODEL`` writes for a model trained in SQL with ``on_null = 'impute'`` or ``ML.IMPUTER``).

PREDICT feeds a NULL of such an input to the model, as NaN (numbers) or the text
:data:`~modelsql.estimators.NULL_CATEGORY`; a model whose graph does not impute would answer NaN, or read the text
as an unknown category, silently. So the claim is checked before the model is stored: each named input takes one
float or text value per row, and one row holding a NULL in every named input gives finite outputs.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import onnx

from modelsql.catalog.entries import TensorSpec
from modelsql.errors import DataError
from modelsql.estimators.transforms import NULL_CATEGORY
from modelsql.onnxformat.describe import signature

__all__ = ["check_imputation"]

_FLOATS = {"FLOAT": np.float32, "DOUBLE": np.float64, "FLOAT16": np.float16}


def check_imputation(model: onnx.ModelProto, names: Sequence[str], what: str) -> tuple[str, ...]:
    """The model's inputs ``names`` name (matched whatever their case, each once), once checked to impute.

    Raises:
        DataError: ``invalid_onnx``: a name no input has, an input that is not one float or text value per row,
            or outputs that are not finite for a row of NULLs in those inputs (the graph does not impute them).
    """
    inputs, _, _ = signature(model)
    by_name = {spec.name.lower(): spec for spec in inputs}
    missing = [n for n in names if n.lower() not in by_name]
    if missing:
        raise DataError(f"{what}: metadata entry modelsql.imputed names {missing}, which are not inputs of the model.",
                        code="invalid_onnx")
    chosen = list(dict.fromkeys(by_name[n.lower()].name for n in names))
    for spec in inputs:
        if spec.name in chosen and not _scalar(spec):
            raise DataError(f"{what}: metadata entry modelsql.imputed names input {spec.name!r} "
                            f"({spec.elem_type} {list(spec.shape or [])}), but only an input of one float or text "
                            "value per row can be fed a NULL.", code="invalid_onnx")
    _probe(model, inputs, set(chosen), what)
    return tuple(chosen)


def _scalar(spec: TensorSpec) -> bool:
    shape = spec.shape
    return (spec.elem_type in _FLOATS or spec.elem_type == "STRING") and shape is not None and (
        len(shape) == 1 or (len(shape) == 2 and shape[1] == 1))


def _probe(model: onnx.ModelProto, inputs: Sequence[TensorSpec], imputed: set[str], what: str) -> None:
    """Run one row, NULL in the ``imputed`` inputs and zeros (empty text) elsewhere; refuse outputs not finite."""
    from modelsql.operators.backends.onnxruntime import OrtModel

    feeds = {spec.name: _row(spec, spec.name in imputed) for spec in inputs}
    try:
        outputs = OrtModel(model.SerializeToString(), f"{what} (its imputation check)", intra_op_threads=1).run(feeds)
    except Exception as exc:  # noqa: BLE001 - any failure means the claim cannot be shown
        raise DataError(f"{what}: metadata entry modelsql.imputed says the model imputes NULLs in "
                        f"{sorted(imputed)}, but a row of NULLs there fails: {str(exc).splitlines()[0][:200]}",
                        code="invalid_onnx") from None
    for spec, value in zip(model.graph.output, outputs):
        array = np.asarray(value)
        if array.dtype.kind in "fc" and not np.isfinite(array).all():
            raise DataError(f"{what}: metadata entry modelsql.imputed says the model imputes NULLs in "
                            f"{sorted(imputed)}, but for a row of NULLs there its output {spec.name!r} is not a "
                            "number: its graph does not impute them; remove the entry.", code="invalid_onnx")


def _row(spec: TensorSpec, null: bool) -> np.ndarray:
    """One row for ``spec``: a NULL (NaN, or the NULL category) when ``null``, else zeros or empty text; unknown
    sizes are 1."""
    shape = [1] + [d if isinstance(d, int) and d > 0 else 1 for d in list(spec.shape or [None])[1:]]
    if spec.elem_type == "STRING":
        return np.full(shape, NULL_CATEGORY if null else "", dtype=object)
    if spec.elem_type in _FLOATS:
        return np.full(shape, np.nan if null else 0, dtype=_FLOATS[spec.elem_type])
    from modelsql.operators.predict import ONNX_TO_NUMPY

    return np.zeros(shape, dtype=ONNX_TO_NUMPY.get(spec.elem_type, np.float32))
