"""The real main window on the tiny model: send, stream, footer, saving, a second turn, edit, regenerate,
settings, shortcuts, and the GUI thread's responsiveness while a 200-message chat streams."""

from __future__ import annotations

import time

import pytest
from PySide6.QtCore import QElapsedTimer, Qt, QTimer
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QApplication

from app.state.settings import ChatSettings, Settings
from app.widgets.settings_dialog import SettingsDialog
from engine.events import Message
from tests.app._gui_fixtures import REPLY_TIMEOUT_MS, make_window, send_and_wait, settings, store  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.qt_log_ignore("propagateSizeHints"), pytest.mark.qt_log_level_fail("WARNING")]


def test_send_streams_saves_footer_and_second_turn(qtbot, make_window, store):
    window = make_window(max_new_tokens=12)
    flushes = []
    window.bridge.tokens_received.connect(lambda text, tokens: flushes.append(len(tokens)))
    qtbot.keyClicks(window.prompt, "Hello ")  # QTest types ASCII only; the rest is pasted
    window.prompt.insertPlainText("你好 😀")
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS) as done:
        qtbot.keyClick(window.prompt, Qt.Key.Key_Return)  # Enter sends
        assert not window.send_button.isEnabled() and window.stop_button.isEnabled()
    assert done.args == ["length"]
    assert window.prompt.toPlainText() == ""
    shown = window.chat.messages()
    assert [m.role for m in shown] == ["user", "assistant"] and shown[0].text == "Hello 你好 😀"
    assert sum(flushes) == 12
    assert shown[1].footer.endswith("12 tokens · KV " + shown[1].footer.split("KV ")[1])
    assert "tok/s" in shown[1].footer and "TTFT" in shown[1].footer
    panel = window.perf_panel.displayed()
    assert panel["ttft"].endswith("ms") and panel["decode_avg"].endswith("tok/s") and panel["kv"] != "—"
    assert window.token_inspector.row_count() == 12
    cid = window.current_conversation()
    rows = store.messages(cid)
    assert [(r.role, r.finish_reason) for r in rows] == [("user", None), ("assistant", "length")]
    assert rows[1].text == shown[1].text and rows[1].perf is not None and rows[1].perf.generated_tokens == 12
    assert store.get_conversation(cid).title.startswith("Hello")

    starts = []
    window.bridge.generation_started.connect(starts.append)
    assert send_and_wait(qtbot, window, "And again") == "length"
    assert len(window.chat.messages()) == 4 and len(store.messages(cid)) == 4
    assert starts[0].reused_tokens > 0  # the second turn reused the first turn's KV cache

    # The footer stays with the message after a restart (read back from the store).
    again = make_window(loaded=False)
    again.open_conversation(cid)
    assert [m.footer for m in again.chat.messages()] == [m.footer for m in window.chat.messages()]


def test_edit_and_regenerate_cut_the_history(qtbot, make_window, store):
    window = make_window(max_new_tokens=6)
    send_and_wait(qtbot, window, "first question")
    send_and_wait(qtbot, window, "second question")
    cid = window.current_conversation()
    old_reply_id = store.messages(cid)[-1].id
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS):
        window.chat.widgets()[-1]._buttons["regenerate"].click()
    rows = store.messages(cid)
    assert len(rows) == 4 and rows[-1].id != old_reply_id and rows[-1].role == "assistant"

    window.chat.widgets()[2]._buttons["edit"].click()  # edit "second question"
    assert window.prompt.toPlainText() == "second question" and not window.editing_label.isHidden()
    window.prompt.setPlainText("second question, edited")
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS):
        window.send_button.click()
    rows = store.messages(cid)
    assert [r.text for r in rows if r.role == "user"] == ["first question", "second question, edited"]
    assert len(rows) == 4 and window.editing_label.isHidden()
    assert [m.text for m in window.chat.messages()] == [r.text for r in rows]


def test_continue_appears_after_length_limit(qtbot, make_window):
    window = make_window(max_new_tokens=4)
    send_and_wait(qtbot, window, "Tell me a story")
    last = window.chat.widgets()[-1]
    assert "length limit reached" in last.footer.text() and not last._buttons["continue"].isHidden()
    before = last.message.text
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS):
        last._buttons["continue"].click()
    # Issue 26: Continue resumes the same reply (its prompt continues it), no new user turn.
    assert [m.role for m in window.chat.messages()] == ["user", "assistant"] and window.chat.widgets()[-1] is last
    assert last.message.text.startswith(before) and len(last.message.text) > len(before)


