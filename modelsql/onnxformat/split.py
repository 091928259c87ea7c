"""The stored format: a model split into its graph without parameter data and its tensors, and re-joined.

A model is stored as its graph *without* parameter data plus one blob per
parameter tensor, keyed by the SHA-256 of the tensor's bytes, so identical
tensors in different models are stored once and can be loaded once (the Object
Store of PRETZEL, Lee et al., OSDI 2018; see docs/architecture.md).
:func:`split_model` and :func:`join_model` are exact inverses:
``join_model(*split_model(m))`` serializes to the same bytes as ``m``.

What is stored as a blob
------------------------

* every initializer (``graph.initializer``), and the ``values`` and ``indices``
  of every sparse initializer, of the main graph, of every subgraph (``If`` /
  ``Loop`` / ``Scan`` bodies) and of subgraphs inside model-local functions;
* every non-empty ``FLOATS`` node attribute, and ``INTS``, ``TENSOR`` and
  ``TENSORS`` (``Constant`` values) node attributes of at least
  :data:`ATTRIBUTE_MIN_ELEMENTS` elements. This matters for classical ML:
  skl2onnx puts a scaler's offsets, a linear model's coefficients and a tree
  ensemble's node arrays into ``ai.onnx.ml`` node attributes, not initializers.
  (Small ``INTS``/``TENSOR`` attributes are hyper-parameters such as ``axes``,
  ``perm`` or scalar constants and stay inline.)

Representation of a stripped tensor (in the graph blob)
-------------------------------------------------------

A stripped ``TensorProto`` keeps ``name``, ``dims``, ``data_type``,
``segment``, ``doc_string`` and ``metadata_props``; its data fields
(``raw_data``, ``float_data``, ``int32_data``, ``string_data``,
``int64_data``, ``double_data``, ``uint64_data``) are cleared,
``data_location`` is set to ``EXTERNAL`` (ONNX's own external-data mechanism)
and ``external_data`` holds these entries, in this order:

==========================  ===================================================
key                         value
==========================  ===================================================
``location``                ``"modelsql-blob:<digest>"`` (never a real file, so
                            an ONNX loader fails loudly on a stripped graph)
``length``                  payload size in bytes (decimal)
``digest``                  SHA-256 hex digest of the payload (the blob key)
``modelsql.encoding``       where the data goes back: ``raw_data``,
                            ``float_data``, ``int32_data``, ``int64_data``,
                            ``double_data``, ``uint64_data``, ``none`` (an
                            empty tensor), ``tensor_proto`` (see below),
                            ``attribute_floats`` or ``attribute_ints``
``modelsql.data_location``  present (``"DEFAULT"``) only when the original set
                            ``data_location`` explicitly
==========================  ===================================================

A stripped ``FLOATS``/``INTS`` attribute keeps its name and type, its list is
emptied, and its (otherwise unused) ``t`` field holds a placeholder TensorProto
as above: ``data_type`` FLOAT / INT64, ``dims`` ``[len]``, encoding
``attribute_floats`` / ``attribute_ints``; the placeholder's name is the
stored tensor's name, ``"<node name or first output>.<attribute name>"``.

Payload (the blob) of a tensor:

* numeric tensors: the raw little-endian element bytes: ``raw_data`` when the
  tensor has it, else ``onnx.numpy_helper.to_array(t).tobytes()``; ``FLOATS``
  attributes as float32 and ``INTS`` as int64. So the same values held in
  ``float_data``, in ``raw_data`` or in a ``FLOATS`` attribute share one blob.
* ``STRING`` tensors (and, as a fallback, any tensor whose typed field cannot be
  rebuilt bit-exactly from its raw bytes, e.g. floats holding NaN payloads):
  the serialized ``TensorProto`` holding only ``data_type``, ``dims`` and the
  data fields (no name); encoding ``tensor_proto``.

Errors follow PEP 249 (``modelsql.errors``) with stable codes: ``invalid_onnx``
(DataError), ``blob_missing`` / ``blob_corrupt`` (DataError, from :mod:`modelsql.storage`).
"""

from __future__ import annotations

import hashlib
import sys
from typing import Mapping, Optional, Union

import numpy as np
from onnx import AttributeProto, ModelProto, TensorProto, helper, numpy_helper

