"""The strip at the top of the window: which model, at what precision (and KV cache precision), on which device;
Load and Open.

Owns the choice widgets and the list of models offered: the models ``engine.models.catalog.list_local_models()``
finds (the default model, the data dir's models folder, the local Hugging Face cache) and the recently
opened ones (QSettings, via ``app.state.settings``). "Open model…" takes a folder or a ``.gguf``
file. It loads nothing itself: it emits ``load_requested`` and the window has the model loaded.
"""

from __future__ import annotations

import logging
from typing import Any

from PySide6.QtCore import QT_TRANSLATE_NOOP, QCoreApplication, Qt, Signal, Slot
from PySide6.QtWidgets import QComboBox, QFileDialog, QHBoxLayout, QLabel, QMenu, QPushButton, QSizePolicy, QWidget

from app.state.settings import Settings
from app.ui import accessibility
from app.ui.precision_reason import auto_reason
from engine.inputs import DEVICES, KV_PRECISIONS, PRECISIONS
from engine.models.catalog import choice_for_path, list_local_models

log = logging.getLogger(__name__)

DEFAULT_LABEL = "SmolLM2-135M-Instruct (default)"
# The words of engine.models.catalog's labels ("… (default, 256.5 MiB)", "… (Hugging Face cache, 1.0 GiB)", "… (recent)"),
# shown translated.
LABEL_WORDS = (QT_TRANSLATE_NOOP("ModelBar", "default"), QT_TRANSLATE_NOOP("ModelBar", "Hugging Face cache"),
               QT_TRANSLATE_NOOP("ModelBar", "recent"))


def _shown(label: str) -> str:
    """A model's label as the picker shows it: its name and size as they are, its words in the interface's language."""
    for word in LABEL_WORDS:
        label = label.replace(f"({word}", "(" + QCoreApplication.translate("ModelBar", word))
    return label


def _catalog_entries() -> list[tuple[str, str]]:
    """(label, model argument) of every local model ``engine.models.catalog`` finds; none if it cannot look."""
    try:
        return [(choice.label, choice.spec_model) for choice in list_local_models()]
    except Exception as exc:  # noqa: BLE001 (a broken cache folder must not stop the window opening)
        log.warning("could not list local models: %s", exc)
        return []


def _recent_label(path: str) -> str:
    return choice_for_path(path).label


