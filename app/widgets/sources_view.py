"""Under a reply grounded in attached files: what was added (whole or retrieved, how many passages and tokens, how
long preparing them, or retrieving them, took) and its numbered sources, ``[1] file · page p``; clicking one shows
the passage's text.

Owns that section of a reply bubble and the small passage window; the sources themselves come from the engine
(``engine.docs.attach.DocumentsUsed``) through the chat controller.
"""

from __future__ import annotations

from pathlib import PurePath

from PySide6.QtCore import QT_TRANSLATE_NOOP, QCoreApplication, Qt
from PySide6.QtWidgets import QDialog, QLabel, QPlainTextEdit, QPushButton, QVBoxLayout, QWidget

from engine.docs.attach import DocumentsUsed
from engine.docs.grounding import Source

MODE_NAMES = {"whole": QT_TRANSLATE_NOOP("SourcesSection", "whole text"),
              "retrieve": QT_TRANSLATE_NOOP("SourcesSection", "retrieved passages")}


def source_label(number: int, source: Source) -> str:
    name = PurePath(source.path).name or source.path
    return f"[{number}] {name}" if source.page is None else f"[{number}] {name} · p. {source.page}"


def show_documents(bubble: QWidget, anchor: QWidget, attachments: tuple[str, ...],
                   used: DocumentsUsed | None) -> None:
    """Under a bubble's ``anchor`` (its text): the names of the files attached to its message, or the sources of its
    reply; built once, kept on the bubble as ``attached`` / ``sources`` (a streaming re-render passes None: kept)."""
    layout = bubble.layout()
    if attachments and bubble.attached is None:
        bubble.attached = QLabel(QCoreApplication.translate("MessageWidget", "Attached: {names}").format(
            names=", ".join(PurePath(path).name for path in attachments)))
        bubble.attached.setObjectName("footer")
        bubble.attached.setTextFormat(Qt.TextFormat.PlainText)
        bubble.attached.setWordWrap(True)
        layout.insertWidget(layout.indexOf(anchor) + 1, bubble.attached)
    if used is not None and (bubble.sources is None or bubble.sources.used is not used):
        if bubble.sources is not None:
            bubble.sources.deleteLater()
        bubble.sources = SourcesSection(used)
        layout.insertWidget(layout.indexOf(anchor) + 1, bubble.sources)


def drop_sources(bubble: QWidget) -> None:
    """The reply is now shown without sources (another version of it, given none): its sources section goes."""
    if bubble.sources is not None:
        bubble.layout().removeWidget(bubble.sources)
        bubble.sources.deleteLater()
        bubble.sources = None


class PassageDialog(QDialog):
    """One source's text, plain, read-only; not modal, so the chat stays usable beside it."""

    def __init__(self, title: str, text: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle(title)
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.text_view = QPlainTextEdit()
        self.text_view.setReadOnly(True)
        self.text_view.setPlainText(text)
        layout = QVBoxLayout(self)
        layout.addWidget(self.text_view)
        self.resize(520, 360)


class SourcesSection(QWidget):
    """The figures line and one button per source; a button's tooltip is the start of its passage."""

    def __init__(self, used: DocumentsUsed, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("sources")
        self.used = used
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 4, 0, 0)
        layout.setSpacing(2)
        self.summary = QLabel(self.summary_text(used))
        self.summary.setObjectName("footer")
        self.summary.setTextFormat(Qt.TextFormat.PlainText)
        self.summary.setWordWrap(True)
        layout.addWidget(self.summary)
        self.buttons: list[QPushButton] = []
        self.dialog: PassageDialog | None = None  # the passage shown last
        for number, source in enumerate(used.sources, start=1):
            button = QPushButton(source_label(number, source))
            button.setFlat(True)
            button.setCursor(Qt.CursorShape.PointingHandCursor)
            button.setToolTip(source.text.strip()[:300])
            button.setProperty("source_number", number)
            button.clicked.connect(self.on_source_button_clicked)
            layout.addWidget(button, 0, Qt.AlignmentFlag.AlignLeft)
            self.buttons.append(button)

    def summary_text(self, used: DocumentsUsed) -> str:
        mode = self.tr(MODE_NAMES[used.mode])
        if not used.sources:
            return self.tr("Sources ({mode}): no passage matched · {ms:.0f} ms").format(mode=mode,
                                                                                       ms=used.prepare_s * 1000)
        if used.mode == "retrieve":  # the time is the retrieval's: indexing the attached files and searching
            return self.tr("Sources ({mode}): {n} passages · {tokens} tokens added · retrieval {ms:.0f} ms").format(
                mode=mode, n=len(used.sources), tokens=used.source_tokens, ms=used.prepare_s * 1000)
        return self.tr("Sources ({mode}): {n} added · {tokens} tokens · prepared in {ms:.0f} ms").format(
            mode=mode, n=len(used.sources), tokens=used.source_tokens, ms=used.prepare_s * 1000)

    def on_source_button_clicked(self) -> None:
        number = int(self.sender().property("source_number"))
        source = self.used.sources[number - 1]
        self.dialog = PassageDialog(source_label(number, source), source.text.strip(), self.window())
        self.dialog.show()
