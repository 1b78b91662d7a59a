"""A reply's Markdown images never make the app open a file (issue 18, defect 1): app/ui/markdown_view.py."""

from __future__ import annotations

import errno
import os
import threading
import time
from pathlib import Path

import pytest

from app.ui.markdown_view import IMAGE_LABEL, InertDocument, MessageBrowser, render_markdown


class FifoWatch:
    """A FIFO that records whether anyone opened it for reading, without ever blocking the reader.

    A writer polls ``open(O_WRONLY | O_NONBLOCK)``, which fails with ENXIO while no reader has it open;
    the moment a reader opens it, the writer's open succeeds, the open is recorded and the writer closes
    at once, so a reader would see end-of-file rather than hang the test.
    """

    def __init__(self, path: Path) -> None:
        os.mkfifo(path)
        self.path = path
        self.opened = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.is_set():
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as error:
                if error.errno != errno.ENXIO:
                    raise
                time.sleep(0.002)
                continue
            self.opened.set()
            os.close(fd)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


@pytest.fixture
def fifo(tmp_path):
    watch = FifoWatch(tmp_path / "image.png")
    yield watch
    watch.close()


def _url_forms(path: Path) -> list[str]:
    return [str(path), path.as_uri(), "file://" + str(path), f"<{path}>"]


@pytest.mark.parametrize("form", range(4))
def test_an_image_in_a_reply_opens_no_file_and_renders_as_text(qtbot, fifo, form):
    url = _url_forms(fifo.path)[form]
    browser = MessageBrowser()
    qtbot.addWidget(browser)
    browser.resize(500, 300)
    browser.show()
    reply = f"Look: ![a picture]({url}) and more.\n\nA second paragraph ![again]({url})"
    for end in range(8, len(reply) + 1, 7):  # streamed, as the window shows it
        browser.show_markdown(reply[:end])
    browser.show_markdown(reply)
    browser.grab()  # lay out and paint
    qtbot.wait(50)
    assert not fifo.opened.is_set()
    text = browser.document().toPlainText()
    assert "\ufffc" not in text  # no image object left in the document
    assert text.count("[image: ") == 2


@pytest.mark.parametrize("url", ["/dev/zero", "relative/picture.png", "//host/share/picture.png",
                                 "C:\\Users\\me\\picture.png", "http://example.invalid/p.png",
                                 "data:image/png;base64,iVBORw0KGgo="])
def test_every_url_form_becomes_inert_text(qtbot, url):
    browser = MessageBrowser()
    qtbot.addWidget(browser)
    browser.show_markdown(f"![x]({url})")
    browser.grab()
    assert browser.document().toPlainText() == IMAGE_LABEL.format(url)


def test_reference_style_and_heading_images_are_defused(qtbot, fifo):
    browser = MessageBrowser()
    qtbot.addWidget(browser)
    # One block of text: the window renders a streamed reply in pieces split at blank lines.
    browser.show_markdown(f"[ref]: {fifo.path}\n# Title ![x][ref]\n- item ![y][ref]\n> quote ![z]({fifo.path})\n")
    browser.grab()
    qtbot.wait(50)
    assert not fifo.opened.is_set()
    assert browser.document().toPlainText().count(f"[image: {fifo.path}]") == 3


def test_a_long_image_url_is_shortened_in_its_placeholder(qtbot):
    browser = MessageBrowser()
    qtbot.addWidget(browser)
    url = "/" + "a" * 300 + ".png"
    browser.show_markdown(f"![x]({url})")
    shown = browser.document().toPlainText()
    assert shown.startswith("[image: /aaa") and shown.endswith("…]") and len(shown) < 100


def test_the_documents_never_load_a_resource_themselves(qapp, fifo):
    """Defence in depth: even an image that reached a document gets a blank placeholder, not the file."""
    document = InertDocument()
    from PySide6.QtCore import QUrl
    from PySide6.QtGui import QTextDocument

    value = document.resource(QTextDocument.ResourceType.ImageResource, QUrl.fromLocalFile(str(fifo.path)))
    assert value is not None and value.width() == 1
    assert not fifo.opened.is_set()
    render_markdown(document, f"![x]({fifo.path})")
    document.setTextWidth(200)
    document.size()
    assert not fifo.opened.is_set()