from modelsql.catalog.entries import StoredTensor
from modelsql.errors import DataError, NotSupportedError
from modelsql.onnxformat.load import parse_model
from modelsql.onnxformat.walk import KEY_DIGEST, KEY_ENCODING, elem_name, slots
from modelsql.storage.blobstore import BlobCorruptError, BlobMissingError

__all__ = ["split_model", "join_model", "stored_tensors", "referenced_digests", "parse_graph", "initializer_value",
           "BLOB_LOCATION_PREFIX", "DATA_FIELDS", "REPEATED_FIELDS", "KEY_LOCATION_SET"]

BLOB_LOCATION_PREFIX = "modelsql-blob:"
"""Prefix of the ``location`` external-data entry of a stripped initializer."""

DATA_FIELDS = ("raw_data", "float_data", "int32_data", "string_data", "int64_data", "double_data", "uint64_data")
"""The data fields of a TensorProto, which a stripped tensor has cleared."""
REPEATED_FIELDS = DATA_FIELDS[1:]
"""The typed (repeated) data fields: every data field but ``raw_data``."""
KEY_LOCATION_SET = "modelsql.data_location"
"""The external-data key present when the original tensor set ``data_location`` explicitly."""


def _proto_payload(t: TensorProto) -> bytes:
    """A TensorProto holding only data_type, dims and data fields, serialized."""
    p = TensorProto()
    p.data_type = t.data_type
    p.dims.extend(t.dims)
    if t.HasField("raw_data"):
        p.raw_data = t.raw_data
    for f in REPEATED_FIELDS:
        getattr(p, f).extend(getattr(t, f))
    return p.SerializeToString(deterministic=True)


def _fill(t: TensorProto, payload: bytes, encoding: str) -> None:
    """Put ``payload`` back into the data field ``encoding`` of ``t`` (data fields empty)."""
    if encoding == "raw_data":
        t.raw_data = payload
    elif encoding == "none":
        pass
    elif encoding == "tensor_proto":
        src = TensorProto.FromString(payload)
        if src.HasField("raw_data"):
            t.raw_data = src.raw_data
        for f in REPEATED_FIELDS:
            getattr(t, f).extend(getattr(src, f))
    elif encoding in REPEATED_FIELDS:
        np_dtype = helper.tensor_dtype_to_np_dtype(t.data_type)
        arr = np.frombuffer(payload, dtype=np_dtype)
        if sys.byteorder == "big":  # payloads are little-endian
            arr = arr.byteswap()
        tmp = helper.make_tensor("", t.data_type, list(t.dims), arr, raw=False)
        getattr(t, encoding).extend(getattr(tmp, encoding))
    else:
        raise DataError(f"unknown tensor encoding {encoding!r} in a stored graph", code="invalid_onnx")


def _encode(t: TensorProto) -> tuple[bytes, str]:
    """(payload, encoding) of one tensor, such that _fill(stripped, payload, encoding) restores t exactly."""
    has_raw = t.HasField("raw_data")
    filled = [f for f in REPEATED_FIELDS if len(getattr(t, f))]
    if t.data_type == TensorProto.STRING:
        return _proto_payload(t), "tensor_proto"
    if has_raw and not filled:
        return bytes(t.raw_data), "raw_data"
    if not has_raw and not filled:
        return b"", "none"
    if len(filled) == 1 and not has_raw:
        encoding = filled[0]
        try:
            payload = numpy_helper.tobytes_little_endian(numpy_helper.to_array(t))
            rebuilt = TensorProto()
            rebuilt.data_type = t.data_type
            rebuilt.dims.extend(t.dims)
            _fill(rebuilt, payload, encoding)
            if _proto_payload(rebuilt) == _proto_payload(t):  # bit-exact round trip
                return payload, encoding
        except Exception:
            pass
    return _proto_payload(t), "tensor_proto"


def _mark(t: TensorProto, digest: str, length: int, encoding: str, location_set: bool) -> None:
    """Turn ``t`` (data fields already empty) into a stripped tensor pointing at ``digest``."""
    t.data_location = TensorProto.EXTERNAL
    entries = [
        ("location", BLOB_LOCATION_PREFIX + digest),
        ("length", str(length)),
        (KEY_DIGEST, digest),
        (KEY_ENCODING, encoding),
    ]
    if location_set:
        entries.append((KEY_LOCATION_SET, "DEFAULT"))
    for k, v in entries:
        e = t.external_data.add()
        e.key = k
        e.value = v


