"""The conversation list on the window's left: search, pick, create, rename, delete and export conversations.

Owns these widgets and the dialogs behind its buttons (rename prompt, delete confirmation, export file
choice). It reads and writes through the ``HistoryStore`` it is given and does not load messages into the
chat or create conversations itself: it emits ``conversation_selected`` / ``new_requested`` and the window
acts (the window knows the current settings a new conversation starts with). An export replaces the chosen
file only once it is written whole (``engine.paths.replace_text``): a failure leaves the old file as
it was and says so in one line. A fork carries a drawn fork mark (its "(fork)" suffix is what eliding a long title
cuts) and names its source in its tooltip.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from PySide6.QtCore import QPointF, Qt, QTimer, Signal, Slot
from PySide6.QtGui import QIcon, QKeySequence, QPainter, QPainterPath, QPalette, QPen, QPixmap, QShortcut
from PySide6.QtWidgets import (QFileDialog, QHBoxLayout, QInputDialog, QLabel, QLineEdit, QListWidget,
                               QListWidgetItem, QMenu, QMessageBox, QPushButton, QVBoxLayout,
                               QWidget)

from app.history.export import copy_images, export_file_name, perf_to_csv, to_json, to_markdown
from app.history.store import DEFAULT_TITLE, HistoryStore, StoreError
from app.ui import accessibility
from engine.errors import printable
from engine.paths import replace_text

# Search runs a LIKE over all message text: wait for a pause in typing rather than query per keystroke.
SEARCH_DELAY_MS = 150
_ID_ROLE = Qt.ItemDataRole.UserRole
EXPORT_FORMATS = {"markdown": ("Markdown (*.md)", ".md"), "json": ("JSON (*.json)", ".json")}  # format names



def _when(seconds: float) -> str:
    """``seconds`` since the epoch as the list shows it; "?" for a time no calendar holds (an old import stored
    1e17: the list must still open)."""
    try:
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(seconds))
    except (OverflowError, OSError, ValueError, TypeError):
        return "?"

class ConversationList(QWidget):
    """Search box, conversation list (newest first) and New / Rename / Delete / Export buttons.

    Signals:
        conversation_selected(int): the user picked this conversation id (not emitted by ``select``
            or ``refresh``: the window calls those when it already knows which conversation is open).
        new_requested(): the user pressed New; the window creates the conversation.
        conversation_deleted(int): this conversation id was deleted from the store, after confirmation.
    """

    conversation_selected = Signal(int)
    new_requested = Signal()
    conversation_deleted = Signal(int)

    def __init__(self, store: HistoryStore, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.store = store
        self._current: int | None = None
        self._populating = False

        self.search = QLineEdit()
        self.search.setObjectName("conversationSearch")
        self.search.setPlaceholderText(self.tr("Search titles and messages"))
        self.search.setClearButtonEnabled(True)
        self.list = QListWidget()
        self.list.setObjectName("conversationList")
        self.list.setUniformItemSizes(True)  # lets Qt lay out thousands of rows without measuring each
        # Long titles end in "…" (the full title is the row's tooltip) instead of scrolling sideways.
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.status = QLabel()
        self.status.setObjectName("conversationStatus")
        self.status.setWordWrap(True)
        self.status.hide()
        self.new_button = QPushButton(self.tr("New"))
        self.new_button.setToolTip(self.tr("Start a new conversation (Ctrl+N)"))
        self.rename_button = QPushButton(self.tr("Rename"))
        self.rename_button.setToolTip(self.tr("Rename the selected conversation (F2)"))
        self.delete_button = QPushButton(self.tr("Delete"))
        self.delete_button.setToolTip(self.tr("Delete the selected conversation (Delete)"))
        self.export_button = QPushButton(self.tr("Export"))  # a push button with a menu: framed like its neighbours
        menu = QMenu(self.export_button)
        self._conversation_exports = [
            menu.addAction(self.tr("Conversation as Markdown…"), lambda: self.on_export_triggered("markdown")),
            menu.addAction(self.tr("Conversation as JSON…"), lambda: self.on_export_triggered("json"))]
        menu.addSeparator()
        menu.addAction(self.tr("All performance records as CSV…"), self.on_export_perf_triggered)
        self.export_button.setMenu(menu)
        self.export_button.setToolTip(self.tr("Export the selected conversation, or every performance record"))
        accessibility.name(self.search, self.tr("Search conversations"), self.search.placeholderText())
        accessibility.name(self.list, self.tr("Conversations"),
                           self.tr("Newest first; Delete deletes the selected one, F2 renames it"))
        for button in (self.new_button, self.rename_button, self.delete_button, self.export_button):
            button.setAccessibleDescription(button.toolTip())

        buttons = QHBoxLayout()
        buttons.setSpacing(4)
        for button in (self.new_button, self.rename_button, self.delete_button, self.export_button):
            buttons.addWidget(button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.search)
        layout.addWidget(self.list, 1)
        layout.addWidget(self.status)
        layout.addLayout(buttons)

        self._search_timer = QTimer(self)
        self._search_timer.setSingleShot(True)
        self._search_timer.setInterval(SEARCH_DELAY_MS)
        self._search_timer.timeout.connect(self.refresh)
        self.search.textChanged.connect(self.on_search_text_changed)
        self.list.currentItemChanged.connect(self.on_current_item_changed)
        self.new_button.clicked.connect(self.new_requested)
        self.rename_button.clicked.connect(self.on_rename_clicked)
        self.delete_button.clicked.connect(self.on_delete_clicked)
        # Only while the list has focus: Delete in the prompt box must keep deleting characters.
        for key, slot in ((QKeySequence.StandardKey.Delete, self.on_delete_clicked), (QKeySequence("F2"),
                                                                                       self.on_rename_clicked)):
            shortcut = QShortcut(key, self.list)
            shortcut.setContext(Qt.ShortcutContext.WidgetShortcut)
            shortcut.activated.connect(slot)
        if store.read_only:
            for button in (self.rename_button, self.delete_button):
                button.setToolTip(self.tr("History is read-only: it was written by a newer Miaohui"))
        self.refresh()

    # -- public API ----------------------------------------------------------------------------------
    def current_id(self) -> int | None:
        """The conversation last picked or selected (even while a search hides it); None after deleting it."""
        return self._current

    def refresh(self) -> None:
        """Reload the list from the store with the current search, keeping the selection."""
        self._search_timer.stop()
        query = self.search.text()
        try:
            rows = self.store.list_conversations(query)
        except StoreError as exc:
            rows = []
            self._show_status(self.tr("Cannot read history: {why}").format(why=exc))
        else:
            empty = self.tr("No conversation matches.") if query.strip() else self.tr("No conversations yet.")
            self._show_status("" if rows else empty)
        self._populating = True
        try:
            self.list.clear()
            for row in rows:
                # The store keeps the untitled default in English (it titles from the first message): shown translated.
                title = self.tr("New chat") if row.title == DEFAULT_TITLE else row.title
                item = QListWidgetItem(title)
                item.setData(_ID_ROLE, row.id)
                updated = _when(row.updated)
                tooltip = self.tr("{title}\n{n} messages · updated {updated}").format(
                    title=title, n=row.message_count, updated=updated)
                if row.forked_from is not None:  # an icon, not a title suffix: the list elides a long title's end
                    source = (self.tr("Fork of a deleted chat") if row.fork_source is None
                              else self.tr("Fork of “{source}”").format(source=row.fork_source))
                    item.setIcon(self._fork_icon())
                    item.setData(Qt.ItemDataRole.AccessibleTextRole, f"{title} · {source}")
                    tooltip = f"{source}\n{tooltip}"
                item.setToolTip(tooltip)
                self.list.addItem(item)
                if row.id == self._current:
                    self.list.setCurrentItem(item)
        finally:
            self._populating = False
        self._update_buttons()

    def select(self, cid: int) -> None:
        """Make ``cid`` the selected conversation without emitting ``conversation_selected``."""
        self._current = cid
        if self._item(cid) is None and self.search.text():
            self.search.blockSignals(True)  # the search hides it: clear the search rather than hide the choice
            self.search.clear()
            self.search.blockSignals(False)
        self.refresh()

    # -- slots ---------------------------------------------------------------------------------------
    @Slot(str)
    def on_search_text_changed(self, _text: str) -> None:
        self._search_timer.start()

    @Slot(QListWidgetItem, QListWidgetItem)
    def on_current_item_changed(self, current: QListWidgetItem | None, _previous: QListWidgetItem | None) -> None:
        if self._populating or current is None:
            return
        cid = int(current.data(_ID_ROLE))
        changed, self._current = cid != self._current, cid
        self._update_buttons()
        if changed:
            self.conversation_selected.emit(cid)

    @Slot()
    def on_rename_clicked(self) -> None:
        item = self._item(self._current)
        if item is None or not self.rename_button.isEnabled():
            return
        title, ok = QInputDialog.getText(self, self.tr("Rename conversation"), self.tr("Title:"),
                                         QLineEdit.EchoMode.Normal, item.text())
        if ok and title.strip():
            self._attempt(lambda: self.store.rename_conversation(int(item.data(_ID_ROLE)), " ".join(title.split())))
            self.refresh()

    @Slot()
    def on_delete_clicked(self) -> None:
        item = self._item(self._current)
        if item is None or not self.delete_button.isEnabled():
            return
        cid = int(item.data(_ID_ROLE))
        answer = QMessageBox.question(self, self.tr("Delete conversation"),
                                      self.tr("Delete “{title}” and all its messages? This cannot be "
                                              "undone.").format(title=item.text()),
                                      QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
                                      QMessageBox.StandardButton.No)
        if answer != QMessageBox.StandardButton.Yes:
            return
        if self._attempt(lambda: self.store.delete_conversation(cid)):
            self._current = None
            self.refresh()
            self.conversation_deleted.emit(cid)

    def on_export_triggered(self, fmt: str) -> None:
        """Ask for a file name and export the selected conversation as ``markdown`` or ``json``."""
        item = self._item(self._current)
        if item is None:
            return
        filter_, suffix = EXPORT_FORMATS[fmt]
        suggested = export_file_name(item.text(), suffix)
        path, _ = QFileDialog.getSaveFileName(self, self.tr("Export conversation"), str(Path.home() / suggested),
                                              filter_)
        if path:
            self.export_to(int(item.data(_ID_ROLE)), fmt, Path(path))

    def on_export_perf_triggered(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, self.tr("Export performance records"),
                                              str(Path.home() / "miaohui-performance.csv"), "CSV (*.csv)")
        if path:
            self._export(lambda: perf_to_csv(self.store), Path(path))

    def export_to(self, cid: int, fmt: str, path: Path) -> bool:
        """Write conversation ``cid`` to ``path`` as ``markdown`` or ``json``; False (message shown) on failure. A
        Markdown export's pictures are copied into ``<name>-images`` beside it, which its links name."""
        if fmt != "markdown":
            return self._export(lambda: to_json(self.store, cid), path)
        folder = path.with_name(path.stem + "-images")
        return self._export(lambda: to_markdown(self.store, cid, folder.name), path,
                            lambda: copy_images(self.store, cid, folder))

    def _export(self, text: Callable[[], str], path: Path, after: Callable[[], object] | None = None) -> bool:
        """Write ``text()`` over ``path`` whole or not at all, then ``after()`` (a Markdown export's pictures); a
        failure is one line naming the file."""
        try:
            replace_text(path, text())
            if after is not None:
                after()
            return True
        except StoreError as exc:
            QMessageBox.warning(self, "Miaohui", str(exc))
        except OSError as exc:
            QMessageBox.warning(self, "Miaohui", self.tr(
                "Could not export to {path}: {reason}. A file already there is unchanged.").format(
                    path=printable(path), reason=printable(exc.strerror or exc)))
        return False

    # -- helpers -------------------------------------------------------------------------------------
    def _fork_icon(self) -> QIcon:
        """A fork's mark, drawn in the list's text colour (a glyph such as ⑂ is missing from many fonts)."""
        pixmap = QPixmap(16, 16)
        pixmap.fill(Qt.GlobalColor.transparent)
        painter = QPainter(pixmap)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setPen(QPen(self.list.palette().color(QPalette.ColorRole.Text), 1.6))
        painter.drawLine(QPointF(5, 3), QPointF(5, 13))  # the trunk: the source conversation
        path = QPainterPath(QPointF(5, 10))
        path.cubicTo(QPointF(5, 6), QPointF(11, 8), QPointF(11, 4))  # the branch leaving it
        painter.drawPath(path)
        for x, y in ((5, 3), (5, 13), (11, 3)):
            painter.drawEllipse(QPointF(x, y), 1.5, 1.5)
        painter.end()
        return QIcon(pixmap)

    def _item(self, cid: int | None) -> QListWidgetItem | None:
        for row in range(self.list.count()):
            item = self.list.item(row)
            if item.data(_ID_ROLE) == cid:
                return item
        return None

    def _attempt(self, action: Callable[[], object]) -> bool:
        """Run a store or file action; a failure is one line in a warning box, never a traceback."""
        try:
            action()
            return True
        except (StoreError, OSError) as exc:
            QMessageBox.warning(self, "Miaohui", str(exc))
            return False

    def _show_status(self, text: str) -> None:
        self.status.setText(text)
        self.status.setVisible(bool(text))

    def _update_buttons(self) -> None:
        selected = self._item(self._current) is not None
        writable = not self.store.read_only
        self.rename_button.setEnabled(selected and writable)
        self.delete_button.setEnabled(selected and writable)
        for action in self._conversation_exports:
            action.setEnabled(selected)
