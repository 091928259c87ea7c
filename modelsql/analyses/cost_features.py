"""Features of (a model, a batch size) for a learned cost model (Mantis: Chun et al., "Mantis: Predicting
System Performance through Program Analysis and Modeling", 2010; nn-Meter, MobiSys 2021, for the
per-operator-class view of DL inference).

From :func:`~modelsql.analyses.static_features.node_costs` at the batch size (ONNX shape inference on a
copy whose first symbolic input dimension is the batch and every other one 1): per operator class,
its node count, FLOPs and bytes moved (inputs plus outputs of known shape), so a model can learn
roofline-like terms per class (compute-bound products, memory-bound data movement) and a per-node
overhead; and the parameter count and bytes, the input bytes and the batch size. Nodes whose output
shape inference cannot tell are counted in ``unknown_nodes`` (their FLOPs and bytes are not known).
"""

from __future__ import annotations

import numpy as np
import onnx

from modelsql.analyses.static_features import node_costs

__all__ = ["OP_CLASSES", "cost_features", "feature_names"]

OP_CLASSES: dict[str, frozenset[str]] = {
    "elementwise": frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Exp", "Log", "Abs", "Neg", "Relu",
                              "LeakyRelu", "Sigmoid", "Tanh", "Erf", "Gelu", "Clip", "Max", "Min", "Where", "Equal",
                              "Greater", "Less", "Not", "And", "Or", "Cast", "Identity", "HardSigmoid", "Softplus",
                              "Elu", "Selu", "PRelu", "Reciprocal", "Floor", "Ceil", "Round", "Sign"}),
    "normalization": frozenset({"BatchNormalization", "LayerNormalization", "InstanceNormalization",
                                "GroupNormalization", "Softmax", "LogSoftmax", "LpNormalization", "Dropout"}),
    "reduction": frozenset({"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2",
                            "ReduceLogSumExp", "ArgMax", "ArgMin", "MaxPool", "AveragePool", "GlobalAveragePool",
                            "GlobalMaxPool", "TopK"}),
    "data": frozenset({"Reshape", "Transpose", "Concat", "Split", "Slice", "Gather", "GatherElements", "Squeeze",
                       "Unsqueeze", "Flatten", "Expand", "Tile", "Pad", "Shape", "Constant", "ConstantOfShape",
                       "Range", "ScatterND", "Resize", "DepthToSpace", "SpaceToDepth"}),
}
"""Operator classes besides the matrix products (``conv``, ``gemm``, ``matmul``, from
:class:`~modelsql.analyses.static_features.NodeCost`); anything else is ``other``."""

_CLASSES = ("conv", "gemm", "matmul", *OP_CLASSES, "other")


def feature_names() -> list[str]:
    """The keys of :func:`cost_features`, in a fixed order."""
    per_class = [f"{c}_{what}" for c in _CLASSES for what in ("nodes", "flops", "bytes")]
    return ["batch_size", "nodes", "unknown_nodes", "params", "param_bytes", "input_bytes", *per_class]


def _class_of(op_type: str, product: str) -> str:
    if product:
        return product
    return next((c for c, ops in OP_CLASSES.items() if op_type in ops), "other")


def cost_features(model: onnx.ModelProto, batch_size: int) -> dict[str, float]:
    """The features (:func:`feature_names`) of running ``model`` (full or stripped: only shapes and
    initializer dims are read) on ``batch_size`` rows. FLOPs as
    :func:`~modelsql.analyses.static_features.graph_flops` counts them; bytes in bytes."""
    out = dict.fromkeys(feature_names(), 0.0)
    costs = node_costs(model, batch_size)
    for cost in costs:
        c = _class_of(cost.op_type, cost.product)
        out[f"{c}_nodes"] += 1
        out[f"{c}_flops"] += cost.flops
        out[f"{c}_bytes"] += cost.bytes_moved
    graph = model.graph
    out["batch_size"] = float(batch_size)
    out["nodes"] = float(len(graph.node))
    out["unknown_nodes"] = float(len(graph.node) - len(costs))
    for t in graph.initializer:
        n = float(np.prod(t.dims)) if t.dims else 1.0
        out["params"] += n
        try:
            out["param_bytes"] += n * onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
        except (KeyError, TypeError, ValueError):
            pass
    initializers = {t.name for t in graph.initializer}
    for v in graph.input:
        if v.name in initializers:
            continue
        dims = v.type.tensor_type.shape.dim
        size = float(np.prod([batch_size if i == 0 and not d.HasField("dim_value") else (d.dim_value or 1)
                              for i, d in enumerate(dims)])) if dims else 1.0
        try:
            out["input_bytes"] += size * onnx.helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type).itemsize
        except (KeyError, TypeError, ValueError):
            pass
    return out
