"""The read-only tables of the Models window, built one way: headers, no row numbers, no editing, whole-row
single selection, rows as tall as one line of text needs."""

from __future__ import annotations

from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableWidget

ROW_PADDING_PX = 10


def read_only_table(headers: list[str], stretch: int | None = 0, selectable: bool = True,
                    accessible_name: str = "") -> QTableWidget:
    """A table with ``headers``; column ``stretch`` takes the spare width, the others fit their contents;
    ``accessible_name`` is what a screen reader calls it."""
    table = QTableWidget(0, len(headers))
    table.setAccessibleName(accessible_name)
    table.setHorizontalHeaderLabels(headers)
    table.verticalHeader().setVisible(False)
    table.verticalHeader().setDefaultSectionSize(table.fontMetrics().height() + ROW_PADDING_PX)
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.setWordWrap(False)
    if selectable:
        table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
    else:
        table.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
    header = table.horizontalHeader()
    for column in range(len(headers)):
        header.setSectionResizeMode(column, QHeaderView.ResizeMode.Stretch if column == stretch
                                    else QHeaderView.ResizeMode.ResizeToContents)
    return table
