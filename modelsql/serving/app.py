"""The Starlette app: Open Inference Protocol REST endpoints plus Triton's extensions and ``/metrics``.

Endpoints (kserve open-inference-protocol ``specification/protocol/inference_rest.md``;
``[/versions/{v}]`` is optional everywhere):

* ``GET /v2`` -> ``{"name": "modelsql", "version", "extensions"}``
* ``GET /v2/health/live`` -> ``{"live": true}``; ``GET /v2/health/ready`` -> ``{"ready": true}``
  (503 ``{"ready": false}`` while shutting down)
* ``GET /v2/models/{name}[/versions/{v}]`` -> ``{"name", "versions", "platform", "inputs", "outputs"}``
* ``GET /v2/models/{name}[/versions/{v}]/ready`` -> 200 ``{"name", "ready": true}``, or 400 with
  ``"ready": false`` (the spec: a 4xx status means false), or 404 for an unknown model
* ``POST /v2/models/{name}[/versions/{v}]/infer`` (JSON, or Triton's binary tensor data extension)
* Triton's model repository extension (``docs/protocol/extension_model_repository.md``):
  ``POST /v2/repository/index`` (body ``{"ready": true}`` lists only ready models),
  ``POST /v2/repository/models/{name}/load``, ``POST /v2/repository/models/{name}/unload``
* Triton's model configuration extension: ``GET /v2/models/{name}[/versions/{v}]/config``, the
  ``ModelConfig`` JSON (:mod:`.model_config`)
* Triton's statistics extension: ``GET /v2/models[/{name}[/versions/{v}]]/stats``,
  ``{"model_stats": [...]}`` (:mod:`.statistics`)
* ``GET /metrics``: Prometheus text exposition of :class:`~modelsql.serving.metrics.ServerMetrics`

Errors are always JSON ``{"error": "..."}`` naming the model (and the tensor or row):
400 a bad request, 401 a missing or wrong bearer token, 404 an unknown model, version or route,
408 a body that did not arrive within ``body_timeout_s``, 413 a body over
``max_request_bytes`` (default 64 MiB, checked against ``Content-Length``
before reading and counted while the body streams in), 415 a compressed body,
500 a model failure, 503 a model that is not ready (or the server holding
``max_buffered_bytes`` of unfinished bodies already). Exceptions map by type:
``LookupError`` -> 404; ``ValueError``, ``TypeError``, modelsql's ``DataError``
and ``ProgrammingError`` -> 400; anything else -> 500 (logged with its traceback;
the client sees only its message).

Authentication: with a ``token``, every request but ``GET /v2/health/live`` and
``GET /v2/health/ready`` must carry ``Authorization: Bearer <token>`` (RFC 6750);
anything else is answered 401 with ``WWW-Authenticate: Bearer``, before its body
is read. Slow and large requests: a body must arrive within ``body_timeout_s``
(408), the bodies being read at once hold at most ``max_buffered_bytes`` (503
past it), and a body over :data:`PARSE_INLINE_BYTES` is parsed (and a large
response encoded) in a worker thread, so the event loop keeps answering others.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import time
from typing import Any, Callable, Optional

import orjson
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from modelsql.errors import DataError, ProgrammingError
from modelsql.serving.batching import Batcher
from modelsql.serving.metrics import CONTENT_TYPE, ServerMetrics
from modelsql.serving.model_config import input_metadata, model_config
from modelsql.serving.protocol import HEADER_LENGTH, ProtocolError, encode_infer_response, parse_infer_request
from modelsql.serving.repository import Repository, Servable

__all__ = ["build_app", "error_status", "read_body", "BodyBudget", "DEFAULT_MAX_REQUEST_BYTES", "EXTENSIONS",
           "DEFAULT_BODY_TIMEOUT_S", "PARSE_INLINE_BYTES", "OPEN_PATHS"]

DEFAULT_MAX_REQUEST_BYTES = 64 << 20
"""The largest request body accepted by default: 64 MiB."""

DEFAULT_BODY_TIMEOUT_S = 60.0
"""Seconds a request body may take to arrive, by default (408 after)."""

PARSE_INLINE_BYTES = 64 << 10
"""Bodies (and responses) larger than this many bytes are parsed (encoded) in a worker thread."""

OPEN_PATHS = frozenset({"/v2/health/live", "/v2/health/ready"})
"""The paths answered without the bearer token (liveness and readiness probes)."""

EXTENSIONS = ("binary_tensor_data", "model_repository", "model_configuration", "statistics")
"""The protocol extensions ``GET /v2`` reports (Triton's names)."""

CLIENT_CLOSED = 499
"""The status recorded in metrics for a request whose client went away (nginx's convention; never sent)."""

log = logging.getLogger("modelsql.serving")


def error_status(exc: BaseException) -> int:
    """The HTTP status for ``exc``: a :class:`ProtocolError`'s own, 404 for ``LookupError``, 400 for
    ``ValueError``/``TypeError``/``DataError``/``ProgrammingError``, otherwise 500."""
    if isinstance(exc, ProtocolError):
        return exc.status
    if isinstance(exc, LookupError):
        return 404
    if isinstance(exc, (ValueError, TypeError, DataError, ProgrammingError)):
        return 400
    return 500


def _json(content: Any, status: int = 200, headers: Optional[dict] = None) -> Response:
    return Response(orjson.dumps(content), status, headers=headers, media_type="application/json")


def _error(exc: BaseException, model: Optional[str] = None) -> Response:
    status = error_status(exc)
    message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
    message = str(message) or type(exc).__name__
    if model is not None and f'"{model}"' not in message and f"'{model}'" not in message:
        message = f'model "{model}": {message}'
    if status == 500:  # a model failure: the operator wants the traceback, the client only the message
        log.error("%s", message, exc_info=exc)
    unread = status in (408, 413) or isinstance(exc, _BodyRefused)  # the unread rest of the body is not wanted
    return _json({"error": message}, status, {"connection": "close"} if unread else None)


def _json_object(body: bytes) -> Optional[dict]:
    """A request body that is a JSON object (an empty body: ``{}``), or None when it is something else."""
    if not body.strip():
        return {}
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


class _BodyRefused(ProtocolError):
    """A body refused before it was all read (the connection closes after the answer)."""


class BodyBudget:
    """The bytes of request bodies being read or held at once, server-wide, bounded by ``limit``.

    Used on the event loop only (no lock).

    Args:
        limit: the most bytes held at once (>= 1).
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0

    def take(self, n: int, who: str) -> None:
        """Count ``n`` more bytes.

        Raises:
            ProtocolError: 503 when that would pass ``limit`` (nothing is counted then).
        """
        if self.held + n > self.limit:
            raise _BodyRefused(503, f"{who}: the server is holding {self.held} bytes of request bodies already "
                                    f"(max_buffered_bytes = {self.limit}); retry later")
        self.held += n

    def give(self, n: int) -> None:
        """``n`` bytes are no longer held."""
        self.held -= n


class _Endpoints:
    """The request handlers of one server; ``batcher`` exists while the app runs (see ``lifespan``)."""

    def __init__(self, repository: Repository, metrics: ServerMetrics, version: str, batcher_factory: Callable[[], Batcher],
                 max_request_bytes: int, body_timeout_s: Optional[float], budget: BodyBudget) -> None:
        self.repository = repository
        self.metrics = metrics
        self.version = version
        self.batcher_factory = batcher_factory
        self.max_request_bytes = max_request_bytes
        self.body_timeout_s = body_timeout_s
        self.budget = budget
        self.batcher: Optional[Batcher] = None
        self.ready = False
        self.draining = False

    def drain(self) -> None:
        """Report not ready (``/v2/health/ready`` 503) from now on, and close each connection after its
        response: the server is stopping."""
        self.ready = False
        self.draining = True

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette):
        self.batcher = self.batcher_factory()
        self.ready = True
        try:
            yield
        finally:
            self.ready = False
            self.batcher.close()

    def _batcher(self) -> Batcher:
        """The batcher, which the lifespan creates before any request is served."""
        assert self.batcher is not None, "a request before the app's lifespan started"
        return self.batcher

    # -- server -------------------------------------------------------------------------------

    async def server_metadata(self, request: Request) -> Response:
        return _json({"name": "modelsql", "version": self.version, "extensions": list(EXTENSIONS)})

    async def live(self, request: Request) -> Response:
        return _json({"live": True})

    async def server_ready(self, request: Request) -> Response:
        return _json({"ready": self.ready}, 200 if self.ready else 503)

    async def prometheus(self, request: Request) -> Response:
        return Response(self.metrics.exposition(), media_type=CONTENT_TYPE)

    # -- models -------------------------------------------------------------------------------

    def _servable(self, request: Request) -> Servable:
        params = request.path_params
        return self.repository.get(params["name"], params.get("version"))

    async def model_metadata(self, request: Request) -> Response:
        try:
            s = self._servable(request)
        except Exception as exc:
            return _error(exc, request.path_params["name"])
        return _json({"name": s.name, "versions": list(s.versions), "platform": s.platform,
                      "inputs": [input_metadata(t) for t in s.inputs], "outputs": [t.to_json() for t in s.outputs]})

    async def model_ready(self, request: Request) -> Response:
        name, version = request.path_params["name"], request.path_params.get("version")
        try:
            if self.repository.ready(name, version):
                return _json({"name": name, "ready": True})
            self.repository.get(name, version)
        except Exception as exc:
            return _error(exc, name)
        reason = self._unready_reason(name, version)
        return _json({"name": name, "ready": False, **({"reason": reason} if reason else {})}, 400)

    async def config(self, request: Request) -> Response:
        try:
            s = self._servable(request)
        except Exception as exc:
            return _error(exc, request.path_params["name"])
        batcher = self._batcher()
        return _json(model_config(s, batcher.max_batch_size, batcher.max_queue_delay_ms))

    async def stats(self, request: Request) -> Response:
        name = request.path_params.get("name")
        try:
            versions = self._stat_versions(name, request.path_params.get("version"))
        except Exception as exc:
            return _error(exc, name)
        stats = self.metrics.statistics
        return _json({"model_stats": [stats.of(n, v).to_json(n, v) for n, v in versions]})

    def _stat_versions(self, name: Optional[str], version: Optional[str]) -> list[tuple[str, str]]:
        """(name, version) of every version a stats request covers: one, a model's, or every model's."""
        if name is None:
            servables = [s for s in map(self._served_or_none, self.repository.names()) if s is not None]
        else:
            servables = [self.repository.get(name, version)]  # LookupError: 404
        if version is not None:
            assert name is not None  # only a model's routes give a version
            return [(name, servables[0].version)]
        return [(s.name, v) for s in servables for v in s.versions if self._served_or_none(s.name, v) is not None]

    def _served_or_none(self, name: str, version: Optional[str] = None) -> Optional[Servable]:
        try:
            return self.repository.get(name, version)
        except LookupError:  # unloaded meanwhile, or a version listed but not served
            return None

    def _unready_reason(self, name: str, version: Optional[str]) -> Optional[str]:
        """Why ``name`` is not ready, where the repository says (its optional ``unready_reason``)."""
        why = getattr(self.repository, "unready_reason", None)
        return why(name, version) if callable(why) else None

    async def infer(self, request: Request) -> Response:
        start = time.perf_counter()
        servable: Optional[Servable] = None
        rows = 0
        phases: dict[str, int] = {}
        try:
            servable = self._servable(request)
            response, rows = await self._infer(request, servable, phases)
        except ClientDisconnect:
            response = Response(status_code=CLIENT_CLOSED)
        except asyncio.CancelledError:
            if self.ready:
                raise
            # uvicorn cancels what is still running when stop()'s grace period is over: answer 503, not a traceback
            response = _error(ProtocolError(503, "the server is shutting down"), request.path_params["name"])
        except Exception as exc:
            response = _error(exc, request.path_params["name"])
        model, version = (servable.name, servable.version) if servable is not None else ("", "")
        seconds = time.perf_counter() - start
        self.metrics.observe_request(model, version, response.status_code, seconds)
        if servable is not None:
            self.metrics.statistics.request(model, version, response.status_code == 200, int(seconds * 1e9), rows,
                                            phases)
        return response

    async def _infer(self, request: Request, servable: Servable, phases: dict) -> tuple[Response, int]:
        """The response to an infer request, and its rows; ``phases`` receives its times (ns) for the statistics."""
        if not self.repository.ready(servable.name, servable.version):
            reason = self._unready_reason(servable.name, servable.version)
            raise ProtocolError(503, f'model "{servable.name}" version "{servable.version}" is not ready'
                                     + (f": {reason}" if reason else ""))
        async with self._body(request, f'model "{servable.name}"') as body:
            began = time.perf_counter_ns()
            parsed = await _off_loop(len(body), parse_infer_request, body, servable, request.headers.get(HEADER_LENGTH))
            phases["compute_input"] = time.perf_counter_ns() - began
            del body  # the arrays are what is kept now
            results = await self._batcher().submit(servable, parsed.inputs, parsed.rows, phases)
        size = sum(getattr(a, "nbytes", 0) for a in results.values()) if isinstance(results, dict) else 0
        began = time.perf_counter_ns()
        content, headers = await _off_loop(size, encode_infer_response, servable, parsed, results)
        phases["compute_output"] = time.perf_counter_ns() - began
        return Response(content, headers=headers), parsed.rows

    @contextlib.asynccontextmanager
    async def _body(self, request: Request, who: str):
        """The request body, counted in the server's :class:`BodyBudget` while the block runs."""
        held = [0]
        try:
            yield await read_body(request, self.max_request_bytes, who, budget=self.budget,
                                  timeout_s=self.body_timeout_s, held=held)
        finally:
            self.budget.give(held[0])

    # -- repository extension -----------------------------------------------------------------

    async def repository_index(self, request: Request) -> Response:
        try:
            async with self._body(request, "the repository index") as body:
                pass
            asked = _json_object(body)
            if asked is None:
                return _json({"error": 'the repository index request must be a JSON object such as {"ready": true}'},
                             400)
            only_ready = bool(asked.get("ready", False))
            entries = await run_in_threadpool(self.repository.index)
        except ClientDisconnect:
            return Response(status_code=CLIENT_CLOSED)
        except Exception as exc:
            return _error(exc)
        if only_ready:
            entries = [e for e in entries if e.get("state") == "READY"]
        return _json(entries)

    async def load(self, request: Request) -> Response:
        return await self._repository_call(request, self.repository.load)

    async def unload(self, request: Request) -> Response:
        return await self._repository_call(request, self.repository.unload)

    async def _repository_call(self, request: Request, call: Callable[[str], None]) -> Response:
        name = request.path_params["name"]
        try:
            async with self._body(request, f'model "{name}"') as body:  # parameters are not used
                pass
            if _json_object(body) is None:
                return _json({"error": f'model "{name}": the request body must be a JSON object such as '
                                       '{"parameters": {}}'}, 400)
            await run_in_threadpool(call, name)
        except ClientDisconnect:
            return Response(status_code=CLIENT_CLOSED)
        except Exception as exc:
            return _error(exc, name)
        return Response(b"", 200)


async def read_body(request: Request, limit: int, who: str, *, budget: Optional[BodyBudget] = None,
                    timeout_s: Optional[float] = None, held: Optional[list] = None) -> bytearray:
    """The request body, refused past ``limit`` bytes: by ``Content-Length`` before reading, then by
    counting while it streams in (chunked bodies).

    Args:
        budget: the server's :class:`BodyBudget`; the bytes read are taken from it as they arrive
            and ``held[0]`` says how many (the caller gives them back).
        timeout_s: seconds the whole body may take to arrive (None: no limit).

    Raises:
        ProtocolError: 413 past ``limit``; 415 for a ``Content-Encoding`` other than identity;
            408 when the body took longer than ``timeout_s``; 503 past the budget.
            Messages start with ``who`` (e.g. ``'model "m"'``).
        starlette.requests.ClientDisconnect: the client went away mid-body.
    """
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding != "identity":
        raise ProtocolError(415, f"{who}: Content-Encoding {encoding!r} is not supported; send the body uncompressed")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(who, f"{int(declared)} bytes", limit)
    held = held if held is not None else [0]
    try:
        return await asyncio.wait_for(_collect(request, limit, who, budget, held), timeout_s)
    except asyncio.TimeoutError:
        raise _BodyRefused(408, f"{who}: the request body did not arrive within {timeout_s:g} s "
                                "(body_timeout_s)") from None


async def _collect(request: Request, limit: int, who: str, budget: Optional[BodyBudget], held: list) -> bytearray:
    body = bytearray()
    async for chunk in request.stream():
        if budget is not None:
            budget.take(len(chunk), who)
            held[0] += len(chunk)
        body += chunk
        if len(body) > limit:
            raise _too_large(who, f"more than {limit} bytes", limit)
    return body


async def _off_loop(size: int, fn: Callable, *args):
    """``fn(*args)``, in a worker thread when ``size`` (bytes) is over :data:`PARSE_INLINE_BYTES`."""
    if size > PARSE_INLINE_BYTES:
        return await run_in_threadpool(fn, *args)
    return fn(*args)


def _too_large(who: str, size: str, limit: int) -> ProtocolError:
    return ProtocolError(413, f"{who}: the request body is {size}; this server accepts at most {limit} bytes "
                              "(max_request_bytes)")


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)  # the handler of HTTPException (Starlette types handlers by Exception)
    return _json({"error": f"{request.method} {request.url.path}: {exc.detail}"}, exc.status_code)


