"""The one channel for messages to the user: a dismissable strip above the chat plus the status bar.

Owns how a message looks (info, warning, error) and how long it stays; never shows a traceback
(callers pass one line, and only the first line of anything longer is shown). The level's icon is the style's
own message-box icon: the glyphs it was before (⛔, ℹ) are missing from many UI fonts and drew an empty box.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, QTimer, Slot
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QStatusBar, QStyle, QToolButton, QWidget

from app.ui import accessibility

INFO_TIMEOUT_MS = 8000  # info fades; warnings and errors stay until dismissed or replaced
ICON_PX = 16
ICONS = {"error": QStyle.StandardPixmap.SP_MessageBoxCritical, "warning": QStyle.StandardPixmap.SP_MessageBoxWarning}


class MessageArea(QFrame):
    """A non-modal message strip; ``show_message`` also mirrors the line in the status bar."""

    def __init__(self, status_bar: QStatusBar | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("messageArea")
        self._status_bar = status_bar
        layout = QHBoxLayout(self)
        layout.setContentsMargins(12, 6, 6, 6)
        self._icon = QLabel()
        layout.addWidget(self._icon)
        self.label = QLabel()
        self.label.setWordWrap(True)
        self.label.setTextFormat(Qt.TextFormat.PlainText)  # messages may quote user text or paths
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.label, 1)
        close = QToolButton()
        close.setText("✕")
        close.setAutoRaise(True)
        close.setToolTip(self.tr("Dismiss this message"))
        accessibility.name(close, self.tr("Dismiss"))  # not "✕": a screen reader would say "multiplication sign"
        self.close_button = close
        close.clicked.connect(self.on_close_clicked)
        layout.addWidget(close)
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.timeout.connect(self.on_close_clicked)
        self.level = ""
        self.hide()

    def show_message(self, text: str, level: str = "info") -> None:
        line = (text.strip().splitlines() or [""])[0]
        self.level = level
        icon = self.style().standardIcon(ICONS.get(level, QStyle.StandardPixmap.SP_MessageBoxInformation))
        self._icon.setPixmap(icon.pixmap(ICON_PX, ICON_PX))
        self.label.setText(line)
        self.setProperty("level", level)
        self.style().unpolish(self)
        self.style().polish(self)
        self.show()
        if self._status_bar is not None:
            self._status_bar.showMessage(line, INFO_TIMEOUT_MS)
        if level == "info":
            self._timer.start(INFO_TIMEOUT_MS)
        else:
            self._timer.stop()

    def text(self) -> str:
        return self.label.text() if self.isVisible() else ""

    @Slot()
    def on_close_clicked(self) -> None:
        self.hide()
        self.level = ""
