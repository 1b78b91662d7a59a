"""Where Miaohui keeps its data: the models folder, the history database, the logs.

The data directory is platformdirs' user data dir for ``miaohui``, overridden by the
``MIAOHUI_HOME`` environment variable (tests and CI point it at a temporary folder).
Plain Python: no torch, no Qt. Owns path rules only; it creates folders but never files.
A folder that cannot be used (the path is a file, it cannot be created) raises ``DataDirError``
with one line saying what to change, so every caller (CLI, window) reports it the same way.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import platformdirs

from engine.errors import DataDirError, printable

APP_NAME = "miaohui"
DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"


def data_root() -> Path:
    """The data directory's path, read from the environment on every call; nothing is created."""
    override = os.environ.get("MIAOHUI_HOME")
    return Path(override).expanduser() if override else Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))


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


def models_dir() -> Path:
    return _ensure_folder(data_dir() / "models", "the models folder")


def logs_dir() -> Path:
    return _ensure_folder(data_dir() / "logs", "the logs folder")


def history_path() -> Path:
    """Where the history file belongs. Creates nothing: the store opens (or falls back from) it."""
    return data_root() / "history.sqlite3"


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
