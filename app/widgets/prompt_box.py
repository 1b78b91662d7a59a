"""The prompt box (Enter sends, Shift+Enter starts a new line) and the composer around it: the prompt,
Send and Stop, the line that says a message is being edited, with Cancel edit, the attached files' chips above the
prompt with the Attach button, and under the prompt the forecast of what sending it will use and cost, with the
attached documents' two choices (whole text, retrieved passages) under it (``app.window.prompt_meter`` measures it).

Owns the text field's key handling, the composer's layout, and turning an Attach pick, files dropped on the composer
and file URLs pasted into the prompt into one ``files_offered`` list, and pasted image data (a screenshot copied to
the clipboard) into ``image_pasted`` PNG bytes; the line saying the loaded model cannot see the attached pictures; the window decides what a submission, Stop,
Cancel edit and offered files do (``app.window.attachments`` reads them).
"""

from __future__ import annotations

from PySide6.QtCore import QBuffer, QIODevice, QMimeData, QT_TRANSLATE_NOOP, Qt, Signal
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QImage, QKeyEvent
from PySide6.QtWidgets import QFileDialog, QHBoxLayout, QLabel, QPlainTextEdit, QPushButton, QVBoxLayout, QWidget

from app.ui import accessibility
from app.widgets.attachment_chips import AttachmentChips

MAX_LINES_SHOWN = 8  # the box grows with its text up to this, then scrolls
EDITING_TEXT = QT_TRANSLATE_NOOP("Composer", "Editing a message: Send replaces it and every later message.")


def local_files(mime: QMimeData) -> list[str]:
    """The local files among ``mime``'s URLs (a dragged or pasted file manager selection), in order."""
    return [url.toLocalFile() for url in mime.urls() if url.isLocalFile()] if mime.hasUrls() else []


def image_png(mime: QMimeData) -> bytes | None:
    """``mime``'s image data (a copied screenshot or picture) as PNG bytes; None when it holds none. PNG because it
    keeps every pixel of a screenshot, whatever form the clipboard held it in."""
    if not mime.hasImage():
        return None
    image = mime.imageData()
    if not isinstance(image, QImage) or image.isNull():
        return None
    buffer = QBuffer()
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    if not image.save(buffer, "PNG"):
        return None
    return bytes(buffer.data().data())


class PromptBox(QPlainTextEdit):
    """Multi-line prompt field.

    Signals:
        submitted(): Enter was pressed (without Shift): the text is ready to send.
        files_pasted(list): file URLs were pasted or dropped into the field: their local paths (not inserted as text).
        image_pasted(bytes): image data was pasted or dropped into the field (a screenshot): PNG bytes.
    """

    submitted = Signal()
    files_pasted = Signal(list)
    image_pasted = Signal(bytes)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("prompt")
        self.setPlaceholderText(self.tr("Message Miaohui…  (Enter to send, Shift+Enter for a new line)"))
        self.setTabChangesFocus(True)
        accessibility.name(self, self.tr("Message"), self.tr("Enter sends, Shift+Enter starts a new line"))
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.textChanged.connect(self._fit)
        self._fit()

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 (Qt override)
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            if event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
                self.insertPlainText("\n")
            else:
                self.submitted.emit()
            event.accept()
            return
        super().keyPressEvent(event)

    def canInsertFromMimeData(self, source: QMimeData) -> bool:  # noqa: N802 (Qt override)
        return bool(local_files(source)) or source.hasImage() or super().canInsertFromMimeData(source)

    def insertFromMimeData(self, source: QMimeData) -> None:  # noqa: N802 (Qt override: paste and drop)
        if files := local_files(source):
            self.files_pasted.emit(files)
            return
        if (png := image_png(source)) is not None:
            self.image_pasted.emit(png)
            return
        super().insertFromMimeData(source)

    def _fit(self) -> None:
        blocks = self.document().blockCount()
        lines = max(1, min(MAX_LINES_SHOWN, blocks))
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded if blocks > MAX_LINES_SHOWN
                                        else Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        margins = self.contentsMargins()
        chrome = margins.top() + margins.bottom() + 2 * int(self.document().documentMargin()) + 12
        self.setFixedHeight(lines * self.fontMetrics().lineSpacing() + chrome)