def test_settings_dialog_is_remembered(qtbot, settings, tmp_path):
    dialog = SettingsDialog(settings)
    qtbot.addWidget(dialog)
    dialog.system_prompt.setPlainText("Answer in Chinese. 用中文回答。")
    dialog.temperature.setValue(0.55)
    dialog.top_k.setValue(0)
    dialog.seed.setValue(1234)
    dialog.use_kv_cache.setChecked(False)
    dialog.accept()
    from PySide6.QtCore import QSettings

    reread = Settings(QSettings(str(tmp_path / "qsettings" / "miaohui.ini"), QSettings.Format.IniFormat)).chat()
    assert reread == ChatSettings(system_prompt="Answer in Chinese. 用中文回答。", temperature=0.55, top_k=0, seed=1234,
                                  use_kv_cache=False)
    config = reread.sampling_config()
    assert config.seed == 1234 and config.use_kv_cache is False and config.top_k == 0


def test_shortcuts_exist(make_window):
    window = make_window(loaded=False)
    shortcuts = {a.text(): a.shortcut() for a in window.actions()}
    assert shortcuts["New chat"] == QKeySequence(QKeySequence.StandardKey.New)
    assert shortcuts["Stop"] == QKeySequence(Qt.Key.Key_Escape)
    assert shortcuts["Focus prompt"] == QKeySequence("Ctrl+L")
    assert shortcuts["Settings…"] == QKeySequence("Ctrl+,")
    window.prompt.clearFocus()
    [a for a in window.actions() if a.text() == "Focus prompt"][0].trigger()
    assert window.prompt.hasFocus() or window.focusWidget() is window.prompt
    [a for a in window.actions() if a.text() == "New chat"][0].trigger()
    assert window.current_conversation() is not None and window.chat.messages() == []


def test_gui_thread_stays_responsive_while_a_long_chat_streams(qtbot, make_window, store, record_property):
    window = make_window(max_new_tokens=200)
    cid = store.create_conversation("long chat")
    for i in range(100):
        store.add_message(cid, "user", f"question {i}: what about **item {i}**?")
        store.add_message(cid, "assistant", f"Answer {i}.\n\n```python\nprint({i})\n```\n")
    opened = time.perf_counter()
    window.open_conversation(cid)
    QApplication.processEvents()  # its layout and first paint: the cost of opening, not of streaming
    open_ms = (time.perf_counter() - opened) * 1000
    assert len(window.chat.messages()) == 200

    ticks = QElapsedTimer()
    worst = [0.0]
    count = [0]
    probe = QTimer()
    probe.setInterval(10)

    def on_tick() -> None:
        late = ticks.restart() - 10
        worst[0] = max(worst[0], late)
        count[0] += 1

    probe.timeout.connect(on_tick)
    replies = 5  # one tiny-model reply lasts ~0.2 s: several, sent back to back, give the timer time to catch a stall
    started = time.perf_counter()
    ticks.start()
    probe.start()
    for k in range(replies):
        with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS):
            # Sending is measured too: it adds two bubbles to the long chat while the last reply's paint is due.
            assert window.send(f"one more, {k}")  # 200+ older messages in the context: trimming keeps the last turns
    probe.stop()
    elapsed = time.perf_counter() - started
    assert len(window.chat.messages()) == 200 + 2 * replies
    record_property("gui_worst_timer_lateness_ms", worst[0])
    print(f"\nGUI thread: worst 10 ms-timer lateness {worst[0]:.0f} ms over {replies} replies streamed back to back "
          f"({elapsed:.1f} s, {count[0]} ticks) into a 200-message chat (opening it took {open_ms:.0f} ms)")
    # Only a frozen event loop fails this (its timer would stall for most of the replies); the figure itself
    # is reported, not asserted: on a shared CI box the OS scheduler alone can delay a thread by 100s of ms.
    assert count[0] > 0 and worst[0] < max(5000.0, 900.0 * elapsed)  # only a loop frozen throughout fails


def test_tokenizer_tab_follows_the_prompt_being_written(qtbot, make_window):
    window = make_window()
    window.prompt.setPlainText("我昨天认识的那个人")
    assert window.tokenizer_view.input.toPlainText() == "我昨天认识的那个人"
    assert [window.side_tabs.tabText(i) for i in range(window.side_tabs.count())][-3:] == [
        "Model card", "Tokenizer", "Lab"]


