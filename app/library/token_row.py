"""The Models window's "Hugging Face token" row: enter, save and forget the token gated models need.

A masked field, "Save token" and "Forget", and one line saying where the token is (the system keyring, or this
run only) and what it is for. The token goes to ``app.state.hub_token.HubToken`` for the endpoint the window
talks to; the field is cleared once it is saved, so the token is not left on screen. Owns this row only.
"""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import Signal, Slot
from PySide6.QtWidgets import QHBoxLayout, QLabel, QLineEdit, QPushButton, QWidget

from app.state.hub_token import HubToken


class HubTokenRow(QWidget):
    """``endpoint()`` names the Hub the token is for (the window's resolved endpoint).

    Signals:
        changed(): a token was saved or forgotten (a gated download may be tried again).
    """

    changed = Signal()

    def __init__(self, tokens: HubToken, endpoint: Callable[[], str], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._tokens, self._endpoint = tokens, endpoint
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(QLabel(self.tr("Hugging Face token:")))
        self.field = QLineEdit()
        self.field.setEchoMode(QLineEdit.EchoMode.Password)
        self.field.setPlaceholderText(self.tr("hf_… (only for gated models such as Llama and Gemma)"))
        self.field.setAccessibleName(self.tr("Hugging Face token"))
        self.field.returnPressed.connect(self.on_save_clicked)
        layout.addWidget(self.field, 1)
        self.save_button = QPushButton(self.tr("Save token"))
        self.save_button.setToolTip(self.tr("Kept in the system keyring and sent only to the Hugging Face endpoint "
                                            "above, for gated models whose licence that account accepted."))
        self.save_button.clicked.connect(self.on_save_clicked)
        layout.addWidget(self.save_button)
        self.forget_button = QPushButton(self.tr("Forget"))
        self.forget_button.setToolTip(self.tr("Remove the token from the keyring"))
        self.forget_button.clicked.connect(self.on_forget_clicked)
        layout.addWidget(self.forget_button)
        self.note = QLabel()
        self.note.setObjectName("footer")
        self.note.setWordWrap(True)
        layout.addWidget(self.note, 1)
        self.refresh()

    def refresh(self, note: str | None = None) -> None:
        """Say whether a token is kept for the endpoint (or ``note``, a one-line outcome of saving)."""
        kept = self._tokens.load(self._endpoint()) is not None
        self.forget_button.setEnabled(kept)
        self.note.setText(note or (self.tr("A token is kept for gated models.") if kept else
                                   self.tr("No token: gated models cannot be downloaded.")))

    @Slot()
    def on_save_clicked(self) -> None:
        token = self.field.text().strip()
        if not token:
            return
        note = self._tokens.store(self._endpoint(), token)
        self.field.clear()  # not left on screen, nor in the field's undo history once the window closes
        self.refresh(note)
        self.changed.emit()

    @Slot()
    def on_forget_clicked(self) -> None:
        self._tokens.forget(self._endpoint())
        self.refresh()
        self.changed.emit()
