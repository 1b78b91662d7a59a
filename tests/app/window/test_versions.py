"""Reply versions in the real window on the real default model and real SQLite: Regenerate twice keeps three versions,
the ‹ 2/3 › pager pages back by mouse and keyboard to version 1's text, footer and panel figures, the next turn answers
the version shown, and reopening the history keeps every version and the choice. An edited message (tiny model) keeps
the one it replaced as version 1 of 2, with the conversation that followed it; paging there shows that branch, and the
next reply answers it."""

from __future__ import annotations

from dataclasses import replace

import pytest
from PySide6.QtCore import Qt

from app.history import versions
from app.widgets.version_pager import VersionPager
from tests.app._gui_fixtures import (REPLY_TIMEOUT_MS, Reopener, greedy, make_window, send_and_wait,  # noqa: F401
                                     settings, store)

pytestmark = [pytest.mark.qt_log_ignore("propagateSizeHints"), pytest.mark.qt_log_level_fail("WARNING")]


@pytest.fixture
def default_window(qtbot, settings, tmp_path, default_model_dir):  # noqa: F811
    """The real window on the real default model; ``default_window()`` again on the same history reopens it."""
    windows = Reopener(qtbot, settings, tmp_path / "history.sqlite3", default_model_dir)
    yield windows.open
    windows.close()


def _regenerate(qtbot, window, max_new_tokens: int) -> None:
    window.apply_settings(greedy(max_new_tokens))  # a longer reply each time: three different versions
    bubble = window.chat.widgets()[-1]
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS):
        bubble._buttons["regenerate"].click()


def _pager(window) -> VersionPager:
    pager = window.chat.widgets()[-1].findChild(VersionPager)
    assert pager is not None and not pager.isHidden()
    return pager


def test_regenerate_twice_pages_back_to_version_one_and_the_next_turn_answers_it(qtbot, settings,  # noqa: F811
                                                                                default_window):
    settings.set_chat(greedy(3))
    window = default_window()
    send_and_wait(qtbot, window, "Name a colour.")
    first = window.controller.messages()[-1]
    assert window.versions.pagers() == []  # one version: no pager
    _regenerate(qtbot, window, 6)
    _regenerate(qtbot, window, 9)
    cid, mid = window.current_conversation(), window.controller.messages()[-1].message_id
    kept = versions.versions(window.store, mid)
    assert [v.position for v in kept] == [1, 2, 3] and kept[0].text == first.text
    assert len({v.text for v in kept}) == 3 and [v.perf.generated_tokens for v in kept] == [3, 6, 9]
    pager = _pager(window)
    assert (pager.shown, pager.count, pager.label.text()) == (3, 3, "3/3")
    assert pager.accessibleName() == "Version 3 of 3" and pager.previous_button.toolTip()
    assert window.perf_panel.displayed()["tokens"] == "9"

    pager.previous_button.click()  # mouse: version 2
    assert (_pager(window).shown, window.chat.widgets()[-1].text) == (2, kept[1].text)
    qtbot.keyClick(_pager(window).previous_button, Qt.Key.Key_Left)  # keyboard: version 1
    bubble, pager = window.chat.widgets()[-1], _pager(window)
    assert pager.label.text() == "1/3" and not pager.previous_button.isEnabled() and pager.next_button.hasFocus()
    assert bubble.text == first.text and bubble.footer.text().startswith(first.footer.split(" · ")[0])
    assert "3 tokens" in bubble.footer.text()
    assert window.perf_panel.displayed()["tokens"] == "3"  # the panel shows version 1's stored figures
    assert window.controller.messages()[-1].text == first.text
    assert [m.text for m in store_messages(window, cid)][-1] == first.text  # the choice is stored

    window.apply_settings(greedy(4))
    engine_view = window.controller.conversation_for_engine()
    assert [(m.role, m.content) for m in engine_view][-1] == ("assistant", first.text)
    send_and_wait(qtbot, window, "Another one?")
    texts = [m.text for m in store_messages(window, cid)]
    assert texts[:3] == ["Name a colour.", first.text, "Another one?"] and len(texts) == 4
    assert _pager_of(window, mid).label.text() == "1/3"  # the earlier turn keeps its pager

    window.shutdown()
    reopened = default_window()  # a new window on the same history file
    assert reopened.current_conversation() == cid
    assert [m.text for m in reopened.controller.messages()] == texts
    assert _pager_of(reopened, mid).label.text() == "1/3"
    assert [v.text for v in versions.versions(reopened.store, mid)] == [v.text for v in kept]
    _pager_of(reopened, mid).next_button.click()
    assert reopened.controller.messages()[1].text == kept[1].text


