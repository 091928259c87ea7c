"""Reading, checking, describing, splitting and re-joining ONNX models.

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

Errors follow PEP 249 (``modelsql.errors``) with stable codes: ``file_not_found``
(ProgrammingError), ``invalid_onnx`` (DataError), ``blob_missing`` /
``blob_corrupt`` (DataError, from :mod:`modelsql.storage`).
"""

from __future__ import annotations

import hashlib
import math
import os
import sys
from pathlib import Path
from dataclasses import dataclass
from typing import Iterator, Mapping, Optional, Sequence, Union

import numpy as np
import onnx
from onnx import AttributeProto, GraphProto, ModelProto, NodeProto, TensorProto, TypeProto, helper, numpy_helper

from modelsql.catalog.entries import Dim, StoredTensor, TensorSpec
from modelsql.errors import DataError, NotSupportedError, ProgrammingError
from modelsql.storage.files import read_regular_file, require_regular_file
from modelsql.storage.blobstore import BlobCorruptError, BlobMissingError

__all__ = [
    "ModelSource",
    "load_model",
    "check_model",
    "signature",
    "split_model",
    "join_model",
    "stored_tensors",
    "referenced_digests",
    "param_count",
    "opset",
    "BLOB_LOCATION_PREFIX",
    "ATTRIBUTE_MIN_ELEMENTS",
    "ShareableTensor",
    "shareable_initializers",
    "with_external_locations",
]

ModelSource = Union[str, os.PathLike, bytes, bytearray, memoryview, ModelProto]
"""What :func:`load_model` accepts: a file path, serialized bytes, or a ModelProto."""

BLOB_LOCATION_PREFIX = "modelsql-blob:"
"""Prefix of the ``location`` external-data entry of a stripped initializer."""

_DATA_FIELDS = ("raw_data", "float_data", "int32_data", "string_data", "int64_data", "double_data", "uint64_data")
_REPEATED_FIELDS = _DATA_FIELDS[1:]
_KEY_DIGEST = "digest"
_KEY_ENCODING = "modelsql.encoding"
_KEY_LOCATION_SET = "modelsql.data_location"
_PROTOBUF_LIMIT = 2**31 - 1

ATTRIBUTE_MIN_ELEMENTS = 16
"""INTS, TENSOR and TENSORS node attributes with at least this many elements are stored
as blobs by :func:`split_model`; smaller ones stay inline in the graph. (Non-empty FLOATS
attributes are always stored.)"""


# --------------------------------------------------------------------------------------
# loading and checking
# --------------------------------------------------------------------------------------


def _reason(exc: BaseException) -> str:
    """One-sentence reason from a checker/protobuf exception (first non-empty line)."""
    text = str(exc).strip()
    for line in text.splitlines():
        line = line.strip()
        if line:
            text = line
            break
    else:
        text = type(exc).__name__
    if text.startswith("[ONNXRuntimeError]"):
        text = text.split(":", 1)[-1].strip()
    return text.rstrip(".")


def _invalid(what: str, reason: str) -> DataError:
    return DataError(f"{what} is not a valid ONNX model: {reason}.", code="invalid_onnx")


def _parse(data: bytes, what: str) -> ModelProto:
    model = ModelProto()
    try:
        model.ParseFromString(bytes(data))
    except Exception as exc:  # google.protobuf.message.DecodeError and friends
        raise _invalid(what, f"cannot decode it as an ONNX protobuf ({_reason(exc)})") from None
    return model


