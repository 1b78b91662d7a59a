"""Chat → "Import ChatGPT export…": ChatGPT's ``conversations.json`` into the history, off the GUI thread.

``ChatGptImport`` owns the menu entry, the file dialog, the run on the app's background-work helper
(``app.runtime.background.TaskRunner``: reading, parsing and the one transaction that writes, so a 100 MB export never
freezes the window), the progress line in the status bar, and the one line that ends it: how many conversations were
imported, or why none were (a file that is not an export writes nothing). The imported conversations are listed and
the first one is opened, ready to go on with the loaded local model. The format and the writing are
``app.history.import_chatgpt``'s (plain Python).
"""

from __future__ import annotations

import logging

import time
from pathlib import Path
from typing import Any, Protocol

from PySide6.QtCore import QObject, Signal, Slot
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QFileDialog

from app.history import import_chatgpt
from app.history.store import StoreError
from app.runtime.background import TaskRunner, error_line

log = logging.getLogger(__name__)

class ImportHost(Protocol):
    """What the importer uses of the main window (a protocol, so this module does not import the window)."""

    controller: Any
    conversations: Any
    messages: Any

    def statusBar(self) -> Any: ...  # noqa: N802 (Qt's name)

    def on_controller_conversation_listed(self, cid: int | None) -> None: ...


class ChatGptImport(QObject):
    """Imports a ChatGPT export into the window's history.

    Signals:
        imported(object): the ids of the conversations just added (in the export's order); [] when it failed.
    """

    imported = Signal(object)

    def __init__(self, window: ImportHost) -> None:
        super().__init__(window)  # type: ignore[arg-type]
        self._runner = TaskRunner(self, max_threads=1, name="miaohui-chatgpt-import")
        self._percent = -1
        self.action = QAction(self.tr("Import ChatGPT export…"), self)
        self.action.setToolTip(self.tr("Add the chats of a ChatGPT data export (conversations.json) to the history"))
        self.action.triggered.connect(self.on_action_triggered)

    @classmethod
    def attach(cls, window: Any, menu: Any) -> ChatGptImport:
        """Build the importer and its entry in ``menu``."""
        importer = cls(window)
        menu.addAction(importer.action)
        return importer

    def _window(self) -> ImportHost:
        return self.parent()  # type: ignore[return-value]

    def busy(self) -> bool:
        return self._runner.busy()

    def import_file(self, path: Path) -> bool:
        """Import ``path`` in the background; False when an import is already running or the history is read-only."""
        window = self._window()
        store = window.controller.store
        if self._runner.busy():
            return False
        if store.read_only:
            window.messages.show_message(self.tr("The history is read-only here: nothing can be imported."), "warning")
            return False
        self._percent = -1
        self.action.setEnabled(False)
        window.statusBar().showMessage(self.tr("Importing ChatGPT export {name}…").format(name=Path(path).name))

        def work(report: Any) -> list[int]:
            read = import_chatgpt.read_export(Path(path), report)
            for line in read.problems:  # one line per entry not imported, and why
                log.warning("ChatGPT import: %s", line)
            return import_chatgpt.write(store, read, time.time())

        self._runner.submit(work, self.on_import_done, self.on_import_failed, self.on_import_progressed,
                            with_report=True)
        return True

    def wait(self, timeout_ms: int) -> bool:
        return self._runner.wait(timeout_ms)

    # -- slots ----------------------------------------------------------------------------------------
    @Slot()
    def on_action_triggered(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self._window(), self.tr("Import ChatGPT export"), str(Path.home()),
                                              self.tr("ChatGPT export (conversations.json *.json)"))
        if path:
            self.import_file(Path(path))

    @Slot(object)
    def on_import_progressed(self, fraction: float) -> None:
        percent = int(fraction * 100)
        if percent != self._percent:  # one redraw per percent, however many conversations
            self._percent = percent
            self._window().statusBar().showMessage(self.tr("Importing ChatGPT export… {percent}%").format(
                percent=percent))

    @Slot(object)
    def on_import_done(self, ids: list[int]) -> None:
        window = self._window()
        self.action.setEnabled(True)
        window.statusBar().clearMessage()
        if not ids:
            window.messages.show_message(self.tr("The ChatGPT export holds no chats to import."), "info")
        else:
            window.messages.show_message(self.tr("Imported {n} chats from ChatGPT; they go on with the loaded model.")
                                         .format(n=len(ids)), "info")
            if not window.controller.is_generating():
                window.controller.select(ids[0])
            window.on_controller_conversation_listed(window.controller.conversation_id)
        self.imported.emit(list(ids))

    @Slot(object)
    def on_import_failed(self, exc: BaseException) -> None:
        window = self._window()
        self.action.setEnabled(True)
        window.statusBar().clearMessage()
        why = str(exc) if isinstance(exc, StoreError) else error_line(exc)
        window.messages.show_message(self.tr("Nothing imported: {why}").format(why=why), "error")
        self.imported.emit([])
