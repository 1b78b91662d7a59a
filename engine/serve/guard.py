"""What keeps web pages out of a key-less local server: ``RequestGuard``, the ASGI app in front of every route.

A server on 127.0.0.1 without an API key trusts whoever can reach it, and a browser can: a page on
``attacker.example`` whose name is re-resolved to 127.0.0.1 (DNS rebinding) sends its requests with
``Host: attacker.example`` and, being same-origin with itself, reads the answers. So a request is served only when
its ``Host`` is one this server answers to (``host_allowed``): an IP address (a page cannot be served from a bare
address it does not own, so no rebinding arrives under one), ``localhost`` and its ``*.localhost`` names, and the
names the user allows (``engine serve --host NAME`` and ``--allowed-host NAME``); anything else is answered 421
(Misdirected Request) with an OpenAI-shaped error. And a POST must declare its body ``application/json``: a form or
``text/plain`` body is a CORS "simple" request a page may send to any site without asking first, so it is refused
(415) before it reaches the model. HTTP/1.0 without a ``Host`` is served: browsers always send one.

Used by ``engine.serve.server.make_server`` for ``engine serve`` and the window's "Serve this model" alike. Owns
these two checks only; the routes are ``engine.serve.app``.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from engine.serve.errors import error_body

LOOPBACK_NAMES = frozenset({"localhost"})
JSON = "application/json"


def normalise_host(name: str) -> str:
    """A host name as compared here: lower case, no brackets, no trailing dot (``Box.LAN.`` -> ``box.lan``)."""
    return name.strip().strip("[]").rstrip(".").lower()


def host_of(authority: str) -> str:
    """The host part of a ``Host`` header value: ``[::1]:8000`` -> ``::1``, ``Box.lan:80`` -> ``box.lan``."""
    authority = authority.strip()
    if authority.startswith("["):
        return normalise_host(authority.partition("]")[0])
    if authority.count(":") > 1:  # a bare IPv6 address (not a valid Host, but unambiguous)
        return normalise_host(authority)
    return normalise_host(authority.partition(":")[0])


def host_allowed(host: str, allowed: frozenset[str]) -> bool:
    """True when a request for ``host`` (from ``host_of``) is this server's to answer."""
    if host in allowed or host in LOOPBACK_NAMES or host.endswith(".localhost"):
        return True
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _media_type(content_type: bytes) -> str:
    return content_type.decode("latin-1").partition(";")[0].strip().lower()


class RequestGuard:
    """The ASGI app in front of ``app``: refuses requests for other hosts (421) and POSTs not declared JSON (415)."""

    def __init__(self, app: Callable[..., Awaitable[None]], allowed_hosts: Iterable[str] = ()) -> None:
        self.app = app
        self.allowed = frozenset(normalise_host(name) for name in allowed_hosts if name.strip())

    async def __call__(self, scope: dict[str, Any], receive: Callable[[], Awaitable[Any]],
                       send: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
        if scope["type"] == "http":
            refusal = self._refusal(scope)
            if refusal is not None:
                await _answer(send, *refusal)
                return
        await self.app(scope, receive, send)

    def _refusal(self, scope: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
        headers: dict[bytes, bytes] = {}
        for name, value in scope["headers"]:
            headers.setdefault(name.lower(), value)
        host = headers.get(b"host")
        if host is not None and not host_allowed(host_of(host.decode("latin-1")), self.allowed):
            shown = host_of(host.decode("latin-1"))
            return 421, error_body(
                421, f"this server does not answer to the host name {shown!r} (a web page may be trying to reach it "
                     f"through DNS rebinding); to allow it, start the server with --allowed-host {shown}",
                code="host_not_allowed")
        if scope["method"] == "POST" and _media_type(headers.get(b"content-type", b"")) != JSON:
            return 415, error_body(415, "send the request body as JSON, with the header Content-Type: "
                                        "application/json", code="unsupported_media_type")
        return None


async def _answer(send: Callable[[dict[str, Any]], Awaitable[None]], status: int, body: dict[str, Any]) -> None:
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": data})
