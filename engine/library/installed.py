"""The models this machine has in the data dir's ``models/`` folder, the paused downloads beside them, and
deleting either.

Each installed model is a safetensors folder (``config.json`` + weights) or a GGUF file (in a folder, or loose),
listed with its size on disk, its parameter count and the precisions the engine can load it in (both from the
config or GGUF header, ``engine.library.fit``: no weights are read), where it was downloaded from (the record
``engine.library.download`` writes), and whether it is the default model. Hidden folders are skipped: they are
downloads in progress (``.download-*``, listed separately as paused downloads, with the bytes of their files)
or the default model's fetch. A GGUF that the engine's checks refuse (no architecture, no tensors, truncated) is
listed with that refusal as its problem.

``delete`` never touches anything outside the models folder: a name is one folder (or ``folder/file.gguf``)
directly inside it, a symlink is unlinked rather than followed, and the default model goes only with
``allow_default``. Owns listing and deleting; the model picker's list is ``engine.models.catalog``'s.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from engine import paths
from engine.errors import BadInputError, EngineError, ModelNotFoundError, printable
from engine.fmt import one_line
from engine.library import download
from engine.library.arch import engine_precisions
from engine.library.fit import architecture_of
from engine.models import safety
from engine.models.fetch import find_default_model


@dataclass(frozen=True)
class InstalledModel:
    name: str  # what ``delete`` and ``models fit`` take: the folder's name, or "folder/file.gguf"
    path: str  # what ``LoadSpec(model=...)`` takes: the folder or the .gguf file
    format: str  # "safetensors" | "gguf"
    size_bytes: int  # on disk
    params: int | None
    precisions: tuple[str, ...]  # the engine can load it in these ("auto" always)
    default: bool
    repo: str | None  # the Hub repo it was downloaded from, when it was
    problem: str | None = None  # why its numbers could not be read

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class PartialDownload:
    name: str  # the work folder's name: what ``delete_partial`` takes
    repo: str | None
    path: str
    done_bytes: int  # of the files being fetched (verified or in part): at most total_bytes
    total_bytes: int | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _size(path: Path) -> int:
    if path.is_symlink() or path.is_file():
        return path.lstat().st_size
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def _record(path: Path) -> dict[str, Any] | None:
    record = (path / download.RECORD) if path.is_dir() else path.with_name(f"{path.name}.{download.RECORD}")
    try:
        data = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _describe(name: str, path: Path, fmt: str, default: bool) -> InstalledModel:
    bnb = importlib.util.find_spec("bitsandbytes") is not None
    params, problem = None, None
    precisions: tuple[str, ...] = ("auto",)
    try:
        if fmt == "gguf":  # the check a pull and a load make: a header with nothing to run is no model
            safety.check_gguf(path)
        arch = architecture_of(path)
        params = arch.params
        precisions += tuple(p for p in engine_precisions() if arch.precision_problem(p) is None
                            and (bnb or p not in ("bnb-int8", "nf4", "fp4")))
    except EngineError as exc:
        problem = one_line(exc, max_chars=200)
    record = _record(path)
    return InstalledModel(name, str(path), fmt, _size(path), params, precisions, default,
                          record.get("repo") if record else None, problem)


def list_installed() -> list[InstalledModel]:
    """The default model first, then every model in the models folder by name."""
    root = paths.models_dir()
    default = find_default_model()
    found: list[InstalledModel] = []
    if default is not None and default.parent.resolve() != root.resolve():  # bundled with a packaged build
        found.append(_describe("default", default, "safetensors", True))
    for entry in sorted(root.iterdir(), key=lambda p: p.name.lower()):
        if entry.name.startswith("."):
            continue
        if entry.is_dir():
            if (entry / "config.json").is_file() and any(entry.glob("*.safetensors")):
                found.append(_describe(entry.name, entry, "safetensors", default is not None and entry == default))
            for gguf in sorted(entry.glob("*.gguf")):
                found.append(_describe(f"{entry.name}/{gguf.name}", gguf, "gguf", False))
        elif entry.suffix.lower() == ".gguf":
            found.append(_describe(entry.name, entry, "gguf", False))
    found.sort(key=lambda m: not m.default)
    return found


def partial_downloads() -> list[PartialDownload]:
    """Downloads that stopped before they finished (paused, interrupted, failed): resumable by pulling again."""
    root = paths.models_dir()
    partial = []
    for work in sorted(root.glob(f"{download.WORK_PREFIX}*")):
        if not work.is_dir() or work.is_symlink():
            continue
        state = download.read_state(work) or {}
        done, total = download.held_bytes(work)
        repo = state.get("repo") if isinstance(state.get("repo"), str) else None
        partial.append(PartialDownload(work.name, repo, str(work), done, total or None))
    return partial


def _inside(root: Path, name: str) -> Path:
    """``root/name`` for a name that stays one level (or ``folder/file.gguf``) inside ``root``."""
    if not name or name.startswith(("/", "\\", "~")) or "\\" in name or ":" in name:
        raise BadInputError(f"{printable(name)} is not the name of an installed model (see `python -m engine models list`)")
    parts = name.split("/")
    if len(parts) > 2 or any(p in ("", ".", "..") for p in parts) or (len(parts) == 2 and not name.lower().endswith(".gguf")):
        raise BadInputError(f"{printable(name)} is not the name of an installed model (see `python -m engine models list`)")
    if len(parts) == 2 and (root / parts[0]).is_symlink():
        raise BadInputError(f"{printable(name)} is inside a link to elsewhere: remove the link {parts[0]} instead")
    return root.joinpath(*parts)


def resolve(name: str) -> Path:
    """The installed model called ``name``: "default", a folder or "folder/file.gguf" in the models folder, or a
    repo id it was downloaded from ("owner/name" → the folder "owner--name")."""
    root = paths.models_dir()
    if name == "default":
        default = find_default_model()
        if default is None:
            raise ModelNotFoundError("the default model is not installed: run `python -m engine fetch`")
        return default
    candidates = [name]
    if name.count("/") == 1 and not name.lower().endswith(".gguf"):
        candidates.insert(0, name.replace("/", "--"))
    for candidate in candidates:
        try:
            path = _inside(root, candidate)
        except BadInputError:
            continue
        if path.exists() or path.is_symlink():
            return path
    _inside(root, candidates[-1])  # a malformed name says so
    raise ModelNotFoundError(f"no installed model {printable(name)} in {printable(root)} "
                             "(see `python -m engine models list`)")


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    else:
        shutil.rmtree(path)


def delete(name: str, *, allow_default: bool = False) -> Path:
    """Delete an installed model (see ``resolve``); returns what was removed."""
    root = paths.models_dir()
    path = resolve(name)
    default = find_default_model()
    if default is not None and path.resolve() == default.resolve():
        if default.parent.resolve() != root.resolve():
            raise BadInputError(f"the default model at {printable(default)} ships with Miaohui and cannot be deleted")
        if not allow_default:
            raise BadInputError("that is the default model: pass --allow-default to delete it too "
                                "(`python -m engine fetch` puts it back)")
    try:
        depth = len(path.absolute().relative_to(root.absolute()).parts)
    except ValueError:
        depth = 0
    if depth not in (1, 2):
        raise BadInputError(f"{printable(path)} is not inside {printable(root)}: not deleted")
    _remove(path)
    if path.suffix.lower() == ".gguf":
        path.with_name(f"{path.name}.{download.RECORD}").unlink(missing_ok=True)
        if depth == 2 and not any(path.parent.iterdir()):
            path.parent.rmdir()
    return path


def delete_partial(name: str) -> Path:
    """Discard a paused download's work folder (``PartialDownload.name``)."""
    root = paths.models_dir()
    if not name.startswith(download.WORK_PREFIX):
        name = download.WORK_PREFIX + name.replace("/", "--")
    path = _inside(root, name)
    if not path.is_dir() or path.is_symlink():
        raise ModelNotFoundError(f"no paused download {printable(name)} in {printable(root)}")
    shutil.rmtree(path)
    return path
