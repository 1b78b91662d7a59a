"""What to connect to: ``RemoteSpec`` (a server's base URL, the served model's name, an optional API key) and the
one error type of the remote side, ``RemoteError`` (and its kinds: not found, a malformed answer, a cancelled
connect, a bad URL), with the timeouts a client waits for a server.

A base URL is ``http(s)://host[:port][/path]``. With no path, ``/v1`` is added (``http://gpu-box:8000`` means
``http://gpu-box:8000/v1``); a path is kept as given (``http://localhost:11434/v1`` for Ollama, a proxy's
``/openai/v1``). The server's root, where ``/metrics`` lives, is the base URL without its trailing ``/v1``.

The API key never shows: it is left out of the spec's ``repr`` (so of every log line, failure record and
exception that quotes a spec) and out of every message here. Pure data, no network, no heavy import: the
window builds specs on its GUI thread.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

from engine.errors import CancelledError, EngineError, ErrorKind

DEFAULT_CONNECT_TIMEOUT_S = 5.0  # a server that does not accept a connection (TCP, TLS) in 5 s is not there
# Connecting (``GET /v1/models``) is answered at once by every server, however busy: one that says nothing for
# 10 s has hung or is not an API server, and the user is told so within seconds, not minutes.
DEFAULT_ANSWER_TIMEOUT_S = 10.0
# A reply may wait long for its first byte: a queue on a shared vLLM, a long prompt's prefill on llama-server
# (which answers only once its first token is out). Between two bytes of a reply's stream, 5 minutes without
# anything is a dead connection, not a slow model; the user can stop it sooner (a reply is always cancellable).
DEFAULT_READ_TIMEOUT_S = 300.0


class RemoteError(EngineError):
    """A server could not be used: unreachable, refused the key, has no such model, answered garbage."""


class RemoteModelNotFoundError(RemoteError):
    """The server does not serve the model asked for."""

    kind = ErrorKind.NOT_FOUND


class MalformedAnswerError(RemoteError):
    """The server's answer is not what the API says: a stream event too large to be one, a chunk that is not UTF-8
    or not JSON, a body far larger than any answer. The reply ends with what came before it."""

    kind = ErrorKind.CORRUPT


class ConnectCancelledError(RemoteError, CancelledError):
    """Connecting to a server was cancelled (the user pressed Stop, or asked for another model meanwhile)."""

    kind = ErrorKind.CANCELLED


class BadBaseUrlError(RemoteError):
    """The base URL is not an http(s) URL with a host."""

    kind = ErrorKind.BAD_INPUT


def normalize_base_url(url: str) -> str:
    """``url`` checked and in its canonical form: scheme and host lower-case, no trailing slash, ``/v1`` added
    when it has no path. ``BadBaseUrlError`` (one line) when it cannot be a server's address."""
    text = (url or "").strip()
    if not text:
        raise BadBaseUrlError("the server's base URL is empty: give one like http://127.0.0.1:8000/v1")
    if "://" not in text:
        raise BadBaseUrlError(f"the base URL {text!r} has no scheme: write it as http://{text} or https://{text}")
    try:
        parts = urlsplit(text)
        port = parts.port  # raises ValueError on a port that is not a number or out of range
    except ValueError as exc:
        raise BadBaseUrlError(f"the base URL {text!r} is not valid: {exc}") from None
    if parts.scheme.lower() not in ("http", "https"):
        raise BadBaseUrlError(f"the base URL {text!r} must start with http:// or https://")
    if not parts.hostname:
        raise BadBaseUrlError(f"the base URL {text!r} has no host")
    if parts.query or parts.fragment:
        raise BadBaseUrlError(f"the base URL {text!r} must not have a query or a fragment")
    if parts.username or parts.password:
        raise BadBaseUrlError("the base URL must not hold a user name or password: give the API key on its own")
    host = parts.hostname.lower()
    netloc = (f"[{host}]" if ":" in host else host) + (f":{port}" if port is not None else "")
    path = parts.path.rstrip("/") or "/v1"
    return urlunsplit((parts.scheme.lower(), netloc, path, "", ""))


def server_root(base_url: str) -> str:
    """The server's root URL (where ``/metrics`` and ``/health`` are): the base URL without a trailing ``/v1``."""
    return base_url[:-3] if base_url.endswith("/v1") else base_url


def host_of(base_url: str) -> str:
    """``host[:port]`` of a base URL, as the window and the history name the engine that answered."""
    return urlsplit(base_url).netloc


@dataclass(frozen=True)
class RemoteSpec:
    """Which server and which of its models; ``BadBaseUrlError`` on construction when the URL is unusable.

    ``model`` is a name from the server's ``/v1/models``; ``""`` or ``"default"`` takes the server's only model
    (and is refused, naming them, when it serves several). ``api_key`` is sent as ``Authorization: Bearer``;
    it is kept out of ``repr`` and compared by nothing.
    """

    base_url: str
    model: str = ""
    api_key: str | None = field(default=None, repr=False)
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S  # between two bytes of a reply's stream
    answer_timeout_s: float = DEFAULT_ANSWER_TIMEOUT_S  # for the models list (connecting), between two bytes too

    def __post_init__(self) -> None:
        object.__setattr__(self, "base_url", normalize_base_url(self.base_url))
        object.__setattr__(self, "model", (self.model or "").strip())
        object.__setattr__(self, "api_key", (self.api_key or "").strip() or None)
        if not self.connect_timeout_s > 0 or not self.read_timeout_s > 0 or not self.answer_timeout_s > 0:
            raise RemoteError("the timeouts must be positive numbers of seconds")

    @property
    def root(self) -> str:
        return server_root(self.base_url)

    @property
    def host(self) -> str:
        return host_of(self.base_url)
