"""A sent message's pictures (issue 44): ``ImageStrip``, a row of thumbnails in its bubble, and ``ImageDialog``, one
picture at full size (scrolled when larger than the screen) opened by clicking its thumbnail.

Owns how the pictures look in the conversation; not keeping them (``engine.vision.image_store``) nor which a message
has (``app.history.images_cell``). A picture whose file is gone from the images folder shows one line saying so, never
an empty frame.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Sequence

from PySide6.QtCore import QT_TRANSLATE_NOOP, QSize, Qt, Signal, Slot
from PySide6.QtGui import QIcon, QPixmap
from PySide6.QtWidgets import QDialog, QHBoxLayout, QLabel, QScrollArea, QToolButton, QVBoxLayout, QWidget

THUMBNAIL = 160  # px, the longer side: enough to recognise a screenshot, small beside the text
MISSING = QT_TRANSLATE_NOOP("ImageStrip", "picture missing from the images folder")


class ImageDialog(QDialog):
    """One picture at its own size, in a scroll area when larger than the dialog."""

    def __init__(self, image_file: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle(self.tr("Picture"))
        picture = QPixmap(image_file)
        self.picture = QLabel()
        self.picture.setAlignment(Qt.AlignmentFlag.AlignCenter)
        if picture.isNull():
            self.picture.setText(self.tr(MISSING))
        else:
            self.picture.setPixmap(picture)
            self.picture.setAccessibleName(self.tr("Picture {width}×{height}").format(width=picture.width(),
                                                                                       height=picture.height()))
        scroll = QScrollArea()
        scroll.setWidget(self.picture)
        scroll.setWidgetResizable(True)
        layout = QVBoxLayout(self)
        layout.addWidget(scroll)
        screen = self.screen().availableGeometry().size() if self.screen() is not None else QSize(1280, 800)
        wanted = picture.size() + QSize(40, 40) if not picture.isNull() else QSize(360, 120)
        self.resize(wanted.boundedTo(screen * 0.9))


class ImageStrip(QWidget):
    """The thumbnails of a message's pictures, left to right in the order they were attached.

    Signals:
        image_clicked(str): the user clicked the thumbnail of this image file (the strip opens it full size).
    """

    image_clicked = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._layout = QHBoxLayout(self)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._layout.setSpacing(6)
        self._layout.addStretch(1)
        self.buttons: list[QToolButton] = []
        self._files: tuple[str, ...] = ()
        self.image_clicked.connect(self.on_image_clicked)

    def show_images(self, files: Sequence[str]) -> None:
        if tuple(files) == self._files:
            return  # a streaming re-render of the bubble: the thumbnails stand
        self._files = tuple(files)
        for button in self.buttons:
            self._layout.removeWidget(button)
            button.deleteLater()
        self.buttons = [self._thumbnail(path) for path in files]
        for button in self.buttons:
            self._layout.insertWidget(self._layout.count() - 1, button)
        self.setVisible(bool(files))

    def _thumbnail(self, path: str) -> QToolButton:
        button = QToolButton()
        button.setAutoRaise(True)
        picture = QPixmap(path)
        if picture.isNull():
            button.setText(self.tr(MISSING))
            button.setEnabled(False)
        else:
            small = picture.scaled(THUMBNAIL, THUMBNAIL, Qt.AspectRatioMode.KeepAspectRatio,
                                   Qt.TransformationMode.SmoothTransformation)
            button.setIcon(QIcon(small))
            button.setIconSize(small.size())
            button.setToolTip(self.tr("{width}×{height}: click to see it full size").format(
                width=picture.width(), height=picture.height()))
        button.setAccessibleName(self.tr("Picture {name}").format(name=PurePath(path).name[:12]))
        button.clicked.connect(lambda _checked=False, path=path: self.image_clicked.emit(path))
        return button

    @Slot(str)
    def on_image_clicked(self, path: str) -> None:
        ImageDialog(path, self).open()
