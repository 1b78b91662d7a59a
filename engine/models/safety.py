"""Model-file safety: checks that run before anything in a model folder is deserialised.

Owns the refusals of docs/FAULTS.md's cases 7-10: pickle checkpoints (``.bin``, ``.pt``, ``.pth``,
``.ckpt``, ``.pkl``) are refused without being opened; a config asking for remote code
(``auto_map``) is refused unless the user opted in; safetensors and GGUF files are verified
structurally from their headers (no tensor is read) so a truncated, empty, garbage or HTML file is
refused with one line naming the file and the problem (a GGUF without an architecture or tensors too); a file
name that an index or a Hub listing gives is refused unless it stays inside the model's folder on every system
(``member_path``); a file a load would open that is a FIFO,
socket, device or folder is refused from ``stat`` before it is opened (opening a FIFO blocks
forever); the config's numbers and its agreement with the weights' names and shapes are checked by
``engine.shapes.config_check`` from the headers read here. Plain Python (json, struct): no torch, no
transformers, and never imports a file from the model folder. Does not load anything: the loader
does, after these checks pass.
"""

from __future__ import annotations

import json
import math
import os
import stat
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from engine.shapes import config_check
from engine.errors import (REMOTE_CODE_REFUSAL, CorruptModelError, ModelNotFoundError, RemoteCodeRefusedError,
                           UnsafeModelError, printable)

# Python's pickle runs code while it loads; these are the usual extensions of pickled checkpoints.
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
# Files a folder may hold that are pickles but not weights; still never opened.
SAFETENSORS_INDEX = "model.safetensors.index.json"
# A safetensors header is a JSON table of contents; real ones are kilobytes. Anything larger is
# garbage read as a length (HTML, random bytes) and must not make us allocate it.
MAX_HEADER_BYTES = 100 * 1024 * 1024

_SAFETENSORS_DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1,
                            "I16": 2, "U16": 2, "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4,
                            "I64": 8, "U64": 8, "F64": 8, "F4": 0.5, "F6_E2M3": 0.75, "F6_E3M2": 0.75}


@dataclass(frozen=True)
class SafetyReport:
    """What the checks found: the weight files that will be read and how many values they hold."""

    weight_files: tuple[Path, ...]
    param_count: int  # elements stored in the weight files (tied weights appear once on disk)


def corrupt(path: Path, problem: str) -> CorruptModelError:
    return CorruptModelError(f"corrupt or incomplete: {path}: {problem}")


def refuse_pickle(path: Path) -> UnsafeModelError:
    return UnsafeModelError(f"refused {path}: a pickle checkpoint can run code when loaded; convert it to "
                            "safetensors (on a machine you trust) and open that instead")


def is_pickle_file(path: Path) -> bool:
    return path.suffix.lower() in PICKLE_SUFFIXES


# What a load may open in a model folder (weights, JSON side files, tokenizer vocabularies, templates).
LOADABLE_SUFFIXES = (".safetensors", ".gguf", ".json", ".model", ".jinja", ".txt", ".tiktoken", ".vocab", ".bpe")
_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def not_regular_problem(path: Path) -> str | None:
    """Why ``path`` (its symlink followed) is not a regular file, or None when it is one or does not exist.

    Opening a FIFO blocks until a writer appears, and a device can be read forever: both are refused
    from ``stat`` alone, before any ``open``.
    """
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None  # missing or a dangling link: the caller's own check names that
    if stat.S_ISREG(mode):
        return None
    kind = next((name for test, name in _KINDS if test(mode)), "a special file")
    return f"not a regular file ({kind})"


def require_regular_file(path: Path) -> None:
    problem = not_regular_problem(path)
    if problem:
        raise corrupt(path, problem)


def check_no_special_files(folder: Path) -> None:
    """Refuse a folder in which a file a load may open is a FIFO, socket, device or folder."""
    try:
        entries = sorted(folder.iterdir())
    except OSError as exc:
        raise corrupt(folder, f"cannot list ({exc.strerror or exc})") from None
    for entry in entries:
        if entry.suffix.lower() in LOADABLE_SUFFIXES:
            require_regular_file(entry)


# ---------------------------------------------------------------- names from an index or a Hub listing

# Windows opens these device names in any folder, whatever the extension ("NUL.json" is the null device).
_WINDOWS_DEVICES = frozenset({"con", "prn", "aux", "nul", *(f"com{i}" for i in range(10)),
                              *(f"lpt{i}" for i in range(10))})


