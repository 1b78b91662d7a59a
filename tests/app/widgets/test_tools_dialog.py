"""What an MCP server or a model chose reaches the Tools dialog and the question before a run as plain text (issue
40, item 3): arguments that hide a command inside an HTML comment show the command, a description holding
``<img src=local file>`` shows those characters and loads no image. And the dialog lists thousands of tools in
linear time (issue 40, item 9): the rows it looks at are counted, not timed. Real widgets under pytest-qt."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QTextDocument
from PySide6.QtGui import Qt as GuiQt
from PySide6.QtWidgets import QLabel, QListWidget

from app.runtime.tool_host import ConfirmRequest
from app.widgets.tools_dialog import ToolConfirmation, ToolsDialog
from engine.tools.mcp import McpTool

HIDDEN = '{"a": "<b></b><!--", "command": "rm -rf ~/Documents", "z": "-->"}'


def _rendered(text: str, text_format: Qt.TextFormat = Qt.TextFormat.AutoText) -> QTextDocument:
    """``text`` laid out as a label (or a tooltip: AutoText) decides to: rich text when it looks like it."""
    document = QTextDocument()
    rich = text_format == Qt.TextFormat.RichText or (text_format == Qt.TextFormat.AutoText
                                                      and GuiQt.mightBeRichText(text))
    document.setHtml(text) if rich else document.setPlainText(text)
    return document


def test_the_question_before_a_run_shows_the_whole_arguments(qtbot):
    box = ToolConfirmation(ConfirmRequest("<i>shout</i>", HIDDEN))
    qtbot.addWidget(box)
    shown = "\n".join(_rendered(label.text(), label.textFormat()).toPlainText() for label in box.findChildren(QLabel))
    assert "rm -rf ~/Documents" in shown and "<!--" in shown and "<i>shout</i>" in shown


def test_a_description_with_an_image_shows_its_characters_and_loads_nothing(qtbot, tmp_path):
    image = tmp_path / "local.png"
    image.write_bytes(b"\x89PNG\r\n\x1a\n")
    description = f"<img src={image}> reads a local file"
    dialog = ToolsDialog([], [], "auto", "")
    qtbot.addWidget(dialog)
    tool = McpTool("<b>srv</b>", "look", description, {"type": "object"})
    dialog.on_tools_listed(([tool], [f"MCP server x: <img src={image}>"]))
    tooltip = _rendered(dialog.tool_item("look").toolTip())
    assert "<img" not in tooltip.toHtml() and tooltip.toPlainText().strip() == description
    problem = _rendered(dialog.server_error.text(), dialog.server_error.textFormat())
    assert "<img" not in problem.toHtml() and f"<img src={image}>" in problem.toPlainText()



def test_listing_5000_tools_looks_at_each_row_a_bounded_number_of_times(qtbot, monkeypatch):
    """Issue 40, item 9: each new row scanned every row, twice (5,000 tools froze the window 28 s). Counted: the
    rows the dialog reads through ``QListWidget.item``, for 5,000 enabled tools shown and then listed."""
    n = 5000
    looked: list[int] = []
    real_item = QListWidget.item
    monkeypatch.setattr(QListWidget, "item", lambda widget, row: looked.append(row) or real_item(widget, row))
    names = [f"tool{i}" for i in range(n)]
    dialog = ToolsDialog([], names, "auto", "")
    qtbot.addWidget(dialog)
    dialog.on_tools_listed(([McpTool("srv", name, "d", {"type": "object"}) for name in names], []))
    assert dialog.tools.count() == n and len(dialog.values().tools) == n
    assert len(looked) <= 2 * n, f"{len(looked)} row reads for {n} tools"
