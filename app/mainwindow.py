"""The main window: conversations on the left, the chat in the centre, the figures on the right.

Owns the wiring between the widgets, the bridge and the history store: what Send, Stop, Load,
Edit, Regenerate and Continue do; when a streaming reply is saved (every few seconds and at its
finish, with its finish reason and performance record); the window's state (idle, loading,
generating) and the one channel of messages to the user. It runs no inference (``app.bridge``),
renders no Markdown (``app.markdown_view``) and owns no SQL (``app.history.store``).
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from typing import Any

from PySide6.QtCore import Qt, QTimer, Signal, Slot
from PySide6.QtGui import QAction, QCloseEvent, QIcon, QKeySequence
from PySide6.QtWidgets import (QDockWidget, QHBoxLayout, QLabel, QMainWindow, QMessageBox, QProgressBar,
                               QPushButton, QSplitter, QTabWidget, QToolBar, QVBoxLayout, QWidget)

from app.bridge import Bridge
from app.settings import ChatSettings, Settings, chat_from_stored
from app.history.perf import PerfRecord
from app.history.rows import MessageRow
from app.history.store import ConflictError, HistoryStore, StoreError
from app.widgets.chat_view import ChatView, ShownMessage
from app.widgets.conversation_list import ConversationList
from app.widgets.message_area import MessageArea
from app.widgets.model_bar import ModelBar
from app.widgets.perf_panel import PerfPanel
from app.widgets.prompt_box import PromptBox
from app.widgets.settings_dialog import SettingsDialog
from app.widgets.lab_tab import LabTab
from app.widgets.model_card import ModelCard
from app.widgets.token_inspector import TokenInspector
from app.widgets.tokenizer_view import TokenizerView
from engine.errors import REMOTE_CODE_REFUSAL

log = logging.getLogger(__name__)

SAVE_INTERVAL_MS = 2000  # a streaming reply is written this often: a crash loses at most 2 s of text
SHUTDOWN_WAIT_MS = 5000  # the engine sees a cancel within one decode step; 5 s covers a slow load stage
CONTINUE_PROMPT = "Continue."



def _footer(perf: PerfRecord | None) -> str:
    return perf.footer() if perf is not None else ""


def _stored_settings(chat: ChatSettings) -> dict:
    """A conversation's settings as its history row keeps them (the system prompt has its own column)."""
    stored = asdict(chat)
    del stored["system_prompt"]
    return stored


