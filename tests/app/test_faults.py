"""The faults of docs/FAULTS.md through the window: the real window, bridge, engine, tiny model and SQLite.

Covers what a user meets (cases 1-4, 6-7, 14 and issue 8's rapid input: Stop mid-stream, Send twice, Load during
a reply, a 1 MB paste, closing mid-reply), every kind of damaged model file refused with one line while the
previous model stays loaded (Faults 7-10), an out-of-memory error during a reply and during a load and an
exception inside generation (Faults 4-6), a Stop during a long prefill and during a queued load (Fault 3), the
context cases a user can type or paste (Fault 14), a damaged history file at startup (Fault 12) and answering
offline (Fault 15). Faults are injected through collaborators the engine accepts (``ChatSession``'s
``runner_factory``, ``load_model``'s ``from_pretrained``); docs/FAULTS.md maps every case to its test.
"""

from __future__ import annotations

import functools
import gc
import random
import shutil
import socket
import threading
import weakref
from dataclasses import replace
from typing import Any

import pytest
import torch
from PySide6.QtCore import Qt

from app.runtime.bridge import LoadFailure
from engine.errors import ErrorKind
from tests.app._gui_fixtures import (LOAD_TIMEOUT_MS, REPLY_TIMEOUT_MS, greedy, make_window,  # noqa: F401
                                     plan, send_and_wait, settings, store)
from tests.helpers.faults import DAMAGES, make_damaged
from tests.helpers.network import guard_network

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
    monkeypatch.setattr("app.window.controller.SAVE_INTERVAL_MS", 100)  # streaming saves, sooner than the real 2 s
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


def test_stop_offers_continue_and_continue_extends_the_stopped_reply(qtbot, make_window, store, plan):
    # Issue 41 point 4: only the length limit offered Continue; a stopped reply must offer it too, and Continue
    # grows that same message (no new turn) from where Stop cut it.
    window = make_window(max_new_tokens=40)
    _start_long_reply(qtbot, window, plan)
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS) as done:
        qtbot.mouseClick(window.stop_button, Qt.MouseButton.LeftButton)
    assert done.args == ["cancelled"]
    bubble = window.chat.widgets()[-1]
    stopped = bubble.message.text
    assert stopped and bubble.footer.text().endswith("stopped")
    button = bubble._buttons.get("continue")
    assert button is not None and button.isVisible() and button.isEnabled()
    cid = window.current_conversation()
    reply_id = store.messages(cid)[-1].id
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS) as again:
        qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    assert again.args == ["length"]
    assert window.chat.widgets()[-1] is bubble and [m.role for m in window.chat.messages()] == ["user", "assistant"]
    assert bubble.message.text.startswith(stopped) and len(bubble.message.text) > len(stopped)
    rows = store.messages(cid)
    assert [(r.role, r.id) for r in rows][-1] == ("assistant", reply_id) and len(rows) == 2
    assert rows[-1].text == bubble.message.text and rows[-1].finish_reason == "length"


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
    assert not window.bridge.engine_running
    rows = store.messages(cid)
    assert rows[-1].role == "assistant" and rows[-1].finish_reason == "cancelled" and rows[-1].text == \
        window.chat.messages()[-1].text
    assert not any("Destroyed while thread" in record.message for record in qtlog.records)


def test_close_during_load_is_clean(qtbot, make_window, tiny_model_dir, qtlog):
    window = make_window(loaded=False)
    window.load_model(str(tiny_model_dir), "fp32", "cpu")
    assert window.close()
    assert not window.bridge.engine_running
    assert not any("Destroyed while thread" in record.message for record in qtlog.records)


def _one_line_error(window) -> str:
    shown = window.messages.text()
    assert window.messages.level == "error" and "\n" not in shown and "Traceback" not in shown
    return shown


def _assert_idle_and_ready(qtbot, window) -> None:
    qtbot.waitUntil(lambda: not window.bridge.is_busy(), timeout=5000)  # the job ends just after its Finished
    assert window.send_button.isEnabled() and not window.stop_button.isEnabled()
    assert window.status_state.text() == "· ready"


# ---------------------------------------------------------------- Faults 7-10: damaged model files