def _strip_tensor(t: TensorProto, name: str) -> tuple[StoredTensor, bytes]:
    if t.data_location == TensorProto.EXTERNAL:
        raise DataError(
            f"tensor {name!r} still refers to an external data file; "
            "load the model with modelsql.onnxformat.load_model(path) first",
            code="invalid_onnx",
        )
    if len(t.external_data):
        raise NotSupportedError(
            f"tensor {name!r} has external_data entries but no external data location",
            code="unsupported_model",
        )
    payload, encoding = _encode(t)
    digest = hashlib.sha256(payload).hexdigest()
    location_set = t.HasField("data_location")
    for f in DATA_FIELDS:
        t.ClearField(f)
    _mark(t, digest, len(payload), encoding, location_set)
    info = StoredTensor(
        name=name, digest=digest, elem_type=elem_name(t.data_type), dims=tuple(t.dims), nbytes=len(payload)
    )
    return info, payload


_ATTR_KINDS = {
    AttributeProto.FLOATS: ("floats", "attribute_floats", TensorProto.FLOAT, "<f4"),
    AttributeProto.INTS: ("ints", "attribute_ints", TensorProto.INT64, "<i8"),
}


def _fill_attribute(attr: AttributeProto, payload: bytes, encoding: str) -> None:
    kind = _ATTR_KINDS.get(attr.type)
    if kind is None or encoding != kind[1]:
        raise DataError(f"attribute {attr.name!r} has unexpected encoding {encoding!r}", code="invalid_onnx")
    field, _, _, dtype = kind
    getattr(attr, field).extend(np.frombuffer(payload, dtype=dtype).tolist())


def _strip_attribute(attr: AttributeProto, name: str) -> Optional[tuple[StoredTensor, bytes]]:
    """Strip a FLOATS/INTS attribute; None (left inline) if that would not be exact."""
    if attr.HasField("t"):
        return None
    field, encoding, data_type, dtype = _ATTR_KINDS[attr.type]
    values = getattr(attr, field)
    payload = np.asarray(values, dtype=dtype).tobytes()
    original = AttributeProto()
    getattr(original, field).extend(values)
    rebuilt = AttributeProto()
    getattr(rebuilt, field).extend(np.frombuffer(payload, dtype=dtype).tolist())
    if rebuilt.SerializeToString() != original.SerializeToString():  # e.g. NaN payloads
        return None
    digest = hashlib.sha256(payload).hexdigest()
    n = len(values)
    attr.ClearField(field)
    attr.t.name = name
    attr.t.data_type = data_type
    attr.t.dims.append(n)
    _mark(attr.t, digest, len(payload), encoding, False)
    info = StoredTensor(name=name, digest=digest, elem_type=elem_name(data_type), dims=(n,), nbytes=len(payload))
    return info, payload


def split_model(model: ModelProto) -> tuple[bytes, list[tuple[StoredTensor, bytes]]]:
    """Split a model into its graph without parameter data and one payload per tensor.

    The input model is not modified. See the module docstring for what is
    stored, the stripped representation and the payload format. Digests depend
    only on tensor contents (not names), so identical tensors in different
    models get the same digest (PRETZEL's Object Store dedup).

    Args:
        model: a model with all data in memory (as returned by :func:`load_model`).

    Returns:
        ``(graph_bytes, tensors)``: the serialized stripped ModelProto
        (deterministic: the same model always gives the same bytes), and for
        each stored tensor its :class:`StoredTensor` and payload bytes, in graph
        order. Sparse initializers give two tensors, ``values`` and ``indices``
        (named ``"<name>/indices"`` when unnamed). The same digest may appear
        more than once.

    Raises:
        DataError: code ``invalid_onnx`` if a tensor still points at an external file.
    """
    m = ModelProto()
    m.CopyFrom(model)
    tensors: list[tuple[StoredTensor, bytes]] = []
    for slot in list(slots(m)):
        if not slot.stored():
            continue
        if slot.attr is not None:
            stored = _strip_attribute(slot.attr, slot.name)
            if stored is not None:
                tensors.append(stored)
        else:
            tensors.append(_strip_tensor(slot.data_tensor(), slot.name))
    return m.SerializeToString(deterministic=True), tensors


