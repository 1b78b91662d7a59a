"""Complete text: a document the loaded model continues, with no chat template (``ChatSession.complete``).

For a base model (no chat template: it cannot chat) or any model. ``CompletionView`` is a window of its own
(Chat → Complete text…): the document, Continue and Stop. Continue sends the whole document; the continuation
streams onto its end (the window's panel shows its figures live, as a chat reply's), Stop keeps what came, and
Continue again continues the document as it now is, the user's edits included (the engine reuses the KV cache of
the unchanged beginning). Each run is saved to the history as a conversation of its own: the document as sent
and the continuation, with its finish reason and performance record. A model without a chat template is told apart
from its files' metadata when the model bar asks for it (``engine.models.template_meta``: before its weights load,
which takes a minute for a large GGUF), else from its tokenizer once loaded: the window says chat is off for it and
opens this view.
Owns no generation (``app.runtime.bridge``) and no SQL (``app.history.store``).
"""

from __future__ import annotations

from typing import Any, Callable

from PySide6.QtCore import QCoreApplication, Qt, Signal, Slot
from PySide6.QtGui import QTextCursor
from PySide6.QtWidgets import QDialog, QHBoxLayout, QLabel, QMenu, QPlainTextEdit, QPushButton, QVBoxLayout, QWidget

from app.history.perf import PerfRecord
from app.history.store import HistoryStore, StoreError
from app.runtime.bridge import Bridge
from app.state.settings import ChatSettings
from app.widgets.message_area import MessageArea
from app.widgets.perf_panel import PerfPanel
from engine.errors import EngineError
from engine.errors import BadInputError
from engine.models.loader import resolve_source
from engine.models.template_meta import has_chat_template

SESSION_ID = -1  # the worker's session for Complete text: no conversation id is negative


def _has_template(loaded: Any, _cancel: Any) -> bool:
    """On the worker: does the loaded model (a local one) have a chat template?"""
    tokenizer = getattr(loaded, "tokenizer", None)
    return tokenizer is None or bool(getattr(tokenizer, "chat_template", None))


