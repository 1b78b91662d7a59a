"""The chat's state and rules, apart from the widgets that show them: ``ChatController``.

Owns one turn at a time: which conversation is open and the settings it replies with (the system prompt and
sampling settings saved with it), its messages, the reply that streams and its saving (every few seconds and at
its finish, with its finish reason and performance record), the message being edited, Regenerate and Continue,
and whether a model is loading or loaded; a reasoning model's thought beside its answer; Continue resumes the cut
reply itself (no new turn). A reply answers the conversation of record: read from the history store when it opens,
then following every write made here, never read back from the screen; a failed write (a read-only history, a
full disk) leaves the chat going on unsaved, with one warning. Owns no widget (the window lays them out and shows
what the signals say), runs no inference (``app.runtime.bridge``), owns no SQL.
"""

from __future__ import annotations

import collections
from dataclasses import replace
from typing import Any, Callable, Sequence

from PySide6.QtCore import QObject, QTimer, Signal, Slot

from app.history import branches
from app.history.perf import PerfRecord
from app.history.store import ConflictError, HistoryStore, StoreError
from app.runtime.bridge import Bridge, LoadFailure
from app.state.chat_messages import ChatMessage, FinishedReply
from app.state.settings import ChatSettings, Settings, chat_from_stored
from app.ui.engine_texts import engine_text, load_failure_text
from app.window import turn_notes
from app.window.remote_source import RemoteSpec, loaded_note
from engine.docs.attach import DocumentsUsed
from engine.errors import BadInputError, ErrorKind
from engine.events import Finished, Message, Metrics
from engine.inputs import LoadSpec, SamplingConfig

SAVE_INTERVAL_MS = 2000  # a streaming reply is written this often: a crash loses at most 2 s of text


