"""A first-in first-out queue of ``Job`` objects served one at a time by the one thread that owns the model.

``Worker(loaded).start()`` starts the thread; ``submit(job)`` queues a request (``QueueFullError`` with a
retry estimate when ``max_queue`` requests already wait). For each job the thread routes the conversation
to a ``ChatSession`` of the ``SessionPool`` (KV reuse across turns), fixes the reply budget, generates (a chat
through the model's template, or a job's ``text`` continued raw with ``ChatSession.complete``), and calls
``job.emit`` with, in order:

- ``Failed(error)`` alone when the request cannot start (its conversation does not fit the context, its
  template fails): nothing was generated;
- or the engine's ``Started``, then a ``Piece`` per generated token (the text the client may see now,
  stop strings applied, and the token with its probabilities), and always one ``Reply`` last.

``emit`` is called on the thread that serves the job and must not block for long: the asyncio side hands each
event to its loop (``call_soon_threadsafe``); an in-process consumer (a test) may do what it likes, and holds
the worker while it does. A job whose ``cancel`` is set stops within one decode step (the session polls it);
one cancelled while still queued is skipped (a lone ``Reply("cancelled")``). Stop strings set ``cancel`` too:
the generation ends on the token that completed one. Prometheus figures are recorded here (``ServerMetrics``),
and the last ``RECENT`` requests are kept as ``Record`` objects (``served``/``recent``: a status line, tests).

Which thread serves: everything that touches the model (tokenizer, sessions, KV caches) is one call per job,
``_serve(job)``, and the ``executor`` makes it. By default it is made on the worker's own thread, which then
owns the model. A program whose model already has an owning thread (the engine core's: the window's engine thread,
and ``engine serve``'s own ``EngineThread``, see ``engine.core.handoff`` and ``engine.serve.hosting``) passes an
executor that runs the call there and returns its ``Record``: this thread then
only keeps the queue, and API requests wait in line with the program's own work instead of racing it for the
model. The calls never overlap. An executor that can no longer run a call (its thread is stopping) raises
``WorkerClosedError`` instead: the job is answered as cancelled, nothing generated.

``parallel`` > 1 (``engine serve --parallel N``): up to N jobs run at once, each ``_serve`` on a thread of its own
and a session of its own, their forward passes batched by one ``engine.serve.batching.BatchEngine`` thread (one
decode forward per step for all of them, prefill in chunks between); an ``executor`` then makes each step's forwards
(the window's engine thread), not whole jobs. A model the batched step cannot run keeps one at a time, and says so
in the log and in ``miaohui:parallel_slots``. ``parallel`` = 1 is exactly the path described above. ``speculation``
(``engine serve --speculative``): every session decodes speculatively with one shared drafter, built at start (a
draft model that cannot serve is refused then); drafts verify one sequence per forward: one request at a time.

Owns the queue, the budget rule and the event translation; prefixes shared between requests and kept across
restarts are ``engine.serve.prefix``', the HTTP shapes ``engine.serve.responses``'. ``on_reply`` is told each reply's
finish reason and ``cancel_all`` stops every request at once (the window's server: its count, a model switch).
Budget rule: the reply may use the context left after the whole prompt (``max_new_tokens`` lowers it). A
conversation that does not fit whole is refused (``ContextTooLongError``, a 400) rather than silently
trimmed as the window trims it: an API client manages its own history.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import queue
import threading
import time
import weakref
from collections import deque
from functools import partial
from typing import Any, Callable

from engine.constrain.matcher import TokenConstraint
from engine.core.models import ModelRecord
from engine.errors import CancelledError, ContextTooLongError, EngineError
from engine.events import Finished, Message, Metrics, Started, Stats, Token
from engine.fmt import one_line
from engine.generate.context import build_prompt, build_text_prompt
from engine.executor import prefill_forms
from engine.executor.kv_blocks import DEFAULT_BUDGET_BYTES
from engine.executor.omp_team import serial_here
from engine.generate.session import ChatSession
from engine.inputs import SamplingConfig, SpeculationConfig
from engine.serve.batching import BatchEngine, batching_refusal
from engine.serve.jobs import (Executor, Failed, Job, Piece, QueueFullError, Record, Reply,  # noqa: F401 (re-exported)
                               WorkerClosedError, _routed, run_here)
from engine.serve.metrics import ServerMetrics
from engine.serve.prefix import PrefixCache
from engine.core.sessions import DEFAULT_SIZE, SessionPool, Slot
from engine.serve.stops import StopMatcher

log = logging.getLogger(__name__)

DEFAULT_MAX_QUEUE = 32
RECENT = 256
_UNKNOWN_CONTEXT = 1 << 30  # a model that declares no context: unbounded, as ChatSession treats it
_MAX_RETRY_AFTER_S = 60


class Worker:
    """Owns ``loaded`` (an ``engine.models.model.LoadedModel``), its sessions and the request queue.

    ``executor`` runs each job's model work (default ``run_here``: on this worker's thread; see the module's
    docstring). Only plain facts of ``loaded`` are read here, on the caller's thread.
    """

    def __init__(self, loaded: Any, *, max_queue: int = DEFAULT_MAX_QUEUE, sessions: int = DEFAULT_SIZE,
                 model_id: str | None = None, metrics: ServerMetrics | None = None,
                 executor: Executor = run_here, parallel: int = 1,
                 speculation: SpeculationConfig | None = None, kv_store: Any = None,
                 prefix_cache_bytes: int = DEFAULT_BUDGET_BYTES,
                 on_reply: Callable[[str], None] | None = None,
                 models: Callable[[], tuple[ModelRecord, ...]] | None = None) -> None:
        if max_queue < 1:
            raise ValueError("max_queue must be at least 1")
        if parallel < 1:
            raise ValueError("parallel must be at least 1")
        facts = loaded.facts
        self.loaded = loaded
        self.model_id = model_id or facts.name
        self.max_queue = max_queue
        self.context_max = facts.context_length or _UNKNOWN_CONTEXT
        full_context_bytes = facts.kv_bytes_per_token * (facts.context_length or 0)
        drafter = None  # built first: a draft model that cannot serve is then the only line said
        if speculation is not None:
            from engine.speculate.drafters import build_drafter  # lazy, as ChatSession imports it

            drafter = build_drafter(loaded, speculation)
        self._engine: BatchEngine | None = None
        self.batching_refused: str | None = None  # why ``parallel`` > 1 was asked for and not granted
        if parallel > 1:
            self.batching_refused = ("speculative decoding verifies one sequence's drafts per forward"
                                     if speculation is not None else batching_refusal(loaded))
            if self.batching_refused is None:  # an executor makes each step's forwards on its thread
                self._engine = BatchEngine(parallel, executor=None if executor is run_here else executor)
                self._engine.prepare(loaded)
            else:
                log.warning("serving one request at a time, not %d: %s", parallel, self.batching_refused)
        self.parallel = parallel if self._engine is not None else 1
        sessions = max(sessions, self.parallel)  # each request in flight generates with a session of its own
        self.metrics = metrics or ServerMetrics(self.model_id, full_context_bytes * sessions)
        self.metrics.parallel.set(self.parallel)
        # /metrics says what is in memory: the window's core (its chat model and an embedder), else this one model.
        own = (ModelRecord(self.model_id, "chat", facts.weights_bytes),)
        self.metrics.loaded_models = models or (lambda: own)
        self.metrics.prefill_form = lambda: getattr(prefill_forms.chosen(loaded.model), "form", None)
        engine = self._engine
        self._pool = SessionPool((lambda: ChatSession(loaded, runner_factory=engine.runner_factory)) if engine
                                 else (lambda: ChatSession(loaded, speculation=speculation, drafter=drafter)), sessions)
        self.prefix = PrefixCache(self._pool, self.metrics, kv_store, prefix_cache_bytes)
        self._free = threading.BoundedSemaphore(self.parallel)  # places for requests in flight
        self._routed_slot = threading.local()  # the slot the job on this thread routed to (released after it)
        self._eos = frozenset(loaded.eos_token_ids)
        self._executor = executor
        self._on_reply = on_reply  # told each reply's finish_reason (the window's "n requests served")
        self._submitted: weakref.WeakSet[Job] = weakref.WeakSet()  # for cancel_all
        self._queue: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._waiting = 0
        self._active: set[Job] = set()  # running now (at most ``parallel``)
        self._closed = False
        self._service_s: float | None = None  # moving average of a request's time on the worker
        self.served = 0
        self.recent: deque[Record] = deque(maxlen=RECENT)
        self._thread = threading.Thread(target=self._loop, name="miaohui-serve-worker", daemon=True)

    # -- the asyncio side (any thread) ----------------------------------------------------------
    def start(self) -> "Worker":
        if self._engine is not None:
            self._engine.start()
        self._thread.start()
        return self

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and not self._closed

    @property
    def waiting(self) -> int:
        with self._lock:
            return self._waiting

    @property
    def running(self) -> bool:
        with self._lock:
            return bool(self._active)

    def submit(self, job: Job) -> None:
        """Queue ``job``; ``QueueFullError`` when ``max_queue`` jobs already wait, ``WorkerClosedError`` after close."""
        with self._lock:
            if self._closed:
                raise WorkerClosedError("the server is shutting down")
            if self._waiting >= self.max_queue:
                raise QueueFullError(self._retry_after())
            self._waiting += 1
            self._queue.put(job)
            self._submitted.add(job)
            self.metrics.queued(self._waiting)

    def cancel_all(self) -> None:
        """Every request queued or running stops within a step (answered as cancelled)."""
        for job in list(self._submitted):
            job.cancel.set()

    def close(self, timeout: float = 30.0) -> None:
        """Cancel the running and the waiting jobs, stop the thread and wait for it (bounded).

        With an executor, the running job ends when the executor returns: within a decode step of its
        cancel once it runs, at once if the executor gives up on it (``WorkerClosedError``)."""
        with self._lock:
            self._closed = True
            for job in self._active:
                job.cancel.set()
        self._queue.put(None)
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)
        if self._engine is not None:
            self._engine.close()

    def _retry_after(self) -> int:
        """Seconds until a place in the queue is likely free: the queue's length times a request's usual time."""
        if self._service_s is None:
            return 1
        return max(1, min(_MAX_RETRY_AFTER_S, math.ceil(self._service_s * (self._waiting + 1))))

    # -- the worker thread ----------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                break
            self._free.acquire()  # a place in flight: at once with parallel 1, the request before has ended
            if self._engine is None:
                self._run(job)
            else:
                threading.Thread(target=self._run_beside, args=(job,), name="miaohui-serve-request",
                                 daemon=True).start()
        for _ in range(self.parallel):  # the requests still in flight (cancelled by close) end first
            self._free.acquire(timeout=30)
        if self._executor is run_here:  # this thread owns the sessions now (an executor's thread may be gone)
            self.prefix.save_all()
        # Closed: whoever still waits hears that their request was cancelled.
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                self._emit(job, Reply("cancelled", "", Metrics()))

    def _run_beside(self, job: Job) -> None:
        """A request's own thread beside the batch's step thread (``parallel`` > 1): its torch operations (sampling
        over the vocabulary, mostly) run on one core, so they never bring OpenMP teams onto the cores the batched
        step runs on (engine/executor/omp_team.py says what that cost)."""
        serial_here()
        self._run(job)

    def _run(self, job: Job) -> None:
        """Serve one job, with its bookkeeping: on the worker's thread, or with ``parallel`` on a thread of its own."""
        try:
            with self._lock:
                self._waiting -= 1
                self._active.add(job)
                if self._closed:
                    job.cancel.set()
                waiting = self._waiting
            t_start = time.perf_counter()
            self.metrics.started(waiting, t_start - job.t_arrival)
            try:
                record = self._serve(job) if self._engine is not None else self._executor(partial(self._serve, job))
            except WorkerClosedError:  # the executor's thread is stopping: the job never reached the model
                self._emit(job, Reply("cancelled", "", Metrics()))
                record = Record(job.id, "cancelled", 0, 0, 0)
            except Exception as exc:  # noqa: BLE001  (a bug must not kill the thread that serves everyone)
                self._emit(job, Reply("error", "", Metrics(), f"internal error: {one_line(exc, name_type=True)}"))
                record = Record(job.id, "error", 0, 0, 0)
            finally:
                if self._engine is not None:
                    self._engine.leave()  # the next step no longer waits for this request
            took = time.perf_counter() - t_start
            self.metrics.finished(record.finish_reason, time.perf_counter() - job.t_arrival)
            with self._lock:
                self._active.discard(job)
                self.served += 1
                self.recent.append(record)
                if record.finish_reason != "rejected":
                    took /= self.parallel  # with N in flight, a place frees N times as often
                    self._service_s = took if self._service_s is None else 0.8 * self._service_s + 0.2 * took
        finally:
            self._free.release()

    def _emit(self, job: Job, event: Any) -> None:
        if job.gone:
            return
        try:
            job.emit(event)
        except Exception:  # noqa: BLE001  (the listener is gone, e.g. its event loop closed): stop generating
            job.gone = True
            job.cancel.set()
            return
        if isinstance(event, Reply) and self._on_reply is not None:  # after: a client that left was not served
            try:
                self._on_reply(event.finish_reason)
            except RuntimeError:  # whoever counted is gone (the window's QObject deleted): nobody counts any more
                pass

    def _budget(self, job: Job) -> tuple[SamplingConfig, tuple[int, ...]]:
        """The job's config with its reply budget (what the context has left after the whole prompt), and the prompt."""
        prompt = build_prompt(self.loaded.tokenizer, job.messages, self.context_max, 1, job.cancel,
                              job.template_kwargs, tools=job.tools)
        if prompt.dropped_turns:
            raise ContextTooLongError(f"the conversation does not fit in this model's context of {self.context_max} "
                                      "tokens: drop its oldest turns or shorten it")
        room = self.context_max - len(prompt.ids)
        return dataclasses.replace(job.config, max_new_tokens=max(1, min(job.config.max_new_tokens, room))), prompt.ids

    def _serve(self, job: Job) -> Record:
        try:
            return self._serve_job(job)
        finally:
            slot = getattr(self._routed_slot, "slot", None)
            self._routed_slot.slot = None
            if slot is not None:
                self._pool.release(slot)  # free for the next request, however this one ended

    def _route(self, messages: tuple[Message, ...], scope: str) -> Slot:
        slot = self._pool.route(messages, scope)
        self._routed_slot.slot = slot
        return slot

    def _serve_job(self, job: Job) -> Record:
        if job.cancel.is_set():
            self._emit(job, Reply("cancelled", "", Metrics()))
            return Record(job.id, "cancelled", 0, 0, 0)
        try:
            if job.text is None:
                config, ids = self._budget(job)
                slot = self._route(job.messages, job.scope)
                self.prefix.prepare(slot, ids)
                constraint = None
                if job.constraint is not None:
                    constraint = TokenConstraint(job.constraint, self.loaded.tokenizer, self.loaded.eos_token_ids)
                events = slot.session.generate(job.messages, config, job.cancel, constraint=constraint,
                                               template_kwargs=job.template_kwargs, tools=job.tools)
            else:  # complete() fits the budget to the room itself and refuses a prompt that leaves none
                config = job.config
                slot = self._route(_routed(job), job.scope)
                self.prefix.prepare(slot, build_text_prompt(self.loaded.tokenizer, job.text, self.context_max, 1).ids)
                events = slot.session.complete(job.text, config, job.cancel)
        except CancelledError:
            self._emit(job, Reply("cancelled", "", Metrics()))
            return Record(job.id, "cancelled", 0, 0, 0)
        except EngineError as exc:
            self._emit(job, Failed(exc))
            return Record(job.id, "rejected", 0, 0, 0)
        return self._generate(job, config, slot, events)

    def _generate(self, job: Job, config: SamplingConfig, slot: Slot, events: Any) -> Record:
        matcher = StopMatcher(job.stop)
        streamed: list[str] = []
        previous_t: float | None = None
        finished: Finished | None = None
        for event in events:
            if isinstance(event, Token):
                self.metrics.token(None if previous_t is None else event.t - previous_t,
                                   event.t - job.t_arrival if previous_t is None else None)
                previous_t = event.t
                streamed.append(event.text)
                if event.token_id in self._eos and not event.text:
                    continue  # the end token: counted, not shown
                shown = matcher.push(event.text)
                self._emit(job, Piece(shown, event, self._token_text(event) if config.top_logprobs else "",
                                      event.reasoning))
                if matcher.matched is not None:
                    job.cancel.set()  # seen before the next decode step: nothing more is computed
            elif isinstance(event, Started):
                self.metrics.prompt(event.prompt_tokens, event.reused_tokens)
                self._emit(job, event)
            elif isinstance(event, Stats):
                slot.kv_bytes = event.metrics.kv_cache_bytes
                self.metrics.kv(self._pool.kv_bytes)
            elif isinstance(event, Finished):
                finished = event
        if finished is None:  # cannot happen by the session's contract
            finished = Finished("error", "", Metrics(), "generation ended without a result")
        tail, reason = reply_end(matcher, streamed, finished)
        if tail:
            self._emit(job, Piece(tail))
        if reason == "error":
            self._pool.forget(slot)
        else:
            self.prefix.finished(slot)  # the reply's blocks too, for a next turn routed elsewhere
            slot.kv_bytes = finished.metrics.kv_cache_bytes
            self._pool.remember(slot, _routed(job), matcher.text if reason in ("stop", "length") else None)
        self._routed_slot.slot = None  # remember/forget freed it: another request may have it already
        self.metrics.kv(self._pool.kv_bytes)
        m = finished.metrics
        self.metrics.speculated(m.drafts, m.draft_tokens, m.accepted_tokens)
        self._emit(job, Reply(reason, matcher.text, m, finished.error, finished.reasoning))
        return Record(job.id, reason, m.prompt_tokens, m.reused_tokens, m.generated_tokens)

    def _token_text(self, token: Token) -> str:
        for candidate in token.top:
            if candidate.token_id == token.token_id:
                return candidate.text
        return self.loaded.tokenizer.decode([token.token_id], skip_special_tokens=False,
                                            clean_up_tokenization_spaces=False)


def reply_end(matcher: StopMatcher, streamed: list[str], finished: Finished) -> tuple[str, str]:
    """What a reply's end adds: the text the decoder held back until the very end (an incomplete character), passed
    through the stop matcher, and the API's finish reason (a matched stop string is "stop"). Both workers end a reply
    this way (``Worker`` and ``engine.serve.vision_worker.VisionWorker``)."""
    tail = ""
    joined = "".join(streamed)
    if matcher.matched is None and finished.text.startswith(joined):
        tail = matcher.push(finished.text[len(joined):]) + matcher.flush()
    reason = {"eos": "stop", "length": "length", "cancelled": "cancelled"}.get(finished.reason, "error")
    return tail, "stop" if matcher.matched is not None else reason
