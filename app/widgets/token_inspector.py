"""The token inspector: every generated token of the current reply with its id, probability and the
best candidates the sampler saw.

Owns a table fed by the bridge's ``tokens_received`` batches (``engine.events.Token``); rows are
appended in batches, never re-built, and capped so a very long reply cannot grow the table without
bound. Shows what the engine reported; computes nothing.
"""

from __future__ import annotations

from typing import Any, Sequence

from PySide6.QtCore import QT_TRANSLATE_NOOP, Qt
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QLabel, QTableWidget, QTableWidgetItem, QVBoxLayout, QWidget

from app.ui import accessibility

MAX_ROWS = 4096  # a reply longer than this keeps its newest tokens; the table stays responsive


def visible(text: str) -> str:
    """Make whitespace and control characters of a token visible (a token is often just ' ' or '\\n')."""
    return (text.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r")
            .replace(" ", "·")) or "∅"


class TokenInspector(QWidget):
    """Token table of the reply being generated (or the last one)."""

    COLUMNS = ("#", QT_TRANSLATE_NOOP("TokenInspector", "token"), "id", "p",
               QT_TRANSLATE_NOOP("TokenInspector", "top candidates"))  # shown translated

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 8, 8, 8)
        hint = QLabel(self.tr("Each row is one decode step: the token chosen, its probability, and the runners-up "
                              "(· marks a space, ∅ a token that completes no character yet)."))
        hint.setWordWrap(True)
        hint.setObjectName("footer")
        layout.addWidget(hint)
        self.table = QTableWidget(0, len(self.COLUMNS))
        self.table.setHorizontalHeaderLabels([self.tr(column) for column in self.COLUMNS])
        self.table.verticalHeader().hide()
        self.table.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 6)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        header = self.table.horizontalHeader()
        # Fixed widths: ResizeToContents re-measures every row on each insert (measured 8 ms per batch at 200 rows).
        for column, chars in enumerate((4, 10, 6, 6)):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.Interactive)
            header.resizeSection(column, self.fontMetrics().horizontalAdvance("0" * chars) + 12)
        header.setStretchLastSection(True)
        # The last column takes what is left: no sideways scroll bar in the dock (its cells' tooltips have them whole).
        self.table.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        accessibility.name(self.table, self.tr("Tokens of the reply"), hint.text())
        self._pending: list[Any] = []  # tokens that arrived while the tab was hidden
        layout.addWidget(self.table)

    def clear(self) -> None:
        self._pending.clear()
        self.table.setRowCount(0)

    def add_tokens(self, tokens: Sequence[Any]) -> None:
        """Append tokens; while the tab is hidden they wait (no table work competes with the engine)."""
        if not self.isVisible():
            self._pending.extend(tokens)
            del self._pending[:-MAX_ROWS]
            return
        self._add_rows(list(tokens))

    def showEvent(self, event) -> None:  # noqa: N802 (Qt override)
        super().showEvent(event)
        if self._pending:
            pending, self._pending = self._pending, []
            self._add_rows(pending)

    def _add_rows(self, tokens: list[Any]) -> None:
        if not tokens:
            return
        self.table.setUpdatesEnabled(False)
        try:
            start = self.table.rowCount()
            self.table.setRowCount(start + len(tokens))
            for offset, token in enumerate(tokens):
                row = start + offset
                prob = getattr(token, "prob", None)
                top = ", ".join(f"{visible(c.text)} {c.prob:.2f}" for c in getattr(token, "top", ()))
                cells = (str(token.index), visible(token.text), str(token.token_id) if token.token_id >= 0 else "—",
                         "" if prob is None else f"{prob:.3f}", top)
                for column, text in enumerate(cells):
                    item = QTableWidgetItem(text)
                    if column == 4:
                        item.setToolTip(text)
                    if column in (0, 2, 3):
                        item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                    self.table.setItem(row, column, item)
            overflow = self.table.rowCount() - MAX_ROWS
            for _ in range(max(0, overflow)):
                self.table.removeRow(0)
        finally:
            self.table.setUpdatesEnabled(True)
        self.table.scrollToBottom()

    def row_count(self) -> int:
        """Rows shown plus rows waiting for the tab to be shown."""
        return self.table.rowCount() + len(self._pending)