def test_fault_7_to_10_each_damaged_model_is_one_line_and_the_previous_model_stays(qtbot, make_window, tiny_model_dir,
                                                                                  tmp_path, monkeypatch):
    from PySide6.QtWidgets import QMessageBox

    asked: list[str] = []  # the remote-code question: the user says No (the default button)
    monkeypatch.setattr(QMessageBox, "warning", lambda _parent, title, *_a: asked.append(title)
                        or QMessageBox.StandardButton.No)
    window = make_window(max_new_tokens=3)  # one window for all kinds: a refusal happens before any weight loads
    for kind in DAMAGES:
        damaged = make_damaged(kind, tiny_model_dir, tmp_path / kind)
        with qtbot.waitSignal(window.bridge.load_failed, timeout=LOAD_TIMEOUT_MS) as failed:
            window.load_model(str(damaged.path), "fp32", "cpu")
        assert (failed.args[0].kind is ErrorKind.REMOTE_CODE_REFUSED) == (kind == "auto-map"), kind
        shown = _one_line_error(window)
        assert shown.startswith("Could not load the model:") and shown.endswith(f"(still using {tiny_model_dir.name})")
        for needle in damaged.needles:
            assert needle in shown, (kind, shown)
        assert not damaged.marker.exists(), kind
        assert window.status_model.text() == tiny_model_dir.name and window.model_bar.load_button.text() == "Load"
        _assert_idle_and_ready(qtbot, window)
        assert asked == (["Run this model's own code?"] if kind == "auto-map" else []), kind
        asked.clear()
    assert send_and_wait(qtbot, window, "still works?") == "length"


def test_fault_10_remote_code_runs_only_after_the_user_says_yes_for_that_load(qtbot, make_window, tiny_model_dir,
                                                                              tmp_path, monkeypatch, request):
    import sys

    from PySide6.QtWidgets import QMessageBox

    monkeypatch.setenv("HF_MODULES_CACHE", str(tmp_path / "modules"))  # transformers copies remote code here
    # The remote code this test lets in must not outlive it (other tests check that none was ever imported).
    request.addfinalizer(lambda: [sys.modules.pop(name) for name in list(sys.modules)
                                  if "evil" in name or name.startswith("transformers_modules")])
    answers = [QMessageBox.StandardButton.Yes]
    asked: list[str] = []
    monkeypatch.setattr(QMessageBox, "warning", lambda _parent, _title, text, *_a: asked.append(text)
                        or answers.pop(0))
    window = make_window(max_new_tokens=3)
    damaged = make_damaged("auto-map", tiny_model_dir, tmp_path / "auto-map")
    failures: list[LoadFailure] = []
    window.bridge.load_failed.connect(failures.append)
    window.load_model(str(damaged.path), "fp32", "cpu")  # refused, asked, Yes: loaded again with the opt-in
    qtbot.waitUntil(lambda: len(failures) == 2, timeout=LOAD_TIMEOUT_MS)
    assert "auto_map" in failures[0].message and "auto_map" not in failures[1].message
    assert failures[0].kind is ErrorKind.REMOTE_CODE_REFUSED and not failures[0].spec.allow_remote_code
    assert failures[1].kind is not ErrorKind.REMOTE_CODE_REFUSED and failures[1].spec.allow_remote_code
    assert len(asked) == 1 and str(damaged.path) in asked[0] and "trust" in asked[0]
    # The folder's own code ran only after Yes (its module body leaves the marker); it defines no model
    # class, so that load too ends in one line, the tiny model still loaded, and nobody is asked twice.
    assert damaged.marker.exists()
    shown = _one_line_error(window)
    assert shown.startswith("Could not load the model:") and shown.endswith(f"(still using {tiny_model_dir.name})")
    _assert_idle_and_ready(qtbot, window)
    assert window.settings.model_choice()[0] == str(damaged.path) and answers == []


# ---------------------------------------------------------------- Faults 4-6: errors inside generation and load


@pytest.mark.parametrize("error, words", [
    (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), ("out of memory", "less context",
                                                                              "4-bit")),
    (RuntimeError("injected fault\nsecond line"), ("generation failed: RuntimeError: injected fault",)),
], ids=["out-of-memory", "exception"])
def test_fault_4_5_error_during_a_reply_is_shown_the_model_stays_and_history_is_intact(qtbot, make_window, store,
                                                                                      plan, tiny_model_dir,
                                                                                      error, words):
    window = make_window(max_new_tokens=8)
    assert send_and_wait(qtbot, window, "first question") == "length"
    cid = window.current_conversation()
    before = [(r.id, r.role, r.text, r.finish_reason) for r in store.messages(cid)]
    plan.error, plan.fail_on = error, 6  # prefill, four decode steps, then the fault
    assert send_and_wait(qtbot, window, "second question") == "error"
    shown = _one_line_error(window)
    for word in words:
        assert word in shown
    rows = store.messages(cid)
    assert [(r.id, r.role, r.text, r.finish_reason) for r in rows[:2]] == before  # earlier turns untouched
    assert rows[2].role == "user" and rows[2].text == "second question"
    assert rows[3].role == "assistant" and rows[3].finish_reason == "error" and rows[3].text  # the partial reply
    assert [m.text for m in window.chat.messages()] == [r.text for r in rows]
    assert window.status_model.text() == tiny_model_dir.name  # the model stays loaded
    _assert_idle_and_ready(qtbot, window)
    plan.error = None
    assert send_and_wait(qtbot, window, "third question") == "length"  # the next request works
    assert len(store.messages(cid)) == 6


