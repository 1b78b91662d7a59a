"""Fixtures for the GUI tests: isolated settings and history, and the real window on the tiny model.

Nothing here is a stand-in: the window, the bridge, the engine, the tiny model and SQLite are the
real ones; only the data locations are temporary so no test touches a user's settings or history.
The ``plan`` fixture routes the bridge's sessions through the real runner wrapped to fail or stall
on cue (a slow machine, a failing GPU), so a test sees the same state on a fast CPU and a slow one.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Iterator

import pytest
from PySide6.QtCore import QSettings

from app.state.settings import ChatSettings, Settings, use_ini_folder
from engine.inputs import LoadSpec
from tests.helpers.faults import FaultyRunner

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
    from app.history.store import HistoryStore

    history = HistoryStore(tmp_path / "history.sqlite3")
    yield history
    history.close()


@pytest.fixture
def make_window(qtbot, settings, store, tiny_model_dir):
    """Build the real main window; ``loaded=True`` also loads the tiny model through the bridge."""
    from app.window.mainwindow import MainWindow

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
        assert not window.bridge.engine_running
    qtbot.wait(50)  # pending matplotlib redraws/repaints run while their canvas still exists


class Reopener:
    """Real windows on one history file in turn, as a user closes the app and opens it again: ``open()`` shuts the
    window open before and closes its store first, then builds a new window on the same file and loads
    ``model_dir``. ``close()`` shuts the last one (the fixtures call it at teardown)."""

    def __init__(self, qtbot: Any, settings: Settings, history: Path, model_dir: Path,
                 chat: ChatSettings | None = None) -> None:
        self.qtbot, self.settings, self.history, self.model_dir, self.chat = qtbot, settings, history, model_dir, chat
        self._open: tuple[Any, Any] | None = None

    def open(self) -> Any:
        from app.history.store import HistoryStore
        from app.window.mainwindow import MainWindow

        self.close()
        if self.chat is not None:
            self.settings.set_chat(self.chat)
        store = HistoryStore(self.history)
        window = MainWindow(self.settings, store)
        self.qtbot.addWidget(window)
        self._open = (window, store)
        window.resize(1200, 800)
        window.show()
        with self.qtbot.waitSignal(window.model_ready, timeout=LOAD_TIMEOUT_MS):
            window.load_model(str(self.model_dir), "fp32", "cpu")
        return window

    def close(self) -> None:
        if self._open is not None:
            window, store = self._open
            assert window.shutdown() is True  # idempotent: a test may have shut it already
            store.close()
            self._open = None
            self.qtbot.wait(50)  # pending redraws run while their canvas still exists


def send_and_wait(qtbot, window, text: str) -> str:
    """Send ``text`` and return the finish reason once the reply ended."""
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS) as blocker:
        assert window.send(text)
    return blocker.args[0]


@pytest.fixture
def loaded_bridge(qtbot, home, tiny_model_dir):
    """A real Bridge with the tiny model loaded on its worker thread; shut down (bounded) afterwards."""
    import torch

    from app.runtime.bridge import Bridge

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # shared CI cores: one thread avoids oversubscription stalls
    bridge = Bridge()
    with qtbot.waitSignal(bridge.model_loaded, timeout=LOAD_TIMEOUT_MS):
        bridge.load(LoadSpec(str(tiny_model_dir), "fp32", "cpu"))
    qtbot.waitUntil(lambda: not bridge.is_busy(), timeout=5000)
    yield bridge
    assert bridge.shutdown(5000) is True
    torch.set_num_threads(threads)


# ---------------------------------------------------------------- runners that fail or stall on cue


class _Plan:
    """What the next sessions' runners do: fail on a forward, hold the prefill until Stop, or hold
    the decode after some tokens until Stop."""

    def __init__(self) -> None:
        self.error: BaseException | None = None
        self.fail_on = 0
        self.hold_prefill = False
        self.hold_decode_after = 0


class _HeldPrefill(FaultyRunner):
    """A prefill that lasts until the user presses Stop (a long prompt on a slow machine), then runs."""

    def prefill(self, ids: Any, cancel: threading.Event | None = None, chunk: int = 256) -> Iterator[Any]:
        assert cancel is not None and cancel.wait(REPLY_TIMEOUT_MS / 1000)
        yield from super().prefill(ids, cancel, chunk)


class _HeldDecode(FaultyRunner):
    """A reply that streams ``after`` tokens, then stalls until the user stops it (a slow machine):
    whatever the test does next happens mid-reply, however fast this machine decodes."""

    def __init__(self, inner: Any, after: int) -> None:
        super().__init__(inner, 0, RuntimeError())
        self._after, self._cancel, self._decodes = after, None, 0

    def prefill(self, ids: Any, cancel: threading.Event | None = None, chunk: int = 256) -> Iterator[Any]:
        self._cancel = cancel
        yield from super().prefill(ids, cancel, chunk)

    def decode(self, token_id: int) -> Any:
        self._decodes += 1
        if self._decodes == self._after:
            assert self._cancel is not None and self._cancel.wait(REPLY_TIMEOUT_MS / 1000)
        return super().decode(token_id)


@pytest.fixture
def plan(monkeypatch) -> _Plan:
    """Route the bridge's sessions through a runner factory that applies ``plan`` (armed per reply)."""
    from engine.executor.runners import make_runner
    import engine.generate.session

    armed = _Plan()
    real_session = engine.generate.session.ChatSession

    def factory(loaded: Any, use_kv_cache: bool) -> Any:
        runner = make_runner(loaded, use_kv_cache)
        if armed.hold_prefill:
            return _HeldPrefill(runner, 0, RuntimeError())
        if armed.hold_decode_after:
            return _HeldDecode(runner, armed.hold_decode_after)
        if armed.error is not None:
            return FaultyRunner(runner, armed.fail_on, armed.error)
        return runner

    class PlannedSession(real_session):  # type: ignore[misc, valid-type]
        def __init__(self, loaded: Any, **kwargs: Any) -> None:
            super().__init__(loaded, runner_factory=factory, **kwargs)

        def generate(self, *args: Any, **kwargs: Any) -> Any:
            self._runner = None  # a fresh runner per reply, so the plan armed now applies
            return super().generate(*args, **kwargs)

    monkeypatch.setattr(engine.generate.session, "ChatSession", PlannedSession)  # the bridge imports it per reply
    return armed


@pytest.fixture
def styled(qapp):
    """The app's own style sheet (bold, larger figures), as main() applies it; restored after."""
    from app.ui import theme

    before = qapp.styleSheet(), qapp.palette()
    theme.apply(qapp, dark=False)
    yield
    qapp.setStyleSheet(before[0])
    qapp.setPalette(before[1])
