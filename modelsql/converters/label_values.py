"""Class labels as a model's output: an int64 class-index output mapped to the labels themselves.

A classifier trained by TUNE on a text or boolean TARGET learns class indices (the labels' sorted
order); torch cannot return strings, so after export the index output is renamed and one ONNX
``Gather`` over a constant tensor of the labels gives the ``label`` output in the target's own type,
as scikit-learn's converted classifiers return their ``classes_`` (skl2onnx's ``ZipMap``/``ArrayFeatureExtractor``
idiom). Integer labels need none of this (the torch module maps them itself).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from modelsql.errors import NotSupportedError
from modelsql.converters.graph_edit import BATCH_DIM

__all__ = ["with_label_values"]


def with_label_values(model: onnx.ModelProto, output: str, labels: Sequence) -> onnx.ModelProto:
    """``model`` whose int64 output ``output`` (N,) of class indices gives ``labels[index]`` instead:
    STRING for text labels, BOOL for booleans. The graph's other outputs are kept.

    Raises:
        NotSupportedError: ``label_type_not_supported`` for labels that are neither all strings nor all bools.
    """
    if all(isinstance(v, str) for v in labels):
        values, elem = np.array(list(labels), dtype=object), TensorProto.STRING
    elif all(isinstance(v, (bool, np.bool_)) for v in labels):
        values, elem = np.array(list(labels), dtype=bool), TensorProto.BOOL
    else:
        raise NotSupportedError(f"class labels {list(labels)[:3]!r}...: only text or boolean labels are mapped",
                                code="label_type_not_supported")
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    index = f"{output}_index"
    for node in graph.node:
        node.output[:] = [index if o == output else o for o in node.output]
    graph.initializer.append(numpy_helper.from_array(values, name=f"{output}_values"))
    graph.node.append(helper.make_node("Gather", [f"{output}_values", index], [output], axis=0,
                                       name=f"{output}_of_index"))
    for value in graph.output:
        if value.name == output:
            value.CopyFrom(helper.make_tensor_value_info(output, elem, [BATCH_DIM]))
    onnx.checker.check_model(out)
    return out
