"""Fixtures for the GUI tests: isolated settings and history, and the real window on the tiny model.

Nothing here is a stand-in: the window, the bridge, the engine, the tiny model and SQLite are the
real ones; only the data locations are temporary so no test touches a user's settings or history.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest
from PySide6.QtCore import QSettings

from app.settings import ChatSettings, Settings, use_ini_folder

LOAD_TIMEOUT_MS = 120_000  # the first load imports torch and transformers on a shared 2-core CI box
REPLY_TIMEOUT_MS = 120_000


def greedy(max_new_tokens: int) -> ChatSettings:
    """Deterministic settings: the tiny model's greedy reply never hits its end token, so length decides."""
    return ChatSettings(system_prompt="", temperature=0.0, top_p=1.0, top_k=0, repetition_penalty=1.0,
                        max_new_tokens=max_new_tokens, seed=0, use_kv_cache=True)


@pytest.fixture
def settings(tmp_path: Path, home: Path) -> Settings:
    use_ini_folder(tmp_path / "qsettings")  # anything else asking QSettings lands in the temp dir too
    return Settings(QSettings(str(tmp_path / "qsettings" / "miaohui.ini"), QSettings.Format.IniFormat))


@pytest.fixture
def store(tmp_path: Path) -> Iterator[object]:
    from app.store import HistoryStore

    history = HistoryStore(tmp_path / "history.sqlite3")
    yield history
    history.close()


@pytest.fixture
def make_window(qtbot, settings, store, tiny_model_dir):
    """Build the real main window; ``loaded=True`` also loads the tiny model through the bridge."""
    from app.mainwindow import MainWindow

    windows = []

    def make(max_new_tokens: int = 16, loaded: bool = True) -> MainWindow:
        settings.set_chat(greedy(max_new_tokens))
        window = MainWindow(settings, store)
        qtbot.addWidget(window)
        windows.append(window)
        window.resize(1200, 800)
        window.show()
        if loaded:
            with qtbot.waitSignal(window.model_ready, timeout=LOAD_TIMEOUT_MS):
                window.load_model(str(tiny_model_dir), "fp32", "cpu")
        return window

    yield make
    for window in windows:
        assert window.shutdown() is True
        assert not window.bridge._thread.isRunning()
    qtbot.wait(50)  # pending matplotlib redraws/repaints run while their canvas still exists


def send_and_wait(qtbot, window, text: str) -> str:
    """Send ``text`` and return the finish reason once the reply ended."""
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS) as blocker:
        assert window.send(text)
    return blocker.args[0]


@pytest.fixture
def loaded_bridge(qtbot, home, tiny_model_dir):
    """A real Bridge with the tiny model loaded on its worker thread; shut down (bounded) afterwards."""
    import torch

    from app.bridge import Bridge

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # shared CI cores: one thread avoids oversubscription stalls
    bridge = Bridge()
    with qtbot.waitSignal(bridge.model_loaded, timeout=LOAD_TIMEOUT_MS):
        bridge.load({"model": str(tiny_model_dir), "precision": "fp32", "device": "cpu"})
    qtbot.waitUntil(lambda: not bridge.is_busy(), timeout=5000)
    yield bridge
    assert bridge.shutdown(5000) is True
    torch.set_num_threads(threads)
