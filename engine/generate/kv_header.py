"""A KV snapshot file's envelope, without torch: its prefix, its two MACs, its header, the store's key and the errors.

The file: ``MAGIC`` (8 bytes: the name and the format version), then two HMAC-SHA256 tags made with the store's key
(32 bytes each: one of the header alone, one of the whole body), then the safetensors body (``kv_snapshot``). The
header tag lets a folder's index (``KVStore.best``, eviction) tell the store's own files from any other in a few KiB
read; the body tag is checked before a snapshot is restored.

Why keyed, and why the key lives in the store's folder (``<data dir>/kv/mac.key`` for the window): an unkeyed
checksum only finds accidents. Anyone able to drop a file in the folder could recompute it over another prompt's rows
and have them restored under this prompt's ids, changing the reply. With a random key (``secrets``, 32 bytes)
created owner-only (0600, the folder 0700), a file copied from another machine, or written by another process or
user that lacks the key, fails its tag: it is never restored, never counted as the store's and never deleted by its
eviction (the store deletes only what it wrote). A key readable by others is replaced (old files then fail: they
are a cache, recomputed).

A file that fails is refused with a typed error and never parsed further: ``ForeignKVError`` (not this key's),
``DamagedKVError`` (truncated, altered, or a header no parser should trust: a JSON nesting deep enough to raise
``RecursionError`` included), ``StaleKVError`` (another format version). Owns the envelope, the key and the header;
not the tensors or the model identity (``kv_snapshot``), nor the folder's policy (``kv_store``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import secrets
import struct
from pathlib import Path
from typing import Any, BinaryIO

from engine.errors import EngineError, ErrorKind

log = logging.getLogger(__name__)

FORMAT_VERSION = 2  # 2: keyed tags (HMAC-SHA256); 1 had one unkeyed SHA-256, and is refused as stale
MAGIC = b"MIAOKV" + struct.pack("<H", FORMAT_VERSION)  # 8 bytes
TAG_BYTES = 32
PREFIX = len(MAGIC) + 2 * TAG_BYTES  # where the safetensors body starts
META_KEY = "miaohui_kv"
MAX_HEADER = 64 << 20  # a safetensors header longer than this is not ours (ids of a 1M-token context fit)
KEY_NAME = "mac.key"  # in the store's folder; not a ``.kv``: never listed, evicted or cleared
KEY_BYTES = 32


class KVSnapshotError(EngineError):
    """A KV snapshot file cannot be used; the caller discards it (the conversation is recomputed instead)."""

    kind = ErrorKind.CORRUPT


class DamagedKVError(KVSnapshotError):
    """The file is unreadable, truncated or altered (its tags or structure do not hold)."""


class ForeignKVError(DamagedKVError):
    """The file was not written with this store's key (another machine, process or user): never trusted, and never
    deleted by the store, which deletes only its own files."""


class StaleKVError(KVSnapshotError):
    """The file is intact but was written for another model, precision, KV precision, runner or format."""


def _tag(key: bytes, kind: bytes, data: bytes) -> bytes:
    # The kind is part of the message: a header tag can never pass for a body tag, nor the reverse.
    return hmac.new(key, kind + b"|" + data, hashlib.sha256).digest()


def seal(body: bytes, key: bytes) -> bytes:
    """The file's bytes for a safetensors ``body``: the prefix with both tags, then the body."""
    (length,) = struct.unpack("<Q", body[:8])
    return MAGIC + _tag(key, b"header", body[:8 + length]) + _tag(key, b"body", body) + body


def body_verifies(key: bytes, tag: bytes, body: bytes) -> bool:
    return hmac.compare_digest(_tag(key, b"body", body), tag)


def read_envelope(fh: BinaryIO, where: str, key: bytes) -> tuple[bytes, dict[str, Any]]:
    """(the body's stored tag, the verified header) from an open file, its header tag checked before it is parsed."""
    prefix = fh.read(PREFIX + 8)
    if len(prefix) < PREFIX + 8:
        raise DamagedKVError(f"{where}: truncated KV snapshot")
    if prefix[:6] != MAGIC[:6]:
        raise ForeignKVError(f"{where}: not a KV snapshot")
    if prefix[:len(MAGIC)] != MAGIC:
        raise StaleKVError(f"{where}: KV snapshot of another format version")
    (length,) = struct.unpack("<Q", prefix[PREFIX:])
    if not 0 < length <= MAX_HEADER:
        raise DamagedKVError(f"{where}: damaged KV snapshot header")
    raw = fh.read(length)
    if len(raw) < length:
        raise DamagedKVError(f"{where}: truncated KV snapshot")
    if not hmac.compare_digest(_tag(key, b"header", prefix[PREFIX:] + raw), prefix[len(MAGIC):len(MAGIC) + TAG_BYTES]):
        raise ForeignKVError(f"{where}: KV snapshot not written by this store (its key does not verify it)")
    try:
        header = json.loads(json.loads(raw)["__metadata__"][META_KEY])
        if not isinstance(header, dict) or not isinstance(header.get("ids"), list):
            raise ValueError("no ids")
    except (ValueError, KeyError, TypeError, UnicodeDecodeError, RecursionError, MemoryError):
        # RecursionError: JSON nested past the interpreter's depth; a verified header should never be, but a header
        # is parsed here for every request's index and nothing it holds may take the server down.
        raise DamagedKVError(f"{where}: damaged KV snapshot header") from None
    return prefix[len(MAGIC) + TAG_BYTES:PREFIX], header


def read_header(path: Path, key: bytes) -> dict[str, Any]:
    """The verified header of the snapshot at ``path`` (ids, identity, runner) without reading its tensors: for an
    index of what a folder holds. ``KVSnapshotError`` when it cannot be read or is not this key's."""
    try:
        with open(path, "rb") as fh:
            return read_envelope(fh, Path(path).name, key)[1]
    except OSError as exc:
        raise DamagedKVError(f"{Path(path).name}: cannot read KV snapshot ({exc.strerror or type(exc).__name__})") \
            from None


def _private(stat: os.stat_result) -> bool:
    if os.name == "nt":  # no POSIX bits: the data folder's ACL (the user's profile) is what protects it
        return True
    return stat.st_mode & 0o077 == 0 and stat.st_uid == os.getuid()


def load_key(path: Path, create: bool) -> bytes | None:
    """The store's key at ``path``; with ``create``, made (random, 0600) when missing or readable by others. None
    when there is none and ``create`` is False (then no file can be the store's). ``OSError`` when it cannot be
    written."""
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            if _private(os.fstat(fh.fileno())):
                key = fh.read(KEY_BYTES + 1)
                if len(key) == KEY_BYTES:
                    return key
        if not create:
            return None
        log.warning("the KV store's key %s is not private or not whole: a new one is made", path)
        path.unlink()
    except FileNotFoundError:
        if not create:
            return None
    key = secrets.token_bytes(KEY_BYTES)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(key)
            fh.flush()
            os.fsync(fh.fileno())
        try:  # another process made one first: use it, so both keep one key
            os.link(temporary, path)
        except FileExistsError:
            return load_key(path, create=False) or key
        except OSError:  # no hard links (some file systems): last writer wins, the loser's files then fail
            os.replace(temporary, path)
    finally:
        try:
            os.unlink(temporary)
        except OSError:
            pass
    return key
