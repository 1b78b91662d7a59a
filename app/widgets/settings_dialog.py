"""The settings dialog: system prompt and sampling settings, remembered between runs.

Owns the form that edits a ``ChatSettings`` (system prompt, temperature, top-p, top-k, repetition
penalty, max new tokens, seed, KV cache on/off) and writes it through ``app.settings.Settings``
(QSettings) on OK. Value ranges are ``app.settings.RANGES``, inside what ``engine.inputs.SamplingConfig``
accepts, so the engine never has to refuse what this dialog lets through, and every value ``Settings``
reads back fits a spin box. Owns no generation.
"""

from __future__ import annotations

from PySide6.QtWidgets import (QCheckBox, QDialog, QDialogButtonBox, QDoubleSpinBox, QFormLayout, QLabel,
                               QPlainTextEdit, QPushButton, QSpinBox, QVBoxLayout, QWidget)

from app.settings import RANGES, ChatSettings, Settings


class SettingsDialog(QDialog):
    """Edits the generation settings; ``accepted`` means they were saved."""

    def __init__(self, settings: Settings, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Settings")
        self.setMinimumWidth(460)
        self._settings = settings
        layout = QVBoxLayout(self)
        form = QFormLayout()
        form.setVerticalSpacing(8)
        self.system_prompt = QPlainTextEdit()
        self.system_prompt.setPlaceholderText("Instructions the model sees before every conversation")
        self.system_prompt.setFixedHeight(90)
        form.addRow("System prompt", self.system_prompt)
        self.temperature = QDoubleSpinBox()
        self.temperature.setRange(*RANGES["temperature"])
        self.temperature.setSingleStep(0.1)
        self.temperature.setDecimals(2)
        self.temperature.setToolTip("0 = greedy: always the most likely token (deterministic)")
        form.addRow("Temperature", self.temperature)
        self.top_p = QDoubleSpinBox()
        self.top_p.setRange(*RANGES["top_p"])
        self.top_p.setSingleStep(0.05)
        self.top_p.setDecimals(2)
        form.addRow("Top-p", self.top_p)
        self.top_k = QSpinBox()
        self.top_k.setRange(*RANGES["top_k"])
        self.top_k.setSpecialValueText("off")
        form.addRow("Top-k", self.top_k)
        self.repetition_penalty = QDoubleSpinBox()
        self.repetition_penalty.setRange(*RANGES["repetition_penalty"])
        self.repetition_penalty.setSingleStep(0.05)
        self.repetition_penalty.setDecimals(2)
        form.addRow("Repetition penalty", self.repetition_penalty)
        self.max_new_tokens = QSpinBox()
        self.max_new_tokens.setRange(*RANGES["max_new_tokens"])
        form.addRow("Max new tokens", self.max_new_tokens)
        self.seed = QSpinBox()
        self.seed.setRange(*RANGES["seed"])
        self.seed.setSpecialValueText("random")
        self.seed.setToolTip("A fixed seed makes sampled replies reproducible")
        form.addRow("Seed", self.seed)
        self.use_kv_cache = QCheckBox("Keep keys and values of past tokens (KV cache)")
        self.use_kv_cache.setToolTip("Off recomputes the whole text for every new token: watch decode tok/s fall")
        form.addRow("KV cache", self.use_kv_cache)
        layout.addLayout(form)
        note = QLabel("Applies to the next reply. Saved for future sessions.")
        note.setObjectName("footer")
        layout.addWidget(note)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        defaults = QPushButton("Defaults")
        buttons.addButton(defaults, QDialogButtonBox.ButtonRole.ResetRole)
        defaults.clicked.connect(self.on_defaults_clicked)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
        self.set_values(settings.chat())

    def set_values(self, chat: ChatSettings) -> None:
        self.system_prompt.setPlainText(chat.system_prompt)
        self.temperature.setValue(chat.temperature)
        self.top_p.setValue(chat.top_p)
        self.top_k.setValue(chat.top_k)
        self.repetition_penalty.setValue(chat.repetition_penalty)
        self.max_new_tokens.setValue(chat.max_new_tokens)
        self.seed.setValue(chat.seed)
        self.use_kv_cache.setChecked(chat.use_kv_cache)

    def values(self) -> ChatSettings:
        return ChatSettings(system_prompt=self.system_prompt.toPlainText(), temperature=self.temperature.value(),
                            top_p=self.top_p.value(), top_k=self.top_k.value(),
                            repetition_penalty=self.repetition_penalty.value(),
                            max_new_tokens=self.max_new_tokens.value(), seed=self.seed.value(),
                            use_kv_cache=self.use_kv_cache.isChecked())

    def on_defaults_clicked(self) -> None:
        self.set_values(ChatSettings())

    def accept(self) -> None:
        self._settings.set_chat(self.values())
        super().accept()
