"""The engine core: the loaded models and everything kept beside them, and the one place a job is run.

``EngineCore.run(queued)`` runs one job (``engine.core.jobs``) on the calling thread, which must be the core's one
engine thread: the window's engine QThread (its Qt adapter ``app.runtime.worker.Worker`` calls it; the window's API
server's model work arrives there as ``ServeJob``s, ``engine.core.handoff``), or the core's own ``EngineThread``
(``engine.core.engine_thread``) for ``engine serve`` (``engine.serve.hosting``: the server's queue hands its model work
to it the same way).

It owns the loaded models (only this thread touches them): the chat model and the embedding model beside it on a
``ModelShelf`` (``engine.core.models``: a budget, by default the machine's for the chat model's device
(``machine_budget_bytes``), least recently used unloaded, reported as ``ModelRecord``s; ``keep_chat``: the budget
never unloads the chat model, a server's, and refuses what does not fit beside it instead); the
chat sessions by conversation id (``engine.core.sessions.SessionCache``: a reply reuses its conversation's KV cache,
a dropped one goes to disk, ``engine.core.kv_persist``), the speculation drafter (``engine.core.drafters``), whole
documents' KV prefixes a new conversation attaching the same files starts from (``engine.docs.kv_prefix``) and the
attached files the forecast read (``engine.docs.forecast.AttachedIndex``).

What it has to say goes to a ``Reports`` (the window's adapter turns each into a Qt signal): the engine's events for a
reply, in order, the outcome of loads and tasks, and what is loaded. A reply's tools run in the client's
``ToolRunner`` (the window's MCP servers and its confirmations are the window's). Imports no Qt; torch only once a
model is needed.
"""

from __future__ import annotations

import logging
import threading
import traceback
from typing import Callable, Iterator, Protocol

from engine.core.drafters import DrafterCache
from engine.core.jobs import (GenerateJob, LoadFailure, LoadJob, PersistJob, QueuedJob, ReplyStarted, ServeJob, TaskJob,
                              finished_without_run)
from engine.core.kv_persist import KVPersistence
from engine.core.models import ModelBudgetError, ModelRecord, ModelShelf, machine_budget_bytes
from engine.core.sessions import SessionCache
from engine.core.vision import VisionTurns, refuse_images, refuse_text_job
from engine.docs.attach import AttachedFile, ground_conversation, measure_attached, token_counter
from engine.docs.forecast import AttachedIndex
from engine.docs.kv_prefix import DocumentPrefixes, PendingPrefix
from engine.errors import BadInputError, CancelledError, EngineError, ErrorKind
from engine.events import Finished, Message, Started
from engine.fmt import one_line
from engine.models import loader as model_loader
from engine.models.model import LoadedModel
from engine.remote import RemoteModel, RemoteSession, RemoteSpec, connect

log = logging.getLogger(__name__)


class Reports(Protocol):
    """Where the core says what happened; called on the engine thread (a client forwards it to its own)."""

    def report_event(self, event: object) -> None:
        """A reply's event (``ReplyStarted``, ``Token``, ``Stats``, ``Finished``, ``DocumentsUsed``...), in order."""

    def report_load_progress(self, stage: str, fraction: float) -> None: ...

    def report_loaded(self, facts: object) -> None: ...

    def report_load_failure(self, failure: LoadFailure) -> None: ...

    def report_task_result(self, job_id: int, result: object) -> None: ...

    def report_task_failure(self, job_id: int, message: str) -> None: ...

    def report_models(self, records: tuple[ModelRecord, ...]) -> None:
        """What the core holds in memory now (after a load, an unload), the least recently used first."""


# A reply with tools or a JSON schema: (session, messages, config, the job's tools, cancel, **extra) -> its events.
ToolRunner = Callable[..., Iterator[object]]


