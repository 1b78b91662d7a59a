"""Servers' API keys remembered between runs: in the system keyring where there is one, else — only when the user
asks, with a warning in the dialog — in the settings file, unencrypted.

``system_keyring()`` is the backend the ``keyring`` package chose when it is usable: one with a priority above 0
that is not keyring's ``fail`` (no backend found) or ``null`` (keyrings disabled) backend. Its priority says more:
keyring itself recommends only backends of priority 1 and up (``keyring.core.recommended``: the OS keychains,
Secret Service, KWallet, the Windows credential locker); a lower one (``keyrings.alt``'s files) is used when it is
what keyring chose, and the dialog says it is not a recommended one. ``ApiKeys`` loads, stores and forgets the key
of a base URL (the keyring's user name under the service ``Miaohui``). A keyring that fails (locked, its daemon
gone) is reported as one line, never with the key in it, and never retried into the settings file behind the
user's back.

Where a key never goes: the history database, exports, logs (nothing here logs a key; ``RemoteSpec`` keeps it out
of every repr), screenshots (the dialog's field is masked). Owns no widget; ``app.window.remote_source`` decides when to
store (after a connection with the key worked) and ``app.widgets.remote_dialog`` asks the user.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QCoreApplication

from app.state.settings import Settings
from engine.fmt import one_line

log = logging.getLogger(__name__)

SERVICE = "Miaohui"  # the keyring's service name; the user name is the server's base URL


def system_keyring() -> Any | None:
    """The keyring backend to store keys with, or None when there is no usable one (or no ``keyring`` package)."""
    try:
        import keyring  # lazy: detecting the backends loads their modules, only needed once a user connects
        from keyring.backends import fail, null

        backend = keyring.get_keyring()
    except Exception as exc:  # noqa: BLE001 (a broken keyring configuration must not stop a connection)
        log.warning("no keyring: %s", one_line(exc, name_type=True))
        return None
    if isinstance(backend, (fail.Keyring, null.Keyring)) or not backend.priority > 0:
        return None
    return backend


@dataclass(frozen=True)
class KeyringInfo:
    """What the dialog tells the user about where a remembered key goes."""

    name: str | None  # the keyring backend's name; None: no keyring, a key can go only to the settings file
    recommended: bool  # keyring's own judgement (priority >= 1): an OS keychain, not a file of its own


class ApiKeys:
    """The remembered API key of each server (by base URL). ``backend``: the keyring to use (None: none; default:
    ``system_keyring()``, looked up on first use)."""

    _DETECT: Any = object()

    def __init__(self, settings: Settings, backend: Any = _DETECT) -> None:
        self._settings = settings
        self._backend = backend

    @property
    def backend(self) -> Any | None:
        if self._backend is ApiKeys._DETECT:
            self._backend = system_keyring()
        return self._backend

    def info(self) -> KeyringInfo:
        backend = self.backend
        if backend is None:
            return KeyringInfo(None, False)
        return KeyringInfo(getattr(backend, "name", type(backend).__name__), backend.priority >= 1)

    def load(self, base_url: str) -> str | None:
        """The key remembered for ``base_url`` (keyring first, then the settings file), or None."""
        backend = self.backend
        if backend is not None:
            try:
                key = backend.get_password(SERVICE, base_url)
            except Exception as exc:  # noqa: BLE001 (a locked or vanished keyring: ask for the key instead)
                log.warning("could not read the keyring for %s: %s", base_url, one_line(exc, name_type=True))
                key = None
            if key:
                return key
        return self._settings.remembered_api_key(base_url)

    def store(self, base_url: str, key: str, *, in_settings: bool = False) -> str | None:
        """Remember ``key`` for ``base_url``: in the keyring when there is one, else in the settings file only when
        ``in_settings`` (the user ticked the unencrypted option). Returns a one-line failure, or None."""
        backend = self.backend
        if backend is not None:
            try:
                backend.set_password(SERVICE, base_url, key)
            except Exception as exc:  # noqa: BLE001
                return QCoreApplication.translate(
                    "ApiKeys", "The key could not be saved in the keyring ({error}); it is kept until Miaohui "
                    "closes.").format(error=one_line(exc, name_type=True))
            self._settings.set_remembered_api_key(base_url, None)  # one place only: no stale plain copy
            return None
        if in_settings:
            self._settings.set_remembered_api_key(base_url, key)
        return None

    def forget(self, base_url: str) -> None:
        """Remove any remembered key of ``base_url`` (keyring and settings file)."""
        backend = self.backend
        if backend is not None:
            try:
                if backend.get_password(SERVICE, base_url) is not None:
                    backend.delete_password(SERVICE, base_url)
            except Exception as exc:  # noqa: BLE001 (nothing to delete, or a locked keyring: nothing more to do)
                log.warning("could not remove a key from the keyring: %s", one_line(exc, name_type=True))
        self._settings.set_remembered_api_key(base_url, None)
