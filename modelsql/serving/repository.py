"""What the server serves: the ``Servable`` and ``Repository`` protocols, tensor metadata, datatypes.

The server (:mod:`modelsql.serving.app`) knows nothing of the catalog. It asks a
:class:`Repository` for a :class:`Servable` by name (and version), validates
requests against the servable's :class:`TensorMetadata`, and hands batches of
validated inputs back to :meth:`Repository.run_group`. modelsql's catalog
pipelines implement the protocol for ``SERVE``; :mod:`modelsql.serving.simple`
is a small reference implementation over ONNX Runtime sessions.

Datatypes are the Open Inference Protocol's tensor datatypes (kserve
open-inference-protocol, ``specification/protocol/inference_rest.md``,
"Tensor Data Types"): BOOL, UINT8..UINT64, INT8..INT64, FP16, FP32, FP64 and
BYTES. A BYTES tensor is a numpy ``object`` array whose elements are ``str``
(JSON requests) or ``bytes`` (binary requests). Triton's BF16 has no numpy
dtype and is not supported.
"""

from __future__ import annotations

import concurrent.futures
from dataclasses import dataclass
from typing import Hashable, Optional, Protocol, Sequence, Union, runtime_checkable

import numpy as np

__all__ = [
    "TensorMetadata",
    "Servable",
    "Repository",
    "DATATYPES",
    "oip_to_numpy",
    "numpy_to_oip",
]

DATATYPES: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BYTES": np.dtype(object),
}
"""OIP datatype -> the numpy dtype of its arrays (BYTES: ``object`` arrays of ``str``/``bytes``)."""

_BY_NUMPY = {dt: name for name, dt in DATATYPES.items()}


def oip_to_numpy(datatype: str) -> np.dtype:
    """The numpy dtype of OIP ``datatype`` (e.g. ``"FP32"`` -> ``float32``; ``"BYTES"`` -> ``object``).

    Raises:
        ValueError: ``datatype`` is not one of :data:`DATATYPES` (BF16 included: numpy has no bfloat16).
    """
    try:
        return DATATYPES[datatype]
    except (KeyError, TypeError):
        raise ValueError(f"unknown tensor datatype {datatype!r}; expected one of {', '.join(DATATYPES)}") from None


def numpy_to_oip(dtype: np.dtype) -> str:
    """The OIP datatype of arrays of ``dtype``; ``object``, unicode (``U``) and bytes (``S``) arrays are BYTES.

    Raises:
        ValueError: no OIP datatype holds ``dtype`` (complex, datetime, structured, ...).
    """
    dtype = np.dtype(dtype)
    if dtype.kind in "OUS":
        return "BYTES"
    name = _BY_NUMPY.get(dtype.newbyteorder("="))  # big-endian arrays have the same datatype
    if name is None:
        raise ValueError(f"numpy dtype {dtype} has no Open Inference Protocol datatype")
    return name


@dataclass(frozen=True)
class TensorMetadata:
    """One input or output of a servable, as ``GET /v2/models/{name}`` reports it (OIP "Model Metadata").

    Attributes:
        name: the tensor's name in requests and responses.
        datatype: OIP datatype: ``"FP32"``, ``"INT64"``, ``"BYTES"``, ...
        shape: one entry per dimension; -1 for a variable dimension. The first
            dimension is the batch (rows) dimension, normally -1.

    Raises:
        ValueError: an unknown datatype, or a dimension that is not an int >= -1.
    """

    name: str
    datatype: str
    shape: tuple[int, ...]

    def __post_init__(self) -> None:
        oip_to_numpy(self.datatype)
        shape = tuple(self.shape)
        if any(isinstance(d, bool) or not isinstance(d, int) or d < -1 for d in shape):
            raise ValueError(f"tensor {self.name!r}: shape {list(shape)} must hold ints >= -1 (-1: variable)")
        object.__setattr__(self, "shape", shape)

    def to_json(self) -> dict:
        """``{"name", "datatype", "shape"}``, the OIP ``$metadata_tensor`` object."""
        return {"name": self.name, "datatype": self.datatype, "shape": list(self.shape)}


@runtime_checkable
class Servable(Protocol):
    """One servable model version (OIP "model").

    Attributes:
        name: what clients put in ``/v2/models/{name}``.
        version: this version, e.g. ``"1"``.
        versions: every version of ``name`` that can be addressed.
        platform: e.g. ``"onnxruntime_onnx"`` or ``"modelsql_pipeline"``.
        inputs, outputs: tensor metadata; every input and output has the batch dimension first.
        group: requests for servables with equal ``group`` are batched together
            (:mod:`modelsql.serving.batching`) and run by one
            :meth:`Repository.run_group` call.
    """

    name: str
    version: str
    versions: tuple[str, ...]
    platform: str
    inputs: tuple[TensorMetadata, ...]
    outputs: tuple[TensorMetadata, ...]
    group: Hashable


RunResult = Union[dict[str, np.ndarray], BaseException]


@runtime_checkable
class Repository(Protocol):
    """What the server serves and how it runs it (implemented by modelsql's SERVE, and by
    :class:`modelsql.serving.simple.OrtRepository`).

    ``get``, ``ready`` and ``names`` are called on the server's event loop for every
    request, so they must be cheap and never block; ``run_group`` runs in
    ``executor(group)``; ``index``, ``load`` and ``unload`` (Triton's model repository
    extension, ``docs/protocol/extension_model_repository.md``) run in a worker thread.
    """

    def get(self, name: str, version: Optional[str] = None) -> Servable:
        """The servable ``name`` (its newest / default version when ``version`` is None).

        Raises:
            LookupError: no such model or version (the message says which; HTTP 404).
        """
        ...

    def names(self) -> list[str]:
        """The names that :meth:`get` answers."""
        ...

    def run_group(self, group: Hashable, items: Sequence[tuple[Servable, dict[str, np.ndarray]]]) -> list[RunResult]:
        """Run one batch: ``items`` are (servable, inputs) pairs of one ``group``, inputs
        validated against the servable's metadata (name -> array, batch axis first).

        Returns:
            One entry per item, in order: the item's outputs (every output, name ->
            array with the item's rows on axis 0), or the exception for that item
            (``LookupError`` -> 404, ``ValueError``/``TypeError``/``DataError``/
            ``ProgrammingError`` -> 400, anything else -> 500; its ``str`` is the message).
        """
        ...

    def executor(self, group: Hashable) -> concurrent.futures.Executor:
        """The executor that ``run_group(group, ...)`` runs in (a reserved group has its own)."""
        ...

    def index(self) -> list[dict]:
        """``[{"name", "version", "state", "reason"}]`` for ``POST /v2/repository/index``."""
        ...

    def load(self, name: str) -> None:
        """Load (or reload) ``name``.

        Raises:
            LookupError: the catalog has no such model or pipeline.
        """
        ...

    def unload(self, name: str) -> None:
        """Stop serving ``name`` (``get`` then raises ``LookupError``, ``ready`` is False)."""
        ...

    def ready(self, name: str, version: Optional[str] = None) -> bool:
        """Whether ``name`` (at ``version``) can serve requests now."""
        ...
