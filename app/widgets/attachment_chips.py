"""The row of attached files above the prompt: one chip per file with its name, then its pages and tokens once read
(or its one-line error), and a × that removes it before sending. An image's chip shows its thumbnail and size
(``add_image``).

Owns the chips' look and their remove button only; which files are attached, reading them and what a send takes
is ``app.window.attachments``'s.
"""

from __future__ import annotations

from pathlib import PurePath

from PySide6.QtCore import QT_TRANSLATE_NOOP, Qt, Signal
from PySide6.QtGui import QPixmap
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QSizePolicy, QToolButton, QVBoxLayout, QWidget

READING_TEXT = QT_TRANSLATE_NOOP("AttachmentChip", "reading…")
THUMBNAIL_HEIGHT = 40  # px: a screenshot's shape still reads at this size, and the row stays one line high


class AttachmentChip(QFrame):
    """One attached file.

    Signals:
        remove_clicked(str): the user pressed × on the file at this path.
    """

    remove_clicked = Signal(str)

    def __init__(self, path: str, parent: QWidget | None = None, name: str = "") -> None:
        super().__init__(parent)
        self.path = path
        self.setObjectName("attachmentChip")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(8, 2, 2, 2)
        layout.setSpacing(6)
        self.thumbnail = QLabel()  # an image's picture, shown by show_thumbnail
        self.thumbnail.setVisible(False)
        self.name_label = QLabel(name or PurePath(path).name)
        self.name_label.setTextFormat(Qt.TextFormat.PlainText)
        self.detail_label = QLabel(self.tr(READING_TEXT))
        self.detail_label.setObjectName("footer")
        self.detail_label.setTextFormat(Qt.TextFormat.PlainText)
        self.remove_button = QToolButton()
        self.remove_button.setText("×")
        self.remove_button.setAutoRaise(True)
        self.remove_button.setToolTip(self.tr("Remove this file"))
        self.remove_button.setAccessibleName(self.tr("Remove {name}").format(name=self.name_label.text()))
        self.remove_button.clicked.connect(self.on_remove_button_clicked)
        self.setToolTip(path)
        for widget in (self.thumbnail, self.name_label, self.detail_label, self.remove_button):
            layout.addWidget(widget)
        self.error = ""  # the one line that says why the file cannot be used (empty: it can, or is being read)

    def show_read(self, pages: int, tokens: int) -> None:
        text = (self.tr("{tokens} tokens").format(tokens=tokens) if pages <= 1 else
                self.tr("{pages} pages · {tokens} tokens").format(pages=pages, tokens=tokens))
        self.detail_label.setText(text)

    def show_thumbnail(self, image_file: str, width: int, height: int) -> None:
        """An image's chip: its picture scaled to the chip's height, and its size in pixels."""
        picture = QPixmap(image_file)
        if not picture.isNull():  # Qt without a decoder for this format: the size alone says what it is
            self.thumbnail.setPixmap(picture.scaledToHeight(THUMBNAIL_HEIGHT, Qt.TransformationMode.SmoothTransformation))
            self.thumbnail.setVisible(True)
        # Its name over its size beside the picture, and never narrower than them: side by side, a narrow composer
        # clipped "image · 120×80" to "image · 1".
        row = self.layout()
        column = QVBoxLayout()
        column.setSpacing(0)
        for label in (self.name_label, self.detail_label):
            row.removeWidget(label)
            column.addWidget(label)
        row.insertLayout(row.indexOf(self.thumbnail) + 1, column)
        self.setSizePolicy(QSizePolicy.Policy.Minimum, QSizePolicy.Policy.Preferred)
        self.detail_label.setText(self.tr("image · {width}×{height}").format(width=width, height=height))

    def show_error(self, error: str) -> None:
        self.error = error
        self.setObjectName("attachmentChipError")
        self.detail_label.setObjectName("notice")
        self.detail_label.setText(error)
        self.detail_label.setToolTip(error)
        self.style().unpolish(self)
        self.style().polish(self)

    def on_remove_button_clicked(self) -> None:
        self.remove_clicked.emit(self.path)


class AttachmentChips(QWidget):
    """The chips, left to right in the order the files were attached; hidden when there are none.

    Signals:
        remove_requested(str): the user pressed × on the chip of this path.
    """

    remove_requested = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._layout = QHBoxLayout(self)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._layout.setSpacing(6)
        self._layout.addStretch(1)
        self._chips: dict[str, AttachmentChip] = {}
        self.setVisible(False)

    def chips(self) -> list[AttachmentChip]:
        return list(self._chips.values())

    def chip(self, path: str) -> AttachmentChip | None:
        return self._chips.get(path)

    def add(self, path: str, name: str = "") -> AttachmentChip:
        """A chip for ``path``, named ``name`` (default: the file's name)."""
        chip = AttachmentChip(path, name=name)
        chip.remove_clicked.connect(self.remove_requested)
        self._layout.insertWidget(self._layout.count() - 1, chip)  # before the stretch
        self._chips[path] = chip
        self.setVisible(True)
        return chip

    def remove(self, path: str) -> None:
        chip = self._chips.pop(path, None)
        if chip is not None:
            self._layout.removeWidget(chip)
            chip.deleteLater()
        self.setVisible(bool(self._chips))

    def clear(self) -> None:
        for path in list(self._chips):
            self.remove(path)
