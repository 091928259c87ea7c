"""Triton's model configuration extension: ``GET /v2/models/{name}[/versions/{v}]/config``.

The answer is the JSON form of Triton's ``ModelConfig`` message
(triton-inference-server/common, ``protobuf/model_config.proto``; Triton's
``docs/protocol/extension_model_configuration.md``), made from the servable's
metadata and the server's batching: what Triton's tools (``perf_analyzer``,
model analyzer) read before their first request. Fields written:

* ``name``, ``platform`` (the servable's, e.g. ``"onnxruntime_onnx"``), ``backend`` (``"onnxruntime"``:
  every model and pipeline step runs in ONNX Runtime);
* ``version_policy``: ``{"specific": {"versions": [...]}}``, the servable's versions;
* ``max_batch_size``: the server's (every served tensor has the batch dimension first);
* ``input`` / ``output``: ``name``, ``data_type`` (``TYPE_FP32``, ``TYPE_STRING`` for BYTES, ...),
  ``dims`` without the batch dimension (-1: variable); a tensor of one value per row (metadata shape
  ``[-1]``) has ``dims [1]`` and ``reshape {"shape": []}``, Triton's way of saying that a client sends
  ``[N, 1]`` and the model takes ``[N]`` (the server accepts both); such an input's model metadata
  says ``[-1, 1]``, as Triton's does for that configuration (:func:`input_metadata`): ``perf_analyzer``
  takes its shapes from the metadata and refuses an input whose shape is empty once the batch
  dimension is dropped ("unable to set shape for the input");
* ``dynamic_batching``: ``max_queue_delay_microseconds`` (the fixed delay; 0 under the adaptive
  policy, which, as Triton's delay 0 does, dispatches a request at once while a thread is free
  and batches what arrives while every thread is busy), plus ``parameters.batching`` saying which policy runs.
"""

from __future__ import annotations

from typing import Optional

from modelsql.serving.repository import Servable, TensorMetadata

__all__ = ["model_config", "input_metadata", "TRITON_TYPES"]

TRITON_TYPES = {"BOOL": "TYPE_BOOL", "UINT8": "TYPE_UINT8", "UINT16": "TYPE_UINT16", "UINT32": "TYPE_UINT32",
                "UINT64": "TYPE_UINT64", "INT8": "TYPE_INT8", "INT16": "TYPE_INT16", "INT32": "TYPE_INT32",
                "INT64": "TYPE_INT64", "FP16": "TYPE_FP16", "FP32": "TYPE_FP32", "FP64": "TYPE_FP64",
                "BYTES": "TYPE_STRING"}
"""OIP datatype -> Triton's ``DataType`` enum name."""


def model_config(servable: Servable, max_batch_size: int, max_queue_delay_ms: Optional[float]) -> dict:
    """Triton's ``ModelConfig`` of ``servable`` as JSON (see the module docstring).

    Args:
        max_batch_size: the server's batch size in rows.
        max_queue_delay_ms: the fixed batching delay in ms, or None for the adaptive policy.
    """
    delay_us = 0 if max_queue_delay_ms is None else round(max_queue_delay_ms * 1000)
    policy = "adaptive" if max_queue_delay_ms is None else "fixed_delay"
    return {
        "name": servable.name,
        "platform": servable.platform,
        "backend": "onnxruntime",
        "version_policy": _version_policy(servable.versions),
        "max_batch_size": max_batch_size,
        "input": [dict(_tensor(t), format="FORMAT_NONE", allow_ragged_batch=False, optional=False)
                  for t in servable.inputs],
        "output": [dict(_tensor(t), label_filename="") for t in servable.outputs],
        "dynamic_batching": {"preferred_batch_size": [], "max_queue_delay_microseconds": delay_us,
                             "preserve_ordering": False},
        "parameters": {"batching": {"string_value": policy}},
    }


def _version_policy(versions: tuple[str, ...]) -> dict:
    if versions and all(v.isdigit() for v in versions):
        return {"specific": {"versions": [int(v) for v in versions]}}
    return {"latest": {"num_versions": 1}}


def _tensor(meta: TensorMetadata) -> dict:
    out = {"name": meta.name, "data_type": TRITON_TYPES[meta.datatype], "is_shape_tensor": False}
    dims = list(meta.shape[1:])
    if not dims:  # one value per row: clients send [N, 1] (or [N]), the model takes [N]
        return dict(out, dims=[1], reshape={"shape": []})
    return dict(out, dims=dims)


def input_metadata(meta: TensorMetadata) -> dict:
    """The OIP metadata object of an input as Triton reports it for :func:`model_config`'s configuration:
    ``{"name", "datatype", "shape"}``, with ``shape [-1, 1]`` for an input of one value per row (metadata
    ``[-1]``; config ``dims [1]``, ``reshape []``), else the servable's own shape."""
    out = meta.to_json()
    if len(meta.shape) == 1:
        out["shape"] = [meta.shape[0], 1]
    return out
