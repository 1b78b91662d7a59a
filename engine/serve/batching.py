"""Continuous batching for ``engine serve --parallel N``: up to N requests decode together, one forward per step.

Each running request keeps today's whole path: the worker's ``_serve`` on a thread of its own, a ``ChatSession``
of the pool (its KV reuse, template, sampler, stop strings, reasoning split, constraint, cancel and metrics),
and its own ``FastRunner`` cache. Only the session's runner is different: a ``SlotRunner``, whose ``decode`` and
``prefill`` chunks are not run where they are called but handed to the ``BatchEngine``'s one thread, the only
one that runs forward passes. Each step it takes what the sequences have asked for - every pending decode
in one ``engine.executor.batched.decode_batch`` forward, plus at most one prefill chunk (at most
``prefill_chunk`` tokens, of the request that began prefilling first) - runs it and wakes the askers.
So a request that arrives joins at the next step, a long prompt is cut into chunks that alternate with the
running decodes, and a request that ends (length, end token, stop string, a client that left) frees its place at
once: its runner leaves, the next step is the others'.

Prompts first, within a bound: while a prefill chunk is pending, a step runs it alone and the decodes wait, until
the oldest of them has waited ``prefill_first_s`` (1 s); then they run with the next chunk. When many requests
arrive together, the last one's first token then waits for the prompts before it, not also for a decode step
after each of them (a step of 8 sequences costs about as much as a 132-token chunk on a 2-core CPU), and the
decodes start as one batch of all instead of batches of 1, 2, 3 ... (more tokens per forward); a long prompt still
cannot freeze the others for more than about a second and a chunk.

A step waits (at most ``GATHER_S``) until every sequence in flight has asked, so those that are only sampling
their next token are in the same forward; one that is slower simply takes the step after. A sequence's rows
depend on nothing but its own cache, so who else is in a step never changes its tokens (up to the matrix
kernels' rounding, see ``engine.executor.batched``).

A program whose model already has an owning thread (the window's engine thread, ``engine.core.handoff``)
passes an ``executor``: each step's forwards are then made by ``executor(step)`` on that thread, while this one only
gathers and schedules; an executor that cannot run a step (its thread is stopping) raises, and that step's
sequences get its error.

Owns the step thread, the hand-over of forward passes and the runner wrapper; not the queue (``worker``), the
slots' KV reuse (``sessions``) or the layer math (``engine.executor.batched``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable, Iterator, Sequence

import torch

from engine.executor.batched import batchable, decode_batch, prepare
from engine.executor.runners import choose_runner, make_runner

log = logging.getLogger(__name__)

DEFAULT_PARALLEL = 4
MAX_PARALLEL = 64
# Prompt tokens per step while others decode: a chunk delays their next token by about this much. The same as
# SamplingConfig.prefill_chunk's default, so a prompt is cut where it is cut one at a time (the same rounding).
PREFILL_CHUNK = 256
GATHER_S = 0.02  # how long a step waits for the sequences still sampling (they join the next step otherwise)
PREFILL_FIRST_S = 1.0  # the longest a pending decode waits behind prefill chunks (see the module docstring)
TRACE = 4096
_DONE = object()


def _now(step: Callable[[], None]) -> None:
    """The default executor: the step's forwards run on the step thread itself."""
    step()


def batching_refusal(loaded: Any) -> str | None:
    """Why ``loaded`` cannot be batched (one line), or None when it can: the fast path's families only."""
    model = getattr(loaded, "model", None)
    if model is None:
        return "the model runs elsewhere (no local weights)"
    choice = choose_runner(model)
    if choice.runner != "fast":
        return f"the batched step needs the fast path: {choice.reason.detail if choice.reason else 'not available'}"
    return None


@dataclass(eq=False)
class _Work:
    """One forward a sequence asked for: ``decode`` (a token) or ``call`` (a prefill chunk, any lone forward)."""

    kind: str
    token: int = 0
    fn: Callable[[], Any] | None = None
    result: Any = None
    error: BaseException | None = None
    done: bool = False
    asked: float = field(default_factory=time.perf_counter)