def name_problem(name: object) -> str | None:
    """Why ``name``, a file an index or a Hub listing gives (relative, "/"-separated), might not stay inside the
    folder it is meant for on Linux, macOS or Windows; None when it stays inside on all of them.

    Judged from the name alone, so it holds before anything is created: Windows also splits at backslashes and
    drive colons and drops trailing dots and spaces (so ".. " is ".."), and a control character is never a
    file name a person meant.
    """
    if not isinstance(name, str):
        return "is not text"
    if not name:
        return "is empty"
    if printable(name) != name:
        return "holds a control character"
    if "\\" in name:
        return "holds a backslash (a folder separator on Windows)"
    if ":" in name:
        return "holds a colon (a drive or a stream on Windows)"
    if name.startswith("/"):
        return "is an absolute path"
    for part in name.split("/"):
        if not part.strip(". "):
            return "steps out of the folder ('..') or has an empty or '.'-only part"
        if part != part.rstrip(". "):
            return "has a part ending in a dot or space (Windows renames it)"
        if part.split(".", 1)[0].lower() in _WINDOWS_DEVICES:
            return "names a Windows device (CON, NUL, COM1, …)"
    return None


def member_path(folder: Path, name: object, where: object) -> Path:
    """``folder``/``name`` for a ``name`` that ``where`` (an index file, a Hub repo) gives; ``UnsafeModelError``
    (one line) when it might resolve outside ``folder`` (``name_problem``). Touches nothing on disk."""
    problem = name_problem(name)
    if problem is not None:
        raise UnsafeModelError(f"refused {where}: the file name {name!r} {problem}; only files inside the model's "
                               "own folder are taken")
    return Path(folder).joinpath(*str(name).split("/"))


# ---------------------------------------------------------------- config


def read_json(path: Path) -> Any:
    """Parse a JSON file, turning every failure into a one-line CorruptModelError."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise corrupt(path, f"cannot read ({exc.strerror or exc})") from None
    if not raw:
        raise corrupt(path, "empty file (0 bytes)")
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise corrupt(path, "not JSON (not UTF-8 text)") from None
    except json.JSONDecodeError as exc:
        raise corrupt(path, f"not JSON ({exc.msg} at line {exc.lineno})") from None


# JSON side files transformers reads; each must parse (a 404 page saved under the name is common).
JSON_FILES = ("config.json", "generation_config.json", "tokenizer_config.json", "tokenizer.json",
              "special_tokens_map.json", "processor_config.json", "preprocessor_config.json")
# Files that can carry ``auto_map`` and so make transformers import the folder's Python.
REMOTE_CODE_FILES = ("config.json", "tokenizer_config.json", "processor_config.json", "preprocessor_config.json")
# Any one of these is a tokenizer transformers can build.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")


def check_json_files(folder: Path, allow_remote_code: bool) -> None:
    """Every JSON side file parses; none asks for remote code unless the user opted in."""
    for name in JSON_FILES:
        path = folder / name
        if not path.is_file():
            continue
        data = read_json(path)
        if name in REMOTE_CODE_FILES and isinstance(data, dict) and data.get("auto_map") and not allow_remote_code:
            raise RemoteCodeRefusedError(f"refused {path}: it {REMOTE_CODE_REFUSAL} (auto_map); "
                                         "allow remote code only for a model you trust")


# ---------------------------------------------------------------- safetensors


def check_safetensors(path: Path) -> int:
    """Verify a safetensors file from its header alone; return the number of stored elements."""
    return inspect_safetensors(path)[0]


def inspect_safetensors(path: Path) -> tuple[int, dict[str, tuple[int, ...]]]:
    """Verify a safetensors file from its header alone; return its element count and each tensor's shape."""
    require_regular_file(path)
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            return _check_safetensors_handle(path, handle, size)
    except OSError as exc:
        raise corrupt(path, f"cannot read ({exc.strerror or exc})") from None


def _check_safetensors_handle(path: Path, handle: BinaryIO, size: int) -> tuple[int, dict[str, tuple[int, ...]]]:
    if size == 0:
        raise corrupt(path, "empty file (0 bytes)")
    if size < 8:
        raise corrupt(path, f"only {size} bytes, too short for a safetensors header")
    head = handle.read(8)
    (header_len,) = struct.unpack("<Q", head)
    if header_len <= MAX_HEADER_BYTES and 8 + header_len > size and handle.read(1) == b"{":
        raise corrupt(path, f"truncated: the header alone needs {8 + header_len} bytes but the file has {size}")
    if header_len > MAX_HEADER_BYTES or 8 + header_len > size:
        hint = " (looks like an HTML page, not weights)" if head.lstrip()[:1] == b"<" else ""
        raise corrupt(path, f"not a safetensors file: header length {header_len} does not fit in "
                            f"{size} bytes{hint}")
    handle.seek(8)
    raw = handle.read(header_len)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise corrupt(path, "not a safetensors file: its header is not JSON") from None
    if not isinstance(header, dict):
        raise corrupt(path, "not a safetensors file: its header is not a JSON object")
    data_size = size - 8 - header_len
    end_max = 0
    elements = 0
    shapes: dict[str, tuple[int, ...]] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (begin, end) = info["dtype"], info["shape"], info["data_offsets"]
            count = math.prod(int(dim) for dim in shape)
            expected = count * _SAFETENSORS_DTYPE_BYTES[dtype]
        except (KeyError, TypeError, ValueError):
            raise corrupt(path, f"tensor {name!r} has a malformed header entry") from None
        if not (isinstance(begin, int) and isinstance(end, int)) or not 0 <= begin <= end:
            raise corrupt(path, f"tensor {name!r} has invalid data offsets")
        if end > data_size:
            raise corrupt(path, f"truncated: tensor {name!r} ends at byte {8 + header_len + end} but the file "
                                f"has {size} bytes")
        if end - begin != expected:
            raise corrupt(path, f"tensor {name!r} holds {end - begin} bytes but {dtype}{list(shape)} needs "
                                f"{int(expected)}")
        end_max = max(end_max, end)
        elements += count
        shapes[name] = tuple(int(dim) for dim in shape)
    if end_max != data_size:
        raise corrupt(path, f"{data_size - end_max} unexpected bytes after the last tensor")
    return elements, shapes