def store_messages(window, cid):
    return window.store.messages(cid)


def _pager_of(window, mid) -> VersionPager:
    bubble = next(w for w in window.chat.widgets() if w.message.message_id == mid)
    pager = bubble.findChild(VersionPager)
    assert pager is not None and not pager.isHidden()
    return pager


def test_paging_is_off_while_a_reply_streams(qtbot, settings, default_window):  # noqa: F811
    settings.set_chat(replace(greedy(2)))
    window = default_window()
    send_and_wait(qtbot, window, "Hi")
    _regenerate(qtbot, window, 4)
    pager = _pager(window)
    window.apply_settings(greedy(64))
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS):
        assert window.send("Tell me a story.")
        older = _pager_of(window, window.controller.messages()[1].message_id)
        assert older is pager and not pager.previous_button.isEnabled() and not pager.next_button.isEnabled()
        window.controller.stop()
    assert pager.previous_button.isEnabled()


def _user_pager(bubble) -> VersionPager:
    pager = bubble.findChild(VersionPager)
    assert pager is not None and not pager.isHidden() and pager.of_message
    return pager


def test_an_edit_keeps_the_old_branch_as_version_1_and_the_next_reply_answers_the_branch_shown(  # noqa: F811
        qtbot, make_window, store, monkeypatch):
    window = make_window(max_new_tokens=4)
    send_and_wait(qtbot, window, "first question")
    send_and_wait(qtbot, window, "second question")
    cid = window.current_conversation()
    before = [(m.role, m.text, m.footer) for m in window.chat.messages()]

    window.chat.widgets()[2]._buttons["edit"].click()  # edit "second question", typed over
    window.prompt.selectAll()
    qtbot.keyClicks(window.prompt, "another question")
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS):
        window.send_button.click()
    edited = [(m.role, m.text) for m in window.chat.messages()]
    assert [text for _, text in edited[:3]] == ["first question", before[1][1], "another question"] and len(edited) == 4
    pager = _user_pager(window.chat.widgets()[2])
    assert (pager.shown, pager.count, pager.label.text()) == (2, 2, "2/2")
    assert pager.accessibleName() == "Version 2 of 2" and "message" in pager.previous_button.toolTip()
    assert [p.of_message for p in window.versions.pagers()] == [True]  # the replies have one version each

    _user_pager(window.chat.widgets()[2]).previous_button.click()  # back to the first version and its branch
    assert [(m.role, m.text, m.footer) for m in window.chat.messages()] == before
    assert _user_pager(window.chat.widgets()[2]).label.text() == "1/2"
    assert [(m.role, m.text) for m in store.messages(cid)] == [(r, t) for r, t, _ in before]

    asked, starts = [], []
    real_generate = window.bridge.generate

    def recording_generate(conversation_id, messages, *args, **kwargs):  # the real one runs: only what it is given
        asked.append([(m.role, m.content) for m in messages])
        return real_generate(conversation_id, messages, *args, **kwargs)

    monkeypatch.setattr(window.bridge, "generate", recording_generate)
    window.bridge.generation_started.connect(starts.append)
    qtbot.keyClicks(window.prompt, "third question")
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS):
        qtbot.keyClick(window.prompt, Qt.Key.Key_Return)
    # the old branch, not the edit ("another question"); blank replies (the tiny model's) are never sent back
    assert asked == [[(r, t) for r, t, _ in before if r == "user" or t.strip()] + [("user", "third question")]]
    assert [t for r, t in asked[0] if r == "user"] == ["first question", "second question", "third question"]
    assert 0 < starts[0].reused_tokens < starts[0].prompt_tokens  # the cache held the other branch: its prefix only
    assert [m.text for m in store.messages(cid)][:5] == [t for _, t, _ in before] + ["third question"]

    _user_pager(window.chat.widgets()[2]).next_button.click()  # the edited branch is intact too
    assert [(m.role, m.text) for m in window.chat.messages()] == edited
    window.close()
    reopened = make_window(loaded=False)  # the tree and the choice survive a restart
    reopened.open_conversation(cid)
    assert [(m.role, m.text) for m in reopened.chat.messages()] == edited
    assert _user_pager(reopened.chat.widgets()[2]).label.text() == "2/2"
