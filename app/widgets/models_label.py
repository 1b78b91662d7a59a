"""The status bar's "In memory: …" label: the models the engine core holds (``engine.core.models.ModelRecord``s, from
``Bridge.models_changed``), each with its weights' size; hidden while none is loaded here (a server's model takes no
memory on this computer). Its tooltip ends with the core's memory budget for its models when it was given one (past it
the least recently used model is unloaded). Owns the wording only; what is loaded and when it is unloaded is the core's.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

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

    def __init__(self, parent: QWidget | None = None, budget: Callable[[], int | None] | None = None) -> None:
        super().__init__(parent, textFormat=Qt.TextFormat.PlainText)
        self._budget = budget  # the core's model memory budget in bytes, read when the models change
        self.hide()

    @classmethod
    def attach(cls, status: QStatusBar, models_changed: Any,
               budget: Callable[[], int | None] | None = None) -> ModelsLabel:
        """Put one in ``status`` (first of its permanent labels: a passing message does not hide it) following
        ``models_changed`` (a signal of records); ``budget`` gives the core's model memory budget."""
        label = cls(budget=budget)
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
        lines = [self.tr("{kind}: {name}, {size}").format(kind=_kind(r.kind), name=r.name, size=format_bytes(r.bytes))
                 for r in records]
        budget = self._budget() if self._budget is not None else None
        if budget is not None:
            lines.append(self.tr("Memory budget for models: {size} (past it the least recently used is unloaded)")
                         .format(size=format_bytes(budget)))
        self.setToolTip("\n".join(lines))
        self.show()
