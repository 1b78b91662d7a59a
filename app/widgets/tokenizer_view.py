"""The tokenizer view: how a text is cut into the loaded model's tokens, with ids and counts.

The text is tokenised by ``engine.lab.tokenview`` on the model's worker thread (through the bridge's
``submit_task``); the widget shows the pieces as coloured chips (a split character shows its parts),
a table of index / id / token / covered text, and the counts (tokens, characters, bytes, characters per
token, split characters). Typing re-tokenises after a short pause; only the latest request's answer
is shown. ``set_text`` lets the window show the prompt being written. Owns display only.
"""

from __future__ import annotations

import functools
import html
from typing import Any

from PySide6.QtCore import Qt, QTimer, Signal, Slot
from PySide6.QtWidgets import (QAbstractItemView, QCheckBox, QHBoxLayout, QLabel, QPlainTextEdit, QPushButton,
                               QSplitter, QTableWidget, QTableWidgetItem, QTextBrowser, QVBoxLayout, QWidget)

from app.ui import accessibility
from app.ui.engine_texts import engine_text
from engine.lab.tokenview import TokenView, token_view

DEBOUNCE_MS = 300  # re-tokenise after the user pauses typing, not on every keystroke
CHIP_COLOURS = ("#dbeafe", "#fde68a", "#bbf7d0", "#fecaca", "#e9d5ff")  # readable on light and dark text
SPLIT_COLOUR = "#fb923c"  # parts of one character cut into several tokens
MAX_TABLE_ROWS = 5000  # a longer text still shows its counts; the table stops here to stay responsive