class ModelBar(QWidget):
    """Model, precision, device selectors with Load and "Open model…".

    Signals:
        load_requested(str, str, str): model argument (``"default"``, a folder, a .gguf), precision, device.
        connect_requested(): "Connect to server…" was chosen (the window hands it to ``app.window.remote_source``,
            which asks for an OpenAI-compatible server and has its model loaded).
    """

    load_requested = Signal(str, str, str)
    connect_requested = Signal()

    def __init__(self, settings: Settings, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._settings = settings
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(8)
        title = QLabel("秒回 Miaohui")
        title.setStyleSheet("font-weight: 700; font-size: 15px; padding-right: 10px;")
        layout.addWidget(title)
        layout.addWidget(QLabel(self.tr("Model")))
        self.model_combo = QComboBox()
        # 18 characters, not 24: with the KV cache choice beside Precision the bar must still fit a 1280 px window
        self.model_combo.setMinimumContentsLength(18)
        self.model_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.model_combo.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.model_combo.setToolTip(self.tr("The models on this computer, each with the size of its weights on disk "
                                            "(MiB, GiB: powers of 1024); a smaller file reads faster per token"))
        layout.addWidget(self.model_combo, 2)
        layout.addWidget(QLabel(self.tr("Precision")))
        self.precision_combo = QComboBox()
        self.precision_combo.addItems(PRECISIONS)
        self.precision_combo.setToolTip(self.tr(
            "auto: on a CPU int4 or int8 when they keep the model's answers (checked once per model), else bf16\n"
            "where the CPU/GPU computes it natively, else fp32; a Q4/Q8 GGUF keeps its bits.\n"
            "int8 / int4: native weight-only kernels (fewer bytes per weight, faster tokens)\n"
            "bnb-int8 / nf4 / fp4: bitsandbytes (less memory, slower on a CPU)"))
        layout.addWidget(self.precision_combo)
        self.chosen = QLabel("")  # what `auto` chose for the loaded model; its tooltip says why
        self.chosen.setTextFormat(Qt.TextFormat.PlainText)
        self.chosen.hide()
        layout.addWidget(self.chosen)
        layout.addWidget(QLabel(self.tr("KV cache")))
        self.kv_combo = QComboBox()  # saved as soon as chosen: the Models window's fit estimate follows it
        self.kv_combo.addItems(KV_PRECISIONS)
        self.kv_combo.setToolTip(self.tr(
            "auto: the KV cache in the model's own precision (bf16, fp16 or fp32)\n"
            "int8: 8-bit keys and values with a scale per head and position: about half the KV memory,\n"
            "next tokens agree with the 16-bit cache on ~99% of positions\n"
            "(fast runner only; applies at the next Load)"))
        self.kv_combo.setCurrentText(settings.kv_precision())
        self.kv_combo.currentTextChanged.connect(self.on_kv_precision_changed)
        layout.addWidget(self.kv_combo)
        layout.addWidget(QLabel(self.tr("Device")))
        self.device_combo = QComboBox()
        self.device_combo.addItems(DEVICES)
        self.device_combo.setToolTip(self.tr("auto: the GPU when there is one, else the CPU. Decoding reads every "
                                             "weight per token, so the device's memory bandwidth sets its speed"))
        layout.addWidget(self.device_combo)
        self.load_button = QPushButton(self.tr("Load"))
        self.load_button.setObjectName("primary")
        self.load_button.clicked.connect(self.on_load_clicked)
        layout.addWidget(self.load_button)
        self.open_button = QPushButton(self.tr("Open model…"))
        menu = QMenu(self.open_button)
        menu.addAction(self.tr("Model folder…"), self.on_open_folder_triggered)
        menu.addAction(self.tr("GGUF file…"), self.on_open_gguf_triggered)
        self.open_button.setMenu(menu)
        layout.addWidget(self.open_button)
        self.connect_button = QPushButton(self.tr("Connect to server…"))
        self.connect_button.setToolTip(self.tr("Chat with a model served by vLLM, llama-server, Ollama, LM Studio or "
                                               "python -m engine serve (an OpenAI-compatible API)"))
        self.connect_button.clicked.connect(self.on_connect_clicked)
        layout.addWidget(self.connect_button)
        accessibility.name(self.model_combo, self.tr("Model"), self.tr("The model to load"))
        accessibility.name(self.precision_combo, self.tr("Precision"))
        accessibility.name(self.device_combo, self.tr("Device"), self.tr("Where the model runs"))
        accessibility.name(self.kv_combo, self.tr("KV cache precision"))
        self.load_button.setToolTip(self.tr("Load the chosen model at this precision on this device"))
        self.open_button.setToolTip(self.tr("Open a model folder or a GGUF file and load it"))
        for button in (self.load_button, self.open_button, self.connect_button):
            button.setAccessibleDescription(button.toolTip())
        self.refresh()
        model, precision, device = settings.model_choice()
        self.select(model, precision, device)

    def refresh(self) -> None:
        """Rebuild the model list: default, catalog, recent (each model once)."""
        current = self.current_model()
        self.model_combo.blockSignals(True)
        self.model_combo.clear()
        seen: set[str] = set()
        entries = _catalog_entries()
        if not any(model == "default" for _, model in entries):
            entries.insert(0, (DEFAULT_LABEL, "default"))  # not fetched yet: Load then explains how to get it
        entries += [(_recent_label(p), p) for p in self._settings.recent_models()]
        for label, model in entries:
            if model in seen:
                continue
            seen.add(model)
            self.model_combo.addItem(_shown(label), model)
            self.model_combo.setItemData(self.model_combo.count() - 1, model, Qt.ItemDataRole.ToolTipRole)
        self.model_combo.blockSignals(False)
        if current:
            self._select_model(current)

    def current_model(self) -> str:
        data = self.model_combo.currentData()
        return str(data) if data is not None else ""

    def kv_precision(self) -> str:
        """The KV cache's precision chosen for the next load (``LoadSpec.kv_precision``)."""
        return self.kv_combo.currentText()

    @Slot(str)
    def on_kv_precision_changed(self, value: str) -> None:
        self._settings.set_kv_precision(value)

    def choice(self) -> tuple[str, str, str]:
        return self.current_model(), self.precision_combo.currentText(), self.device_combo.currentText()

    def select(self, model: str, precision: str | None = None, device: str | None = None) -> None:
        self._select_model(model)
        if precision in PRECISIONS:
            self.precision_combo.setCurrentText(precision)
        if device in DEVICES:
            self.device_combo.setCurrentText(device)

    def set_loading(self, loading: bool) -> None:
        self.load_button.setText(self.tr("Loading…") if loading else self.tr("Load"))

    def set_state(self, loading: bool, facts: Any) -> None:
        """The Load button's text, and beside the precision what ``auto`` chose for the loaded model and why."""
        self.set_loading(loading)
        why = auto_reason(facts) if facts is not None else None
        self.chosen.setVisible(why is not None)
        if why is not None:
            self.chosen.setText(f"→ {facts.precision}")
            self.chosen.setToolTip(why)
            accessibility.name(self.chosen, self.tr("Precision auto chose: {precision}").format(
                precision=facts.precision), why)

    def _select_model(self, model: str) -> None:
        index = self.model_combo.findData(model)
        if index < 0:
            self.model_combo.addItem(_shown(_recent_label(model) if model != "default" else DEFAULT_LABEL), model)
            index = self.model_combo.count() - 1
        self.model_combo.setCurrentIndex(index)

    @Slot()
    def on_load_clicked(self) -> None:
        self.load_requested.emit(*self.choice())

    @Slot()
    def on_connect_clicked(self) -> None:
        self.connect_requested.emit()

    @Slot()
    def on_open_folder_triggered(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, self.tr("Open a model folder"))
        if folder:
            self.open_model(folder)

    @Slot()
    def on_open_gguf_triggered(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, self.tr("Open a GGUF model"), "", self.tr("GGUF models (*.gguf)"))
        if path:
            self.open_model(path)

    def open_model(self, path: str) -> None:
        """Remember ``path`` as a recent model, select it and ask for it to be loaded."""
        self._settings.add_recent_model(path)
        self.refresh()
        self._select_model(path)
        self.load_requested.emit(*self.choice())
