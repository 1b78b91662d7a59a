"""The bridge between the GUI thread and the engine: the engine core's own thread (``engine.core.engine_thread``),
with the window's Qt adapter (``app.runtime.worker.Worker``) turning what the core reports into queued signals.

Owns the engine thread's lifetime, the cancel flags and the coalescing of streamed events into ~30 GUI updates a
second. The GUI calls ``Bridge`` methods with the engine's validated inputs (``LoadSpec``,
``SamplingConfig``, ``Message``) and receives its signals; it never waits on the worker and never sees a
tensor. Jobs (load, generate, lab tasks: typed, see ``engine.core.jobs``) run one after another on the engine
thread, the same ``EngineThread`` that hosts ``engine serve`` (issue 42: one core, one queue, behind every client);
the core keeps the loaded models and a bounded few chat sessions. The engine thread is a plain Python thread, not a
``QThread``: the worker QObject stays on the GUI thread, so each signal it emits from the engine thread is queued.

A conversation the user switched away from has its KV cache written to disk when the worker is next idle
(``keep_on_disk``, app/runtime/kv_saves.py: one save at a time, each giving way to a reply asked for before it
began), so a crash or a kill loses no more than the conversation open then.

Cancel is a ``threading.Event`` per job that the engine polls every decode step and between prefill
chunks: a queued slot could not reach a worker busy in a loop. ``stop()`` sets the flags of every
job not yet finished.

Generation events travel in a lock-protected buffer, in order; a GUI-side timer (and a wake-up
signal for the rare Started/Finished events) drains it, so tokens arrive as a coalesced text delta
plus the Token events for the inspector, and the stats as their latest snapshot.

Does not own what the window does with the events (``app.window.controller``, ``app.window.mainwindow``), nor any engine logic.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import logging
from typing import Any, Callable, Sequence

from PySide6.QtCore import QObject, QTimer, Signal, Slot

from app.runtime.kv_saves import KVSaves
from app.runtime.tool_host import ReplyTools, ToolCallEvent
from app.runtime.worker import (EventBuffer, GenerateJob, Job, LoadFailure, LoadJob, QueuedJob,
                                ReplyStarted, ServeJob, TaskFn, TaskJob, Worker)
from engine.core.engine_thread import EngineThread
from engine.core.vision import TurnImages
from engine.docs.attach import DocumentsUsed
from engine.docs.forecast import MeasureWithDocuments, forecast_documents
from engine.errors import EngineError
from engine.events import Finished, ImagesEncoded, Message, PrefillProgress, Started, Stats, Token
from engine.fmt import one_line
from engine.generate.measure import PromptMeasure, measure_prompt
from engine.inputs import LoadSpec, SamplingConfig, SpeculationConfig
from engine.remote import RemoteSpec

__all__ = ["Bridge", "LoadFailure", "ReplyStarted", "TaskFn"]

log = logging.getLogger(__name__)

FLUSH_INTERVAL_MS = 33  # ~30 Hz: faster than the eye reads, slow enough that a 500 tok/s model cannot flood Qt

# Engine threads that ignored their cancel past shutdown's bounded wait (stuck in a long C call), with
# their workers. Kept here, never released: the thread still uses the core's model and the worker's signals.
# ``app.main`` then ends the process with ``os._exit`` once history is closed.
_ABANDONED: list[tuple[EngineThread, QObject]] = []


class Bridge(QObject):
    """The GUI's handle on the engine. Lives in the GUI thread; owns the engine thread and its Qt adapter.

    Signals:
        load_progressed(str, float): a load reached a stage (name, fraction 0..1 of the whole load).
        model_loaded(object): a load succeeded; the argument is the model's ``ModelFacts``.
        load_failed(object): a load failed or was cancelled: its ``LoadFailure`` (kind, one line for the
            user, the spec). A previously loaded model stays loaded.
        generation_started(object): a reply's ``ReplyStarted`` (the engine's ``Started`` and whether the
            conversation's KV cache had been evicted, so its whole prompt is prefilled again).
        prefill_progressed(int, int): prompt tokens computed so far and in all (once per prefill chunk),
            so a long prompt shows progress before its first token.
        tokens_received(str, list): text generated since the last flush and the ``Token`` events it
            came from (for the token inspector); at most ~30 per second.
        stats_updated(object): the latest ``Metrics`` snapshot while a reply streams (coalesced).
        generation_finished(object): the ``Finished`` event; always exactly once per accepted
            ``generate()``, after every ``tokens_received`` of that reply.
        task_finished(int, object): a ``submit_task`` id and the function's result.
        task_failed(int, str): a ``submit_task`` id and a one-line error.
        busy_changed(bool): the worker became busy (a job is running or queued) or idle. The API server's
            requests (``post_serve_job``) do not count: a reply asked for meanwhile waits behind them.
        closing(): ``shutdown`` began; whoever posts jobs from another thread stops now, before the thread does.
        tool_call_updated(object): a ``ToolCallEvent`` of the reply being written (asked, running, done, a problem),
            in order with its stream.
        tool_confirmation_requested(object): a ``ConfirmRequest`` for a tool that may change something: ``answer``
            it (the reply waits, or until stopped).
        documents_grounded(object): the reply's last message was grounded in its attached files: the
            ``DocumentsUsed`` (whole or retrieved, sources, tokens added, time taken), before its Started.
        images_encoded(object): a vision turn's ``ImagesEncoded`` (tokens per image, the vision encoder's time, how many
            the KV cache held already), after its Started.
        models_changed(object): what the engine core holds in memory now (``loaded_models``): a tuple of
            ``engine.core.models.ModelRecord`` (name, kind, bytes).
    """

    load_progressed = Signal(str, float)
    model_loaded = Signal(object)
    load_failed = Signal(object)
    generation_started = Signal(object)
    prefill_progressed = Signal(int, int)
    tokens_received = Signal(str, list)
    stats_updated = Signal(object)
    generation_finished = Signal(object)
    task_finished = Signal(int, object)
    task_failed = Signal(int, str)
    busy_changed = Signal(bool)
    closing = Signal()
    tool_call_updated = Signal(object)
    tool_confirmation_requested = Signal(object)
    documents_grounded = Signal(object)
    images_encoded = Signal(object)
    models_changed = Signal(object)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._ids = itertools.count(1)
        self._jobs: dict[int, QueuedJob] = {}  # not yet finished, in submission order
        self._buffer = EventBuffer()
        self._pending: collections.deque[object] = collections.deque()  # taken from the buffer, not yet emitted
        self._finishes = 0  # Finished events emitted so far
        self._worker = Worker(self._buffer)  # on the GUI thread: its signals, emitted on the engine thread, are queued
        self._engine = EngineThread(self._worker.core, name="miaohui-engine", on_done=self._worker.report_job_done)
        self._worker.job_finished.connect(self.on_worker_job_finished)
        self._worker.events_pending.connect(self.on_worker_events_pending)
        self._worker.load_progressed.connect(self.load_progressed)
        self._worker.model_loaded.connect(self.on_worker_model_loaded)
        self._worker.load_failed.connect(self.load_failed)
        self._worker.task_finished.connect(self.task_finished)
        self._worker.task_failed.connect(self.task_failed)
        self._worker.tool_confirmation_requested.connect(self.tool_confirmation_requested)
        self._worker.models_changed.connect(self.on_worker_models_changed)
        self.reply_tools: Callable[[int], ReplyTools | None] = lambda _conversation_id: None  # set by the window
        # The conversation's collections and documents mode (app.window.docs_choice sets it; None: neither).
        self.docs_choice: Callable[[int], tuple[tuple[str, ...], str] | None] = lambda _conversation_id: None
        # The conversation's pictures by message index, for a vision turn (app.window.image_turns sets it).
        self.reply_images: Callable[[int], TurnImages] = lambda _conversation_id: ()
        self._flush_timer = QTimer(self)
        self._flush_timer.setInterval(FLUSH_INTERVAL_MS)
        self._flush_timer.timeout.connect(self.on_flush_timer_expired)
        self._facts: object | None = None
        self._models: tuple[Any, ...] = ()  # the core's ModelRecords; replaced whole, so any thread may read it
        self._forks: dict[int, int] = {}  # fork's conversation id -> the one it was forked from, until it replies
        self.speculation: SpeculationConfig | None = None  # every reply's speculative decoding (app.window.speculation)
        self._closed = False
        self._asked = 0  # the GUI's jobs asked for so far: a save posted before the latest one gives way to it
        self._saves = KVSaves(self._engine, lambda: next(self._ids), lambda: self._asked)
        self._engine.start()

    # -- public API ---------------------------------------------------------------------------------
    @property
    def facts(self) -> object | None:
        """ModelFacts of the loaded model, or None."""
        return self._facts

    @property
    def engine_running(self) -> bool:
        """Whether the engine thread is still running (False once ``shutdown`` joined it)."""
        return self._engine.alive

    def loaded_models(self) -> tuple[Any, ...]:
        """What the engine core holds in memory, as last reported: ``ModelRecord``s, the least recently used first."""
        return self._models

    def model_budget_bytes(self) -> int | None:
        """The engine core's memory budget for its models (``engine.core.models``: the machine's for the chat model's
        device; past it the least recently used is unloaded). An int set on the engine thread, read whole here."""
        return self._worker.core.shelf.budget_bytes

    def embedder(self) -> object:
        """The engine core's embedding model (loaded and put beside the chat model if it is not there; None: none is
        installed). Call it on the engine thread only: inside a ``submit_task`` function."""
        return self._worker.core.embedder()

    def is_busy(self) -> bool:
        return bool(self._jobs)

    def is_saving(self) -> bool:
        """True while a conversation's KV cache waits to be written to disk or is being written (``keep_on_disk``)."""
        return self._saves.pending()

    def is_generating(self) -> bool:
        """True from an accepted ``generate()`` until its ``generation_finished`` was emitted."""
        return any(queued.generating for queued in self._jobs.values())

    def load(self, spec: LoadSpec | RemoteSpec) -> int:
        """Load ``spec``'s model (a ``RemoteSpec``: connect to a server's). Cancels a running reply first: a new
        model drops every conversation's session; and a server still connecting, which would be replaced at once
        (a server that never answers must not hold up the model asked for next). Returns the job id (0 after
        shutdown)."""
        for queued in self._jobs.values():
            if isinstance(queued.job, GenerateJob) or (isinstance(queued.job, LoadJob)
                                                       and isinstance(queued.job.spec, RemoteSpec)):
                queued.cancel.set()
        return self._submit(LoadJob(spec))

    def generate(self, conversation_id: int, messages: Sequence[Message], config: SamplingConfig,
                 template_kwargs: dict | None = None, partial: Message | None = None,
                 documents: Sequence[str] = (), docs_mode: str | None = None) -> bool:
        """Stream a reply to ``messages`` (the whole conversation) sampled with ``config``, in the session
        kept for ``conversation_id``. Refused (returns False) while another reply is running or queued,
        so a Send pressed many times yields one reply. ``template_kwargs`` and ``partial``: ``ChatSession.generate``'s
        (enable_thinking; the reply cut at its length limit, continued). The conversation's MCP tools and JSON schema:
        ``reply_tools(conversation_id)`` (``app.window.tool_turns`` sets it; None: neither). ``documents``: files attached
        to the last message, grounded on the worker by ``docs_mode`` (``documents_grounded`` says what was added),
        with the collections and mode of ``docs_choice(conversation_id)`` (a mode given here wins; a continued reply
        is not grounded again: its question already is)."""
        if self.is_generating() or self._closed:
            return False
        collections, chosen_mode = self.docs_choice(conversation_id) or ((), "auto")
        self._submit(GenerateJob(conversation_id, tuple(messages), config, self._forks.pop(conversation_id, None),
                                 template_kwargs, partial, tools=self.reply_tools(conversation_id),
                                 documents=tuple(documents), docs_mode=docs_mode or chosen_mode,
                                 collections=tuple(collections) if partial is None else (),
                                 images=self.reply_images(conversation_id)))
        return True

    def complete(self, session_id: int, text: str, config: SamplingConfig) -> bool:
        """Stream a continuation of ``text`` (Complete text: no chat template) in session ``session_id``, with the
        events of ``generate``; refused (False) as ``generate`` is, while another reply runs."""
        if self.is_generating() or self._closed:
            return False
        self._submit(GenerateJob(session_id, (), config, text=text))
        return True

    def note_fork(self, fork_id: int, origin_id: int) -> None:
        """Conversation ``fork_id`` was forked from ``origin_id``: its first reply may take over the session
        the worker keeps for the origin (their shared history is in its KV cache; the origin then prefills
        again on its next reply)."""
        self._forks[fork_id] = origin_id

    def measure_prompt(self, conversation_id: int, messages: Sequence[Message], config: SamplingConfig,
                       documents: Sequence[str] = (), collections: Sequence[str] = (), docs_mode: str = "auto") -> int:
        """Measure on the worker what replying to ``messages`` (the last one: the message being written) would
        compute, as ``conversation_id``'s next reply (``engine.generate.measure.PromptMeasure``); the result
        comes by ``task_finished`` with the returned id, like ``submit_task``'s. With ``documents`` (attached files)
        or ``collections``, the result is a ``MeasureWithDocuments``: both choices counted as well
        (``engine.docs.forecast``; the files read and indexed once, in the worker's ``attached_index``, which the send's
        grounding then uses too)."""
        sessions, origin, messages = self._worker.sessions, self._forks.get(conversation_id), tuple(messages)
        documents, collections, index = tuple(documents), tuple(collections), self._worker.attached_index

        def measure(loaded: Any, cancel: object) -> PromptMeasure | MeasureWithDocuments:  # on the worker
            cached = sessions.cached_ids(conversation_id, origin, config.use_kv_cache)
            measured = measure_prompt(loaded, messages, config.max_new_tokens, cached, cancel)  # type: ignore[arg-type]
            if not documents and not collections:
                return measured
            try:
                forecast = forecast_documents(loaded.tokenizer, loaded.facts.context_length or 0, messages,
                                              documents, docs_mode, config.max_new_tokens, collections, cached, index)
            except EngineError as exc:  # a file that cannot be read: its one line, the message's figures kept
                return MeasureWithDocuments(measured, None, one_line(exc))
            return MeasureWithDocuments(measured, forecast)

        return self.submit_task(measure)

    def read_attachment(self, path: str) -> int:
        """Read an attached file on the worker and count its tokens with the loaded model's tokenizer; its
        ``AttachedFile`` comes by ``task_finished`` (a bad file: ``task_failed``, one line) with the returned id."""
        worker = self._worker
        return self.submit_task(lambda _loaded, _cancel: worker.read_attachment(path))

    def submit_task(self, fn: TaskFn, needs_model: bool = True, vision: bool = False) -> int:
        """Run ``fn(loaded_model, cancel_event)`` on the worker thread; the result comes by
        ``task_finished`` (or ``task_failed``) with the returned id. ``needs_model`` False: it runs with no model
        loaded too (indexing a collection: ``app.runtime.collections_index``). ``vision``: ``fn`` gets the loaded
        vision-language model (``VisionModel``; a text model fails the task with one line)."""
        return self._submit(TaskJob(fn, needs_model, vision))

    def prepare_speculation(self, spec: SpeculationConfig) -> int:
        """Build ``spec``'s drafter for the loaded model now (a draft model's load, an int4 copy), so a draft that
        cannot serve it is refused at once (``task_failed``: its one line) rather than at the next reply; a task id."""
        drafters = self._worker.drafters
        return self.submit_task(lambda loaded, _cancel: drafters.prepare(loaded, spec))

    def post_serve_job(self, job: ServeJob) -> bool:
        """Queue an API request on the worker, behind the jobs already queued; callable from any thread (the engine
        thread's queue is locked). False after shutdown began: it would never run."""
        if self._closed:
            return False
        return self._engine.submit(QueuedJob(0, job))  # id 0: none of the GUI's jobs, so not in its bookkeeping

    def keep_on_disk(self, conversation_id: int) -> None:
        """The user switched away from ``conversation_id``: write its KV cache to disk (``PersistJob``) once the worker
        is idle, one conversation at a time, so no reply waits for more than the write in progress; a file that holds
        the cache already is not written again. A reply asked for before a save began goes first."""
        self._saves.keep(conversation_id)
        self._saves.post_when_idle(not self._closed and not self._jobs)

    def forget_kv(self, conversation_id: int) -> None:
        """``conversation_id`` was deleted: its session and saved cache go (after a save of it in progress)."""
        if not self._closed:
            self._saves.forget(conversation_id)

    def stop(self) -> None:
        """Cancel every job not yet finished; safe to call any number of times, from the GUI thread."""
        for queued in self._jobs.values():
            queued.cancel.set()

    def shutdown(self, timeout_ms: int = 5000) -> bool:
        """Cancel everything, stop the thread and wait for it at most ``timeout_ms``. True if it ended.

        Truthful on every call: a repeated call waits no more but reports whether the thread has ended
        by now (the caller decides from it whether the process may exit normally, see ``app.main``).
        A thread that did not end is kept referenced, with its worker, for the rest of the process (``_ABANDONED``):
        it still uses the core's model and emits the worker's signals.
        """
        if self._closed:
            return not self._engine.alive
        self.closing.emit()
        self._closed = True
        self.stop()
        finished = self._engine.close(timeout_ms / 1000)  # cancels the running job; those still queued never run
        self._flush_timer.stop()
        if finished:
            self._worker.release()
        else:
            log.error("engine thread did not stop within %d ms", timeout_ms)
            _ABANDONED.append((self._engine, self._worker))
        return finished

    def flush_pending(self) -> None:
        """Deliver buffered events now (after ``shutdown``, so a closing window still sees its Finished)."""
        self._drain()

    # -- internals ----------------------------------------------------------------------------------
    def _submit(self, job: Job) -> int:
        if self._closed:
            return 0
        if isinstance(job, GenerateJob):  # the speculation chosen when the reply was asked for
            job = dataclasses.replace(job, speculation=self.speculation)
        queued = QueuedJob(next(self._ids), job)
        self._asked += 1
        was_busy = self.is_busy()
        self._jobs[queued.job_id] = queued
        if isinstance(job, GenerateJob):
            self._flush_timer.start()
        self._engine.submit(queued)
        if not was_busy:
            self.busy_changed.emit(True)
        return queued.job_id

    @Slot(object)
    def on_worker_model_loaded(self, facts: object) -> None:
        self._facts = facts
        self.model_loaded.emit(facts)

    @Slot(object)
    def on_worker_models_changed(self, records: tuple[Any, ...]) -> None:
        self._models = tuple(records)
        self.models_changed.emit(self._models)

    @Slot(int)
    def on_worker_job_finished(self, job_id: int) -> None:
        if self._saves.finished(job_id):
            self._saves.post_when_idle(not self._closed and not self._jobs)
            return
        if job_id not in self._jobs:
            return  # an API request's (post_serve_job): the GUI's state did not change
        queued = self._jobs.pop(job_id)
        if isinstance(queued.job, GenerateJob):
            self._drain()  # everything the job buffered reaches the GUI before it is reported idle
            if not self.is_generating():
                self._flush_timer.stop()
        if not self._jobs:
            self.busy_changed.emit(False)
            self._saves.post_when_idle(not self._closed)

    @Slot()
    def on_worker_events_pending(self) -> None:
        self._drain()

    @Slot()
    def on_flush_timer_expired(self) -> None:
        self._drain()

    def _drain(self) -> None:
        # Re-entrant: a slot connected to one of these signals may close the window, whose shutdown
        # drains again. Events wait in ``self._pending`` rather than a local list, so the nested call
        # delivers what the outer one had taken (a Finished included) and the outer one then stops.
        self._pending.extend(self._buffer.take())
        text: list[str] = []
        tokens: list[object] = []
        stats: object | None = None

        def emit_stream() -> None:
            nonlocal stats
            finishes_before = self._finishes
            if tokens:
                delta, batch = "".join(text), list(tokens)
                text.clear()
                tokens.clear()
                self.tokens_received.emit(delta, batch)
            if stats is not None:
                snapshot, stats = stats, None
                if self._finishes == finishes_before:  # a nested drain finished the reply: this is stale
                    self.stats_updated.emit(snapshot)

        while self._pending:
            event = self._pending[0]
            if isinstance(event, (Started, Finished)) and (tokens or stats is not None):
                emit_stream()  # the stream before it goes first; a nested drain may deliver the event itself
                continue
            self._pending.popleft()
            if isinstance(event, Token):
                text.append(event.text)
                tokens.append(event)
            elif isinstance(event, Stats):
                stats = event.metrics
            elif isinstance(event, Started):
                self.generation_started.emit(event)
            elif isinstance(event, ToolCallEvent):
                self.tool_call_updated.emit(event)
            elif isinstance(event, DocumentsUsed):
                self.documents_grounded.emit(event)
            elif isinstance(event, ImagesEncoded):
                self.images_encoded.emit(event)
            elif isinstance(event, PrefillProgress):
                self.prefill_progressed.emit(event.done, event.total)
            elif isinstance(event, Finished):
                for queued in self._jobs.values():  # jobs run in order: the first unreported one just ended
                    if queued.generating:
                        queued.reported = True
                        break
                self._finishes += 1
                self.generation_finished.emit(event)
        emit_stream()