class _Gate:
    """ASGI middleware: the bearer token (when one is set) and ``Connection: close`` while draining."""

    def __init__(self, app, endpoints: _Endpoints, token: Optional[str]) -> None:
        self.app = app
        self.endpoints = endpoints
        self.expected = token.encode() if token else None

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if self.endpoints.draining:
            send = _closing(send)
        if self.expected is not None and scope["path"] not in OPEN_PATHS and not self._authorized(scope):
            return await _unauthorized(scope, send, self.endpoints.draining)
        await self.app(scope, receive, send)

    def _authorized(self, scope) -> bool:
        """``Authorization: Bearer <token>``, the scheme in any case (RFC 7235, section 2.1)."""
        given = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
        scheme, _, credentials = given.partition(b" ")
        assert self.expected is not None  # called only when a token is set
        return scheme.lower() == b"bearer" and hmac.compare_digest(credentials, self.expected)


def _closing(send):
    async def closing_send(message) -> None:
        if message["type"] == "http.response.start":
            headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"connection"]
            message = {**message, "headers": headers + [(b"connection", b"close")]}
        await send(message)
    return closing_send


async def _unauthorized(scope, send, close: bool) -> None:
    given = any(k == b"authorization" for k, _ in scope["headers"])
    what = "the bearer token is wrong" if given else "this server needs Authorization: Bearer <token>"
    body = orjson.dumps({"error": f"{scope['method']} {scope['path']}: {what}"})
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               (b"www-authenticate", b'Bearer realm="modelsql"'), (b"connection", b"close")]
    await send({"type": "http.response.start", "status": 401, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def build_app(repository: Repository, metrics: ServerMetrics, *, version: str, max_batch_size: int = 32,
              max_queue_delay_ms: Optional[float] = None, max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
              token: Optional[str] = None, body_timeout_s: Optional[float] = DEFAULT_BODY_TIMEOUT_S,
              max_buffered_bytes: Optional[int] = None) -> Starlette:
    """The ASGI app serving ``repository`` (see the module docstring for the endpoints).

    Args:
        repository: what is served (:class:`~modelsql.serving.repository.Repository`).
        metrics: where requests, batches and queue times are recorded.
        version: the server version ``GET /v2`` reports.
        max_batch_size: rows per batch (see :class:`~modelsql.serving.batching.Batcher`).
        max_queue_delay_ms: the fixed batching delay in ms; None (the default): the adaptive policy
            (see :class:`~modelsql.serving.batching.Batcher`).
        max_request_bytes: the largest accepted request body, in bytes (413 beyond).
        token: the bearer token every request but the health probes must carry (None: no authentication).
        body_timeout_s: seconds a request body may take to arrive (408 beyond; None: no limit).
        max_buffered_bytes: bytes of request bodies held at once, server-wide (503 beyond; default
            4 x ``max_request_bytes``).

    The batcher is created by the app's lifespan, on the loop that serves it.
    ``app.state.endpoints.drain()`` marks the server as stopping: ``/v2/health/ready``
    answers 503, and requests that uvicorn cancels at the end of the graceful
    shutdown are answered 503 instead of being logged as failures.
    """
    ep = _Endpoints(repository, metrics, version,
                    lambda: Batcher(repository, metrics, max_batch_size=max_batch_size,
                                    max_queue_delay_ms=max_queue_delay_ms),
                    max_request_bytes, body_timeout_s, BodyBudget(max_buffered_bytes or 4 * max_request_bytes))
    model = "/v2/models/{name}"
    versioned = "/v2/models/{name}/versions/{version}"
    routes = [
        Route("/v2", ep.server_metadata, methods=["GET"]),
        Route("/v2/health/live", ep.live, methods=["GET"]),
        Route("/v2/health/ready", ep.server_ready, methods=["GET"]),
        Route("/metrics", ep.prometheus, methods=["GET"]),
        Route("/v2/models/stats", ep.stats, methods=["GET"]),  # before /v2/models/{name}: all models' statistics
        Route("/v2/repository/index", ep.repository_index, methods=["POST"]),
        Route("/v2/repository/models/{name}/load", ep.load, methods=["POST"]),
        Route("/v2/repository/models/{name}/unload", ep.unload, methods=["POST"]),
    ]
    for base in (model, versioned):
        routes += [
            Route(base, ep.model_metadata, methods=["GET"]),
            Route(base + "/ready", ep.model_ready, methods=["GET"]),
            Route(base + "/config", ep.config, methods=["GET"]),
            Route(base + "/stats", ep.stats, methods=["GET"]),
            Route(base + "/infer", ep.infer, methods=["POST"]),
        ]
    app = Starlette(routes=routes, lifespan=ep.lifespan, exception_handlers={HTTPException: _http_error},
                    middleware=[Middleware(_Gate, endpoints=ep, token=token)])
    app.state.endpoints = ep  # the server calls app.state.endpoints.drain() when it begins to stop
    return app
