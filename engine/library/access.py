"""The downloads switch: the one way anything in ``engine.library`` reaches the network.

Offline is the default. ``engine/_offline.py`` sets ``HF_HUB_OFFLINE=1`` before huggingface_hub is imported, so
huggingface_hub reads it into ``constants.HF_HUB_OFFLINE`` and its HTTP client's request hook refuses every
request (it asks ``constants.is_offline_mode()`` per request). ``online(allow_downloads, endpoint)`` is the way
through:

- ``allow_downloads=False`` (what every caller passes unless the user turned downloads on: the CLI's
  ``--allow-downloads``, the app's setting) raises ``DownloadsDisabledError`` with one line saying how to allow
  them, before any request is built: no socket is opened.
- ``allow_downloads=True`` lifts huggingface_hub's offline mode for the requests made inside the ``with`` block,
  in this thread (or asyncio task) only. A ``ContextVar`` marks the block, and a wrapper installed once around
  ``constants.is_offline_mode`` answers "online" only while it is set. Everything else stays offline: other
  threads (a model load, the chat), and huggingface_hub's own side lookups that read the ``HF_HUB_OFFLINE``
  constant directly (its user-agent code would otherwise fetch an agent registry from huggingface.co whatever
  endpoint was chosen). Flipping the constant or the environment would have opened all of those at once.

The endpoint is the ``endpoint`` argument, else ``HF_ENDPOINT`` (read on every call), else huggingface.co; tests
point it at a local fake Hub. A Hugging Face token (for gated models: their owners grant access to an account)
is sent only when the caller gives one to ``online(..., token=)``, and then only to that block's endpoint:
``auth_token(url)`` hands it to a request whose URL has the endpoint's scheme, host and port, and answers
``False`` (huggingface_hub's "send none") for any other, so a listing or redirect that names another host never
gets it (huggingface_hub's HTTP client also drops ``Authorization`` on a redirect to another origin). Outside a
block with a token every call sends none, as before.

A Hub that cannot be reached at all fails at once, as ``HubUnreachableError`` (one line: "cannot reach Hugging
Face: no network or the name does not resolve"). huggingface_hub retries a failed connection five times with
back-off (1 + 2 + 4 + 8 + 8 s: a search without network sat 25 s before it said ``ConnectError``), and its list
calls connect with no timeout at all; inside ``online`` its shared client (``set_client_factory``, its documented
hook) bounds connecting by ``HF_HUB_ETAG_TIMEOUT`` (huggingface_hub's metadata timeout, 10 s unless set) and
ends the request on the first failed connection. Errors once connected (a reset, a 503) are retried as before.

Owns the switch, the endpoint and turning huggingface_hub / httpx failures into one-line ``EngineError``s
(``hub_errors``). Does not own what is asked of the Hub (``engine.library.hub``) or downloading
(``engine.library.download``).
"""

from __future__ import annotations

import contextlib
import enum
import json
import os
import re
import socket
from contextvars import ContextVar
from typing import Any, Iterator
from urllib.parse import urlsplit

import httpx2  # huggingface_hub's HTTP client
from huggingface_hub import constants, get_session, set_client_factory
from huggingface_hub import errors as hf

from engine.errors import (BadInputError, DownloadsDisabledError, EngineError, GatedModelError, HubError,
                           ModelNotFoundError, printable)
from engine.fmt import one_line

DEFAULT_ENDPOINT = "https://huggingface.co"
HOW_TO_ALLOW = ("downloads from Hugging Face are off: pass --allow-downloads (in the app: Chat → Models… → "
                "Allow downloads from Hugging Face)")
_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9_.-]{1,96}$")

_ONLINE: ContextVar[str | None] = ContextVar("miaohui_hub_online", default=None)  # the endpoint, inside online()
_TOKEN: ContextVar[str | None] = ContextVar("miaohui_hub_token", default=None)  # the token given to online()


