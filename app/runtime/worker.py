"""The engine thread's side of the bridge: the typed jobs, the worker that runs them, and its sessions.

Owns what the GUI may ask of the engine (``LoadJob``, ``GenerateJob`` (with the files attached to its last message,
grounded here with the model's tokenizer: ``engine.docs.attach``), ``TaskJob``, ``ServeJob`` for the
window's API server, ``PersistJob`` to keep a conversation's cache on disk: frozen, validated when built, dispatched
on their type), what the worker reports back
beyond the engine's own events (``LoadFailure``, ``ReplyStarted``), the loaded model (only the worker touches
it) and the chat sessions it keeps: one ``ChatSession`` per conversation id, a bounded few (``SessionCache``),
so a reply reuses its conversation's KV cache without every chat ever opened holding one; a session dropped from
memory, or whose conversation the user switched away from, leaves its cache on disk and a conversation reopened
later starts from it (``engine.core.kv_persist``); and whole documents' KV prefixes, which a new conversation
attaching the same files starts from (``engine.docs.kv_prefix``).

Does not own the thread, the cancel requests or the coalescing of events for the GUI (``app.runtime.bridge``).
"""

from __future__ import annotations

import collections
import logging
import threading
import traceback
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from PySide6.QtCore import QObject, Signal, Slot

from app.runtime.tool_host import ConfirmRequest, ReplyTools, ToolHost
from engine.core.drafters import DrafterCache
from engine.core.kv_persist import KVPersistence
from engine.core.sessions import SessionCache
from engine.docs.attach import AttachedFile, ground_conversation, measure_attached, token_counter
from engine.docs.forecast import AttachedIndex
from engine.docs.kv_prefix import DocumentPrefixes, PendingPrefix
from engine.errors import BadInputError, CancelledError, EngineError, ErrorKind
from engine.events import Finished, Message, Started
from engine.fmt import one_line
from engine.inputs import LoadSpec, SamplingConfig, SpeculationConfig
from engine.models import loader as model_loader
from engine.models.model import LoadedModel
from engine.remote import RemoteModel, RemoteSession, RemoteSpec, connect

if TYPE_CHECKING:  # the real import waits for the first reply (see Worker._generate)
    from engine.generate.session import ChatSession

log = logging.getLogger(__name__)

TaskFn = Callable[[LoadedModel, threading.Event], object]

@dataclass(frozen=True)
class LoadJob:
    """Load ``spec``'s model, or connect to a server's (``RemoteSpec``: its models are listed and the name checked);
    the previous one stays loaded until this one succeeds."""

    spec: LoadSpec | RemoteSpec


@dataclass(frozen=True)
class GenerateJob:
    """Stream a reply to ``messages`` (the whole conversation) in ``conversation_id``'s session."""

    conversation_id: int
    messages: tuple[Message, ...]
    config: SamplingConfig
    prefix_from: int | None = None  # a fork's first turn: the conversation whose session may be handed over
    template_kwargs: dict[str, Any] | None = None  # chat-template variables (enable_thinking); a local model's only
    partial: Message | None = None  # the reply cut at its length limit or stopped, continued where it stopped
    text: str | None = None  # Complete text: this document is continued raw (no chat template), ``messages`` unused
    speculation: SpeculationConfig | None = None  # speculative decoding (app.window.speculation); a local model's only
    tools: ReplyTools | None = None  # the conversation's MCP tools and JSON schema (``app.runtime.tool_host``)
    documents: tuple[str, ...] = ()  # files attached to the last user message: it is grounded in them here
    docs_mode: str = "auto"  # whole, retrieve, or auto: whole when they fit the context (engine.docs.grounding)
    collections: tuple[str, ...] = ()  # the conversation's collections (app.window.docs_choice): searched for it too


@dataclass(frozen=True)
class TaskJob:
    """Run ``fn(loaded_model, cancel_event)`` on the worker thread (lab, tokenizer, model card). ``needs_model``
    False: it runs with no model loaded too (``loaded_model`` None), as indexing a collection does."""

    fn: TaskFn
    needs_model: bool = True


