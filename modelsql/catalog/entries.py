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
            it (see :func:`modelsql.analyses.batch_axis.batch_dependence`), or None
            when each row's outputs depend on that row alone.
        check_rows, check_max_abs_diff, check_label_mismatches: the import-time
            comparison of a converted model with its estimator (rows compared,
            largest absolute output difference, rows whose label differed), or
            None when it was not checked.
        content_digest: SHA-256 of the normalised graph (see
            :func:`modelsql.onnxformat.identity.content_digest`): versions with equal
            digests compute the same thing; None for versions imported before catalog schema 3.
        fingerprint: SHA-256 of the architecture (see
            :func:`modelsql.onnxformat.identity.architecture_fingerprint`): versions with equal
            fingerprints differ only in their weights (a NetFuse family); None before schema 4.
        flops: static estimate of FLOPs per input row
            (:func:`modelsql.analyses.static_features.graph_flops`); None before schema 4.
        conv_flops: the part of ``flops`` in Conv nodes; None before schema 4.
        gemm_flops: the part of ``flops`` in 2-D matrix products; None before schema 4.
        nodes: nodes of the main graph; None before schema 4.
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
    content_digest: Optional[str] = None
    fingerprint: Optional[str] = None
    flops: Optional[float] = None
    conv_flops: Optional[float] = None
    gemm_flops: Optional[float] = None
    nodes: Optional[int] = None

    @property
    def logical_bytes(self) -> int:
        """Bytes the model would take on its own: graph plus every initializer."""
        return self.graph_bytes + sum(t.nbytes for t in self.tensors)

    @property
    def label(self) -> str:
        """``'model "m" version 1'``, how messages name it."""
        return f'model "{self.name}" version {self.version}'

    @property
    def ref_sql(self) -> str:
        """``MODEL m``, how a PREDICT names it."""
        return f"MODEL {self.name}"


@dataclass(frozen=True)
class StepFeed:
    """What feeds one input of a pipeline step.

    Attributes:
        input: the step model's input name.
        from_step: the position of the earlier step whose output feeds it, or None
            when a pipeline input (a column of PREDICT's input) feeds it.
        from_name: that step's output name, or the pipeline input's name.
    """

    input: str
    from_step: Optional[int]
    from_name: str


@dataclass(frozen=True)
class PipelineStep:
    """One step of a pipeline version: a catalog model version and what feeds its inputs.

    Attributes:
        position: 0, 1, ... in the order the steps run.
        name: the step name (the model's name unless the pipeline names it).
        model: the model version the step runs.
        feeds: one per input of the model, in the model's input order.
    """

    position: int
    name: str
    model: ModelVersion
    feeds: tuple[StepFeed, ...]