def test_fault_6_out_of_memory_at_load_keeps_nothing_and_the_previous_model(qtbot, make_window, tiny_model_dir,
                                                                            monkeypatch):
    import engine.models.loader

    window = make_window(max_new_tokens=3)
    built: list[weakref.ref] = []

    def from_pretrained(folder: str, **kwargs: Any) -> Any:
        from transformers import AutoModelForCausalLM

        built.append(weakref.ref(AutoModelForCausalLM.from_pretrained(folder, **kwargs)))
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    # The bridge imports load_model per load: this one injects the fault through its from_pretrained.
    monkeypatch.setattr(engine.models.loader, "load_model",
                        functools.partial(engine.models.loader.load_model, from_pretrained=from_pretrained))
    with qtbot.waitSignal(window.bridge.load_failed, timeout=LOAD_TIMEOUT_MS):
        window.load_model(str(tiny_model_dir), "bf16", "cpu")
    shown = _one_line_error(window)
    assert "out of memory" in shown and "nf4" in shown and f"(still using {tiny_model_dir.name})" in shown
    qtbot.waitUntil(lambda: not window.bridge.is_busy(), timeout=5000)
    gc.collect()
    assert built and built[0]() is None  # no half-loaded model kept
    assert window.status_precision.text() == "· fp32"  # the previous model, not the failed bf16 one
    _assert_idle_and_ready(qtbot, window)
    assert send_and_wait(qtbot, window, "still there?") == "length"


# ---------------------------------------------------------------- Fault 3: Stop during a long prefill or a load


def test_fault_3_stop_during_a_long_prefill_leaves_no_stuck_state(qtbot, make_window, plan):
    window = make_window(max_new_tokens=50)
    plan.hold_prefill = True
    tokens: list[str] = []
    window.bridge.tokens_received.connect(lambda text, _t: tokens.append(text))
    with qtbot.waitSignal(window.bridge.generation_started, timeout=REPLY_TIMEOUT_MS):
        assert window.send("a long prompt " * 6)
    assert window.stop_button.isEnabled() and window.status_state.text() == "· generating"
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS) as done:
        window.on_stop_clicked()
    assert done.args == ["cancelled"] and tokens == []  # stopped before the first token
    _assert_idle_and_ready(qtbot, window)
    assert window.messages.level != "error"
    plan.hold_prefill = False
    assert send_and_wait(qtbot, window, "next") == "length"


def test_fault_3_stop_during_a_load_leaves_the_previous_model_and_no_stuck_state(qtbot, make_window, tiny_model_dir):
    window = make_window(max_new_tokens=3)
    running = threading.Event()

    def busy(_loaded: Any, cancel: threading.Event) -> None:  # the worker is busy: the load waits its turn
        running.set()
        cancel.wait(REPLY_TIMEOUT_MS / 1000)

    window.bridge.submit_task(busy)
    qtbot.waitUntil(running.is_set, timeout=5000)
    window.load_model(str(tiny_model_dir), "fp32", "cpu")
    assert window.stop_button.isEnabled() and window.model_bar.load_button.text() == "Loading…"
    with qtbot.waitSignal(window.bridge.load_failed, timeout=LOAD_TIMEOUT_MS) as failed:
        window.on_stop_clicked()
        window.on_stop_clicked()  # pressed twice
    assert failed.args[0].kind is ErrorKind.CANCELLED and "cancelled" in failed.args[0].message
    qtbot.waitUntil(lambda: not window.bridge.is_busy(), timeout=5000)
    assert f"(still using {tiny_model_dir.name})" in _one_line_error(window)
    assert window.model_bar.load_button.text() == "Load" and not window.controller.is_loading()
    _assert_idle_and_ready(qtbot, window)
    assert send_and_wait(qtbot, window, "hello") == "length"


# ---------------------------------------------------------------- Fault 14: what a user can type or paste


