"""SERVE's inference server: the Open Inference Protocol (KServe v2 REST) with Triton's extensions.

A real HTTP server, generic over a :class:`Repository` of :class:`Servable` s:
``InferenceServer(repository).start()`` serves it from a daemon thread of the
calling process (uvicorn + uvloop + httptools, a Starlette app).

* :mod:`.repository`  the Servable / Repository protocols, TensorMetadata, OIP <-> numpy datatypes
* :mod:`.protocol`    request parsing and response encoding (JSON and Triton's binary tensor extension)
* :mod:`.batching`    dynamic batching per servable group (adaptive by default, or a fixed delay)
* :mod:`.metrics`     Prometheus metrics (``GET /metrics``)
* :mod:`.model_config` Triton's ``ModelConfig`` JSON (``GET /v2/models/{name}/config``)
* :mod:`.statistics`  Triton's per-version statistics (``GET /v2/models/{name}/stats``)
* :mod:`.app`         the endpoints, the error mapping, the bearer token, body deadline and budget
* :mod:`.connections` connection limits: header deadline and size, connection cap, draining
* :mod:`.server`      InferenceServer (threading, sockets, life cycle, who may listen where)
* :mod:`.simple`      OrtRepository, a reference repository over ONNX Runtime sessions

Specs: kserve open-inference-protocol ``specification/protocol/inference_rest.md``;
Triton's ``docs/protocol/extension_binary_data.md``, ``extension_model_repository.md``,
``extension_model_configuration.md`` and ``extension_statistics.md``.
"""

import importlib

# Each name is imported from its module on first use (PEP 562): a statement that does not serve reads
# ``serving.repository`` alone and never imports Starlette, uvicorn or the Prometheus client.
_WHERE = {
    "DEFAULT_MAX_REQUEST_BYTES": "app", "build_app": "app", "error_status": "app",
    "Batcher": "batching", "ServerMetrics": "metrics",
    "InferRequest": "protocol", "ProtocolError": "protocol", "RequestedOutput": "protocol",
    "encode_infer_response": "protocol", "parse_infer_request": "protocol",
    "DATATYPES": "repository", "Repository": "repository", "Servable": "repository", "TensorMetadata": "repository",
    "numpy_to_oip": "repository", "oip_to_numpy": "repository",
    "ConnectionGuard": "connections", "ConnectionLimits": "connections",
    "InferenceServer": "server", "ServerBindError": "server", "UnauthenticatedExposure": "server",
    "is_loopback": "server",
}


def __getattr__(name: str):
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))


__all__ = [
    "InferenceServer", "ServerBindError", "Repository", "Servable", "TensorMetadata", "DATATYPES",
    "oip_to_numpy", "numpy_to_oip", "ProtocolError", "InferRequest", "RequestedOutput", "parse_infer_request",
    "encode_infer_response", "Batcher", "ServerMetrics", "build_app", "error_status", "DEFAULT_MAX_REQUEST_BYTES",
    "ConnectionGuard", "ConnectionLimits", "UnauthenticatedExposure", "is_loopback",
]