class CompletionView(QDialog):
    """The Complete text window of one main window: given the bridge, the history, the chat's settings (a callable:
    the open conversation's), the window's performance panel and message strip. The window connects the model bar's
    ``load_requested`` and the controller's ``model_ready`` to the slots of those names.

    Signals:
        saved(): a run was saved to the history as a conversation of its own (the window lists it).
    """

    saved = Signal()

    def __init__(self, bridge: Bridge, store: HistoryStore, chat_settings: Callable[[], ChatSettings],
                 panel: PerfPanel, messages: MessageArea, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle(self.tr("Complete text"))
        self.setWindowFlag(Qt.WindowType.Window)
        self.bridge, self._store, self._chat_settings = bridge, store, chat_settings
        self._panel, self._messages = panel, messages
        layout = QVBoxLayout(self)
        self.editor = QPlainTextEdit(self)
        self.editor.setPlaceholderText(self.tr("Write the beginning of a text; the model continues it."))
        self.editor.setAccessibleName(self.tr("The text to continue"))
        layout.addWidget(self.editor, 1)
        row = QHBoxLayout()
        self.status = QLabel("")
        self.status.setObjectName("footer")
        self.status.setWordWrap(True)
        row.addWidget(self.status, 1)
        self.continue_button = QPushButton(self.tr("Continue"))
        self.continue_button.setToolTip(self.tr("Let the model continue the text from its end"))
        self.stop_button = QPushButton(self.tr("Stop"))
        self.stop_button.setEnabled(False)
        row.addWidget(self.continue_button)
        row.addWidget(self.stop_button)
        layout.addLayout(row)
        self.continue_button.clicked.connect(self.continue_text)
        self.stop_button.clicked.connect(self.bridge.stop)
        self.bridge.tokens_received.connect(self.on_bridge_tokens_received)
        self.bridge.generation_finished.connect(self.on_bridge_generation_finished)
        self.bridge.task_finished.connect(self.on_bridge_task_finished)
        self._running = False
        self._sent = ""
        self._cid: int | None = None
        self._task: int | None = None
        self.resize(640, 480)

    def add_to(self, menu: QMenu) -> None:
        """The Chat → Complete text… entry in ``menu``."""
        menu.addAction(QCoreApplication.translate("CompletionView", "Complete text…"), self.open_view)

    def is_running(self) -> bool:
        return self._running

    @Slot()
    def open_view(self) -> None:
        self.show()
        self.raise_()
        self.editor.setFocus()

    @Slot()
    def continue_text(self) -> bool:
        """Send the document to be continued; False (and the reason shown) when it cannot go now."""
        text = self.editor.toPlainText()
        if self._running or self.bridge.is_generating():
            return False
        if self.bridge.facts is None:
            self.status.setText(self.tr("No model loaded: choose a model in the main window and press Load."))
            return False
        if not text.strip():
            self.status.setText(self.tr("Write something to continue first."))
            return False
        try:
            config = self._chat_settings().sampling_config()
        except BadInputError as exc:
            self.status.setText(self.tr("The reply settings cannot be used: {why}").format(why=exc))
            return False
        if not self.bridge.complete(SESSION_ID, text, config):
            return False
        self._running, self._sent = True, text
        self.editor.setReadOnly(True)
        self.continue_button.setEnabled(False)
        self.stop_button.setEnabled(True)
        self.status.setText(self.tr("Continuing…"))
        self._panel.reset()
        return True

    @Slot(str, list)
    def on_bridge_tokens_received(self, text: str, _tokens: list) -> None:
        if self._running and text:
            self._append(text)

    def _append(self, text: str) -> None:
        cursor = self.editor.textCursor()
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.insertText(text)

    @Slot(object)
    def on_bridge_generation_finished(self, finished: Any) -> None:
        if not self._running:
            return
        self._running = False
        self.editor.setReadOnly(False)
        self.continue_button.setEnabled(True)
        self.stop_button.setEnabled(False)
        shown = self.editor.toPlainText()[len(self._sent):]
        if finished.text.startswith(shown) and len(finished.text) > len(shown):  # held-back bytes at the end
            self._append(finished.text[len(shown):])
        metrics = finished.metrics if finished.metrics is not None and finished.metrics.generated_tokens else None
        perf = None
        if metrics is not None:
            self._panel.show_metrics(metrics, final=True)
            perf = PerfRecord.from_metrics(metrics.to_dict(), getattr(self.bridge.facts, "name", ""))
        labels = {"eos": self.tr("The model ended the text."), "length": self.tr(
            "The max new tokens limit was reached: press Continue for more."), "cancelled": self.tr("Stopped.")}
        self.status.setText(finished.error or labels.get(finished.reason, ""))
        if finished.reason != "error" or finished.text:
            self._save(finished.text, finished.reason, perf)

    def _save(self, continuation: str, reason: str, perf: PerfRecord | None) -> None:
        """The run into the history: the document as sent and its continuation, in this view's conversation."""
        store = self._store
        try:
            if self._cid is None:
                self._cid = store.create_conversation(settings={"mode": "complete"})
            store.add_message(self._cid, "user", self._sent)
            store.add_message(self._cid, "assistant", continuation, reason, perf)
        except StoreError as exc:
            self.status.setText(self.tr("History not saved: {why}").format(why=exc))
            return
        self.saved.emit()

    def _offer(self) -> None:
        self._messages.show_message(self.tr(
            "This model has no chat template, so it cannot chat: it continues text instead. Use Chat → "
            "Complete text…"), "warning")
        self.open_view()

    @Slot(str, str, str)
    def on_model_load_requested(self, model: str, _precision: str, _device: str) -> None:
        """Before the weights load: a model whose files ship no chat template is offered this view at once."""
        try:
            source = resolve_source(model)
            offered = not has_chat_template(source.folder, source.gguf_file)
        except (EngineError, OSError, ValueError):
            return  # the load itself says what is wrong with the files
        if offered:
            self._offer()

    @Slot(object)
    def on_controller_model_ready(self, _facts: Any) -> None:
        self._task = self.bridge.submit_task(_has_template)

    @Slot(int, object)
    def on_bridge_task_finished(self, task: int, has_template: Any) -> None:
        if task != self._task:
            return
        self._task = None
        if has_template is False and not self.isVisible():  # a base model: chat is refused; this is what it can do
            self._offer()


__all__ = ["CompletionView", "SESSION_ID"]
