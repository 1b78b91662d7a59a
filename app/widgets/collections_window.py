"""The Collections window (Chat → Collections…, or the composer's 📚 menu): the user's collections of documents.

Lists the collections in the data folder's documents store with their files, passages, size and how many passages
are embedded; "Add folder…" and "Add files…" index into the collection named in the Collection field (a new name
makes a new one, the selected row fills it in); "Re-index" walks a collection's folders and files again (only
changed files are read again); "Remove" forgets one after a confirmation (the files on disk are not touched). While
an index runs: a progress bar (files done of total), the current file, and Cancel, which stops between files and
keeps what was indexed; each file that could not be indexed is one line in the log below.

Owns the window's widgets only; the runs, the listing and the thread they run on are the ``CollectionsIndexer``'s
(``app.runtime.collections_index``), given to it.
"""

from __future__ import annotations

import time
from pathlib import Path

from PySide6.QtCore import Qt, Slot
from PySide6.QtWidgets import (QAbstractItemView, QComboBox, QDialog, QFileDialog, QHBoxLayout, QHeaderView, QLabel,
                               QMessageBox, QPlainTextEdit, QProgressBar, QPushButton, QTableWidget,
                               QTableWidgetItem, QVBoxLayout, QWidget)

from app.runtime.collections_index import CollectionsIndexer
from app.ui import accessibility
from app.ui.engine_texts import engine_text
from engine.docs.index import FileProgress, IndexReport
from engine.fmt import format_bytes, outside_text

DEFAULT_SIZE = (760, 560)
LIST_INTERVAL_S = 1.0  # while indexing, the table is listed again this often (a read-only query beside the writer)
LOG_LINES = 2000  # the log keeps the last lines: a folder of 10,000 unreadable files must not grow it forever


