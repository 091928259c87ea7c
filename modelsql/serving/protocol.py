"""Parsing inference requests and encoding responses: OIP JSON and Triton's binary tensor extension.

Wire formats:

* Open Inference Protocol, REST (kserve open-inference-protocol,
  ``specification/protocol/inference_rest.md``, "Inference Request JSON
  Object" / "Inference Response JSON Object"): a tensor's ``data`` is flat or
  nested, in row-major order; a BYTES element is a JSON string.
* Triton's binary tensor data extension (triton-inference-server/server,
  ``docs/protocol/extension_binary_data.md``): the body is the JSON header
  followed by raw tensor bytes, and the HTTP header
  ``Inference-Header-Content-Length`` gives the JSON header's length in bytes.
  A binary input carries ``"parameters": {"binary_data_size": n}`` and its
  ``n`` bytes follow the header in the order of the inputs; fixed-size
  elements are little-endian; a BYTES element is a 4-byte little-endian length
  followed by that many bytes. The request parameter ``binary_data_output``
  (default false) and each requested output's ``parameters.binary_data``
  (which wins) ask for binary outputs; a response with binary outputs sets
  ``Inference-Header-Content-Length`` and is ``application/octet-stream``.

Everything in a request is checked against the servable's metadata; every
failure raises :class:`ProtocolError` whose message names the model, the
tensor and what was expected against what was sent. A tensor of one value per
row takes both ways of writing it: ``[N]`` and ``[N, 1]`` (what Triton clients
usually send), reshaped to the model's. Nested ``data`` must be
regular (every array at one depth of one length: the spec's "multi-dimensional
representation"); ragged nesting is refused (400) naming the input and where.

Non-finite floats in JSON outputs: JSON has no NaN or infinity. Like Triton
(whose JSON writer has rapidjson's ``kWriteNanAndInfFlag``; its test
``qa/L0_nan_inf`` reads such a response with Python's ``json`` and
tritonclient), a JSON output writes them as the bare tokens ``NaN``,
``Infinity`` and ``-Infinity``, which Python's ``json`` and tritonclient
read back, never as ``null``; a strict JSON
parser refuses them, so ask for binary outputs (``binary_data_output``) to
get exact IEEE values through any client.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Optional

import numpy as np
import orjson

from modelsql.serving.repository import DATATYPES, Servable, TensorMetadata, numpy_to_oip

__all__ = [
    "ProtocolError",
    "RequestedOutput",
    "InferRequest",
    "HEADER_LENGTH",
    "parse_infer_request",
    "encode_infer_response",
    "serialize_bytes",
    "deserialize_bytes",
]

HEADER_LENGTH = "inference-header-content-length"
"""The HTTP header (lower case) that splits a binary body into JSON header and tensor bytes."""

_LE = {name: dt.newbyteorder("<") for name, dt in DATATYPES.items() if name != "BYTES"}


class ProtocolError(Exception):
    """A request the server answers with HTTP ``status`` and ``{"error": message}``.

    Attributes:
        status: the HTTP status code (400 bad request, 404 unknown model, 413 body too large, 500 ...).
        message: names the model, the tensor and what was expected against what was sent.
    """

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class RequestedOutput:
    """One output to return: its name and whether it travels as binary data (Triton extension)."""

    name: str
    binary: bool


@dataclass(frozen=True)
class InferRequest:
    """A validated inference request.

    Attributes:
        id: the request's ``id``, echoed in the response (None when absent).
        inputs: input name -> array of the servable's dtype and the request's shape
            (batch axis first; BYTES: object array of ``str`` from JSON, ``bytes`` from binary data).
        outputs: what to return, in order: the requested ``outputs``, or every output of the servable.
        rows: the batch size, the first dimension shared by every input.
    """

    id: Optional[Any]
    inputs: dict[str, np.ndarray]
    outputs: tuple[RequestedOutput, ...]
    rows: int


def parse_infer_request(body: bytes | bytearray, servable: Servable, header_length: Optional[str] = None) -> InferRequest:
    """Parse and validate ``POST /v2/models/{name}/infer``'s body for ``servable``.

    Args:
        body: the whole request body (a ``bytearray`` gives writable binary tensors).
        servable: what the request is for; its ``inputs``/``outputs`` metadata is the contract.
        header_length: the ``Inference-Header-Content-Length`` header value, or None
            when the body is JSON only.

    Raises:
        ProtocolError: 400 for bad JSON, a bad header length, an unknown, missing,
            duplicated or mistyped input, a wrong shape, data not matching the shape,
            a bad ``binary_data_size``, unused binary bytes, or an ``outputs`` entry naming no output.
    """
    model = servable.name
    head, tail = _split_body(model, body, header_length)
    request = _load_json(model, head)
    params = _object(model, request.get("parameters", {}), "the request's parameters")
    inputs, rows, used = _parse_inputs(servable, request.get("inputs"), tail)
    if used != len(tail):
        raise _bad(model, f"the body has {len(tail)} bytes of binary data after the JSON header but the inputs' "
                          f"binary_data_size add up to {used}")
    outputs = _parse_outputs(servable, request.get("outputs"), _flag(model, params, "binary_data_output", "the request"))
    return InferRequest(request.get("id"), inputs, outputs, rows)


def encode_infer_response(servable: Servable, request: InferRequest, results: Mapping[str, np.ndarray]) -> tuple[bytes, dict[str, str]]:
    """The response body and headers for ``results`` (output name -> array) of ``request``.

    Returns:
        ``(body, headers)``: JSON (``application/json``) when no output is binary;
        otherwise the JSON header followed by the binary outputs, with
        ``Inference-Header-Content-Length`` set and content type ``application/octet-stream``.

    Raises:
        ProtocolError: 500 when ``results`` lacks a requested output or holds a dtype
            OIP cannot carry; 400 when a BYTES output that is not UTF-8 is asked for as JSON.
    """
    tensors, blobs = [], []
    for out in request.outputs:
        tensor, blob = _encode_output(servable.name, out, results)
        tensors.append(tensor)
        if blob is not None:
            blobs.append(blob)
    response: dict[str, Any] = {"model_name": servable.name, "model_version": servable.version}
    if request.id is not None:
        response["id"] = request.id
    response["outputs"] = tensors
    head = orjson.dumps(response, option=orjson.OPT_SERIALIZE_NUMPY)
    if not blobs:
        return head, {"content-type": "application/json"}
    headers = {"content-type": "application/octet-stream", HEADER_LENGTH: str(len(head))}
    return b"".join([head, *blobs]), headers


def serialize_bytes(values: np.ndarray) -> bytes:
    """BYTES elements (``str`` as UTF-8, or ``bytes``) in row-major order, each as a 4-byte
    little-endian length followed by its bytes (Triton binary tensor extension)."""
    parts = []
    for v in np.asarray(values, dtype=object).reshape(-1):
        b = v.encode("utf-8") if isinstance(v, str) else bytes(v)
        parts.append(struct.pack("<I", len(b)))
        parts.append(b)
    return b"".join(parts)


def deserialize_bytes(buf: bytes | memoryview, count: int) -> tuple[list[bytes], int]:
    """Read ``count`` length-prefixed BYTES elements from ``buf``.

    Returns:
        ``(elements, consumed)``: the elements and how many bytes of ``buf`` they took.

    Raises:
        ValueError: an element's length prefix or bytes run past the end of ``buf``
            (the message gives the element's index).
    """
    out, pos, size = [], 0, len(buf)
    for i in range(count):
        if pos + 4 > size:
            raise ValueError(f"element {i}'s 4-byte length runs past the end of its {size} bytes")
        (n,) = struct.unpack_from("<I", buf, pos)
        pos += 4
        if pos + n > size:
            raise ValueError(f"element {i} is {n} bytes long but only {size - pos} bytes are left")
        out.append(bytes(buf[pos:pos + n]))
        pos += n
    return out, pos


# -- the body and the JSON header ---------------------------------------------------------------


def _bad(model: str, what: str, status: int = 400) -> ProtocolError:
    return ProtocolError(status, f'model "{model}": {what}')


def _split_body(model: str, body: bytes | bytearray, header_length: Optional[str]) -> tuple[memoryview, memoryview]:
    view = memoryview(body)
    if header_length is None:
        return view, view[len(view):]
    try:
        n = int(header_length.strip())
    except ValueError:
        raise _bad(model, f"the Inference-Header-Content-Length header must be an integer; got {header_length!r}") from None
    if n < 0 or n > len(view):
        raise _bad(model, f"the Inference-Header-Content-Length header says {n} bytes but the body has {len(view)} bytes")
    return view[:n], view[n:]


def _load_json(model: str, head: memoryview) -> dict:
    try:
        request = orjson.loads(head)
    except orjson.JSONDecodeError as exc:
        raise _bad(model, f"the request is not valid JSON: {exc}") from None
    return _object(model, request, "the request")


def _object(model: str, value: Any, what: str) -> dict:
    if not isinstance(value, dict):
        raise _bad(model, f"{what} must be a JSON object; got {_kind(value)}")
    return value


def _flag(model: str, params: dict, key: str, where: str) -> bool:
    value = params.get(key, False)
    if not isinstance(value, bool):
        raise _bad(model, f'{where}\'s parameter "{key}" must be true or false; got {_kind(value)}')
    return value


def _describe(value: Any) -> str:
    return repr(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else _kind(value)


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


# -- inputs -------------------------------------------------------------------------------------


def _parse_inputs(servable: Servable, entries: Any, tail: memoryview) -> tuple[dict[str, np.ndarray], int, int]:
    model = servable.name
    if not isinstance(entries, list):
        raise _bad(model, f'the request needs "inputs", an array of tensors; got {_kind(entries)}')
    metas = {m.name: m for m in servable.inputs}
    arrays: dict[str, np.ndarray] = {}
    offset = 0
    for entry in entries:
        entry = _object(model, entry, "each input")
        meta = _input_meta(model, metas, entry.get("name"), arrays)
        shape = _check_signature(model, meta, entry)
        arr, offset = _tensor(model, meta, shape, entry, tail, offset)
        arrays[meta.name] = arr if len(shape) == len(meta.shape) else arr.reshape((shape[0], *meta.shape[1:]))
    missing = [n for n in metas if n not in arrays]
    if missing:
        raise _bad(model, f"missing input(s) {', '.join(map(repr, missing))}; the model's inputs are "
                          f"{_listing(servable.inputs)}")
    return arrays, _rows(model, arrays), offset


def _input_meta(model: str, metas: dict[str, TensorMetadata], name: Any, seen: dict) -> TensorMetadata:
    if not isinstance(name, str):
        raise _bad(model, f'each input needs a "name" string; got {_kind(name)}')
    if name not in metas:
        raise _bad(model, f'unknown input "{name}"; the model\'s inputs are {_listing(metas.values())}')
    if name in seen:
        raise _bad(model, f'input "{name}" is given twice')
    return metas[name]


def _listing(metas) -> str:
    return ", ".join(f'"{m.name}" ({m.datatype} {list(m.shape)})' for m in metas)


def _check_signature(model: str, meta: TensorMetadata, entry: dict) -> tuple[int, ...]:
    where = f'input "{meta.name}"'
    datatype = entry.get("datatype")
    if datatype != meta.datatype:
        raise _bad(model, f"{where} expects datatype {meta.datatype}; got {datatype!r}")
    shape = entry.get("shape")
    if not isinstance(shape, list) or any(isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in shape):
        raise _bad(model, f"{where} needs a shape, an array of non-negative integers; got {orjson.dumps(shape).decode()}")
    if not _matches(meta.shape, shape) and not _one_per_row(meta.shape, shape):
        other = _other_row_layout(meta.shape)
        raise _bad(model, f"{where} expects shape {list(meta.shape)}{' or ' + other if other else ''} (-1: any size; the first dimension is the "
                          f"batch); got {shape}")
    return tuple(shape)


def _matches(expected: tuple[int, ...], shape: list[int]) -> bool:
    return len(shape) == len(expected) and all(m in (-1, d) for m, d in zip(expected, shape))


def _one_per_row(expected: tuple[int, ...], shape: list[int]) -> bool:
    """Whether ``shape`` is the other way of writing one value per row: ``[N, 1]`` for a ``[-1]`` tensor
    (what Triton clients usually send), ``[N]`` for a ``[-1, 1]`` one."""
    if len(expected) == 1 and len(shape) == 2 and shape[1] == 1:
        return expected[0] in (-1, shape[0])
    if len(expected) == 2 and expected[1] == 1 and len(shape) == 1:
        return expected[0] in (-1, shape[0])
    return False


def _other_row_layout(expected: tuple[int, ...]) -> str:
    if len(expected) == 1:
        return f"[{expected[0]}, 1]"
    return f"[{expected[0]}]" if len(expected) == 2 and expected[1] == 1 else ""


def _rows(model: str, arrays: dict[str, np.ndarray]) -> int:
    rows = {name: (a.shape[0] if a.ndim else 1) for name, a in arrays.items()}
    if len(set(rows.values())) > 1:
        listed = ", ".join(f'"{n}" has {r}' for n, r in rows.items())
        raise _bad(model, f"the inputs must have the same first (batch) dimension; {listed}")
    return next(iter(rows.values()), 0)


def _tensor(model: str, meta: TensorMetadata, shape: tuple[int, ...], entry: dict, tail: memoryview,
            offset: int) -> tuple[np.ndarray, int]:
    params = _object(model, entry.get("parameters", {}), f'input "{meta.name}"\'s parameters')
    size = params.get("binary_data_size")
    if size is None:
        if "data" not in entry:
            raise _bad(model, f'input "{meta.name}" needs "data" or parameters.binary_data_size')
        return _json_tensor(model, meta, shape, entry["data"]), offset
    if "data" in entry:
        raise _bad(model, f'input "{meta.name}" has both "data" and parameters.binary_data_size')
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise _bad(model, f'input "{meta.name}": binary_data_size must be a non-negative integer; got {_kind(size)}')
    if offset + size > len(tail):
        raise _bad(model, f'input "{meta.name}": binary_data_size {size} runs past the end of the body '
                          f"({len(tail) - offset} binary bytes left after byte {offset})")
    return _binary_tensor(model, meta, shape, tail[offset:offset + size]), offset + size


# -- JSON data ----------------------------------------------------------------------------------

_ACCEPTS = {"BOOL": "b", "FP16": "iuf", "FP32": "iuf", "FP64": "iuf"}
_NEEDS = {"b": "true/false values", "iu": "integers", "iuf": "numbers"}


_CHUNK_VALUES = 1 << 15
"""Values converted per numpy call: a large request is converted in steps, so a thread parsing it lets
the event loop run between them."""


class _Ragged(ValueError):
    pass


def _json_tensor(model: str, meta: TensorMetadata, shape: tuple[int, ...], data: Any) -> np.ndarray:
    n = math.prod(shape)
    where = f'input "{meta.name}"'
    if meta.datatype == "BYTES":
        if isinstance(data, list) and any(isinstance(v, list) for v in data):
            _regular(model, where, data)
        flat = list(_flatten(data))
        bad = next((i for i, v in enumerate(flat) if not isinstance(v, str)), None)
        if bad is not None:
            raise _bad(model, f"{where} (BYTES) expects strings; element {bad}{_row(shape, bad)} is {_kind(flat[bad])}")
        _check_count(model, where, shape, n, len(flat))
        out = np.empty(n, dtype=object)
        out[:] = flat
        return out.reshape(shape)
    arr = _as_array(model, where, data, n)
    _check_count(model, where, shape, n, arr.size)
    if arr.size == 0:
        return np.zeros(shape, dtype=DATATYPES[meta.datatype])
    return _cast(model, meta, shape, data, arr).reshape(shape)


def _as_array(model: str, where: str, data: Any, n: int) -> np.ndarray:
    """``data`` as an array (numpy picks the dtype), converted ``_CHUNK_VALUES`` values at a time.

    Raises:
        ProtocolError: 400 for ragged nesting, naming ``where`` and the first irregular element.
    """
    if not isinstance(data, list) or n <= _CHUNK_VALUES or not data:
        parts = [data]
    else:
        step = max(1, _CHUNK_VALUES * len(data) // max(n, 1))
        parts = [data[i:i + step] for i in range(0, len(data), step)]
    try:
        arrays = [np.asarray(p) for p in parts]
    except ValueError:  # numpy: "inhomogeneous shape"
        _regular(model, where, data)
        raise
    except OverflowError:
        return _flat_array(list(_flatten(data)))
    if len({a.shape[1:] for a in arrays}) > 1:
        _regular(model, where, data)
    if len(arrays) == 1:
        return arrays[0]
    try:
        return np.concatenate(arrays)
    except (TypeError, ValueError):  # numbers and strings mixed: the checks below name the element
        return np.concatenate([a.astype(object) for a in arrays])


def _regular(model: str, where: str, data: Any) -> None:
    """Raise a 400 naming the first irregular element of ragged ``data``."""
    try:
        _shape_of(data, "data")
    except _Ragged as exc:
        raise _bad(model, f"{where}: {exc}; nested data must be regular (the tensor in its shape, or flat)") from None


def _shape_of(data: Any, path: str) -> tuple[int, ...]:
    if not isinstance(data, list):
        return ()
    shapes = [_shape_of(v, f"{path}[{i}]") for i, v in enumerate(data)]
    for i, s in enumerate(shapes):
        if s != shapes[0]:
            raise _Ragged(f"the data is ragged: {path}[{i}] has shape {list(s)} but {path}[0] has shape "
                          f"{list(shapes[0])}")
    return (len(data),) + (shapes[0] if shapes else ())


def _flat_array(flat: list) -> np.ndarray:
    try:
        return np.asarray(flat)
    except (ValueError, OverflowError):
        return np.asarray(flat, dtype=object)


def _check_count(model: str, where: str, shape: tuple[int, ...], n: int, got: int) -> None:
    if got != n:
        raise _bad(model, f"{where} has {got} values in data but shape {list(shape)} needs {n}")


def _cast(model: str, meta: TensorMetadata, shape: tuple[int, ...], data: Any, arr: np.ndarray) -> np.ndarray:
    accepts = _ACCEPTS.get(meta.datatype, "iu")
    target = DATATYPES[meta.datatype]
    if arr.dtype.kind not in accepts:
        flat = list(_flatten(data))
        bad = next((i for i, v in enumerate(flat) if not _fits(v, accepts)), None)
        if bad is not None:
            raise _bad(model, f'input "{meta.name}" ({meta.datatype}) expects {_NEEDS[accepts]}; element {bad}'
                              f"{_row(shape, bad)} is {_describe(flat[bad])}")
        arr = np.asarray(flat, dtype=object)  # integers too large for int64 / uint64: out of range below
    if accepts != "b" and arr.dtype != target:
        _check_range(model, meta, arr, np.iinfo(target) if accepts == "iu" else np.finfo(target))
    return arr.reshape(-1).astype(target)


def _check_range(model: str, meta: TensorMetadata, arr: np.ndarray, info) -> None:
    lo, hi = arr.min(), arr.max()
    if lo < info.min or hi > info.max:
        raise _bad(model, f'input "{meta.name}" ({meta.datatype}) holds values out of range '
                          f"[{info.min}, {info.max}]: min {lo}, max {hi}")


def _fits(value: Any, accepts: str) -> bool:
    if isinstance(value, bool):
        return "b" in accepts
    if isinstance(value, int):
        return "i" in accepts
    return isinstance(value, float) and "f" in accepts


def _flatten(data: Any) -> Iterator[Any]:
    if isinstance(data, list):
        for item in data:
            yield from _flatten(item)
    else:
        yield data


def _row(shape: tuple[int, ...], index: int) -> str:
    per_row = math.prod(shape[1:]) if len(shape) > 1 else 1
    return f" (row {index // per_row})" if shape and per_row else ""


# -- binary data --------------------------------------------------------------------------------


def _binary_tensor(model: str, meta: TensorMetadata, shape: tuple[int, ...], buf: memoryview) -> np.ndarray:
    n = math.prod(shape)
    where = f'input "{meta.name}"'
    if meta.datatype == "BYTES":
        try:
            values, used = deserialize_bytes(buf, n)
        except ValueError as exc:
            raise _bad(model, f"{where} (BYTES, shape {list(shape)}): {exc}") from None
        if used != len(buf):
            raise _bad(model, f"{where}: binary_data_size is {len(buf)} bytes but its {n} BYTES elements take {used}")
        out = np.empty(n, dtype=object)
        out[:] = values
        return out.reshape(shape)
    dtype = _LE[meta.datatype]
    if len(buf) != n * dtype.itemsize:
        raise _bad(model, f"{where}: binary_data_size is {len(buf)} bytes but shape {list(shape)} of "
                          f"{meta.datatype} needs {n * dtype.itemsize}")
    arr = np.frombuffer(buf, dtype=dtype, count=n).reshape(shape)
    return arr if dtype.isnative else arr.astype(dtype.newbyteorder("="))


# -- outputs ------------------------------------------------------------------------------------


def _parse_outputs(servable: Servable, entries: Any, binary_default: bool) -> tuple[RequestedOutput, ...]:
    model = servable.name
    if entries is None:
        return tuple(RequestedOutput(m.name, binary_default) for m in servable.outputs)
    if not isinstance(entries, list):
        raise _bad(model, f'"outputs" must be an array of {{"name": ...}} objects; got {_kind(entries)}')
    names = {m.name for m in servable.outputs}
    out = []
    for entry in entries:
        entry = _object(model, entry, "each requested output")
        name = entry.get("name")
        if name not in names:
            raise _bad(model, f"unknown output {orjson.dumps(name).decode()} in \"outputs\"; the model's outputs are "
                              f"{_listing(servable.outputs)}")
        params = _object(model, entry.get("parameters", {}), f'output "{name}"\'s parameters')
        if "classification" in params:
            raise _bad(model, f'output "{name}": the classification extension is not supported')
        binary = _flag(model, params, "binary_data", f'output "{name}"') if "binary_data" in params else binary_default
        out.append(RequestedOutput(name, binary))
    return tuple(out)


def _encode_output(model: str, out: RequestedOutput, results: Mapping[str, np.ndarray]) -> tuple[dict, Optional[bytes]]:
    if out.name not in results:
        raise _bad(model, f'the model returned no output "{out.name}"', status=500)
    arr = np.asarray(results[out.name])
    try:
        datatype = numpy_to_oip(arr.dtype)
    except ValueError as exc:
        raise _bad(model, f'output "{out.name}": {exc}', status=500) from None
    tensor: dict[str, Any] = {"name": out.name, "datatype": datatype, "shape": list(arr.shape)}
    if out.binary:
        blob = serialize_bytes(arr) if datatype == "BYTES" else np.ascontiguousarray(arr, dtype=_LE[datatype]).tobytes()
        tensor["parameters"] = {"binary_data_size": len(blob)}
        return tensor, blob
    if datatype == "BYTES":
        tensor["data"] = _json_strings(model, out.name, arr)
    else:  # orjson writes C-contiguous, native-endian arrays itself
        tensor["data"] = _json_numbers(np.ascontiguousarray(arr.reshape(-1), dtype=arr.dtype.newbyteorder("=")))
    return tensor, None


_NON_FINITE = (b"NaN", b"Infinity", b"-Infinity")


def _json_numbers(flat: np.ndarray) -> Any:
    """A flat numeric array for orjson; a float array holding NaN or infinities as a pre-written fragment
    with the tokens ``NaN``, ``Infinity``, ``-Infinity`` (Triton's JSON) where orjson would write ``null``."""
    if flat.dtype.kind != "f" or bool(np.isfinite(flat).all()):
        return flat
    pieces = orjson.dumps(flat, option=orjson.OPT_SERIALIZE_NUMPY).split(b"null")
    odd = flat[~np.isfinite(flat)]
    tokens = [_NON_FINITE[0 if np.isnan(v) else 1 if v > 0 else 2] for v in odd]
    out = [pieces[0]]
    for token, piece in zip(tokens, pieces[1:]):
        out += [token, piece]
    return orjson.Fragment(b"".join(out))


def _json_strings(model: str, name: str, arr: np.ndarray) -> list[str]:
    try:
        return [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in arr.reshape(-1)]
    except UnicodeDecodeError:
        raise _bad(model, f'output "{name}" holds bytes that are not UTF-8 text, which JSON cannot carry; '
                          'request it with parameters.binary_data = true') from None
