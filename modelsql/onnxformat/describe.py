"""A model's interface (inputs and outputs as :class:`~modelsql.catalog.entries.TensorSpec`), its opset
and its parameter count; the same answers on a full model and on its stripped graph."""

from __future__ import annotations

from typing import Optional

from onnx import ModelProto, TypeProto

from modelsql.catalog.entries import Dim, TensorSpec
from modelsql.onnxformat.walk import elem_name, slots

__all__ = ["signature", "opset", "param_count", "type_text"]


def _spec(name: str, tp: TypeProto) -> TensorSpec:
    which = tp.WhichOneof("value")
    if which in ("tensor_type", "sparse_tensor_type"):
        tt = getattr(tp, which)
        shape: Optional[tuple[Dim, ...]] = None
        if tt.HasField("shape"):
            dims: list[Dim] = []
            for d in tt.shape.dim:
                kind = d.WhichOneof("value")
                dims.append(d.dim_value if kind == "dim_value" else d.dim_param if kind == "dim_param" else None)
            shape = tuple(dims)
        return TensorSpec(name, elem_name(tt.elem_type), shape)
    return TensorSpec(name, type_text(tp), None)


def type_text(tp: TypeProto) -> str:
    """A non-tensor ONNX type as text: ``SEQUENCE(MAP(INT64, FLOAT))`` (a ZipMap output),
    ``MAP(STRING, DOUBLE)``, ``SEQUENCE(FLOAT)`` (a sequence of float tensors), ``OPTIONAL(...)``;
    a tensor type is its element type name."""
    which = tp.WhichOneof("value")
    if which in ("tensor_type", "sparse_tensor_type"):
        return elem_name(getattr(tp, which).elem_type)
    if which == "sequence_type":
        return f"SEQUENCE({type_text(tp.sequence_type.elem_type)})"
    if which == "map_type":
        return f"MAP({elem_name(tp.map_type.key_type)}, {type_text(tp.map_type.value_type)})"
    if which == "optional_type":
        return f"OPTIONAL({type_text(tp.optional_type.elem_type)})"
    return {"opaque_type": "OPAQUE"}.get(which, "UNDEFINED")


def opset(model: ModelProto) -> int:
    """The default-domain (``""`` / ``"ai.onnx"``) opset version the model imports; 0 if none."""
    versions = [imp.version for imp in model.opset_import if imp.domain in ("", "ai.onnx")]
    return max(versions) if versions else 0


def signature(model: ModelProto) -> tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...], int]:
    """Describe a model's interface.

    Returns:
        ``(inputs, outputs, opset)``: the main graph's inputs that are not
        initializers, its outputs (each a :class:`TensorSpec`: element type name
        upper case as in ``TensorProto.DataType``; dims int / str (symbolic) /
        None; sequences, maps and optionals get their :func:`type_text`, e.g.
        ``"SEQUENCE(MAP(INT64, FLOAT))"``, with shape None), and the default-domain opset (0 if the
        model imports none). Works on stripped graphs too.
    """
    g = model.graph
    init_names = {t.name for t in g.initializer} | {sp.values.name for sp in g.sparse_initializer}
    inputs = tuple(_spec(v.name, v.type) for v in g.input if v.name not in init_names)
    outputs = tuple(_spec(v.name, v.type) for v in g.output)
    return inputs, outputs, opset(model)


def param_count(model: ModelProto) -> int:
    """Number of parameters: total elements over every tensor :func:`split_model` stores
    (all initializers, in subgraphs too; the stored values of sparse initializers; node
    attributes as listed in the module docstring). Same answer on the
    full model and on its stripped graph."""
    return sum(slot.elements() for slot in slots(model) if slot.counted and slot.stored())
