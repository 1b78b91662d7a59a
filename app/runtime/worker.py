"""The window's Qt adapter over the engine core: ``Worker`` turns what the core reports on its engine thread
(``engine.core.engine_thread.EngineThread``, the one ``engine serve`` runs on too) into Qt signals.

The jobs, the loaded model and everything kept beside it (sessions by conversation id, KV files, drafters, document
prefixes) are the core's (``engine.core.jobs``, ``engine.core.core``); the names the window uses are re-exported here.
What the adapter adds is the window's: the signals queued to the Bridge, the event buffer's wake-ups, and the reply's
MCP tools and their confirmations (``app.runtime.tool_host``: the user's servers and dialogs are the window's).

The worker lives on the GUI thread (it is never moved): the core calls its ``report_*`` methods on the engine thread,
so each signal is queued to the Bridge. Does not own the thread, the queue, the cancel requests or the coalescing of
events for the GUI (``app.runtime.bridge``).
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from app.runtime.tool_host import ConfirmRequest, ToolHost
from engine.core.core import EngineCore
from engine.core.drafters import DrafterCache
from engine.core.jobs import (EventBuffer, GenerateJob, Job, LoadFailure, LoadJob, PersistJob, QueuedJob,
                              ReplyStarted, ServeJob, TaskFn, TaskJob, finished_without_run)
from engine.core.models import ModelRecord
from engine.core.sessions import SessionCache
from engine.docs.attach import AttachedFile
from engine.docs.forecast import AttachedIndex
from engine.docs.kv_prefix import DocumentPrefixes
from engine.events import Finished, Started

__all__ = ["EventBuffer", "GenerateJob", "Job", "LoadFailure", "LoadJob", "PersistJob", "QueuedJob", "ReplyStarted",
           "ServeJob", "TaskFn", "TaskJob", "Worker", "finished_without_run"]


class Worker(QObject):
    """The engine core's ``Reports`` for the window: lives on the GUI thread, called on the engine thread, so its
    signals are queued to the Bridge.

    Signals:
        job_finished(int): a job's id, emitted once it has ended, whatever the outcome.
        events_pending(): a Started or Finished event was buffered; drain the buffer now.
        load_progressed(str, float): stage name and fraction of the model load done.
        model_loaded(object): the new model's ModelFacts (a server's model: its ``RemoteFacts``).
        load_failed(object): the ``LoadFailure`` (the previous model, if any, stays loaded).
        task_finished(int, object): task id and fn's return value.
        task_failed(int, str): task id and the one-line error.
        tool_confirmation_requested(object): a ``ConfirmRequest``: the reply waits until it is answered (or stopped).
        models_changed(object): what the core holds in memory now, a tuple of ``engine.core.models.ModelRecord``.
    """

    job_finished = Signal(int)
    events_pending = Signal()
    load_progressed = Signal(str, float)
    model_loaded = Signal(object)
    load_failed = Signal(object)
    task_finished = Signal(int, object)
    task_failed = Signal(int, str)
    tool_confirmation_requested = Signal(object)
    models_changed = Signal(object)

    def __init__(self, buffer: EventBuffer) -> None:
        super().__init__()
        self._buffer = buffer
        self.tools = ToolHost(self._finish, self._ask)  # the MCP hub beside the model; its events go as Finished's
        self.core = EngineCore(self, self.tools.events)

    # The core's parts the window reaches for (the forecast, the drafter's preparation, tests).
    @property
    def sessions(self) -> SessionCache:
        return self.core.sessions

    @property
    def drafters(self) -> DrafterCache:
        return self.core.drafters

    @property
    def doc_prefixes(self) -> DocumentPrefixes:
        return self.core.doc_prefixes

    @property
    def attached_index(self) -> AttachedIndex:
        return self.core.attached_index

    def report_job_done(self, queued: QueuedJob) -> None:
        """The engine thread ran ``queued`` to its end (``EngineThread``'s ``on_done``)."""
        self.job_finished.emit(queued.job_id)

    def release(self) -> None:
        """Drop the model and sessions (called after the thread stopped, so no job is running)."""
        self.core.release()
        self.tools.close()

    def read_attachment(self, path: str) -> AttachedFile:
        """Read one attached file and count its tokens with the loaded model's tokenizer (a ``TaskJob``'s work)."""
        return self.core.read_attachment(path)

    # -- engine.core.core.Reports: called on the worker thread, each a queued signal -----------------------------
    def report_event(self, event: object) -> None:
        self._buffer.put(event)
        if isinstance(event, (Started, Finished)):  # the rest is drained by the Bridge's timer
            self.events_pending.emit()

    def report_load_progress(self, stage: str, fraction: float) -> None:
        self.load_progressed.emit(stage, fraction)

    def report_loaded(self, facts: object) -> None:
        self.model_loaded.emit(facts)

    def report_load_failure(self, failure: LoadFailure) -> None:
        self.load_failed.emit(failure)

    def report_task_result(self, job_id: int, result: object) -> None:
        self.task_finished.emit(job_id, result)

    def report_task_failure(self, job_id: int, message: str) -> None:
        self.task_failed.emit(job_id, message)

    def report_models(self, records: tuple[ModelRecord, ...]) -> None:
        self.models_changed.emit(records)

    def _finish(self, event: object) -> None:
        self._buffer.put(event)
        self.events_pending.emit()

    def _ask(self, request: ConfirmRequest) -> None:
        self.tool_confirmation_requested.emit(request)
