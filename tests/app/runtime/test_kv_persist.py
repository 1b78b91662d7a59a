"""Conversations' KV caches saved beside the history and reused when reopened, through the real window: the real
default model (and the tiny one for the damaged file), the real bridge and worker thread, real files."""

from __future__ import annotations

import pytest
from PySide6.QtWidgets import QApplication, QMessageBox

from app.runtime.kv_persist import kv_folder
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
    import app.runtime.worker
    from tests.app.runtime.test_bridge import _reply

    monkeypatch.setattr(app.runtime.worker, "MAX_SESSIONS", 1)
    _, first = _reply(qtbot, loaded_bridge, 1)
    _reply(qtbot, loaded_bridge, 2)  # 1 leaves memory: its cache goes to disk
    assert (kv_folder() / "conversation-1.kv").exists()
    started, again = _reply(qtbot, loaded_bridge, 1)
    assert not started.kv_evicted and started.reused_tokens == started.prompt_tokens - 1
    assert again.text == first.text
