"""Tools and JSON answers in the window: ``ToolTurns`` ties the "Tools…" dialog, the per-conversation choices, the
calls shown in the reply as they happen, the question before a tool that may change something, the saving of the
round-trips with the reply and the panel's "Tools and constraints" view.

What a reply may use is read when it is sent (``Bridge.reply_tools``): the servers in settings, and the open
conversation's tools, tool choice and JSON schema (``ChatSettings``' per-conversation fields, saved with it); a
"required" tool choice binds the conversation's first reply only. A reply's ``ToolCallEvent``s arrive in order with
its stream: each becomes a block in the streaming bubble (``app.widgets.tool_call_view``) and a line in the panel;
once the reply is saved, its round-trips are saved with it (``HistoryStore.update_message(tool_calls=…)``), so
reopening and exports show them. Owns no widget of its own
beyond the dialogs it opens, and runs no tool (``app.runtime.tool_host``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from PySide6.QtCore import QCoreApplication, QObject, Slot
from PySide6.QtWidgets import QLabel, QMenu, QStatusBar, QWidget

from app.history.store import StoreError
from app.history.tool_record import ToolCallRecord
from app.runtime.bridge import Bridge
from app.runtime.tool_host import ConfirmRequest, ReplyTools, ToolCallEvent
from app.state.chat_messages import ChatMessage, FinishedReply
from app.state.settings import Settings
from app.widgets.chat_view import ChatView
from app.widgets.message_area import MessageArea
from app.widgets.perf_panel import PerfPanel
from app.widgets.tool_call_view import ToolCallsSection
from app.widgets.tool_cost_view import ToolCostView
from app.widgets.tools_dialog import ToolConfirmation, ToolsDialog
from app.window.controller import ChatController


class ToolTurns(QObject):
    """The window's tools (no signals): ``dialog`` the open "Tools…" dialog, ``confirmation`` the open question.

    ``parent`` (the main window) is the dialogs' parent; the rest is given: what it reads, what it shows in.
    """

    def __init__(self, controller: ChatController, bridge: Bridge, settings: Settings, chat: ChatView,
                 panel: PerfPanel, messages: MessageArea, status_bar: QStatusBar, status_state: QLabel,
                 parent: QWidget) -> None:
        super().__init__(parent)
        self.controller, self.bridge, self.settings, self.chat = controller, bridge, settings, chat
        self._messages, self._status_bar, self._status_state, self._parent = messages, status_bar, status_state, parent
        self.dialog: ToolsDialog | None = None
        self.confirmation: ToolConfirmation | None = None
        self.records: list[ToolCallRecord] = []  # the reply being written's round-trips
        self.cost_view = ToolCostView()
        # the view goes under the TTFT one, in the Performance tab's column
        column = panel.ttft_view.parentWidget().layout()
        column.insertWidget(column.indexOf(panel.ttft_view) + 1, self.cost_view)
        self.bridge.reply_tools = self.reply_tools
        self.bridge.tool_call_updated.connect(self.on_bridge_tool_call_updated)
        self.bridge.tool_confirmation_requested.connect(self.on_bridge_tool_confirmation_requested)
        self.bridge.stats_updated.connect(self.cost_view.show_metrics)
        self.controller.reply_started.connect(self.on_controller_reply_started)
        self.controller.reply_finished.connect(self.on_controller_reply_finished)

    def add_to(self, menu: QMenu) -> None:
        """The Chat → Tools… entry in ``menu`` (a separator after it ends its group)."""
        menu.addAction(QCoreApplication.translate("ToolTurns", "Tools…"), self.open_dialog)
        menu.addSeparator()

    def reply_tools(self, _conversation_id: int) -> ReplyTools | None:
        """What the reply about to be sent may use (the open conversation's choices); None: nothing."""
        chat = self.controller.chat_settings()
        servers = tuple(self.settings.mcp_servers())
        if not (servers and chat.tools) and not chat.json_schema:
            return None
        # "The first reply must call a tool" is the conversation's first reply only: read from its messages (the
        # history's, after a restart too), it never forces a call again on a later turn ("thanks, bye").
        choice = chat.tool_choice if _answers_first_turn(self.controller.messages()) else "auto"
        return ReplyTools(servers if chat.tools else (), chat.tools, choice, chat.json_schema)

    @Slot()
    def open_dialog(self) -> ToolsDialog:
        """Open the "Tools…" dialog (not modal: the window goes on); its OK applies to the open conversation."""
        chat = self.controller.chat_settings()
        self.dialog = ToolsDialog(self.settings.mcp_servers(), chat.tools, chat.tool_choice, chat.json_schema,
                                  self._parent)
        self.dialog.accepted.connect(self.on_dialog_accepted)
        self.dialog.open()
        return self.dialog

    # -- slots ----------------------------------------------------------------------------------------------
    @Slot()
    def on_dialog_accepted(self) -> None:
        if self.dialog is None:
            return
        choices = self.dialog.values()
        self.settings.set_mcp_servers(list(choices.servers))
        chat = self.controller.chat_settings()
        self.controller.apply_settings(replace(chat, tools=choices.tools, tool_choice=choices.tool_choice,
                                               json_schema=choices.json_schema))
        self._status_bar.showMessage(self.tr("Tools saved for this conversation; they apply to the next "
                                                    "reply."), 5000)

    @Slot(object)
    def on_bridge_tool_call_updated(self, event: ToolCallEvent) -> None:
        if event.state == "connecting":
            self._show_connecting(event.arguments)
            return
        if event.record is not None:
            self.records.append(event.record)
            self.cost_view.add_call(event.record)
        chat = self.chat
        if chat.is_streaming() and chat.widgets():
            ToolCallsSection.of(chat.widgets()[-1]).show_event(event)

    @Slot(object)
    def on_bridge_tool_confirmation_requested(self, request: ConfirmRequest) -> None:
        self.confirmation = ToolConfirmation(request, self._parent)
        self.confirmation.open()  # window-modal, not a nested event loop: the worker waits on the request

    @Slot(object)
    def on_controller_reply_started(self, _reply: ChatMessage) -> None:
        self.records = []
        self.cost_view.reset()

    @Slot(object)
    def on_controller_reply_finished(self, finished: FinishedReply) -> None:
        if self.confirmation is not None:  # the reply ended (stopped) while asking: the question goes with it
            self.confirmation.done(0)
            self.confirmation = None
        message, records = finished.message, tuple(self.records)
        if not records or not finished.kept or message.message_id is None:
            return
        try:
            self.controller.store.update_message(message.message_id, message.text, message.finish_reason,
                                                 tool_calls=records)
        except StoreError as exc:
            self._messages.show_message(self.tr("Tool calls not saved: {why}").format(why=exc), "warning")


    def _show_connecting(self, servers: str) -> None:
        """The reply waits for its tool servers to start and list their tools: say so where the reply will be and in
        the status bar (issue 41: an empty card for ~40 s). The first prefill progress replaces the words."""
        text = self.tr("Starting the tool servers and listing their tools ({servers})…").format(servers=servers)
        self._status_state.setText(f"· {text}")
        chat = self.chat
        if chat.is_streaming() and chat.widgets() and not chat.reply_text():
            bubble = chat.widgets()[-1]
            bubble.footer.setText(text)
            bubble.footer.setVisible(True)


def _answers_first_turn(messages: list[Any]) -> bool:
    """No reply comes before the last user message: the reply about to be written (or continued, or regenerated
    after the cut) is the conversation's first."""
    last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
    return not any(m.role == "assistant" for m in messages[:last_user])