class Composer(QWidget):
    """The prompt with Send and Stop beside it, the attached files' chips and Attach above it, and the editing line
    above those (hidden unless editing).

    Signals:
        files_offered(list): the user attached these local paths (the Attach dialog, a drop, a paste), in order.
        image_pasted(bytes): the user pasted or dropped image data (a screenshot): PNG bytes.
    """

    files_offered = Signal(list)
    image_pasted = Signal(bytes)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setAcceptDrops(True)
        self.prompt = PromptBox()
        self.prompt.files_pasted.connect(self.files_offered)
        self.prompt.image_pasted.connect(self.image_pasted)
        self.chips = AttachmentChips()
        self.attach_button = QPushButton(self.tr("Attach…"))
        self.attach_button.setFlat(True)
        self.attach_button.setToolTip(self.tr("Attach files to answer from, or pictures to ask about (or drop or "
                                              "paste them here): text, Markdown, PDF, Word, HTML, CSV, JSON, code; "
                                              "PNG, JPEG, GIF, WebP, BMP"))
        self.attach_button.clicked.connect(self.on_attach_button_clicked)
        self.send_button = QPushButton(self.tr("Send"))
        self.send_button.setObjectName("primary")
        self.send_button.setToolTip(self.tr("Send (Enter)"))
        self.stop_button = QPushButton(self.tr("Stop"))
        self.stop_button.setObjectName("danger")
        self.stop_button.setToolTip(self.tr("Stop the reply or the load (Esc)"))
        self.editing_label = QLabel("")
        self.editing_label.setObjectName("notice")
        self.cancel_edit_button = QPushButton(self.tr("Cancel edit"))
        self.cancel_edit_button.setFlat(True)
        self.cancel_edit_button.setToolTip(self.tr("Keep the message as it was"))
        for button in (self.send_button, self.stop_button, self.cancel_edit_button, self.attach_button):
            button.setAccessibleDescription(button.toolTip())
        layout = QVBoxLayout(self)
        layout.setContentsMargins(24, 8, 24, 12)
        edit_row = QHBoxLayout()
        edit_row.addWidget(self.editing_label, 1)
        edit_row.addWidget(self.cancel_edit_button)
        layout.addLayout(edit_row)
        self._attach_row = attach_row = QHBoxLayout()
        attach_row.addWidget(self.chips, 1)
        attach_row.addWidget(self.attach_button)
        layout.addLayout(attach_row)
        prompt_row = QHBoxLayout()
        prompt_row.setSpacing(8)
        prompt_row.addWidget(self.prompt, 1)
        buttons = QVBoxLayout()
        buttons.addWidget(self.send_button)
        buttons.addWidget(self.stop_button)
        buttons.addStretch(1)
        prompt_row.addLayout(buttons)
        layout.addLayout(prompt_row)
        # What sending the message being written will use and cost (filled by app.window.prompt_meter), and a warning.
        self.forecast_label = QLabel("")
        self.forecast_label.setObjectName("footer")
        # With files attached: both documents choices and which one is used (app.window.docs_forecast).
        self.docs_forecast_label = QLabel("")
        self.docs_forecast_label.setObjectName("footer")
        self.forecast_warning = QLabel("")
        self.forecast_warning.setObjectName("notice")
        # With pictures attached and a model that cannot see them: says so before Send (app.window.image_turns).
        self.images_note = QLabel("")
        self.images_note.setObjectName("notice")
        for label in (self.forecast_label, self.docs_forecast_label, self.forecast_warning, self.images_note):
            label.setWordWrap(True)
            label.setTextFormat(Qt.TextFormat.PlainText)
            layout.addWidget(label)
        self.show_forecast("")
        self.show_docs_forecast("")
        self.show_images_note("")
        self.show_editing(False)

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:  # noqa: N802 (Qt override)
        if local_files(event.mimeData()) or event.mimeData().hasImage():
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:  # noqa: N802 (Qt override)
        if files := local_files(event.mimeData()):
            event.acceptProposedAction()
            self.files_offered.emit(files)
        elif (png := image_png(event.mimeData())) is not None:  # a picture dragged from a browser: its pixels
            event.acceptProposedAction()
            self.image_pasted.emit(png)

    def on_attach_button_clicked(self) -> None:
        files, _ = QFileDialog.getOpenFileNames(self, self.tr("Attach files"), "", self.tr(
            "Documents and images (*.txt *.md *.pdf *.docx *.html *.htm *.csv *.json *.py *.js *.ts *.c *.cpp *.h "
            "*.java *.go *.rs *.png *.jpg *.jpeg *.gif *.webp *.bmp);;Images (*.png *.jpg *.jpeg *.gif *.webp *.bmp)"
            ";;All files (*)"))
        if files:
            self.files_offered.emit(files)

    def add_beside_attach(self, widget: QWidget) -> None:
        """Put ``widget`` just before the Attach button (the conversation's 📚 collections: app.window.docs_choice)."""
        row = self._attach_row
        # A stretch-0 spacer first: with no chip shown it takes the room, so the two buttons sit together on the
        # right; with chips shown their stretch (1) takes it.
        row.insertStretch(row.indexOf(self.attach_button), 0)
        row.insertWidget(row.indexOf(self.attach_button), widget)

    def show_forecast(self, figures: str, warning: str = "", details: str = "") -> None:
        """Show the figures of the message being written (``details`` as their tooltip; empty hides them) and a
        warning to read before sending it (empty: none)."""
        self.forecast_label.setText(figures)
        self.forecast_label.setToolTip(details)
        self.forecast_label.setVisible(bool(figures))
        self.forecast_warning.setText(warning)
        self.forecast_warning.setVisible(bool(warning))

    def show_docs_forecast(self, lines: str, details: str = "") -> None:
        """Show the attached documents' two choices (one per line; empty hides them), ``details`` as their tooltip."""
        self.docs_forecast_label.setText(lines)
        self.docs_forecast_label.setToolTip(details)
        self.docs_forecast_label.setVisible(bool(lines))

    def show_images_note(self, line: str) -> None:
        """Show the line about the attached pictures (empty hides it)."""
        self.images_note.setText(line)
        self.images_note.setVisible(bool(line))

    def show_editing(self, editing: bool) -> None:
        """Show or hide the line saying that Send replaces the message being edited."""
        self.editing_label.setText(self.tr(EDITING_TEXT) if editing else "")
        self.editing_label.setVisible(editing)
        self.cancel_edit_button.setVisible(editing)
