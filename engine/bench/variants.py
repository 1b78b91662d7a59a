"""The variants the benchmark compares, each one way of turning messages into greedy tokens, timed.

- ``Baseline``: transformers ``model.generate()`` with its default (dynamic) cache, timed through a
  streamer (``engine.bench.core.TokenClock``): the reference every ratio divides by;
- ``Engine``: Miaohui's ``ChatSession`` over a runner factory: ``plain_factory`` (the plain
  ``ModelRunner``: transformers forward + DynamicCache) or ``fast_factory`` (the fast path, which falls back
  to the plain runner where the model is not supported);
- ``LlamaCpp``: the peer, llama.cpp greedy on the same GGUF in a child process (``engine.bench.peer``), fed
  the token ids the engine renders, so both prefill the same prompt.

Every run produces exactly the tokens asked for (no end token stops it), so rates compare like for like.
Owns neither the scenarios (``engine.bench.scenarios``) nor the repetitions and medians
(``engine.bench.core``); knows the engine's runners only through their factories.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from engine.bench.core import TokenClock, decode_rate
from engine.bench.peer import NAME as PEER_NAME, PeerError, PeerProcess
from engine.bench.roofline import kv_read_per_token
from engine.events import Finished, Message, Token
from engine.generate.context import render
from engine.executor.runners import make_runner as make_fast_runner
from engine.executor.runner import ModelRunner, model_device, sync
from engine.generate.session import ChatSession
from engine.inputs import SamplingConfig


@dataclass(frozen=True)
class Sample:
    """One timed run of one variant."""

    ttft_s: float | None
    decode_tok_s: float | None
    ids: tuple[int, ...]
    reused_tokens: int = 0
    kv_read_bytes: int | None = None  # KV bytes a decode step read on average (engine.bench.roofline); None: unknown


class Baseline:
    """transformers ``generate()`` with its default cache: the reference every ratio divides by."""

    name = "baseline"
    keeps_cache = False  # every call re-prefills the whole conversation

    def __init__(self, loaded: Any) -> None:
        self.loaded = loaded

    def run(self, messages: Sequence[Message], tokens: int, use_kv_cache: bool = True, **_: Any) -> Sample:
        model, tokenizer = self.loaded.model, self.loaded.tokenizer
        device = model_device(model)
        clock = TokenClock(lambda: sync(device))
        t_submit = time.perf_counter()
        ids = torch.tensor([render(tokenizer, messages)], dtype=torch.long, device=device)  # (1, seq)
        # min_new_tokens keeps every run at exactly ``tokens`` so the rates compare like for like.
        with torch.inference_mode():
            model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=tokens,
                           min_new_tokens=tokens, do_sample=False, temperature=None, top_p=None, top_k=None,
                           use_cache=use_kv_cache, streamer=clock,
                           pad_token_id=self.loaded.eos_token_ids[0] if self.loaded.eos_token_ids else None)
        ttft = clock.times[0] - t_submit if clock.times else None
        return Sample(ttft, clock.decode_tok_s, tuple(clock.ids))


class Engine:
    """Miaohui's ``ChatSession`` over a given runner factory."""

    keeps_cache = True  # a session reuses the cache of the turns it has already seen

    def __init__(self, name: str, loaded: Any, factory: Callable[[Any, bool], Any]) -> None:
        self.name = name
        # No end tokens: every run produces exactly ``tokens`` tokens, like generate(min_new_tokens=...).
        self.loaded = dataclasses.replace(loaded, eos_token_ids=())
        self.factory = factory
        self.last_runner: Any = None

    def session(self) -> ChatSession:
        def factory(loaded: Any, use_kv_cache: bool) -> Any:
            self.last_runner = self.factory(loaded, use_kv_cache)
            return self.last_runner

        return ChatSession(self.loaded, runner_factory=factory)

    def run(self, messages: Sequence[Message], tokens: int, use_kv_cache: bool = True,
            session: ChatSession | None = None) -> Sample:
        session = session or self.session()
        config = SamplingConfig(temperature=0.0, repetition_penalty=1.0, max_new_tokens=tokens,
                                use_kv_cache=use_kv_cache)
        ids: list[int] = []
        finished = None
        for event in session.generate(messages, config, threading.Event()):
            if isinstance(event, Token):
                ids.append(event.token_id)
            elif isinstance(event, Finished):
                finished = event
        if finished is None or finished.reason == "error":
            raise RuntimeError(f"{self.name}: {finished.error if finished else 'no Finished event'}")
        m = finished.metrics
        return Sample(m.ttft_s, m.decode_tok_s, tuple(ids), m.reused_tokens, kv_read_per_token(m))


class LlamaCpp:
    """llama.cpp on the same GGUF (its child, ``engine.bench.peer.PeerProcess``), the engine's prompt ids.

    A child that dies (SIGILL from a build for another CPU) or errs ends the column, not the bench: ``note``
    keeps the one line that says why, and every later run is an empty sample (null figures)."""

    name = PEER_NAME
    keeps_cache = False  # every run prefills its whole prompt (the child resets llama.cpp's cache first)

    def __init__(self, process: PeerProcess, tokenizer: Any) -> None:
        self.process = process
        self.tokenizer = tokenizer
        self.note: str | None = None

    def run(self, messages: Sequence[Message], tokens: int, use_kv_cache: bool = True, **_: Any) -> Sample:
        if not use_kv_cache or self.note is not None:  # llama.cpp always keeps its cache: no such figure
            return Sample(None, None, ())
        t_submit = time.perf_counter()
        ids = render(self.tokenizer, messages)
        t_sent = time.perf_counter()
        try:
            reply = self.process.generate(ids, tokens)
        except PeerError as exc:
            self.note = str(exc)
            return Sample(None, None, ())
        # TTFT = rendering here + the child's request -> first token; the child's clock starts when it reads
        # the request (clocks are not compared across processes; the pipe's microseconds are left out).
        return Sample((t_sent - t_submit) + reply.first_s, decode_rate(reply.times), reply.ids)


def plain_factory(loaded: Any, use_kv_cache: bool) -> ModelRunner:
    """The plain runner: transformers' forward and DynamicCache."""
    return ModelRunner(loaded.model, use_kv_cache=use_kv_cache)


def fast_factory(compile_step: bool) -> Callable[[Any, bool], Any]:
    """The fast path's factory (``compile_step``: torch.compile its decode step)."""

    def factory(loaded: Any, use_kv_cache: bool) -> Any:
        return make_fast_runner(loaded, use_kv_cache, compile=compile_step)

    return factory


def variants_for(loaded: Any, compile_step: bool, fast: bool = True) -> list[Baseline | Engine]:
    """``baseline``, ``engine`` and (when ``fast``) ``fastpath`` over one loaded model, in that order."""
    out: list[Baseline | Engine] = [Baseline(loaded), Engine("engine", loaded, plain_factory)]
    if fast:
        out.append(Engine("fastpath", loaded, fast_factory(compile_step)))
    return out
