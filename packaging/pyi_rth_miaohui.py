"""PyInstaller runtime hook: tell the frozen Miaohui where its bundled default model lives.

Runs inside the frozen app before ``app.main`` is imported. Owns one thing: pointing the engine at the
model copied into the bundle (``_internal/models/<name>``) through ``MIAOHUI_BUNDLED_MODELS``, which
``engine/paths.py`` (``bundled_models_dir``) reads to resolve ``"default"`` as: the user's own copy in the
data dir first, then the bundled one. It never writes anywhere: user data stays in the normal data dir,
not the install folder.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def _bundled_models() -> Path:
    # _MEIPASS is the one-folder build's _internal/; without it (never expected here) use the exe's folder.
    return Path(getattr(sys, "_MEIPASS", Path(sys.executable).resolve().parent)) / "models"


def _install() -> None:
    models = _bundled_models()
    if models.is_dir():
        # setdefault: a developer can still point a frozen build at another models folder.
        os.environ.setdefault("MIAOHUI_BUNDLED_MODELS", str(models))


_install()
