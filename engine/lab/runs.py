"""One real generation through the engine, collected for an experiment.

Every lab figure comes from ``ChatSession.generate`` on the loaded model, the same path the chat
uses, so the lab measures the product and not a side implementation. A model on a server (a
``RemoteModel`` from ``engine.remote.connect``) runs through ``RemoteSession.generate`` instead: the
same events, measured on this client from the stream, with what the API cannot tell named in
``Metrics.unknown``. This module turns one generation's event stream into a ``RunRecord`` (text,
tokens and times, final ``Metrics``) and converts a cancelled or failed generation into the engine's
one-line errors. It owns no experiment logic and no timing formulas (``engine.events.Metrics`` and
the sessions own those).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from engine.errors import CancelledError, EngineError
from engine.events import Finished, Message, Metrics, Token

Progress = Callable[[float, str], None]
"""progress(fraction 0..1, what is running now)."""


def no_progress(fraction: float, message: str) -> None:
    """Default progress sink: experiments report, nobody listens."""


@dataclass(frozen=True)
class RunRecord:
    """What one generation produced and how long each part took."""

    text: str
    token_ids: tuple[int, ...]  # a server's tokens have no ids: every one is -1 there (use token_texts)
    token_times: tuple[float, ...]  # perf_counter() when each token id existed (a server's: when it arrived)
    metrics: Metrics
    reason: str
    token_texts: tuple[str, ...] = ()
    # False when some Token is a stream chunk that may hold several model tokens (a server that sent no
    # per-token logprobs); a local run's Tokens are always one token each.
    one_token_each: bool = True


def check_cancel(cancel: threading.Event, what: str) -> None:
    if cancel.is_set():
        raise CancelledError(f"{what} cancelled")


def is_remote(loaded) -> bool:
    """Whether ``loaded`` is a model on a server (its facts say ``remote``), not one loaded here."""
    return bool(getattr(loaded.facts, "remote", False))


def new_session(loaded):
    """A fresh session of ``loaded``: a ``RemoteSession`` for a server's model, else a ``ChatSession``."""
    if is_remote(loaded):
        from engine.remote.session import RemoteSession  # lazy: only a lab run on a server needs it

        return RemoteSession(loaded)
    # Lazy: the session imports torch, and the GUI imports this package (the lab's catalogue) at start-up.
    from engine.generate.session import ChatSession

    return ChatSession(loaded)


def generate_once(loaded, prompt: str | Sequence, config, cancel: threading.Event, *, session=None,
                  on_token: Callable[[int], None] | None = None) -> RunRecord:
    """Run one reply to ``prompt`` (a user message, or a list of ``Message``) on a fresh session.

    ``on_token(n)`` is called as the n-th token arrives, so a long step (decoding without the KV cache takes
    minutes on a CPU) can report progress within itself rather than sit at one figure.

    A fresh ``ChatSession`` per call means nothing is reused from an earlier run (the TTFT and
    KV-cache experiments depend on that); pass ``session`` to measure reuse on purpose. A server keeps
    its own prefix cache whatever this side does: experiments that time prompts make each one unique.
    """
    check_cancel(cancel, "experiment")
    messages = [Message("user", prompt)] if isinstance(prompt, str) else list(prompt)
    chat = session if session is not None else new_session(loaded)
    ids: list[int] = []
    texts: list[str] = []
    one_token_each = True
    times: list[float] = []
    finished: Finished | None = None
    for event in chat.generate(messages, config, cancel=cancel):
        if isinstance(event, Token):
            ids.append(event.token_id)
            texts.append(event.text)
            times.append(event.t)
            # A server's Token is one model token only when it came with its own logprob entry.
            one_token_each = one_token_each and (event.token_id >= 0 or event.prob is not None)
            if on_token is not None:
                on_token(len(ids))
        elif isinstance(event, Finished):
            finished = event
    if finished is None:  # the contract says never; fail loudly rather than report half a run
        raise EngineError("generation ended without a Finished event")
    if finished.reason == "cancelled":
        raise CancelledError("experiment cancelled")
    if finished.reason == "error":
        raise EngineError(finished.error or "generation failed")
    return RunRecord(text=finished.text, token_ids=tuple(ids), token_times=tuple(times),
                     metrics=finished.metrics, reason=finished.reason, token_texts=tuple(texts),
                     one_token_each=one_token_each)


def model_label(loaded) -> str:
    """Which engine produced a result: a local model's name, precision and device, or a server's model and URL."""
    facts = loaded.facts
    if is_remote(loaded):
        return f"{facts.name} at {facts.source} (remote server)"
    return f"{facts.name} ({facts.precision}, {facts.device})"