class Unreachable(enum.Enum):
    """Why the Hub's host could not be reached; the value is the line's end."""

    NO_NAME = "no network or the name does not resolve"
    REFUSED = "nothing accepts connections there (connection refused)"
    TIMEOUT = "no answer to connecting (no network, or a firewall drops it)"
    OTHER = "no network, or the host cannot be reached"


class HubUnreachableError(HubError):
    """The Hub's host could not be connected to at all (``reason``); raised on the first failed connection."""

    def __init__(self, endpoint: str, reason: Unreachable) -> None:
        self.endpoint, self.reason = endpoint, reason
        where = "Hugging Face" if endpoint == DEFAULT_ENDPOINT else endpoint
        super().__init__(f"cannot reach {where}: {reason.value}")


def _reason(exc: httpx2.TransportError) -> Unreachable:
    if isinstance(exc, httpx2.ConnectTimeout):
        return Unreachable.TIMEOUT
    cause: BaseException | None = exc
    while cause is not None:  # httpx wraps the socket's error; the resolver's and the refusal are distinct
        if isinstance(cause, socket.gaierror):
            return Unreachable.NO_NAME
        if isinstance(cause, ConnectionRefusedError):
            return Unreachable.REFUSED
        if isinstance(cause, socket.timeout):
            return Unreachable.TIMEOUT
        cause = cause.__cause__ or cause.__context__
    return Unreachable.OTHER


class _FailFastClient(httpx2.Client):
    """huggingface_hub's client, except that inside ``online`` connecting is bounded and a connection that cannot
    be made ends the request (as ``HubUnreachableError``, which huggingface_hub's back-off does not retry)."""

    def send(self, request: httpx2.Request, **kwargs: Any) -> httpx2.Response:
        endpoint = _ONLINE.get()
        if endpoint is None:
            return super().send(request, **kwargs)
        timeout = dict(request.extensions.get("timeout") or {})
        bound = float(constants.HF_HUB_ETAG_TIMEOUT)
        timeout["connect"] = bound if timeout.get("connect") is None else min(timeout["connect"], bound)
        request.extensions = {**request.extensions, "timeout": timeout}
        try:
            return super().send(request, **kwargs)
        except (httpx2.ConnectError, httpx2.ConnectTimeout) as exc:
            raise HubUnreachableError(endpoint, _reason(exc)) from None


def _install_client() -> None:
    """Make huggingface_hub's shared client a ``_FailFastClient`` with the settings of the one it made (its
    request hooks included), once."""
    current = get_session()
    if isinstance(current, _FailFastClient):
        return
    settings = {"event_hooks": current.event_hooks, "follow_redirects": current.follow_redirects,
                "timeout": current.timeout, "trust_env": current.trust_env}
    set_client_factory(lambda: _FailFastClient(**settings))


def check_repo_id(repo_id: str) -> str:
    """``repo_id`` if it reads as ``owner/name``; else ``BadInputError``."""
    if not isinstance(repo_id, str) or not _REPO_ID.match(repo_id) or ".." in repo_id:
        raise BadInputError(f"{printable(repo_id)!s} is not a Hub repo id: give owner/name, e.g. "
                            "HuggingFaceTB/SmolLM2-360M-Instruct")
    return repo_id


