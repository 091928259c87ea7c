"""SERVE's inference server: the Open Inference Protocol (KServe v2 REST) with Triton's extensions.

A real HTTP server, generic over a :class:`Repository` of :class:`Servable` s:
``InferenceServer(repository).start()`` serves it from a daemon thread of the
calling process (uvicorn + uvloop + httptools, a Starlette app).

* :mod:`.repository`  the Servable / Repository protocols, TensorMetadata, OIP <-> numpy datatypes
* :mod:`.protocol`    request parsing and response encoding (JSON and Triton's binary tensor extension)
* :mod:`.batching`    dynamic batching per servable group
* :mod:`.metrics`     Prometheus metrics (``GET /metrics``)
* :mod:`.app`         the endpoints, the error mapping, the bearer token, body deadline and budget
* :mod:`.connections` connection limits: header deadline and size, connection cap, draining
* :mod:`.server`      InferenceServer (threading, sockets, life cycle, who may listen where)
* :mod:`.simple`      OrtRepository, a reference repository over ONNX Runtime sessions

Specs: kserve open-inference-protocol ``specification/protocol/inference_rest.md``;
Triton's ``docs/protocol/extension_binary_data.md`` and ``extension_model_repository.md``.
"""

from .app import DEFAULT_MAX_REQUEST_BYTES, build_app, error_status
from .batching import Batcher
from .metrics import ServerMetrics
from .protocol import InferRequest, ProtocolError, RequestedOutput, encode_infer_response, parse_infer_request
from .repository import DATATYPES, Repository, Servable, TensorMetadata, numpy_to_oip, oip_to_numpy
from .connections import ConnectionGuard, ConnectionLimits
from .server import InferenceServer, ServerBindError, UnauthenticatedExposure, is_loopback

__all__ = [
    "InferenceServer", "ServerBindError", "Repository", "Servable", "TensorMetadata", "DATATYPES",
    "oip_to_numpy", "numpy_to_oip", "ProtocolError", "InferRequest", "RequestedOutput", "parse_infer_request",
    "encode_infer_response", "Batcher", "ServerMetrics", "build_app", "error_status", "DEFAULT_MAX_REQUEST_BYTES",
    "ConnectionGuard", "ConnectionLimits", "UnauthenticatedExposure", "is_loopback",
]
