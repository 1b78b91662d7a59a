"""Connections that cannot exhaust the server: ``ConnectionLimits`` and ``LimitedH11Protocol``, uvicorn's h11 protocol
with a deadline on request headers and a cap on open connections.

What uvicorn offers stops short of this: ``timeout_keep_alive`` starts only once a response is complete, so a
connection that never finishes its first request's headers is never timed out; ``limit_concurrency`` answers 503
only after a request's headers arrived, so idle connections still hold a file each; and h11's
``max_incomplete_event_size`` caps the size of the headers, not the time they take. A few hundred connections that
send half a request line therefore used up every file the process may open (256 by default on macOS), and the
server stopped accepting. Here:

- **Deadlines.** From the moment a connection opens, or the first byte of its next request arrives, the
  request's headers must be complete within ``header_timeout_s``, however slowly the bytes dribble in, and its body
  within ``body_timeout_s`` after that; otherwise the connection is closed (the app sees a client that left).
  Between requests uvicorn's keep-alive timeout (``keep_alive_s``) applies as before.
- **Connection cap.** Past ``max_connections`` open connections, the one that has waited longest for its request's
  headers (an unfinished request, or an idle keep-alive) is closed to make room, so a real client is answered at
  once rather than after the deadline. When every connection has a request in progress, the new one is answered
  503 (``too_many_connections``) and closed; none in progress is ever cut off.

Each connection also gets an unguessable id, put in every request's ASGI scope as ``miaohui.connection``: without an
API key it is the client identity the prefix cache is partitioned by (``engine.serve.app``); a peer's address and
port are not one (another process may bind the same port once the connection closes).

Used by ``engine.serve.server.make_server`` (``engine serve`` and the window's server). Owns connection lifetimes
only; what a request may contain is ``engine.serve.guard`` and ``engine.serve.app``.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from dataclasses import dataclass
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from engine.serve.errors import error_body


@dataclass(frozen=True)
class ConnectionLimits:
    """How long a connection may take, and how many may be open at once."""

    header_timeout_s: float = 10.0  # connection or next request's first byte -> its headers' end; a client needs ms
    body_timeout_s: float = 60.0  # headers' end -> body's end: the 4 MiB cap at under 70 KB/s
    keep_alive_s: float = 5.0  # uvicorn's default: an idle connection between two requests
    # With the process's own files (a handful once the model is loaded) well under macOS's default limit of 256;
    # the queue's 32 waiting requests and the running one fit several times over.
    max_connections: int = 128

    def __post_init__(self) -> None:
        if min(self.header_timeout_s, self.body_timeout_s, self.keep_alive_s) <= 0 or self.max_connections < 1:
            raise ValueError(f"connection limits must be positive: {self}")


def _refusal() -> bytes:
    body = json.dumps(error_body(503, "the server has too many open connections, each with a request in progress: "
                                      "retry in a moment", code="too_many_connections")).encode()
    head = (f"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
            f"retry-after: 1\r\nconnection: close\r\n\r\n")
    return head.encode() + body


class LimitedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol under ``limits`` (see the module docstring); made by ``functools.partial`` in
    ``make_server``, as uvicorn's ``Config(http=...)`` takes any protocol factory."""

    def __init__(self, *args: Any, limits: ConnectionLimits, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = limits
        # Since when this connection waits for a request's headers (monotonic); None while a request is in.
        self.waiting_since: float | None = None
        self._deadline: asyncio.TimerHandle | None = None  # for the headers, then for the body
        self._reading_body = False
        self.connection_id = secrets.token_hex(16)  # the client identity of a key-less server's prefix cache

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.waiting_since = time.monotonic()
        self._start_deadline(self.limits.header_timeout_s)
        if len(self.connections) > self.limits.max_connections:
            self._make_room()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_deadline()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.waiting_since is not None and self._deadline is None:
            self._start_deadline(self.limits.header_timeout_s)  # the next request's first byte on a kept-alive one
        super().data_received(data)

    def handle_events(self) -> None:
        super().handle_events()
        scope = getattr(self, "scope", None)  # the request just parsed; its ASGI task has not run yet
        if isinstance(scope, dict):
            scope.setdefault("miaohui.connection", self.connection_id)
        state = self.conn.their_state
        if self.waiting_since is not None and state is not h11.IDLE:  # its headers are in
            self.waiting_since = None
            self._stop_deadline()
            if state is h11.SEND_BODY:
                self._reading_body = True
                self._start_deadline(self.limits.body_timeout_s)
        elif self._reading_body and state is not h11.SEND_BODY:  # its body is in (or the client left)
            self._reading_body = False
            self._stop_deadline()

    def on_response_complete(self) -> None:
        # Before uvicorn's: it may parse a pipelined request's headers at once (handle_events above clears this).
        self.waiting_since = time.monotonic()
        super().on_response_complete()

    def _start_deadline(self, seconds: float) -> None:
        self._deadline = self.loop.call_later(seconds, self._on_deadline)

    def _stop_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _on_deadline(self) -> None:
        self._deadline = None
        if (self.waiting_since is not None or self._reading_body) and not self.transport.is_closing():
            self.transport.close()

    def _make_room(self) -> None:
        """Close the connection waiting longest for its headers, or refuse this one when all are busy."""
        open_ = [c for c in self.connections if c is not self and not c.transport.is_closing()]
        if len(open_) < self.limits.max_connections:
            return  # the excess is connections already closing: their files are on their way back
        waiting = [c for c in open_ if isinstance(c, LimitedH11Protocol) and c.waiting_since is not None]
        if waiting:
            min(waiting, key=lambda c: c.waiting_since or 0.0).transport.close()
        else:
            self.transport.write(_refusal())
            self.transport.close()
