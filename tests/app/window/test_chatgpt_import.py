"""Chat → "Import ChatGPT export…" in the real window (tiny model, real SQLite): the import runs off the GUI thread
with a progress line, the chats are listed and the first opens with its regenerated reply's versions paged by the
pager, and it goes on with the local model; a file that is not an export is one line and adds nothing."""

from __future__ import annotations

import json

import pytest
from PySide6.QtWidgets import QFileDialog

from app.history.import_chatgpt import IMPORT_KEY
from app.widgets.version_pager import VersionPager
from tests.app._gui_fixtures import make_window, send_and_wait, settings, store  # noqa: F401
from tests.app.history.test_import_chatgpt import export_sample

pytestmark = [pytest.mark.qt_log_ignore("propagateSizeHints"), pytest.mark.qt_log_level_fail("WARNING")]


def _menu_action(window, text: str):
    for menu_action in window.menuBar().actions():
        for action in menu_action.menu().actions():
            if action.text() == text:
                return action
    raise AssertionError(f"no menu entry {text!r}")


def _import_through_the_menu(qtbot, window, monkeypatch, path):
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *_a, **_k: (str(path), "ChatGPT export"))
    lines = []
    window.statusBar().messageChanged.connect(lines.append)
    with qtbot.waitSignal(window.chatgpt_import.imported, timeout=60_000) as done:
        _menu_action(window, "Import ChatGPT export…").trigger()
        assert window.chatgpt_import.busy() and not window.chatgpt_import.action.isEnabled()  # off the GUI thread
    return done.args[0], lines


def test_an_export_imported_through_the_menu_opens_with_its_versions_and_goes_on_locally(qtbot, make_window, store,
                                                                                         monkeypatch, tmp_path):
    window = make_window(max_new_tokens=4)
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps(export_sample(), ensure_ascii=False), encoding="utf-8")
    ids, lines = _import_through_the_menu(qtbot, window, monkeypatch, path)
    assert len(ids) == 2 and any("Importing ChatGPT export" in line for line in lines)
    assert "Imported 2 chats from ChatGPT" in window.messages.label.text()
    assert window.current_conversation() == ids[0] and window.conversations.current_id() == ids[0]
    assert {row.title for row in store.list_conversations()} == {"Paris trip 巴黎", "ChatGPT chat"}
    assert store.get_conversation(ids[0]).settings[IMPORT_KEY]["model"] == "gpt-4o"
    shown = window.chat.messages()
    assert shown[1].text == "埃菲尔铁塔和卢浮宫。" and shown[3].text == "It is 330 m tall." and len(shown) == 6
    bubble = window.chat.widgets()[3]
    pager = bubble.findChild(VersionPager)
    assert pager is not None and pager.label.text() == "2/3"
    pager.next_button.click()
    assert window.chat.widgets()[3].text == "Roughly 330 metres." == window.controller.messages()[3].text

    assert send_and_wait(qtbot, window, "And the Louvre?") == "length"  # goes on with the local (tiny) model
    messages = store.messages(ids[0])
    assert [m.text for m in messages][3] == "Roughly 330 metres." and messages[-2].text == "And the Louvre?"
    assert messages[-1].perf.model == window.controller.facts.name  # the new reply is the local model's


def test_a_file_that_is_not_an_export_is_one_line_and_adds_nothing(qtbot, make_window, store, monkeypatch,
                                                                   tmp_path):
    window = make_window(loaded=False)
    path = tmp_path / "conversations.json"
    path.write_text('[{"title": "half", "mapping": {}}, {"title": ', encoding="utf-8")
    ids, _lines = _import_through_the_menu(qtbot, window, monkeypatch, path)
    assert ids == [] and store.list_conversations() == []
    shown = window.messages.label.text()
    assert shown.startswith("Nothing imported: not a ChatGPT export: bad JSON at line 1") and "\n" not in shown
    assert window.chatgpt_import.action.isEnabled()