class BatchEngine:
    """The thread that runs every forward of the batched sequences (``start()``, ``close()``)."""

    def __init__(self, max_batch: int = DEFAULT_PARALLEL, prefill_chunk: int = PREFILL_CHUNK,
                 gather_s: float = GATHER_S, prefill_first_s: float = PREFILL_FIRST_S,
                 executor: Callable[[Callable[[], None]], None] | None = None) -> None:
        if not 1 <= max_batch <= MAX_PARALLEL:
            raise ValueError(f"parallel must be between 1 and {MAX_PARALLEL}")
        self.max_batch = max_batch
        self.prefill_chunk = max(1, prefill_chunk)
        self._gather_s = gather_s
        self.prefill_first_s = prefill_first_s
        self._executor = executor  # makes each step's forwards on the model's own thread (None: here)
        self._cond = threading.Condition()
        self._members: set[SlotRunner] = set()  # sequences in a request (asking or between two asks)
        self._pending: dict[SlotRunner, _Work] = {}  # insertion order: who has waited longest
        self._closed = False
        self._tickets = 0
        self.steps = 0  # forwards of decodes run, for tests and the bench
        self.largest_batch = 0
        # The last steps as (decodes in the forward, whether a prefill chunk or lone forward ran): for tests
        self.trace: deque[tuple[int, bool]] = deque(maxlen=TRACE)
        self._thread = threading.Thread(target=self._loop, name="miaohui-serve-batch", daemon=True)

    def start(self) -> "BatchEngine":
        self._thread.start()
        return self

    def close(self, timeout: float = 10.0) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def prepare(self, loaded: Any) -> None:
        """Probe once, before serving, which projections must run row by row to stay exact (``batched.prepare``)."""
        prepare(loaded.model, self.max_batch)

    def runner_factory(self, loaded: Any, use_kv_cache: bool) -> "SlotRunner":
        """For ``ChatSession(runner_factory=...)``: the model's runner, its forwards run by this engine."""
        return SlotRunner(self, make_runner(loaded, use_kv_cache))

    def next_ticket(self) -> int:
        with self._cond:
            self._tickets += 1
            return self._tickets

    @property
    def running(self) -> int:
        """Sequences in flight."""
        with self._cond:
            return len(self._members)

    # -- the sequences' side ----------------------------------------------------------------------
    def ask(self, runner: "SlotRunner", work: _Work) -> Any:
        """Queue ``work`` for the next step and wait for it; raises what the forward raised."""
        with self._cond:
            if self._closed:
                raise RuntimeError("the server is shutting down")
            runner.owner = threading.get_ident()
            self._members.add(runner)
            self._pending[runner] = work
            self._cond.notify_all()
            while not work.done:
                self._cond.wait()
        if work.error is not None:
            raise work.error
        return work.result

    def leave(self) -> None:
        """The calling thread's request has ended: steps no longer wait for the runner it drove."""
        me = threading.get_ident()
        with self._cond:
            self._members = {r for r in self._members if r.owner != me}
            self._cond.notify_all()

    # -- the step thread ----------------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._closed or self._pending)
                if self._closed:
                    for work in self._pending.values():
                        work.error, work.done = RuntimeError("the server is shutting down"), True
                    self._pending.clear()
                    self._cond.notify_all()
                    return
                # Gather: the others are sampling their next token and ask within a millisecond or two.
                self._cond.wait_for(lambda: self._closed or all(r in self._pending for r in self._members),
                                    self._gather_s)
                taken = list(self._pending.items())
            decodes = [(r, w) for r, w in taken if w.kind == "decode"][:self.max_batch]
            # The prefill that started first goes on first (first come, first served: the least total TTFT).
            calls = [(r, w) for r, w in taken if w.kind == "call"]
            call = min(calls, key=lambda item: item[0].since) if calls else None
            if call is not None and decodes and time.perf_counter() - min(w.asked for _, w in decodes) \
                    < self.prefill_first_s:
                decodes = []  # prompts first: these decode with the next step (see the module docstring)
            ran = [*decodes, *([call] if call else [])]
            try:
                (self._executor or _now)(partial(self._step, call, decodes))
            except Exception as exc:  # noqa: BLE001  (the executor's thread is stopping: nothing ran)
                for _, work in ran:
                    work.error = exc
            self.trace.append((len(decodes), call is not None))
            with self._cond:
                for runner, work in ran:
                    work.done = True
                    if self._pending.get(runner) is work:
                        del self._pending[runner]
                self._cond.notify_all()

    def _step(self, call: tuple["SlotRunner", _Work] | None, decodes: list[tuple["SlotRunner", _Work]]) -> None:
        """One step's forwards: the prefill chunk (or lone forward), then the decodes in one batch."""
        if call is not None:
            self._run_call(call[1])
        if decodes:
            self._run_decodes(decodes)

    def _run_call(self, work: _Work, fn: Callable[[], Any] | None = None) -> None:
        try:
            work.result = (fn or work.fn)()  # type: ignore[misc]
        except BaseException as exc:  # noqa: BLE001  (handed to the asking thread, which reports it)
            work.error = exc

    def _run_decodes(self, decodes: list[tuple["SlotRunner", _Work]]) -> None:
        grouped = []
        for runner, work in decodes:
            inner = runner.inner
            if runner.batched and len(inner._ids) < inner._max_positions:
                grouped.append((runner, work))
            else:  # a plain runner, or one at the end of its context (its own error): alone, not failing the others
                self._run_call(work, lambda r=inner, t=work.token: r.decode(t))
        if not grouped:
            return
        try:
            logits = decode_batch([r.inner for r, _ in grouped], [w.token for _, w in grouped])
            for i, (_, work) in enumerate(grouped):
                work.result = logits[i:i + 1].clone()  # its own tensor: a sampler may write in place
        except BaseException as exc:  # noqa: BLE001
            for _, work in grouped:
                work.error = exc
        self.steps += 1
        self.largest_batch = max(self.largest_batch, len(grouped))


