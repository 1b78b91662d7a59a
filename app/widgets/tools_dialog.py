"""The "Tools…" dialog: the MCP servers the user adds (``stdio:COMMAND ARGS`` or a loopback ``http://`` URL, kept in
settings), their tools listed on demand with a checkbox each for this conversation, whether its first reply must
call one, and "Answer as JSON matching this schema" with the schema checked as it is typed (one line when it cannot
be used). Also ``ToolConfirmation``: the question asked before a tool that may change something runs.

Nothing is started or contacted here until the user presses "List tools": the servers are then started, listed and
closed on one of the app's background threads (``app.runtime.background``); a server that cannot start, hangs or
answers garbage is one line in the list. Every text a server or the model chose (tool names, descriptions, server
names, problems, arguments) reaches a widget as plain text: labels are ``Qt.TextFormat.PlainText``, a tooltip is
escaped (``plain_tooltip``), so ``<!--`` hides nothing and ``<img src=…>`` loads no file (issue 40). Owns these
widgets; the window applies their values
(``app.window.tool_turns``), the worker runs the tools (``app.runtime.tool_host``).
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any, Sequence

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtWidgets import (QCheckBox, QDialog, QDialogButtonBox, QHBoxLayout, QLabel, QLineEdit, QListWidget,
                               QListWidgetItem, QMessageBox, QPlainTextEdit, QPushButton, QVBoxLayout, QWidget)

from app.runtime.background import TaskRunner, error_line
from engine.constrain import ConstraintError, ConstraintSpec, check_spec
from engine.errors import BadInputError
from engine.tools.mcp import McpHub, McpTool, parse_server

LIST_TIMEOUT_S = 20.0  # starting a server and listing its tools, per server (a Python server imports its SDK)


@dataclass(frozen=True)
class ToolChoices:
    """What the dialog decided: the servers (all conversations), this conversation's tools, choice and schema."""

    servers: tuple[str, ...]
    tools: tuple[str, ...]
    tool_choice: str
    json_schema: str


def list_server_tools(servers: Sequence[str]) -> tuple[list[McpTool], list[str]]:
    """Start ``servers``, list their tools, stop them: (tools, one line per server that could not be used)."""
    specs, problems = [], []
    for text in servers:
        try:
            specs.append(parse_server(text))
        except BadInputError as exc:
            problems.append(str(exc))
    hub = McpHub(specs, timeout_s=LIST_TIMEOUT_S, connect_timeout_s=LIST_TIMEOUT_S)
    try:
        tools = hub.connect()
        return tools, problems + hub.problems
    finally:
        hub.close()


def plain_tooltip(text: str) -> str:
    """``text`` as a tooltip that shows its characters: a tooltip guesses rich text from tags, so the text is
    escaped inside a paragraph that is rich text on purpose (line breaks kept)."""
    return f"<p style='white-space:pre-wrap'>{html.escape(text)}</p>" if text else ""


def schema_problem(text: str) -> str:
    """One line saying why ``text`` cannot constrain a reply, or "" when it can."""
    try:
        check_spec(ConstraintSpec("json_schema", text))
    except ConstraintError as exc:
        return str(exc).splitlines()[0] if str(exc) else "unusable schema"
    return ""


