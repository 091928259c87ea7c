"""Loading and checking ONNX models: a file (its external data read from the model's folder), serialized bytes
or a ModelProto, checked with ``onnx.checker``.

Errors follow PEP 249 (``modelsql.errors``) with stable codes: ``file_not_found``, ``not_a_regular_file``,
``unsupported_model`` (ProgrammingError), ``invalid_onnx``, ``file_too_large`` (DataError).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Union

import numpy as np
import onnx
from onnx import ModelProto, TensorProto

from modelsql.errors import DataError, ProgrammingError
from modelsql.onnxformat.walk import elem_name, slots, stripped_entries
from modelsql.storage.files import read_regular_file, require_regular_file

__all__ = ["ModelSource", "load_model", "check_model", "parse_model", "MAX_EXTERNAL_BYTES"]

ModelSource = Union[str, os.PathLike, bytes, bytearray, memoryview, ModelProto]
"""What :func:`load_model` accepts: a file path, serialized bytes, or a ModelProto."""

_PROTOBUF_LIMIT = 2**31 - 1


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


def parse_model(data: bytes, what: str) -> ModelProto:
    """Decode serialized ONNX bytes (not checked); ``what`` names them in the error."""
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
    for slot in slots(model):
        t = slot.attr.t if slot.attr is not None and slot.attr.HasField("t") else slot.tensor
        if t is None or t.data_location != TensorProto.EXTERNAL:
            continue
        if stripped_entries(t) is not None:
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
        model = parse_model(bytes(source), "<bytes>")
        check_model(model, "<bytes>")
        _check_data_in_memory(model, "<bytes>")
        return model
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        what = str(source)
        model = parse_model(read_regular_file(path, f'ONNX model file "{what}"'), what)
        external = [slot.tensor for slot in slots(model) if slot.tensor is not None and _uses_external_data(slot.tensor)]
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
                             f"{list(t.dims)} of {elem_name(t.data_type)} needs {need:,}")


def _uses_external_data(t: TensorProto) -> bool:
    return t.data_location == TensorProto.EXTERNAL and stripped_entries(t) is None
