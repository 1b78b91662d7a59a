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
point it at a local fake Hub. No token is ever sent (every call passes ``token=False``).

Owns the switch, the endpoint and turning huggingface_hub / httpx failures into one-line ``EngineError``s
(``hub_errors``). Does not own what is asked of the Hub (``engine.library.hub``) or downloading
(``engine.library.download``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from contextvars import ContextVar
from typing import Iterator
from urllib.parse import urlsplit

import httpx2  # huggingface_hub's HTTP client
from huggingface_hub import constants
from huggingface_hub import errors as hf

from engine.errors import (BadInputError, DownloadsDisabledError, EngineError, HubError, ModelNotFoundError,
                           printable)
from engine.fmt import one_line

DEFAULT_ENDPOINT = "https://huggingface.co"
HOW_TO_ALLOW = ("downloads from Hugging Face are off: pass --allow-downloads (in the app: Settings → "
                "Allow downloads from Hugging Face)")
_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9_.-]{1,96}$")

_ONLINE: ContextVar[bool] = ContextVar("miaohui_hub_online", default=False)


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
def online(allow_downloads: bool, endpoint: str | None = None) -> Iterator[str]:
    """Let huggingface_hub reach ``endpoint`` inside the block, in this thread; yields the endpoint URL.

    ``allow_downloads`` False raises ``DownloadsDisabledError`` (one line: how to allow them) and nothing else
    happens. Failures inside are translated by ``hub_errors``.
    """
    if allow_downloads is not True:
        raise DownloadsDisabledError(HOW_TO_ALLOW)
    url = resolve_endpoint(endpoint)
    _install_gate()
    token = _ONLINE.set(True)
    try:
        with hub_errors(url):
            yield url
    finally:
        _ONLINE.reset(token)


def _status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    return getattr(response, "status_code", None)


@contextlib.contextmanager
def hub_errors(endpoint: str) -> Iterator[None]:
    """Turn huggingface_hub's and httpx's exceptions into one-line ``EngineError``s naming ``endpoint``."""
    try:
        yield
    except EngineError:
        raise
    except hf.OfflineModeIsEnabled:
        raise DownloadsDisabledError(HOW_TO_ALLOW) from None
    except hf.GatedRepoError as exc:
        repo = getattr(exc, "repo_id", None) or "this repo"
        raise HubError(f"{repo} is gated on {endpoint}: its owners must grant access first, and Miaohui downloads "
                       "only open models") from None
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
