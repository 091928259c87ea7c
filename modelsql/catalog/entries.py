"""Catalog entries: frozen dataclasses read from and written to the catalog tables.

These are the typed values the rest of modelsql passes around; only
``modelsql.catalog`` turns them into SQL rows and back.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from typing import Optional, Union

Dim = Union[int, str, None]
"""One dimension of a tensor shape: an int (fixed), a str (symbolic, e.g. ``"N"``), or None (unknown)."""


@dataclass(frozen=True)
class TensorSpec:
    """A graph input or output of a model.

    Attributes:
        name: the ONNX value name.
        elem_type: ONNX element type name, upper case, as in ``onnx.TensorProto.DataType``
            (``"FLOAT"``, ``"DOUBLE"``, ``"INT64"``, ``"STRING"`` ...).
        shape: one entry per dimension (see :data:`Dim`); ``None`` for the whole shape
            when the rank is unknown.
    """

    name: str
    elem_type: str
    shape: Optional[tuple[Dim, ...]]


@dataclass(frozen=True)
class StoredTensor:
    """An initializer of a model, stored as one blob in the content-addressed store.

    Attributes:
        name: the initializer's name in the graph.
        digest: SHA-256 hex digest of the raw little-endian tensor bytes (the blob key).
        elem_type: ONNX element type name (``"FLOAT"`` ...).
        dims: the tensor's shape.
        nbytes: size of the raw data in bytes.
    """

    name: str
    digest: str
    elem_type: str
    dims: tuple[int, ...]
    nbytes: int


@dataclass(frozen=True)
class ModelVersion:
    """One version of a model in the catalog.

    Attributes:
        name: model name (case-insensitive, stored lower case).
        version: 1, 2, ... ; each ``CREATE OR REPLACE`` adds one.
        graph_digest: digest of the serialized ONNX ModelProto with initializer data
            removed (a blob in the store).
        graph_bytes: size of that graph blob in bytes.
        opset: the default-domain ONNX opset the model imports.
        inputs, outputs: the graph's inputs (initializers excluded) and outputs.
        tensors: the stored initializers.
        param_count: total number of elements over all stored tensors (initializers and
            large constant attributes, e.g. the coefficients skl2onnx keeps in node attributes).
        source: where the model came from (a path, ``"sklearn:Pipeline"``, ``"torch:Net"``).
        kind: ``"onnx"``, ``"sklearn"`` or ``"torch"``.
        features: the feature (column) names bound to a single 2-D input, when known.
        options: the ``WITH (...)`` options given at import, as (key, value) pairs.
        created_at: creation time (UTC).
        batch_dependence: why a row's outputs may depend on the other rows run with
            it (see :func:`modelsql.formats.batch_axis.batch_dependence`), or None
            when each row's outputs depend on that row alone.
        check_rows, check_max_abs_diff, check_label_mismatches: the import-time
            comparison of a converted model with its estimator (rows compared,
            largest absolute output difference, rows whose label differed), or
            None when it was not checked.
    """

    name: str
    version: int
    graph_digest: str
    graph_bytes: int
    opset: int
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    tensors: tuple[StoredTensor, ...]
    param_count: int
    source: str
    kind: str = "onnx"
    features: Optional[tuple[str, ...]] = None
    options: tuple[tuple[str, str], ...] = ()
    created_at: Optional[_dt.datetime] = field(default=None, compare=False)
    batch_dependence: Optional[str] = None
    check_rows: Optional[int] = None
    check_max_abs_diff: Optional[float] = None
    check_label_mismatches: Optional[int] = None

    @property
    def logical_bytes(self) -> int:
        """Bytes the model would take on its own: graph plus every initializer."""
        return self.graph_bytes + sum(t.nbytes for t in self.tensors)