def _shown(row: MessageRow) -> ShownMessage:
    return ShownMessage(row.role, row.text, row.id, _footer(row.perf), row.finish_reason)


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
        self.setWindowIcon(QIcon(str(_asset("miaohui.svg"))))
        self.settings = settings
        self._chat = settings.chat()  # the current conversation's settings; new ones start from the defaults
        self.store = store
        self.bridge = bridge or Bridge(self)
        self._cid: int | None = None  # conversation shown
        self._gen_cid: int | None = None  # conversation the streaming reply belongs to
        self._reply_mid: int | None = None  # store id of the streaming reply
        self._editing_index: int | None = None
        self._loading = False
        self._generating = False
        self._facts: Any = None
        self._closing = False
        self._last_load: tuple[str, str, str, bool] | None = None  # model, precision, device, remote code allowed
        self._store_warned = False
        self.last_metrics: Any = None  # final Metrics of the last reply (the self-test reports them)
        self._build()
        self._connect()
        self._set_editing(None)
        self._update_state()
        for notice in store.notices:
            self.messages.show_message(notice, "warning")
        geometry, state = settings.window_state()
        if geometry is not None:
            self.restoreGeometry(geometry)
        if state is not None:
            self.restoreState(state)
        last = settings.last_conversation()
        if last is not None and any(row.id == last for row in store.list_conversations()):
            self.conversations.select(last)
            self.open_conversation(last)

    # -- construction ---------------------------------------------------------------------------------
    def _build(self) -> None:
        self.resize(1440, 900)
        toolbar = QToolBar("Model")
        toolbar.setObjectName("modelToolbar")
        toolbar.setMovable(False)
        self.model_bar = ModelBar(self.settings)
        toolbar.addWidget(self.model_bar)
        self.addToolBar(Qt.ToolBarArea.TopToolBarArea, toolbar)

        self.conversations = ConversationList(self.store)
        self.conversations.setMinimumWidth(270)
        self.chat = ChatView()
        self.messages = MessageArea(self.statusBar())
        self.prompt = PromptBox()
        self.send_button = QPushButton("Send")
        self.send_button.setObjectName("primary")
        self.send_button.setToolTip("Send (Enter)")
        self.stop_button = QPushButton("Stop")
        self.stop_button.setObjectName("danger")
        self.stop_button.setToolTip("Stop the reply or the load (Esc)")
        self.editing_label = QLabel("")
        self.editing_label.setObjectName("notice")
        self.cancel_edit_button = QPushButton("Cancel edit")
        self.cancel_edit_button.setFlat(True)

        column = QWidget()
        column_layout = QVBoxLayout(column)
        column_layout.setContentsMargins(0, 0, 0, 0)
        column_layout.setSpacing(0)
        top = QWidget()
        top_layout = QVBoxLayout(top)
        top_layout.setContentsMargins(16, 8, 16, 0)
        top_layout.addWidget(self.messages)
        column_layout.addWidget(top)
        column_layout.addWidget(self.chat, 1)
        bottom = QWidget()
        bottom_layout = QVBoxLayout(bottom)
        bottom_layout.setContentsMargins(24, 8, 24, 12)
        edit_row = QHBoxLayout()
        edit_row.addWidget(self.editing_label, 1)
        edit_row.addWidget(self.cancel_edit_button)
        bottom_layout.addLayout(edit_row)
        prompt_row = QHBoxLayout()
        prompt_row.setSpacing(8)
        prompt_row.addWidget(self.prompt, 1)
        buttons = QVBoxLayout()
        buttons.addWidget(self.send_button)
        buttons.addWidget(self.stop_button)
        buttons.addStretch(1)
        prompt_row.addLayout(buttons)
        bottom_layout.addLayout(prompt_row)
        column_layout.addWidget(bottom)

        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(self.conversations)
        splitter.addWidget(column)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([280, 820])
        splitter.setChildrenCollapsible(False)
        self.setCentralWidget(splitter)

        self.perf_panel = PerfPanel()
        self.token_inspector = TokenInspector()
        self.side_tabs = QTabWidget()
        self.side_tabs.setDocumentMode(True)
        self.side_tabs.addTab(self.perf_panel, "Performance")
        self.side_tabs.addTab(self.token_inspector, "Tokens")
        self.model_card = ModelCard(self.bridge)
        self.tokenizer_view = TokenizerView(self.bridge)
        self.lab_tab = LabTab(self.bridge)
        for widget, title in ((self.model_card, "Model card"), (self.tokenizer_view, "Tokenizer"),
                              (self.lab_tab, "Lab")):
            self.side_tabs.addTab(widget, title)
        self.perf_dock = QDockWidget("Performance", self)
        self.perf_dock.setObjectName("perfDock")
        self.perf_dock.setWidget(self.side_tabs)
        self.perf_dock.setFeatures(QDockWidget.DockWidgetFeature.DockWidgetClosable
                                   | QDockWidget.DockWidgetFeature.DockWidgetMovable
                                   | QDockWidget.DockWidgetFeature.DockWidgetFloatable)
        self.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, self.perf_dock)
        self.resizeDocks([self.perf_dock], [380], Qt.Orientation.Horizontal)

        status = self.statusBar()
        self.status_model = QLabel("no model")
        self.status_device = QLabel("")
        self.status_precision = QLabel("")
        self.status_state = QLabel("idle")
        self.load_progress = QProgressBar()
        self.load_progress.setRange(0, 100)
        self.load_progress.setMaximumWidth(160)
        self.load_progress.setMaximumHeight(14)
        self.load_progress.setTextVisible(False)
        self.load_progress.hide()
        for widget in (self.load_progress, self.status_model, self.status_device, self.status_precision,
                       self.status_state):
            status.addPermanentWidget(widget)

        menu = self.menuBar().addMenu("&Chat")
        self._action(menu, "New chat", QKeySequence.StandardKey.New, self.on_new_chat_triggered)
        self._action(menu, "Stop", QKeySequence(Qt.Key.Key_Escape), self.on_stop_clicked)
        self._action(menu, "Focus prompt", QKeySequence("Ctrl+L"), self.on_focus_prompt_triggered)
        self._action(menu, "Settings…", QKeySequence("Ctrl+,"), self.on_settings_triggered)
        menu.addSeparator()
        self._action(menu, "Quit", QKeySequence.StandardKey.Quit, self.close)
        view = self.menuBar().addMenu("&View")
        view.addAction(self.perf_dock.toggleViewAction())

    def _action(self, menu: Any, text: str, shortcut: Any, slot: Any) -> QAction:
        action = QAction(text, self)
        action.setShortcut(shortcut)
        action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        action.triggered.connect(slot)
        menu.addAction(action)
        self.addAction(action)
        return action

    def _connect(self) -> None:
        b = self.bridge
        b.load_progressed.connect(self.on_bridge_load_progressed)
        b.model_loaded.connect(self.on_bridge_model_loaded)
        b.load_failed.connect(self.on_bridge_load_failed)
        b.generation_started.connect(self.on_bridge_generation_started)
        b.prefill_progressed.connect(self.on_bridge_prefill_progressed)
        b.tokens_received.connect(self.on_bridge_tokens_received)
        b.stats_updated.connect(self.on_bridge_stats_updated)
        b.generation_finished.connect(self.on_bridge_generation_finished)
        b.busy_changed.connect(self.on_bridge_busy_changed)
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
        self.conversations.conversation_selected.connect(self.on_conversation_selected)
        self.conversations.new_requested.connect(self.on_new_chat_triggered)
        self.conversations.conversation_deleted.connect(self.on_conversation_deleted)
        self._save_timer = QTimer(self)
        self._save_timer.setInterval(SAVE_INTERVAL_MS)
        self._save_timer.timeout.connect(self.on_save_timer_expired)

    # -- public API (also used by the self-test and tests) --------------------------------------------
    def load_model(self, model: str, precision: str = "auto", device: str = "auto") -> None:
        self.model_bar.select(model, precision, device)
        self.on_model_load_requested(model, precision, device)

    def send(self, text: str) -> bool:
        """Send ``text`` as the user's next message; False (with a message shown) when it cannot go now."""
        if self._generating or self.bridge.is_generating():
            return False  # a reply is streaming: extra Sends are ignored, never queued or duplicated
        if not text.strip():
            self.messages.show_message("Your message is empty.", "info")
            return False
        if self._loading:
            self.messages.show_message("The model is still loading; send when it is ready.", "info")
            return False
        if self._facts is None:
            self.messages.show_message("No model loaded: choose a model above and press Load.", "warning")
            return False
        if self._cid is None:
            self._cid = self._create_conversation()
            if self._cid is not None:
                self._show_conversation_in_list(self._cid)
        if self._editing_index is not None:
            cut = self._cut_history(self._editing_index)
            self._set_editing(None)
            if not cut:
                return False  # the typed text stays in the prompt, to send again on the reloaded chat
        mid = self._write(self.store.add_message, self._cid, "user", text) if self._cid is not None else None
        self.chat.add_message(ShownMessage("user", text, mid))
        self.prompt.clear()
        if self._cid is not None:
            self.conversations.refresh()  # the store auto-titles from the first message
        return self._start_reply()

    def is_generating(self) -> bool:
        return self._generating

    def current_conversation(self) -> int | None:
        return self._cid

    def open_conversation(self, cid: int) -> None:
        try:
            rows = self.store.messages(cid)
        except StoreError as exc:
            self.messages.show_message(str(exc), "error")
            return
        try:
            row = self.store.get_conversation(cid)
        except StoreError:
            row = None  # its messages were readable: chat on with the defaults
        self._cid = cid
        self._chat = (chat_from_stored(row.system_prompt, row.settings, self.settings.chat()) if row is not None
                      else self.settings.chat())
        self._set_editing(None)
        self.chat.set_messages([_shown(r) for r in rows if r.role in ("user", "assistant")])
        self.settings.set_last_conversation(cid)

    def apply_settings(self) -> None:
        """Settings' chat values just changed: they apply to this conversation, are saved with it, and
        start new ones."""
        self._chat = self.settings.chat()
        if self._cid is not None:
            self._write(self.store.update_conversation_settings, self._cid, self._chat.system_prompt,
                        _stored_settings(self._chat))

    def chat_settings(self) -> ChatSettings:
        """The settings the current conversation replies with (its own once saved with it)."""
        return self._chat

    def _create_conversation(self) -> int | None:
        """A new conversation in the store, saved with the settings it starts from."""
        return self._write(self.store.create_conversation, system_prompt=self._chat.system_prompt,
                           settings=_stored_settings(self._chat))

    # -- generation -----------------------------------------------------------------------------------
    def _conversation_for_engine(self) -> list[tuple[str, str]]:
        chat = self._chat
        turns: list[tuple[str, str]] = [("system", chat.system_prompt)] if chat.system_prompt.strip() else []
        for message in self.chat.messages():
            if message.role == "assistant" and (not message.text.strip() or message.finish_reason == "error"):
                continue  # an empty or failed reply is not something the model said
            turns.append((message.role, message.text))
        return turns

    def _start_reply(self) -> bool:
        turns = self._conversation_for_engine()
        cid = self._cid if self._cid is not None else 0
        if not self.bridge.generate(cid, turns, self._chat.sampling_kwargs()):
            return False
        self._generating = True
        self._gen_cid = self._cid
        self.chat.begin_reply()
        self.token_inspector.clear()
        self.perf_panel.reset()
        self._reply_mid = (self._write(self.store.add_message, self._cid, "assistant", "")
                           if self._cid is not None else None)
        if self._reply_mid is not None:
            self.chat.set_message_id(len(self.chat.messages()) - 1, self._reply_mid)
        self._save_timer.start()
        self._update_state()
        return True

    def _cut_history(self, index: int) -> bool:
        """Delete message ``index`` and everything after it, on screen and in the store.

        False, with nothing deleted, when another window (another process on the same history) added
        messages to this chat after the ones shown here: the chat is reloaded to show them instead.
        """
        shown = self.chat.messages()
        if index >= len(shown):
            return True
        mid = shown[index].message_id
        if mid is not None and self._cid is not None:
            known = [m.message_id for m in shown[index:] if m.message_id is not None]
            try:
                self.store.delete_messages_from(self._cid, mid, known_ids=known)
            except ConflictError as exc:
                self.messages.show_message(f"{str(exc).capitalize()}. It is reloaded: try again.", "warning")
                self.open_conversation(self._cid)
                return False
            except StoreError as exc:
                self._warn_unsaved(exc)
        self.chat.remove_from(index)
        return True

    def _finish_reply(self, reason: str, text: str, perf: PerfRecord | None, error: str | None) -> None:
        self._save_timer.stop()
        footer = _footer(perf)
        same_view = self._gen_cid == self._cid
        if self._reply_mid is not None:
            if not text and reason == "error":  # only the empty reply goes, never what another window added
                self._write(self.store.delete_messages_from, self._gen_cid, self._reply_mid,
                            known_ids=(self._reply_mid,))
            else:
                self._write(self.store.update_message, self._reply_mid, text, finish_reason=reason, perf=perf)
        if same_view and self.chat.is_streaming():
            self.chat.finish_reply(text, footer, reason, self._reply_mid)
            if not text and reason == "error":
                self.chat.remove_from(len(self.chat.messages()) - 1)
        self._generating = False
        self._reply_mid = None
        self._gen_cid = None
        if error:
            self.messages.show_message(error, "error")
        elif reason == "cancelled":
            self.statusBar().showMessage("Stopped: the partial reply is kept.", 5000)
        elif reason == "length":
            self.statusBar().showMessage("The reply reached the max new tokens limit: press Continue for more.", 8000)
        self._update_state()
        self.reply_finished.emit(reason)

    # -- bridge slots ---------------------------------------------------------------------------------
    @Slot(str, float)
    def on_bridge_load_progressed(self, stage: str, fraction: float) -> None:
        self.load_progress.show()
        self.load_progress.setValue(int(fraction * 100))
        self.status_state.setText(f"loading: {stage}")

    @Slot(object)
    def on_bridge_model_loaded(self, facts: Any) -> None:
        self._loading = False
        self._facts = facts
        self.load_progress.hide()
        self.perf_panel.set_model_facts(facts)
        self.messages.show_message(f"Loaded {facts.name}: {facts.params / 1e6:.1f} M parameters, {facts.precision} "
                                   f"on {facts.device}.", "info")
        self._update_state()
        self.model_ready.emit(facts)

    @Slot(str)
    def on_bridge_load_failed(self, error: str) -> None:
        self._loading = False
        self.load_progress.hide()
        kept = f" (still using {self._facts.name})" if self._facts is not None else ""
        self.messages.show_message(f"Could not load the model: {error}{kept}", "error")
        self._update_state()
        request = self._last_load
        if REMOTE_CODE_REFUSAL in error and request is not None and not request[3] and not self._closing:
            self._offer_remote_code(*request[:3])

    def _offer_remote_code(self, model: str, precision: str, device: str) -> None:
        """Ask, once per load, whether this model may run its own Python code; load it again if so.

        The answer is not remembered: trusting a folder's code is a decision for each load, never a setting.
        """
        answer = QMessageBox.warning(
            self, "Run this model's own code?",
            f"{model}\n\nThis model ships Python code that would run on your computer with your permissions "
            "when it loads. Allow it only for a model from someone you trust.",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No, QMessageBox.StandardButton.No)
        if answer == QMessageBox.StandardButton.Yes:
            self.on_model_load_requested(model, precision, device, allow_remote_code=True)

    @Slot(object)
    def on_bridge_generation_started(self, started: Any) -> None:
        if started.dropped_turns:
            self.messages.show_message(
                f"{started.dropped_turns} oldest message{'s' if started.dropped_turns != 1 else ''} left out to fit "
                f"the {started.context_max}-token context window (the system prompt is kept).", "warning")

    @Slot(int, int)
    def on_bridge_prefill_progressed(self, done: int, total: int) -> None:
        if done < total:
            self.status_state.setText(f"· prefill {done}/{total} tokens")
        else:
            self.status_state.setText("· generating")

    @Slot(str, list)
    def on_bridge_tokens_received(self, text: str, tokens: list) -> None:
        if self._gen_cid == self._cid:
            self.chat.append_to_reply(text)
        self.token_inspector.add_tokens(tokens)

    @Slot(object)
    def on_bridge_stats_updated(self, metrics: Any) -> None:
        self.perf_panel.show_metrics(metrics)

    @Slot(object)
    def on_bridge_generation_finished(self, finished: Any) -> None:
        if not self._generating:
            return
        text = finished.text or self.chat.reply_text()
        metrics = finished.metrics
        perf = None
        if metrics is not None and metrics.generated_tokens:
            self.last_metrics = metrics
            perf = PerfRecord.from_metrics(metrics.to_dict(), self._facts.name if self._facts else "")
            self.perf_panel.show_metrics(metrics, final=True)
        self._finish_reply(finished.reason, text, perf, finished.error if finished.reason == "error" else None)

    @Slot(bool)
    def on_bridge_busy_changed(self, busy: bool) -> None:
        self._update_state()

    # -- user actions ---------------------------------------------------------------------------------
    @Slot(str, str, str)
    def on_model_load_requested(self, model: str, precision: str, device: str,
                                allow_remote_code: bool = False) -> None:
        if not model:
            return
        self.settings.set_model_choice(model, precision, device)
        self._loading = True
        self._last_load = (model, precision, device, allow_remote_code)
        self.load_progress.setValue(0)
        self.load_progress.show()
        self.status_state.setText("loading")
        self.bridge.load({"model": model, "precision": precision, "device": device,
                          "allow_remote_code": allow_remote_code})
        self._update_state()

    @Slot()
    def on_prompt_text_changed(self) -> None:
        self.tokenizer_view.set_text(self.prompt.toPlainText())

    @Slot()
    def on_send_clicked(self) -> None:
        if self._generating:
            return
        self.send(self.prompt.toPlainText())

    @Slot()
    def on_stop_clicked(self) -> None:
        if self._editing_index is not None and not self._generating:
            self._set_editing(None)
            return
        self.bridge.stop()
        if self._loading:
            self.status_state.setText("cancelling load…")

    @Slot()
    def on_new_chat_triggered(self) -> None:
        if self._generating:
            self.bridge.stop()
        self._chat = self.settings.chat()  # a new conversation starts from the defaults in Settings
        self._cid = self._create_conversation()
        self.chat.clear()
        self._set_editing(None)
        if self._cid is not None:
            self._show_conversation_in_list(self._cid)
            self.settings.set_last_conversation(self._cid)
        self.prompt.setFocus()

    @Slot()
    def on_focus_prompt_triggered(self) -> None:
        self.prompt.setFocus()

    @Slot()
    def on_settings_triggered(self) -> None:
        dialog = SettingsDialog(self.settings, self)
        if dialog.exec():
            self.apply_settings()
            self.statusBar().showMessage("Settings saved for this conversation and new ones; "
                                         "they apply to the next reply.", 5000)

    @Slot(int)
    def on_conversation_selected(self, cid: int) -> None:
        if cid == self._cid:
            return
        if self._generating:
            self.bridge.stop()  # the reply is finished and saved in its own conversation
        self.open_conversation(cid)

    @Slot(int)
    def on_conversation_deleted(self, cid: int) -> None:
        if self._gen_cid == cid:
            self.bridge.stop()
            self._reply_mid = None  # its rows are gone; nothing left to save
        if self._cid == cid:
            self._cid = None
            self._chat = self.settings.chat()
            self.chat.clear()
            self.settings.set_last_conversation(None)

    @Slot(int)
    def on_chat_edit_requested(self, index: int) -> None:
        if self._generating:
            return
        self._set_editing(index)
        self.prompt.setPlainText(self.chat.messages()[index].text)
        self.prompt.setFocus()

    @Slot()
    def on_cancel_edit_clicked(self) -> None:
        self._set_editing(None)
        self.prompt.clear()

    @Slot()
    def on_chat_regenerate_requested(self) -> None:
        shown = self.chat.messages()
        if self._generating or not shown or shown[-1].role != "assistant" or self._facts is None:
            return
        if self._cut_history(len(shown) - 1):
            self._start_reply()

    @Slot()
    def on_chat_continue_requested(self) -> None:
        self.send(CONTINUE_PROMPT)

    @Slot(str)
    def on_chat_code_copied(self, code: str) -> None:
        self.statusBar().showMessage(f"Copied {len(code.splitlines())} lines of code.", 3000)

    @Slot()
    def on_save_timer_expired(self) -> None:
        if self._reply_mid is not None and self._gen_cid == self._cid:
            self._write(self.store.update_message, self._reply_mid, self.chat.reply_text())

    # -- state ----------------------------------------------------------------------------------------
    def _set_editing(self, index: int | None) -> None:
        self._editing_index = index
        self.editing_label.setText("Editing a message: Send replaces it and every later message." if index is not None
                                   else "")
        self.editing_label.setVisible(index is not None)
        self.cancel_edit_button.setVisible(index is not None)

    def _update_state(self) -> None:
        generating = self._generating
        self.send_button.setEnabled(not generating and not self._loading and self._facts is not None)
        self.stop_button.setEnabled(generating or self._loading)
        self.chat.set_actions_enabled(not generating)
        self.model_bar.set_loading(self._loading)
        facts = self._facts
        self.status_model.setText(facts.name if facts is not None else "no model")
        self.status_device.setText(f"· {facts.device}" if facts is not None else "")
        self.status_precision.setText(f"· {facts.precision}" if facts is not None else "")
        if self._loading:
            if not self.status_state.text().startswith(("loading", "cancelling")):
                self.status_state.setText("loading")
        elif generating:
            self.status_state.setText("· generating")
        else:
            self.status_state.setText("· ready" if facts is not None else "· no model loaded")
        self.setWindowTitle(f"Miaohui 秒回 — {facts.name}" if facts is not None else "Miaohui 秒回")

    def _show_conversation_in_list(self, cid: int) -> None:
        self.conversations.blockSignals(True)  # selecting it must not reload the view we are filling
        try:
            self.conversations.refresh()
            self.conversations.select(cid)
        finally:
            self.conversations.blockSignals(False)

    def _write(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Run one store write; a failure is a message, never a crash (the chat goes on unsaved)."""
        try:
            return fn(*args, **kwargs)
        except StoreError as exc:
            self._warn_unsaved(exc)
            return None

    def _warn_unsaved(self, exc: StoreError) -> None:
        if not self._store_warned:  # once: a read-only history would otherwise repeat it on every save
            self.messages.show_message(f"History not saved: {exc}", "warning")
            self._store_warned = True

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
        if self._closing:
            return self.bridge.shutdown(SHUTDOWN_WAIT_MS)  # already closed: reports, waits no more
        self._closing = True
        self._save_timer.stop()
        self.bridge.stop()
        joined = self.bridge.shutdown(SHUTDOWN_WAIT_MS)
        self.bridge.flush_pending()  # deliver what the worker produced before it stopped (Finished included)
        if self._generating:  # no Finished came in time: keep what was streamed, marked stopped
            self._finish_reply("cancelled", self.chat.reply_text(), None, None)
        self.settings.set_window_state(self.saveGeometry(), self.saveState())
        return joined

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 (Qt override)
        self.shutdown()
        super().closeEvent(event)


def _asset(name: str) -> Any:
    from pathlib import Path

    return Path(__file__).resolve().parent.parent / "assets" / name
