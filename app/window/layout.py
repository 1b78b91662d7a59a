"""How the main window's chat column and status bar are put together: ``chat_column`` and ``status_widgets``.

Owns only the arrangement (margins, stretch, which labels sit in the status bar and in what order); what each widget
shows is the window's and its parts' (app/window/mainwindow.py wires them). The status labels keep the ``MainWindow``
translation context they were written in.
"""

from __future__ import annotations

from PySide6.QtCore import QCoreApplication, QSize, Qt
from PySide6.QtWidgets import QLabel, QProgressBar, QStatusBar, QVBoxLayout, QWidget


def chat_column(messages: QWidget, chat: QWidget, composer: QWidget) -> tuple[QWidget, QVBoxLayout]:
    """The centre column: the message area on top, the conversation (stretching), the composer; and the top's
    layout, where notes such as the first-run one go under the messages."""
    column = QWidget()
    column_layout = QVBoxLayout(column)
    column_layout.setContentsMargins(0, 0, 0, 0)
    column_layout.setSpacing(0)
    top = QWidget()
    top_layout = QVBoxLayout(top)
    top_layout.setContentsMargins(16, 8, 16, 0)
    top_layout.addWidget(messages)
    column_layout.addWidget(top)
    column_layout.addWidget(chat, 1)
    column_layout.addWidget(composer)
    return column, top_layout


def status_widgets(status: QStatusBar) -> tuple[QLabel, QLabel, QLabel, QLabel, QProgressBar]:
    """The status bar's model, device, precision and state labels and the load's progress bar, added to ``status``.
    Plain text: a server names its own model."""
    translate = QCoreApplication.translate
    labels = tuple(QLabel(text, textFormat=Qt.TextFormat.PlainText)
                   for text in (translate("MainWindow", "no model"), "", "", translate("MainWindow", "idle")))
    progress = QProgressBar(maximumSize=QSize(160, 14), textVisible=False)
    progress.hide()
    for widget in (progress, *labels):
        status.addPermanentWidget(widget)
    model, device, precision, state = labels
    return model, device, precision, state, progress
