"""A model fed column-major: each named rank-2 input ``(N, F)`` taken as ``(F, N)`` (PREDICT over
DuckDB's columnar Arrow export)."""

from __future__ import annotations

from typing import Sequence

import onnx
from onnx import NodeProto, helper

from modelsql.errors import ProgrammingError

__all__ = ["column_major_inputs"]


def column_major_inputs(model_bytes: bytes, names: Sequence[str]) -> bytes:
    """The model with each named rank-2 input ``(N, F)`` fed transposed, as ``(F, N)``.

    A ``Transpose(perm=[1, 0])`` is put in front of each named input under the
    input's old name, so the rest of the graph is unchanged; ONNX Runtime's
    optimizer folds it into a following ``Gemm``/``MatMul`` where it can. This
    lets a PREDICT over columnar data (DuckDB's Arrow export, one buffer per
    column) build the input by copying each column once into one row of an
    ``(F, n)`` block, instead of transposing every batch into rows.

    Args:
        model_bytes: a serialized, self-contained ONNX model.
        names: inputs to transpose; each must have a known rank of 2.

    Returns:
        The serialized model. Its outputs for the transposed feeds are the
        original's, up to float rounding where the runtime folds the transpose
        into a matrix product.

    Raises:
        ProgrammingError: a name is not a rank-2 graph input.
    """
    model = onnx.load_from_string(model_bytes)
    graph = model.graph
    by_name = {i.name: i for i in graph.input}
    taken = {v for n in graph.node for v in list(n.input) + list(n.output)} | set(by_name)
    front: list[NodeProto] = []
    for name in names:
        vi = by_name.get(name)
        dims = list(vi.type.tensor_type.shape.dim) if vi is not None and vi.type.HasField("tensor_type") else []
        if vi is None or len(dims) != 2:
            raise ProgrammingError(f'column_major_inputs: "{name}" is not a rank-2 input of the model.', code="bad_input")
        fresh = name + "__columns"
        while fresh in taken:
            fresh += "_"
        taken.add(fresh)
        new = onnx.ValueInfoProto()
        new.CopyFrom(vi)
        new.name = fresh
        shape = new.type.tensor_type.shape
        a, b = onnx.TensorShapeProto.Dimension(), onnx.TensorShapeProto.Dimension()
        a.CopyFrom(dims[1])
        b.CopyFrom(dims[0])
        del shape.dim[:]
        shape.dim.extend([a, b])
        index = list(graph.input).index(vi)
        graph.input.remove(vi)
        graph.input.insert(index, new)
        front.append(helper.make_node("Transpose", [fresh], [name], perm=[1, 0], name=f"modelsql_column_major_{name}"))
    nodes = front + list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes)
    return model.SerializeToString()
