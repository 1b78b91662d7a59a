"""Conversations' KV caches kept on disk between runs: ``KVPersistence``, used by ``engine.core.sessions.SessionCache``.

A conversation's session is saved to ``<data dir>/kv/conversation-<id>.kv`` (``engine.paths.state_root``)
(``engine.generate.kv_store``: checksum, model fingerprint, precision and the exact token ids in the file) when the
worker drops it from memory - evicted for a more recent one, a new model loaded, the window closing - so reopening
it later, after a restart too, reads the file instead of computing the whole conversation again. A conversation kept
in memory (the last few replied to) is written too when the user switches away from it, so a crash or a kill loses
only the one open then: on the engine thread once it is idle (``Bridge.keep_on_disk``), one conversation at a time,
so a reply asked for during a write waits for that write only; a file that already holds the same ids for the same
model is not written again. The read happens inside the next reply's timing (``ChatSession.reopen_with``): the TTFT
it reports includes it. A file of another model or precision, or a damaged one, is deleted and that reply computes
its prompt as before; it is logged, never shown as an error (at most one log line per file: the file is gone after
it). The folder stays within ``DEFAULT_BUDGET_BYTES``, least recently used deleted first; Settings shows its size
and clears it (``app.widgets.kv_disk_row``).

Runs on the engine thread (the sessions are its), except ``save_all`` at exit, called once that thread has
stopped. Imports no torch itself (the engine does, once a model is loaded). Owns the naming and the policy of when;
not the format or the folder's bookkeeping (``engine.generate.kv_snapshot``, ``engine.generate.kv_store``).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Callable

from engine import paths
from engine.errors import EngineError
from engine.fmt import one_line
from engine.generate.kv_store import KVStore

log = logging.getLogger(__name__)

DEFAULT_BUDGET_BYTES = 2 << 30  # 2 GiB: ~90,000 tokens of the default model's bf16 cache


def kv_folder() -> Path:
    """Where the conversations' KV caches live: ``engine.paths.state_root()``'s ``kv`` (read on every call: the data
    folder follows the environment, a scripted run keeps its files in its scratch folder)."""
    return paths.state_root() / "kv"


def key_for(conversation_id: int) -> str:
    return f"conversation-{int(conversation_id)}"


def _holds(store: KVStore, key: str, snapshot: Any, identity: Any) -> bool:
    """Whether the store's file under ``key`` was written for exactly ``snapshot``'s ids, runner and ``identity`` (its
    verified header only: whether its rows are intact is checked when it is read, and a damaged one is discarded
    then)."""
    from engine.generate.kv_snapshot import asdict_identity

    header = store.header(key)
    return (header is not None and header.get("ids") == list(snapshot.ids) and header.get("runner") == snapshot.runner
            and header.get("identity") == asdict_identity(identity))


class KVPersistence:
    """Saves and reopens conversations' caches in ``folder`` (default ``kv_folder()``) within ``budget_bytes``."""

    def __init__(self, folder: Path | None = None, budget_bytes: int = DEFAULT_BUDGET_BYTES) -> None:
        self._folder = folder
        self.budget_bytes = budget_bytes
        self.discarded: list[str] = []  # one line per file deleted as stale or damaged (the log says it too)
        self.skipped = 0  # saves not written: the file held the same ids already

    def store(self) -> KVStore:
        return KVStore(self._folder or kv_folder(), self.budget_bytes)

    def save(self, conversation_id: int, session: Any) -> bool:
        """Write ``session``'s cache as the conversation's, unless its file already holds these very ids for this
        model (then only marked used); False when there is none or it cannot be written."""
        take = getattr(session, "snapshot", None)
        snapshot = take() if take is not None else None
        if snapshot is None:
            return False
        store, key = self.store(), key_for(conversation_id)
        try:
            identity = session.kv_identity()
            if _holds(store, key, snapshot, identity):
                os.utime(store.path_for(key))  # used now: the folder's budget deletes the least recently used
                self.skipped += 1
                return True
            return store.save(key, snapshot, identity) is not None
        except (OSError, ValueError, EngineError) as exc:
            log.warning("could not save conversation %s's KV cache: %s", conversation_id, one_line(exc))
            return False

    def reopen(self, conversation_id: int, session: Any) -> bool:
        """If the conversation has a saved cache, ``session``'s next reply starts from it (read inside its TTFT);
        whether it has one (a damaged or stale one is found out at that reply)."""
        store = self.store()
        key = key_for(conversation_id)
        if not hasattr(session, "reopen_with") or not store.path_for(key).exists():
            return False
        session.reopen_with(self._loader(store, key, session))
        return True

    def _loader(self, store: KVStore, key: str, session: Any) -> Callable[[], Any]:
        def load() -> Any:
            try:
                return store.load(key, session.kv_identity())
            except EngineError as exc:  # stale or damaged: deleted by the store, recomputed by the session
                log.warning("discarded a saved KV cache: %s", one_line(exc))
                self.discarded.append(one_line(exc))
            except OSError as exc:
                log.warning("could not read a saved KV cache: %s", one_line(exc))
            return None
        return load

    def forget(self, conversation_id: int) -> None:
        """The conversation is gone: so is its file."""
        self.store().discard(key_for(conversation_id))
