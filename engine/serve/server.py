"""Listening: the loopback rule, binding the socket, and running uvicorn in the foreground or on a thread.

The socket is bound here, before uvicorn starts, so a port in use is one ``OSError`` the command line turns
into one line (uvicorn would log and exit), and port 0 gives the ephemeral port the system chose.
``make_server`` is the one place a uvicorn server is made, for ``engine serve`` and the window alike: the app
behind ``engine.serve.guard.RequestGuard`` (no other site's ``Host``, JSON bodies only), connections under
``engine.serve.connections.ConnectionLimits``, and a shutdown that ends itself what is still open after the
grace period (``Server``), so Ctrl-C mid-stream prints no traceback. ``BackgroundServer`` runs it on a daemon
thread with its own event loop: the window's server and the tests'. Owns no routes (``engine.serve.app``) and
no model.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import logging
import socket
import sys
import threading
import time
from collections.abc import Iterable
from typing import Any

import uvicorn

from engine.serve.connections import ConnectionLimits, LimitedH11Protocol
from engine.serve.guard import RequestGuard

BACKLOG = 2048  # uvicorn's default
GRACEFUL_SHUTDOWN_S = 5  # open streams get this long to finish after Ctrl-C, then their connections are closed


def is_loopback(host: str) -> bool:
    """True for an address only this machine can reach: 127.0.0.0/8, ::1, ``localhost``."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def bind_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` and listening (``OSError`` when it cannot be)."""
    family, kind, proto, _, address = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM,
                                                         flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, kind, proto)
    try:
        if sys.platform != "win32":  # on Windows SO_REUSEADDR lets another process take the port
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(BACKLOG)  # connections queue from now on, even before uvicorn's loop accepts them
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


class Server(uvicorn.Server):
    """uvicorn's server, except that open requests are ended here when the grace period is over.

    uvicorn would cancel their tasks, and each cancelled request logs a traceback of ``CancelledError``. Closing
    their connections instead ends them the way a client that leaves does: the worker sees the cancel within one
    decode step and each request finishes on its own. A second Ctrl-C ends the grace period at once.
    ``cut_off`` counts the requests that were still open then.
    """

    cut_off = 0

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        closing = asyncio.ensure_future(super().shutdown(sockets))  # stops accepting; waits for what is open
        loop = asyncio.get_running_loop()
        deadline = loop.time() + GRACEFUL_SHUTDOWN_S
        while not closing.done() and not self.force_exit and loop.time() < deadline:
            await asyncio.wait({closing}, timeout=0.1)
        if self.server_state.tasks:
            self.cut_off = len(self.server_state.tasks)
            for connection in list(self.server_state.connections):
                connection.transport.abort()  # type: ignore[union-attr]  (h11 connections only: ws="none")
            await asyncio.wait(set(self.server_state.tasks), timeout=GRACEFUL_SHUTDOWN_S)
            self.force_exit = True  # a request still running (a stuck prefill) does not hold the exit any longer
        await closing


def make_server(app: Any, sock: socket.socket, *, log_level: str = "warning", access_log: bool = False,
                allowed_hosts: Iterable[str] = (), limits: ConnectionLimits = ConnectionLimits()) -> Server:
    """A uvicorn server for ``app`` on the already bound ``sock`` (run it with ``server.run(sockets=[sock])``).

    Requests are answered when their ``Host`` is a loopback name, an IP address or one of ``allowed_hosts``
    (``engine.serve.guard``). ``log_level`` is uvicorn's own messages' (start, stop); ``access_log`` adds one
    line per request at any level.
    """
    host, port = sock.getsockname()[:2]
    config = uvicorn.Config(RequestGuard(app, allowed_hosts), host=host, port=port, log_level=log_level,
                            access_log=access_log, lifespan="off", ws="none",
                            http=functools.partial(LimitedH11Protocol, limits=limits),
                            timeout_keep_alive=limits.keep_alive_s,  # type: ignore[arg-type]  (a float works)
                            timeout_graceful_shutdown=None)  # Server.shutdown keeps the grace period itself
    if access_log:
        logging.getLogger("uvicorn.access").setLevel(logging.INFO)
    return Server(config)


class BackgroundServer:
    """uvicorn serving ``app`` on a thread. ``start()`` returns once it accepts connections; ``stop()`` ends it."""

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning", *,
                 allowed_hosts: Iterable[str] = (), limits: ConnectionLimits = ConnectionLimits()) -> None:
        self.sock = bind_socket(host, port)
        self.host, self.port = self.sock.getsockname()[:2]
        self.server = make_server(app, self.sock, log_level=log_level, allowed_hosts=(host, *allowed_hosts),
                                  limits=limits)
        self._thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]},
                                        name="miaohui-serve-http", daemon=True)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self, timeout: float = 30.0) -> "BackgroundServer":
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the HTTP server did not start")
            time.sleep(0.01)
        return self

    def stop(self, timeout: float = 30.0) -> None:
        self.server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout)
        self.sock.close()

    def __enter__(self) -> "BackgroundServer":
        return self.start()

    def __exit__(self, *_exc: Any) -> None:
        self.stop()
