"""A session's KV cache as a file: ``save_snapshot`` / ``load_snapshot``, and what makes a file trustworthy.

A ``KVSnapshot`` is the token ids a cache holds and its key/value rows for exactly those positions
(``engine.executor.kv_rows``: the fast runner's (layers, kv_heads, n, head_dim) K and V, for an 8-bit cache its
int8 K and V and their fp16 scales (layers, kv_heads, n); the plain runner's per-layer tensors), with the runner
kind and the KV precision they were computed in (part of the identity: an 8-bit snapshot never restores into a
16-bit cache, nor the reverse). Restored (``ChatSession.restore``), the next
prompt reuses the longest common token prefix with them exactly as an in-memory reuse would.

The file: an envelope (``engine.generate.kv_header``: ``MAGIC``, then two HMAC-SHA256 tags made with the store's
key, one of the header, one of the body), then a safetensors body (the tensors, and the header as its
``__metadata__``: format version, model identity, precision, KV precision, dtype, runner, layers/kv_heads/head_dim
and the exact token ids). The tensors are safetensors' (no pickle, no code); the tags and the header checks are
ours: safetensors checks neither the bytes of a tensor nor who wrote it, and an unkeyed checksum would not either
(anyone can recompute one over another prompt's rows). ``load_snapshot`` refuses a file with a typed error -
``ForeignKVError`` (not written with this key), ``DamagedKVError`` (unreadable, truncated, flipped bytes) or
``StaleKVError`` (written for another model, precision, KV precision, format or geometry) - and the caller discards
it: a snapshot is a cache, never trusted over recomputing.

The model identity (``identity_of``) is a fingerprint of the weights as loaded (a sample of every parameter's
bytes, with names, shapes and dtypes), the weights files' path, size and mtime where the source is a path, and
the architecture: another model, a re-downloaded file or a re-quantization each give another identity.

Owns the format, the identity and the checks; not where files live or how many are kept (``kv_store``), nor the
runners' cache layouts (``export_kv``/``import_kv`` on each runner).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from engine.generate.kv_header import (FORMAT_VERSION, MAGIC, META_KEY, PREFIX, DamagedKVError,  # noqa: F401
                                       ForeignKVError, KVSnapshotError, StaleKVError, body_verifies, read_envelope,
                                       read_header, seal)
from engine.executor.kv_rows import DTYPE_NAMES, dtype_name  # noqa: F401 (the executor names its dtypes)
from engine.paths import replace_file

_PREFIX = PREFIX  # where the safetensors body starts (tests forge files from it)
_META_KEY = META_KEY
_SAMPLE = 64  # elements read from the start, middle and end of every parameter for the fingerprint
_WEIGHT_SUFFIXES = (".safetensors", ".gguf", ".bin", ".pt", ".pth")

@dataclass(frozen=True)
class KVIdentity:
    """What a snapshot must have been computed by to be reused: the model, its precision, the cache's geometry."""

    model: str  # hex fingerprint (see the module docstring)
    precision: str  # the weights' precision: fp32 | bf16 | int8 | int4 ...
    kv_precision: str  # the cache's element type: bf16, fp32, or an 8-bit cache's name
    layers: int
    kv_heads: int
    head_dim: int


@dataclass(frozen=True)
class KVSnapshot:
    """The ids a cache holds and its rows for them: ``tensors`` by name (the runner's ``export_kv``), on the CPU
    once loaded from a file; ``runner`` "fast" | "plain" (each restores only its own layout)."""

    ids: tuple[int, ...]
    tensors: dict[str, torch.Tensor]
    runner: str
    kv_precision: str

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.tensors.values())


