"""Where Miaohui keeps its data: the models folder, the history database, the logs.

The data directory is platformdirs' user data dir for ``miaohui``, overridden by the
``MIAOHUI_HOME`` environment variable (tests and CI point it at a temporary folder).
Plain Python: no torch, no Qt. Owns path rules only; it creates folders but never files.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import platformdirs

APP_NAME = "miaohui"
DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"


def data_dir() -> Path:
    """The data directory (created if missing), read from the environment on every call."""
    override = os.environ.get("MIAOHUI_HOME")
    path = Path(override).expanduser() if override else Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))
    path.mkdir(parents=True, exist_ok=True)
    return path


def models_dir() -> Path:
    path = data_dir() / "models"
    path.mkdir(parents=True, exist_ok=True)
    return path


def logs_dir() -> Path:
    path = data_dir() / "logs"
    path.mkdir(parents=True, exist_ok=True)
    return path


def history_path() -> Path:
    return data_dir() / "history.sqlite3"


def default_model_dir() -> Path:
    """Folder of the default model's safetensors copy (may not exist yet: see engine.fetch)."""
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
