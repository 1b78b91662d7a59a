"""Faults a user meets through the window (docs/FAULTS.md, cases 1-4, 6-7, 14; issue 8's rapid input):
the real window, bridge, engine and tiny model, with the behaviour in brackets there."""

from __future__ import annotations

import shutil
from dataclasses import replace

import pytest
from PySide6.QtCore import Qt

from tests.app._gui_fixtures import (LOAD_TIMEOUT_MS, REPLY_TIMEOUT_MS, make_window, plan,  # noqa: F401
                                     send_and_wait, settings, store)

pytestmark = [pytest.mark.qt_log_ignore("propagateSizeHints"), pytest.mark.qt_log_level_fail("WARNING")]


def _start_long_reply(qtbot, window, plan, text: str = "Hello") -> list:
    """Send ``text`` and wait for its first tokens. The reply stalls after 12 tokens until Stop, so
    it is still running whatever the test does next, however fast this CPU decodes."""
    after_finish: list = []
    plan.hold_decode_after = 12
    with qtbot.waitSignal(window.bridge.tokens_received, timeout=REPLY_TIMEOUT_MS):
        assert window.send(text)
    plan.hold_decode_after = 0  # the running reply's runner has it; later replies run freely
    window.bridge.generation_finished.connect(lambda _f: after_finish.append("finished"))
    window.bridge.tokens_received.connect(lambda *_a: after_finish.append("tokens") if after_finish else None)
    return after_finish


def test_stop_mid_stream_keeps_the_partial_reply_marked_stopped(qtbot, make_window, store, monkeypatch, plan):
    monkeypatch.setattr("app.controller.SAVE_INTERVAL_MS", 100)  # streaming saves, sooner than the real 2 s
    window = make_window(max_new_tokens=200)
    order = _start_long_reply(qtbot, window, plan)
    cid = window.current_conversation()
    qtbot.waitUntil(lambda: store.messages(cid)[-1].text != "", timeout=REPLY_TIMEOUT_MS)
    assert store.messages(cid)[-1].finish_reason is None  # saved while still streaming
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS) as done:
        qtbot.mouseClick(window.stop_button, Qt.MouseButton.LeftButton)
        qtbot.keyClick(window, Qt.Key.Key_Escape)  # Stop pressed twice (button, then Esc)
    assert done.args == ["cancelled"]
    qtbot.wait(150)
    assert order == ["finished"]  # no token after the end
    reply = window.chat.messages()[-1]
    assert reply.role == "assistant" and reply.finish_reason == "cancelled"
    assert window.chat.widgets()[-1].footer.text().endswith("stopped")
    rows = store.messages(window.current_conversation())
    assert rows[-1].finish_reason == "cancelled" and rows[-1].text == reply.text
    assert rows[-1].perf is not None and 0 < rows[-1].perf.generated_tokens < 200
    assert not window.stop_button.isEnabled() and window.send_button.isEnabled()
    assert window.status_state.text() == "· ready"
    window.settings.set_chat(replace(window.settings.chat(), max_new_tokens=4))
    assert send_and_wait(qtbot, window, "next") == "length"  # the app is usable after a stop


def test_rapid_send_during_a_reply_gives_one_reply(qtbot, make_window, store, plan):
    window = make_window(max_new_tokens=200)
    _start_long_reply(qtbot, window, plan, "first")
    window.prompt.setPlainText("typed while it streams")
    for _ in range(10):
        qtbot.mouseClick(window.send_button, Qt.MouseButton.LeftButton)
        qtbot.keyClick(window.prompt, Qt.Key.Key_Return)
        window.on_send_clicked()  # even if the disabled button were clicked programmatically
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS):
        window.on_stop_clicked()
    rows = store.messages(window.current_conversation())
    assert [r.role for r in rows] == ["user", "assistant"] and rows[0].text == "first"
    assert len(window.chat.messages()) == 2
    assert window.prompt.toPlainText() == "typed while it streams"  # nothing the user typed was lost