@dataclass(frozen=True)
class PipelineVersion:
    """One version of a pipeline: steps run in order, outputs of one feeding the next (PRETZEL's
    white-box pipeline: Lee et al., OSDI 2018).

    A pipeline binds like a model in ``PREDICT(PIPELINE p, ...)``: its inputs are the step
    inputs that a pipeline input feeds (in order of first use), its outputs those of its last step.

    Attributes:
        name, version: as for models (``CREATE OR REPLACE PIPELINE`` adds a version).
        steps: the steps, in order.
        digest: SHA-256 of the step graph (each step's content digest and feeds).
        source: ``"CREATE PIPELINE"`` or ``"sklearn:<class>"``.
        options: the ``WITH (...)`` options, as (key, value) pairs.
        created_at: creation time (UTC).
    """

    name: str
    version: int
    steps: tuple[PipelineStep, ...]
    digest: str
    source: str
    options: tuple[tuple[str, str], ...] = ()
    created_at: Optional[_dt.datetime] = field(default=None, compare=False)
    kind = "pipeline"

    @property
    def inputs(self) -> tuple[TensorSpec, ...]:
        """The pipeline inputs: step inputs fed by no earlier step, named as the feed names them."""
        seen: dict[str, TensorSpec] = {}
        for step in self.steps:
            specs = {s.name: s for s in step.model.inputs}
            for f in step.feeds:
                if f.from_step is None and f.from_name not in seen:
                    spec = specs[f.input]
                    seen[f.from_name] = TensorSpec(f.from_name, spec.elem_type, spec.shape)
        return tuple(seen.values())

    @property
    def outputs(self) -> tuple[TensorSpec, ...]:
        """The last step's outputs."""
        return self.steps[-1].model.outputs

    @property
    def features(self) -> Optional[tuple[str, ...]]:
        """The first step's feature names when the pipeline has one input and it feeds that step's single input."""
        first = self.steps[0]
        if len(self.inputs) == 1 and len(first.feeds) == 1 and first.feeds[0].from_step is None:
            return first.model.features
        return None

    @property
    def batch_dependence(self) -> Optional[str]:
        """The first step whose rows depend on the other rows of the batch, and why; None when no step's do."""
        for step in self.steps:
            if step.model.batch_dependence:
                return f'step "{step.name}": {step.model.batch_dependence}'
        return None

    @property
    def param_count(self) -> int:
        """Elements over the steps' stored tensors."""
        return sum(s.model.param_count for s in self.steps)

    @property
    def logical_bytes(self) -> int:
        """Bytes of the steps' models on their own."""
        return sum(s.model.logical_bytes for s in self.steps)

    @property
    def label(self) -> str:
        """``'pipeline "p" version 1'``, how messages name it."""
        return f'pipeline "{self.name}" version {self.version}'

    @property
    def ref_sql(self) -> str:
        """``PIPELINE p``, how a PREDICT names it."""
        return f"PIPELINE {self.name}"


@dataclass(frozen=True)
class RoutedModels:
    """The models of ``PREDICT(MODELS (m1, m2, ...) ROUTE BY c, ...)`` (or ``MODELS FAMILY f``): each
    row is run by the member its column ``c`` names (NetFuse's multi-model inference, Jeong et al.,
    2020: members of one architecture may run as one merged graph).

    Binds like its first member (every member has the same inputs, outputs and features; the catalog
    checks that when it builds one); the route column is fed beside them.

    Attributes:
        members: the member model versions, in the order written (a family: oldest first).
        route: the ROUTE BY column's name, as written.
        family: the family name when written ``MODELS FAMILY f``, else None.
    """

    members: tuple[ModelVersion, ...]
    route: str
    family: Optional[str] = None
    kind = "models"

    @property
    def first(self) -> ModelVersion:
        return self.members[0]

    @property
    def inputs(self) -> tuple[TensorSpec, ...]:
        return self.first.inputs

    @property
    def outputs(self) -> tuple[TensorSpec, ...]:
        return self.first.outputs

    @property
    def features(self) -> Optional[tuple[str, ...]]:
        return self.first.features

    @property
    def batch_dependence(self) -> Optional[str]:
        for m in self.members:
            if m.batch_dependence:
                return f'model "{m.name}": {m.batch_dependence}'
        return None

    @property
    def param_count(self) -> int:
        return sum(m.param_count for m in self.members)

    @property
    def logical_bytes(self) -> int:
        return sum(m.logical_bytes for m in self.members)

    @property
    def one_architecture(self) -> bool:
        """Whether every member has one (known) architecture fingerprint: a family, mergeable."""
        return self.first.fingerprint is not None and all(m.fingerprint == self.first.fingerprint
                                                          for m in self.members)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.members)

    @property
    def name(self) -> str:
        """The members' names, comma-separated (how a message names them all)."""
        return ", ".join(self.names)

    @property
    def label(self) -> str:
        """``'models (a, b, c)'``, how messages name them."""
        return "models (" + ", ".join(self.names) + ")"

    @property
    def ref_sql(self) -> str:
        """How the PREDICT names them: ``MODELS (a, b) ROUTE BY c`` / ``MODELS FAMILY f ROUTE BY c``."""
        head = f"MODELS FAMILY {self.family}" if self.family else "MODELS (" + ", ".join(self.names) + ")"
        return f"{head} ROUTE BY {self.route}"
