"""The main window: conversations on the left, the chat in the centre, the figures on the right.

Lays out the widgets and wires them to the chat's controller (``app.window.controller``: the turn, the open
conversation, editing, loading) and to the bridge for what only the window shows (load progress, the token
inspector, the performance panel). Its helpers are built by ``app.window.wiring`` from the typed parts they use
(never the window); what they ask of the window, by a signal, is connected here. Shows what the controller reports
in one channel of messages and keeps the window's state (buttons, status bar) in step. It runs no inference
(``app.runtime.bridge``), renders no Markdown (``app.ui.markdown_view``) and owns no SQL.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtGui import QAction, QCloseEvent, QKeySequence
from PySide6.QtWidgets import QMainWindow, QMenu, QSplitter, QToolBar, QWidget

from app.history.store import HistoryStore
from app.runtime.bridge import Bridge, ReplyStarted
from app.state.settings import ChatSettings, Settings, with_conversation_fields
from app.ui import accessibility
from app.ui.assets import icon
from app.ui.engine_texts import engine_text, history_text
from app.widgets.chat_view import ChatView, ShownMessage
from app.widgets.conversation_list import ConversationList
from app.widgets.message_area import MessageArea
from app.widgets.model_bar import ModelBar
from app.widgets.prompt_box import Composer
from app.widgets.settings_dialog import SettingsDialog
from app.widgets.side_panel import SidePanel
from app.window import about, first_run, layout, remote_code, wiring
from app.window.controller import ChatController, ChatMessage, FinishedReply
from app.window.prefill_progress import show_prefill_progress, show_waiting
from engine.errors import BadInputError
from engine.fmt import outside_text
from engine.inputs import LoadSpec

if TYPE_CHECKING:
    from app.widgets.models_window import ModelsWindow  # imported when first opened (on_models_triggered)

log = logging.getLogger(__name__)

SHUTDOWN_WAIT_MS = 5000  # the engine sees a cancel within one decode step; 5 s covers a slow load stage


class MainWindow(QMainWindow):
    """The application window.

    Signals:
        reply_finished(str): a reply ended; the argument is its finish reason (eos/length/cancelled/error).
        model_ready(object): a model finished loading (its ModelFacts).
    """

    reply_finished = Signal(str)
    model_ready = Signal(object)

    def __init__(self, settings: Settings, store: HistoryStore, bridge: Bridge | None = None,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Miaohui 秒回")
        self.setWindowIcon(icon("miaohui"))
        self.settings, self.store = settings, store
        settings.start_with_switches_off()  # serving and downloads: on only when turned on in this run
        self.bridge = bridge or Bridge(self)
        self.controller = ChatController(settings, store, self.bridge, self)
        self._closed = False
        self.models_window: ModelsWindow | None = None  # built when first opened
        self._build()
        self._connect()
        h = wiring.chat_helpers(self.parts, self.attachments, self.collections)  # after the window's own slots
        self.forker, self.prompt_meter, self.context_meter = h.forker, h.prompt_meter, h.context_meter
        self.speculation, self.versions, self.kv_keeping = h.speculation, h.versions, h.kv_keeping
        self.forker.listed.connect(self.on_controller_conversation_listed)  # listed and selected, not opened twice
        self._update_state()
        for notice in store.notices:
            self.messages.show_message(history_text(notice), "warning")
        geometry, state = settings.window_state()
        if geometry is not None:
            self.restoreGeometry(geometry)
        if state is not None:
            self.restoreState(state)
        last = self.controller.reopen_last()
        if last is not None:
            self.conversations.select(last)

    # -- construction ---------------------------------------------------------------------------------
    def _build(self) -> None:
        self.resize(1440, 900)
        toolbar = QToolBar(self.tr("Model"))
        toolbar.setObjectName("modelToolbar")
        toolbar.setMovable(False)
        self.model_bar = ModelBar(self.settings)
        toolbar.addWidget(self.model_bar)
        self.addToolBar(Qt.ToolBarArea.TopToolBarArea, toolbar)

        self.conversations = ConversationList(self.store)
        self.conversations.setMinimumWidth(270)
        self.chat = ChatView()
        self.messages = MessageArea(self.statusBar())
        self.composer = composer = Composer()
        self.prompt, self.send_button, self.stop_button = composer.prompt, composer.send_button, composer.stop_button
        self.editing_label, self.cancel_edit_button = composer.editing_label, composer.cancel_edit_button

        column, top_layout = layout.chat_column(self.messages, self.chat, composer)
        # "the default model is tiny", its "Show better models" opening Models… on its Recommended tab
        self.first_run = first_run.DefaultModelNoteKeeper.attach(self.settings, top_layout, self)
        self.first_run.models_requested.connect(self.show_recommended_models)
        self.model_ready.connect(self.first_run.on_window_model_ready)

        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(self.conversations)
        splitter.addWidget(column)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([280, 820])
        splitter.setChildrenCollapsible(False)
        self.setCentralWidget(splitter)

        self.perf_dock = SidePanel(self.bridge, self, self.controller)
        self.side_tabs = self.perf_dock.tabs
        self.perf_panel, self.token_inspector = self.perf_dock.perf_panel, self.perf_dock.token_inspector
        self.model_card, self.tokenizer_view, self.lab_tab = (self.perf_dock.model_card, self.perf_dock.tokenizer_view,
                                                             self.perf_dock.lab_tab)
        self.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, self.perf_dock)
        self.resizeDocks([self.perf_dock], [380], Qt.Orientation.Horizontal)

        (self.status_model, self.status_device, self.status_precision, self.status_state,
         self.load_progress) = layout.status_widgets(self.statusBar())

        menu = self.menuBar().addMenu(self.tr("&Chat"))
        self._action(menu, self.tr("New chat"), QKeySequence.StandardKey.New, self.on_new_chat_triggered)
        self._action(menu, self.tr("Stop"), QKeySequence(Qt.Key.Key_Escape), self.on_stop_clicked)
        self._action(menu, self.tr("Focus prompt"), QKeySequence("Ctrl+L"), self.on_focus_prompt_triggered)
        self._action(menu, self.tr("Settings…"), QKeySequence("Ctrl+,"), self.on_settings_triggered)
        self._action(menu, self.tr("Models…"), QKeySequence("Ctrl+M"), self.on_models_triggered)
        self.parts = wiring.Parts(self, self.settings, self.store, self.bridge, self.controller, self.chat, composer,
                                  self.messages, self.perf_panel, self.conversations, self.model_bar, self.statusBar(),
                                  self.status_state, self.load_progress)
        m = wiring.menu_helpers(self.parts, menu)  # Collections…, Serve, Complete text…, Import…, Tools…
        self.collections, self.api_serving, self.completion = m.collections, m.api_serving, m.completion
        self.chatgpt_import, self.tool_turns = m.chatgpt_import, m.tool_turns
        self.chatgpt_import.listed.connect(self.on_controller_conversation_listed)
        self._action(menu, self.tr("Quit"), QKeySequence.StandardKey.Quit, self.close)
        self.menuBar().addMenu(self.tr("&View")).addAction(self.perf_dock.toggleViewAction())
        self.about = about.About.attach(self)  # Help → About: version, data and logs folders, licences
        accessibility.tab_order(self.model_bar, self.conversations, self.chat, composer, self.perf_dock)  # as laid out

    def _action(self, menu: QMenu, text: str, shortcut: Any, slot: Any) -> QAction:
        action = QAction(text, self)
        action.setShortcut(shortcut)
        action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        action.triggered.connect(slot)
        menu.addAction(action)
        self.addAction(action)
        return action

    def _connect(self) -> None:
        c, b, h = self.controller, self.bridge, wiring.model_helpers(self.parts)  # they hear a load first
        self.remote_source, self.model_restorer, self.attachments = h.remote_source, h.model_restorer, h.attachments
        self.documents_keeping, self.thinking_switch = h.documents_keeping, h.thinking_switch
        self.model_restorer.load_requested.connect(self.load_model)  # a conversation's own model, restored
        c.conversation_shown.connect(self.on_controller_conversation_shown)
        c.message_added.connect(self.on_controller_message_added)
        c.messages_removed.connect(self.chat.remove_from)
        c.reply_started.connect(self.on_controller_reply_started)
        c.reply_grew.connect(self.chat.append_to_reply)
        c.reply_thought.connect(self.chat.append_to_thought)
        c.reply_grounded.connect(self.chat.show_reply_documents)
        c.reply_finished.connect(self.on_controller_reply_finished)
        c.editing_changed.connect(self.on_controller_editing_changed)
        c.conversation_listed.connect(self.on_controller_conversation_listed)
        c.state_changed.connect(self._update_state)
        c.notice.connect(self.messages.show_message)
        c.status_note.connect(self.statusBar().showMessage)
        c.model_ready.connect(self.on_controller_model_ready)
        c.remote_code_offered.connect(self.on_controller_remote_code_offered)
        b.load_progressed.connect(self.on_bridge_load_progressed)
        b.generation_started.connect(self.on_bridge_generation_started)
        b.prefill_progressed.connect(self.on_bridge_prefill_progressed)
        b.tokens_received.connect(self.on_bridge_tokens_received)
        b.stats_updated.connect(self.perf_panel.show_metrics)
        b.busy_changed.connect(self._update_state)  # the state itself is the controller's
        self.model_bar.load_requested.connect(self.on_model_load_requested)
        self.send_button.clicked.connect(self.on_send_clicked)
        self.prompt.submitted.connect(self.on_send_clicked)
        # The Tokenizer tab shows how the prompt being written is cut (it debounces and tokenises on the worker).
        self.prompt.textChanged.connect(self.on_prompt_text_changed)
        self.stop_button.clicked.connect(self.on_stop_clicked)
        self.cancel_edit_button.clicked.connect(self.on_cancel_edit_clicked)
        self.chat.edit_requested.connect(self.on_chat_edit_requested)
        self.chat.regenerate_requested.connect(self.on_chat_regenerate_requested)
        self.chat.continue_requested.connect(self.on_chat_continue_requested)
        self.chat.code_copied.connect(self.on_chat_code_copied)
        self.conversations.conversation_selected.connect(self.controller.select)
        self.conversations.new_requested.connect(self.on_new_chat_triggered)
        self.conversations.conversation_deleted.connect(self.controller.conversation_deleted)

    # -- public API (also used by the self-test and tests) --------------------------------------------
    def load_model(self, model: str, precision: str = "auto", device: str = "auto") -> None:
        self.model_bar.select(model, precision, device)
        self.on_model_load_requested(model, precision, device)

    def send(self, text: str) -> bool:
        """Send ``text`` as the user's next message with the files attached in the composer (those that could be
        read); False (with a message shown) when it cannot go now, the files staying attached."""
        sent = self.controller.send(text, self.attachments.for_send())
        if sent:
            self.attachments.clear()
        return sent

    def is_generating(self) -> bool:
        return self.controller.is_generating()

    def current_conversation(self) -> int | None:
        return self.controller.conversation_id

    def open_conversation(self, cid: int) -> None:
        self.controller.open(cid)

    def apply_settings(self, chat: ChatSettings | None = None) -> None:
        """``chat`` (None: the stored defaults) applies to this conversation and is saved with it."""
        self.controller.apply_settings(with_conversation_fields(chat or self.settings.chat(), self.chat_settings()))

    def chat_settings(self) -> ChatSettings:
        """The settings the current conversation replies with (its own once saved with it)."""
        return self.controller.chat_settings()

    @property
    def last_metrics(self) -> Any:
        """Final Metrics of the last reply (the self-test reports them)."""
        return self.controller.last_metrics

    # -- controller slots -----------------------------------------------------------------------------
    @Slot(object)
    def on_controller_conversation_shown(self, messages: list[ChatMessage]) -> None:
        self.chat.set_messages([ShownMessage.of(m) for m in messages])

    @Slot(object)
    def on_controller_message_added(self, message: ChatMessage) -> None:
        self.chat.add_message(ShownMessage.of(message))
        self.prompt.clear()

    @Slot(object)
    def on_controller_reply_started(self, reply: ChatMessage) -> None:
        show_waiting(self.chat.begin_reply(ShownMessage.of(reply)))  # a continued reply's bubble grows again
        self.token_inspector.clear()
        self.perf_panel.reset()
        if reply.message_id is not None:
            self.chat.set_message_id(len(self.chat.messages()) - 1, reply.message_id)

    @Slot(object)
    def on_controller_reply_finished(self, finished: FinishedReply) -> None:
        if finished.metrics is not None:
            self.perf_panel.show_metrics(finished.metrics, final=True)
        reply = finished.message
        if finished.shown and self.chat.is_streaming():
            self.chat.finish_message(ShownMessage.of(reply))
            if not finished.kept:
                self.chat.remove_from(len(self.chat.messages()) - 1)
        self.reply_finished.emit(reply.finish_reason or "")

    @Slot(object)
    def on_controller_editing_changed(self, index: int | None) -> None:
        self.composer.show_editing(index is not None)

    @Slot(object)
    def on_controller_conversation_listed(self, cid: int | None) -> None:
        if cid is None:
            self.conversations.refresh()
            return
        self.conversations.blockSignals(True)  # selecting it must not reload the view we are filling
        try:
            self.conversations.refresh()
            self.conversations.select(cid)
        finally:
            self.conversations.blockSignals(False)

    @Slot(object)
    def on_controller_model_ready(self, facts: Any) -> None:
        self.perf_panel.set_model_facts(facts)
        self.model_ready.emit(facts)

    @Slot(object)
    def on_controller_remote_code_offered(self, spec: LoadSpec) -> None:
        """Ask, once per load, whether this model may run its own Python code (``app.window.remote_code``); load it
        again if so."""
        if remote_code.allowed(self, spec):
            self._load(replace(spec, allow_remote_code=True))

    # -- bridge slots: what only the window shows ----------------------------------------------------
    @Slot(str, float)
    def on_bridge_load_progressed(self, stage: str, fraction: float) -> None:
        self.load_progress.show()
        self.load_progress.setValue(int(fraction * 100))
        self.status_state.setText(self.tr("loading: {stage}").format(stage=engine_text(stage)))

    @Slot(object)
    def on_bridge_generation_started(self, started: ReplyStarted) -> None:
        self.perf_panel.show_started(started)
        if n := started.dropped_turns:  # one source text per English form (Chinese has one form for both)
            text = (self.tr("{n} oldest message left out to fit the {max}-token context window (the system prompt is "
                            "kept).") if n == 1 else self.tr("{n} oldest messages left out to fit the {max}-token "
                                                             "context window (the system prompt is kept)."))
            self.messages.show_message(text.format(n=n, max=started.context_max), "warning")

    @Slot(int, int)
    def on_bridge_prefill_progressed(self, done: int, total: int) -> None:
        show_prefill_progress(self.status_state, self.perf_panel.ttft_view, self.chat, done, total)

    @Slot(str, list)
    def on_bridge_tokens_received(self, _text: str, tokens: list) -> None:
        self.token_inspector.add_tokens(tokens)

    # -- user actions ---------------------------------------------------------------------------------
    @Slot(str, str, str)
    def on_model_load_requested(self, model: str, precision: str, device: str) -> None:
        if not model:
            return
        try:
            spec = LoadSpec(model=model, precision=precision, device=device, kv_precision=self.model_bar.kv_precision())
        except BadInputError as exc:
            self.messages.show_message(self.tr("Could not load the model: {error}").format(error=exc), "error")
            return
        self._load(spec)

    def _load(self, spec: LoadSpec) -> None:
        self.load_progress.setValue(0)
        self.load_progress.show()
        self.status_state.setText(self.tr("loading"))
        self.controller.load(spec)

    @Slot()
    def on_prompt_text_changed(self) -> None:
        self.tokenizer_view.set_text(self.prompt.toPlainText())

    @Slot()
    def on_send_clicked(self) -> None:
        if not self.controller.is_generating():
            self.send(self.prompt.toPlainText())

    @Slot()
    def on_stop_clicked(self) -> None:
        if self.controller.stop() and self.controller.is_loading():
            self.status_state.setText(self.tr("cancelling load…"))

    @Slot()
    def on_new_chat_triggered(self) -> None:
        self.controller.new_conversation()
        self.prompt.setFocus()

    @Slot()
    def on_focus_prompt_triggered(self) -> None:
        self.prompt.setFocus()

    @Slot()
    def on_settings_triggered(self) -> None:
        dialog = SettingsDialog(self.settings, self)
        if dialog.exec():
            self.apply_settings(dialog.values())
            self.statusBar().showMessage(self.tr("Settings saved for this conversation and new ones; "
                                                 "they apply to the next reply."), 5000)

    @Slot(int)
    def on_models_triggered(self) -> ModelsWindow:
        if self.models_window is None:
            # Here, not at the top: the library brings huggingface_hub (~1-2 s) that a chat-only start never needs.
            from app.widgets.models_window import ModelsWindow

            self.models_window = ModelsWindow(self.settings, parent=self)
            self.models_window.model_chosen.connect(self.model_bar.open_model)  # shown in the picker, then loaded
            self.models_window.models_changed.connect(self.model_bar.refresh)
        self.models_window.show()
        self.models_window.raise_()
        self.models_window.activateWindow()
        return self.models_window

    @Slot()
    def show_recommended_models(self) -> None:
        self.on_models_triggered().show_recommended()  # built on first use

    def on_chat_edit_requested(self, index: int) -> None:
        if self.controller.edit(index):
            self.prompt.setPlainText(self.controller.messages()[index].text)
            self.prompt.setFocus()

    @Slot()
    def on_cancel_edit_clicked(self) -> None:
        self.controller.set_editing(None)
        self.prompt.clear()

    @Slot()
    def on_chat_regenerate_requested(self) -> None:
        self.versions.regenerate()  # the reply it replaces stays a version of its turn

    @Slot()
    def on_chat_continue_requested(self) -> None:
        self.controller.continue_reply()

    @Slot(str)
    def on_chat_code_copied(self, code: str) -> None:
        self.statusBar().showMessage(self.tr("Copied {n} lines of code.").format(n=len(code.splitlines())), 3000)

    # -- state ----------------------------------------------------------------------------------------
    def _update_state(self) -> None:
        c = self.controller
        generating, loading, facts = c.is_generating(), c.is_loading(), c.facts
        self.send_button.setEnabled(not generating and not loading and facts is not None)
        self.stop_button.setEnabled(generating or loading)
        self.chat.set_actions_enabled(not generating)
        self.model_bar.set_state(loading, facts)  # and, for `auto`, which precision it chose and why
        self.status_model.setText(outside_text(facts.name) if facts is not None else self.tr("no model"))
        self.status_device.setText(f"· {outside_text(facts.device)}" if facts is not None else "")
        self.status_precision.setText(f"· {outside_text(facts.precision)}" if facts is not None else "")
        if loading:
            if self.load_progress.isHidden():  # not begun by _load: no loading line (stage, cancelling) shown yet
                self.status_state.setText(self.tr("loading"))
        else:
            self.load_progress.hide()
            self.status_state.setText(self.tr("· generating") if generating else self.tr("· ready")
                                      if facts is not None else self.tr("· no model loaded"))
        self.setWindowTitle(f"{outside_text(facts.name)} — Miaohui 秒回" if facts is not None else "Miaohui 秒回")

    @Slot()
    def bring_to_front(self) -> None:
        """Show this window on top (a second start of the app on the same data folder asked for it)."""
        if self.isMinimized():
            self.showNormal()
        self.show()
        self.raise_()
        self.activateWindow()

    # -- closing --------------------------------------------------------------------------------------
    def shutdown(self) -> bool:
        """Stop work, join the engine thread (bounded), keep the partial reply. True if the engine thread
        ended. Idempotent, and truthful when called again: ``app.main`` calls it after ``closeEvent`` did,
        and must not exit normally while the thread runs (Qt would abort destroying it)."""
        if self.models_window is not None:
            self.models_window.shutdown()  # a download pauses (resumable) and its threads end
        joined = self.controller.shutdown(SHUTDOWN_WAIT_MS)
        if not self._closed:
            self._closed = True
            self.settings.set_window_state(self.saveGeometry(), self.saveState())
        return joined

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 (Qt override)
        self.shutdown()
        super().closeEvent(event)
