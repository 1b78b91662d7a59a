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
from typing import Any

from PySide6.QtCore import QObject, Signal, Slot
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QFileDialog, QMenu, QStatusBar, QWidget

from app.history import import_chatgpt
from app.history.store import StoreError
from app.runtime.background import TaskRunner, error_line
from app.widgets.message_area import MessageArea
from app.window.controller import ChatController

log = logging.getLogger(__name__)


class ChatGptImport(QObject):
    """Imports a ChatGPT export into the window's history.

    ``parent`` (the main window) is the file dialog's parent.

    Signals:
        listed(object): the conversations were added: the list shows them with this one (an id, or None) selected.
        imported(object): the ids of the conversations just added (in the export's order); [] when it failed.
    """

    listed = Signal(object)
    imported = Signal(object)

    def __init__(self, controller: ChatController, messages: MessageArea, status_bar: QStatusBar,
                 parent: QWidget) -> None:
        super().__init__(parent)
        self._controller, self._messages, self._status_bar, self._parent = controller, messages, status_bar, parent
        self._runner = TaskRunner(self, max_threads=1, name="miaohui-chatgpt-import")
        self._percent = -1
        self.action = QAction(self.tr("Import ChatGPT export…"), self)
        self.action.setToolTip(self.tr("Add the chats of a ChatGPT data export (conversations.json) to the history"))
        self.action.triggered.connect(self.on_action_triggered)

    def add_to(self, menu: QMenu) -> None:
        """The importer's entry in ``menu``."""
        menu.addAction(self.action)

    def busy(self) -> bool:
        return self._runner.busy()

    def import_file(self, path: Path) -> bool:
        """Import ``path`` in the background; False when an import is already running or the history is read-only."""
        store = self._controller.store
        if self._runner.busy():
            return False
        if store.read_only:
            self._messages.show_message(self.tr("The history is read-only here: nothing can be imported."), "warning")
            return False
        self._percent = -1
        self.action.setEnabled(False)
        self._status_bar.showMessage(self.tr("Importing ChatGPT export {name}…").format(name=Path(path).name))

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
        path, _ = QFileDialog.getOpenFileName(self._parent, self.tr("Import ChatGPT export"), str(Path.home()),
                                              self.tr("ChatGPT export (conversations.json *.json)"))
        if path:
            self.import_file(Path(path))

    @Slot(object)
    def on_import_progressed(self, fraction: float) -> None:
        percent = int(fraction * 100)
        if percent != self._percent:  # one redraw per percent, however many conversations
            self._percent = percent
            self._status_bar.showMessage(self.tr("Importing ChatGPT export… {percent}%").format(
                percent=percent))

    @Slot(object)
    def on_import_done(self, ids: list[int]) -> None:
        self.action.setEnabled(True)
        self._status_bar.clearMessage()
        if not ids:
            self._messages.show_message(self.tr("The ChatGPT export holds no chats to import."), "info")
        else:
            self._messages.show_message(self.tr("Imported {n} chats from ChatGPT; they go on with the loaded model.")
                                        .format(n=len(ids)), "info")
            if not self._controller.is_generating():
                self._controller.select(ids[0])
            self.listed.emit(self._controller.conversation_id)
        self.imported.emit(list(ids))

    @Slot(object)
    def on_import_failed(self, exc: BaseException) -> None:
        self.action.setEnabled(True)
        self._status_bar.clearMessage()
        why = str(exc) if isinstance(exc, StoreError) else error_line(exc)
        self._messages.show_message(self.tr("Nothing imported: {why}").format(why=why), "error")
        self.imported.emit([])
