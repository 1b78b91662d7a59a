"""Listening: the loopback rule, binding the socket, and running uvicorn in the foreground or on a thread.

The socket is bound here, before uvicorn starts, so a port in use is one ``OSError`` the command line turns
into one line (uvicorn would log and exit), and port 0 gives the ephemeral port the system chose.
``BackgroundServer`` runs uvicorn on a daemon thread with its own event loop: the tests' server, and the
shape a window toggle would use. Owns no HTTP behaviour (``engine.serve.app``) and no model.
"""

from __future__ import annotations

import ipaddress
import socket
import sys
import threading
import time
from typing import Any

import uvicorn

BACKLOG = 2048  # uvicorn's default
GRACEFUL_SHUTDOWN_S = 5  # open streams get this long to finish after Ctrl-C, then they are cancelled


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


def make_server(app: Any, sock: socket.socket, log_level: str = "info", access_log: bool = True) -> uvicorn.Server:
    """A uvicorn server for ``app`` on the already bound ``sock`` (run it with ``server.run(sockets=[sock])``)."""
    host, port = sock.getsockname()[:2]
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=access_log, lifespan="off",
                            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S)
    return uvicorn.Server(config)


class BackgroundServer:
    """uvicorn serving ``app`` on a thread. ``start()`` returns once it accepts connections; ``stop()`` ends it."""

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning") -> None:
        self.sock = bind_socket(host, port)
        self.host, self.port = self.sock.getsockname()[:2]
        self.server = make_server(app, self.sock, log_level, access_log=False)
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
