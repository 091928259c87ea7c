"""``InferenceServer``: the OIP app on uvicorn, in a daemon thread of the calling process.

``SERVE ... ON PORT n`` starts one of these and returns at once: the server runs
on its own event loop (uvloop) in a background thread, speaking HTTP/1.1 through
httptools (about 40% less server CPU per request than asyncio + h11, measured
when the server was written). It binds only the given
host (default ``127.0.0.1``, never a wildcard unless asked), and refuses an
address other machines can reach without a bearer ``token`` unless
``allow_unauthenticated`` says so. Slow and idle clients are bounded by
:mod:`.connections` (header deadline, connection cap) and :mod:`.app` (body
deadline, bytes held); ``stop`` drains: the server says it is not ready, answers
what arrives for a moment with ``Connection: close``, stops listening, and lets
the requests in progress finish.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import importlib
import importlib.util
import ipaddress
import socket
import struct
import threading
import time
from datetime import datetime, timezone
from typing import Optional

import uvicorn
from starlette.applications import Starlette

from modelsql.serving.app import DEFAULT_BODY_TIMEOUT_S, DEFAULT_MAX_REQUEST_BYTES, build_app
from modelsql.serving.connections import ConnectionGuard, ConnectionLimits
from modelsql.serving.metrics import ServerMetrics
from modelsql.serving.repository import Repository

__all__ = ["InferenceServer", "ServerBindError", "UnauthenticatedExposure", "is_loopback", "DRAIN_S"]

DRAIN_S = 0.2
"""Seconds ``stop`` keeps answering (with ``Connection: close``) before it stops listening."""


class ServerBindError(OSError):
    """The server cannot listen on ``host:port`` (in use, not an address of this machine, no permission).

    ``errno`` is the underlying ``OSError``'s; the message names ``host:port``.
    """


class UnauthenticatedExposure(ValueError):
    """A host other machines can reach (``0.0.0.0``, ``::``, a LAN address) without a token, not allowed."""


def is_loopback(host: str) -> bool:
    """Whether every address ``host`` resolves to is a loopback address (``127.0.0.0/8``, ``::1``);
    False for wildcards (``0.0.0.0``, ``::``) and for a name that does not resolve."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return False
    addresses = {str(info[4][0]).split("%")[0] for info in infos}
    return bool(addresses) and all(ipaddress.ip_address(a).is_loopback for a in addresses)