@dataclass(frozen=True)
class ServeJob:
    """The window's API server's work on the worker thread (one request's model work, or setting up the server's
    queue for a newly loaded model): ``run(model)`` with the model loaded now (None: none yet).

    Posted by ``Bridge.post_serve_job`` from any thread (``app.runtime.api_serving``), outside the Bridge's bookkeeping:
    it waits in line with the chat's jobs, and ``run`` reports its own outcome to whoever waits on it."""

    run: Callable[[LoadedModel | RemoteModel | None], None]


@dataclass(frozen=True)
class PersistJob:
    """Write conversation ``conversation_id``'s KV cache to disk if memory holds one its file does not (the user
    switched away from it: a crash would lose it), unless ``wanted()`` is False by then (a reply was asked for since:
    the reply goes first). ``forget``: the conversation was deleted: its session and its file go instead.

    Posted by ``Bridge.keep_on_disk`` / ``Bridge.forget_kv`` outside the GUI's bookkeeping, one at a time, when the
    worker is idle: a reply asked for during the write waits for that write only."""

    conversation_id: int
    wanted: Callable[[], bool] = lambda: True
    forget: bool = False


Job = LoadJob | GenerateJob | TaskJob | ServeJob | PersistJob


@dataclass(frozen=True)
class LoadFailure:
    """A load that did not happen: what went wrong (act on ``kind``), one line for the user, and the spec."""

    kind: ErrorKind
    message: str
    spec: LoadSpec | RemoteSpec


@dataclass(frozen=True)
class ReplyStarted(Started):
    """The engine's ``Started``, plus what only the worker knows: this conversation's session had been
    evicted from ``SessionCache``, so its whole prompt is computed again (``reused_tokens`` is 0); and how many of
    ``reused_tokens`` came from a cached document prefix (``engine.docs.kv_prefix``: another conversation attached
    the same files, or a file kept on disk)."""

    kv_evicted: bool = False
    document_prefix_tokens: int = 0


@dataclass
class QueuedJob:
    """A job on its way through the worker, with its id and cancel flag (mutable only in those flags)."""

    job_id: int
    job: Job
    cancel: threading.Event = field(default_factory=threading.Event)
    reported: bool = False  # a generation's Finished reached the GUI (the job may still be winding down)

    @property
    def generating(self) -> bool:
        """A reply whose Finished has not reached the GUI yet."""
        return isinstance(self.job, GenerateJob) and not self.reported


def finished_without_run(reason: str, error: str | None = None) -> Finished:
    """A Finished event for a generation that never reached the engine (cancelled in the queue, no model)."""
    return Finished(reason=reason, text="", error=error)  # type: ignore[arg-type]


