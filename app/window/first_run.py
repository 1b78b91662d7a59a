"""The first start's note on the default model: ``DefaultModelNote``.

The model a fresh install loads (SmolLM2-135M-Instruct, 135 M parameters) is there to watch the engine work: it
calls Sydney Australia's capital and answers Chinese in English (issue 41). A new user sees the chat, not the Models
window, so the chat says so above its first message: a note that names the model as tiny, says what it is for, and
offers "Show better models" (the Models window on its Recommended tab). The note stays until the user closes it
(``Settings.default_model_note_dismissed``: once per user, not once per run), and hides while another model is
loaded. Owns that note; asks for the Models window (``models_requested``), which the main window opens.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QObject, Qt, Signal, Slot
from PySide6.QtWidgets import QBoxLayout, QFrame, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from app.state.settings import Settings
from app.ui import accessibility
from engine.paths import DEFAULT_MODEL_NAME


class DefaultModelNote(QFrame):
    """The note above the chat on the tiny default model, with its two buttons.

    Signals:
        models_requested(): "Show better models" was clicked (the window opens Models → Recommended).
        dismissed(): "Got it" was clicked; the note is not shown again.
    """

    models_requested = Signal()
    dismissed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("messageArea")  # the message strip's frame: the same look as the other notes
        self.setProperty("level", "info")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 8, 12, 8)
        self.label = QLabel(self.tr(
            "The default model, {name}, is tiny (135 M parameters): it is here to watch how the engine works, and "
            "its answers are often wrong (it may name Sydney as Australia's capital, or answer Chinese in English). "
            "For real answers, get a better model: Models… → Recommended lists the ones that fit this computer.")
            .format(name=DEFAULT_MODEL_NAME))
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.label)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        self.models_button = QPushButton(self.tr("Show better models"))
        self.models_button.setToolTip(self.tr("Open Models… on its Recommended tab: real chat models ranked for "
                                              "this computer."))
        self.models_button.clicked.connect(self.models_requested)
        buttons.addWidget(self.models_button)
        self.dismiss_button = QPushButton(self.tr("Got it"))
        self.dismiss_button.setToolTip(self.tr("Hide this note; it will not be shown again."))
        self.dismiss_button.clicked.connect(self.dismissed)
        buttons.addWidget(self.dismiss_button)
        layout.addLayout(buttons)
        accessibility.name(self, self.tr("About the default model"), self.label.text())


class DefaultModelNoteKeeper(QObject):
    """Shows ``note`` while the default model is the one chosen or loaded and the user has not closed it. The window
    connects its ``model_ready`` to ``on_window_model_ready``.

    Signals:
        models_requested(): the note's "Show better models" was clicked: open Models… on its Recommended tab.
    """

    models_requested = Signal()

    def __init__(self, settings: Settings, note: DefaultModelNote, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._settings, self.note = settings, note
        note.models_requested.connect(self.models_requested)
        note.dismissed.connect(self.on_note_dismissed)
        # Before any load finishes: the model this start will load is the default one unless the user chose another.
        self._show(settings.model_choice()[0] == "default")

    @classmethod
    def attach(cls, settings: Settings, layout: QBoxLayout, parent: QObject | None = None) -> "DefaultModelNoteKeeper":
        """Put the note last in ``layout`` (the chat column's top, under the message strip) and keep it."""
        note = DefaultModelNote()
        layout.addWidget(note)
        return cls(settings, note, parent)

    def _show(self, default_model: bool) -> None:
        self.note.setVisible(default_model and not self._settings.default_model_note_dismissed())

    @Slot(object)
    def on_window_model_ready(self, facts: Any) -> None:
        self._show(getattr(facts, "name", "") == DEFAULT_MODEL_NAME and not getattr(facts, "remote", False))

    @Slot()
    def on_note_dismissed(self) -> None:
        self._settings.set_default_model_note_dismissed(True)
        self.note.hide()
