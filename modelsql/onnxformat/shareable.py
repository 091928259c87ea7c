"""Shared weights: the initializers of a stripped graph that a runtime maps straight from their blobs
instead of parsing them (PRETZEL's Object Store, Lee et al., OSDI 2018)."""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Mapping, Union

import numpy as np
from onnx import ModelProto, TensorProto

from modelsql.errors import ProgrammingError
from modelsql.onnxformat.split import REPEATED_FIELDS, parse_graph
from modelsql.onnxformat.walk import KEY_DIGEST, KEY_ENCODING, stripped_entries

__all__ = ["ShareableTensor", "shareable_initializers", "with_external_locations"]

_SHAREABLE_DTYPES = {
    TensorProto.FLOAT: "<f4",
    TensorProto.DOUBLE: "<f8",
    TensorProto.FLOAT16: "<f2",
    TensorProto.INT8: "i1",
    TensorProto.INT16: "<i2",
    TensorProto.INT32: "<i4",
    TensorProto.INT64: "<i8",
    TensorProto.UINT8: "u1",
    TensorProto.UINT16: "<u2",
    TensorProto.UINT32: "<u4",
    TensorProto.UINT64: "<u8",
    TensorProto.BOOL: "?",
}
"""Element types whose payload is plain little-endian numpy elements (not bfloat16, float8 or packed int4)."""

_NUMERIC_ENCODINGS = frozenset(("raw_data",) + REPEATED_FIELDS) - {"string_data"}


@dataclass(frozen=True)
class ShareableTensor:
    """A top-level initializer of a stripped graph whose blob is the tensor's raw elements.

    Attributes:
        name: the initializer's name in the main graph.
        digest: SHA-256 hex digest of the payload (the blob key).
        dtype: the numpy dtype of one element, little-endian (``float32`` ...).
        dims: the shape.
        nbytes: payload size in bytes (``prod(dims) * dtype.itemsize``, > 0).
    """

    name: str
    digest: str
    dtype: np.dtype
    dims: tuple[int, ...]
    nbytes: int


def shareable_initializers(graph: Union[bytes, ModelProto], min_bytes: int = 1) -> list[ShareableTensor]:
    """The main graph's stripped initializers that a runtime can map straight from their blob.

    A blob file of such a tensor is exactly its C-order little-endian elements, so it can be
    memory-mapped and handed to the runtime as is (PRETZEL's Object Store, Lee et al., OSDI 2018).
    Left out (joined back inline by :func:`join_model`): subgraph initializers, sparse
    initializers, tensors in node attributes, ``STRING`` and ``tensor_proto``-encoded tensors,
    empty tensors, element types without a plain numpy layout (bfloat16, float8, int4), a
    recorded length that disagrees with ``dims``, tensors under ``min_bytes`` bytes, and all of
    them on a big-endian host.

    Args:
        graph: a stripped graph (serialized, or a ModelProto, which is not modified).
        min_bytes: the smallest payload (bytes) worth sharing.

    Returns:
        One :class:`ShareableTensor` per initializer, in graph order.

    Raises:
        DataError: code ``invalid_onnx`` if ``graph`` is not a stored graph.
    """
    if sys.byteorder != "little":
        return []
    out = []
    for t in parse_graph(graph).graph.initializer:
        entries = stripped_entries(t)
        code = _SHAREABLE_DTYPES.get(t.data_type)
        if entries is None or code is None or entries[KEY_ENCODING] not in _NUMERIC_ENCODINGS:
            continue
        dtype = np.dtype(code)
        nbytes = math.prod(t.dims) * dtype.itemsize
        if nbytes >= max(1, min_bytes) and entries.get("length") == str(nbytes):
            out.append(ShareableTensor(t.name, entries[KEY_DIGEST], dtype, tuple(t.dims), nbytes))
    return out


def with_external_locations(graph: Union[bytes, ModelProto], locations: Mapping[str, str]) -> ModelProto:
    """A copy of a stripped graph whose named main-graph initializers refer to ordinary ONNX external-data files.

    Each named initializer keeps ``name``, ``dims`` and ``data_type``; its ``external_data`` becomes the
    single entry ``location`` (offset 0, the whole file: a blob of a :class:`ShareableTensor` is exactly
    the external-data layout). ONNX Runtime refuses unknown keys such as ``digest`` ("model format
    error"). Every other stripped tensor is left as is, for :func:`join_model` to fill in.

    Args:
        graph: a stripped graph (serialized, or a ModelProto, which is not modified).
        locations: main-graph initializer name (from :func:`shareable_initializers`) -> file path
            relative to the folder the runtime resolves external data against (ONNX Runtime
            refuses absolute paths and ``..``).

    Returns:
        The ModelProto.

    Raises:
        DataError: code ``invalid_onnx`` if ``graph`` is not a stored graph.
        ProgrammingError: code ``bad_input`` if a name is not a stripped main-graph initializer.
    """
    m = parse_graph(graph)
    missing = set(locations)
    for t in m.graph.initializer:
        if t.name in missing and stripped_entries(t) is not None:
            missing.discard(t.name)
            del t.external_data[:]
            entry = t.external_data.add()
            entry.key, entry.value = "location", locations[t.name]
    if missing:
        raise ProgrammingError(
            f"with_external_locations: {sorted(missing)} are not stripped initializers of the graph", code="bad_input"
        )
    return m
