"""Conversations' KV caches saved beside the history and reused when reopened, through the real window: the real
default model (and the tiny one for the damaged file), the real bridge and worker thread, real files."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from PySide6.QtWidgets import QApplication, QMessageBox

from engine.core.kv_persist import kv_folder
from tests.app._gui_fixtures import LOAD_TIMEOUT_MS, greedy, loaded_bridge, settings, store  # noqa: F401 (fixtures)

LONG = ("I am planning a small workshop about running language models on ordinary laptops. Please keep these notes "
        "in mind: the room has twenty people, each with a laptop of two to eight cores and eight to thirty-two "
        "gigabytes of memory; nobody has a graphics card; the network is slow, so every model must be downloaded "
        "before the day; the talk starts with tokens and the KV cache, then prefill and decode, then quantization, "
        "then sampling; every demonstration must run in under a minute; questions come at the end. ") * 2
SLOW_MS = 900_000  # the default model's replies on a shared 2-core machine: a liveness bound, not a measurement


def send_and_wait(qtbot, window, text: str) -> str:
    with qtbot.waitSignal(window.reply_finished, timeout=SLOW_MS) as blocker:
        assert window.send(text)
    return blocker.args[0]


@pytest.fixture
def open_window(qtbot, settings, store):
    from app.window.mainwindow import MainWindow

    windows = []

    def make(model: str, precision: str):
        settings.set_chat(greedy(8))
        window = MainWindow(settings, store)
        qtbot.addWidget(window)
        windows.append(window)
        window.show()
        with qtbot.waitSignal(window.model_ready, timeout=LOAD_TIMEOUT_MS):
            window.load_model(model, precision, "cpu")
        return window

    yield make
    for window in windows:
        window.bridge.stop()
        assert window.shutdown() is True


def last_reply(store, cid: int) -> str:
    return store.messages(cid)[-1].text


@pytest.mark.default_model
def test_a_conversation_reopened_after_a_restart_starts_from_its_saved_cache(qtbot, open_window, store,
                                                                             default_model_dir):
    first = open_window(str(default_model_dir), "bf16")
    send_and_wait(qtbot, first, LONG)
    saved = first.current_conversation()
    first.on_new_chat_triggered()
    send_and_wait(qtbot, first, LONG)  # the same conversation again, to be reopened without a saved cache
    unsaved = first.current_conversation()
    assert first.shutdown() is True  # closing the window saves what its sessions hold
    files = {p.name for p in kv_folder().glob("*.kv")}
    assert files == {f"conversation-{saved}.kv", f"conversation-{unsaved}.kv"}
    (kv_folder() / f"conversation-{unsaved}.kv").unlink()

    second = open_window(str(default_model_dir), "bf16")
    figures = {}
    for cid in (saved, unsaved):
        second.open_conversation(cid)
        send_and_wait(qtbot, second, "Now say all of that in one sentence.")
        figures[cid] = (second.last_metrics, last_reply(store, cid))
    reopened, recomputed = figures[saved], figures[unsaved]
    assert reopened[0].reused_tokens > reopened[0].prompt_tokens * 0.9
    assert recomputed[0].reused_tokens == 0
    assert reopened[1] == recomputed[1]  # the same greedy reply, from the file or computed
    # Measured, not asserted (a shared machine): the TTFT the panel shows for each.
    print(f"TTFT reopened {reopened[0].ttft_s:.3f} s vs recomputed {recomputed[0].ttft_s:.3f} s "
          f"({reopened[0].prompt_tokens} prompt tokens)")


def test_a_damaged_saved_cache_is_discarded_quietly_and_the_reply_recomputed(qtbot, open_window, store,
                                                                             tiny_model_dir):
    first = open_window(str(tiny_model_dir), "fp32")
    send_and_wait(qtbot, first, "Hello there, what is a KV cache?")
    cid = first.current_conversation()
    assert first.shutdown() is True
    path = kv_folder() / f"conversation-{cid}.kv"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))

    second = open_window(str(tiny_model_dir), "fp32")
    second.open_conversation(cid)
    assert send_and_wait(qtbot, second, "And a prefill?") in ("eos", "length")
    assert second.last_metrics.reused_tokens == 0
    persistence = second.bridge._worker.sessions.persistence
    assert len(persistence.discarded) == 1 and "checksum" in persistence.discarded[0]
    assert not any(isinstance(w, QMessageBox) and w.isVisible() for w in QApplication.topLevelWidgets())
    assert not path.exists() or path.read_bytes() != bytes(data)  # deleted (or rewritten at exit), never reused



def test_an_evicted_conversation_comes_back_from_disk_and_is_not_called_evicted(qtbot, loaded_bridge, monkeypatch):
    import engine.core.sessions
    from tests.app.runtime.test_bridge import _reply

    monkeypatch.setattr(engine.core.sessions, "MAX_SESSIONS", 1)
    _, first = _reply(qtbot, loaded_bridge, 1)
    _reply(qtbot, loaded_bridge, 2)  # 1 leaves memory: its cache goes to disk
    assert (kv_folder() / "conversation-1.kv").exists()
    started, again = _reply(qtbot, loaded_bridge, 1)
    assert not started.kv_evicted and started.reused_tokens == started.prompt_tokens - 1
    assert again.text == first.text


# ------------------------------------------------------------------- saved when the user switches away (issue 29)

def _persists(monkeypatch) -> list[tuple[str, int, float, float]]:
    """Each PersistJob's save as the worker runs it: ("save", conversation, start, end), perf_counter seconds."""
    import engine.core.sessions

    ran: list[tuple[str, int, float, float]] = []
    real = engine.core.sessions.SessionCache.persist

    def persist(self: Any, conversation_id: int) -> bool:
        start = time.perf_counter()
        try:
            return real(self, conversation_id)
        finally:
            ran.append(("save", conversation_id, start, time.perf_counter()))

    monkeypatch.setattr(engine.core.sessions.SessionCache, "persist", persist)
    return ran