def _fingerprint_tensor(digest: Any, name: str, tensor: torch.Tensor) -> None:
    digest.update(f"{name}|{tuple(tensor.shape)}|{tensor.dtype}|".encode())
    try:
        flat = tensor.detach().reshape(-1)
        n = flat.numel()
        picks = [flat[:_SAMPLE], flat[max(0, n // 2 - _SAMPLE // 2):n // 2 + _SAMPLE // 2], flat[-_SAMPLE:]]
        for part in picks:
            digest.update(part.to("cpu").contiguous().view(torch.uint8).numpy().tobytes())
    except (RuntimeError, TypeError, NotImplementedError):  # meta (offloaded) or an opaque tensor type: shape only
        digest.update(b"?")


def _files_of(source: str) -> list[Path]:
    path = Path(source)
    try:
        if path.is_file():
            return [path]
        if path.is_dir():
            return sorted(p for p in path.iterdir() if p.suffix in _WEIGHT_SUFFIXES and p.is_file())
    except OSError:
        pass
    return []


def identity_of(loaded: Any, kv_precision: str | None = None) -> KVIdentity:
    """``loaded``'s identity for snapshots (computed once per model object: a few hundred small reads).

    ``kv_precision``: the cache's element type when it is not the model's activation dtype (an 8-bit cache)."""
    model, facts = loaded.model, loaded.facts
    cached = getattr(model, "_miaohui_kv_fingerprint", None)
    if cached is None:
        digest = hashlib.sha256(f"{facts.architecture}|{facts.params}|{facts.precision}|".encode())
        for path in _files_of(facts.source):
            try:
                stat = path.stat()
                digest.update(f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|".encode())
            except OSError:
                digest.update(str(path).encode())
        with torch.inference_mode():
            for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
                _fingerprint_tensor(digest, name, tensor)
        cached = digest.hexdigest()
        try:
            model._miaohui_kv_fingerprint = cached
        except (AttributeError, TypeError):
            pass
    kv = kv_precision or {1: "int8", 2: "bf16" if _dtype(model) == torch.bfloat16 else "fp16", 4: "fp32"}.get(
        facts.kv_dtype_bytes, f"{facts.kv_dtype_bytes}-byte")
    return KVIdentity(cached, facts.precision, kv, facts.layers, facts.kv_heads, facts.head_dim)


def _dtype(model: Any) -> torch.dtype | None:
    try:
        return next(p.dtype for p in model.parameters() if p.is_floating_point())
    except StopIteration:
        return None


def asdict_identity(identity: KVIdentity) -> dict[str, Any]:
    """``identity`` as a header stores it."""
    return asdict(identity)


# -- writing ------------------------------------------------------------------------------------
def encode(snapshot: KVSnapshot, identity: KVIdentity, key: bytes, scope: str = "") -> bytes:
    """The file's bytes for ``snapshot`` computed by ``identity``'s model, sealed with the store's ``key``."""
    if snapshot.kv_precision != identity.kv_precision:
        raise ValueError(f"a {snapshot.kv_precision} cache saved as {identity.kv_precision}")
    header = {"format": FORMAT_VERSION, "identity": asdict(identity), "runner": snapshot.runner,
              "dtypes": {name: dtype_name(t.dtype) for name, t in snapshot.tensors.items()},
              "ids": list(snapshot.ids), "scope": scope}  # whose rows (``engine.serve.prefix``): "" the window's
    tensors = {name: t.detach().to("cpu").contiguous() for name, t in snapshot.tensors.items()}
    body = st_save(tensors, metadata={_META_KEY: json.dumps(header, separators=(",", ":"))})
    return seal(body, key)


def save_snapshot(path: Path, snapshot: KVSnapshot, identity: KVIdentity, key: bytes, scope: str = "") -> Path:
    """Write ``snapshot`` to ``path`` whole or not at all (``engine.paths.replace_file``), readable by the user only
    (it holds a conversation); the folder must exist."""
    data = encode(snapshot, identity, key, scope)
    return replace_file(Path(path), lambda fh: fh.write(data), mode=0o600)


# -- reading ------------------------------------------------------------------------------------
def _check_identity(header: dict[str, Any], identity: KVIdentity, where: str) -> None:
    stored = header.get("identity")
    if not isinstance(stored, dict):
        raise DamagedKVError(f"{where}: damaged KV snapshot header")
    for field, wanted in asdict(identity).items():
        if stored.get(field) != wanted:
            what = "model" if field == "model" else field.replace("_", " ")
            raise StaleKVError(f"{where}: KV snapshot of another {what} ({stored.get(field)!r}, not {wanted!r})")


def load_snapshot(path: Path, identity: KVIdentity, key: bytes) -> KVSnapshot:
    """The snapshot at ``path``, if it was sealed with ``key`` by ``identity``'s model and is intact; else
    ``ForeignKVError`` / ``StaleKVError`` / ``DamagedKVError`` (a missing or unreadable file is damaged)."""
    path = Path(path)
    where = path.name
    try:
        with open(path, "rb") as fh:
            tag, header = read_envelope(fh, where, key)
            _check_identity(header, identity, where)  # stale before the whole file is read and hashed
            size = os.fstat(fh.fileno()).st_size
            fh.seek(_PREFIX)
            body = fh.read(size - _PREFIX)
    except OSError as exc:
        raise DamagedKVError(f"{where}: cannot read KV snapshot ({exc.strerror or type(exc).__name__})") from None
    if not body_verifies(key, tag, body):
        raise DamagedKVError(f"{where}: KV snapshot checksum mismatch: its MAC does not verify (damaged or altered file)")
    if header.get("format") != FORMAT_VERSION:
        raise StaleKVError(f"{where}: KV snapshot of another format version")
    try:
        tensors = st_load(body)
    except (SafetensorError, ValueError, RuntimeError) as exc:
        raise DamagedKVError(f"{where}: damaged KV snapshot ({type(exc).__name__})") from None
    ids = header["ids"]
    if not all(isinstance(i, int) and i >= 0 for i in ids):
        raise DamagedKVError(f"{where}: damaged KV snapshot header")
    runner = header.get("runner")
    if runner not in ("fast", "plain") or not tensors:
        raise StaleKVError(f"{where}: KV snapshot of an unknown runner")
    for name, tensor in tensors.items():
        if name.endswith("_scale"):  # an 8-bit cache's scales: one per (layer, KV head, position)
            fits = tensor.dim() >= 2 and tensor.shape[-1] == len(ids)
        else:
            fits = tensor.dim() >= 3 and tensor.shape[-2] == len(ids) and tensor.shape[-1] == identity.head_dim
        if not fits:
            raise StaleKVError(f"{where}: KV snapshot rows do not match its ids or this model's head size")
    dtypes = header.get("dtypes")
    if not isinstance(dtypes, dict) or any(dtypes.get(name) != dtype_name(t.dtype) for name, t in tensors.items()):
        raise DamagedKVError(f"{where}: KV snapshot tensors do not match its header")
    return KVSnapshot(tuple(ids), tensors, runner, identity.kv_precision)