def _safetensors_files(folder: Path) -> list[Path]:
    """The safetensors files a folder's model consists of (all shards named by the index)."""
    index = folder / SAFETENSORS_INDEX
    if index.is_file():
        data = read_json(index)
        weight_map = data.get("weight_map") if isinstance(data, dict) else None
        if not isinstance(weight_map, dict) or not weight_map:
            raise corrupt(index, "no weight_map")
        shards = {member_path(folder, name, index): str(name) for name in weight_map.values()}
        for path, shard in sorted(shards.items(), key=lambda item: item[1]):
            if not path.is_file():
                raise corrupt(index, f"names shard {shard}, which is missing")
        return sorted(shards, key=lambda path: shards[path])
    return sorted(folder.glob("*.safetensors"))


# ---------------------------------------------------------------- GGUF

def check_gguf(path: Path) -> int:
    """Parse a GGUF header (``engine.shapes.gguf_header``, the one reader) and verify every tensor's data lies
    inside the file; return its element count."""
    from engine.shapes.gguf_header import read_file_header  # lazy: gguf brings numpy (~200 ms), which the
    # checks of every safetensors model, run before each load, do not need

    require_regular_file(path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise corrupt(path, f"cannot read ({exc.strerror or exc})") from None
    if size == 0:
        raise corrupt(path, "empty file (0 bytes)")
    try:
        header = read_file_header(path)
    except RecursionError:  # arrays nested thousands deep: no real file does this
        raise corrupt(path, "metadata nested too deeply") from None
    # A header with nothing to run passes every bound below; it is no model, so it is refused here, at
    # download and at load alike, rather than listed as installed.
    if not header.fields.get("general.architecture"):
        raise corrupt(path, "no general.architecture: not a model GGUF file")
    if not header.tensors:
        raise corrupt(path, "no tensors: a GGUF header without weights")
    for tensor in header.tensors:
        end = header.header_bytes + tensor.offset + tensor.nbytes
        if end > size:
            raise corrupt(path, f"tensor {tensor.name!r} data ends at byte {end}, past the end of the file "
                                f"({size} bytes)")
    return header.elements


# ---------------------------------------------------------------- the whole source


def check_source(folder: Path, gguf_file: str | None = None, allow_remote_code: bool = False) -> SafetyReport:
    """Run every check on a model folder (or one GGUF file in it) before anything is loaded."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ModelNotFoundError(f"no model folder at {folder}")
    check_no_special_files(folder)
    check_json_files(folder, allow_remote_code)
    if gguf_file is not None:
        path = folder / gguf_file
        return SafetyReport(weight_files=(path,), param_count=check_gguf(path))
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise corrupt(folder, "no config.json (not a Hugging Face model folder)")
    config = read_json(config_path)
    if not isinstance(config, dict):
        raise corrupt(config_path, "not a JSON object")
    config_check.check_config_values(config, config_path)
    files = _safetensors_files(folder)
    if not files:
        pickles = sorted(p.name for p in folder.iterdir() if p.is_file() and is_pickle_file(p))
        if pickles:
            # Only pickled weights: loading them would run whatever code they carry.
            raise refuse_pickle(folder / pickles[0])
        raise corrupt(folder, "no weights (no .safetensors file)")
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        raise corrupt(folder, "no tokenizer (tokenizer.json)")
    elements, shapes = 0, {}
    for path in files:
        count, file_shapes = inspect_safetensors(path)
        elements += count
        shapes.update(file_shapes)
    config_check.check_weights_match(config, shapes, config_path)
    return SafetyReport(weight_files=tuple(files), param_count=elements)
