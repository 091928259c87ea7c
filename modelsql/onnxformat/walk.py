"""Walking an ONNX model: its graphs (subgraphs and model-local functions included) and every place that
holds parameter data (initializers, sparse initializers, tensor and large FLOATS/INTS node attributes), and
recognising a tensor :func:`modelsql.onnxformat.split.split_model` stripped (see that module for the format)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator, Optional

from onnx import AttributeProto, GraphProto, ModelProto, NodeProto, TensorProto

__all__ = ["all_graphs", "Slot", "slots", "stripped_entries", "elem_name", "KEY_DIGEST", "KEY_ENCODING",
           "ATTRIBUTE_MIN_ELEMENTS"]

KEY_DIGEST = "digest"
"""The external-data key of a stripped tensor holding its blob's SHA-256 digest."""
KEY_ENCODING = "modelsql.encoding"
"""The external-data key of a stripped tensor naming where its data goes back (see the format in split.py)."""

ATTRIBUTE_MIN_ELEMENTS = 16
"""INTS, TENSOR and TENSORS node attributes with at least this many elements are stored
as blobs by :func:`~modelsql.onnxformat.split.split_model`; smaller ones stay inline in the graph. (Non-empty FLOATS
attributes are always stored.)"""


def _subgraphs_of_nodes(nodes) -> Iterator[GraphProto]:
    for node in nodes:
        for attr in node.attribute:
            if attr.type == AttributeProto.GRAPH:
                yield from _graphs(attr.g)
            elif attr.type == AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from _graphs(g)


def _graphs(graph: GraphProto) -> Iterator[GraphProto]:
    """``graph`` and all its nested subgraphs, depth first, in node order."""
    yield graph
    yield from _subgraphs_of_nodes(graph.node)


def all_graphs(model: ModelProto) -> Iterator[GraphProto]:
    """The main graph, its subgraphs, and the subgraphs inside model-local functions."""
    yield from _graphs(model.graph)
    for fn in model.functions:
        yield from _subgraphs_of_nodes(fn.node)


@dataclass
class Slot:
    """One place holding parameter data: a tensor, or a FLOATS/INTS attribute."""

    name: str
    tensor: Optional[TensorProto] = None
    attr: Optional[AttributeProto] = None
    is_attribute: bool = False
    counted: bool = True  # counted by param_count (sparse indices are not)

    def data_tensor(self) -> TensorProto:
        """``tensor``: the data of a slot that is not a FLOATS/INTS attribute (those hold ``attr``)."""
        assert self.tensor is not None, f"slot {self.name!r} holds an attribute, not a tensor"
        return self.tensor

    def entries(self) -> Optional[dict[str, str]]:
        """The external-data entries if this slot is stripped, else None."""
        if self.attr is not None:
            return stripped_entries(self.attr.t) if self.attr.HasField("t") else None
        return stripped_entries(self.data_tensor())

    def elements(self) -> int:
        if self.attr is not None:
            if self.attr.HasField("t"):
                return math.prod(self.attr.t.dims)
            values = self.attr.floats if self.attr.type == AttributeProto.FLOATS else self.attr.ints
            return len(values)
        return math.prod(self.data_tensor().dims)

    def stored(self) -> bool:
        """Whether split_model stores this slot as a blob (or already did)."""
        if self.entries() is not None:
            return True
        if not self.is_attribute:
            return True
        n = self.elements()
        if self.attr is not None and self.attr.type == AttributeProto.FLOATS:
            return n > 0
        return n >= ATTRIBUTE_MIN_ELEMENTS


def _node_label(node: NodeProto) -> str:
    if node.name:
        return node.name
    if len(node.output) and node.output[0]:
        return node.output[0]
    return node.op_type


def _attribute_slots(nodes) -> Iterator[Slot]:
    for node in nodes:
        label = _node_label(node)
        for attr in node.attribute:
            if attr.ref_attr_name:
                continue
            if attr.type == AttributeProto.TENSOR:
                yield Slot(f"{label}.{attr.name}", tensor=attr.t, is_attribute=True)
            elif attr.type == AttributeProto.TENSORS:
                for i, t in enumerate(attr.tensors):
                    yield Slot(f"{label}.{attr.name}[{i}]", tensor=t, is_attribute=True)
            elif attr.type in (AttributeProto.FLOATS, AttributeProto.INTS):
                yield Slot(f"{label}.{attr.name}", attr=attr, is_attribute=True)


def slots(model: ModelProto) -> Iterator[Slot]:
    """Every place holding parameter data, in a fixed order: per graph (main graph
    first, then subgraphs depth first) its initializers, its sparse initializers
    (values, then indices), then its nodes' attributes; then model-local functions'
    node attributes."""
    for g in all_graphs(model):
        for t in g.initializer:
            yield Slot(t.name, tensor=t)
        for sp in g.sparse_initializer:
            yield Slot(sp.values.name, tensor=sp.values)
            yield Slot(sp.indices.name or f"{sp.values.name}/indices", tensor=sp.indices, counted=False)
        yield from _attribute_slots(g.node)
    for fn in model.functions:
        yield from _attribute_slots(fn.node)


def elem_name(data_type: int) -> str:
    """The ``TensorProto.DataType`` name of an element type (``FLOAT``), or ``UNKNOWN_<n>``."""
    try:
        return TensorProto.DataType.Name(data_type)
    except ValueError:
        return f"UNKNOWN_{data_type}"


def stripped_entries(t: TensorProto) -> Optional[dict[str, str]]:
    """The external-data entries of a tensor the store stripped (key -> value), or None for any other tensor."""
    if t.data_location != TensorProto.EXTERNAL:
        return None
    entries = {e.key: e.value for e in t.external_data}
    return entries if KEY_DIGEST in entries and KEY_ENCODING in entries else None