def resolve_endpoint(endpoint: str | None = None) -> str:
    """The Hub's base URL: ``endpoint``, else ``HF_ENDPOINT``, else huggingface.co; a bad one is ``BadInputError``."""
    url = (endpoint or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        raise BadInputError(f"endpoint {printable(url)} is not an http(s) URL such as {DEFAULT_ENDPOINT}")
    return url


def _install_gate() -> None:
    """Wrap ``huggingface_hub.constants.is_offline_mode`` once so that ``online`` blocks read as online."""
    current = constants.is_offline_mode
    if getattr(current, "_miaohui_gate", False):
        return

    def is_offline_mode() -> bool:
        return current() and not _ONLINE.get()

    is_offline_mode._miaohui_gate = True  # type: ignore[attr-defined]
    is_offline_mode.__doc__ = current.__doc__
    constants.is_offline_mode = is_offline_mode


@contextlib.contextmanager
def online(allow_downloads: bool, endpoint: str | None = None, token: str | None = None) -> Iterator[str]:
    """Let huggingface_hub reach ``endpoint`` inside the block, in this thread; yields the endpoint URL.

    ``allow_downloads`` False raises ``DownloadsDisabledError`` (one line: how to allow them) and nothing else
    happens. ``token``: a Hugging Face token the block's requests to ``endpoint`` carry (``auth_token``); None
    sends none. Failures inside are translated by ``hub_errors``.
    """
    if allow_downloads is not True:
        raise DownloadsDisabledError(HOW_TO_ALLOW)
    url = resolve_endpoint(endpoint)
    _install_gate()
    _install_client()
    marks = _ONLINE.set(url), _TOKEN.set(token or None)
    try:
        with hub_errors(url, bool(token)):
            yield url
    finally:
        _TOKEN.reset(marks[1])
        _ONLINE.reset(marks[0])


def _origin(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.scheme.lower(), parts.netloc.lower()


def auth_token(url: str) -> str | bool:
    """What a request to ``url`` passes as huggingface_hub's ``token``: the ``online`` block's token when ``url`` is
    on that block's endpoint, else ``False`` (send none; not None, which would read a token from the disk)."""
    endpoint, token = _ONLINE.get(), _TOKEN.get()
    if not token or endpoint is None or _origin(url) != _origin(endpoint):
        return False
    return token


def _status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    return getattr(response, "status_code", None)


@contextlib.contextmanager
def hub_errors(endpoint: str, with_token: bool = False) -> Iterator[None]:
    """Turn huggingface_hub's and httpx's exceptions into one-line ``EngineError``s naming ``endpoint``
    (``with_token``: the requests carried a token, which changes what a gated model's refusal asks for)."""
    try:
        yield
    except EngineError:
        raise
    except hf.OfflineModeIsEnabled:
        raise DownloadsDisabledError(HOW_TO_ALLOW) from None
    except hf.GatedRepoError as exc:
        repo = getattr(exc, "repo_id", None) or "this repo"
        page = f"{endpoint}/{repo}" if "/" in repo else endpoint
        raise GatedModelError(
            f"{repo} is gated: the token given has no access yet; accept its licence at {page} with that account"
            if with_token else f"{repo} is gated: accept its licence at {page}, then give Miaohui a Hugging Face "
            "token of that account (in the app: Models… → Hugging Face token)") from None
    except hf.RepositoryNotFoundError as exc:
        repo = getattr(exc, "repo_id", None) or "the repo"
        raise ModelNotFoundError(f"no model {repo} on {endpoint} (or it is private)") from None
    except hf.RevisionNotFoundError:
        raise ModelNotFoundError(f"{endpoint} has no such revision of the model") from None
    except hf.RemoteEntryNotFoundError as exc:
        raise ModelNotFoundError(f"{endpoint} has no such file: {one_line(exc, max_chars=160)}") from None
    except hf.HFValidationError as exc:
        raise BadInputError(one_line(exc, max_chars=200)) from None
    except hf.HfHubHTTPError as exc:
        raise HubError(f"{endpoint} answered HTTP {_status(exc) or '?'}: {one_line(exc, max_chars=160)}") from None
    except json.JSONDecodeError as exc:  # a reply that is not the Hub's JSON (a captive portal's page)
        raise HubError(f"{endpoint} sent a reply that is not the Hub's: {one_line(exc, max_chars=160)}") from None
    except httpx2.HTTPError as exc:  # the network itself: refused, timed out, reset (httpx wraps socket errors)
        raise HubError(f"cannot reach {endpoint}: {one_line(exc, max_chars=160, name_type=True)}") from None
