"""Talking to an OpenAI-compatible server: ``list_models``, ``connect`` -> ``RemoteModel``, and every failure as one
line (``describe``).

Why the official ``openai`` package rather than raw httpx: it is the client every one of these servers (vLLM,
llama.cpp's ``llama-server``, Ollama's ``/v1``, LM Studio, ``python -m engine serve``) is tested against, it
tracks the API's shapes (``stream_options``, ``logprobs``) as they change, it parses the server-sent events
(an ``error`` event mid-stream included), and it types every failure (connection, timeout, each HTTP status),
which is what turns them into one clear line. Its HTTP layer is the same httpx family we would use by hand;
the one thing we reach under it for is the socket, to cancel a blocked read (``engine.remote.session``).
It takes ~0.5 s to import, so it is imported on first use (``_openai()``), never with this module: the
window and ``python -m engine --help`` load this module without paying for it.

``RemoteModel`` is what a worker "loads" for a server: the spec, the served model's resolved name, what the
server says about it (``RemoteFacts``) and one pooled client reused by every request. Retries are off
(``max_retries=0``): a failure is reported at once, never hidden behind a silent second attempt.

The server is not trusted (``_Bounded``, an httpx response hook): a stream event (one chunk) larger than
``MAX_EVENT_BYTES`` or any other answer larger than ``MAX_BODY_BYTES`` is not read further, and ends as one line
(``MalformedAnswerError``), before openai's decoder, which has no bound, would buffer it whole; answers are asked
for uncompressed, so that bound is the bytes held, and a stream compressed anyway is refused. ``connect`` lists the
models on a thread of its own and waits for it watching its cancel flag: the short ``answer_timeout_s`` gives up
on a server that accepted and said nothing, and a cancel returns at once.
"""

from __future__ import annotations

import functools
import json
import socket
import ssl
import threading
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from engine.errors import ErrorKind
from engine.fmt import format_bytes, one_line
from engine.models.model import facts_keys
from engine.remote.spec import (ConnectCancelledError, MalformedAnswerError, RemoteError, RemoteModelNotFoundError,
                                RemoteSpec, host_of)

NO_KEY = "EMPTY"  # sent when there is no key (vLLM's documented placeholder; a server without keys ignores it)
ALIASES = ("", "default")  # a model name that means "the server's only model"
MAX_MESSAGE_CHARS = 240
# A chunk of a reply is a few hundred bytes, a few KiB with 20 top logprobs: 1 MiB is no chunk (httpx's own SSE
# reader stops at the same size). A models list is ~1 MiB for a hub of 300 models with their descriptions.
MAX_EVENT_BYTES = 1 << 20
MAX_BODY_BYTES = 16 << 20
CANCEL_POLL_S = 0.05  # while connecting, the cancel flag is looked at this often


def _openai() -> Any:
    import openai  # lazy: ~0.5 s, see the module docstring

    return openai


class NeedsLocalModelError(RemoteError, AttributeError):
    """What needs the model's own weights or tokenizer (the lab's attention and KV experiments, the tokenizer
    view) asked a remote model for them. An ``AttributeError`` too, so ``getattr(model, name, default)`` works."""

    kind = ErrorKind.OTHER


@dataclass(frozen=True)
class ServedModel:
    """One entry of ``/v1/models`` with what the server said about it (None: not said)."""

    id: str
    owned_by: str | None = None
    context_length: int | None = None  # vLLM's max_model_len (the server's limit, not the checkpoint's)
    params: int | None = None  # llama-server's meta.n_params
    weights_bytes: int | None = None  # llama-server's meta.size


# A served model's precision as the window and the CLI show it: the server does not say how its weights are stored,
# and its model name (shown once already, as the name) would read as a precision that is not one.
REMOTE_PRECISION = "remote"


@dataclass(frozen=True)
class RemoteFacts:
    """What the window and the CLI know of a model served elsewhere. Shaped after ``ModelFacts`` for the fields
    they read; what the server does not say is None (``to_dict`` keeps every ``ModelFacts`` key, unknown ones null)."""

    name: str  # the served model's name
    source: str  # the base URL
    device: str  # "remote: host[:port]"
    precision: str  # REMOTE_PRECISION: how the weights are stored is the server's business, and it does not say
    context_length: int  # 0 when the server does not say
    params: int | None = None
    weights_bytes: int | None = None
    architecture: str = "remote (OpenAI-compatible server)"
    remote: bool = True
    models: tuple[str, ...] = field(default=(), compare=False)  # every model the server lists

    @property
    def host(self) -> str:
        return host_of(self.source)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {key: None for key in facts_keys()}
        data.update(kv_bytes_per_token=None, kv_bytes_per_token_no_gqa=None, param_estimate=None, attention_kind=None)
        data.update(name=self.name, source=self.source, architecture=self.architecture, device=self.device,
                    precision=self.precision, context_length=self.context_length or None, params=self.params,
                    weights_bytes=self.weights_bytes)
        return data