class CollectionsWindow(QDialog):
    """The collections window; open it with ``show()`` / ``raise_()`` / ``activateWindow()``. No signals: what
    changed is the indexer's ``collections_changed``."""

    def __init__(self, indexer: CollectionsIndexer, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.indexer = indexer
        self.setWindowTitle(self.tr("Collections"))
        self.setModal(False)
        self.setSizeGripEnabled(True)
        self.resize(*DEFAULT_SIZE)
        layout = QVBoxLayout(self)
        intro = QLabel(self.tr("Folders and files indexed for answers with sources. Pick the collections a "
                               "conversation answers from with the 📚 button beside Attach."))
        intro.setWordWrap(True)
        intro.setObjectName("footer")
        layout.addWidget(intro)

        self.table = QTableWidget(0, 5)
        self.table.setHorizontalHeaderLabels([self.tr("Collection"), self.tr("Files"), self.tr("Passages"),
                                              self.tr("Size"), self.tr("Embedded")])
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        self.table.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        accessibility.name(self.table, self.tr("Collections"), self.tr("Each collection's files, passages and size"))
        layout.addWidget(self.table, 1)
        self.empty_label = QLabel(self.tr("No collections yet: name one below and add a folder or files."))
        self.empty_label.setObjectName("footer")
        layout.addWidget(self.empty_label)

        row = QHBoxLayout()
        row.addWidget(QLabel(self.tr("Collection:")))
        self.name_box = QComboBox()
        self.name_box.setEditable(True)
        self.name_box.setMinimumWidth(180)
        self.name_box.setToolTip(self.tr("The collection to add to: pick one, or type a new name"))
        accessibility.name(self.name_box, self.tr("Collection name"), self.name_box.toolTip())
        row.addWidget(self.name_box, 1)
        self.add_folder_button = QPushButton(self.tr("Add folder…"))
        self.add_files_button = QPushButton(self.tr("Add files…"))
        self.reindex_button = QPushButton(self.tr("Re-index"))
        self.reindex_button.setToolTip(self.tr("Walk the selected collection's folders and files again: new files "
                                               "are added, changed ones read again, vanished ones removed"))
        self.remove_button = QPushButton(self.tr("Remove"))
        self.remove_button.setObjectName("danger")
        self.remove_button.setToolTip(self.tr("Forget the selected collection (your files are not touched)"))
        for button in (self.add_folder_button, self.add_files_button, self.reindex_button, self.remove_button):
            button.setAccessibleDescription(button.toolTip())
            row.addWidget(button)
        layout.addLayout(row)

        progress_row = QHBoxLayout()
        self.progress = QProgressBar()
        self.progress.setFormat("%v / %m")
        self.cancel_button = QPushButton(self.tr("Cancel"))
        self.cancel_button.setToolTip(self.tr("Stop after the file being read; what was indexed stays"))
        self.cancel_button.setAccessibleDescription(self.cancel_button.toolTip())
        progress_row.addWidget(self.progress, 1)
        progress_row.addWidget(self.cancel_button)
        layout.addLayout(progress_row)
        self.status_label = QLabel("")
        self.status_label.setTextFormat(Qt.TextFormat.PlainText)
        self.status_label.setObjectName("footer")
        layout.addWidget(self.status_label)
        self.log = QPlainTextEdit()
        self.log.setReadOnly(True)
        self.log.setMaximumBlockCount(LOG_LINES)
        self.log.setMaximumHeight(130)
        self.log.setPlaceholderText(self.tr("Files that could not be indexed are listed here, one line each."))
        accessibility.name(self.log, self.tr("Indexing log"), self.log.placeholderText())
        layout.addWidget(self.log)

        self.add_folder_button.clicked.connect(self.on_add_folder_clicked)
        self.add_files_button.clicked.connect(self.on_add_files_clicked)
        self.reindex_button.clicked.connect(self.on_reindex_clicked)
        self.remove_button.clicked.connect(self.on_remove_clicked)
        self.cancel_button.clicked.connect(self.on_cancel_clicked)
        self.table.itemSelectionChanged.connect(self.on_table_selection_changed)
        indexer.started.connect(self.on_indexer_started)
        indexer.progressed.connect(self.on_indexer_progressed)
        indexer.noted.connect(self.on_indexer_noted)
        indexer.finished.connect(self.on_indexer_finished)
        indexer.removed.connect(self.on_indexer_removed)
        indexer.collections_changed.connect(self.refresh)
        indexer.busy_changed.connect(self._update_buttons)
        self._indexing = ""  # the collection being indexed ("" when none)
        self._listed = 0.0  # when the table was last listed (time.monotonic)
        self.progress.hide()
        self.cancel_button.hide()
        self.refresh()

    # -- what it shows --------------------------------------------------------------------------------
    @Slot()
    def refresh(self) -> None:
        """List the store's collections again, keeping the selection and the typed name."""
        self._listed = time.monotonic()
        selected, typed = self.selected(), self.name_box.currentText()
        infos = self.indexer.collections()
        self.table.setRowCount(len(infos))
        for i, info in enumerate(infos):
            cells = (outside_text(info.name), str(info.files), str(info.passages), format_bytes(info.bytes),
                     str(info.vectors))
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setData(Qt.ItemDataRole.UserRole, info.name)
                if column:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                self.table.setItem(i, column, item)
            if info.name == selected:
                self.table.selectRow(i)
        self.table.resizeColumnsToContents()
        self.table.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.empty_label.setVisible(not infos)
        self.name_box.blockSignals(True)
        self.name_box.clear()
        self.name_box.addItems([info.name for info in infos])
        self.name_box.setCurrentText(typed or (infos[0].name if infos else self.tr("notes")))
        self.name_box.blockSignals(False)
        self._update_buttons()

    def selected(self) -> str:
        """The selected collection's name ('' when none)."""
        items = self.table.selectedItems()
        return str(items[0].data(Qt.ItemDataRole.UserRole)) if items else ""

    def _update_buttons(self) -> None:
        busy, chosen = self.indexer.is_busy(), bool(self.selected())
        for button in (self.add_folder_button, self.add_files_button):
            button.setEnabled(not busy)
        self.reindex_button.setEnabled(not busy and chosen)
        self.remove_button.setEnabled(not busy and chosen)
        self.cancel_button.setVisible(busy and bool(self._indexing))

    # -- user actions ---------------------------------------------------------------------------------
    def add(self, paths: list[str]) -> bool:
        """Index ``paths`` into the collection named in the Collection field (what the Add buttons do once the
        user picked); False, said in the status line, when there is no name or a run is going on."""
        name = self.name_box.currentText().strip()
        if not name:
            self.status_label.setText(self.tr("Name the collection to add to first."))
            return False
        return bool(paths) and self.indexer.index(name, paths)

    @Slot()
    def on_add_folder_clicked(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, self.tr("Add a folder to the collection"))
        if folder:
            if not self.name_box.currentText().strip():
                self.name_box.setCurrentText(Path(folder).name)
            self.add([folder])

    @Slot()
    def on_add_files_clicked(self) -> None:
        files, _ = QFileDialog.getOpenFileNames(self, self.tr("Add files to the collection"), "", self.tr(
            "Documents (*.txt *.md *.pdf *.docx *.html *.htm *.csv *.json *.py *.js *.ts *.c *.cpp *.h *.java *.go "
            "*.rs);;All files (*)"))
        self.add(files)

    @Slot()
    def on_reindex_clicked(self) -> None:
        if name := self.selected():
            self.indexer.reindex(name)

    @Slot()
    def on_remove_clicked(self) -> None:
        name = self.selected()
        if not name:
            return
        answer = QMessageBox.question(
            self, self.tr("Remove collection"),
            self.tr("Remove the collection “{name}” and everything indexed in it? Your files are not touched; "
                    "conversations that answer from it stop doing so.").format(name=outside_text(name)))
        if answer == QMessageBox.StandardButton.Yes and self.indexer.remove(name):
            self.status_label.setText(self.tr("Removing “{name}”…").format(name=outside_text(name)))

    @Slot()
    def on_cancel_clicked(self) -> None:
        self.indexer.cancel()
        self.status_label.setText(self.tr("Cancelling after the file being read…"))

    @Slot()
    def on_table_selection_changed(self) -> None:
        if name := self.selected():
            self.name_box.setCurrentText(name)
        self._update_buttons()

    # -- the indexer's reports ------------------------------------------------------------------------
    @Slot(str)
    def on_indexer_started(self, name: str) -> None:
        self._indexing = name
        self.progress.setRange(0, 0)  # busy until the walk has counted the files
        self.progress.show()
        self.status_label.setText(self.tr("Indexing “{name}”: looking for files…").format(name=outside_text(name)))
        self._update_buttons()

    @Slot(object)
    def on_indexer_progressed(self, event: FileProgress) -> None:
        if time.monotonic() - self._listed >= LIST_INTERVAL_S:  # the table grows while a big folder is indexed
            self.refresh()
        self.progress.setRange(0, event.total)
        self.progress.setValue(event.done)
        self.status_label.setText(self.tr("Indexing “{name}”: {done} / {total} files · {file}").format(
            name=outside_text(self._indexing), done=event.done, total=event.total,
            file=outside_text(Path(event.path).name)))

    @Slot(str)
    def on_indexer_noted(self, line: str) -> None:
        self.log.appendPlainText(outside_text(engine_text(line)))

    @Slot(str)
    def on_indexer_removed(self, name: str) -> None:
        self.status_label.setText(self.tr("Removed “{name}”.").format(name=outside_text(name)))
        if self.name_box.currentText() == name:
            self.name_box.setCurrentText("")

    @Slot(object)
    def on_indexer_finished(self, report: IndexReport | None) -> None:
        self.progress.hide()
        name, self._indexing = self._indexing, ""
        self._update_buttons()
        if report is None:
            self.status_label.setText(self.tr("Indexing “{name}” failed: see the log.").format(name=outside_text(name)))
            return
        text = (self.tr("Cancelled: “{name}” keeps the {n} files indexed before the cancel.") if report.cancelled
                else self.tr("“{name}” is up to date: {added} added, {updated} updated, {unchanged} unchanged, "
                             "{removed} removed, {failed} skipped, in {seconds:.1f} s."))
        self.status_label.setText(text.format(
            name=outside_text(name), n=report.added + report.updated + report.unchanged, added=report.added,
            updated=report.updated, unchanged=report.unchanged, removed=report.removed, failed=report.failed,
            seconds=report.seconds))