class TokenizerView(QWidget):
    """Type or paste a text; see its tokens.

    Signals:
        view_shown(object): a ``TokenView`` was displayed (the latest requested text).
    """

    view_shown = Signal(object)

    def __init__(self, bridge: Any, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._bridge = bridge
        self._pending_id = 0  # id of the latest submitted task; older answers are ignored
        self._has_model = getattr(bridge, "facts", None) is not None
        self.input = QPlainTextEdit()
        self.input.setPlaceholderText(self.tr("Type a text to see how the model cuts it into tokens, e.g. "
                                              "我昨天认识的那个人"))
        self.template_box = QCheckBox(self.tr("as a chat turn (with the chat template)"))
        self.tokenize_button = QPushButton(self.tr("Tokenize"))
        self.counts_label = QLabel("")
        self.counts_label.setWordWrap(True)  # one line of counts is ~680 px: it wraps in the dock, never widens it
        self.status_label = QLabel(self.tr("Load a model to tokenize.") if not self._has_model else "")
        self.status_label.setWordWrap(True)
        self.chips = QTextBrowser()
        self.chips.setOpenLinks(False)
        self.table = QTableWidget(0, 5)
        self.table.setHorizontalHeaderLabels(["#", "id", self.tr("token"), self.tr("text"), self.tr("part")])
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        header = self.table.horizontalHeader()
        header.setStretchLastSection(True)
        for column, chars in enumerate((4, 6, 10, 8)):  # narrow columns: the table fits the dock without scrolling
            header.resizeSection(column, self.fontMetrics().horizontalAdvance("0" * chars) + 12)
        self.table.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        accessibility.name(self.input, self.tr("Text to tokenize"), self.tr("Tokenized again after a short pause"))
        accessibility.name(self.chips, self.tr("Tokens as coloured pieces"),
                           self.tr("Each piece is one token; orange pieces are parts of one character"))
        accessibility.name(self.table, self.tr("Tokens, one per row"))
        self.tokenize_button.setToolTip(self.tr("Tokenize the text now"))
        self.tokenize_button.setAccessibleDescription(self.tokenize_button.toolTip())

        row = QHBoxLayout()
        row.addWidget(self.template_box, 1)
        row.addWidget(self.tokenize_button)
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.chips)
        split.addWidget(self.table)
        layout = QVBoxLayout(self)
        layout.addWidget(self.input, 1)
        layout.addLayout(row)
        layout.addWidget(self.counts_label)
        layout.addWidget(self.status_label)
        layout.addWidget(split, 3)

        self._debounce = QTimer(self)
        self._debounce.setSingleShot(True)
        self._debounce.setInterval(DEBOUNCE_MS)
        self._debounce.timeout.connect(self.on_debounce_timeout)
        self.input.textChanged.connect(self.on_input_text_changed)
        self.template_box.toggled.connect(self.on_template_box_toggled)
        self.tokenize_button.clicked.connect(self.on_tokenize_clicked)
        bridge.task_finished.connect(self.on_bridge_task_finished)
        bridge.task_failed.connect(self.on_bridge_task_failed)
        bridge.model_loaded.connect(self.on_bridge_model_loaded)

    # -- public -------------------------------------------------------------------------------------
    def set_text(self, text: str) -> None:
        """Show ``text`` (e.g. the prompt being written) and tokenise it after the usual pause."""
        if text != self.input.toPlainText():
            self.input.setPlainText(text)

    def tokenize(self) -> int:
        """Submit the current text now; returns the task id (0 when there is nothing to do)."""
        self._debounce.stop()
        text = self.input.toPlainText()
        if not self._has_model:
            self.status_label.setText(self.tr("Load a model to tokenize."))
            return 0
        if not text and not self.template_box.isChecked():
            self._show(None)
            return 0
        self._pending_id = self._bridge.submit_task(
            functools.partial(token_view, text=text, with_template=self.template_box.isChecked()))
        self.status_label.setText(self.tr("tokenizing…"))
        return self._pending_id

    # -- slots --------------------------------------------------------------------------------------
    @Slot()
    def on_input_text_changed(self) -> None:
        self._debounce.start()

    @Slot(bool)
    def on_template_box_toggled(self, _checked: bool) -> None:
        self.tokenize()

    @Slot()
    def on_tokenize_clicked(self) -> None:
        self.tokenize()

    @Slot()
    def on_debounce_timeout(self) -> None:
        self.tokenize()

    @Slot(object)
    def on_bridge_model_loaded(self, _facts: object) -> None:
        self._has_model = True
        self.status_label.setText("")
        if self.input.toPlainText():
            self.tokenize()  # a new model means a new tokenizer: the old pieces are stale

    @Slot(int, object)
    def on_bridge_task_finished(self, task_id: int, result: object) -> None:
        if task_id == self._pending_id and isinstance(result, TokenView):
            self.status_label.setText("")
            self._show(result)

    @Slot(int, str)
    def on_bridge_task_failed(self, task_id: int, message: str) -> None:
        if task_id == self._pending_id:
            self.status_label.setText(engine_text(message))

    # -- display ------------------------------------------------------------------------------------
    def _show(self, view: TokenView | None) -> None:
        if view is None:
            self.counts_label.setText("")
            self.chips.clear()
            self.table.setRowCount(0)
            return
        counts = self.tr("{tokens} tokens · {chars} characters · {bytes} UTF-8 bytes · {ratio} characters/token · "
                         "{split} characters split into several tokens")
        self.counts_label.setText(counts.format(
            tokens=f"{view.token_count:,}", chars=f"{view.char_count:,}", bytes=f"{view.byte_count:,}",
            ratio=f"{view.chars_per_token:.2f}", split=f"{view.split_chars:,}"))
        chips = []
        for piece in view.pieces:
            colour = SPLIT_COLOUR if piece.parts > 1 else CHIP_COLOURS[piece.index % len(CHIP_COLOURS)]
            shown = html.escape(piece.label)
            chips.append(f'<span style="background-color:{colour}; color:#111;" title="id {piece.token_id}">'
                         f"{shown}</span>")
        self.chips.setHtml("<p style='line-height:160%'>" + "&#8203;".join(chips) + "</p>")
        pieces = view.pieces[:MAX_TABLE_ROWS]
        self.table.setRowCount(len(pieces))
        special = self.tr("special")
        for r, piece in enumerate(pieces):
            cells = (str(piece.index), str(piece.token_id), piece.token, piece.text.replace("\n", "↵"),
                     f"{piece.part}/{piece.parts}" if piece.parts > 1 else (special if piece.special else ""))
            for c, value in enumerate(cells):
                self.table.setItem(r, c, QTableWidgetItem(value))
        self.view_shown.emit(view)