def test_fault_14_empty_and_whitespace_messages_are_not_sent(qtbot, make_window, store):
    window = make_window(max_new_tokens=3)
    for text in ("", "   \n\t  \u3000"):
        window.prompt.setPlainText(text)
        window.on_send_clicked()
        assert window.messages.text() == "Your message is empty." and window.messages.level == "info"
        assert not window.is_generating() and window.chat.messages() == []
    assert window.current_conversation() is None and store.list_conversations() == []  # nothing written
    _assert_idle_and_ready(qtbot, window)


def test_fault_14_nul_surrogates_and_mixed_scripts_get_a_reply_and_are_stored(qtbot, make_window, store):
    window = make_window(max_new_tokens=4)
    text = "a\x00b \ud800 c \ud83d\ude00 秒回 مرحبا नमस्ते e\u0301 👩‍👩‍👧"
    assert send_and_wait(qtbot, window, text) == "length"
    rows = store.messages(window.current_conversation())
    # The store keeps NUL bytes; a lone surrogate (not encodable) becomes U+FFFD, a pair its character.
    assert rows[0].text == "a\x00b \ufffd c 😀 秒回 مرحبا नमस्ते e\u0301 👩‍👩‍👧"
    assert [r.role for r in rows] == ["user", "assistant"] and rows[1].finish_reason == "length"
    _assert_idle_and_ready(qtbot, window)


def test_fault_14_a_1mb_paste_is_refused_kept_and_the_app_stays_usable(qtbot, make_window, store):
    window = make_window(max_new_tokens=3)
    paste = ("粘贴 paste مرحبا\x00 " * 60_000)[: 1 << 20]
    window.prompt.setPlainText(paste)
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS) as done:
        window.on_send_clicked()
    assert done.args == ["error"]
    shown = _one_line_error(window)
    assert "context holds 256" in shown and "shorten it" in shown
    rows = store.messages(window.current_conversation())
    assert [r.role for r in rows] == ["user"] and rows[0].text == paste  # kept whole, no empty reply saved
    assert window.chat.messages()[0].text == paste
    _assert_idle_and_ready(qtbot, window)
    assert send_and_wait(qtbot, window, "short") == "length"


def test_fault_14_history_longer_than_the_context_drops_oldest_turns_with_a_notice(qtbot, make_window, store,
                                                                                   tiny_model_dir):
    window = make_window(max_new_tokens=16, loaded=False)
    cid = store.create_conversation()
    for i in range(12):
        store.add_message(cid, "user", f"question {i}: what is the capital of France?")
        store.add_message(cid, "assistant", f"answer {i}: the capital of France is Paris.")
    window.open_conversation(cid)
    with qtbot.waitSignal(window.model_ready, timeout=LOAD_TIMEOUT_MS):
        window.load_model(str(tiny_model_dir), "fp32", "cpu")
    started: list[Any] = []
    window.bridge.generation_started.connect(started.append)
    assert send_and_wait(qtbot, window, "and the newest question?") == "length"
    assert started[0].dropped_turns > 0
    shown = window.messages.text()
    assert window.messages.level == "warning" and f"{started[0].dropped_turns} oldest messages left out" in shown
    assert "system prompt is kept" in shown
    assert len(store.messages(cid)) == 26  # nothing is deleted from the history, only left out of the prompt


# ---------------------------------------------------------------- Fault 12: damaged history at startup


def test_fault_12_damaged_history_file_the_window_starts_and_says_so(qtbot, settings, tmp_path):
    from app.history.store import HistoryStore
    from app.window.mainwindow import MainWindow

    path = tmp_path / "damaged" / "history.sqlite3"
    path.parent.mkdir()
    junk = random.Random(3).randbytes(32 * 1024)
    path.write_bytes(junk)
    history = HistoryStore(path)
    try:
        window = MainWindow(settings, history)
        qtbot.addWidget(window)
        window.show()
        (quarantine,) = path.parent.glob("history.corrupt-*.sqlite3")
        assert quarantine.read_bytes() == junk
        assert window.messages.level == "warning" and "damaged" in window.messages.text()
        assert str(quarantine) in window.messages.text()
        assert window.conversations.isEnabled() and window.status_state.text() == "· no model loaded"
        assert window.shutdown()
    finally:
        history.close()


# ---------------------------------------------------------------- Fault 15: offline


def test_fault_15_offline_the_window_loads_and_answers_without_connecting(qtbot, make_window, monkeypatch):
    attempts = guard_network(monkeypatch)
    window = make_window(max_new_tokens=4)  # the load and the reply run on the worker thread
    assert send_and_wait(qtbot, window, "Hello offline") == "length"
    assert window.chat.messages()[-1].text
    assert attempts == []
    with pytest.raises(OSError):  # the control: the guard sees a real attempt
        socket.create_connection(("huggingface.co", 443), timeout=1)
    assert attempts


