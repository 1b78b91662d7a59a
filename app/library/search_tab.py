"""The Hub search: a query, the sort (most downloaded / recently updated), a format filter, paged results, and
the selected result's page (``ModelPagePanel``) beside them.

``search(page)`` runs ``engine.library.hub.search`` off the GUI thread with the window's ``allow_downloads``;
with downloads off every control is disabled and a line says that nothing touches the network. Answers to a
search the user has since replaced are dropped. Owns the search controls and the result list.
"""

from __future__ import annotations

import functools

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtWidgets import (QComboBox, QHBoxLayout, QLabel, QLineEdit, QPushButton, QScrollArea, QSplitter,
                               QTableWidgetItem, QVBoxLayout, QWidget)

from app.library.model_page import ModelPagePanel
from app.library.tables import read_only_table
from app.runtime.background import TaskRunner, error_line
from engine.library import hub
from engine.library.access import DEFAULT_ENDPOINT, HubUnreachableError, Unreachable
from engine.library.hub import SearchPage

PAGE_SIZE = 20


class SearchTab(QWidget):
    """Search controls, results and the model page; ``results`` is the ``SearchPage`` shown."""

    error = Signal(str)

    def __init__(self, runner: TaskRunner, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._runner = runner
        self._allowed, self._endpoint = False, None
        self.page_size = PAGE_SIZE
        self.results: SearchPage | None = None
        self._request: tuple[str, str, str, int] | None = None
        layout = QVBoxLayout(self)
        self.offline_note = QLabel(self.tr("Downloads are off, so search is off too: nothing in this window "
                                           "touches the network. Tick “Allow downloads from Hugging Face” above "
                                           "to search."))
        self.offline_note.setObjectName("notice")
        self.offline_note.setWordWrap(True)
        layout.addWidget(self.offline_note)
        row = QHBoxLayout()
        self.query = QLineEdit()
        self.query.setPlaceholderText(self.tr("Search Hugging Face text-generation models, e.g. SmolLM2"))
        self.query.setClearButtonEnabled(True)
        self.query.returnPressed.connect(self.on_search_clicked)
        row.addWidget(self.query, 1)
        self.query.setAccessibleName(self.tr("Search models"))
        self.sort = QComboBox()
        self.sort.addItem(self.tr("Most downloaded"), "downloads")
        self.sort.addItem(self.tr("Recently updated"), "recent")
        row.addWidget(self.sort)
        self.sort.setAccessibleName(self.tr("Sort by"))
        self.format = QComboBox()
        self.format.addItem(self.tr("safetensors or GGUF"), "any")
        self.format.addItem(self.tr("safetensors only"), "safetensors")
        self.format.addItem(self.tr("GGUF only"), "gguf")
        row.addWidget(self.format)
        self.format.setAccessibleName(self.tr("Weights format"))
        self.search_button = QPushButton(self.tr("Search"))
        self.search_button.setObjectName("primary")
        self.search_button.clicked.connect(self.on_search_clicked)
        row.addWidget(self.search_button)
        layout.addLayout(row)

        left = QWidget()
        left_layout = QVBoxLayout(left)
        left_layout.setContentsMargins(0, 0, 0, 0)
        self.table = read_only_table([self.tr("Model"), self.tr("Format"), self.tr("Downloads"), self.tr("Updated")],
                                     accessible_name=self.tr("Search results"))
        self.table.setTextElideMode(Qt.TextElideMode.ElideMiddle)  # owner…/name: both ends say which model
        self.table.itemSelectionChanged.connect(self.on_result_selected)
        left_layout.addWidget(self.table, 1)
        paging = QHBoxLayout()
        self.previous_button = QPushButton(self.tr("◀ Previous"))
        self.previous_button.clicked.connect(self.on_previous_clicked)
        paging.addWidget(self.previous_button)
        self.status = QLabel()
        self.status.setObjectName("footer")
        self.status.setAlignment(Qt.AlignmentFlag.AlignCenter)
        paging.addWidget(self.status, 1)
        self.next_button = QPushButton(self.tr("Next ▶"))
        self.next_button.clicked.connect(self.on_next_clicked)
        paging.addWidget(self.next_button)
        left_layout.addLayout(paging)

        self.model_page = ModelPagePanel(runner)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(self.model_page)
        scroll.setAccessibleName(self.tr("Model page"))
        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.addWidget(left)
        self.splitter.addWidget(scroll)
        self.splitter.setStretchFactor(0, 2)
        self.splitter.setStretchFactor(1, 3)
        self.splitter.setSizes([470, 690])
        layout.addWidget(self.splitter, 1)
        self.set_access(False, None)

    # -- state from the window ------------------------------------------------------------------
    def set_access(self, allowed: bool, endpoint: str | None) -> None:
        """Enable the controls only with downloads allowed (``endpoint``: the Hub to ask, None for the default)."""
        self._allowed, self._endpoint = allowed, endpoint
        for widget in (self.query, self.sort, self.format, self.search_button):
            widget.setEnabled(allowed)
        self.offline_note.setVisible(not allowed)
        self.model_page.set_access(allowed, endpoint)
        self._update_paging()

    def _update_paging(self) -> None:
        results = self.results
        self.previous_button.setEnabled(self._allowed and results is not None and results.page > 0)
        self.next_button.setEnabled(self._allowed and results is not None and results.more)

    # -- searching ------------------------------------------------------------------------------
    def search(self, page: int = 0) -> None:
        """Ask for results page ``page`` of the query, sort and format shown (off the GUI thread)."""
        self._submit((self.query.text().strip(), self.sort.currentData(), self.format.currentData(), page))

    def _submit(self, request: tuple[str, str, str, int]) -> None:
        if not self._allowed:
            self.error.emit(self.tr("Downloads from Hugging Face are off: tick “Allow downloads from Hugging Face” "
                                    "to search."))
            return
        self._request = request
        self.status.setText(self.tr("Searching…"))
        allowed, endpoint, size = self._allowed, self._endpoint, self.page_size
        text, sort, fmt, number = request
        self._runner.submit(lambda: hub.search(text, allow_downloads=allowed, endpoint=endpoint, sort=sort, fmt=fmt,
                                               page=number, page_size=size),
                            functools.partial(self._on_results, request),
                            functools.partial(self._on_failed, request))

    def _on_results(self, request: tuple[str, str, str, int], results: SearchPage) -> None:
        if request != self._request:
            return
        self.results = results
        self.table.blockSignals(True)
        self.table.clearSelection()
        self.table.setRowCount(len(results.hits))
        for row, hit in enumerate(results.hits):
            name = hit.repo + (self.tr("  (gated)") if hit.gated else "")
            cells = [name, " + ".join(hit.formats) or "—",
                     f"{hit.downloads:,}" if hit.downloads is not None else "—", (hit.last_modified or "—")[:10]]
            tip = self.tr("{repo}\nlicense {license} · {likes} likes").format(
                repo=hit.repo, license=hit.license or "?", likes=f"{hit.likes:,}" if hit.likes is not None else "?")
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setData(Qt.ItemDataRole.UserRole, hit.repo)
                item.setToolTip(tip)
                if column == 2:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                self.table.setItem(row, column, item)
        self.table.blockSignals(False)
        if results.hits:
            self.status.setText(self.tr("Page {page}").format(page=results.page + 1))
        else:
            self.status.setText(self.tr("No text-generation models with safetensors or GGUF weights on this page"))
        self._update_paging()

    def _on_failed(self, request: tuple[str, str, str, int], exc: BaseException) -> None:
        if request == self._request:
            self.status.setText("")
            self.error.emit(self.unreachable_text(exc) if isinstance(exc, HubUnreachableError) else error_line(exc))

    def unreachable_text(self, exc: HubUnreachableError) -> str:
        """The one line the window says when the Hub's host cannot be reached, in the interface's language."""
        why = {Unreachable.NO_NAME: self.tr("no network or the name does not resolve"),
               Unreachable.REFUSED: self.tr("nothing accepts connections there"),
               Unreachable.TIMEOUT: self.tr("no answer (no network, or a firewall drops the connection)"),
               Unreachable.OTHER: self.tr("no network, or the host cannot be reached")}[exc.reason]
        if exc.endpoint == DEFAULT_ENDPOINT:
            return self.tr("Cannot reach Hugging Face: {why}.").format(why=why)
        return self.tr("Cannot reach {endpoint}: {why}.").format(endpoint=exc.endpoint, why=why)

    def select_repo(self, repo: str) -> bool:
        """Select ``repo`` among the results shown (its page opens); False when it is not there."""
        for row in range(self.table.rowCount()):
            if self.table.item(row, 0).data(Qt.ItemDataRole.UserRole) == repo:
                self.table.selectRow(row)
                return True
        return False

    # -- slots ----------------------------------------------------------------------------------
    @Slot()
    def on_search_clicked(self) -> None:
        self.search(0)

    @Slot()
    def on_previous_clicked(self) -> None:
        r = self.results
        if r is not None and r.page > 0:
            self._submit((r.query, r.sort, r.format, r.page - 1))  # the query as searched, not as edited since

    @Slot()
    def on_next_clicked(self) -> None:
        r = self.results
        if r is not None and r.more:
            self._submit((r.query, r.sort, r.format, r.page + 1))

    @Slot()
    def on_result_selected(self) -> None:
        items = self.table.selectedItems()
        if items:
            self.model_page.show_repo(items[0].data(Qt.ItemDataRole.UserRole))
