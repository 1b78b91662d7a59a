"""The files attached to the message being written: which they are, reading each on the engine thread, and what a
Send takes.

Owns the list of attached paths and their state (being read, read: pages and tokens, or failed: one line), shown on
the composer's chips (``app.widgets.attachment_chips``). Does not own reading or counting (the worker's
``read_attachment`` with the model's tokenizer, asked through ``app.runtime.bridge``), nor grounding the message
(done on the worker when the reply is asked for), nor the composer's drop and paste handling.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal, Slot

from app.runtime.bridge import Bridge
from app.ui.engine_texts import engine_text
from app.widgets.attachment_chips import AttachmentChips
from engine.docs.attach import AttachedFile


class Attachments(QObject):
    """Reads each offered file once and keeps its chip up to date; ``take()`` hands the usable ones to a Send.

    Signals:
        changed(): a file was attached, removed, read or found unreadable (the composer's forecast measures again).
    """

    changed = Signal()

    def __init__(self, bridge: Bridge, chips: AttachmentChips, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._bridge = bridge
        self._chips = chips
        self._reading: dict[int, str] = {}  # task id -> path being read
        self._paths: list[str] = []  # attached, in order
        bridge.task_finished.connect(self.on_bridge_task_finished)
        bridge.task_failed.connect(self.on_bridge_task_failed)
        chips.remove_requested.connect(self.on_chips_remove_requested)

    def paths(self) -> list[str]:
        return list(self._paths)

    def usable(self) -> list[str]:
        """The attached files a Send grounds the message in: all but those that failed to read (a file still being
        read goes too: the worker reads it before it grounds the message)."""
        return [path for path in self._paths if not (chip := self._chips.chip(path)) or not chip.error]

    def take(self) -> list[str]:
        """The usable files, and the chips cleared: the message took them."""
        usable = self.usable()
        self.clear()
        return usable

    def clear(self) -> None:
        had = bool(self._paths)
        self._paths.clear()
        self._reading.clear()
        self._chips.clear()
        if had:
            self.changed.emit()

    @Slot(list)
    def on_composer_files_offered(self, paths: list) -> None:
        for path in paths:
            if path in self._paths:
                continue  # attached once is enough
            self._paths.append(path)
            self._chips.add(path)
            self._reading[self._bridge.read_attachment(path)] = path
            self.changed.emit()

    @Slot(str)
    def on_chips_remove_requested(self, path: str) -> None:
        if path in self._paths:
            self._paths.remove(path)
        self._chips.remove(path)
        self.changed.emit()

    @Slot(int, object)
    def on_bridge_task_finished(self, task_id: int, result: object) -> None:
        path = self._reading.pop(task_id, None)
        chip = self._chips.chip(path) if path is not None else None
        if chip is not None and isinstance(result, AttachedFile):
            chip.show_read(result.pages, result.tokens)
            self.changed.emit()

    @Slot(int, str)
    def on_bridge_task_failed(self, task_id: int, error: str) -> None:
        path = self._reading.pop(task_id, None)
        chip = self._chips.chip(path) if path is not None else None
        if chip is not None:
            chip.show_error(engine_text(error))
            self.changed.emit()