def test_a_conversation_switched_away_from_is_on_disk_before_any_exit_and_written_once(qtbot, open_window,
                                                                                      tiny_model_dir, monkeypatch):
    saves = _persists(monkeypatch)
    window = open_window(str(tiny_model_dir), "fp32")
    send_and_wait(qtbot, window, "Hello there, what is a KV cache?")
    first = window.current_conversation()
    path = kv_folder() / f"conversation-{first}.kv"
    assert not path.exists()  # in memory only while it is open
    window.on_new_chat_triggered()  # switched away: written once the engine is idle, the window still open
    qtbot.waitUntil(path.exists, timeout=SLOW_MS)
    written = path.stat()
    persistence = window.bridge._worker.sessions.persistence
    window.open_conversation(first)
    window.on_new_chat_triggered()  # away again, nothing new: the file holds these very ids
    qtbot.waitUntil(lambda: [s[1] for s in saves].count(first) == 2, timeout=SLOW_MS)  # (the empty chat has none)
    assert persistence.skipped == 1 and path.stat().st_ino == written.st_ino and path.stat().st_size == written.st_size
    window.open_conversation(first)
    send_and_wait(qtbot, window, "And a prefill?")
    window.on_new_chat_triggered()  # a new turn: written again
    qtbot.waitUntil(lambda: [s[1] for s in saves].count(first) == 3, timeout=SLOW_MS)
    assert path.stat().st_ino != written.st_ino and path.stat().st_size > written.st_size
    assert persistence.skipped == 1


