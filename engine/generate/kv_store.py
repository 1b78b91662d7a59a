"""A folder of KV snapshots within a byte budget: ``KVStore``, least recently used deleted first.

Each file is one snapshot (``engine.generate.kv_snapshot``'s format) under a key: the window keys a conversation's
cache by its conversation id (``<data dir>/kv/<id>.kv``), ``engine serve --kv-store DIR`` by a hash of the token
ids it holds. ``save`` writes atomically, then deletes the least recently used files (by modification time, which
``load`` refreshes) until the folder fits ``budget_bytes``; the file just written is kept even alone over budget
only if it fits by itself, else it is deleted too (a budget is a promise about the disk). ``load`` returns the
snapshot or None when there is none; a file that is stale or damaged is deleted and its ``KVSnapshotError`` raised,
so the caller can say so once and recompute. ``best(ids)`` finds the file sharing the longest token prefix with
``ids``, from the files' headers (read once per file version - inode, size, mtime - never trusted for more than
choosing: the load checks everything). ``used_bytes`` and ``clear`` are what Settings shows and does.

Only the store's own files count (issue 40): each is sealed with the folder's key (``kv_header``: HMAC-SHA256, a
random key in ``mac.key``, 0600, the folder 0700, every file 0600). A ``.kv`` file the key does not verify - copied
from another machine, written by another process or user, hostile - is skipped with one log line per version of it,
never restored, never counted in ``used_bytes`` and never deleted by ``evict``/``clear``/a failed load: the store
deletes only files it wrote. Nothing a file holds can fail a request: every way it can be unreadable is a
``KVSnapshotError``.

Imports no torch until a snapshot is read or written: the window's Settings show the folder's size and clear it
without loading it. Plain files and a lock: safe for the threads of one process; two processes sharing a folder at
most redo work (a file replaced or deleted under a reader is a damaged or missing snapshot, discarded). Owns the
folder's policy; not the format (``kv_snapshot``) or when a snapshot is taken (the session's owner).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from engine.generate.context import common_prefix
from engine.generate.kv_header import KEY_NAME, ForeignKVError, KVSnapshotError, load_key, read_header

if TYPE_CHECKING:  # imported where used: the folder's size and Clear (the window's Settings) need no torch
    from engine.generate.kv_snapshot import KVIdentity, KVSnapshot

log = logging.getLogger(__name__)

SUFFIX = ".kv"
DEFAULT_BUDGET_BYTES = 2 << 30  # 2 GiB: about 90,000 tokens of the default model's bf16 cache
_SAFE_KEY = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def key_for_ids(ids: Sequence[int], scope: str = "") -> str:
    """A file key for a cache that holds ``ids`` for ``scope`` (the server's: it has no conversation ids)."""
    return "p-" + hashlib.sha256((scope + "|" if scope else "").encode() + ",".join(map(str, ids)).encode()
                                 ).hexdigest()[:32]


@dataclass(frozen=True)
class StoredEntry:
    """One file of the folder: its key, size and last use (mtime, seconds)."""

    key: str
    path: Path
    bytes: int
    used_at: float


class KVStore:
    """Snapshots in ``folder`` (created on first save), at most ``budget_bytes`` of them on disk."""

    def __init__(self, folder: Path, budget_bytes: int = DEFAULT_BUDGET_BYTES, key_file: Path | None = None) -> None:
        self.folder = Path(folder)
        self.budget_bytes = max(0, int(budget_bytes))
        self.key_file = Path(key_file) if key_file is not None else self.folder / KEY_NAME
        self._key: bytes | None = None  # read (or made, by the first save) once
        self._lock = threading.RLock()
        # path -> ((inode, size, mtime_ns), verified header or None when the file is not usable): a file is read and
        # judged once per version, not once per request.
        self._headers: dict[Path, tuple[tuple[int, int, int], dict | None]] = {}

    def _mac_key(self, create: bool) -> bytes | None:
        if self._key is None:
            if create:
                self._make_folder()
            self._key = load_key(self.key_file, create)
        return self._key

    def _make_folder(self) -> None:
        """The folder, private to the user: it holds conversations' caches."""
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        if os.name != "nt" and self.folder.stat().st_mode & 0o077:
            os.chmod(self.folder, 0o700)

    def path_for(self, key: str) -> Path:
        """The file of ``key``; a key that is not a plain name is hashed (no path tricks)."""
        name = key if _SAFE_KEY.match(key) else "h-" + hashlib.sha256(key.encode()).hexdigest()[:32]
        return self.folder / f"{name}{SUFFIX}"

    # -- writing ----------------------------------------------------------------------------------
    def save(self, key: str, snapshot: KVSnapshot, identity: KVIdentity, scope: str = "") -> Path | None:
        """Write ``snapshot`` under ``key``, then keep the folder within budget; the path, or None when the snapshot
        alone is over the budget (nothing kept). ``OSError`` when the folder cannot be written."""
        from engine.generate.kv_snapshot import save_snapshot

        with self._lock:
            self._make_folder()
            path = save_snapshot(self.path_for(key), snapshot, identity, self._mac_key(create=True), scope)
            self.evict()
            return path if path.exists() else None

    def evict(self, budget_bytes: int | None = None) -> int:
        """Delete the least recently used files until the folder holds at most the budget; bytes freed."""
        budget = self.budget_bytes if budget_bytes is None else budget_bytes
        with self._lock:
            entries = sorted(self.entries(), key=lambda e: e.used_at)
            total = sum(e.bytes for e in entries)
            freed = 0
            for entry in entries:
                if total <= budget:
                    break
                if self._delete(entry.path):
                    total -= entry.bytes
                    freed += entry.bytes
            return freed

    def discard(self, key: str) -> None:
        with self._lock:
            path = self.path_for(key)
            if self._header(path) is not None:  # only the store's own file
                self._delete(path)

    def clear(self) -> int:
        """Delete every snapshot; bytes freed."""
        return self.evict(0)

    def _delete(self, path: Path) -> bool:
        self._headers.pop(path, None)
        try:
            path.unlink()
            return True
        except FileNotFoundError:
            return True
        except OSError as exc:
            log.warning("cannot delete KV snapshot %s: %s", path.name, exc)
            return False

    # -- reading ----------------------------------------------------------------------------------
    def entries(self) -> list[StoredEntry]:
        """The store's own snapshot files (their key verifies them), most recently used last."""
        found = []
        try:
            paths = list(self.folder.glob(f"*{SUFFIX}"))
        except OSError:
            return []
        for path in paths:
            try:
                stat = path.stat()
            except OSError:
                continue
            if self._header(path) is None:
                continue
            found.append(StoredEntry(path.name[:-len(SUFFIX)], path, stat.st_size, stat.st_mtime))
        return sorted(found, key=lambda e: e.used_at)

    def used_bytes(self) -> int:
        return sum(e.bytes for e in self.entries())

    def load(self, key: str, identity: KVIdentity) -> KVSnapshot | None:
        """The snapshot under ``key`` (marked used), None when there is none; a stale or damaged one is deleted and
        its ``KVSnapshotError`` raised."""
        return self._load(self.path_for(key), identity)

    def _load(self, path: Path, identity: KVIdentity) -> KVSnapshot | None:
        from engine.generate.kv_snapshot import load_snapshot

        with self._lock:
            if not path.exists():
                return None
            key = self._mac_key(create=False)
            try:
                if key is None:
                    raise ForeignKVError(f"{path.name}: KV snapshot not written by this store (it has no key yet)")
                snapshot = load_snapshot(path, identity, key)
            except ForeignKVError:
                raise  # not the store's: left where it is
            except KVSnapshotError:
                self._delete(path)
                raise
            try:
                os.utime(path)  # last use: what eviction orders by
                known = self._headers.get(path)
                if known is not None:  # the same file: no need to read its header again
                    self._headers[path] = (self._version(path.stat()), known[1])
            except OSError:
                pass
            return snapshot

    def header(self, key: str) -> dict | None:
        """The verified header (ids, identity, runner) of the store's file under ``key``; None when there is none of
        the store's."""
        with self._lock:
            return self._header(self.path_for(key))

    def best(self, ids: Sequence[int], identity: KVIdentity, scope: str = "") -> tuple[str, int]:
        """(key, tokens) of the file of ``identity``'s model and ``scope`` (``engine.serve.prefix``) sharing the
        longest token prefix with ``ids``; ("", 0) when none shares any."""
        from engine.generate.kv_snapshot import asdict_identity

        wanted = asdict_identity(identity)
        best_key, best_len = "", 0
        with self._lock:
            for entry in self.entries():
                header = self._header(entry.path)
                if header is None or header.get("identity") != wanted or header.get("scope", "") != scope:
                    continue
                common = common_prefix(header["ids"], ids)
                if common > best_len:
                    best_key, best_len = entry.key, common
        return best_key, best_len

    @staticmethod
    def _version(stat: os.stat_result) -> tuple[int, int, int]:
        return stat.st_ino, stat.st_size, stat.st_mtime_ns

    def _header(self, path: Path) -> dict | None:
        """``path``'s verified header, None when it is not the store's or cannot be read (said once per version)."""
        try:
            stat = path.stat()
        except OSError:
            return None
        version = self._version(stat)
        known = self._headers.get(path)
        if known is not None and known[0] == version:
            return known[1]
        key = self._mac_key(create=False)
        header: dict | None = None
        if key is None:
            log.info("skipped KV snapshot %s: this store has no key yet, so it wrote no file", path.name)
        else:
            try:
                header = read_header(path, key)
            except KVSnapshotError as exc:
                log.warning("skipped KV snapshot: %s", exc)
        self._headers[path] = (version, header)
        return header