def check_model(model: ModelProto, what: str = "<ModelProto>", path: Optional[Path] = None) -> None:
    """Run ``onnx.checker.check_model`` (``full_check=False``) and translate failures.

    Args:
        model: the model; if it is over protobuf's 2 GiB limit, ``path`` is checked instead.
        what: how to name the model in the message (a path, ``"<bytes>"`` ...).
        path: the file the model came from, if any.

    Raises:
        DataError: code ``invalid_onnx``, naming ``what`` and the checker's reason.
    """
    if not model.HasField("graph"):
        raise _invalid(what, "it has no graph")
    try:
        if path is not None and model.ByteSize() > _PROTOBUF_LIMIT:
            onnx.checker.check_model(str(path), full_check=False)
        else:
            onnx.checker.check_model(model, full_check=False)
    except Exception as exc:  # onnx.checker.ValidationError, ValueError for >2GiB ...
        if not _only_ir3_initializer_rule(model, exc):
            raise _invalid(what, _reason(exc)) from None


def _only_ir3_initializer_rule(model: ModelProto, exc: Exception) -> bool:
    """Whether the checker's only complaint is IR < 4's rule that every initializer is also a graph input,
    which ONNX Runtime does not enforce (onnxruntime's own bundled ``mul_1.onnx`` breaks it): the model is
    checked again under IR 4, which dropped the rule."""
    if model.ir_version >= 4 or "in initializer but not in graph input" not in str(exc):
        return False
    relaxed = ModelProto()
    relaxed.CopyFrom(model)
    relaxed.ir_version = 4
    try:
        onnx.checker.check_model(relaxed, full_check=False)
    except Exception:
        return False
    return True


def _check_data_in_memory(model: ModelProto, what: str) -> None:
    for slot in _slots(model):
        t = slot.attr.t if slot.attr is not None and slot.attr.HasField("t") else slot.tensor
        if t is None or t.data_location != TensorProto.EXTERNAL:
            continue
        if _stripped_entries(t) is not None:
            raise _invalid(what, f"tensor {slot.name!r} was stripped by modelsql (a stored graph without its tensors)")
        raise _invalid(
            what, f"tensor {slot.name!r} is in an external data file, which can only be read when loading from a path"
        )


def load_model(source: ModelSource) -> ModelProto:
    """Load and check an ONNX model.

    Args:
        source: a path (``str`` / ``os.PathLike``) to a ``.onnx`` file, the
            serialized model bytes, or an ``onnx.ModelProto`` (returned as is, after checking).
            Tensors in external data files are loaded from the model file's directory.

    Returns:
        The ``onnx.ModelProto`` with all initializer data in memory.

    Raises:
        ProgrammingError: code ``file_not_found`` if the path does not exist; ``not_a_regular_file``
            for a device, a FIFO or a socket (the model file or an external data file; nothing is read).
        DataError: code ``file_too_large`` for a model file over
            :data:`~modelsql.storage.files.MAX_READ_BYTES` (protobuf's 2 GiB limit).
        OperationalError: ``io_error`` when the file cannot be read.
        DataError: code ``invalid_onnx`` if the bytes are not ONNX, are corrupt,
            reference missing external data, or fail ``onnx.checker.check_model``.
        ProgrammingError: code ``unsupported_model`` for any other ``source`` type.
    """
    if isinstance(source, ModelProto):
        check_model(source)
        _check_data_in_memory(source, "<ModelProto>")
        return source
    if isinstance(source, (bytes, bytearray, memoryview)):
        model = _parse(bytes(source), "<bytes>")
        check_model(model, "<bytes>")
        _check_data_in_memory(model, "<bytes>")
        return model
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        what = str(source)
        model = _parse(read_regular_file(path, f'ONNX model file "{what}"'), what)
        external = [slot.tensor for slot in _slots(model) if slot.tensor is not None and _uses_external_data(slot.tensor)]
        for t in external:
            _check_external_file(t, path.parent, what)
        try:
            if external:
                onnx.external_data_helper.load_external_data_for_model(model, str(path.parent))
        except Exception as exc:
            raise _invalid(what, f"cannot load its external data ({_reason(exc)})") from None
        check_model(model, what, path)
        _check_data_in_memory(model, what)
        return model
    raise ProgrammingError(
        f"cannot load an ONNX model from a {type(source).__name__}; "
        "expected a path, bytes or onnx.ModelProto",
        code="unsupported_model",
    )