def test_a_reply_asked_for_before_a_save_began_goes_first(qtbot, open_window, tiny_model_dir, monkeypatch):
    saves = _persists(monkeypatch)
    replies: list[float] = []
    window = open_window(str(tiny_model_dir), "fp32")
    window.bridge.generation_finished.connect(lambda _finished: replies.append(time.perf_counter()))
    send_and_wait(qtbot, window, "Hello there, what is a KV cache?")
    first = window.current_conversation()
    gate = threading.Event()
    window.bridge.submit_task(lambda _loaded, _cancel: gate.wait(SLOW_MS / 1000))  # the engine thread is busy
    window.on_new_chat_triggered()  # the save of `first` waits for an idle engine
    with qtbot.waitSignal(window.reply_finished, timeout=SLOW_MS):
        assert window.send("Another question")
        gate.set()
    qtbot.waitUntil(lambda: any(s[1] == first for s in saves), timeout=SLOW_MS)
    (save,) = [s for s in saves if s[1] == first]
    assert save[2] >= replies[-1]  # written after the reply, not before it
    assert (kv_folder() / f"conversation-{first}.kv").exists()


def test_a_deleted_conversation_loses_its_session_and_its_file(qtbot, open_window, tiny_model_dir, monkeypatch):
    from PySide6.QtWidgets import QMessageBox

    saves = _persists(monkeypatch)
    window = open_window(str(tiny_model_dir), "fp32")
    send_and_wait(qtbot, window, "Hello there, what is a KV cache?")
    first = window.current_conversation()
    window.on_new_chat_triggered()
    path = kv_folder() / f"conversation-{first}.kv"
    qtbot.waitUntil(path.exists, timeout=SLOW_MS)
    monkeypatch.setattr(QMessageBox, "question", lambda *_a, **_k: QMessageBox.StandardButton.Yes)
    window.conversations.select(first)
    window.conversations.on_delete_clicked()
    qtbot.waitUntil(lambda: not path.exists(), timeout=SLOW_MS)
    qtbot.waitUntil(lambda: not window.bridge.is_busy(), timeout=SLOW_MS)
    assert first not in window.bridge._worker.sessions.kept()  # nor written again at exit
    assert {s[1] for s in saves} == {first}


@pytest.mark.default_model
def test_a_4000_token_conversations_save_delays_a_reply_asked_meanwhile_by_at_most_the_write(qtbot, open_window,
                                                                                           default_model_dir,
                                                                                           monkeypatch):
    import engine.core.sessions

    saves = _persists(monkeypatch)
    began, reply_asked = threading.Event(), threading.Event()
    recorded = engine.core.sessions.SessionCache.persist

    def persist(self: Any, conversation_id: int) -> bool:
        began.set()
        # The write ends after the reply was asked for, whatever the machine's speed: the bridge must still know
        # the save ran (it once wrote it again, because the reply came after the save was posted).
        reply_asked.wait(timeout=SLOW_MS / 1000)
        return recorded(self, conversation_id)

    monkeypatch.setattr(engine.core.sessions.SessionCache, "persist", persist)
    window = open_window(str(default_model_dir), "bf16")
    send_and_wait(qtbot, window, LONG * 19)
    first = window.current_conversation()
    assert window.last_metrics.prompt_tokens >= 4000
    starts: list[Any] = []
    window.bridge.generation_started.connect(starts.append)
    window.on_new_chat_triggered()  # the engine is idle: the save begins at once
    qtbot.waitUntil(began.is_set, timeout=SLOW_MS)
    asked = time.perf_counter()
    with qtbot.waitSignal(window.reply_finished, timeout=SLOW_MS):
        assert window.send("Hello")  # asked for during the write
        reply_asked.set()
    qtbot.waitUntil(lambda: not window.bridge.is_saving(), timeout=SLOW_MS)  # nothing left to write
    (save,) = [s for s in saves if s[1] == first]
    assert (kv_folder() / f"conversation-{first}.kv").exists()
    assert starts[-1].t >= save[3]  # the reply began once the write was done, not during it
    # Measured, not asserted (a shared machine): the write, and how long the reply asked during it waited.
    print(f"4,000-token save: write {save[3] - save[2]:.3f} s; the reply asked during it waited "
          f"{starts[-1].t - asked:.3f} s ({window.bridge._worker.sessions.persistence.store().used_bytes()} bytes)")