# ---------------------------------------------------------------- Fault 13: history from a newer version


def test_fault_13_newer_history_is_shown_read_only_chat_goes_on_and_the_file_is_never_written(qtbot, settings,
                                                                                            tiny_model_dir, tmp_path):
    import hashlib
    import sqlite3

    from app.history.schema import SCHEMA_VERSION
    from app.history.store import HistoryStore
    from app.window.mainwindow import MainWindow

    path = tmp_path / "future" / "history.sqlite3"
    path.parent.mkdir()
    with HistoryStore(path) as old:
        cid = old.create_conversation("from the future")
        old.add_message(cid, "user", "hello")
    raw = sqlite3.connect(path)
    raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    raw.commit()
    raw.close()
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    names = sorted(p.name for p in path.parent.iterdir())
    history = HistoryStore(path)
    try:
        settings.set_chat(greedy(3))
        window = MainWindow(settings, history)
        qtbot.addWidget(window)
        window.show()
        assert window.messages.level == "warning" and "newer Miaohui" in window.messages.text()
        with qtbot.waitSignal(window.model_ready, timeout=LOAD_TIMEOUT_MS):
            window.load_model(str(tiny_model_dir), "fp32", "cpu")
        window.open_conversation(cid)
        assert [m.text for m in window.chat.messages()] == ["hello"]
        with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS) as done:
            assert window.send("a new message")
        assert done.args == ["length"] and window.chat.messages()[-1].text  # the chat goes on, unsaved
        assert window.messages.level == "warning" and window.messages.text().startswith("History not saved:")
        assert window.shutdown()
    finally:
        history.close()
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in path.parent.iterdir()) == names


# ---------------------------------------------------------------- Fault 2: closing the app during a reply


def test_fault_2_closing_the_app_during_a_reply_exits_0_and_keeps_the_partial_reply(qtbot, qapp, home, settings,
                                                                                  tiny_model_dir, monkeypatch, qtlog,
                                                                                  plan):
    import logging
    import sys

    from PySide6.QtCore import QTimer

    from app.history.store import HistoryStore
    from app.main import main
    from app.window.mainwindow import MainWindow
    from engine.paths import history_path

    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # main() installs its own
    handlers = list(logging.getLogger().handlers)
    settings.set_chat(greedy(200))
    # main() builds Settings() from QSettings' default file, which depends on the application's names: hand
    # it this test's settings instead. (It used to read the defaults: a long system prompt that left the
    # tiny model room for only 16 tokens, so the reply could end before the window closed.)
    monkeypatch.setattr("app.state.settings.Settings", lambda *_a, **_k: settings)
    plan.hold_decode_after = 16  # the reply is still running when the window closes, however fast this CPU
    steps: list[str] = []
    earlier = list(qapp.topLevelWidgets())
    for widget in earlier:  # a window another test left shown would keep the app from quitting on close
        widget.hide()

    def drive() -> None:  # polled on the GUI thread while main() runs the event loop
        window = next((w for w in qapp.topLevelWidgets() if isinstance(w, MainWindow) and w.isVisible()
                       and not any(w is e for e in earlier)), None)
        if window is None or window.controller.facts is None or steps:
            return
        steps.append("send")
        window.bridge.tokens_received.connect(lambda *_a: steps.append("close") if len(steps) == 1 else None)
        window.bridge.tokens_received.connect(lambda *_a: window.close() if steps[-1] == "close" else None)
        assert window.send("Hello")

    poll = QTimer()
    poll.timeout.connect(drive)
    poll.start(20)
    watchdog = QTimer()  # fail rather than hang if closing the window never ends main()
    watchdog.setSingleShot(True)
    watchdog.timeout.connect(lambda: qapp.exit(99))
    watchdog.start(REPLY_TIMEOUT_MS)
    try:
        code = main(["--model", str(tiny_model_dir), "--precision", "fp32", "--device", "cpu"])
    finally:
        poll.stop()
        watchdog.stop()  # a later exit() would end whatever event loop runs then (another test's wait)
        for handler in set(logging.getLogger().handlers) - set(handlers):  # main() added its log file
            logging.getLogger().removeHandler(handler)
            handler.close()
    assert code == 0 and steps == ["send", "close"]
    with HistoryStore(history_path()) as history:
        (conversation,) = history.list_conversations()
        rows = history.messages(conversation.id)
    assert [r.role for r in rows] == ["user", "assistant"]
    assert rows[1].finish_reason == "cancelled" and rows[1].text and rows[1].perf is not None
    assert not any("Destroyed while thread" in record.message for record in qtlog.records)
