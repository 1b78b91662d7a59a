"""One conversation with a loaded model: ``ChatSession.generate(messages, config, cancel)`` streams events.

``ChatSession.complete(text, config, cancel)`` continues a plain text instead (text completion, for a base model
or any model: no chat template), through the same loop: the same events, runners, sampling, cancel, KV-cache
reuse and metrics.

Owns the generation loop and its bookkeeping: reuse of the KV cache across turns (only the prompt
tokens after the common prefix with what the cache holds are computed; an edited or regenerated
history crops the cache back to that prefix), stop tokens, cancel, the finish reason, the metrics
(docs/DESIGN.md §Metrics) and turning failures into a ``Finished(reason="error")`` that leaves the
session usable. ``snapshot()`` / ``restore(snapshot)`` take the cache out and put it back (a conversation reopened
after a restart, another session's shared prefix: ``engine.generate.kv_snapshot``, ``engine.executor.kv_rows``).
Prompt rendering and trimming are ``engine.generate.context``'s, token choice is
``engine.generate.sampling``'s (speculative steps, given a ``SpeculationConfig``, ``engine.speculate``'s), forward
passes and cache internals are the runner's (``engine.executor.runners``
chooses it).

Threading: a session is used by one thread at a time (the worker that owns the model); ``cancel`` is
the only thing another thread touches.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Sequence

import psutil
import torch

from engine.generate.reuse_break import find_break
from engine.generate.context import IncrementalDecoder, Prompt, build_prompt, build_text_prompt, common_prefix
from engine.errors import CancelledError
from engine.events import (Event, Finished, Message, Metrics, PrefillProgress, Started, Stats, Token,
                           TopCandidate)
from engine.generate.reasoning import (ReasoningSplitter, check_template_kwargs, continuation_text, opens_thought,
                                      reasoning_format, reasoning_metrics)
from engine.executor.runners import Runner, make_runner
from engine.executor.kv_rows import export_rows, import_rows, kv_precision, runner_kind
from engine.generate.kv_snapshot import KVIdentity, KVSnapshot, StaleKVError, identity_of
from engine.generate.sampling import Sampler
from engine.inputs import SamplingConfig, SpeculationConfig
from engine.speculate import loop as speculate
from engine.fmt import one_line

log = logging.getLogger(__name__)

# A Stats event every this many tokens: often enough for a live readout at typical decode speeds,
# rare enough that building the snapshot (a few dozen attribute reads and one RSS read) is noise.
STATS_EVERY = 8
# ``reserve_threads`` applies only from this many torch threads on. On 2 cores, decoding with 1 thread
# instead of 2 beside the window cost ~30% (measured through the window on a 2-core AMD EPYC, every
# precision: bf16 21 vs 31 tok/s, int8 37 vs 50, int4 61 vs 77); with 4 or more, one thread is at most a
# quarter of the compute of a step bound by reading memory, and a thread the GUI preempts stalls them all.
RESERVE_FROM_THREADS = 4
# When a model declares no context length, treat it as unbounded rather than refuse everything.
_UNKNOWN_CONTEXT = 1 << 30

RunnerFactory = Callable[[Any, bool], Runner]


@dataclass
class _Timeline:
    """Clock readings and counts of one request (mutable, private to the loop)."""

    t_submit: float
    prompt_tokens: int = 0
    reused_tokens: int = 0
    prefill_tokens: int = 0
    dropped_turns: int = 0
    t_prefill_start: float | None = None
    t_prefill_end: float | None = None
    token_times: list[float] = field(default_factory=list)
    parts: list[str] = field(default_factory=list)  # each token's part: reasoning or answer
    peak_rss: int = 0
    speculator: Any = None  # engine.speculate.loop.Speculator while a reply decodes speculatively
    reuse_break: Any = None  # engine.events.ReuseBreak: where the prompt parted from the cache, if it did


class ChatSession:
    """A conversation's generation state: the loaded model, its runner and KV cache.

    ``runner_factory(loaded, use_kv_cache)`` and ``clock`` are collaborators tests can replace.
    ``reserve_threads``: on a CPU with at least ``RESERVE_FROM_THREADS`` torch threads, decode with this
    many fewer than prefill uses, leaving a core to a caller that works while tokens stream (the GUI thread
    renders them): a torch thread preempted by it stalls every parallel matrix product. With fewer threads
    the reserve would take too large a share of the compute, so all of them decode. Prefill, compute-bound,
    keeps every thread.
    """

    def __init__(self, loaded: Any, *, runner_factory: RunnerFactory = make_runner,
                 clock: Callable[[], float] = time.perf_counter, reserve_threads: int = 0,
                 speculation: SpeculationConfig | None = None, drafter: Any = None) -> None:
        self.loaded = loaded
        # Speculative decoding (engine/speculate): its drafter is built now, so a draft model that cannot serve
        # (DraftModelError, another vocabulary) is refused before any reply.
        self.speculation: SpeculationConfig | None = None
        self._drafter = None
        self.set_speculation(speculation, drafter)
        self._reserve_threads = max(0, int(reserve_threads))
        self._runner_factory = runner_factory
        self._clock = clock
        self._runner: Runner | None = None
        self._eos = frozenset(loaded.eos_token_ids)
        self._request = 0  # bumped by each generate(): an older, unfinished generator then stops
        self._process = None  # psutil.Process, created on first CPU memory reading
        self._reopen: Callable[[], KVSnapshot | None] | None = None  # a saved cache to read at the next reply

    def set_speculation(self, speculation: SpeculationConfig | None, drafter: Any = None) -> None:
        """Decode the next replies with ``speculation`` (None: plain); the KV cache stays. ``drafter``: one already
        built for it (a server's sessions, the window's conversations share one, used one at a time: it re-syncs to
        each history it is given), so a draft model or int4 copy is not loaded once per session."""
        built = None
        if speculation is not None:
            from engine.speculate.drafters import build_drafter  # lazy: the drafters build on this module

            built = drafter if drafter is not None else build_drafter(self.loaded, speculation)
        self.speculation, self._drafter = speculation, built

    @property
    def cached_tokens(self) -> int:
        """Positions currently held in the KV cache."""
        return self._runner.cached_len if self._runner is not None else 0

    def cached_ids(self, use_kv_cache: bool = True) -> tuple[int, ...]:
        """The ids a reply asking for ``use_kv_cache`` would find in the cache (none when it would start a new
        runner). Read on the generating thread: the forecast of a turn's prefill (``engine.generate.measure``)."""
        runner = self._runner
        return tuple(runner.cached_ids) if runner is not None and runner.use_kv_cache == use_kv_cache else ()

    def reset(self) -> None:
        """Forget the cache (a new conversation reuses nothing)."""
        if self._runner is not None:
            self._runner.reset()

    # -- KV snapshots (engine.generate.kv_snapshot) -------------------------------------------------
    def kv_identity(self) -> KVIdentity:
        """What a snapshot must have been computed by to restore here: this model, its precision, the KV precision
        of the cached runner (built now if there is none yet)."""
        return identity_of(self.loaded, kv_precision(self._runner_for(True)))

    def kv_runner(self) -> Runner:
        """The runner whose cache the next reply (with a KV cache) uses, built now if there is none: a server shares
        prefixes into it (``engine.serve.prefix``)."""
        return self._runner_for(True)

    def snapshot(self, n: int | None = None) -> KVSnapshot | None:
        """The ids the cache holds (the first ``n``) and their rows, or None when there are none or the runner cannot
        export them exactly. The rows are views of the live cache: save or import them before this session's next
        reply."""
        runner = self._runner
        if runner is None or not runner.use_kv_cache or not runner.cached_len:
            return None
        rows = export_rows(runner, n)
        if not rows:
            return None
        count = runner.cached_len if n is None else max(0, min(n, runner.cached_len))
        return KVSnapshot(tuple(runner.cached_ids[:count]), rows, runner_kind(runner), self.kv_identity().kv_precision)

    def reopen_with(self, load: Callable[[], KVSnapshot | None]) -> None:
        """The next reply first restores what ``load()`` returns (a conversation's saved cache; None: nothing), inside
        its timing: the TTFT it reports includes reading the file. Skipped if the cache holds anything by then; one
        arranged before (the conversation's own file) is tried first, ``load`` only when that gives nothing."""
        earlier = self._reopen
        self._reopen = load if earlier is None else (lambda: earlier() or load())

    def _take_reopen(self, runner: Runner) -> None:
        load, self._reopen = self._reopen, None
        if load is None or not runner.use_kv_cache or runner.cached_len:
            return
        snapshot = load()
        if snapshot is not None:
            try:
                self.restore(snapshot)
            except StaleKVError as exc:
                log.warning("a saved KV cache was not used: %s", exc)

    def restore(self, snapshot: KVSnapshot) -> None:
        """Hold ``snapshot``'s ids and rows in place of the cache: the next prompt reuses its longest common token
        prefix with them, exactly as if this session had computed them. ``StaleKVError`` (the cache then empty) when
        this session's runner cannot take them: another runner's layout, another KV precision."""
        runner = self._runner_for(True)
        identity = self.kv_identity()
        if snapshot.kv_precision != identity.kv_precision:
            runner.reset()
            raise StaleKVError(f"a {snapshot.kv_precision} KV snapshot for a {identity.kv_precision} cache")
        try:
            import_rows(runner, snapshot.ids, snapshot.tensors)
        except (ValueError, RuntimeError) as exc:
            runner.reset()
            raise StaleKVError(f"this runner cannot take a {snapshot.runner} runner's KV snapshot: "
                               f"{one_line(exc)}") from None

    def _runner_for(self, use_kv_cache: bool) -> Runner:
        if self._runner is None or self._runner.use_kv_cache != use_kv_cache:
            if self._runner is not None:
                self._runner.reset()  # a shared prefix's blocks go back to their pool
            self._runner = None  # free the old cache before a new runner allocates
            self._runner = self._runner_factory(self.loaded, use_kv_cache)
        return self._runner

    @property
    def reasoning(self) -> Any:
        """The model's ``ReasoningFormat`` (``engine.generate.reasoning``), None when it does not think aloud."""
        return reasoning_format(str(getattr(self.loaded.tokenizer, "chat_template", "") or ""))

    def generate(self, messages: Sequence[Message], config: SamplingConfig | None = None,
                 cancel: threading.Event | None = None, constraint: Any = None, *,
                 template_kwargs: dict[str, Any] | None = None, partial: Message | None = None,
                 tools: Sequence[Mapping[str, Any]] | None = None) -> Iterator[Event]:
        """Render, trim and stream a reply to ``messages``.

        Raises ``BadInputError`` / ``ContextTooLongError`` / ``TemplateError`` here, before anything
        runs; every later failure becomes the final ``Finished(reason="error")``. A cancel while the
        prompt renders gives a stream of one ``Finished(reason="cancelled")``. Iterate the result right
        away: the submit time (for TTFT) is taken now. ``constraint``: an ``engine.constrain.matcher.TokenConstraint``
        the reply must follow (its masks apply before sampling; the end token only where its grammar is complete).

        ``template_kwargs``: the request's chat-template variables (``enable_thinking``; checked here); ``tools``: the
        template's ``tools`` (native tool mode, ``engine.tools.calls``).
        ``partial``: the assistant reply cut off at its length limit, continued where it stopped (its text, thought
        included, follows the generation prompt; no new turn): the events then carry the continuation only.
        A reasoning model's tokens say which part they are in; ``Finished`` has the answer and the thought apart.
        """
        t_submit = self._clock()
        config = config or SamplingConfig()
        cancel = cancel or threading.Event()
        context_max = self.loaded.facts.context_length or _UNKNOWN_CONTEXT
        # A budget beyond the context cannot be used: cap it there first, so no size derived from it
        # (the sampler's id buffer) is ever larger than the context (--max-new-tokens 10**12).
        budget = min(config.max_new_tokens, context_max)
        kwargs = check_template_kwargs(template_kwargs)
        fmt = self.reasoning
        tokenizer = self.loaded.tokenizer
        try:
            raw = ""
            if partial is not None:  # did the template open the thought? From the prompt without the reply
                opened = opens_thought(self._tail(build_prompt(tokenizer, messages, context_max, budget, cancel,
                                                               kwargs, tools=tools).ids), fmt)
                raw = continuation_text(partial.reasoning, partial.content, fmt, opened)
            prompt = build_prompt(tokenizer, messages, context_max, budget, cancel, kwargs, raw, tools)
        except CancelledError:
            return iter([Finished("cancelled", "")])  # nothing ran: no metrics to report
        splitter = ReasoningSplitter(fmt, inside=opens_thought(self._tail(prompt.ids), fmt),
                                     in_answer=partial is not None and bool(partial.content),
                                     resumed=partial is not None)
        return self._start(prompt, config, cancel, t_submit, constraint, splitter, messages)

    def _tail(self, ids: Sequence[int]) -> str:
        """The end of a prompt as text, markers shown: does it leave a thought open?"""
        return self.loaded.tokenizer.decode(list(ids[-16:]), skip_special_tokens=False,
                                            clean_up_tokenization_spaces=False)

    def complete(self, text: str, config: SamplingConfig | None = None,
                 cancel: threading.Event | None = None) -> Iterator[Event]:
        """Stream a continuation of ``text``, with no chat template (``engine.generate.context.build_text_prompt``:
        the tokenizer's own encoding, BOS included where it adds one; never cut, the budget shrunk to the room).

        The same contract as ``generate``: ``BadInputError`` / ``ContextTooLongError`` raised here, before
        anything runs; then ``Started`` … ``Finished`` with the same metrics (``dropped_turns`` always 0).
        """
        t_submit = self._clock()
        config = config or SamplingConfig()
        cancel = cancel or threading.Event()
        context_max = self.loaded.facts.context_length or _UNKNOWN_CONTEXT
        prompt = build_text_prompt(self.loaded.tokenizer, text, context_max, min(config.max_new_tokens, context_max))
        return self._start(prompt, config, cancel, t_submit)

    def _start(self, prompt: Prompt, config: SamplingConfig, cancel: threading.Event,
               t_submit: float, constraint: Any = None, splitter: ReasoningSplitter | None = None,
               messages: Sequence[Message] = ()) -> Iterator[Event]:
        if prompt.max_new_tokens != config.max_new_tokens:
            config = dataclasses.replace(config, max_new_tokens=prompt.max_new_tokens)
        self._request += 1
        return self._stream(prompt, config, cancel, t_submit, self._request, constraint,
                            splitter or ReasoningSplitter(None), messages)

    # -- the loop ------------------------------------------------------------------------------
    def _stream(self, prompt: Prompt, config: SamplingConfig, cancel: threading.Event, t_submit: float,
                request: int, constraint: Any = None,
                splitter: ReasoningSplitter | None = None, messages: Sequence[Message] = ()) -> Iterator[Event]:
        splitter = splitter or ReasoningSplitter(None)
        facts = self.loaded.facts
        timeline = _Timeline(t_submit=t_submit, prompt_tokens=len(prompt.ids), dropped_turns=prompt.dropped_turns)
        decoder = IncrementalDecoder(self.loaded.tokenizer)
        runner: Runner | None = None

        def finished(reason: str, error: str | None = None) -> Finished:
            splitter.push(decoder.flush())
            splitter.flush()
            return Finished(reason, splitter.answer, self._metrics(timeline, runner), error,  # type: ignore[arg-type]
                            splitter.reasoning.rstrip())

        try:
            runner = self._runner_for(config.use_kv_cache)
            self._take_reopen(runner)
            ids = list(prompt.ids)
            # Keep at least the last prompt token to compute: its logits choose the first reply token.
            reused = min(common_prefix(runner.cached_ids, ids), len(ids) - 1)
            broke = find_break(self.loaded.tokenizer, runner.cached_ids, ids, messages, prompt.dropped_turns)
            timeline.reuse_break = broke
            runner.crop(reused)
            reused = runner.cached_len  # a runner that cannot crop starts over
            timeline.reused_tokens, timeline.prefill_tokens = reused, len(ids) - reused
            self._reset_peak(runner)
            yield Started(len(ids), reused, prompt.dropped_turns, facts.context_length, t_submit, broke)

            timeline.t_prefill_start = self._clock()
            logits = None
            todo = ids[reused:]
            for done, logits in runner.prefill(todo, cancel, config.prefill_chunk):
                yield PrefillProgress(done, len(todo))
                if self._request != request:
                    yield finished("cancelled")  # superseded by a newer generate()
                    return
            if logits is None or cancel.is_set():
                yield finished("cancelled")
                return
            runner.sync()
            timeline.t_prefill_end = self._clock()

            sampler = Sampler(config, runner.device, ids, constraint)
            timeline.speculator = speculating = speculate.start(self._drafter, runner, config, self.speculation,
                                                                ids, constraint, sampler)
            verified: deque[Any] = deque()  # tokens a speculative step chose, still to emit
            reason = "length"
            restore_threads = self._decode_threads(runner)
            try:
                for index in range(prompt.max_new_tokens):
                    choice = verified.popleft() if verified else sampler.choose(logits)
                    runner.sync()
                    t = self._clock()
                    timeline.token_times.append(t)
                    top = tuple(TopCandidate(i, decoder.token_text(i), p)
                                for i, p in zip(choice.top_ids, choice.top_probs))
                    thought, answer = splitter.push(decoder.push(choice.token_id))
                    timeline.parts.append(splitter.part)
                    yield Token(index, choice.token_id, answer, t, choice.prob, top, splitter.part, thought,
                                choice.drafted)
                    if choice.token_id in self._eos:
                        reason = "eos"
                        break
                    if index + 1 == prompt.max_new_tokens:
                        break  # the last token is never fed back: no forward whose result nobody uses
                    if (index + 1) % STATS_EVERY == 0:
                        yield Stats(self._metrics(timeline, runner))
                    if self._request != request:
                        yield finished("cancelled")
                        return
                    if cancel.is_set():
                        reason = "cancelled"
                        break
                    if verified:
                        continue  # already checked by the model: no forward for it
                    if speculating is not None:
                        verified.extend(speculating.step(choice.token_id, prompt.max_new_tokens - index - 1))
                    else:
                        logits = runner.decode(choice.token_id)
                    if cancel.is_set():  # set during the forward: stop before emitting another token
                        reason = "cancelled"
                        break
            finally:
                restore_threads()
            yield finished(reason)
        except torch.OutOfMemoryError:
            self._recover(runner)
            yield finished("error", "out of memory while generating: start a new conversation or shorten it "
                                    "(less context), or load the model in 4-bit (nf4)")
        except Exception as exc:  # noqa: BLE001  (the contract: generation failures end the stream, never raise)
            self._recover(runner)
            yield finished("error", f"generation failed: {one_line(exc, name_type=True)}")

    def _decode_threads(self, runner: Runner) -> Callable[[], None]:
        """Drop to the decode thread count (see ``reserve_threads``); returns what restores the old one.

        Called on the generating thread, whose parallel regions it sizes (OpenMP's count is per thread);
        restored when the reply ends, however it ends, so a lab task run next gets every thread back.
        """
        before = torch.get_num_threads()
        wanted = max(1, before - self._reserve_threads)
        if runner.device.type != "cpu" or wanted == before or before < RESERVE_FROM_THREADS:
            return lambda: None
        torch.set_num_threads(wanted)
        return lambda: torch.set_num_threads(before)

    def _recover(self, runner: Runner | None) -> None:
        """After a failure the cache may hold a half-written step: drop it; keep the model."""
        if runner is not None:
            runner.reset()
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    # -- metrics -------------------------------------------------------------------------------
    def _reset_peak(self, runner: Runner) -> None:
        if runner.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(runner.device)

    def _peak_memory(self, timeline: _Timeline, runner: Runner | None) -> int:
        if runner is not None and runner.device.type == "cuda":
            return int(torch.cuda.max_memory_allocated(runner.device))
        if self._process is None:
            self._process = psutil.Process()
        timeline.peak_rss = max(timeline.peak_rss, self._process.memory_info().rss)
        return timeline.peak_rss

    def _metrics(self, tl: _Timeline, runner: Runner | None) -> Metrics:
        facts = self.loaded.facts
        times = tl.token_times
        n = len(times)
        prefill_s = (tl.t_prefill_end - tl.t_prefill_start
                     if tl.t_prefill_end is not None and tl.t_prefill_start is not None else None)
        ttft = times[0] - tl.t_submit if n else None
        e2e = times[-1] - tl.t_submit if n else None
        span = times[-1] - times[0] if n > 1 else 0.0
        cached = runner.cached_len if runner is not None else 0
        filled, allocated = runner.kv_bytes() if runner is not None else (0, 0)
        return Metrics(
            prompt_tokens=tl.prompt_tokens,
            prefill_tokens=tl.prefill_tokens,
            reused_tokens=tl.reused_tokens,
            generated_tokens=n,
            ttft_s=ttft,
            prefill_s=prefill_s,
            prefill_tok_s=tl.prefill_tokens / prefill_s if prefill_s else None,
            decode_tok_s=(n - 1) / span if span > 0 else None,
            itl_s=tuple(b - a for a, b in zip(times, times[1:])),
            tpot_s=(e2e - ttft) / (n - 1) if n > 1 and e2e is not None and ttft is not None else None,
            e2e_s=e2e,
            kv_cache_bytes=filled,
            kv_cache_bytes_allocated=allocated,
            kv_cache_bytes_formula=facts.kv_bytes_per_token * cached,
            kv_cache_bytes_formula_no_gqa=facts.kv_bytes_per_token_no_gqa * cached,
            weights_bytes=facts.weights_bytes,
            peak_memory_bytes=self._peak_memory(tl, runner),
            context_tokens=tl.prompt_tokens + n,
            context_max=facts.context_length,
            dropped_turns=tl.dropped_turns,
            reuse_break=tl.reuse_break,
            device=facts.device,
            precision=facts.precision,
            **reasoning_metrics(tl.parts, times, tl.t_submit),  # type: ignore[arg-type]
            **speculate.speculation_metrics(tl.speculator, n),
        )
