"""The speculative decoding choice (a toolbar under the model bar): off, prompt lookup, self (an int4 copy) or a
draft model, and whether accepted drafts are tinted in the reply.

Draft models are the installed ones the window lists (``set_draft_models``); whether one can draft for the loaded
model (the same vocabulary) is the worker's to check when it is chosen (``app.window.speculation``), which then
puts this back with ``set_choice``. Owns the controls, not the setting (``app.state.settings``) nor the drafting.
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QCheckBox, QComboBox, QHBoxLayout, QLabel, QWidget


class SpeculationChoice(QWidget):
    """A drop-down of who drafts and a tint check box.

    Signals:
        choice_changed(str): the user chose "off" or a ``SpeculationConfig.parse`` text (prompt-lookup, self,
            draft:PATH).
        tint_toggled(bool): the user turned the tint of accepted drafts on or off.
    """

    choice_changed = Signal(str)
    tint_toggled = Signal(bool)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(8, 0, 0, 0)
        layout.setSpacing(6)
        label = QLabel(self.tr("Speculation"))
        self.combo = QComboBox()
        self.combo.setToolTip(self.tr(
            "Speculative decoding: something cheap drafts the next tokens and the model checks them all in one "
            "forward pass; the reply is the same, only faster when drafts are accepted. Prompt lookup drafts "
            "from the conversation's own words (edits, quotes); self drafts with the model's int4 copy (CPU); a "
            "draft model must share the loaded model's vocabulary."))
        self.combo.setAccessibleName(self.tr("Speculative decoding"))
        label.setBuddy(self.combo)
        self.tint = QCheckBox(self.tr("Tint drafts"))
        self.tint.setToolTip(self.tr("Tint the reply's tokens that were accepted drafts (written without a forward "
                                     "pass of their own) while it streams"))
        layout.addWidget(label)
        layout.addWidget(self.combo)
        layout.addWidget(self.tint)
        self.set_draft_models([])
        self.combo.activated.connect(self.on_combo_activated)
        self.tint.toggled.connect(self.tint_toggled)

    def set_draft_models(self, models: list[tuple[str, str]]) -> None:
        """The installed models offered as drafts: (name, path) each."""
        chosen = self.choice()
        self.combo.blockSignals(True)
        self.combo.clear()
        for text, value in ((self.tr("Off"), "off"), (self.tr("Prompt lookup"), "prompt-lookup"),
                            (self.tr("Self (int4 copy)"), "self")):
            self.combo.addItem(text, value)
        for name, path in models:
            self.combo.addItem(self.tr("Draft: {name}").format(name=name), f"draft:{path}")
        self.combo.blockSignals(False)
        self.set_choice(chosen or "off")

    def choice(self) -> str:
        return self.combo.currentData() or ""

    def set_choice(self, value: str) -> None:
        """Show ``value`` (a draft model not listed is added under its folder's name); no signal."""
        index = self.combo.findData(value)
        if index < 0 and value.startswith("draft:"):
            self.combo.addItem(self.tr("Draft: {name}").format(name=value[len("draft:"):].rstrip("/").split("/")[-1]),
                               value)
            index = self.combo.count() - 1
        self.combo.blockSignals(True)
        self.combo.setCurrentIndex(max(0, index))
        self.combo.blockSignals(False)
        self.tint.setEnabled(self.choice() != "off")

    def set_tint(self, on: bool) -> None:
        self.tint.blockSignals(True)
        self.tint.setChecked(on)
        self.tint.blockSignals(False)

    def on_combo_activated(self, _index: int) -> None:
        self.tint.setEnabled(self.choice() != "off")
        self.choice_changed.emit(self.choice())
