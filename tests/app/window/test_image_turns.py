"""Pictures in the real window (issue 44): a screenshot pasted into the prompt becomes a chip with its thumbnail; a
text model says before Send that it cannot see it; a random-weight LLaVA folder (tests/helpers/vision_models.py)
loaded from the model picker answers about it, the bubble shows the thumbnail (a click opens it full size), the
panel's TTFT rows give its image tokens and the vision encoder's time, a follow-up reuses the cached picture, and
reopening the conversation shows it again. Screenshots go to $MIAOHUI_SHOTS when set (a person looks at them)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from PySide6.QtCore import QMimeData, Qt
from PySide6.QtGui import QColor, QImage
from PySide6.QtWidgets import QApplication

from app.widgets.image_strip import ImageDialog
from tests.app._gui_fixtures import REPLY_TIMEOUT_MS, make_window, settings, store  # noqa: F401 (fixtures)
from tests.helpers.vision_models import build_vision_family

LOAD_TIMEOUT_MS = 120_000


def paste_screenshot(window, width: int = 120, height: int = 80) -> None:
    """Ctrl+V of a screenshot: the clipboard's image data, as the prompt receives it."""
    image = QImage(width, height, QImage.Format.Format_RGB32)
    image.fill(QColor("#3a7bd5"))
    for x in range(width // 3):
        for y in range(height // 2):
            image.setPixelColor(x, y, QColor("#f5a623"))
    mime = QMimeData()
    mime.setImageData(image)
    assert window.prompt.canInsertFromMimeData(mime)
    window.prompt.insertFromMimeData(mime)


def shot(widget, name: str) -> None:
    folder = os.environ.get("MIAOHUI_SHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        QApplication.processEvents()  # pending layout requests first, as the window would have run them
        widget.grab().save(str(Path(folder) / name))


@pytest.fixture(scope="module")
def llava_dir(tmp_path_factory) -> Path:
    return build_vision_family(tmp_path_factory.mktemp("vision") / "tiny-llava", "llava")


def test_a_pasted_screenshot_is_a_chip_and_a_text_model_says_it_cannot_see_it(qtbot, make_window):
    window = make_window(max_new_tokens=2)
    paste_screenshot(window)
    (chip,) = window.composer.chips.chips()
    assert chip.name_label.text() == "pasted image" and chip.detail_label.text() == "image · 120×80"
    assert chip.thumbnail.isVisible() and not chip.thumbnail.pixmap().isNull()
    assert window.prompt.toPlainText() == ""  # the picture is not pasted as text
    note = window.composer.images_note
    assert note.isVisible() and "cannot see pictures" in note.text() and "\n" not in note.text()
    shot(window.composer, "composer-no-vision.png")
    qtbot.mouseClick(chip.remove_button, Qt.MouseButton.LeftButton)
    assert window.composer.chips.chips() == [] and not note.isVisible()
    qtbot.waitUntil(lambda: not window.bridge.is_busy(), timeout=LOAD_TIMEOUT_MS)  # the load's own figures, first


def test_a_vision_model_answers_about_a_pasted_picture_and_reuses_it_on_a_follow_up(qtbot, make_window, llava_dir,
                                                                                    store):
    window = make_window(max_new_tokens=3, loaded=False)
    with qtbot.waitSignal(window.model_ready, timeout=LOAD_TIMEOUT_MS):
        window.load_model(str(llava_dir), "fp32", "cpu")
    paste_screenshot(window)
    assert not window.composer.images_note.isVisible()  # this model sees pictures
    shot(window.composer, "composer-chip.png")
    window.prompt.setPlainText("What is in this picture?")
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS):
        qtbot.mouseClick(window.send_button, Qt.MouseButton.LeftButton)
    user, reply = window.chat.widgets()[-2:]
    assert reply.message.finish_reason == "length", reply.message.text
    (kept,) = window.controller.messages()[0].images
    assert Path(kept).is_file() and Path(kept).parent.parent.name == "images"
    assert user.images is not None and len(user.images.buttons) == 1
    assert window.composer.chips.chips() == []
    rows = window.perf_panel.ttft_view.shown()
    assert int(rows["images"].split()[0]) > 0 and " tokens · KV " in rows["images"]
    assert rows["encoder"].endswith("ms") or rows["encoder"].endswith(" s")
    shot(user, "bubble-thumbnail.png")
    shot(window.perf_panel, "panel-ttft.png")
    qtbot.mouseClick(user.images.buttons[0], Qt.MouseButton.LeftButton)
    dialog = user.images.findChild(ImageDialog)
    assert dialog is not None and dialog.isVisible() and not dialog.picture.pixmap().isNull()
    shot(dialog, "image-dialog.png")
    dialog.close()

    window.prompt.setPlainText("And its colours?")
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS):
        qtbot.mouseClick(window.send_button, Qt.MouseButton.LeftButton)
    rows = window.perf_panel.ttft_view.shown()
    assert "1 of 1 reused from the cache" in rows["images"]
    assert rows["encoder"] == "not run: the cache held every picture"
    shot(window.perf_panel, "panel-ttft-follow-up.png")

    cid = window.controller.conversation_id
    assert store.messages(cid)[0].images == (kept,)  # saved with the message (schema v11)
    window.controller.open(cid)
    first = window.chat.widgets()[0]
    assert first.images is not None and len(first.images.buttons) == 1
    shot(window, "window.png")


def test_a_dropped_image_file_a_broken_one_and_an_image_sent_to_a_text_model_lose_nothing(qtbot, make_window,
                                                                                          tmp_path):
    from tests.app.window.test_attachments import drop_files

    window = make_window(max_new_tokens=2)
    photo, broken = tmp_path / "photo.png", tmp_path / "broken.png"
    image = QImage(64, 48, QImage.Format.Format_RGB32)
    image.fill(QColor("#2e8b57"))
    assert image.save(str(photo))
    broken.write_bytes(b"\x89PNG\r\n\x1a\nnot a picture at all")
    drop_files(window.composer, [photo, broken])
    good, bad = window.composer.chips.chips()
    assert good.name_label.text() == "photo.png" and good.detail_label.text() == "image · 64×48"
    assert bad.error and "\n" not in bad.error and "broken.png" in bad.error
    qtbot.mouseClick(bad.remove_button, Qt.MouseButton.LeftButton)
    window.prompt.setPlainText("What colour is it?")
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS):
        qtbot.mouseClick(window.send_button, Qt.MouseButton.LeftButton)
    user = window.chat.widgets()[0]
    assert "has no vision" in window.messages.text() and "\n" not in window.messages.text()
    (kept,) = window.controller.messages()[0].images  # the picture stays with the question
    assert user.images is not None and len(user.images.buttons) == 1
    window.chat.edit_requested.emit(0)  # Edit: the question and its picture back in the composer
    assert window.prompt.toPlainText() == "What colour is it?"
    assert [chip.path for chip in window.composer.chips.chips()] == [kept]
    window.controller.set_editing(None)  # Cancel edit takes the picture back
    assert window.composer.chips.chips() == []
    qtbot.waitUntil(lambda: not window.bridge.is_busy(), timeout=LOAD_TIMEOUT_MS)