class EventBuffer:
    """Generation events handed from the worker to the GUI thread, in order, under a lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: list[object] = []

    def put(self, event: object) -> None:
        with self._lock:
            self._events.append(event)

    def take(self) -> list[object]:
        with self._lock:
            events, self._events = self._events, []
        return events


class Worker(QObject):
    """Lives on the worker thread; runs jobs one at a time. Its signals are queued to the Bridge.

    Signals:
        job_finished(int): a job's id, emitted once it has ended, whatever the outcome.
        events_pending(): a Started or Finished event was buffered; drain the buffer now.
        load_progressed(str, float): stage name and fraction of the model load done.
        model_loaded(object): the new model's ModelFacts (a server's model: its ``RemoteFacts``).
        load_failed(object): the ``LoadFailure`` (the previous model, if any, stays loaded).
        task_finished(int, object): task id and fn's return value.
        task_failed(int, str): task id and the one-line error.
        tool_confirmation_requested(object): a ``ConfirmRequest``: the reply waits until it is answered (or stopped).
    """

    job_finished = Signal(int)
    events_pending = Signal()
    load_progressed = Signal(str, float)
    model_loaded = Signal(object)
    load_failed = Signal(object)
    task_finished = Signal(int, object)
    task_failed = Signal(int, str)
    tool_confirmation_requested = Signal(object)

    def __init__(self, buffer: EventBuffer) -> None:
        super().__init__()
        self._buffer = buffer
        self._loaded: LoadedModel | RemoteModel | None = None
        self.drafters = DrafterCache()  # speculative decoding's drafter, one for every conversation's session
        self.tools = ToolHost(self._finish, self._ask)  # the MCP hub beside the model; its events go as Finished's
        self.sessions = SessionCache(KVPersistence())
        # Whole documents' KV prefixes, kept for other conversations attaching the same files (issue 43), on disk in
        # the conversations' KV folder, within its budget.
        self.doc_prefixes = DocumentPrefixes(self.sessions.persistence.store)
        self.attached_index = AttachedIndex()  # attached files read and indexed by the forecast, reused by the send

    @Slot(object)
    def on_job_requested(self, queued: QueuedJob) -> None:
        try:
            match queued.job:
                case LoadJob():
                    self._load(queued.job, queued.cancel)
                case GenerateJob():
                    self._generate(queued.job, queued.cancel)
                case TaskJob():
                    self._task(queued.job_id, queued.job, queued.cancel)
                case ServeJob():
                    queued.job.run(self._loaded)
                case PersistJob(forget=True):
                    self.sessions.forget(queued.job.conversation_id)
                case PersistJob():
                    if queued.job.wanted():
                        self.sessions.persist(queued.job.conversation_id)
        except BaseException:  # a bug must not kill the worker thread: log it, report it, keep serving
            log.exception("worker job %s (%s) crashed", queued.job_id, type(queued.job).__name__)
        finally:
            self.job_finished.emit(queued.job_id)

    def release(self) -> None:
        """Drop the model and sessions (called after the thread stopped, so no job is running)."""
        self.sessions.clear()
        self.doc_prefixes.clear()
        self.drafters.clear()
        self._loaded = None
        self.tools.close()
        self.attached_index.close()

    def _load(self, job: LoadJob, cancel: threading.Event) -> None:
        def progress(p: model_loader.LoadProgress) -> None:
            self.load_progressed.emit(p.stage, float(p.fraction))

        try:
            if cancel.is_set():
                raise CancelledError("model load cancelled")
            loaded = (connect(job.spec, cancel) if isinstance(job.spec, RemoteSpec)
                      else model_loader.load_model(job.spec, progress=progress, cancel=cancel))
        except EngineError as exc:
            self.load_failed.emit(LoadFailure(exc.kind, one_line(exc), job.spec))
            return
        except Exception as exc:  # noqa: BLE001 (engine edge missed a conversion: still one line for the user)
            log.error("unexpected load failure:\n%s", traceback.format_exc())
            message = f"could not load the model: {one_line(exc, name_type=True)}"
            self.load_failed.emit(LoadFailure(ErrorKind.OTHER, message, job.spec))
            return
        # Only now is the previous model dropped: a failed load keeps the user's working model.
        self.sessions.clear()
        self.doc_prefixes.clear()
        if isinstance(self._loaded, RemoteModel):
            self._loaded.close()  # the previous server's pooled connections
        self._loaded = loaded
        self.model_loaded.emit(loaded.facts)

    def _generate(self, job: GenerateJob, cancel: threading.Event) -> None:
        if cancel.is_set():
            self._finish(finished_without_run("cancelled"))
            return
        loaded = self._loaded
        if loaded is None:
            self._finish(finished_without_run("error", "no model loaded: choose a model and press Load"))
            return
        try:
            if isinstance(loaded, RemoteModel):
                # A server's model: nothing kept here between replies (the server keeps its own cache), no torch.
                session, evicted = RemoteSession(loaded), False
            else:
                # Imported on the first reply, not with the window: it imports torch (~1.3 s measured), and the
                # window shows before any model is loaded. (Tests also replace ChatSession on its module.)
                from engine.generate.session import ChatSession

                # One torch thread fewer while decoding leaves a core to the GUI thread that renders the
                # stream, on machines with enough cores for it to cost little (see ChatSession).
                session, evicted = self.sessions.take(job.conversation_id,
                                                      lambda: ChatSession(loaded, reserve_threads=1), job.prefix_from)
                session.set_speculation(job.speculation, self.drafters.get(loaded, job.speculation))
            messages = job.messages
            doc_prefix: PendingPrefix | None = None
            if job.documents or job.collections:
                messages, whole = self._ground(loaded, job)
                if whole and not isinstance(loaded, RemoteModel) and job.config.use_kv_cache:
                    doc_prefix = self.doc_prefixes.prepare(session, messages, job.messages[-1].content,
                                                           job.template_kwargs)
            # Only what was asked for: a server's session takes neither (its template is the server's).
            extra = {name: value for name, value in (("template_kwargs", job.template_kwargs), ("partial", job.partial))
                     if value and not isinstance(loaded, RemoteModel)}
            if job.text is not None:  # Complete text (app.widgets.completion_view): a local model's own continuation
                if isinstance(loaded, RemoteModel):
                    raise BadInputError("Complete text needs a model loaded here, not a server's")
                events = session.complete(job.text, job.config, cancel=cancel)
            elif job.tools is not None and (job.tools.uses_tools or job.tools.json_schema):
                events = self.tools.events(session, messages, job.config, job.tools, cancel, **extra)
            else:
                events = session.generate(messages, job.config, cancel=cancel, **extra)
            finished = False
            for event in events:
                if isinstance(event, Started):
                    hit = doc_prefix.hit if doc_prefix is not None else None  # restored before Started
                    event = ReplyStarted(**vars(event), kv_evicted=evicted,
                                         document_prefix_tokens=min(hit.tokens, event.reused_tokens) if hit else 0)
                elif isinstance(event, Finished):
                    metrics = event.metrics
                    self.sessions.measured(job.conversation_id,
                                           max(metrics.kv_cache_bytes_allocated, metrics.kv_cache_bytes))
                self._buffer.put(event)
                if isinstance(event, (Started, Finished)):
                    self.events_pending.emit()
                    finished = finished or isinstance(event, Finished)
            if not finished:  # the contract says Finished always comes; never leave the GUI waiting
                self._finish(finished_without_run("error", "generation ended without a finish event"))
            elif doc_prefix is not None:  # after the GUI has the reply: a copy, and a file write at most
                self.doc_prefixes.keep(session, doc_prefix.ids)
        except EngineError as exc:
            self._finish(finished_without_run("error", one_line(exc)))
        except Exception as exc:  # noqa: BLE001
            log.error("unexpected generation failure:\n%s", traceback.format_exc())
            self._finish(finished_without_run("error", f"generation failed: {one_line(exc, name_type=True)}"))

    def _ground(self, loaded: LoadedModel | RemoteModel, job: GenerateJob) -> tuple[tuple[Message, ...], bool]:
        """The conversation with its last message grounded in ``job.documents``, and whether they went in whole;
        what was added goes to the GUI (``DocumentsUsed``, before the reply's Started)."""
        if isinstance(loaded, RemoteModel):
            raise BadInputError("attached documents need a model loaded here: a server's tokenizer is not here to "
                                "count them")
        messages, used = ground_conversation(loaded.tokenizer, loaded.facts.context_length or 0, job.messages,
                                             job.documents, job.docs_mode, job.config.max_new_tokens, job.collections,
                                             index=self.attached_index)
        self._buffer.put(used)
        return tuple(messages), used.mode == "whole"

    def read_attachment(self, path: str) -> AttachedFile:
        """Read one attached file and count its tokens with the loaded model's tokenizer (a ``TaskJob``'s work)."""
        loaded = self._loaded
        if not isinstance(loaded, LoadedModel):
            raise BadInputError("attached documents need a model loaded here: load one to read them")
        return measure_attached(path, token_counter(loaded.tokenizer))

    def _finish(self, event: object) -> None:
        self._buffer.put(event)
        self.events_pending.emit()

    def _ask(self, request: ConfirmRequest) -> None:
        self.tool_confirmation_requested.emit(request)

    def _task(self, job_id: int, job: TaskJob, cancel: threading.Event) -> None:
        if cancel.is_set():
            self.task_failed.emit(job_id, "cancelled")
            return
        if self._loaded is None and job.needs_model:
            self.task_failed.emit(job_id, "no model loaded: choose a model and press Load")
            return
        try:
            result = job.fn(self._loaded, cancel)
        except EngineError as exc:
            self.task_failed.emit(job_id, one_line(exc))
        except Exception as exc:  # noqa: BLE001
            log.error("task %s failed:\n%s", job_id, traceback.format_exc())
            self.task_failed.emit(job_id, one_line(exc, name_type=True))
        else:
            self.task_finished.emit(job_id, result)
