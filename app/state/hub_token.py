"""The Hugging Face token the Models window sends for gated models: kept in the system keyring, never on disk in
the clear.

Gated models (Llama 3.2, Gemma 3) serve their files only to an account that accepted their licence, identified
by a token. ``HubToken`` keeps one token per Hub endpoint (the keyring's user name is the endpoint URL, under the
service ``Miaohui Hugging Face``), so a token entered for huggingface.co is never handed to another endpoint that
``HF_ENDPOINT`` or a test names; ``engine.library.access`` then sends it to that endpoint's own requests only.

Unlike a server's API key (``app.state.api_keys``), there is no settings-file fallback and no file keyring: only a
keyring the ``keyring`` package recommends (priority 1 and up: an OS keychain, Secret Service, KWallet, the
Windows credential locker) stores it. Without one the token is held in memory until Miaohui closes, and the
window says so. A keyring that fails is reported as one line without the token in it. Nothing here logs the
token. Owns no widget (``app.library.token_row`` asks for it).
"""

from __future__ import annotations

import logging
from typing import Any

from PySide6.QtCore import QCoreApplication

from app.state.api_keys import system_keyring
from engine.fmt import one_line

log = logging.getLogger(__name__)

SERVICE = "Miaohui Hugging Face"  # the keyring's service name; the user name is the Hub endpoint's URL


class HubToken:
    """The Hugging Face token of each Hub endpoint. ``backend``: the keyring to use (None: none; default: the
    system's when the ``keyring`` package recommends it, looked up on first use)."""

    _DETECT: Any = object()

    def __init__(self, backend: Any = _DETECT) -> None:
        self._backend = backend
        self._session: dict[str, str] = {}  # endpoint -> token, this run only (no keyring, or it failed)

    @property
    def backend(self) -> Any | None:
        if self._backend is HubToken._DETECT:
            backend = system_keyring()
            # A file keyring (keyrings.alt) writes the token in the clear or behind a guessable key: not for this.
            self._backend = backend if backend is not None and backend.priority >= 1 else None
        return self._backend

    def load(self, endpoint: str) -> str | None:
        """The token for ``endpoint`` (this run's, else the keyring's), or None."""
        if endpoint in self._session:
            return self._session[endpoint]
        backend = self.backend
        if backend is None:
            return None
        try:
            return backend.get_password(SERVICE, endpoint) or None
        except Exception as exc:  # noqa: BLE001 (a locked or vanished keyring: no token, the user can enter it)
            log.warning("could not read the keyring for %s: %s", endpoint, one_line(exc, name_type=True))
            return None

    def store(self, endpoint: str, token: str) -> str | None:
        """Keep ``token`` for ``endpoint``: in the keyring, else for this run only. Returns a one-line note when it
        is not kept between runs, or None."""
        token = token.strip()
        backend = self.backend
        if backend is not None:
            try:
                backend.set_password(SERVICE, endpoint, token)
                self._session.pop(endpoint, None)
                return None
            except Exception as exc:  # noqa: BLE001
                self._session[endpoint] = token
                return QCoreApplication.translate(
                    "HubToken", "The token could not be saved in the keyring ({error}); it is kept until Miaohui "
                    "closes.").format(error=one_line(exc, name_type=True))
        self._session[endpoint] = token
        return QCoreApplication.translate("HubToken", "No system keyring: the token is kept until Miaohui closes, "
                                                      "never written to a file.")

    def forget(self, endpoint: str) -> None:
        """Remove the token of ``endpoint`` (this run's and the keyring's)."""
        self._session.pop(endpoint, None)
        backend = self.backend
        if backend is None:
            return
        try:
            if backend.get_password(SERVICE, endpoint) is not None:
                backend.delete_password(SERVICE, endpoint)
        except Exception as exc:  # noqa: BLE001 (nothing to delete, or a locked keyring: nothing more to do)
            log.warning("could not remove a token from the keyring: %s", one_line(exc, name_type=True))