# --------------------------------------------------------------------------------------
# walking graphs, tensors and large attributes
# --------------------------------------------------------------------------------------


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
class _Slot:
    """One place holding parameter data: a tensor, or a FLOATS/INTS attribute."""

    name: str
    tensor: Optional[TensorProto] = None
    attr: Optional[AttributeProto] = None
    is_attribute: bool = False
    counted: bool = True  # counted by param_count (sparse indices are not)

    def entries(self) -> Optional[dict[str, str]]:
        """The external-data entries if this slot is stripped, else None."""
        if self.attr is not None:
            return _stripped_entries(self.attr.t) if self.attr.HasField("t") else None
        return _stripped_entries(self.tensor)

    def elements(self) -> int:
        if self.attr is not None:
            if self.attr.HasField("t"):
                return math.prod(self.attr.t.dims)
            values = self.attr.floats if self.attr.type == AttributeProto.FLOATS else self.attr.ints
            return len(values)
        return math.prod(self.tensor.dims)

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


def _attribute_slots(nodes) -> Iterator[_Slot]:
    for node in nodes:
        label = _node_label(node)
        for attr in node.attribute:
            if attr.ref_attr_name:
                continue
            if attr.type == AttributeProto.TENSOR:
                yield _Slot(f"{label}.{attr.name}", tensor=attr.t, is_attribute=True)
            elif attr.type == AttributeProto.TENSORS:
                for i, t in enumerate(attr.tensors):
                    yield _Slot(f"{label}.{attr.name}[{i}]", tensor=t, is_attribute=True)
            elif attr.type in (AttributeProto.FLOATS, AttributeProto.INTS):
                yield _Slot(f"{label}.{attr.name}", attr=attr, is_attribute=True)


def _slots(model: ModelProto) -> Iterator[_Slot]:
    """Every place holding parameter data, in a fixed order: per graph (main graph
    first, then subgraphs depth first) its initializers, its sparse initializers
    (values, then indices), then its nodes' attributes; then model-local functions'
    node attributes."""
    for g in all_graphs(model):
        for t in g.initializer:
            yield _Slot(t.name, tensor=t)
        for sp in g.sparse_initializer:
            yield _Slot(sp.values.name, tensor=sp.values)
            yield _Slot(sp.indices.name or f"{sp.values.name}/indices", tensor=sp.indices, counted=False)
        yield from _attribute_slots(g.node)
    for fn in model.functions:
        yield from _attribute_slots(fn.node)


def _check_external_file(t: TensorProto, folder: Path, what: str) -> None:
    """An external data file must be a regular file (never a device or a FIFO, which would be read
    without end or block); ONNX's own loader then checks that it stays inside the model's folder and
    that offset and length fit the file."""
    entries = {e.key: e.value for e in t.external_data}
    location = entries.get("location")
    if location and os.path.lexists(folder / location):  # (a missing one: the loader says invalid_onnx)
        st = require_regular_file(folder / location, f'the external data file "{location}" of tensor {t.name!r} of '
                                                     f"{what}")
        _check_external_size(t, entries, st.st_size, what)


MAX_EXTERNAL_BYTES = 16 << 30
"""The most bytes one tensor's external data may hold (16 GiB): what IMPORT reads into memory is bounded."""


def _check_external_size(t: TensorProto, entries: dict, file_size: int, what: str) -> None:
    """The bytes a tensor's external data would read (``length``, else the file past ``offset``) must be what its
    shape and type need, and at most :data:`MAX_EXTERNAL_BYTES`: nothing larger is read.

    Raises:
        DataError: ``file_too_large``; ``invalid_onnx`` when the sizes differ.
    """
    try:
        offset = int(entries.get("offset", 0))
        size = int(entries["length"]) if "length" in entries else file_size - offset
        itemsize = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.data_type)).itemsize
    except (ValueError, TypeError, KeyError):
        return  # ONNX's own loader refuses what cannot be read
    if size > MAX_EXTERNAL_BYTES:
        raise DataError(f"{what}: the external data of tensor {t.name!r} holds {size:,} bytes, more than the "
                        f"{MAX_EXTERNAL_BYTES:,} bytes IMPORT reads for one tensor.", code="file_too_large")
    need = int(np.prod(t.dims, dtype=np.int64)) * itemsize
    if t.data_type != TensorProto.STRING and size != need:
        raise _invalid(what, f"the external data of tensor {t.name!r} holds {size:,} bytes, but its shape "
                             f"{list(t.dims)} of {_elem_name(t.data_type)} needs {need:,}")


