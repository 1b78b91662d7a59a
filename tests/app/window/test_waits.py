"""A reply's wait says what it waits for (issue 41 point 6), in the real window on the tiny model: before the first
prefill chunk is in, the new reply's bubble says it is waiting for the model; once the prompt is in and no text has
come (a tool call streams none), it says it is generating; the first text replaces both."""

from __future__ import annotations

import pytest

from tests.app._gui_fixtures import REPLY_TIMEOUT_MS, make_window, plan, settings, store  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.qt_log_ignore("propagateSizeHints")]


def test_the_reply_card_says_it_waits_for_the_model_then_that_it_generates(qtbot, make_window, plan):  # noqa: F811
    window = make_window(max_new_tokens=4)
    plan.hold_prefill = True  # a slow first chunk (a long prompt, a tool turn's schemas) until Stop
    footers: list[str] = []
    window.bridge.prefill_progressed.connect(
        lambda done, total: footers.append(window.chat.widgets()[-1].footer.text()))
    assert window.send("Hello")
    qtbot.waitUntil(lambda: window.chat.is_streaming(), timeout=REPLY_TIMEOUT_MS)
    bubble = window.chat.widgets()[-1]
    qtbot.waitUntil(bubble.footer.isVisible, timeout=5000)  # the new bubble is shown by the next event loop turn
    assert bubble.footer.text() == "Waiting for the model…" and footers == []
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS):
        window.stop_button.click()
    plan.hold_prefill = False
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS):
        assert window.send("Hello again")
    assert footers and footers[-1] == "generating"  # the prompt is in: the wait is for the first token now
    assert window.chat.widgets()[-1].footer.text() != "Waiting for the model…"
