"""Issue 30 in the real window on the real default model, with the app's style sheet, in English and Chinese: a second
turn whose system prompt changed (Settings' system prompt with a date) shows the "Cache stopped matching" marker in
the system prompt and the hint naming the changed date and the tokens recomputed (in Chinese with no English word
outside the quoted tokens), and again when the conversation is reopened (kept with the reply's figures); a long prompt's prefill progress
arrives in order, ends at 100 %, and shows in percent in the waiting reply's footer and in the panel."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from app.history.store import HistoryStore
from tests.app._gui_fixtures import LOAD_TIMEOUT_MS, REPLY_TIMEOUT_MS, greedy, settings, styled  # noqa: F401
from tests.app.ui.test_i18n import _english_left, chinese, zh_translations  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.qt_log_ignore("propagateSizeHints"), pytest.mark.qt_log_level_fail("WARNING")]
LONG = " ".join(f"Sentence {i} of a long message about caching keys and values." for i in range(60))


@pytest.fixture(params=["en", "zh_CN"])
def language(request):
    if request.param == "zh_CN":
        request.getfixturevalue("chinese")
    return request.param


@pytest.fixture
def window(qtbot, settings, styled, language, tmp_path, default_model_dir):  # noqa: F811
    from app.window.mainwindow import MainWindow

    store = HistoryStore(tmp_path / "history.sqlite3")
    settings.set_chat(replace(greedy(3), system_prompt="Today is 2026-12-02. Be brief."))
    made = MainWindow(settings, store)
    qtbot.addWidget(made)
    made.resize(1440, 900)
    made.show()
    with qtbot.waitSignal(made.model_ready, timeout=LOAD_TIMEOUT_MS):
        made.load_model(str(default_model_dir), "fp32", "cpu")
    yield made
    assert made.shutdown() is True
    store.close()
    qtbot.wait(50)


def _send(qtbot, window, text: str) -> None:
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS):
        assert window.send(text)


def test_a_changed_date_in_the_system_prompt_is_marked_and_explained(qtbot, window, language):
    ttft = window.perf_panel.ttft_view
    _send(qtbot, window, "Hello there")
    assert ttft.shown()["break"] == "—"  # the first reply had nothing cached to part from
    window.apply_settings(replace(greedy(3), system_prompt="Today is 2026-12-03. Be brief."))
    _send(qtbot, window, "And now?")
    shown = ttft.shown()["break"]
    marker, hint = shown.split("\n")
    assert "12-0⟦3" in marker and "⟦2" in marker  # the prompt's token and the cache's, marked where they part
    assert "2026-12-03" in hint and "2026-12-02" in hint  # what it is now and what the cache held
    recomputed = window.perf_panel._metrics.prefill_tokens
    assert str(recomputed) in hint
    if language == "en":
        assert "system prompt" in marker and hint.startswith("The system prompt changed at “2026-12-03”")
    else:  # the quoted tokens are the conversation's own text; every word around them is Chinese
        assert _english_left(re.sub(r"“[^”]*”", " ", shown), []) == [] and "系统提示词" in marker
    assert ttft.values["break"].isVisible() and ttft.values["break"].width() <= ttft.width()
    # reopened: the marker and the hint come back with the reply's stored figures
    cid = window.current_conversation()
    window.on_new_chat_triggered()
    assert ttft.shown()["break"] == "—"
    window.open_conversation(cid)
    assert ttft.shown()["break"] == shown


def test_prefill_progress_arrives_in_order_ends_at_100_and_shows_in_the_bubble(qtbot, window, language):
    seen: list[tuple[int, int, str, str]] = []

    def record(done: int, total: int) -> None:  # connected after the window's own slot: what it just showed
        panel = window.perf_panel.ttft_view.shown()["progress"]
        seen.append((done, total, window.chat.widgets()[-1].footer.text(), panel))

    window.bridge.prefill_progressed.connect(record)
    _send(qtbot, window, LONG)
    assert len(seen) >= 2  # a long prompt prefills in more than one chunk
    dones = [done for done, *_ in seen]
    assert dones == sorted(dones) and len(set(total for _, total, *_ in seen)) == 1
    done, total, footer, panel = seen[-1]
    assert done == total and panel.startswith("100 %")
    first_done, first_total, first_footer, first_panel = seen[0]
    share = 100 * first_done // first_total
    assert f"{share} %" in first_footer and f"{first_done}/{first_total}" in first_footer
    assert first_panel.startswith(f"{share} %")
    assert window.chat.widgets()[-1].footer.text() != first_footer  # the finished reply's own footer replaced it
