"""The settings dialog: system prompt and sampling settings, and the interface language, remembered between runs.

Owns the form that edits a ``ChatSettings`` (system prompt, temperature, top-p, top-k, repetition
penalty, max new tokens, seed, KV cache on/off; the saved KV caches' size and Clear: ``app.widgets.kv_disk_row``),
the language (English / 简体中文 / the system's, applied
at the next start: ``app.ui.i18n``) and the appearance (light / dark / the system's, applied at once: ``app.ui.theme``),
and writes them through ``app.state.settings.Settings`` (QSettings) on OK.
Value ranges are ``app.state.settings.RANGES`` (``engine.inputs.SAMPLING_RANGES``), inside what ``engine.inputs.SamplingConfig`` accepts, so the engine
never has to refuse what this dialog lets through, and every value ``Settings`` reads back fits a spin box.
Owns no generation.
"""

from __future__ import annotations

from PySide6.QtWidgets import (QCheckBox, QComboBox, QDialog, QDialogButtonBox, QDoubleSpinBox, QFormLayout, QLabel,
                               QPlainTextEdit, QPushButton, QSpinBox, QVBoxLayout, QWidget)

from app.state.settings import RANGES, ChatSettings, Settings
from app.ui import theme
from app.ui import accessibility
from app.widgets.kv_disk_row import KVDiskRow


class SettingsDialog(QDialog):
    """Edits the generation settings; ``accepted`` means they were saved."""

    def __init__(self, settings: Settings, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle(self.tr("Settings"))
        self.setMinimumWidth(460)
        self._settings = settings
        layout = QVBoxLayout(self)
        form = QFormLayout()
        form.setVerticalSpacing(8)
        self.system_prompt = QPlainTextEdit()
        self.system_prompt.setPlaceholderText(self.tr("Instructions the model sees before every conversation"))
        self.system_prompt.setFixedHeight(90)
        form.addRow(self.tr("System prompt"), self.system_prompt)
        self.temperature = QDoubleSpinBox()
        self.temperature.setRange(*RANGES["temperature"])
        self.temperature.setSingleStep(0.1)
        self.temperature.setDecimals(2)
        self.temperature.setToolTip(self.tr("How far the choice of each token strays from the most likely one: the "
                                            "model's scores are divided by it before sampling. 0 = greedy: always "
                                            "the most likely token (deterministic); 0.2-0.7 for facts and code, "
                                            "0.8-1.0 for varied writing; above 1.2 replies fall apart"))
        form.addRow(self.tr("Temperature"), self.temperature)
        self.top_p = QDoubleSpinBox()
        self.top_p.setRange(*RANGES["top_p"])
        self.top_p.setSingleStep(0.05)
        self.top_p.setDecimals(2)
        self.top_p.setToolTip(self.tr("Nucleus sampling: only the most likely tokens whose probabilities add up "
                                      "to p are candidates. 1 keeps all; 0.9 cuts the unlikely tail that makes "
                                      "nonsense; lower is more predictable"))
        form.addRow(self.tr("Top-p"), self.top_p)
        self.top_k = QSpinBox()
        self.top_k.setRange(*RANGES["top_k"])
        self.top_k.setSpecialValueText(self.tr("off"))
        self.top_k.setToolTip(self.tr("Only the k most likely tokens are candidates at each step (applied with "
                                      "top-p: the stricter wins). off keeps all; 40-50 is usual"))
        form.addRow(self.tr("Top-k"), self.top_k)
        self.repetition_penalty = QDoubleSpinBox()
        self.repetition_penalty.setRange(*RANGES["repetition_penalty"])
        self.repetition_penalty.setSingleStep(0.05)
        self.repetition_penalty.setDecimals(2)
        self.repetition_penalty.setToolTip(self.tr("Makes tokens already in the conversation less likely: their "
                                                   "scores are divided by this (multiplied when negative). 1 "
                                                   "is off; 1.05-1.2 stops small models looping; higher "
                                                   "distorts names and code"))
        form.addRow(self.tr("Repetition penalty"), self.repetition_penalty)
        self.max_new_tokens = QSpinBox()
        self.max_new_tokens.setRange(*RANGES["max_new_tokens"])
        self.max_new_tokens.setToolTip(self.tr("The longest reply, in tokens (about ¾ of an English word, or "
                                               "one or two Chinese characters, each); the reply stops there"))
        form.addRow(self.tr("Max new tokens"), self.max_new_tokens)
        self.seed = QSpinBox()
        self.seed.setRange(*RANGES["seed"])
        self.seed.setSpecialValueText(self.tr("random"))
        self.seed.setToolTip(self.tr("A fixed seed makes sampled replies reproducible"))
        form.addRow(self.tr("Seed"), self.seed)
        self.use_kv_cache = QCheckBox(self.tr("Keep keys and values of past tokens (KV cache)"))
        self.use_kv_cache.setToolTip(self.tr("Off recomputes the whole text for every new token: watch decode tok/s "
                                             "fall"))
        form.addRow(self.tr("KV cache"), self.use_kv_cache)
        self.saved_kv = KVDiskRow()  # acts at once (Clear), not on OK
        form.addRow(self.tr("Saved KV caches"), self.saved_kv)
        # Each language is named in itself, so that whoever cannot read the current one still finds theirs.
        self.language = QComboBox()
        for label, value in ((self.tr("System language"), "system"), ("English", "en"), ("简体中文", "zh_CN")):
            self.language.addItem(label, value)
        self.language.setCurrentIndex(max(0, self.language.findData(settings.language())))
        self.language.setToolTip(self.tr("Applies the next time Miaohui starts"))
        form.addRow(self.tr("Language"), self.language)
        self.appearance = QComboBox()
        for label, value in ((self.tr("Follow the system"), "system"), (self.tr("Light"), "light"),
                             (self.tr("Dark"), "dark")):
            self.appearance.addItem(label, value)
        self.appearance.setCurrentIndex(max(0, self.appearance.findData(settings.appearance())))
        self.appearance.setToolTip(self.tr("Light or dark colours; “Follow the system” switches with the system's "
                                           "dark mode while Miaohui runs"))
        form.addRow(self.tr("Appearance"), self.appearance)
        accessibility.name_form_fields(form)  # each field named after its row's label, its tooltip the description
        layout.addLayout(form)
        note = QLabel(self.tr("Reply settings apply to the next reply; a new language, after a restart. Saved for "
                              "future sessions."))
        note.setWordWrap(True)
        note.setObjectName("footer")
        layout.addWidget(note)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        defaults = QPushButton(self.tr("Defaults"))
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
        self._settings.set_language(self.language.currentData())
        self._settings.set_appearance(self.appearance.currentData())
        theme.watcher().set_appearance(self.appearance.currentData())  # at once, not at the next start
        super().accept()
