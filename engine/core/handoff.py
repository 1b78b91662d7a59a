"""An API server's model work handed to the engine core's thread: ``Handoff``.

The rule is the core's: one thread owns the model, the engine thread (``engine.core.core``; in the window it also runs
the chat's replies, loads and lab tasks, one at a time; for ``engine serve`` it is the core's own
``engine.core.engine_thread.EngineThread``, ``engine.serve.hosting``). The server's queue
(``engine.serve.worker.Worker``) is given a ``Handoff`` as its executor, and the handoff posts each piece of model work to the core's queue as a ``ServeJob``
and waits for it:

- with ``parallel`` > 1 (the window's Settings: 4 by default, as ``engine serve --parallel``) each request is driven
  by a thread of its own (its template, tokens, sampling and stop strings), and the
  ``engine.serve.batching.BatchEngine`` hands each *step* here: one forward with every running request's next token, plus at most one prefill chunk. So
  the requests decode together, and a chat reply asked for meanwhile waits for at most the step in progress; while
  it runs, the server's requests wait for it (their next step comes after);
- with one at a time (``parallel`` 1, or a model the batched step cannot run) each request's whole model work is one
  hand-over, behind whatever the engine thread is doing.

``close`` stops handing over (``WorkerClosedError``); with ``abandon`` it also gives up on work posted but not
started (the engine thread is busy with a chat reply or a load), so stopping never waits for one. A piece of work
made for one model never runs on another: the core's model changed, it raises ``WorkerClosedError``.

Owns the hand-over; not the socket or the toggle (``app.runtime.api_serving``, ``engine.serve.hosting``), not the
HTTP behaviour (``engine.serve.app``), not the batching (``engine.serve.batching``). Imports no Qt.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from engine.core.jobs import ServeJob, WorkerClosedError


class Handoff:
    """The executor of one model's server queue: ``handoff(fn)`` runs ``fn()`` on the engine thread and returns what
    it returned (raises what it raised). Called from the queue's threads; ``model`` is set on the engine thread.
    ``post(job)`` puts a ``ServeJob`` on the core's queue (the window's ``Bridge.post_serve_job``); False: the core is
    closing and it will never run."""

    def __init__(self, post: Callable[[ServeJob], bool]) -> None:
        self._post = post
        self.model: Any = None  # the model this queue was made for: work for it never runs on another
        self._lock = threading.Lock()
        self._closed = False
        self._pending: set[_Call] = set()

    def __call__(self, fn: Callable[[], Any]) -> Any:
        call = _Call(fn, self.model, self._lock)
        with self._lock:
            if self._closed:
                raise WorkerClosedError("the window stopped serving")
            self._pending.add(call)
        try:
            if not self._post(ServeJob(call.run)):
                raise WorkerClosedError("the window is closing")
            call.done.wait()  # close(abandon=True) sets it for a call that never started
        finally:
            with self._lock:
                self._pending.discard(call)
        if call.error is not None:
            raise call.error
        return call.result

    def close(self, abandon: bool = True) -> None:
        """Hand nothing more over; ``abandon``: give up on what was posted and has not started."""
        with self._lock:
            self._closed = True
            if abandon:
                for call in self._pending:
                    call.abandon()


class _Call:
    """One piece of model work, posted to the engine thread: run there once, or abandoned before it starts."""

    def __init__(self, fn: Callable[[], Any], model: Any, lock: threading.Lock) -> None:
        self._fn, self._model, self._lock = fn, model, lock
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None
        self._state = "posted"  # posted -> running | abandoned

    def run(self, loaded: Any) -> None:  # on the engine thread (engine.core.jobs.ServeJob)
        with self._lock:
            if self._state == "abandoned":
                return
            self._state = "running"
        try:
            if loaded is not self._model:  # the window loaded another model since: this queue is being retired
                raise WorkerClosedError("the window's model changed")
            self.result = self._fn()
        except Exception as exc:  # noqa: BLE001  (handed to the queue's thread, which answers the client)
            self.error = exc
        finally:
            self.done.set()

    def abandon(self) -> None:  # with the lock held
        if self._state == "posted":
            self._state = "abandoned"
            self.error = WorkerClosedError("the window stopped serving")
            self.done.set()