class ToolsDialog(QDialog):
    """MCP servers, this conversation's tools and its JSON answers.

    Signals:
        tools_listed(): the servers' tools (or their one-line problems) are shown.
    """

    tools_listed = Signal()

    def __init__(self, servers: Sequence[str], enabled: Sequence[str], tool_choice: str, json_schema: str,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle(self.tr("Tools"))
        self.resize(620, 620)
        self._enabled = set(enabled)
        self._runner = TaskRunner(self, max_threads=1, daemon=True, name="miaohui-mcp-list")
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel(self.tr("MCP servers (for every conversation; nothing is started until you list "
                                        "their tools or enable one):"), wordWrap=True))
        self.servers = QListWidget()
        self.servers.addItems(list(servers))
        self.servers.setMaximumHeight(110)
        layout.addWidget(self.servers)
        row = QHBoxLayout()
        self.server_edit = QLineEdit()
        self.server_edit.setPlaceholderText("stdio:python my_server.py   ·   http://127.0.0.1:8765/mcp")
        self.add_button, self.remove_button = QPushButton(self.tr("Add")), QPushButton(self.tr("Remove"))
        self.list_button = QPushButton(self.tr("List tools"))
        for widget in (self.server_edit, self.add_button, self.remove_button, self.list_button):
            row.addWidget(widget, 1 if widget is self.server_edit else 0)
        layout.addLayout(row)
        self.server_error = QLabel("", objectName="notice", wordWrap=True, textFormat=Qt.TextFormat.PlainText)
        layout.addWidget(self.server_error)
        layout.addWidget(QLabel(self.tr("Tools this conversation may call (a tool that does not say it changes "
                                        "nothing asks you before each run):"), wordWrap=True))
        self.tools = QListWidget()
        # Each tool's row by name: a server may list thousands, and finding a row by scanning them all made
        # listing quadratic (8,000 tools froze the window 87 s, issue 40).
        self._items: dict[str, QListWidgetItem] = {}
        layout.addWidget(self.tools, 1)
        for name in sorted(self._enabled):  # shown before listing, so a choice is never lost unseen
            self._add_tool_item(name, None)
        self.required = QCheckBox(self.tr("The first reply must call a tool"))
        self.required.setChecked(tool_choice == "required")
        self.required.setToolTip(self.tr("Only this conversation's first reply; later replies call a tool when the "
                                         "model chooses to."))
        layout.addWidget(self.required)
        self.json_box = QCheckBox(self.tr("Answer as JSON matching this schema"))
        self.json_box.setChecked(bool(json_schema))
        layout.addWidget(self.json_box)
        self.schema = QPlainTextEdit(json_schema or '{"type": "object", "properties": {"answer": {"type": "string", '
                                                   '"maxLength": 80}}, "required": ["answer"]}')
        self.schema.setMaximumHeight(120)
        layout.addWidget(self.schema)
        self.schema_error = QLabel("", objectName="notice", wordWrap=True, textFormat=Qt.TextFormat.PlainText)
        layout.addWidget(self.schema_error)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        layout.addWidget(self.buttons)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        self.add_button.clicked.connect(self.on_add_clicked)
        self.server_edit.returnPressed.connect(self.on_add_clicked)
        self.remove_button.clicked.connect(self.on_remove_clicked)
        self.list_button.clicked.connect(self.on_list_clicked)
        self.schema.textChanged.connect(self.on_schema_changed)
        self.json_box.toggled.connect(self.on_schema_changed)
        self.on_schema_changed()

    # -- values -----------------------------------------------------------------------------------------
    def server_list(self) -> list[str]:
        return [self.servers.item(i).text() for i in range(self.servers.count())]

    def tool_item(self, name: str) -> QListWidgetItem | None:
        return self._items.get(name)

    def values(self) -> ToolChoices:
        checked = tuple(name for name, item in self._items.items() if item.checkState() == Qt.CheckState.Checked)
        return ToolChoices(tuple(self.server_list()), checked, "required" if self.required.isChecked() else "auto",
                           self.schema.toPlainText().strip() if self.json_box.isChecked() else "")

    def _add_tool_item(self, name: str, tool: McpTool | None) -> None:
        known = self._items.get(name)
        item = known or QListWidgetItem()
        if tool is None:
            item.setText(self.tr("{name} (not listed yet)").format(name=name))
        else:
            kind = self.tr("changes nothing") if tool.read_only else self.tr("asks before running")
            item.setText(f"{tool.name} — {tool.description.splitlines()[0] if tool.description else ''} "
                         f"[{tool.server} · {kind}]")
            item.setToolTip(plain_tooltip(tool.description))
        item.setData(Qt.ItemDataRole.UserRole, name)
        item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
        item.setCheckState(Qt.CheckState.Checked if name in self._enabled else Qt.CheckState.Unchecked)
        if known is None:
            self._items[name] = item
            self.tools.addItem(item)

    # -- slots ------------------------------------------------------------------------------------------
    @Slot()
    def on_add_clicked(self) -> None:
        text = self.server_edit.text().strip()
        if not text:
            return
        try:
            parse_server(text)
        except BadInputError as exc:
            self.server_error.setText(str(exc).splitlines()[0])
            return
        self.server_error.setText("")
        if text not in self.server_list():
            self.servers.addItem(text)
        self.server_edit.clear()

    @Slot()
    def on_remove_clicked(self) -> None:
        for item in self.servers.selectedItems():
            self.servers.takeItem(self.servers.row(item))

    @Slot()
    def on_list_clicked(self) -> None:
        servers = self.server_list()
        if not servers:
            self.server_error.setText(self.tr("Add a server first."))
            return
        self.list_button.setEnabled(False)
        self.server_error.setText(self.tr("Starting the servers and listing their tools…"))
        self._runner.submit(lambda: list_server_tools(servers), self.on_tools_listed, self.on_listing_failed)

    @Slot(object)
    def on_tools_listed(self, result: Any) -> None:
        tools, problems = result
        self._enabled = {name for name in self._enabled if name not in self._items} | set(self.values().tools)
        for tool in tools:
            self._add_tool_item(tool.name, tool)
        self.server_error.setText("\n".join(problems) if problems else self.tr("{n} tools listed.").format(
            n=len(tools)))
        self.list_button.setEnabled(True)
        self.tools_listed.emit()

    @Slot(object)
    def on_listing_failed(self, exc: BaseException) -> None:
        self.server_error.setText(error_line(exc))
        self.list_button.setEnabled(True)
        self.tools_listed.emit()

    @Slot()
    def on_schema_changed(self) -> None:
        problem = schema_problem(self.schema.toPlainText()) if self.json_box.isChecked() else ""
        self.schema.setEnabled(self.json_box.isChecked())
        self.schema_error.setText(problem)
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setEnabled(not problem)


class ToolConfirmation(QMessageBox):
    """Asks whether a tool that may change something may run; answers ``request`` (a ``ConfirmRequest``) once."""

    def __init__(self, request: Any, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.request = request
        self.setIcon(QMessageBox.Icon.Question)
        # The name and arguments are the model's (and a server's): as rich text, "<!--" would hide the command.
        self.setTextFormat(Qt.TextFormat.PlainText)
        self.setWindowTitle(self.tr("Run this tool?"))
        self.setText(self.tr("The model wants to run {name}, which may change something.").format(name=request.name))
        self.setInformativeText(self.tr("Arguments: {arguments}").format(arguments=request.arguments))
        self.run_button = self.addButton(self.tr("Run"), QMessageBox.ButtonRole.AcceptRole)
        self.deny_button = self.addButton(self.tr("Deny"), QMessageBox.ButtonRole.RejectRole)
        self.setDefaultButton(self.deny_button)
        self.buttonClicked.connect(self.on_button_clicked)
        self.finished.connect(self.on_finished)

    @Slot(object)
    def on_button_clicked(self, button: Any) -> None:
        self.request.answer(button is self.run_button)

    @Slot(int)
    def on_finished(self, _result: int) -> None:
        self.request.answer(self.clickedButton() is self.run_button)  # closed another way: a no (answered once)