def _uses_external_data(t: TensorProto) -> bool:
    return t.data_location == TensorProto.EXTERNAL and _stripped_entries(t) is None


def _elem_name(data_type: int) -> str:
    try:
        return TensorProto.DataType.Name(data_type)
    except ValueError:
        return f"UNKNOWN_{data_type}"


# --------------------------------------------------------------------------------------
# signature, opset, parameter count
# --------------------------------------------------------------------------------------


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
        return TensorSpec(name, _elem_name(tt.elem_type), shape)
    return TensorSpec(name, type_text(tp), None)


def type_text(tp: TypeProto) -> str:
    """A non-tensor ONNX type as text: ``SEQUENCE(MAP(INT64, FLOAT))`` (a ZipMap output),
    ``MAP(STRING, DOUBLE)``, ``SEQUENCE(FLOAT)`` (a sequence of float tensors), ``OPTIONAL(...)``;
    a tensor type is its element type name."""
    which = tp.WhichOneof("value")
    if which in ("tensor_type", "sparse_tensor_type"):
        return _elem_name(getattr(tp, which).elem_type)
    if which == "sequence_type":
        return f"SEQUENCE({type_text(tp.sequence_type.elem_type)})"
    if which == "map_type":
        return f"MAP({_elem_name(tp.map_type.key_type)}, {type_text(tp.map_type.value_type)})"
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
    return sum(slot.elements() for slot in _slots(model) if slot.counted and slot.stored())


# --------------------------------------------------------------------------------------
# split / join
# --------------------------------------------------------------------------------------


def _proto_payload(t: TensorProto) -> bytes:
    """A TensorProto holding only data_type, dims and data fields, serialized."""
    p = TensorProto()
    p.data_type = t.data_type
    p.dims.extend(t.dims)
    if t.HasField("raw_data"):
        p.raw_data = t.raw_data
    for f in _REPEATED_FIELDS:
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
        for f in _REPEATED_FIELDS:
            getattr(t, f).extend(getattr(src, f))
    elif encoding in _REPEATED_FIELDS:
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
    filled = [f for f in _REPEATED_FIELDS if len(getattr(t, f))]
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
        (_KEY_DIGEST, digest),
        (_KEY_ENCODING, encoding),
    ]
    if location_set:
        entries.append((_KEY_LOCATION_SET, "DEFAULT"))
    for k, v in entries:
        e = t.external_data.add()
        e.key = k
        e.value = v


