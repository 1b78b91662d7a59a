"""Miaohui's inference engine: load a local model, stream a reply, measure it honestly.

Imports no Qt and is usable headless (``python -m engine``). Importing this package sets the
Hugging Face offline switches first (``engine._offline``) and imports nothing heavy: torch and
transformers load only when a submodule that needs them is imported.
"""

from engine import _offline  # noqa: F401  (side effect: offline switches before any HF import)

__version__ = "0.1.0"
