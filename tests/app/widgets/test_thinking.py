"""A reasoning model in the real window: the thought streams into a collapsed "Thinking…" section above the answer
(expandable, with its own tokens and seconds), the history keeps both, the panel splits TTFT, the per-conversation
"Thinking" switch (a template that takes enable_thinking), and Continue after a length cut-off resuming the same
reply. Real window, bridge, engine and SQLite on the tiny reasoning model (tests/helpers/reasoning_model.py).
Screenshots of the collapsed section go to /work/notes/shots when that folder can be written."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.app._gui_fixtures import (LOAD_TIMEOUT_MS, REPLY_TIMEOUT_MS, greedy, make_window,  # noqa: F401
                                     send_and_wait, settings, store)
from tests.app.ui.test_i18n import chinese, zh_translations  # noqa: F401 (fixtures)
from tests.helpers.reasoning_model import expected_texts

SHOTS = Path("/work/notes/shots")


def _reasoning_window(qtbot, make_window, settings, folder, max_new_tokens=40):
    window = make_window(loaded=False)
    settings.set_chat(greedy(max_new_tokens))
    window.controller.apply_settings(greedy(max_new_tokens))
    with qtbot.waitSignal(window.model_ready, timeout=LOAD_TIMEOUT_MS):
        window.load_model(str(folder), "fp32", "cpu")
    qtbot.waitUntil(lambda: window.thinking_switch.isVisible(), timeout=LOAD_TIMEOUT_MS)
    return window


def _last_bubble(window):
    return window.chat.widgets()[-1]


def _save_shot(window, name: str) -> None:
    if SHOTS.parent.is_dir():
        SHOTS.mkdir(exist_ok=True)
        assert _last_bubble(window).grab().save(str(SHOTS / name))


def test_the_thought_is_collapsed_above_the_answer_and_kept(qtbot, make_window, settings, store,
                                                            reasoning_model_dir):
    thought, answer = expected_texts(reasoning_model_dir)
    window = _reasoning_window(qtbot, make_window, settings, reasoning_model_dir)
    assert send_and_wait(qtbot, window, "Capital of France?") == "eos"
    bubble = _last_bubble(window)
    section = bubble.thinking
    assert section is not None and section.isVisible() and not section.is_expanded()
    assert not section.body.isVisible()  # collapsed: the thought's text is not laid out
    head = section.toggle.text()
    assert head.startswith("Thought") and "tokens" in head and " s" in head
    assert bubble.browser.toPlainText().strip() == answer  # the answer below, without the thought or markers
    _save_shot(window, "thinking_en.png")
    qtbot.mouseClick(section.toggle, qtbot_left())
    assert section.is_expanded() and section.body.isVisible()
    assert section.body.toPlainText().strip() == thought

    # The panel splits TTFT: the first thought, then the first answer token.
    panel = window.perf_panel
    assert panel._values["ttft_thought"].text() != "—" and panel._values["ttft_answer"].text() != "—"
    assert panel._forms["speed"].isRowVisible(panel._values["ttft_answer"])

    # The history keeps both: reopened, the reply shows its thought again (tokens and seconds from its record).
    cid = window.controller.conversation_id
    row = store.messages(cid)[-1]
    assert (row.reasoning, row.text, row.perf.thinking_tokens > 0) == (thought, answer, True)
    window.controller.new_conversation()
    window.controller.open(cid)
    reopened = _last_bubble(window).thinking
    assert reopened is not None and reopened.toggle.text() == head


def test_the_thinking_switch_answers_without_a_thought(qtbot, make_window, settings, store, reasoning_model_dir):
    _, answer = expected_texts(reasoning_model_dir)
    window = _reasoning_window(qtbot, make_window, settings, reasoning_model_dir)
    switch = window.thinking_switch
    assert switch.isChecked()
    switch.setChecked(False)
    assert window.controller.chat_settings().thinking is False
    assert send_and_wait(qtbot, window, "Capital of France?") == "eos"
    bubble = _last_bubble(window)
    assert bubble.thinking is None and bubble.browser.toPlainText().strip() == answer.strip()
    cid = window.controller.conversation_id
    assert store.get_conversation(cid).settings["thinking"] is False  # saved with this conversation
    window.controller.new_conversation()
    assert switch.isChecked()  # a new conversation starts from the defaults


def test_the_tiny_model_without_markers_shows_no_switch_and_no_section(qtbot, make_window):
    window = make_window()  # the plain tiny model: no <think> in its template
    qtbot.wait(200)
    assert not window.thinking_switch.isVisible()
    send_and_wait(qtbot, window, "hello")
    assert _last_bubble(window).thinking is None


@pytest.mark.parametrize("cut", [3, 6])  # cut inside the thought; cut inside the answer
def test_continue_resumes_the_same_reply(qtbot, make_window, settings, store, reasoning_model_dir, cut):
    thought, answer = expected_texts(reasoning_model_dir)
    window = _reasoning_window(qtbot, make_window, settings, reasoning_model_dir, max_new_tokens=cut)
    assert send_and_wait(qtbot, window, "Capital of France?") == "length"
    bubble = _last_bubble(window)
    button = bubble._buttons["continue"]
    assert button.isVisible() and button.isEnabled()
    count = len(window.chat.messages())
    settings.set_chat(greedy(40))
    window.controller.apply_settings(greedy(40))
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS) as done:
        qtbot.mouseClick(button, qtbot_left())
    assert done.args[0] == "eos"
    assert len(window.chat.messages()) == count and _last_bubble(window) is bubble  # no new turn, same bubble
    assert bubble.browser.toPlainText().strip() == answer
    assert bubble.thinking is not None and bubble.thinking.text.strip() == thought
    rows = store.messages(window.controller.conversation_id)
    assert [r.role for r in rows] == ["user", "assistant"]
    assert (rows[-1].text, rows[-1].reasoning.strip(), rows[-1].finish_reason) == (answer, thought, "eos")
    assert not bubble._buttons["continue"].isVisible()


def test_the_collapsed_section_in_chinese(qtbot, make_window, settings, store, reasoning_model_dir, chinese):
    window = _reasoning_window(qtbot, make_window, settings, reasoning_model_dir)
    assert send_and_wait(qtbot, window, "法国的首都是哪里？") == "eos"
    section = _last_bubble(window).thinking
    assert section is not None and not section.is_expanded() and section.toggle.text()
    _save_shot(window, "thinking_zh.png")


def qtbot_left():
    from PySide6.QtCore import Qt

    return Qt.MouseButton.LeftButton


def test_the_settings_dialog_keeps_the_conversations_thinking_switch(qtbot, make_window, settings,
                                                                       reasoning_model_dir):
    window = _reasoning_window(qtbot, make_window, settings, reasoning_model_dir)
    window.thinking_switch.setChecked(False)
    window.controller.apply_settings(greedy(12))  # what the dialog's OK does: its values have no Thinking switch
    assert window.controller.chat_settings().thinking is False and window.controller.chat_settings().max_new_tokens == 12
