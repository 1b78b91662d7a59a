"""The prompt box: Enter sends, Shift+Enter starts a new line.

Owns the text field's key handling only; the window decides what a submission does.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import QPlainTextEdit, QWidget

MAX_LINES_SHOWN = 8  # the box grows with its text up to this, then scrolls


class PromptBox(QPlainTextEdit):
    """Multi-line prompt field.

    Signals:
        submitted(): Enter was pressed (without Shift): the text is ready to send.
    """

    submitted = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("prompt")
        self.setPlaceholderText("Message Miaohui…  (Enter to send, Shift+Enter for a new line)")
        self.setTabChangesFocus(True)
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

    def _fit(self) -> None:
        blocks = self.document().blockCount()
        lines = max(1, min(MAX_LINES_SHOWN, blocks))
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded if blocks > MAX_LINES_SHOWN
                                        else Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        margins = self.contentsMargins()
        chrome = margins.top() + margins.bottom() + 2 * int(self.document().documentMargin()) + 12
        self.setFixedHeight(lines * self.fontMetrics().lineSpacing() + chrome)