def parse_graph(graph_bytes: Union[bytes, ModelProto]) -> ModelProto:
    """A stored graph as a ModelProto of its own (a copy when given one)."""
    if isinstance(graph_bytes, ModelProto):
        m = ModelProto()
        m.CopyFrom(graph_bytes)
        return m
    return parse_model(bytes(graph_bytes), "the stored graph")


def stored_tensors(graph: Union[bytes, ModelProto]) -> list[StoredTensor]:
    """The :class:`StoredTensor` entries a stripped graph refers to, in the order
    :func:`split_model` returned them."""
    m = parse_graph(graph)
    out = []
    for slot in slots(m):
        entries = slot.entries()
        if entries is None:
            continue
        t = slot.attr.t if slot.attr is not None else slot.data_tensor()
        out.append(
            StoredTensor(
                name=slot.name,
                digest=entries[KEY_DIGEST],
                elem_type=elem_name(t.data_type),
                dims=tuple(t.dims),
                nbytes=int(entries.get("length", "0")),
            )
        )
    return out


def referenced_digests(graph: Union[bytes, ModelProto]) -> set[str]:
    """The set of tensor digests a stripped graph refers to (for garbage collection)."""
    return {t.digest for t in stored_tensors(graph)}


def join_model(graph_bytes: Union[bytes, ModelProto], payloads: Mapping[str, bytes]) -> ModelProto:
    """Rebuild a model from :func:`split_model`'s output: the exact inverse.

    Args:
        graph_bytes: the stripped graph (serialized, or a ModelProto, which is not modified).
        payloads: digest -> payload bytes for every tensor the graph refers to
            (extra entries are ignored). Payloads are not re-hashed here;
            :meth:`modelsql.storage.BlobStore.get` verifies them on read.

    Returns:
        The ModelProto; ``join_model(*split)`` serializes to the original's bytes.

    Raises:
        BlobMissingError: a digest the graph refers to is not in ``payloads``.
        BlobCorruptError: a payload's length differs from the recorded one.
        DataError: code ``invalid_onnx`` if ``graph_bytes`` is not a stored graph.
    """
    m = parse_graph(graph_bytes)
    for slot in list(slots(m)):
        entries = slot.entries()
        if entries is None:
            continue
        digest = entries[KEY_DIGEST]
        try:
            payload = bytes(payloads[digest])
        except KeyError:
            raise BlobMissingError(
                f"tensor {slot.name!r} refers to blob {digest}, which was not supplied", digest=digest
            ) from None
        if "length" in entries and int(entries["length"]) != len(payload):
            raise BlobCorruptError(
                f"blob {digest} for tensor {slot.name!r} has {len(payload)} bytes, expected {entries['length']}",
                digest=digest,
            )
        if slot.attr is not None:
            slot.attr.ClearField("t")
            _fill_attribute(slot.attr, payload, entries[KEY_ENCODING])
        else:
            t = slot.data_tensor()
            del t.external_data[:]
            t.ClearField("data_location")
            if KEY_LOCATION_SET in entries:
                t.data_location = TensorProto.DEFAULT
            _fill(t, payload, entries[KEY_ENCODING])
    return m


def initializer_value(graph: Union[bytes, ModelProto], name: str, payload: bytes) -> np.ndarray:
    """The value of the stripped initializer ``name`` of a stored graph, from its payload alone (the graph's
    other tensors are not needed).

    Raises:
        KeyError: the graph has no stripped initializer ``name``.
        DataError: ``invalid_onnx`` for an encoding this module does not write.
    """
    m = parse_graph(graph)
    tensor = next((t for t in m.graph.initializer if t.name == name and t.external_data), None)
    if tensor is None:
        raise KeyError(name)
    entries = {e.key: e.value for e in tensor.external_data}
    out = TensorProto()
    out.data_type = tensor.data_type
    out.dims.extend(tensor.dims)
    _fill(out, payload, entries[KEY_ENCODING])
    return numpy_helper.to_array(out)