def test_load_during_a_reply_stops_it_and_loads(qtbot, make_window, store, plan):
    window = make_window(max_new_tokens=200)
    _start_long_reply(qtbot, window, plan)
    with qtbot.waitSignals([window.reply_finished, window.model_ready], timeout=LOAD_TIMEOUT_MS):
        qtbot.mouseClick(window.model_bar.load_button, Qt.MouseButton.LeftButton)
        assert window.model_bar.load_button.text() == "Loading…"
    qtbot.waitUntil(lambda: not window.bridge.is_busy(), timeout=5000)
    rows = store.messages(window.current_conversation())
    assert [(r.role, r.finish_reason) for r in rows] == [("user", None), ("assistant", "cancelled")]
    assert window.send_button.isEnabled() and not window.stop_button.isEnabled()
    assert window.model_bar.load_button.text() == "Load"
    window.settings.set_chat(replace(window.settings.chat(), max_new_tokens=3))
    assert send_and_wait(qtbot, window, "after reload") == "length"


def test_stop_during_load_leaves_no_stuck_state(qtbot, make_window, tiny_model_dir):
    window = make_window(loaded=False)
    window.load_model(str(tiny_model_dir), "fp32", "cpu")
    assert window.stop_button.isEnabled()
    window.on_stop_clicked()
    qtbot.waitUntil(lambda: not window.bridge.is_busy(), timeout=LOAD_TIMEOUT_MS)
    assert not window.stop_button.isEnabled() and not window.controller.is_loading()
    assert window.model_bar.load_button.text() == "Load"
    if window.controller.facts is None:  # the cancel landed before the load finished: said so, and idle
        assert "cancelled" in window.messages.text()
        assert not window.send_button.isEnabled() and window.status_state.text() == "· no model loaded"


@pytest.mark.parametrize("damage", ["missing", "truncated"])
def test_load_error_is_one_line_and_the_previous_model_stays(qtbot, make_window, tiny_model_dir, tmp_path, damage):
    window = make_window(max_new_tokens=3)
    target = tmp_path / "broken-model"
    if damage == "truncated":
        shutil.copytree(tiny_model_dir, target)
        weights = target / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with qtbot.waitSignal(window.bridge.load_failed, timeout=LOAD_TIMEOUT_MS):
        window.load_model(str(target), "fp32", "cpu")
    shown = window.messages.text()
    assert shown.startswith("Could not load the model:") and "\n" not in shown and "Traceback" not in shown
    assert window.messages.level == "error"
    assert f"still using {tiny_model_dir.name}" in shown
    if damage == "truncated":
        assert "model.safetensors" in shown
    assert window.status_model.text() == tiny_model_dir.name
    assert send_and_wait(qtbot, window, "still works?") == "length"


def test_message_longer_than_the_context_is_refused_and_app_stays_usable(qtbot, make_window, store):
    window = make_window(max_new_tokens=3)
    assert send_and_wait(qtbot, window, "word " * 400) == "error"  # the tiny model's window is 256 tokens
    assert window.messages.level == "error" and "Traceback" not in window.messages.text()
    assert [m.role for m in window.chat.messages()] == ["user"]  # no empty reply left behind
    assert [r.role for r in store.messages(window.current_conversation())] == ["user"]
    assert send_and_wait(qtbot, window, "short") == "length"


def test_close_during_generation_is_clean_and_keeps_the_partial_reply(qtbot, make_window, store, qtlog, plan):
    window = make_window(max_new_tokens=200)
    _start_long_reply(qtbot, window, plan)
    cid = window.current_conversation()
    assert window.close()
    assert window.bridge._thread.isFinished()
    rows = store.messages(cid)
    assert rows[-1].role == "assistant" and rows[-1].finish_reason == "cancelled" and rows[-1].text == \
        window.chat.messages()[-1].text
    assert not any("Destroyed while thread" in record.message for record in qtlog.records)


def test_close_during_load_is_clean(qtbot, make_window, tiny_model_dir, qtlog):
    window = make_window(loaded=False)
    window.load_model(str(tiny_model_dir), "fp32", "cpu")
    assert window.close()
    assert window.bridge._thread.isFinished()
    assert not any("Destroyed while thread" in record.message for record in qtlog.records)
