"""The tool calls of a reply, shown in its bubble above the answer: ``ToolCallsSection``, one compact block per
call (name, arguments, result or its one-line failure, time in ms), each opening to show the whole arguments and
result; a server or tool that could not be used is one line among them.

Owns how calls look, live (``show_event``: asked, running, done) and as saved (``show_records``); not making them
(``app.runtime.tool_host``), nor saving them (``app.history``). Built only for a reply that called a tool.
"""

from __future__ import annotations

from typing import Any, Sequence

from PySide6.QtCore import Qt, Slot
from PySide6.QtWidgets import QFrame, QLabel, QToolButton, QVBoxLayout, QWidget

from app.history.tool_record import ToolCallRecord
from app.ui import accessibility

SHOWN_CHARS = 90  # of the arguments and of the result on a block's line; the block opens to show them whole


def _cut(text: str, limit: int = SHOWN_CHARS) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


class ToolCallBlock(QFrame):
    """One call: a line that opens (a tool button) onto the whole arguments and result."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("toolCall")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 3, 8, 3)
        layout.setSpacing(2)
        self.header = QToolButton(self)
        self.header.setObjectName("toolCallHeader")
        self.header.setCheckable(True)
        self.header.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.header.setArrowType(Qt.ArrowType.RightArrow)
        self.header.setAutoRaise(True)
        self.header.toggled.connect(self.on_header_toggled)
        self.details = QLabel(self)
        self.details.setObjectName("toolCallDetails")
        self.details.setTextFormat(Qt.TextFormat.PlainText)
        self.details.setWordWrap(True)
        self.details.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.details.hide()
        layout.addWidget(self.header)
        layout.addWidget(self.details)
        self.record: ToolCallRecord | None = None

    def show_state(self, name: str, arguments: str, state: str, record: ToolCallRecord | None = None) -> None:
        self.record = record
        tool = self.tr("tool")  # outside the f-strings: lupdate does not read tr() inside them
        if state == "problem" and record is not None:
            line, details = "⚠ " + _cut(record.result, 160), record.result
        elif record is None:
            waiting = self.tr("waiting for your answer…") if state == "asking" else self.tr("running…")
            line, details = f"{tool} {name}({_cut(arguments)}) · {waiting}", arguments
        else:
            mark = self.tr("refused:") if record.refused else ("→" if record.ok else "✗")
            line = f"{tool} {name}({_cut(arguments)}) {mark} {_cut(record.result)} · {record.ms:g} ms"
            details = self.tr("Arguments:\n{arguments}\n\nResult ({ms} ms):\n{result}").format(
                arguments=arguments, ms=f"{record.ms:g}", result=record.result)
        self.header.setText(line)
        self.header.setToolTip(self.tr("A tool the model called while replying: its name, arguments, result and how "
                                       "long the call took (measured around the MCP request). Click for the whole "
                                       "arguments and result."))
        self.details.setText(details)
        accessibility.name(self.header, self.tr("Tool call"), line)

    def text(self) -> str:
        return self.header.text()

    @Slot(bool)
    def on_header_toggled(self, open_: bool) -> None:
        self.header.setArrowType(Qt.ArrowType.DownArrow if open_ else Qt.ArrowType.RightArrow)
        self.details.setVisible(open_)


class ToolCallsSection(QFrame):
    """The blocks of one reply's calls, in the order they were made (no signals)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("toolCalls")
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._layout.setSpacing(2)
        self._blocks: list[ToolCallBlock] = []
        self._live: dict[int, ToolCallBlock] = {}

    @classmethod
    def of(cls, bubble: Any) -> "ToolCallsSection":
        """``bubble``'s section (a ``MessageWidget``), built under its role line the first time."""
        section = bubble.findChild(cls)
        if section is None:
            section = cls(bubble)
            bubble.layout().insertWidget(1, section)
        return section

    def blocks(self) -> list[ToolCallBlock]:
        return list(self._blocks)

    def _block(self) -> ToolCallBlock:
        block = ToolCallBlock(self)
        self._layout.addWidget(block)
        self._blocks.append(block)
        return block

    def show_records(self, records: Sequence[ToolCallRecord]) -> None:
        """A saved reply's calls (replacing what is shown)."""
        if [block.record for block in self._blocks] == list(records):
            return
        for block in self._blocks:
            block.deleteLater()
        self._blocks, self._live = [], {}
        for record in records:
            self._block().show_state(record.name, record.arguments, "problem" if not record.name else "done", record)

    def show_event(self, event: Any) -> None:
        """A ``ToolCallEvent`` of the reply being written: a new block, or the call's block updated."""
        block = self._live.get(event.index) if event.index >= 0 else None
        if block is None:
            block = self._block()
            if event.index >= 0:
                self._live[event.index] = block
        block.show_state(event.name, event.arguments, event.state, event.record)
