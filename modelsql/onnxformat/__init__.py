"""The stored ONNX format: loading and checking models (load.py), walking their graphs and parameter
tensors (walk.py), their interface, opset and parameter count (describe.py), the split into a graph without
parameter data and one content-addressed blob per tensor and its exact inverse (split.py), the weights a
runtime maps straight from the store (shareable.py), column-major inputs (column_major.py), content identity
and architecture fingerprints (identity.py), what modelsql writes into a model's metadata (metadata.py), and
one model from a pipeline's steps (compose.py).

It imports no converter (skl2onnx, torch): those live in :mod:`modelsql.converters`.
"""

from __future__ import annotations

from modelsql.onnxformat.column_major import column_major_inputs
from modelsql.onnxformat.compose import merge_pipeline, merge_steps
from modelsql.onnxformat.describe import opset, param_count, signature, type_text
from modelsql.onnxformat.identity import architecture_fingerprint, content_digest, lift_weights
from modelsql.onnxformat.load import ModelSource, check_model, load_model
from modelsql.onnxformat.metadata import metadata_features, write_metadata
from modelsql.onnxformat.shareable import ShareableTensor, shareable_initializers, with_external_locations
from modelsql.onnxformat.split import BLOB_LOCATION_PREFIX, join_model, referenced_digests, split_model, stored_tensors

__all__ = [
    "architecture_fingerprint",
    "content_digest",
    "lift_weights",
    "merge_pipeline",
    "merge_steps",
    "metadata_features",
    "write_metadata",
    "load_model",
    "check_model",
    "signature",
    "opset",
    "type_text",
    "split_model",
    "join_model",
    "stored_tensors",
    "referenced_digests",
    "param_count",
    "ModelSource",
    "BLOB_LOCATION_PREFIX",
    "ShareableTensor",
    "shareable_initializers",
    "with_external_locations",
    "column_major_inputs",
]