class EngineCore:
    """The loaded model, the sessions, drafters and prefixes kept beside it, and ``run`` for one job at a time."""

    def __init__(self, reports: Reports, tool_runner: ToolRunner | None = None,
                 budget_bytes: int | None = None, load_embedder: Callable[[], object] | None = None,
                 keep_chat: bool = False) -> None:
        self._reports = reports
        self._tool_runner = tool_runner
        self._load_embedder = load_embedder or _load_embedder_in_use
        self._embedder_in_use = _embedder_folder_in_use if load_embedder is None else (lambda: "")
        self._embedder_name = ""  # which installed embedder the shelf's is (its folder name)
        self.loaded: LoadedModel | RemoteModel | None = None  # the chat model (a server's: not in this memory)
        # The models in this process's memory: the chat one, an embedder... None: the machine's budget, for the RAM
        # until a chat model says which device it is on.
        self._budget_from_machine = budget_bytes is None
        self.shelf = ModelShelf(machine_budget_bytes("cpu") if budget_bytes is None else budget_bytes,
                                frozenset({"chat"}) if keep_chat else frozenset())
        self.drafters = DrafterCache()  # speculative decoding's drafter, one for every conversation's session
        self.sessions = SessionCache(KVPersistence())
        self.vision = VisionTurns()  # a vision-language model's own loader and turns (issue 44)
        # Whole documents' KV prefixes, kept for other conversations attaching the same files (issue 43), on disk in
        # the conversations' KV folder, within its budget.
        self.doc_prefixes = DocumentPrefixes(self.sessions.persistence.store)
        # Attached files read and indexed by the forecast, reused by the send; its embedder is the shelf's.
        self.attached_index = AttachedIndex(self.embedder)

    def run(self, queued: QueuedJob) -> None:
        """Run one job to its end; a bug is logged and never escapes (the engine thread keeps serving)."""
        try:
            match queued.job:
                case LoadJob():
                    self._load(queued.job, queued.cancel)
                case GenerateJob():
                    self._generate(queued.job, queued.cancel)
                case TaskJob():
                    self._task(queued.job_id, queued.job, queued.cancel)
                case ServeJob():
                    queued.job.run(self.loaded)
                case PersistJob(forget=True):
                    self.sessions.forget(queued.job.conversation_id)
                case PersistJob():
                    if queued.job.wanted():
                        self.sessions.persist(queued.job.conversation_id)
        except BaseException:  # a bug must not kill the engine thread: log it, keep serving
            log.exception("engine job %s (%s) crashed", queued.job_id, type(queued.job).__name__)

    def release(self) -> None:
        """Drop the model and everything kept beside it (after the thread stopped, so no job is running)."""
        self.sessions.clear()
        self.vision.clear()
        self.doc_prefixes.clear()
        self.drafters.clear()
        self.loaded = None
        self.shelf.clear()
        self.attached_index.close()

    def models(self) -> tuple[ModelRecord, ...]:
        """What is loaded in this process's memory (name, kind, bytes), the least recently used first."""
        return self.shelf.records()

    def hold(self, kind: str, name: str, model: object, nbytes: int) -> object:
        """Keep ``model`` as the ``kind`` one beside the others (an embedder beside the chat model), unloading the
        least recently used others past the budget; reported to the client. Returns ``model``. ``ModelBudgetError``
        when it does not fit beside the pinned ones (a server's chat model): it is not kept."""
        if kind not in self.shelf.pinned and not self.shelf.fits_beside_pinned(kind, nbytes):
            budget = self.shelf.budget_bytes or 0
            raise ModelBudgetError(f"the {kind} model {name} ({nbytes >> 20} MiB) does not fit beside the chat model "
                                   f"within the {budget >> 20} MiB model memory budget: raise --memory-budget")
        for record in self.shelf.put(kind, name, model, nbytes):
            log.info("unloaded %s model %s (%d bytes) to stay within the model budget", record.kind, record.name,
                     record.bytes)
            if record.kind == "chat":  # the budget chose the chat model: the window has none loaded until reloaded
                self.loaded = None
        self._reports.report_models(self.shelf.records())
        return model

    def embedder(self) -> object:
        """The embedding model in use (``engine.docs.embed``): the one on the shelf while it is still the one in use,
        else loaded now and put there beside the chat model; None when none is installed (retrieval then ranks by
        keywords alone)."""
        in_use = self._embedder_in_use()
        kept = self.shelf.get("embedding")
        if kept is not None and self._embedder_name == in_use:
            return kept
        self.shelf.drop("embedding")  # another one was chosen since (engine docs use-embedder): the old one goes
        embedder = self._load_embedder()
        if embedder is None:
            self._reports.report_models(self.shelf.records())
            return None
        self._embedder_name = in_use
        name, nbytes = getattr(embedder, "name", in_use), getattr(embedder, "weights_bytes", 0)
        return self.hold("embedding", name, embedder, nbytes)

    def held(self, kind: str) -> object:
        """The ``kind`` model kept (now the most recently used), or None."""
        return self.loaded if kind == "chat" else self.shelf.get(kind)

    def read_attachment(self, path: str) -> AttachedFile:
        """Read one attached file and count its tokens with the loaded model's tokenizer (a ``TaskJob``'s work)."""
        loaded = self.loaded
        if not isinstance(loaded, LoadedModel):
            raise BadInputError("attached documents need a model loaded here: load one to read them")
        return measure_attached(path, token_counter(loaded.tokenizer))

    def _load(self, job: LoadJob, cancel: threading.Event) -> None:
        def progress(p: model_loader.LoadProgress) -> None:
            self._reports.report_load_progress(p.stage, float(p.fraction))

        try:
            if cancel.is_set():
                raise CancelledError("model load cancelled")
            loaded = (connect(job.spec, cancel) if isinstance(job.spec, RemoteSpec)
                      else self.vision.load(job.spec, progress, cancel)
                      or model_loader.load_model(job.spec, progress=progress, cancel=cancel))
        except EngineError as exc:
            self._reports.report_load_failure(LoadFailure(exc.kind, one_line(exc), job.spec))
            return
        except Exception as exc:  # noqa: BLE001 (engine edge missed a conversion: still one line for the user)
            log.error("unexpected load failure:\n%s", traceback.format_exc())
            message = f"could not load the model: {one_line(exc, name_type=True)}"
            self._reports.report_load_failure(LoadFailure(ErrorKind.OTHER, message, job.spec))
            return
        # Only now is the previous model dropped: a failed load keeps the user's working model.
        self.sessions.clear()
        self.doc_prefixes.clear()
        if isinstance(self.loaded, RemoteModel):
            self.loaded.close()  # the previous server's pooled connections
        self.loaded = loaded
        self.vision.loaded_now(loaded)
        if isinstance(loaded, LoadedModel):  # the previous chat model leaves the shelf with it
            if self._budget_from_machine:  # the device's memory is the bound: the GPU's for a model on CUDA
                self.shelf.budget_bytes = machine_budget_bytes(loaded.facts.device)
            self.hold("chat", loaded.facts.name, loaded, loaded.facts.weights_bytes)
        else:  # a server's model takes no memory here
            self.shelf.drop("chat")
            self._reports.report_models(self.shelf.records())
        self._reports.report_loaded(loaded.facts)

    def _generate(self, job: GenerateJob, cancel: threading.Event) -> None:
        if cancel.is_set():
            self._reports.report_event(finished_without_run("cancelled"))
            return
        loaded = self.loaded
        if loaded is None:
            self._reports.report_event(finished_without_run("error", "no model loaded: choose a model and press Load"))
            return
        self.shelf.get("chat")  # used now: the model budget unloads the least recently used first
        try:
            vision = self.vision.holds(loaded)  # a vision-language model: every turn is VisionChat's
            if vision:
                session, evicted = None, False
                refuse_text_job(job.text)
            elif isinstance(loaded, RemoteModel):
                refuse_images(job.images, loaded.facts.name)
                # A server's model: nothing kept here between replies (the server keeps its own cache), no torch.
                session, evicted = RemoteSession(loaded), False
            else:
                # Imported on the first reply, not with the window: it imports torch (~1.3 s measured), and the
                # window shows before any model is loaded. (Tests also replace ChatSession on its module.)
                from engine.generate.session import ChatSession

                refuse_images(job.images, loaded.facts.name)
                # One torch thread fewer while decoding leaves a core to the GUI thread that renders the
                # stream, on machines with enough cores for it to cost little (see ChatSession).
                session, evicted = self.sessions.take(job.conversation_id,
                                                      lambda: ChatSession(loaded, reserve_threads=1), job.prefix_from)
                session.set_speculation(job.speculation, self.drafters.get(loaded, job.speculation))
            messages = job.messages
            doc_prefix: PendingPrefix | None = None
            if job.documents or job.collections:
                messages, whole = self._ground(loaded, job)
                if whole and session is not None and not isinstance(loaded, RemoteModel) and job.config.use_kv_cache:
                    doc_prefix = self.doc_prefixes.prepare(session, messages, job.messages[-1].content,
                                                           job.template_kwargs)
            # Only what was asked for: a server's session takes neither (its template is the server's).
            extra = {name: value for name, value in (("template_kwargs", job.template_kwargs), ("partial", job.partial))
                     if value and not isinstance(loaded, RemoteModel)}
            if vision:
                events = self.vision.turn(job.conversation_id, messages, job.images, job.config, cancel)
            elif job.text is not None:  # Complete text (app.widgets.completion_view): a local model's own continuation
                if isinstance(loaded, RemoteModel):
                    raise BadInputError("Complete text needs a model loaded here, not a server's")
                events = session.complete(job.text, job.config, cancel=cancel)
            elif (job.tools is not None and (job.tools.uses_tools or job.tools.json_schema)
                  and self._tool_runner is not None):
                events = self._tool_runner(session, messages, job.config, job.tools, cancel, **extra)
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
                self._reports.report_event(event)
                finished = finished or isinstance(event, Finished)
            if not finished:  # the contract says Finished always comes; never leave a client waiting
                self._reports.report_event(finished_without_run("error", "generation ended without a finish event"))
            elif doc_prefix is not None:  # after the client has the reply: a copy, and a file write at most
                self.doc_prefixes.keep(session, doc_prefix.ids)
        except EngineError as exc:
            self._reports.report_event(finished_without_run("error", one_line(exc)))
        except Exception as exc:  # noqa: BLE001
            log.error("unexpected generation failure:\n%s", traceback.format_exc())
            message = f"generation failed: {one_line(exc, name_type=True)}"
            self._reports.report_event(finished_without_run("error", message))

    def _ground(self, loaded: LoadedModel | RemoteModel, job: GenerateJob) -> tuple[tuple[Message, ...], bool]:
        """The conversation with its last message grounded in ``job.documents``, and whether they went in whole;
        what was added goes to the client (``DocumentsUsed``, before the reply's Started)."""
        if isinstance(loaded, RemoteModel):
            raise BadInputError("attached documents need a model loaded here: a server's tokenizer is not here to "
                                "count them")
        messages, used = ground_conversation(loaded.tokenizer, loaded.facts.context_length or 0, job.messages,
                                             job.documents, job.docs_mode, job.config.max_new_tokens, job.collections,
                                             index=self.attached_index)
        self._reports.report_event(used)
        return tuple(messages), used.mode == "whole"

    def _task(self, job_id: int, job: TaskJob, cancel: threading.Event) -> None:
        if cancel.is_set():
            self._reports.report_task_failure(job_id, "cancelled")
            return
        if self.loaded is None and job.needs_model:
            self._reports.report_task_failure(job_id, "no model loaded: choose a model and press Load")
            return
        try:
            result = job.fn(self.vision.model_of(self.loaded) if job.vision else self.loaded, cancel)
        except EngineError as exc:
            self._reports.report_task_failure(job_id, one_line(exc))
        except Exception as exc:  # noqa: BLE001
            log.error("task %s failed:\n%s", job_id, traceback.format_exc())
            self._reports.report_task_failure(job_id, one_line(exc, name_type=True))
        else:
            self._reports.report_task_result(job_id, result)


def _load_embedder_in_use() -> object:
    from engine.docs.embed import embedder_for_search  # transformers: imported when an embedder is first needed

    return embedder_for_search()


def _embedder_folder_in_use() -> str:
    from engine.docs.embed import in_use_folder  # no torch: a small JSON file read

    return in_use_folder()