class RemoteModel:
    """A server's model, "loaded": its spec, resolved name, facts, and the client its requests share.

    Used by one thread at a time (the worker that owns it), like a local ``LoadedModel``. Asked for what only a
    local model has (``model``, ``tokenizer``, ``eos_token_ids``), it raises ``NeedsLocalModelError`` (one line).
    """

    def __init__(self, spec: RemoteSpec, served: ServedModel, listed: tuple[ServedModel, ...]) -> None:
        self.spec = spec
        self.model_id = served.id
        self.served = served
        self.listed = listed
        self.facts = RemoteFacts(name=served.id, source=spec.base_url, device=f"remote: {spec.host}",
                                 precision=REMOTE_PRECISION, context_length=served.context_length or 0,
                                 params=served.params, weights_bytes=served.weights_bytes,
                                 models=tuple(m.id for m in listed))
        self._client: Any = None
        self._lock = threading.Lock()

    def client(self) -> Any:
        """The ``openai.OpenAI`` client of this server (made once; its connection pool is reused)."""
        with self._lock:
            if self._client is None:
                self._client = make_client(self.spec)
            return self._client

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def __getattr__(self, name: str) -> Any:  # only called for attributes this class does not have
        if name in ("model", "tokenizer", "eos_token_ids"):
            raise NeedsLocalModelError(f"this needs a model loaded on this computer: {self.model_id!r} runs on "
                                       f"{self.spec.host}, which shares only its replies")
        raise AttributeError(name)

    def __repr__(self) -> str:
        return f"RemoteModel({self.model_id!r} at {self.spec.base_url})"


def make_client(spec: RemoteSpec) -> Any:
    openai = _openai()
    timeout = openai.Timeout(spec.read_timeout_s, connect=spec.connect_timeout_s)
    # openai's own httpx client (its limits and defaults), with every answer bounded as it is read (``_Bounded``).
    http = openai.DefaultHttpxClient(timeout=timeout, event_hooks={"response": [_Bounded.hook(spec.host)]})
    # OpenAI-Organization/-Project would otherwise come from the environment (OPENAI_ORG_ID...) and go to any server.
    return openai.OpenAI(base_url=spec.base_url, api_key=spec.api_key or NO_KEY, max_retries=0, timeout=timeout,
                         http_client=http,
                         default_headers={"OpenAI-Organization": openai.Omit(), "OpenAI-Project": openai.Omit(),
                                          "Accept-Encoding": "identity"})


class _Bounded:
    """A response body read through a bound: a stream's events at most ``MAX_EVENT_BYTES`` each (bytes since the
    last blank line), any other body at most ``MAX_BODY_BYTES``; past it, ``MalformedAnswerError``. Wraps the
    response's byte stream, so it counts bytes as they arrive, before anything buffers them."""

    def __init__(self, inner: Any, host: str, events: bool) -> None:
        self._inner, self._host, self._events = inner, host, events
        self._total = 0
        self._event = 0  # bytes since the last event's end
        self._tail = b""  # the last bytes read: an event's end may span two reads

    @classmethod
    def hook(cls, host: str) -> Any:
        """The httpx response hook that bounds every answer from ``host`` (runs before its body is read)."""

        def bound(response: Any) -> None:
            kind = response.headers.get("content-type", "").partition(";")[0].strip().lower()
            events = kind == "text/event-stream"
            encoding = response.headers.get("content-encoding", "").strip().lower()
            if events and encoding not in ("", "identity"):
                raise MalformedAnswerError(f"{host} sent its stream compressed ({one_line(encoding, max_chars=40)}) "
                                           "though it was asked for none")
            response.stream = _bounded_type()(response.stream, host, events)

        return bound

    def __iter__(self) -> Any:
        for data in self._inner:
            self._count(data)
            yield data

    def close(self) -> None:
        self._inner.close()

    def _count(self, data: bytes) -> None:
        self._total += len(data)
        if not self._events:
            if self._total > MAX_BODY_BYTES:
                raise MalformedAnswerError(f"{self._host} sent an answer of more than {format_bytes(MAX_BODY_BYTES)}: "
                                           "not read further")
            return
        window = self._tail + data
        end = max(window.rfind(b"\n\n"), window.rfind(b"\r\r"), window.rfind(b"\n\r\n"))
        self._event = len(window) - end if end >= 0 else self._event + len(data)
        self._tail = window[-3:]
        if self._event > MAX_EVENT_BYTES:
            raise MalformedAnswerError(f"{self._host} sent a stream event of more than {format_bytes(MAX_EVENT_BYTES)} "
                                       "(a reply chunk is a few KiB): not read further")


