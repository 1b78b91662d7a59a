"""Reply versions keep their sources in the real window (tiny model with 1024 positions, real SQLite): a grounded reply
regenerated after its file changed is set aside with its own sources; paging back to it shows them (the passage of the
file as it was), paging forward the new ones; the window closed and a new one opened on the same history file shows
the same; and a version set aside before schema v9 kept sources pages to no sources section at all."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from app.history import versions
from app.widgets.version_pager import VersionPager
from tests.app._gui_fixtures import REPLY_TIMEOUT_MS, Reopener, greedy, settings  # noqa: F401 (fixtures)
from tests.app.window.test_attachments import drop_files, wait_read

pytestmark = [pytest.mark.qt_log_ignore("propagateSizeHints")]


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    from tests.helpers.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-1k"), max_position_embeddings=1024)


@pytest.fixture
def open_window(qtbot, settings, tmp_path, tiny_model_dir):  # noqa: F811
    """A real window on a history file in ``tmp_path``; the one open before is shut and its store closed first."""
    windows = Reopener(qtbot, settings, tmp_path / "history.sqlite3", tiny_model_dir, greedy(4))
    yield windows.open
    windows.close()


def reply_bubble(window):
    return window.chat.widgets()[-1]


def passage(window) -> str:
    sources = reply_bubble(window).sources
    return "" if sources is None else sources.used.sources[0].text


def page_to(qtbot, window, place: int) -> None:
    pager = reply_bubble(window).findChild(VersionPager)
    assert pager is not None and not pager.isHidden()
    button = pager.previous_button if place < pager.shown else pager.next_button
    with qtbot.waitSignal(window.versions.version_shown, timeout=REPLY_TIMEOUT_MS):
        qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    assert pager.label.text().startswith(f"{place}/") or reply_bubble(window).findChild(VersionPager).shown == place


def test_paging_back_to_a_regenerated_replys_earlier_version_shows_its_own_sources_even_after_reopening(
        qtbot, open_window, tmp_path):
    window = open_window()
    notes = tmp_path / "notes.md"
    notes.write_text("# Tea\n\nThe kettle in room 4 boils water in ninety seconds.\n", encoding="utf-8")
    drop_files(window.composer, [notes])
    wait_read(qtbot, window.composer.chips.chip(str(notes)))
    window.prompt.setPlainText("How fast does the kettle boil?")
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS):
        qtbot.mouseClick(window.send_button, Qt.MouseButton.LeftButton)
    assert "ninety seconds" in passage(window)

    # The file changes; Regenerate reads it again: the new reply's sources are the new text, the old one set aside.
    notes.write_text("# Tea\n\nThe new kettle boils water in two minutes.\n", encoding="utf-8")
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS):
        reply_bubble(window)._buttons["regenerate"].click()
    assert "two minutes" in passage(window)
    mid = reply_bubble(window).message.message_id
    page_to(qtbot, window, 1)
    assert "ninety seconds" in passage(window)
    assert [b.text() for b in reply_bubble(window).sources.buttons] == ["[1] notes.md"]
    assert "ninety seconds" in window.controller.messages()[-1].documents.sources[0].text  # what a follow-up answers
    page_to(qtbot, window, 2)
    assert "two minutes" in passage(window)
    page_to(qtbot, window, 1)  # the choice left stored: version 1

    cid = window.controller.conversation_id
    reopened = open_window()
    reopened.controller.open(cid)
    qtbot.waitUntil(lambda: len(reopened.chat.widgets()) == 2)
    assert reply_bubble(reopened).message.message_id == mid
    assert "ninety seconds" in passage(reopened)
    page_to(qtbot, reopened, 2)
    assert "two minutes" in passage(reopened)

    # A version set aside before v9 kept sources (its cell empty): paging to it shows no sources section.
    reopened.store._conn.execute("UPDATE versions SET documents = '' WHERE position = 1")
    page_to(qtbot, reopened, 1)
    assert reply_bubble(reopened).sources is None and reopened.controller.messages()[-1].documents is None
    assert [v.documents is None for v in versions.versions(reopened.store, mid)] == [True, False]