def _strip_tensor(t: TensorProto, name: str) -> tuple[StoredTensor, bytes]:
    if t.data_location == TensorProto.EXTERNAL:
        raise DataError(
            f"tensor {name!r} still refers to an external data file; "
            "load the model with modelsql.formats.load_model(path) first",
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
    for f in _DATA_FIELDS:
        t.ClearField(f)
    _mark(t, digest, len(payload), encoding, location_set)
    info = StoredTensor(
        name=name, digest=digest, elem_type=_elem_name(t.data_type), dims=tuple(t.dims), nbytes=len(payload)
    )
    return info, payload


_ATTR_KINDS = {
    AttributeProto.FLOATS: ("floats", "attribute_floats", TensorProto.FLOAT, "<f4"),
    AttributeProto.INTS: ("ints", "attribute_ints", TensorProto.INT64, "<i8"),
}


def _fill_attribute(attr: AttributeProto, payload: bytes, encoding: str) -> None:
    field, expected, _, dtype = _ATTR_KINDS.get(attr.type, (None, None, None, None))
    if encoding != expected:
        raise DataError(f"attribute {attr.name!r} has unexpected encoding {encoding!r}", code="invalid_onnx")
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
    info = StoredTensor(name=name, digest=digest, elem_type=_elem_name(data_type), dims=(n,), nbytes=len(payload))
    return info, payload


def _stripped_entries(t: TensorProto) -> Optional[dict[str, str]]:
    if t.data_location != TensorProto.EXTERNAL:
        return None
    entries = {e.key: e.value for e in t.external_data}
    return entries if _KEY_DIGEST in entries and _KEY_ENCODING in entries else None


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
    for slot in list(_slots(m)):
        if not slot.stored():
            continue
        if slot.attr is not None:
            stored = _strip_attribute(slot.attr, slot.name)
            if stored is not None:
                tensors.append(stored)
        else:
            tensors.append(_strip_tensor(slot.tensor, slot.name))
    return m.SerializeToString(deterministic=True), tensors


def _parse_graph(graph_bytes: Union[bytes, ModelProto]) -> ModelProto:
    if isinstance(graph_bytes, ModelProto):
        m = ModelProto()
        m.CopyFrom(graph_bytes)
        return m
    return _parse(bytes(graph_bytes), "the stored graph")


def stored_tensors(graph: Union[bytes, ModelProto]) -> list[StoredTensor]:
    """The :class:`StoredTensor` entries a stripped graph refers to, in the order
    :func:`split_model` returned them."""
    m = _parse_graph(graph)
    out = []
    for slot in _slots(m):
        entries = slot.entries()
        if entries is None:
            continue
        t = slot.attr.t if slot.attr is not None else slot.tensor
        out.append(
            StoredTensor(
                name=slot.name,
                digest=entries[_KEY_DIGEST],
                elem_type=_elem_name(t.data_type),
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
    m = _parse_graph(graph_bytes)
    for slot in list(_slots(m)):
        entries = slot.entries()
        if entries is None:
            continue
        digest = entries[_KEY_DIGEST]
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
            _fill_attribute(slot.attr, payload, entries[_KEY_ENCODING])
        else:
            t = slot.tensor
            del t.external_data[:]
            t.ClearField("data_location")
            if _KEY_LOCATION_SET in entries:
                t.data_location = TensorProto.DEFAULT
            _fill(t, payload, entries[_KEY_ENCODING])
    return m


# --------------------------------------------------------------------------------------
# shared weights: initializers a runtime maps from the store instead of parsing
# --------------------------------------------------------------------------------------

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

_NUMERIC_ENCODINGS = frozenset(("raw_data",) + _REPEATED_FIELDS) - {"string_data"}


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
    for t in _parse_graph(graph).graph.initializer:
        entries = _stripped_entries(t)
        code = _SHAREABLE_DTYPES.get(t.data_type)
        if entries is None or code is None or entries[_KEY_ENCODING] not in _NUMERIC_ENCODINGS:
            continue
        dtype = np.dtype(code)
        nbytes = math.prod(t.dims) * dtype.itemsize
        if nbytes >= max(1, min_bytes) and entries.get("length") == str(nbytes):
            out.append(ShareableTensor(t.name, entries[_KEY_DIGEST], dtype, tuple(t.dims), nbytes))
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
    m = _parse_graph(graph)
    missing = set(locations)
    for t in m.graph.initializer:
        if t.name in missing and _stripped_entries(t) is not None:
            missing.discard(t.name)
            del t.external_data[:]
            entry = t.external_data.add()
            entry.key, entry.value = "location", locations[t.name]
    if missing:
        raise ProgrammingError(
            f"with_external_locations: {sorted(missing)} are not stripped initializers of the graph", code="bad_input"
        )
    return m


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
