"""ONNX's shape inference, made safe for the graphs modelsql converts.

``onnx.shape_inference.infer_shapes`` knows nothing of ONNX Runtime's contrib ``com.microsoft`` operators, and
onnx 1.23 dereferences the missing type of such an operator's output when a standard operator reads it: a
``RegexFullMatch`` or an ``ai.onnx.ml`` ``LabelEncoder`` after the contrib ``Tokenizer`` (a text vectorizer's
character analyzer, its stop words: :mod:`modelsql.converters.text`) ended the process with a segmentation
fault. Here the outputs of those operators, whose types ONNX Runtime documents, are declared first.
"""

from __future__ import annotations

from typing import Any

import onnx
from onnx import ModelProto, TensorProto

__all__ = ["infer_shapes", "CONTRIB_OUTPUT_TYPES"]

CONTRIB_OUTPUT_TYPES = {("com.microsoft", "Tokenizer"): TensorProto.STRING}
"""The element type of the outputs of the contrib operators modelsql's graphs use (ONNX Runtime's
ContribOperators.md: ``Tokenizer``'s output is a tensor of strings)."""


def infer_shapes(model: ModelProto, **options: Any) -> ModelProto:
    """``onnx.shape_inference.infer_shapes(model, **options)`` with every output of a
    :data:`CONTRIB_OUTPUT_TYPES` operator that has no declared type declared first (its element type, no
    shape); ``model`` itself is left as it was.

    Raises:
        whatever ONNX's inference raises (``onnx.shape_inference.InferenceError``, ``ValueError`` ...).
    """
    declared = {v.name for v in list(model.graph.value_info) + list(model.graph.output) + list(model.graph.input)}
    missing = [onnx.helper.make_tensor_value_info(out, CONTRIB_OUTPUT_TYPES[(node.domain, node.op_type)], None)
               for node in model.graph.node if (node.domain, node.op_type) in CONTRIB_OUTPUT_TYPES
               for out in node.output if out and out not in declared]
    if missing:
        typed = ModelProto()
        typed.CopyFrom(model)
        typed.graph.value_info.extend(missing)
        model = typed
    return onnx.shape_inference.infer_shapes(model, **options)
