"""Miaohui's desktop application (PySide6): the window, its widgets and the bridge to the engine.

Owns everything a user sees and the one worker thread that runs the engine. Imports the engine's
public modules only (never torch or transformers directly: ``tests/test_boundaries.py`` checks it)
and keeps history persistence in ``app.history.store`` (plain Python). It owns no inference code.
"""

__version__ = "0.1.0"
