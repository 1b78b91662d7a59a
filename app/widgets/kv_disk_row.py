"""Settings' row for the conversations' KV caches saved on disk: how much they take, and a Clear button.

Reads the folder's size (``engine.generate.kv_store.KVStore.used_bytes``: file sizes only, no torch) when shown
and after Clear; Clear deletes every saved cache at once (each conversation then computes its prompt again the next
time it is reopened; nothing else is lost). The folder and its budget are ``engine.core.kv_persist``'s. Owns the
row only.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Signal, Slot
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QWidget

from engine.core.kv_persist import DEFAULT_BUDGET_BYTES, kv_folder
from engine.fmt import format_bytes
from engine.generate.kv_store import KVStore


class KVDiskRow(QWidget):
    """The size of the saved KV caches and a button that deletes them.

    Signals:
        cleared(int): bytes deleted by Clear.
    """

    cleared = Signal(int)

    def __init__(self, folder: Path | None = None, budget_bytes: int = DEFAULT_BUDGET_BYTES,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._folder = folder
        self._budget = budget_bytes
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.usage = QLabel()
        self.usage.setToolTip(self.tr("Keys and values of conversations closed earlier, so reopening one does not "
                                      "compute it all again; the least recently used go first when the limit is "
                                      "reached"))
        self.clear_button = QPushButton(self.tr("Clear"))
        self.clear_button.setToolTip(self.tr("Delete every saved KV cache: reopened conversations compute their "
                                             "history again, nothing else is lost"))
        self.clear_button.clicked.connect(self.on_clear_clicked)
        layout.addWidget(self.usage, 1)
        layout.addWidget(self.clear_button)
        self.refresh()

    def _store(self) -> KVStore:
        return KVStore(self._folder or kv_folder(), self._budget)

    def refresh(self) -> None:
        used = self._store().used_bytes()
        self.usage.setText(self.tr("{used} on disk (at most {budget})").format(used=format_bytes(used),
                                                                                budget=format_bytes(self._budget)))
        self.clear_button.setEnabled(used > 0)

    @Slot()
    def on_clear_clicked(self) -> None:
        freed = self._store().clear()
        self.refresh()
        self.cleared.emit(freed)