def test_shutdown_stays_truthful_when_called_again_while_the_engine_is_stuck(qtbot, make_window, monkeypatch):
    """closeEvent's shutdown and main()'s second one must both say the engine thread still runs: main()
    exits normally only on True, and a running QThread destroyed at exit aborts the process."""
    import threading

    import app.window.mainwindow

    monkeypatch.setattr(app.window.mainwindow, "SHUTDOWN_WAIT_MS", 200)
    window = make_window()
    running, release = threading.Event(), threading.Event()

    def stuck(_loaded, _cancel) -> None:  # ignores its cancel flag, like a forward stuck in a C call
        running.set()
        release.wait(30)

    window.bridge.submit_task(stuck)
    qtbot.waitUntil(running.is_set, timeout=5000)
    try:
        assert window.shutdown() is False
        assert window.shutdown() is False  # used to say True: main() then returned and Qt aborted
    finally:
        release.set()
    qtbot.waitUntil(lambda: not window.bridge.engine_running, timeout=5000)
    assert window.shutdown() is True  # the thread ended meanwhile: now the truth is True


def test_regenerate_never_deletes_what_another_window_added_to_the_chat(qtbot, make_window, store):
    """Two windows (two processes, two stores on one file) show one chat; the other one adds a turn. A
    Regenerate here used to delete that turn with this window's reply; now it reloads the chat instead."""
    from app.history.store import HistoryStore

    window = make_window(max_new_tokens=4)
    send_and_wait(qtbot, window, "first question")
    cid = window.current_conversation()
    with HistoryStore(store.path) as other:
        later = [other.add_message(cid, "user", "asked in the other window"),
                 other.add_message(cid, "assistant", "answered in the other window")]
    before = [m.id for m in store.messages(cid)]
    assert before[2:] == later
    qtbot.waitUntil(lambda: not window.bridge.is_busy(), timeout=5000)  # the job ends just after its Finished
    window.on_chat_regenerate_requested()
    # refused: no reply started (the reloaded chat is only measured for the context bar, app.window.context_meter)
    assert not window.is_generating() and not window.bridge.is_generating()
    assert [m.id for m in store.messages(cid)] == before  # nothing deleted, nothing added
    assert [m.text for m in window.chat.messages()][2:] == ["asked in the other window", "answered in the other window"]
    assert window.messages.level == "warning" and "another window" in window.messages.text()
    assert send_and_wait(qtbot, window, "and now?") == "length"  # the reloaded chat goes on normally
    assert [m.id for m in store.messages(cid)][:4] == before


def test_each_conversation_keeps_its_own_settings_and_new_ones_start_from_the_defaults(make_window, qtbot, settings,
                                                                                        store):
    from dataclasses import replace

    window = make_window(max_new_tokens=4)
    terse = replace(settings.chat(), system_prompt="Be terse.", temperature=0.7, max_new_tokens=3, seed=7)
    settings.set_chat(terse)
    window.on_new_chat_triggered()
    assert send_and_wait(qtbot, window, "Hello") in ("length", "eos")
    first = window.current_conversation()
    row = store.get_conversation(first)
    assert row.system_prompt == "Be terse." and row.settings["temperature"] == 0.7 and row.settings["seed"] == 7

    # The defaults change; a new conversation starts from them, the first keeps its own.
    chatty = replace(terse, system_prompt="Explain at length.", temperature=0.2, max_new_tokens=5, seed=-1)
    settings.set_chat(chatty)
    window.on_new_chat_triggered()
    assert window.chat_settings() == chatty
    assert send_and_wait(qtbot, window, "Hi again") in ("length", "eos")
    second = window.current_conversation()

    window.open_conversation(first)
    assert window.chat_settings() == terse
    assert window.controller.conversation_for_engine()[0] == Message("system", "Be terse.")
    window.open_conversation(second)
    assert window.chat_settings() == chatty
    assert window.controller.conversation_for_engine()[0] == Message("system", "Explain at length.")


def test_a_damaged_stored_setting_falls_back_to_the_default(make_window, settings, store):
    window = make_window(loaded=False)
    cid = store.create_conversation(system_prompt="Stored prompt",
                                    settings={"temperature": float("nan"), "top_k": "many", "max_new_tokens": 10**9,
                                              "seed": 3, "unknown": 1})
    window.open_conversation(cid)
    chat, defaults = window.chat_settings(), settings.chat()
    assert chat.system_prompt == "Stored prompt" and chat.seed == 3
    assert (chat.temperature, chat.top_k, chat.max_new_tokens) == (defaults.temperature, defaults.top_k,
                                                                   defaults.max_new_tokens)


