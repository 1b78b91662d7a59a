"""The status bar's "In memory: …" label: the models the engine core holds (``engine.core.models.ModelRecord``s, from
``Bridge.models_changed``), each with its weights' size; hidden while none is loaded here (a server's model takes no
memory on this computer). Owns the wording only; what is loaded and when it is unloaded is the core's.
"""

from __future__ import annotations

from typing import Any, Sequence

from PySide6.QtCore import QCoreApplication, Qt, Slot
from PySide6.QtWidgets import QLabel, QStatusBar, QWidget

from engine.fmt import format_bytes


def _kind(kind: str) -> str:
    """A model kind as the user reads it (the literals stay here, where lupdate finds them)."""
    translate = QCoreApplication.translate
    return {"chat": translate("ModelsLabel", "chat model"), "embedding": translate("ModelsLabel", "embedding model"),
            "vision": translate("ModelsLabel", "vision model")}.get(kind, kind)


class ModelsLabel(QLabel):
    """Plain text; its tooltip names each model's kind."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent, textFormat=Qt.TextFormat.PlainText)
        self.hide()

    @classmethod
    def attach(cls, status: QStatusBar, models_changed: Any) -> ModelsLabel:
        """Put one in ``status`` (first of its permanent labels: a passing message does not hide it) following
        ``models_changed`` (a signal of records)."""
        label = cls()
        status.insertPermanentWidget(0, label)
        models_changed.connect(label.show_models)
        return label

    @Slot(object)
    def show_models(self, records: Sequence[Any]) -> None:
        if not records:
            self.clear()
            self.hide()
            return
        self.setText(self.tr("In memory: {models}").format(
            models=", ".join(f"{r.name} ({format_bytes(r.bytes)})" for r in records)))
        self.setToolTip("\n".join(self.tr("{kind}: {name}, {size}").format(kind=_kind(r.kind), name=r.name,
                                                                           size=format_bytes(r.bytes))
                                  for r in records))
        self.show()
