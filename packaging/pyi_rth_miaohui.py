"""PyInstaller runtime hook: tell the frozen Miaohui where its bundled default model lives.

Runs inside the frozen app before ``app.main`` is imported. Owns one thing: pointing the engine at the
model copied into the bundle (``_internal/models/<name>``) through ``MIAOHUI_BUNDLED_MODELS``, which
``engine.paths`` reads to resolve ``"default"`` as: the user's own copy in the data dir first, then the
bundled one. It never writes anywhere: user data stays in the normal data dir, not the install folder.

Until ``engine.paths`` has ``bundled_models_dir()`` (the change is proposed in packaging/README.md),
this hook also redirects ``engine.paths.default_model_dir`` to the bundled copy when the user has no
fetched copy, so a frozen build works either way. That shim is inert once the engine has the function.
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
    if not models.is_dir():
        return
    # setdefault: a developer can still point a frozen build at another models folder.
    os.environ.setdefault("MIAOHUI_BUNDLED_MODELS", str(models))

    from engine import paths  # light: platformdirs only (no torch, no Qt)

    if hasattr(paths, "bundled_models_dir"):
        return  # the engine resolves "default" itself
    from engine.models.fetch import is_fetched

    user_default = paths.default_model_dir

    def default_model_dir() -> Path:
        """The user's copy when it is complete, else the copy shipped in the bundle."""
        own = user_default()
        bundled = Path(os.environ["MIAOHUI_BUNDLED_MODELS"]) / paths.DEFAULT_MODEL_NAME
        return own if is_fetched(own) or not is_fetched(bundled) else bundled

    paths.default_model_dir = default_model_dir


_install()
