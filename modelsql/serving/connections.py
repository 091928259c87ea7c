"""Connection limits of the server's HTTP/1.1 protocol: slow headers, too many connections, draining.

uvicorn bounds what it buffers of a request *body* (it stops reading past 64 KiB
until the app reads) and closes an idle keep-alive connection after
``timeout_keep_alive``, but it has no deadline for a request's *headers* and no
cap on connections: a thousand clients that connect and send their headers a
byte at a time each hold a connection (and a file descriptor) for ever
("slowloris"). :class:`ConnectionGuard` adds, on uvicorn's own httptools protocol:

* a header deadline: a request's headers (the first request's from the moment
  the connection opens, a later one's from its first byte) must be complete
  within ``header_timeout_s``, else the client gets ``408`` and the connection
  closes (Apache's ``mod_reqtimeout``, nginx's ``client_header_timeout``);
* a header size limit: more than ``max_header_bytes`` before the headers end
  gets ``431`` and the connection closes;
* a connection cap: past ``max_connections`` open connections, the oldest
  connection that is waiting for a request (headers not complete, or an idle
  keep-alive connection) is closed to make room, so a crowd of slow or idle
  clients cannot lock out a client that sends a whole request; when every
  connection has a request in progress, the newcomer is closed at once;
* draining: :meth:`ConnectionGuard.drain` makes every later response carry
  ``Connection: close`` (see :mod:`.app`), so a keep-alive client finishes its
  request and then reconnects (and is refused once the listener is closed)
  instead of having its connection reset under it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

if TYPE_CHECKING:
    _Protocol = HttpToolsProtocol  # what _Guarded is mixed into: its super() and attributes (transport, loop ...)
else:
    _Protocol = object

__all__ = ["ConnectionLimits", "ConnectionGuard"]


@dataclass(frozen=True)
class ConnectionLimits:
    """The limits of :class:`ConnectionGuard`.

    Attributes:
        max_connections: open connections at most (>= 1).
        header_timeout_s: seconds a request's headers may take to arrive (> 0).
        max_header_bytes: bytes a request line and its headers may take (>= 1024).

    Raises:
        ValueError: a limit out of range.
    """

    max_connections: int = 1000
    header_timeout_s: float = 10.0
    max_header_bytes: int = 64 << 10

    def __post_init__(self) -> None:
        if self.max_connections < 1 or not self.header_timeout_s > 0 or self.max_header_bytes < 1024:
            raise ValueError(f"need max_connections >= 1 (got {self.max_connections}), header_timeout_s > 0 "
                             f"(got {self.header_timeout_s}) and max_header_bytes >= 1024 (got {self.max_header_bytes})")


class ConnectionGuard:
    """The connections of one server and their limits; :meth:`protocol` is the class uvicorn runs.

    Attributes:
        limits: the :class:`ConnectionLimits`.
        evicted: connections closed to make room for a newcomer.
        refused: newcomers closed because every connection had a request in progress.
        timed_out: connections closed because their headers did not arrive in time.
        draining: True once :meth:`drain` was called.
    """

    def __init__(self, limits: ConnectionLimits) -> None:
        self.limits = limits
        self.evicted = 0
        self.refused = 0
        self.timed_out = 0
        self.draining = False
        self._open: set = set()
        self._waiting: dict = {}  # connections waiting for a request, oldest first (a dict keeps order)

    @property
    def connections(self) -> int:
        """Connections open now."""
        return len(self._open)

    def drain(self) -> None:
        """From now on every response asks the client to close the connection."""
        self.draining = True

    def protocol(self) -> type:
        """uvicorn's httptools protocol class with this guard's limits (``uvicorn.Config(http=...)``)."""
        guard = self

        class GuardedHttpToolsProtocol(_Guarded, HttpToolsProtocol):
            pass

        GuardedHttpToolsProtocol.guard = guard
        return GuardedHttpToolsProtocol

    # -- called by the protocol, on the event loop ----------------------------------------------

    def opened(self, conn: "_Guarded") -> bool:
        """Admit ``conn``; False when it must be closed (every connection is busy)."""
        self._open.add(conn)
        self._waiting[conn] = None
        while len(self._open) > self.limits.max_connections:
            victim = next((c for c in self._waiting if c is not conn), None)
            if victim is None:
                self.refused += 1
                return False
            self.evicted += 1
            self._waiting.pop(victim, None)
            self._open.discard(victim)
            victim.close_waiting(503, "the server has too many connections open "
                                      f"(max_connections = {self.limits.max_connections}); "
                                      "this one was waiting for a request and was closed to make room")
        return True

    def waiting(self, conn: "_Guarded") -> None:
        self._waiting.pop(conn, None)
        self._waiting[conn] = None  # to the end: the most recent

    def busy(self, conn: "_Guarded") -> None:
        self._waiting.pop(conn, None)

    def closed(self, conn: "_Guarded") -> None:
        self._open.discard(conn)
        self._waiting.pop(conn, None)


class _Guarded(_Protocol):
    """The guard's additions to a uvicorn protocol (mixed in before ``HttpToolsProtocol``)."""

    guard: ConnectionGuard

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: Optional[asyncio.TimerHandle] = None
        self._header_bytes = 0
        self._in_headers = False

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        if not self.guard.opened(self):
            transport.close()
            return
        self._await_headers()

    def connection_lost(self, exc) -> None:
        self._disarm()
        self.guard.closed(self)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._in_headers:
            self._header_bytes += len(data)
        super().data_received(data)
        if self._in_headers and self._header_bytes > self.guard.limits.max_header_bytes:
            self.close_waiting(431, f"the request's headers take more than {self.guard.limits.max_header_bytes} "
                                    "bytes")

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if not self._in_headers:  # a later request of a keep-alive connection: its first byte
            self._await_headers()

    def on_headers_complete(self) -> None:
        self._disarm()
        self._in_headers = False
        self.guard.busy(self)
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and (self.cycle is None or self.cycle.response_complete):
            self._header_bytes = 0
            self._in_headers = True  # idle keep-alive: uvicorn's timeout_keep_alive closes it
            self.guard.waiting(self)

    def _await_headers(self) -> None:
        self._in_headers = True
        self._header_bytes = 0
        self.guard.waiting(self)
        self._disarm()
        self._deadline = self.loop.call_later(self.guard.limits.header_timeout_s, self._headers_late)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _headers_late(self) -> None:
        self._deadline = None
        if self._in_headers and not self.transport.is_closing():
            self.guard.timed_out += 1
            self.close_waiting(408, f"the request's headers did not arrive within {self.guard.limits.header_timeout_s:g} s")

    def close_waiting(self, status: int, message: str) -> None:
        """Close this connection, which has no request in progress; a client that has begun sending a
        request gets ``status`` with ``{"error": message}`` first."""
        self._disarm()
        self.guard.busy(self)
        if self.transport.is_closing():
            return
        if self._header_bytes:
            self.transport.write(_response(status, message))
        self.transport.close()


_REASONS = {408: b"Request Timeout", 431: b"Request Header Fields Too Large", 503: b"Service Unavailable"}


def _response(status: int, message: str) -> bytes:
    body = orjson.dumps({"error": message})
    return b"".join([b"HTTP/1.1 %d %s\r\n" % (status, _REASONS[status]), b"content-type: application/json\r\n",
                     b"content-length: %d\r\n" % len(body), b"connection: close\r\n\r\n", body])