class SlotRunner:
    """A session's runner whose forwards the ``BatchEngine`` runs (the ``engine.executor.runners.Runner``
    interface). Everything that is not a forward (ids, crop, byte counts) is the wrapped runner's, on the
    caller's thread: only that sequence's own state."""

    def __init__(self, engine: BatchEngine, inner: Any) -> None:
        self.engine = engine
        self.inner = inner
        self.batched = batchable(inner)
        self.choice = getattr(inner, "choice", None)
        self.owner: int | None = None  # the thread whose request drives it now
        self.since = 0  # when its current prefill began (a ticket): the oldest prefill is served first

    def __getattr__(self, name: str) -> Any:  # device, use_kv_cache, cached_ids, crop, kv_bytes, sync ...
        return getattr(self.inner, name)

    @property
    def cached_ids(self) -> tuple[int, ...]:
        return self.inner.cached_ids

    @property
    def cached_len(self) -> int:
        return self.inner.cached_len

    def prefill(self, ids: Sequence[int], cancel: threading.Event | None = None,
                chunk: int = 256) -> Iterator[tuple[int, torch.Tensor | None]]:
        """The wrapped prefill, one chunk per engine step (at most the engine's ``prefill_chunk`` tokens)."""
        chunks = self.inner.prefill(ids, cancel, min(chunk, self.engine.prefill_chunk))
        self.since = self.engine.next_ticket()
        while True:
            item = self.engine.ask(self, _Work("call", fn=lambda: next(chunks, _DONE)))
            if item is _DONE:
                return
            yield item

    def decode(self, token_id: int) -> torch.Tensor:
        return self.engine.ask(self, _Work("decode", token=int(token_id)))

    def verify(self, ids: Sequence[int]) -> torch.Tensor:
        return self.engine.ask(self, _Work("call", fn=lambda: self.inner.verify(ids)))