class ChatController(QObject):
    """The open conversation, its streaming reply and the model's state, between window, bridge and store.

    Signals:
        conversation_shown(object): the open conversation changed (opened, new, deleted, reloaded after a
            conflict): show this list of ``ChatMessage``, replacing what was shown.
        message_added(object): the user's ``ChatMessage`` was appended to the open conversation.
        messages_removed(int): the open conversation lost its messages from this index on (an edit set them aside
            as another branch, a Regenerate cut it there).
        reply_started(object): a reply began streaming in the open conversation: its empty ``ChatMessage``
            (with its store id) is appended.
        reply_grew(str): text the streaming reply just received (only while its conversation is open).
        reply_thought(str): a reasoning model's thought text, as reply_grew (a continued reply restarts with its text).
        reply_grounded(object): the streaming reply's question was grounded in its attached files: the
            ``DocumentsUsed`` (only while its conversation is open).
        reply_finished(object): the reply ended and was saved: its ``FinishedReply`` (one that failed before
            any text is removed from the conversation: ``kept`` is False). Always after every ``reply_grew`` of
            that reply and after ``state_changed`` said it is no longer generating.
        editing_changed(object): the index of the message being edited, or None.
        conversation_listed(object): the conversation list changed (a new conversation, a new title); the
            argument is the conversation to select, or None to keep the selection.
        state_changed(): loading, generating or the loaded model changed.
        notice(str, str): one line for the user and its level (info, warning, error).
        status_note(str, int): a passing note for the status bar and how long to show it (ms).
        model_ready(object): a model finished loading (its ModelFacts).
        remote_code_offered(object): a load was refused because the model asks to run its own code, and
            the user was not asked yet: its ``LoadSpec``. Ask, and ``load`` it again with the opt-in if yes.
    """

    conversation_shown = Signal(object)
    message_added = Signal(object)
    messages_removed = Signal(int)
    reply_started = Signal(object)
    reply_grew = Signal(str)
    reply_thought = Signal(str)
    reply_grounded = Signal(object)
    reply_finished = Signal(object)
    editing_changed = Signal(object)
    conversation_listed = Signal(object)
    state_changed = Signal()
    notice = Signal(str, str)
    status_note = Signal(str, int)
    model_ready = Signal(object)
    remote_code_offered = Signal(object)

    def __init__(self, settings: Settings, store: HistoryStore, bridge: Bridge, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.settings = settings
        self.store = store
        self.bridge = bridge
        self._chat = settings.chat()  # the open conversation's settings; new ones start from the defaults
        self._cid: int | None = None  # the open conversation (None: not saved, or none yet)
        self._messages: list[ChatMessage] = []  # the open conversation, user and assistant messages
        self._editing: int | None = None
        self._loading = False
        self._facts: Any = bridge.facts  # the bridge may hold a model already
        self._load_specs: collections.deque[LoadSpec | RemoteSpec] = collections.deque()  # asked for, in order
        self.loaded_spec: LoadSpec | RemoteSpec | None = None  # what the loaded model was asked as (None: unknown)
        self._generating = False
        self._gen_cid: int | None = None  # conversation the streaming reply belongs to
        self._reply_mid: int | None = None  # store id of the streaming reply
        self._reply_text = self._reply_reasoning = ""
        self._prefix = ("", "")  # a continued reply's text and thought before this run
        self._reply_shown = False  # the streaming reply is the last of self._messages
        self._reply_documents: DocumentsUsed | None = None  # what the streaming reply's attached files added
        self._closed = False
        # store writes: a failure is one warning, never a crash (the chat goes on unsaved)
        self._write, self._warn_unsaved = turn_notes.UnsavedWarning.writer(self.notice.emit)
        self.last_metrics: Metrics | None = None  # final Metrics of the last reply (the self-test reports them)
        self.perf_notes: Callable[[Metrics], dict] = lambda _m: {}  # live-only figures kept too (the roofline's)
        self._save_timer = QTimer(self)
        self._save_timer.setInterval(SAVE_INTERVAL_MS)
        self._save_timer.timeout.connect(self.on_save_timer_expired)
        bridge.model_loaded.connect(self.on_bridge_model_loaded)
        bridge.load_failed.connect(self.on_bridge_load_failed)
        bridge.tokens_received.connect(self.on_bridge_tokens_received)
        bridge.generation_finished.connect(self.on_bridge_generation_finished)
        bridge.documents_grounded.connect(self.on_bridge_documents_grounded)

    # -- what the window reads ------------------------------------------------------------------------
    @property
    def conversation_id(self) -> int | None:
        return self._cid

    @property
    def facts(self) -> Any:
        """The loaded model's ModelFacts, or None."""
        return self._facts

    def messages(self) -> list[ChatMessage]:
        return list(self._messages)

    def chat_settings(self) -> ChatSettings:
        """The settings the open conversation replies with (its own once saved with it)."""
        return self._chat

    def is_loading(self) -> bool:
        return self._loading

    def is_generating(self) -> bool:
        return self._generating

    def conversation_for_engine(self, upto: int | None = None) -> list[Message]:
        """What the next reply answers (``turn_notes.engine_conversation``), before message index ``upto``."""
        return turn_notes.engine_conversation(self._chat.system_prompt, self._messages, upto)

    # -- conversations --------------------------------------------------------------------------------
    def open(self, cid: int) -> bool:
        """Open conversation ``cid`` from the store, with its own settings; False (said why) if unreadable."""
        try:
            rows = self.store.messages(cid)
        except StoreError as exc:
            self.notice.emit(str(exc), "error")
            return False
        try:
            row = self.store.get_conversation(cid)
        except StoreError:
            row = None  # its messages were readable: chat on with the defaults
        self._chat = (chat_from_stored(row.system_prompt, row.settings, self.settings.chat()) if row is not None
                      else self.settings.chat())
        self.set_editing(None)
        self._show(cid, [ChatMessage.of_row(r) for r in rows if r.role in ("user", "assistant")])
        self.settings.set_last_conversation(cid)
        return True

    def reopen_last(self) -> int | None:
        """Open the conversation open when the app last closed, if it still exists; its id or None."""
        last = self.settings.last_conversation()
        if last is None or not any(row.id == last for row in self.store.list_conversations()):
            return None
        return last if self.open(last) else None

    def select(self, cid: int) -> None:
        """The user picked conversation ``cid``: a reply streaming elsewhere stops (and is saved there)."""
        if cid == self._cid:
            return
        if self._generating:
            self.bridge.stop()
        self.open(cid)

    def new_conversation(self) -> None:
        """Start a new conversation from the default settings, saved at once."""
        if self._generating:
            self.bridge.stop()
        self._chat = self.settings.chat()
        cid = self._create_conversation()
        self._show(cid, [])
        self.set_editing(None)
        if cid is not None:
            self.conversation_listed.emit(cid)
            self.settings.set_last_conversation(cid)

    def conversation_deleted(self, cid: int) -> None:
        """Conversation ``cid`` is gone from the store: stop its reply; close it if it is open."""
        if self._gen_cid == cid:
            self.bridge.stop()
            self._reply_mid = None  # its rows are gone; nothing left to save
        if self._cid == cid:
            self._chat = self.settings.chat()
            self._show(None, [])
            self.settings.set_last_conversation(None)

    def apply_settings(self, chat: ChatSettings | None = None, thinking: bool | None = None) -> None:
        """The user just chose ``chat`` (the settings dialog's values, also saved as the defaults new
        conversations start from): it applies to the open conversation and is saved with it. Taken as given,
        not read back from QSettings. None: the stored defaults. The Thinking switch is kept unless ``thinking``."""
        chosen = chat if chat is not None else self.settings.chat()
        self._chat = replace(chosen, thinking=self._chat.thinking if thinking is None else thinking)
        if self._cid is not None:
            self._write(self.store.update_conversation_settings, self._cid, self._chat.system_prompt,
                        self._chat.stored())

    # -- the model ------------------------------------------------------------------------------------
    def load(self, spec: LoadSpec | RemoteSpec) -> None:
        """Load ``spec``'s model, or a server's (a reply streaming stops: a new model starts every chat over)."""
        self.settings.remember_load(spec)  # a server's URL and model name, never its API key
        self._load_specs.append(spec)  # the worker loads in order: each load ends loaded or failed, first in first out
        self._loading = True
        self.bridge.load(spec)
        self.state_changed.emit()

    # -- a turn ---------------------------------------------------------------------------------------
    def send(self, text: str, attachments: Sequence[str] = ()) -> bool:
        """Send ``text`` as the user's next message (a new version of the one being edited, whose branch is kept),
        grounded in the ``attachments`` files (its images among them: the pictures it shows); False, said why when it is the user's to fix, when it cannot go now."""
        if self._generating or self.bridge.is_generating():
            return False  # a reply is streaming: extra Sends are ignored, never queued or duplicated
        refused = turn_notes.cannot_send(text, self._loading, self._facts is not None)
        if refused is not None:
            self.notice.emit(*refused)
            return False
        config = self._sampling_config()
        if config is None:
            return False
        if self._cid is None:
            self._cid = self._create_conversation()
            if self._cid is not None:
                self.conversation_listed.emit(self._cid)
        if self._editing is not None:  # the edited message and its branch are kept: the edit is a new version
            cut = self._cut(self._editing, keep=True)
            self.set_editing(None)
            if not cut:
                return False  # the typed text stays with the user, to send again on the reloaded chat
        mid = self._write(self.store.add_message, self._cid, "user", text) if self._cid is not None else None
        message = ChatMessage.sent(text, mid, attachments)
        self._messages.append(message)
        self.message_added.emit(message)
        if self._cid is not None:
            self.conversation_listed.emit(None)  # the store auto-titles from the first message
        return self._start_reply(config)

    def regenerate(self) -> bool:
        """Replace the last reply with a new one."""
        if self._generating or not self._messages or self._messages[-1].role != "assistant" or self._facts is None:
            return False
        config = self._sampling_config()
        return config is not None and self._cut(len(self._messages) - 1) and self._start_reply(config)

    def continue_reply(self) -> bool:
        """Resume the last reply where its length limit or Stop cut it: the same message grows (no new turn)."""
        last = self._messages[-1] if self._messages else None
        usable = not self._generating and last is not None and last.continuable and bool(self._facts)
        config = self._sampling_config() if usable else None
        return config is not None and self._start_reply(config, last)

    def edit(self, index: int) -> bool:
        """Start editing message ``index``: the next ``send`` is its new version, on a new branch."""
        if self._generating or not 0 <= index < len(self._messages):
            return False
        self.set_editing(index)
        return True

    def set_editing(self, index: int | None) -> None:
        self._editing = index
        self.editing_changed.emit(index)

    def stop(self) -> bool:
        """Stop the reply or the load; while editing with nothing running, stop editing instead (False)."""
        if self._editing is not None and not self._generating:
            self.set_editing(None)
            return False
        self.bridge.stop()
        return True

    def shutdown(self, wait_ms: int) -> bool:
        """Stop work, join the engine thread (at most ``wait_ms``), keep the partial reply: True if it ended.
        Idempotent, and truthful when called again (``app.main`` exits normally only on True)."""
        if self._closed:
            return self.bridge.shutdown(wait_ms)  # already closed: reports, waits no more
        self._closed = True
        self._save_timer.stop()
        self.bridge.stop()
        joined = self.bridge.shutdown(wait_ms)
        self.bridge.flush_pending()  # deliver what the worker produced before it stopped (Finished included)
        if self._generating:  # no Finished came in time: keep what was streamed, marked stopped
            self._finish_reply("cancelled", self._reply_text, None, None, self._reply_reasoning)
        return joined

    # -- internals ------------------------------------------------------------------------------------
    def _show(self, cid: int | None, messages: list[ChatMessage]) -> None:
        self._cid = cid
        self._messages = messages
        self._reply_shown = False
        self.conversation_shown.emit(list(messages))

    def _sampling_config(self) -> SamplingConfig | None:
        try:
            return self._chat.sampling_config()
        except BadInputError as exc:
            self.notice.emit(self.tr("The reply settings cannot be used: {why}").format(why=exc), "error")
            return None

    def _create_conversation(self) -> int | None:
        """A new conversation in the store, saved with the settings it starts from."""
        return self._write(self.store.create_conversation, system_prompt=self._chat.system_prompt,
                           settings=self._chat.stored())

    def _start_reply(self, config: SamplingConfig, partial: ChatMessage | None = None) -> bool:
        messages = self.conversation_for_engine(len(self._messages) - 1 if partial else None)
        kwargs = None if self._chat.thinking else {"enable_thinking": False}  # None: as the template does
        resumed = Message("assistant", partial.text, partial.reasoning) if partial else None
        # A reply to a message with attached files (sent, or regenerated) is grounded in them again on the worker.
        last = self._messages[-1] if self._messages and partial is None else None
        documents = last.attachments if last is not None and last.role == "user" else ()
        if not self.bridge.generate(self._cid if self._cid is not None else 0, messages, config, kwargs, resumed,
                                    documents):
            return False
        self._reply_documents = None
        self._generating, self._gen_cid = True, self._cid
        self._prefix = (partial.text, partial.reasoning) if partial else ("", "")
        self._reply_text, self._reply_reasoning = self._prefix
        self._reply_mid = partial.message_id if partial else (
            self._write(self.store.add_message, self._cid, "assistant", "") if self._cid is not None else None)
        reply = partial or ChatMessage("assistant", "", self._reply_mid)
        if partial is None:
            self._messages.append(reply)
        self._reply_shown = True
        self._save_timer.start()
        self.reply_started.emit(reply)
        self.state_changed.emit()
        return True

    def _cut(self, index: int, keep: bool = False) -> bool:
        """Delete message ``index`` and all after it, here and in the store (``keep``: set aside there, an edit's branch);
        False, nothing changed, when another window added messages after those open here: the chat is reloaded."""
        if index >= len(self._messages):
            return True
        mid = self._messages[index].message_id
        if mid is not None and self._cid is not None:
            known = [m.message_id for m in self._messages[index:] if m.message_id is not None]
            try:
                cut = branches.set_aside if keep else HistoryStore.delete_messages_from
                cut(self.store, self._cid, mid, known_ids=known)
            except ConflictError:  # said in the interface's language: the store's message is English
                self.notice.emit(self.tr("This chat was changed in another window since it was opened; nothing was "
                                         "deleted. It is reloaded: try again."), "warning")
                self.open(self._cid)
                return False
            except StoreError as exc:
                self._warn_unsaved(exc)
        del self._messages[index:]
        self.messages_removed.emit(index)
        return True

    def _finish_reply(self, reason: str, text: str, metrics: Metrics | None, error: str | None,
                      reasoning: str = "") -> None:
        self._save_timer.stop()
        perf = (PerfRecord.from_metrics({**metrics.to_dict(), **self.perf_notes(metrics)},
                                        self._facts.name if self._facts else "")
                if metrics is not None else None)
        kept = bool(text or reasoning) or reason != "error"
        if self._reply_mid is not None:
            if not kept:  # only the empty reply goes, never what another window added
                self._write(self.store.delete_messages_from, self._gen_cid, self._reply_mid,
                            known_ids=(self._reply_mid,))
            else:
                self._write(self.store.update_message, self._reply_mid, text, finish_reason=reason, perf=perf,
                            reasoning=reasoning)
        message = ChatMessage("assistant", text, self._reply_mid, reason, perf, reasoning,
                              documents=self._reply_documents)
        shown = self._reply_shown
        if shown:
            if kept:
                self._messages[-1] = message
            else:
                self._messages.pop()
        self._generating = self._reply_shown = False
        self._reply_mid = self._gen_cid = None
        if error:
            self.notice.emit(engine_text(error), "error")  # the worker's fixed refusals are translated
        elif (note := turn_notes.finish_note(reason, message.continuable)) is not None:
            self.status_note.emit(*note)
        self.state_changed.emit()
        self.reply_finished.emit(FinishedReply(message, metrics, shown, kept))

    # -- slots ----------------------------------------------------------------------------------------
    @Slot(object)
    def on_bridge_model_loaded(self, facts: Any) -> None:
        self._loading = False
        self._facts = facts
        self.loaded_spec = self._load_specs.popleft() if self._load_specs else None
        self.notice.emit(loaded_note(facts), "info")  # a local model's size and place, or the server's address
        self.state_changed.emit()
        self.model_ready.emit(facts)

    @Slot(object)
    def on_bridge_load_failed(self, failure: LoadFailure) -> None:
        self._loading = False
        if self._load_specs:
            self._load_specs.popleft()
        self.notice.emit(load_failure_text(failure, self._facts.name if self._facts is not None else None), "error")
        self.state_changed.emit()
        if failure.kind is ErrorKind.REMOTE_CODE_REFUSED and not failure.spec.allow_remote_code and not self._closed:
            self.remote_code_offered.emit(failure.spec)

    @Slot(str, list)
    def on_bridge_tokens_received(self, text: str, tokens: list) -> None:
        if not self._generating:
            return
        thought = "".join(token.reasoning for token in tokens)
        self._reply_text += text
        self._reply_reasoning += thought
        if self._reply_shown:
            if thought:
                self.reply_thought.emit(thought)
            self.reply_grew.emit(text)

    @Slot(object)
    def on_bridge_generation_finished(self, finished: Finished) -> None:
        if not self._generating:
            return
        metrics = finished.metrics if finished.metrics is not None and finished.metrics.generated_tokens else None
        if metrics is not None:
            self.last_metrics = metrics
        text, reasoning = self._prefix[0] + finished.text, self._prefix[1] + finished.reasoning
        self._finish_reply(finished.reason, text if finished.text else self._reply_text, metrics,
                           finished.error if finished.reason == "error" else None,
                           reasoning if finished.reasoning else self._reply_reasoning)

    @Slot(object)
    def on_bridge_documents_grounded(self, used: DocumentsUsed) -> None:
        if not self._generating:
            return
        self._reply_documents = used
        if self._reply_shown:
            self.reply_grounded.emit(used)

    @Slot()
    def on_save_timer_expired(self) -> None:
        if self._reply_mid is not None:
            self._write(self.store.update_message, self._reply_mid, self._reply_text, reasoning=self._reply_reasoning)

