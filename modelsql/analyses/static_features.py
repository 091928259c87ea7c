"""Static features of an ONNX graph, computed without running it (the inputs of a cost model).

Per node, from ONNX shape inference with every symbolic input dimension bound to 1:
Conv counts 2 * |output| * (C_in / group) * kernel, Gemm and MatMul 2 * |output| * K, and every
other node one operation per output element (the formulas of the project's feasibility study,
and of Mantis-style static features).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

from modelsql.onnxformat.inference import infer_shapes

__all__ = ["graph_flops", "StaticFeatures", "static_features", "NodeCost", "node_costs"]


@dataclass(frozen=True)
class StaticFeatures:
    """What a cost model reads of a graph without running it.

    Attributes:
        flops: FLOPs per input row (:func:`graph_flops`).
        conv_flops: the part of ``flops`` in Conv / ConvTranspose nodes.
        gemm_flops: the part in 2-D matrix products (Gemm, MatMul with a 2-D output: dense layers over rows).
        nodes: nodes of the main graph (each one a kernel launch in ONNX Runtime's executor, before fusion).
    """

    flops: float
    conv_flops: float
    gemm_flops: float
    nodes: int


def static_features(model: onnx.ModelProto) -> StaticFeatures:
    """The :class:`StaticFeatures` of ``model`` (full or stripped)."""
    flops, conv, gemm = _count(model)
    return StaticFeatures(flops, conv, gemm, len(model.graph.node))


def graph_flops(model: onnx.ModelProto) -> float:
    """FLOPs per input row of ``model`` (full or stripped: only shapes are read): 2 * multiply-adds of Conv, Gemm and MatMul plus one per output
    element of every other node, from ONNX shape inference with the batch dimension bound to 1.

    Nodes whose shapes inference cannot tell count nothing (an underestimate, which favours merging
    small models: the direction where merging is cheap to get wrong)."""
    return _count(model)[0]


@dataclass(frozen=True)
class NodeCost:
    """One node's static cost: ``flops`` (as :func:`graph_flops` counts them) and ``bytes_moved`` (the bytes of
    its inputs and outputs whose shapes are known), at a given batch size."""

    op_type: str
    flops: float
    bytes_moved: float
    product: str = ""
    """``"conv"`` (a Conv counted by its kernel), ``"gemm"`` (a 2-D matrix product), ``"matmul"`` (another
    matrix product), or ``""`` (counted one operation per output element)."""


def _inferred(model: onnx.ModelProto, batch_size: int) -> tuple[onnx.ModelProto, dict, dict]:
    """``model`` with its first symbolic input dimension bound to ``batch_size`` (others to 1), shapes inferred;
    and ``{value name: shape}`` and ``{value name: ONNX element type}`` where known."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for v in m.graph.input:
        dims = v.type.tensor_type.shape.dim
        if len(dims) and not dims[0].HasField("dim_value"):
            dims[0].dim_value = batch_size
        for d in list(dims)[1:]:
            if not d.HasField("dim_value"):
                d.dim_value = 1
    try:
        m = infer_shapes(m, data_prop=True)
    except Exception:  # noqa: BLE001 - no shapes: count what is declared
        pass
    shapes, types = {}, {}
    for v in (*m.graph.input, *m.graph.output, *m.graph.value_info):
        dims = v.type.tensor_type.shape.dim
        types[v.name] = v.type.tensor_type.elem_type
        if v.type.tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in dims):  # no shape: unknown, not a scalar
            shapes[v.name] = [d.dim_value for d in dims]
    for t in m.graph.initializer:
        shapes[t.name] = list(t.dims)
        types[t.name] = t.data_type
    return m, shapes, types


def _nbytes(name: str, shapes: dict, types: dict) -> float:
    if name not in shapes or not types.get(name):
        return 0.0
    try:
        itemsize = onnx.helper.tensor_dtype_to_np_dtype(types[name]).itemsize
    except (KeyError, TypeError, ValueError):
        return 0.0
    return float(np.prod(shapes[name])) * itemsize if shapes[name] else float(itemsize)


def node_costs(model: onnx.ModelProto, batch_size: int = 1) -> list[NodeCost]:
    """The :class:`NodeCost` of every node of the main graph whose output shape is known, at ``batch_size`` rows."""
    m, shapes, types = _inferred(model, batch_size)
    out_costs = []
    for node in m.graph.node:
        out = shapes.get(node.output[0]) if node.output else None
        if out is None:
            continue
        size = float(np.prod(out)) if out else 1.0
        product = ""
        if node.op_type in ("Conv", "ConvTranspose") and len(node.input) > 1 and node.input[1] in shapes:
            flops, product = 2.0 * size * float(np.prod(shapes[node.input[1]][1:])), "conv"
        elif node.op_type in ("Gemm", "MatMul") and node.input[0] in shapes:
            a = shapes[node.input[0]]
            flops = 2.0 * size * (a[0] if node.op_type == "Gemm" and _attr(node, "transA") else a[-1])
            product = "gemm" if len(out) == 2 else "matmul"
        else:
            flops = size
        moved = sum(_nbytes(n, shapes, types) for n in (*node.input, *node.output) if n)
        out_costs.append(NodeCost(node.op_type, flops, moved, product))
    return out_costs


def _count(model: onnx.ModelProto) -> tuple[float, float, float]:
    costs = node_costs(model, 1)
    return (sum((c.flops for c in costs), 0.0), sum((c.flops for c in costs if c.product == "conv"), 0.0),
            sum((c.flops for c in costs if c.product == "gemm"), 0.0))


def _attr(node, name: str) -> int:
    for a in node.attribute:
        if a.name == name:
            return a.i
    return 0