def test_settings_changed_in_the_dialog_apply_to_the_open_conversation(make_window, qtbot, settings, store,
                                                                        monkeypatch):
    from dataclasses import replace

    window = make_window(max_new_tokens=3)
    assert send_and_wait(qtbot, window, "Hello") in ("length", "eos")
    cid = window.current_conversation()
    changed = replace(settings.chat(), system_prompt="Answer in French.")

    def accept(dialog):  # the user edits the form and presses OK; the window takes the dialog's values
        dialog.set_values(changed)
        dialog.accept()
        return True

    monkeypatch.setattr(SettingsDialog, "exec", accept)
    window.on_settings_triggered()
    assert window.chat_settings() == changed
    assert store.get_conversation(cid).system_prompt == "Answer in French."


def test_a_reply_whose_kv_cache_was_evicted_says_so_in_the_panel(make_window, qtbot, monkeypatch):
    import engine.core.sessions
    from app.widgets.perf_panel import KV_EVICTED_NOTE

    monkeypatch.setattr(engine.core.sessions, "MAX_SESSIONS", 1)  # each chat's reply evicts the other chat's KV cache
    window = make_window(max_new_tokens=3)
    window.bridge._worker.sessions.persistence = None  # memory alone: from disk it is reused (test_kv_persist.py)
    send_and_wait(qtbot, window, "first chat")
    first = window.current_conversation()
    assert window.perf_panel.displayed()["kv_note"] == ""
    window.on_new_chat_triggered()
    send_and_wait(qtbot, window, "second chat")
    assert window.perf_panel.displayed()["kv_note"] == ""  # a new chat had no cache to lose
    window.open_conversation(first)
    starts = []
    window.bridge.generation_started.connect(starts.append)
    send_and_wait(qtbot, window, "back to the first")
    assert starts[-1].kv_evicted and starts[-1].reused_tokens == 0
    assert window.perf_panel.displayed()["kv_note"] == KV_EVICTED_NOTE
    assert KV_EVICTED_NOTE.endswith("KV cache was evicted: prefilled the whole conversation again")
    send_and_wait(qtbot, window, "and once more")
    assert not starts[-1].kv_evicted and starts[-1].reused_tokens > 0
    assert window.perf_panel.displayed()["kv_note"] == ""  # the note was about that one turn


@pytest.mark.qt_log_ignore("propagateSizeHints", "raise")  # the offscreen platform cannot raise the Models window
def test_downloads_allowed_in_the_last_run_are_off_at_the_next_start(qtbot, make_window, settings):
    # Issue 41 point 9: "Allow downloads" stayed on across restarts, silently: network access must be turned on in
    # the run that uses it.
    settings.set_allow_downloads(True)  # as the last run left it
    window = make_window(loaded=False)
    [a for a in window.actions() if a.text() == "Models…"][0].trigger()
    assert not window.models_window.allow_box.isChecked() and not window.models_window.search_tab.query.isEnabled()
    qtbot.mouseClick(window.models_window.allow_box, Qt.MouseButton.LeftButton)  # turned on in this run: it is on
    assert window.models_window.allow_box.isChecked() and settings.allow_downloads()


def test_help_about_says_the_version_the_folders_and_the_licences(qtbot, qapp, make_window, home):
    # Issue 41 point 9: there was no Help menu and no About.
    from app import __version__
    from engine.paths import data_root

    before = qapp.applicationVersion()
    qapp.setApplicationVersion(__version__)  # as app.main does
    window = make_window(loaded=False)
    menus = {a.text(): a.menu() for a in window.menuBar().actions()}
    assert list(menus)[-1] == "&Help"
    about = next(a for a in menus["&Help"].actions() if a.text() == "About Miaohui")
    about.trigger()
    box = window.about.box
    qtbot.waitUntil(box.isVisible)
    text = box.text()
    assert __version__ in text and str(data_root()) in text and str(data_root() / "logs") in text
    assert "Apache-2.0" in text and "LGPL-3.0" in text and "SmolLM2-135M-Instruct" in text
    qtbot.mouseClick(box.button(box.StandardButton.Close), Qt.MouseButton.LeftButton)
    assert not box.isVisible()
    qapp.setApplicationVersion(before)
