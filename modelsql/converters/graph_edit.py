"""Small in-place edits of ONNX graphs shared by the converters (renaming values,
naming the batch dimension, tidying opset imports)."""

from __future__ import annotations

from onnx import ModelProto, ValueInfoProto

from modelsql.onnxformat.walk import all_graphs

BATCH_DIM = "N"
"""Symbolic name given to the batch (first) dimension of converted models."""


def rename_value(model: ModelProto, old: str, new: str) -> None:
    """Rename value ``old`` to ``new`` everywhere in ``model`` (nodes of all graphs and
    subgraphs, graph inputs/outputs, value_info, initializers). No-op if equal."""
    if old == new:
        return
    for g in all_graphs(model):
        for node in g.node:
            for i, n in enumerate(node.input):
                if n == old:
                    node.input[i] = new
            for i, n in enumerate(node.output):
                if n == old:
                    node.output[i] = new
        for v in list(g.input) + list(g.output) + list(g.value_info):
            if v.name == old:
                v.name = new
        for t in g.initializer:
            if t.name == old:
                t.name = new


def name_batch_dim(value: ValueInfoProto, name: str = BATCH_DIM) -> None:
    """Give the first dimension of a tensor value the symbolic name ``name`` if it has
    neither a fixed size nor a name."""
    tt = value.type.tensor_type if value.type.HasField("tensor_type") else None
    if tt is None or not tt.HasField("shape") or not len(tt.shape.dim):
        return
    d = tt.shape.dim[0]
    if d.WhichOneof("value") is None:
        d.dim_param = name


def dedupe_opsets(model: ModelProto) -> None:
    """Keep one opset import per domain (the highest version)."""
    best: dict[str, int] = {}
    order: list[str] = []
    for imp in model.opset_import:
        if imp.domain not in best:
            order.append(imp.domain)
            best[imp.domain] = imp.version
        else:
            best[imp.domain] = max(best[imp.domain], imp.version)
    if len(order) == len(model.opset_import):
        return
    del model.opset_import[:]
    for domain in order:
        imp = model.opset_import.add()
        imp.domain = domain
        imp.version = best[domain]
