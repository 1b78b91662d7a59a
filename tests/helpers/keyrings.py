"""Keyrings for the tests of API keys: none at all, or a real one whose file lives in the test's folder.

``no_keyring`` (a fixture) sets keyring's own ``fail`` backend, so no test reads or writes whatever keyring the
machine running it has (a developer's keychain, or keyrings.alt's file in their home folder), and restores the
backend after. ``file_keyring(folder)`` sets keyrings.alt's plaintext file keyring with its file under ``folder``
(restored by ``no_keyring``, which a test using it also takes); ``memory_keyring()`` a recommended-priority
keyring kept in memory. Owns nothing else.
"""

from __future__ import annotations

from pathlib import Path

import keyring
import pytest
from keyring.backend import KeyringBackend
from keyring.backends import fail
from keyrings.alt.file import PlaintextKeyring


@pytest.fixture
def no_keyring():
    before = keyring.get_keyring()
    keyring.set_keyring(fail.Keyring())
    yield
    keyring.set_keyring(before)


def file_keyring(folder: Path) -> PlaintextKeyring:
    """keyrings.alt's plaintext file keyring, its file in ``folder``, made the keyring package's choice."""
    backend = PlaintextKeyring()
    backend.file_path = str(folder / "keyring" / "keyring_pass.cfg")
    keyring.set_keyring(backend)
    return backend


class MemoryKeyring(KeyringBackend):
    """A keyring as an OS keychain is to the ``keyring`` package (priority above 1: a recommended one), its
    passwords in this object's memory: for tests of what must go only to a system keyring (the Hub token)."""

    priority = 5  # type: ignore[assignment]

    def __init__(self) -> None:
        super().__init__()
        self.passwords: dict[tuple[str, str], str] = {}

    def get_password(self, service: str, username: str) -> str | None:
        return self.passwords.get((service, username))

    def set_password(self, service: str, username: str, password: str) -> None:
        self.passwords[(service, username)] = password

    def delete_password(self, service: str, username: str) -> None:
        self.passwords.pop((service, username), None)


def memory_keyring() -> MemoryKeyring:
    """A ``MemoryKeyring`` made the keyring package's choice (restored by ``no_keyring``, which a test also takes)."""
    backend = MemoryKeyring()
    keyring.set_keyring(backend)
    return backend