class InferenceServer:
    """An Open Inference Protocol (KServe v2 REST) server over ``repository``.

    Args:
        repository: what is served (:class:`~modelsql.serving.repository.Repository`).
        host: the one address to listen on (default ``"127.0.0.1"``).
        port: TCP port; 0 picks a free one (read it back from :attr:`port`).
        max_batch_size: rows at which a batch is dispatched (dynamic batching, :mod:`.batching`).
        max_queue_delay_ms: None (the default): the adaptive batching policy (a request is dispatched at
            once while a thread is free; what arrives while all are busy is batched); a number: the fixed delay, the most a
            batch waits for more requests, in ms (see :mod:`.batching`).
        max_request_bytes: the largest accepted request body in bytes (default 64 MiB; 413 beyond).
        version: what ``GET /v2`` reports (default ``modelsql.__version__``).
        token: the bearer token every request but ``/v2/health/*`` must carry (None: no authentication).
        allow_unauthenticated: listen on a non-loopback ``host`` without a ``token`` all the same.
        limits: connection limits (:class:`~modelsql.serving.connections.ConnectionLimits`: at most 1000
            connections, headers within 10 s, at most 64 KiB of headers).
        body_timeout_s: seconds a request body may take to arrive (default 60; 408 beyond).
        max_buffered_bytes: bytes of request bodies held at once (default 4 x ``max_request_bytes``; 503 beyond).
        timeout_keep_alive_s: seconds an idle keep-alive connection stays open (default 5).

    Raises:
        ValueError: ``max_batch_size < 1``, ``max_queue_delay_ms < 0``, ``max_request_bytes < 1``, or a
            bad limit. UnauthenticatedExposure: ``host`` is not a loopback address, no ``token`` is
            given and ``allow_unauthenticated`` is False.
    """

    def __init__(self, repository: Repository, *, host: str = "127.0.0.1", port: int = 0, max_batch_size: int = 32,
                 max_queue_delay_ms: Optional[float] = None, max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
                 version: Optional[str] = None, token: Optional[str] = None, allow_unauthenticated: bool = False,
                 limits: Optional[ConnectionLimits] = None, body_timeout_s: Optional[float] = DEFAULT_BODY_TIMEOUT_S,
                 max_buffered_bytes: Optional[int] = None, timeout_keep_alive_s: float = 5.0) -> None:
        if max_batch_size < 1 or (max_queue_delay_ms or 0) < 0 or max_request_bytes < 1:
            raise ValueError(f"need max_batch_size >= 1 (got {max_batch_size}), max_queue_delay_ms >= 0 "
                             f"(got {max_queue_delay_ms}) and max_request_bytes >= 1 (got {max_request_bytes})")
        if not token and not allow_unauthenticated and not is_loopback(host):
            raise UnauthenticatedExposure(
                f"{host} can be reached from other machines and this server has no token; give one (every request "
                "then needs Authorization: Bearer <token>) or allow unauthenticated access explicitly")
        self.repository = repository
        self.max_batch_size = max_batch_size
        self.max_queue_delay_ms = max_queue_delay_ms
        self.max_request_bytes = max_request_bytes
        self.token = token or None
        self.body_timeout_s = body_timeout_s
        self.max_buffered_bytes = max_buffered_bytes
        self.timeout_keep_alive_s = timeout_keep_alive_s
        self.guard = ConnectionGuard(limits or ConnectionLimits())
        """The server's connections and their limits (:class:`~modelsql.serving.connections.ConnectionGuard`)."""
        self._host = host
        self._port = port
        self._version = version
        self._metrics = ServerMetrics()
        self._app: Optional[Starlette] = None
        self._server: Optional[uvicorn.Server] = None
        self._thread: Optional[threading.Thread] = None
        self._failure: Optional[BaseException] = None
        self._started_at: Optional[datetime] = None
        self._lock = threading.Lock()
        self._sock: Optional[socket.socket] = None

    # -- properties ---------------------------------------------------------------------------

    @property
    def host(self) -> str:
        """The address listened on."""
        return self._host

    @property
    def port(self) -> int:
        """The TCP port listened on (the chosen one once started with ``port=0``)."""
        return self._port

    @property
    def url(self) -> str:
        """``http://host:port`` (IPv6 hosts in brackets)."""
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{self._port}"

    @property
    def started_at(self) -> Optional[datetime]:
        """When :meth:`start` returned (UTC), or None before."""
        return self._started_at

    @property
    def metrics(self) -> ServerMetrics:
        """This server's Prometheus metrics (``GET /metrics``); repositories report steps here."""
        return self._metrics

    @property
    def running(self) -> bool:
        """Whether the server thread is serving."""
        return self._thread is not None and self._thread.is_alive()

    # -- life cycle ---------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> "InferenceServer":
        """Bind ``host:port``, start serving in a daemon thread, and return once connections are accepted.

        Raises:
            ServerBindError: the address cannot be bound (e.g. the port is in use); names ``host:port``.
            RuntimeError: already started, or the server did not come up within ``timeout`` seconds.
        """
        with self._lock:
            if self._thread is not None:
                raise RuntimeError(f"the server on {self.url} was already started")
            sock = self._sock = self._bind()
            self._server = uvicorn.Server(self._config())
            self._thread = threading.Thread(target=self._run, args=(sock,), name=f"modelsql-serve-{self._port}",
                                            daemon=True)
            self._thread.start()
        self._wait_started(timeout)
        self._started_at = datetime.now(timezone.utc)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop gracefully: report not ready and close each connection after its response, keep answering
        for :data:`DRAIN_S` seconds (a request already on its way is served, not reset), stop listening,
        let in-flight requests finish for up to ``timeout`` seconds, then cancel what is left and join
        the thread. Calling it again (or before start) does nothing."""
        server, thread = self._server, self._thread
        if server is None or thread is None or not thread.is_alive():
            return
        assert self._app is not None  # built with the server
        self._app.state.endpoints.drain()
        self.guard.drain()
        if self._sock is not None:
            _refuse_new_connections(self._sock)
        time.sleep(min(DRAIN_S, timeout))  # the loop accepts what the kernel had queued, and answers it
        server.config.timeout_graceful_shutdown = max(1, round(timeout))
        server.should_exit = True
        thread.join(timeout + 1.0)
        if thread.is_alive():
            server.force_exit = True
            thread.join(2.0)

    def __enter__(self) -> "InferenceServer":
        return self if self.running else self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- internals ----------------------------------------------------------------------------

    def _bind(self) -> socket.socket:
        try:
            family, kind, proto, _, address = socket.getaddrinfo(self._host, self._port, type=socket.SOCK_STREAM)[0]
            sock = socket.socket(family, kind, proto)
        except OSError as exc:
            raise ServerBindError(exc.errno, f"cannot serve on {self._host}:{self._port}: {exc.strerror or exc}") from exc
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # restart at once; an active listener still wins
            sock.bind(address)
            sock.listen(2048)
        except OSError as exc:
            sock.close()
            raise ServerBindError(exc.errno, f"cannot serve on {self._host}:{self._port}: {exc.strerror or exc}") from exc
        self._port = sock.getsockname()[1]
        return sock

    def _config(self) -> uvicorn.Config:
        self._app = app = build_app(self.repository, self._metrics, version=self._version or _modelsql_version(),
                                    max_batch_size=self.max_batch_size, max_queue_delay_ms=self.max_queue_delay_ms,
                                    max_request_bytes=self.max_request_bytes, token=self.token,
                                    body_timeout_s=self.body_timeout_s, max_buffered_bytes=self.max_buffered_bytes)
        return uvicorn.Config(
            app,
            loop="uvloop" if importlib.util.find_spec("uvloop") else "asyncio",
            http=self.guard.protocol(),  # uvicorn's httptools protocol with the connection limits
            # a backstop (503) for requests still running after their clients left; connections closed to make
            # room stay in uvicorn's count until the loop's next turn, hence the margin
            limit_concurrency=4 * self.guard.limits.max_connections,
            # uvicorn annotates int, but uses the seconds as a float (loop.call_later)
            timeout_keep_alive=self.timeout_keep_alive_s,  # type: ignore[arg-type]
            lifespan="on",
            log_level="warning",
            log_config=None,  # leave the host process's logging configuration alone
            access_log=False,
            server_header=False,
            timeout_graceful_shutdown=5,
        )

    def _run(self, sock: socket.socket) -> None:
        server = self._server
        assert server is not None  # start() creates it before the thread
        loop = (server.config.get_loop_factory() or asyncio.new_event_loop)()
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(server.serve(sockets=[sock]))
        except BaseException as exc:  # uvicorn raises SystemExit when the lifespan startup fails
            self._failure = exc
        finally:
            sock.close()
            _close_loop(loop)

    def _wait_started(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        server, thread = self._server, self._thread
        assert server is not None and thread is not None  # start() creates both first
        while not server.started:
            if not thread.is_alive():
                raise RuntimeError(f"the server on {self.url} failed to start: {self._failure!r}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the server on {self.url} did not start within {timeout} s")
            time.sleep(0.005)


_SO_ATTACH_FILTER = getattr(socket, "SO_ATTACH_FILTER", 26)  # Linux's value


def _refuse_new_connections(sock: socket.socket) -> None:
    """Make the kernel drop new connection attempts to the listening ``sock`` (Linux: a classic BPF socket
    filter that accepts no packet), so that closing it later resets no connection the kernel completed
    but the server never accepted; a client whose SYN is dropped retries, and is refused once the socket
    is closed. Elsewhere (or if refused) nothing changes: a connection in the accept queue when the
    socket closes is then reset by the kernel."""
    drop_all = (ctypes.c_ubyte * 8).from_buffer_copy(struct.pack("HBBI", 0x06, 0, 0, 0))  # BPF_RET | BPF_K, 0
    program = struct.pack("@HP", 1, ctypes.addressof(drop_all))
    with contextlib.suppress(OSError, AttributeError):
        sock.setsockopt(socket.SOL_SOCKET, _SO_ATTACH_FILTER, program)


def _close_loop(loop: asyncio.AbstractEventLoop) -> None:
    try:
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for task in pending:
            task.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        asyncio.set_event_loop(None)
        loop.close()


def _modelsql_version() -> str:
    # Looked up at start time, not imported: modelsql/__init__ imports the planner, which may import
    # this package, and a static import back to the package root would be a cycle.
    return importlib.import_module("modelsql").__version__
