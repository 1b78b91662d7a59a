"""Faults to inject, shared by the engine's and the window's fault tests (docs/FAULTS.md).

Owns the damaged-model builders (every kind of bad model file of issue 8, each with the words its refusal must
contain, and a marker file that must never appear) and ``FaultyRunner``, the real runner with one forward that
raises. Nothing here stands in for the engine: the runner wraps the real one around the real tiny model.
"""

from __future__ import annotations

import builtins
import dataclasses
import json
import pickle
import shutil
import threading
from pathlib import Path
from typing import Any, Callable, Iterator

import gguf
import numpy as np


class _Payload:
    """Unpickling this creates ``marker``: proof that code from the file ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[str, str]]:
        return builtins.open, (str(self.marker), "w")


@dataclasses.dataclass(frozen=True)
class Damaged:
    """A damaged model on disk: what to open, the words its refusal must contain, the marker that must not appear."""

    path: Path
    needles: tuple[str, ...]
    marker: Path


def _copy(tiny: Path, root: Path) -> Path:
    return Path(shutil.copytree(tiny, root / "model"))


def _cut(path: Path, keep: int) -> None:
    path.write_bytes(path.read_bytes()[:keep])


def _gguf(root: Path) -> Path:
    path = root / "m.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.arange(1024, dtype=np.float32).reshape(-1, 16))
    writer.add_tensor("output_norm.weight", np.ones(16, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    _cut(path, path.stat().st_size - 200)  # the last tensor's data now points past the end
    return path


def _pickled(tiny: Path, root: Path, name: str, marker: Path) -> Path:
    folder = _copy(tiny, root)
    (folder / "model.safetensors").unlink()
    (folder / name).write_bytes(pickle.dumps({"model.embed_tokens.weight": _Payload(marker)}))
    return folder


def _remote_code(tiny: Path, root: Path, marker: Path) -> Path:
    folder = _copy(tiny, root)
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"] = {"AutoConfig": "evil.EvilConfig", "AutoModelForCausalLM": "evil.EvilModel"}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "evil.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    return folder


def make_damaged(kind: str, tiny: Path, root: Path) -> Damaged:
    """Build damage ``kind`` (one of ``DAMAGES``) under ``root`` from the tiny model folder."""
    root.mkdir(parents=True, exist_ok=True)
    marker = root / "PWNED"
    weights = "model.safetensors"
    if kind == "truncated-safetensors":
        folder = _copy(tiny, root)
        _cut(folder / weights, (folder / weights).stat().st_size - 1000)
        return Damaged(folder, ("corrupt or incomplete", weights, "truncated"), marker)
    if kind == "zero-byte":
        folder = _copy(tiny, root)
        (folder / weights).write_bytes(b"")
        return Damaged(folder, (weights, "empty file"), marker)
    if kind == "random-bytes":
        folder = _copy(tiny, root)
        (folder / weights).write_bytes(np.random.default_rng(0).bytes(4096))
        return Damaged(folder, (weights, "not a safetensors file"), marker)
    if kind == "html-as-weights":
        folder = _copy(tiny, root)
        (folder / weights).write_bytes(b"<!DOCTYPE html>\n<html><body>Please sign in</body></html>\n" * 20)
        return Damaged(folder, (weights, "HTML"), marker)
    if kind == "gguf-data-past-eof":
        return Damaged(_gguf(root), ("m.gguf", "past the end of the file"), marker)
    if kind == "no-weights":
        folder = _copy(tiny, root)
        (folder / weights).unlink()
        return Damaged(folder, (str(folder), "no weights"), marker)
    if kind == "config-not-json":
        folder = _copy(tiny, root)
        (folder / "config.json").write_text("<html>404 Not Found</html>")
        return Damaged(folder, ("config.json", "not JSON"), marker)
    if kind.startswith("pickle-"):
        name = {"pickle-bin": "pytorch_model.bin", "pickle-pt": "model.pt", "pickle-pth": "weights.pth"}[kind]
        return Damaged(_pickled(tiny, root, name, marker), (name, "pickle"), marker)
    if kind == "auto-map":
        return Damaged(_remote_code(tiny, root, marker), ("config.json", "auto_map"), marker)
    raise ValueError(kind)


DAMAGES = ("truncated-safetensors", "zero-byte", "random-bytes", "html-as-weights", "gguf-data-past-eof",
           "no-weights", "config-not-json", "pickle-bin", "pickle-pt", "pickle-pth", "auto-map")


class FaultyRunner:
    """The real runner ``make_runner`` gives, whose ``fail_on``-th forward (prefill or decode) raises ``error``."""

    def __init__(self, inner: Any, fail_on: int, error: BaseException) -> None:
        self._inner, self._fail_on, self._error, self.forwards = inner, fail_on, error, 0

    def _step(self) -> None:
        self.forwards += 1
        if self.forwards == self._fail_on:
            raise self._error

    def prefill(self, ids: Any, cancel: threading.Event | None = None, chunk: int = 256) -> Iterator[Any]:
        self._step()
        yield from self._inner.prefill(ids, cancel, chunk)

    def decode(self, token_id: int) -> Any:
        self._step()
        return self._inner.decode(token_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
