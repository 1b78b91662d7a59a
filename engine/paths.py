"""Where Miaohui keeps its data: the models folder, the history database, the logs.

The data directory is platformdirs' user data dir for ``miaohui``, overridden by the
``MIAOHUI_HOME`` environment variable (tests and CI point it at a temporary folder). The files a run writes about
its own use - the history, the measured memory bandwidth, conversations' saved KV caches - live under
``state_root()``: the data directory, or the folder ``keep_state_in`` names (the window's scripted runs, which leave
every user file as it was, point it at their scratch folder). Models, downloads and the caches derived from a
model's weights alone (quantized copies, quality verdicts: the same bytes whoever computes them) stay in the data
directory, so a scripted run still finds the user's models.
Plain Python: no torch, no Qt. Owns path rules, and the one way a file is replaced whole or not at all
(``replace_file``/``replace_text``: exports, the bandwidth record, the quality verdicts); it creates folders.
A folder that cannot be used (the path is a file, it cannot be created) raises ``DataDirError``
with one line saying what to change, so every caller (CLI, window) reports it the same way.
"""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path
from typing import BinaryIO, Callable

import platformdirs

from engine.errors import DataDirError, printable

APP_NAME = "miaohui"
DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"


def data_root() -> Path:
    """The data directory's path, read from the environment on every call; nothing is created."""
    override = os.environ.get("MIAOHUI_HOME")
    return Path(override).expanduser() if override else Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))


_state_in: Path | None = None  # keep_state_in's folder; None: the data directory


def keep_state_in(folder: Path | None) -> None:
    """Keep the run's own files (``state_root()``) under ``folder`` instead of the data directory; None: there again.
    Set once by ``app.main`` for a scripted run, before anything is read or written."""
    global _state_in
    _state_in = Path(folder) if folder is not None else None


def state_root() -> Path:
    """Where the history, the bandwidth record and the saved KV caches live (see the module docstring); nothing is
    created."""
    return _state_in if _state_in is not None else data_root()


def _ensure_folder(path: Path, what: str) -> Path:
    """Create ``path`` if missing; a file in its place or a refused mkdir is a ``DataDirError``."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        if path.exists() and not path.is_dir():
            raise DataDirError(f"{what} {printable(path)} is a file, not a folder: move the file away "
                               "or set MIAOHUI_HOME to a folder") from None
        reason = exc.strerror or type(exc).__name__
        raise DataDirError(f"cannot create {what} {printable(path)} ({reason}): set MIAOHUI_HOME to a folder "
                           "you can write to") from None
    return path


def data_dir() -> Path:
    """The data directory (created if missing), read from the environment on every call."""
    return _ensure_folder(data_root(), "the data folder")


def state_dir() -> Path:
    """``state_root()``, created if missing (``DataDirError`` as ``data_dir``'s)."""
    return _ensure_folder(state_root(), "the data folder")


def models_dir() -> Path:
    return _ensure_folder(data_dir() / "models", "the models folder")


def logs_dir() -> Path:
    return _ensure_folder(data_dir() / "logs", "the logs folder")


def history_path() -> Path:
    """Where the history file belongs (``state_root()``). Creates nothing: the store opens (or falls back from) it."""
    return state_root() / "history.sqlite3"


def documents_path() -> Path:
    """Where the documents store (engine/docs: collections, passages, their vectors) belongs: ``state_root()``, beside
    the history, because it is the user's own material and a scripted run must leave it as it was. Creates nothing."""
    return state_root() / "documents.sqlite3"


def images_dir() -> Path:
    """Where the images attached to conversations are kept, content-addressed (engine/vision/image_store.py):
    ``state_root()``, beside the history that refers to them, because they are the user's own material."""
    return _ensure_folder(state_root() / "images", "the images folder")


def embedders_dir() -> Path:
    """Folder of the embedding models (engine/docs/embed_fetch.py puts the default one there); not inside models/, whose
    folders the chat-model picker lists. Like the models, an embedder is derived from its weights alone, so it stays in
    the data directory and a scripted run finds it too."""
    return _ensure_folder(data_dir() / "embedders", "the embedding models folder")


def default_model_dir() -> Path:
    """Folder of the default model's safetensors copy (may not exist yet: see engine.models.fetch)."""
    return models_dir() / DEFAULT_MODEL_NAME


def bundled_models_dir() -> Path | None:
    """Read-only models shipped inside a packaged build, or None when running from source.

    ``MIAOHUI_BUNDLED_MODELS`` (set by the packaged app's runtime hook) wins; otherwise PyInstaller's
    ``sys._MEIPASS/models``.
    """
    override = os.environ.get("MIAOHUI_BUNDLED_MODELS")
    if override:
        return Path(override)
    base = getattr(sys, "_MEIPASS", None)
    return Path(base) / "models" if base else None


def replace_file(path: Path, write: Callable[[BinaryIO], object], mode: int | None = None) -> Path:
    """Make ``path`` hold what ``write(file)`` writes, or leave it as it was.

    ``write`` fills a new file in the same folder (a rename within one file system is atomic); it is flushed
    and fsynced, then ``os.replace``d over ``path``. On any failure, Ctrl-C included, the temporary file is
    removed and the error raised: the old file is untouched. The new file gets the old one's permissions, or
    those ``open()`` would give (not ``mkstemp``'s owner-only 0600); with ``mode``, that mode from its creation
    on (a private file is never readable by others, not even while it is written). The folder must exist.
    """
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    if mode is None:
        try:
            mode = path.stat().st_mode & 0o7777
        except OSError:
            mode = None
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0),
                 0o666 if mode is None else mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass  # already renamed, or never written: nothing of ours is left there
        raise
    return path


def replace_text(path: Path, text: str, encoding: str = "utf-8") -> Path:
    """``replace_file`` with ``text`` in ``encoding``, written as it is (no newline translation)."""
    data = text.encode(encoding)
    return replace_file(path, lambda fh: fh.write(data))
