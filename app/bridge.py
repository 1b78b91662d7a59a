"""The bridge between the GUI thread and the engine: one worker QObject on one QThread.

Owns the worker thread, the loaded model (only the worker touches it), one ``ChatSession`` per
conversation id, the cancel flags and the coalescing of streamed events into ~30 GUI updates a
second. The GUI calls ``Bridge`` methods and receives its signals; it never waits on the worker and
never sees a tensor. Jobs (load, generate, lab tasks) run one after another on the worker thread.

Cancel is a ``threading.Event`` per job that the engine polls every decode step and between prefill
chunks: a queued slot could not reach a worker busy in a loop. ``stop()`` sets the flags of every
job not yet finished.

Generation events travel in a lock-protected buffer, in order; a GUI-side timer (and a wake-up
signal for the rare Started/Finished events) drains it, so tokens arrive as a coalesced text delta
plus the Token events for the inspector, and the stats as their latest snapshot.

Does not own what the window does with the events (``app.mainwindow``), nor any engine logic.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import logging
import threading
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

from PySide6.QtCore import QObject, QThread, QTimer, Signal, Slot

from engine.errors import EngineError
from engine.events import Finished, Message, PrefillProgress, Started, Stats, Token
from engine.models.model import LoadedModel
from engine.fmt import one_line

log = logging.getLogger(__name__)

FLUSH_INTERVAL_MS = 33  # ~30 Hz: faster than the eye reads, slow enough that a 500 tok/s model cannot flood Qt

TaskFn = Callable[[LoadedModel, threading.Event], object]

# Engine threads that ignored their cancel past shutdown's bounded wait (stuck in a long C call), with
# their workers. Kept here, never destroyed: Qt aborts the process when a running QThread is destroyed,
# which would happen as soon as the Bridge (a child of the window) went. ``app.main`` then ends the
# process with ``os._exit`` once history is closed.
_ABANDONED: list[tuple[QThread, QObject]] = []


@dataclass
class _Job:
    """One unit of work for the worker (mutable only in its cancel flag)."""

    job_id: int
    kind: str  # "load" | "generate" | "task"
    payload: Any
    cancel: threading.Event = field(default_factory=threading.Event)
    reported: bool = False  # a generation's Finished reached the GUI (the job may still be winding down)


def _known_kwargs(cls: type, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Keep only the keyword arguments ``cls`` (a dataclass) accepts: the GUI's settings may be a superset."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in kwargs.items() if k in names}


def _finished_without_run(reason: str, error: str | None = None) -> Finished:
    """A Finished event for a generation that never reached the engine (cancelled in the queue, no model)."""
    return Finished(reason=reason, text="", error=error)  # type: ignore[arg-type]


class _EventBuffer:
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


class _Worker(QObject):
    """Lives on the worker thread; runs jobs one at a time. Its signals are queued to the Bridge.

    Signals:
        job_finished(int): a job's id, emitted once it has ended, whatever the outcome.
        events_pending(): a Started or Finished event was buffered; drain the buffer now.
        load_progressed(str, float): stage name and fraction of the model load done.
        model_loaded(object): the new model's ModelFacts.
        load_failed(str): one-line reason a load failed (the previous model, if any, stays loaded).
        task_finished(int, object): task id and fn's return value.
        task_failed(int, str): task id and the one-line error.
    """

    job_finished = Signal(int)
    events_pending = Signal()
    load_progressed = Signal(str, float)
    model_loaded = Signal(object)
    load_failed = Signal(str)
    task_finished = Signal(int, object)
    task_failed = Signal(int, str)

    def __init__(self, buffer: _EventBuffer) -> None:
        super().__init__()
        self._buffer = buffer
        self._loaded: LoadedModel | None = None
        self._sessions: dict[int, Any] = {}

    @Slot(object)
    def on_job_requested(self, job: _Job) -> None:
        try:
            if job.kind == "load":
                self._load(job)
            elif job.kind == "generate":
                self._generate(job)
            else:
                self._task(job)
        except BaseException:  # a bug must not kill the worker thread: log it, report it, keep serving
            log.exception("worker job %s (%s) crashed", job.job_id, job.kind)
        finally:
            self.job_finished.emit(job.job_id)

    def release(self) -> None:
        """Drop the model and sessions (called after the thread stopped, so no job is running)."""
        self._sessions.clear()
        self._loaded = None

    def _load(self, job: _Job) -> None:
        from engine.models.loader import LoadProgress, load_model  # heavy: torch loads on first use
        from engine.inputs import LoadSpec

        def progress(p: LoadProgress) -> None:
            self.load_progressed.emit(p.stage, float(p.fraction))

        try:
            if job.cancel.is_set():
                raise EngineError("model load cancelled")
            spec = LoadSpec(**_known_kwargs(LoadSpec, job.payload))
            loaded = load_model(spec, progress=progress, cancel=job.cancel)
        except EngineError as exc:
            self.load_failed.emit(one_line(exc))
            return
        except Exception as exc:  # noqa: BLE001 (engine edge missed a conversion: still one line for the user)
            log.error("unexpected load failure:\n%s", traceback.format_exc())
            self.load_failed.emit(f"could not load the model: {one_line(exc, name_type=True)}")
            return
        # Only now is the previous model dropped: a failed load keeps the user's working model.
        self._sessions.clear()
        self._loaded = loaded
        self.model_loaded.emit(loaded.facts)

    def _generate(self, job: _Job) -> None:
        conversation_id, messages, sampling_kwargs = job.payload
        if job.cancel.is_set():
            self._finish(_finished_without_run("cancelled"))
            return
        if self._loaded is None:
            self._finish(_finished_without_run("error", "no model loaded: choose a model and press Load"))
            return
        from engine.inputs import SamplingConfig
        from engine.generate.session import ChatSession

        try:
            session = self._sessions.get(conversation_id)
            if session is None:
                # One torch thread fewer while decoding leaves a core to the GUI thread that renders the
                # stream (see ChatSession: decode is memory-bound, so it costs nothing measurable).
                session = self._sessions[conversation_id] = ChatSession(self._loaded, reserve_threads=1)
            config = SamplingConfig(**_known_kwargs(SamplingConfig, sampling_kwargs))
            events = session.generate([Message(role, text) for role, text in messages], config, cancel=job.cancel)
            finished = False
            for event in events:
                self._buffer.put(event)
                if isinstance(event, (Started, Finished)):
                    self.events_pending.emit()
                    finished = finished or isinstance(event, Finished)
            if not finished:  # the contract says Finished always comes; never leave the GUI waiting
                self._finish(_finished_without_run("error", "generation ended without a finish event"))
        except EngineError as exc:
            self._finish(_finished_without_run("error", one_line(exc)))
        except Exception as exc:  # noqa: BLE001
            log.error("unexpected generation failure:\n%s", traceback.format_exc())
            self._finish(_finished_without_run("error", f"generation failed: {one_line(exc, name_type=True)}"))

    def _finish(self, event: Finished) -> None:
        self._buffer.put(event)
        self.events_pending.emit()

    def _task(self, job: _Job) -> None:
        fn: TaskFn = job.payload
        if job.cancel.is_set():
            self.task_failed.emit(job.job_id, "cancelled")
            return
        if self._loaded is None:
            self.task_failed.emit(job.job_id, "no model loaded: choose a model and press Load")
            return
        try:
            result = fn(self._loaded, job.cancel)
        except EngineError as exc:
            self.task_failed.emit(job.job_id, one_line(exc))
        except Exception as exc:  # noqa: BLE001
            log.error("task %s failed:\n%s", job.job_id, traceback.format_exc())
            self.task_failed.emit(job.job_id, one_line(exc, name_type=True))
        else:
            self.task_finished.emit(job.job_id, result)


class Bridge(QObject):
    """The GUI's handle on the engine. Lives in the GUI thread; owns one QThread and its worker.

    Signals:
        load_progressed(str, float): a load reached a stage (name, fraction 0..1 of the whole load).
        model_loaded(object): a load succeeded; the argument is the model's ``ModelFacts``.
        load_failed(str): a load failed or was cancelled; one line for the user. A previously loaded
            model stays loaded.
        generation_started(object): the engine's ``Started`` event for a reply.
        prefill_progressed(int, int): prompt tokens computed so far and in all (once per prefill chunk),
            so a long prompt shows progress before its first token.
        tokens_received(str, list): text generated since the last flush and the ``Token`` events it
            came from (for the token inspector); at most ~30 per second.
        stats_updated(object): the latest ``Metrics`` snapshot while a reply streams (coalesced).
        generation_finished(object): the ``Finished`` event; always exactly once per accepted
            ``generate()``, after every ``tokens_received`` of that reply.
        task_finished(int, object): a ``submit_task`` id and the function's result.
        task_failed(int, str): a ``submit_task`` id and a one-line error.
        busy_changed(bool): the worker became busy (a job is running or queued) or idle.
    """

    load_progressed = Signal(str, float)
    model_loaded = Signal(object)
    load_failed = Signal(str)
    generation_started = Signal(object)
    prefill_progressed = Signal(int, int)
    tokens_received = Signal(str, list)
    stats_updated = Signal(object)
    generation_finished = Signal(object)
    task_finished = Signal(int, object)
    task_failed = Signal(int, str)
    busy_changed = Signal(bool)

    _job_requested = Signal(object)  # internal: queued to the worker thread

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._ids = itertools.count(1)
        self._jobs: dict[int, _Job] = {}  # not yet finished, in submission order
        self._buffer = _EventBuffer()
        self._pending: collections.deque[object] = collections.deque()  # taken from the buffer, not yet emitted
        self._finishes = 0  # Finished events emitted so far
        self._thread = QThread()
        self._thread.setObjectName("miaohui-engine")
        self._worker = _Worker(self._buffer)
        self._worker.moveToThread(self._thread)
        self._job_requested.connect(self._worker.on_job_requested)
        self._worker.job_finished.connect(self.on_worker_job_finished)
        self._worker.events_pending.connect(self.on_worker_events_pending)
        self._worker.load_progressed.connect(self.load_progressed)
        self._worker.model_loaded.connect(self.on_worker_model_loaded)
        self._worker.load_failed.connect(self.load_failed)
        self._worker.task_finished.connect(self.task_finished)
        self._worker.task_failed.connect(self.task_failed)
        self._flush_timer = QTimer(self)
        self._flush_timer.setInterval(FLUSH_INTERVAL_MS)
        self._flush_timer.timeout.connect(self.on_flush_timer_expired)
        self._facts: object | None = None
        self._closed = False
        self._thread.start()

    # -- public API ---------------------------------------------------------------------------------
    @property
    def facts(self) -> object | None:
        """ModelFacts of the loaded model, or None."""
        return self._facts

    def is_busy(self) -> bool:
        return bool(self._jobs)

    def is_generating(self) -> bool:
        """True from an accepted ``generate()`` until its ``generation_finished`` was emitted."""
        return any(job.kind == "generate" and not job.reported for job in self._jobs.values())

    def load(self, spec_kwargs: dict) -> int:
        """Load a model (``LoadSpec`` keyword arguments). Cancels a running reply first: a new model
        drops every conversation's session. Returns the job id (0 after shutdown)."""
        for job in self._jobs.values():
            if job.kind == "generate":
                job.cancel.set()
        return self._submit("load", dict(spec_kwargs))

    def generate(self, conversation_id: int, messages: list[tuple[str, str]], sampling_kwargs: dict) -> bool:
        """Stream a reply to ``messages`` ((role, text) pairs, the whole conversation) in the session
        kept for ``conversation_id``. Refused (returns False) while another reply is running or queued,
        so a Send pressed many times yields one reply."""
        if self.is_generating() or self._closed:
            return False
        self._submit("generate", (conversation_id, list(messages), dict(sampling_kwargs)))
        return True

    def submit_task(self, fn: TaskFn) -> int:
        """Run ``fn(loaded_model, cancel_event)`` on the worker thread; the result comes by
        ``task_finished`` (or ``task_failed``) with the returned id."""
        return self._submit("task", fn)

    def stop(self) -> None:
        """Cancel every job not yet finished; safe to call any number of times, from the GUI thread."""
        for job in self._jobs.values():
            job.cancel.set()

    def shutdown(self, timeout_ms: int = 5000) -> bool:
        """Cancel everything, stop the thread and wait for it at most ``timeout_ms``. True if it ended.

        Truthful on every call: a repeated call waits no more but reports whether the thread has ended
        by now (the caller decides from it whether the process may exit normally, see ``app.main``).
        A thread that did not end is kept referenced for the rest of the process (``_ABANDONED``):
        destroying a running QThread aborts the process.
        """
        if self._closed:
            return not self._thread.isRunning()
        self._closed = True
        self.stop()
        self._thread.quit()
        finished = self._thread.wait(timeout_ms)
        self._flush_timer.stop()
        if finished:
            self._worker.release()
        else:
            log.error("engine thread did not stop within %d ms", timeout_ms)
            _ABANDONED.append((self._thread, self._worker))
        return finished

    def flush_pending(self) -> None:
        """Deliver buffered events now (after ``shutdown``, so a closing window still sees its Finished)."""
        self._drain()

    # -- internals ----------------------------------------------------------------------------------
    def _submit(self, kind: str, payload: Any) -> int:
        if self._closed:
            return 0
        job = _Job(next(self._ids), kind, payload)
        was_busy = self.is_busy()
        self._jobs[job.job_id] = job
        if kind == "generate":
            self._flush_timer.start()
        self._job_requested.emit(job)
        if not was_busy:
            self.busy_changed.emit(True)
        return job.job_id

    @Slot(object)
    def on_worker_model_loaded(self, facts: object) -> None:
        self._facts = facts
        self.model_loaded.emit(facts)

    @Slot(int)
    def on_worker_job_finished(self, job_id: int) -> None:
        job = self._jobs.pop(job_id, None)
        if job is not None and job.kind == "generate":
            self._drain()  # everything the job buffered reaches the GUI before it is reported idle
            if not self.is_generating():
                self._flush_timer.stop()
        if not self._jobs:
            self.busy_changed.emit(False)

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
            elif isinstance(event, PrefillProgress):
                self.prefill_progressed.emit(event.done, event.total)
            elif isinstance(event, Finished):
                for job in self._jobs.values():  # jobs run in order: the first unreported one just ended
                    if job.kind == "generate" and not job.reported:
                        job.reported = True
                        break
                self._finishes += 1
                self.generation_finished.emit(event)
        emit_stream()