@functools.cache
def _bounded_type() -> type:
    """``_Bounded`` as the httpx byte stream a response must hold (made on first use: httpx loads with openai)."""
    import httpx2

    return type("BoundedByteStream", (_Bounded, httpx2.SyncByteStream), {})


def malformed(exc: BaseException, host: str) -> MalformedAnswerError | None:
    """``exc`` as the typed error it stands for when it means the server's bytes were not UTF-8 or not JSON."""
    if isinstance(exc, UnicodeDecodeError):
        return MalformedAnswerError(f"{host} sent a chunk that is not UTF-8 text (byte {exc.start}: "
                                    f"{exc.object[exc.start:exc.start + 1]!r})")
    if isinstance(exc, json.JSONDecodeError):
        return MalformedAnswerError(f"{host} sent a chunk that is not JSON ({one_line(exc.msg)} at character "
                                    f"{exc.pos})")
    return None


def _int_or_none(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


def _served(entry: Any) -> ServedModel:
    extra = dict(getattr(entry, "model_extra", None) or {})
    meta = extra.get("meta") if isinstance(extra.get("meta"), dict) else {}
    return ServedModel(id=str(entry.id), owned_by=getattr(entry, "owned_by", None),
                       context_length=_int_or_none(extra.get("max_model_len")),
                       params=_int_or_none(meta.get("n_params")), weights_bytes=_int_or_none(meta.get("size")))


def list_models(spec: RemoteSpec, client: Any = None) -> tuple[ServedModel, ...]:
    """The server's ``/v1/models``; ``RemoteError`` (one line) when it cannot be had."""
    own = client is None
    client = client or make_client(spec)
    try:
        page = client.models.list(timeout=_openai().Timeout(spec.answer_timeout_s, connect=spec.connect_timeout_s))
        listed = tuple(_served(entry) for entry in page.data)
    except Exception as exc:  # noqa: BLE001 (every failure, typed or not, becomes one line)
        raise RemoteError(describe(exc, spec, read_s=spec.answer_timeout_s)) from None
    finally:
        if own:
            client.close()
    if not listed:
        raise RemoteError(f"{spec.host} lists no model at {spec.base_url}/models")
    return listed


def resolve(spec: RemoteSpec, listed: tuple[ServedModel, ...]) -> ServedModel:
    """The listed model ``spec.model`` names (an alias takes the only one); ``RemoteModelNotFoundError`` otherwise."""
    for served in listed:
        if served.id == spec.model:
            return served
    names = ", ".join(repr(m.id) for m in listed[:8]) + (f" and {len(listed) - 8} more" if len(listed) > 8 else "")
    if spec.model in ALIASES:
        if len(listed) == 1:
            return listed[0]
        raise RemoteModelNotFoundError(f"{spec.host} serves several models: choose one of {names}")
    raise RemoteModelNotFoundError(f"{spec.host} does not serve {spec.model!r}: it serves {names}")


def connect(spec: RemoteSpec, cancel: threading.Event | None = None) -> RemoteModel:
    """List the server's models and take ``spec.model``: the remote counterpart of ``load_model``.

    The listing runs on a thread of its own; this waits for it and returns as soon as ``cancel`` is set
    (``ConnectCancelledError``), leaving the listing to end by its timeouts and close its client."""
    client = make_client(spec)
    done, lock = threading.Event(), threading.Lock()
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            result: Any = list_models(spec, client)
        except BaseException as exc:  # noqa: BLE001 (handed to the waiting thread)
            result = exc
        with lock:
            if outcome.get("abandoned"):
                client.close()
                return
            outcome["result"] = result
        done.set()

    threading.Thread(target=work, name="miaohui-remote-connect", daemon=True).start()
    while not done.wait(CANCEL_POLL_S):
        if cancel is not None and cancel.is_set():
            with lock:
                if "result" not in outcome:
                    outcome["abandoned"] = True
                    raise ConnectCancelledError(f"connecting to {spec.host} was cancelled")
    try:
        result = outcome["result"]
        if isinstance(result, BaseException):
            raise result
        if cancel is not None and cancel.is_set():
            raise ConnectCancelledError(f"connecting to {spec.host} was cancelled")
        served = resolve(spec, result)
    except BaseException:
        client.close()
        raise
    remote = RemoteModel(spec, served, result)
    remote._client = client
    return remote


# -- failures as one line ------------------------------------------------------------------------------------
def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen and len(seen) < 10:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _server_message(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        body = inner.get("message") if isinstance(inner, dict) else inner
        body = body if isinstance(body, str) else body and str(body)
    if not body:
        response = getattr(exc, "response", None)
        try:
            body = response.text if response is not None else ""
        except Exception:  # noqa: BLE001 (a streamed body that cannot be read any more)
            body = ""
    return one_line(body or getattr(exc, "message", "") or "no message", max_chars=MAX_MESSAGE_CHARS)


def describe(exc: BaseException, spec: RemoteSpec, read_s: float | None = None) -> str:
    """One line a user can act on for a failure talking to ``spec``'s server (its key never appears); ``read_s``:
    the read timeout the request had, when not the spec's for replies."""
    openai = _openai()
    host = spec.host
    chain = _chain(exc)
    for cause in chain:  # ours, raised under openai's wrapping (the response hook), or the bytes' own failure
        typed = cause if isinstance(cause, RemoteError) else malformed(cause, host)
        if typed is not None:
            return str(typed)
    if isinstance(exc, openai.APIStatusError):
        status, message = exc.status_code, _server_message(exc)
        if status == 401:
            return f"{host} refused the API key (HTTP 401: {message})"
        if status == 403:
            return f"{host} denied access (HTTP 403: {message})"
        if status == 404:
            return f"{host} has no such model or route (HTTP 404: {message})"
        if status == 429:
            retry = exc.response.headers.get("retry-after")
            return f"{host} is busy (HTTP 429: {message})" + (f"; retry in {retry} s" if retry else "; retry later")
        if status >= 500:
            return f"{host} failed (HTTP {status}: {message})"
        return f"{host} refused the request (HTTP {status}: {message})"
    if isinstance(exc, openai.APITimeoutError):
        read = spec.read_timeout_s if read_s is None else read_s
        return f"{host} did not answer in time (connect {spec.connect_timeout_s:g} s, read {read:g} s)"
    for cause in chain:
        if isinstance(cause, ssl.SSLCertVerificationError):
            return f"TLS with {host} failed: its certificate could not be verified ({one_line(cause.verify_message)})"
        if isinstance(cause, ssl.SSLError):
            return f"TLS with {host} failed: {one_line(cause.reason or cause, max_chars=MAX_MESSAGE_CHARS)}"
        if isinstance(cause, ConnectionRefusedError):
            return f"cannot connect to {spec.base_url}: connection refused (is the server running?)"
        if isinstance(cause, socket.gaierror):
            name = urlsplit(spec.base_url).hostname
            return f"cannot connect to {spec.base_url}: the host name {name!r} does not resolve"
        if isinstance(cause, (ConnectionResetError, BrokenPipeError)):
            return f"the connection to {host} was cut ({type(cause).__name__})"
    names = " ".join(type(cause).__name__ for cause in chain)
    if "RemoteProtocolError" in names or "ReadError" in names or "IncompleteRead" in names:
        return f"the connection to {host} was cut: {one_line(chain[-1], max_chars=MAX_MESSAGE_CHARS)}"
    if isinstance(exc, openai.APIConnectionError):
        return f"cannot connect to {spec.base_url}: {one_line(chain[-1], name_type=True, max_chars=MAX_MESSAGE_CHARS)}"
    if isinstance(exc, openai.APIError):  # an error event in the stream, or a body that is not what the API says
        return f"{host} reported an error: {one_line(getattr(exc, 'message', exc), max_chars=MAX_MESSAGE_CHARS)}"
    return f"talking to {host} failed: {one_line(exc, name_type=True, max_chars=MAX_MESSAGE_CHARS)}"
