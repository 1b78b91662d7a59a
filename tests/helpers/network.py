"""A network that refuses: the one guard the offline, library and window tests put around the socket layer.

``guard_network(monkeypatch)`` makes every connection and name lookup fail with ``OSError`` and records it;
with ``allow_loopback`` connections to this machine (a local fake Hub or server) go through. The returned list
holds every refused attempt, so a test asserts it stays empty. ``closed_port_url()`` is an address on this machine
where nothing listens (a Hub or server that refuses connections). Owns nothing else.
"""

from __future__ import annotations

import socket

import pytest

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def guard_network(monkeypatch: pytest.MonkeyPatch, *, allow_loopback: bool = False) -> list[str]:
    """Refuse (and record) every connection and lookup; let loopback ones through when ``allow_loopback``."""
    attempts: list[str] = []
    real_connect, real_lookup = socket.socket.connect, socket.getaddrinfo

    def connect(self: socket.socket, address: object, *args: object, **kwargs: object) -> object:
        host = address[0] if isinstance(address, tuple) else address
        if allow_loopback and host in LOOPBACK:
            return real_connect(self, address, *args, **kwargs)
        attempts.append(f"connect {address!r}")
        raise OSError("network disabled by the test")

    def lookup(host: object, *args: object, **kwargs: object) -> object:
        if allow_loopback and host in LOOPBACK:
            return real_lookup(host, *args, **kwargs)
        attempts.append(f"getaddrinfo {host!r}")
        raise socket.gaierror("network disabled by the test")

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect)
    monkeypatch.setattr(socket, "getaddrinfo", lookup)
    return attempts


def closed_port_url() -> str:
    """``http://127.0.0.1:PORT`` for a port nothing listens on (bound for a moment to pick it, then closed)."""
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    return f"http://127.0.0.1:{port}"
