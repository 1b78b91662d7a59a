"""The engine core's own thread and its one job queue: ``EngineThread``.

The rule of the core (``engine.core.core``) is that one thread touches the loaded models; this is that thread, for
every client: ``engine serve`` (through ``engine.serve.hosting``) and the window (``app.runtime.bridge``), whose own
server posts its requests to the same queue. ``post(job)`` queues a job (``engine.core.jobs``) from any thread and
returns its ``QueuedJob`` (cancel it with its ``cancel``); ``submit(queued)`` queues a job its client numbered (the
window keeps its own ids); ``call(fn)`` runs ``fn()`` there and returns what it returned; ``run_job(job)`` runs a job
there and returns once it ended. Jobs run one at a time, first in first out, through ``EngineCore.run``; ``on_done``
is told after each, whatever its outcome, and ``jobs_run`` counts them (the server's test asserts its requests went
through this queue).

``close()`` cancels the running job, drops those still queued (never run: a queued save to disk would hold the exit;
the window's shutdown saves its sessions itself), stops the thread and waits for it, bounded; ``call`` then raises
``WorkerClosedError``. Owns the thread and the queue; not the jobs' meaning (``engine.core.core``). Imports no Qt and
no torch.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
from typing import Callable, TypeVar

from engine.core.core import EngineCore
from engine.core.jobs import Job, QueuedJob, ServeJob, WorkerClosedError

T = TypeVar("T")
log = logging.getLogger(__name__)


class EngineThread:
    """One daemon thread running ``core``'s jobs in the order they were posted."""

    def __init__(self, core: EngineCore, name: str = "miaohui-engine",
                 on_done: Callable[[QueuedJob], None] | None = None) -> None:
        self.core = core
        self._on_done = on_done  # told on the engine thread after each job, whatever its outcome
        self._queue: queue.SimpleQueue[QueuedJob | None] = queue.SimpleQueue()
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._closed = False
        self._waiting: list[QueuedJob] = []
        self._running: QueuedJob | None = None
        self.jobs_run = 0  # jobs this thread has run (read from any thread: an int, written here only)
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def start(self) -> "EngineThread":
        self._thread.start()
        return self

    @property
    def ident(self) -> int | None:
        return self._thread.ident

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def post(self, job: Job) -> QueuedJob | None:
        """Queue ``job``; None once closing (it will never run)."""
        queued = QueuedJob(next(self._ids), job)
        return queued if self.submit(queued) else None

    def submit(self, queued: QueuedJob) -> bool:
        """Queue a job its client numbered and may cancel; False once closing (it will never run)."""
        with self._lock:
            if self._closed:
                return False
            self._waiting.append(queued)
            self._queue.put(queued)
        return True

    def post_serve(self, job: ServeJob) -> bool:
        """``engine.core.handoff.Handoff``'s ``post``: False once closing."""
        return self.post(job) is not None

    def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn()`` on the engine thread, after what is queued, and return its result (raise what it raised;
        ``WorkerClosedError`` when the thread is closing and it never ran)."""
        if threading.current_thread() is self._thread:  # already here: queueing would wait for itself
            return fn()
        done = threading.Event()
        outcome: list[object] = []

        def run(_loaded: object) -> None:
            try:
                outcome.append((True, fn()))
            except BaseException as exc:  # noqa: BLE001  (raised again on the caller's thread)
                outcome.append((False, exc))
            finally:
                done.set()

        queued = self.post(ServeJob(run))
        if queued is None:
            raise WorkerClosedError("the engine is stopping")
        while not done.wait(0.5):
            if not self._thread.is_alive():  # closed with this call still queued: it never ran
                raise WorkerClosedError("the engine stopped")
        ok, value = outcome[0]  # type: ignore[misc]
        if not ok:
            raise value  # type: ignore[misc]
        return value  # type: ignore[return-value]

    def run_job(self, job: Job) -> None:
        """Run ``job`` on the engine thread (its outcome goes to the core's ``Reports``) and return once it ended."""
        if self.post(job) is None:
            raise WorkerClosedError("the engine is stopping")
        self.call(lambda: None)  # first in, first out: this returns once the job before it has run

    def close(self, timeout: float = 30.0) -> bool:
        """Cancel the running job, drop those still queued (flagged cancelled, never run), queue nothing more, and
        wait (bounded) for the thread: a cancelled load stops at its next check. True once the thread has ended."""
        with self._lock:
            self._closed = True
            for queued in ([self._running] if self._running is not None else []) + self._waiting:
                queued.cancel.set()
        self._queue.put(None)
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)
        return not self._thread.is_alive()

    def _loop(self) -> None:
        while True:
            queued = self._queue.get()
            with self._lock:
                if queued is None or self._closed:
                    return
                self._waiting.remove(queued)
                self._running = queued
            try:
                self.core.run(queued)  # logs a job's crash itself
            finally:
                try:
                    if self._on_done is not None:
                        self._on_done(queued)  # whatever the outcome: the client's bookkeeping waits for it
                except BaseException:  # noqa: BLE001  (a client's listener failed: the engine thread keeps serving)
                    log.exception("engine job %s's end could not be reported", queued.job_id)
            with self._lock:
                self._running = None
                self.jobs_run += 1
