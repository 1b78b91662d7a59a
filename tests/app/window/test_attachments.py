"""Attaching files in the real window on the tiny model: a drop on the composer makes a chip that the engine thread
fills with tokens, × removes one, Send grounds the message (the prompt the engine built is seen by wrapping the real
``build_prompt``) and the reply lists its source; a binary file named .txt shows its one-line error and is left out."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication

from tests.app._gui_fixtures import REPLY_TIMEOUT_MS, make_window, settings, store  # noqa: F401 (fixtures)
from tests.helpers.prompts import prompts  # noqa: F401 (fixture)

READ_TIMEOUT_MS = 60_000


def drop_files(composer, paths: list[Path]) -> None:
    """A drag entering the composer then a real QDropEvent carrying file URLs, as a file manager sends them (Qt
    delivers a drop only to a widget that accepted the drag's enter)."""
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(path)) for path in paths])
    at = composer.attach_button.geometry().center()  # on the composer itself, beside the chips
    enter = QDragEnterEvent(at, Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                            Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(composer, enter)
    assert enter.isAccepted()
    drop = QDropEvent(QPointF(at), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                      Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(composer, drop)
    assert drop.isAccepted()


def wait_read(qtbot, chip) -> None:
    qtbot.waitUntil(lambda: chip.detail_label.text() != chip.tr("reading…"), timeout=READ_TIMEOUT_MS)


def test_a_dropped_markdown_file_grounds_the_message_and_the_reply_lists_its_source(
        qtbot, make_window, tmp_path, prompts):
    window = make_window(max_new_tokens=4)
    notes = tmp_path / "notes.md"
    notes.write_text("# Tea\n\nThe kettle in room 4 boils water in ninety seconds.\n", encoding="utf-8")
    other = tmp_path / "other.md"
    other.write_text("# Other\n\nNothing to see here.\n", encoding="utf-8")
    drop_files(window.composer, [notes, other])
    chips = window.composer.chips
    assert [chip.name_label.text() for chip in chips.chips()] == ["notes.md", "other.md"]
    for chip in chips.chips():
        wait_read(qtbot, chip)
    tokens_text = chips.chip(str(notes)).detail_label.text()
    assert tokens_text.endswith("tokens") and int(tokens_text.split()[0]) > 5, tokens_text
    qtbot.mouseClick(chips.chip(str(other)).remove_button, Qt.MouseButton.LeftButton)
    assert [chip.name_label.text() for chip in chips.chips()] == ["notes.md"]

    window.prompt.setPlainText("How fast does the kettle boil?")
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS):
        qtbot.mouseClick(window.send_button, Qt.MouseButton.LeftButton)

    sent = prompts[-1]
    assert "Answer only from the numbered sources below." in sent
    assert "[1] notes.md\n# Tea" in sent and "ninety seconds" in sent
    assert "Nothing to see here" not in sent and "\n[2] " not in sent  # the removed chip's file stayed out
    assert sent.endswith("Question: How fast does the kettle boil?")
    assert chips.chips() == [] and chips.isHidden()
    user, reply = window.chat.widgets()[-2:]
    assert user.message.text == "How fast does the kettle boil?"  # the bubble keeps the user's own words
    assert user.attached is not None and user.attached.text() == "Attached: notes.md"
    assert window.controller.messages()[-2].attachments == (str(notes),)
    assert reply.sources is not None
    assert [button.text() for button in reply.sources.buttons] == ["[1] notes.md"]
    summary = reply.sources.summary.text()
    assert summary.startswith("Sources (whole text): 1 added · ") and " tokens · prepared in " in summary
    qtbot.mouseClick(reply.sources.buttons[0], Qt.MouseButton.LeftButton)
    dialog = reply.sources.dialog
    assert dialog is not None and dialog.isVisible()
    assert "ninety seconds" in dialog.text_view.toPlainText() and dialog.windowTitle() == "[1] notes.md"
    dialog.close()


def test_a_binary_file_named_txt_shows_its_error_and_the_message_goes_without_it(
        qtbot, make_window, tmp_path, prompts):
    window = make_window(max_new_tokens=4)
    bad = tmp_path / "photo.txt"
    bad.write_bytes(bytes(range(256)) * 64)
    drop_files(window.composer, [bad])
    chip = window.composer.chips.chip(str(bad))
    wait_read(qtbot, chip)
    assert chip.error and "\n" not in chip.error and "photo.txt" in chip.error, chip.error
    assert chip.detail_label.text() == chip.error
    window.prompt.setPlainText("Hello there")
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS) as blocker:
        qtbot.mouseClick(window.send_button, Qt.MouseButton.LeftButton)
    assert blocker.args[0] != "error"
    assert prompts[-1] == "Hello there"  # not grounded: the only file could not be read
    reply = window.chat.widgets()[-1]
    assert reply.sources is None


def test_file_urls_pasted_into_the_prompt_attach_them_instead_of_inserting_text(qtbot, make_window, tmp_path):
    window = make_window(loaded=False)
    notes = tmp_path / "paste.md"
    notes.write_text("pasted", encoding="utf-8")
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(notes))])
    QApplication.clipboard().setMimeData(mime)  # the clipboard owns it from here
    try:
        window.prompt.setFocus()
        window.prompt.paste()
    finally:
        # emptied while the application lives: mime data the clipboard still held when the interpreter exited
        # crashed the test process at exit (segmentation fault, after every test had passed)
        QApplication.clipboard().clear()
    assert window.prompt.toPlainText() == ""
    chip = window.composer.chips.chip(str(notes))
    assert chip is not None
    wait_read(qtbot, chip)  # no model yet: reading needs its tokenizer, said in one line
    assert chip.error == "no model loaded: choose a model and press Load"
