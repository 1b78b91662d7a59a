"""One real generation through the engine, collected for an experiment.

Every lab figure comes from ``ChatSession.generate`` on the loaded model, the same path the chat
uses, so the lab measures the product and not a side implementation. This module turns one
generation's event stream into a ``RunRecord`` (text, token ids and times, final ``Metrics``) and
converts a cancelled or failed generation into the engine's one-line errors. It owns no experiment
logic and no timing formulas (``engine.events.Metrics`` and the session own those).
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
    token_ids: tuple[int, ...]
    token_times: tuple[float, ...]  # perf_counter() when each token id existed
    metrics: Metrics
    reason: str


def check_cancel(cancel: threading.Event, what: str) -> None:
    if cancel.is_set():
        raise CancelledError(f"{what} cancelled")


def generate_once(loaded, prompt: str | Sequence, config, cancel: threading.Event, *, session=None) -> RunRecord:
    """Run one reply to ``prompt`` (a user message, or a list of ``Message``) on a fresh session.

    A fresh ``ChatSession`` per call means nothing is reused from an earlier run (the TTFT and
    KV-cache experiments depend on that); pass ``session`` to measure reuse on purpose.
    """
    # Lazy: the session imports torch, and the GUI imports this package (the lab's catalogue) at start-up.
    from engine.generate.session import ChatSession

    check_cancel(cancel, "experiment")
    messages = [Message("user", prompt)] if isinstance(prompt, str) else list(prompt)
    chat = session if session is not None else ChatSession(loaded)
    ids: list[int] = []
    times: list[float] = []
    finished: Finished | None = None
    for event in chat.generate(messages, config, cancel=cancel):
        if isinstance(event, Token):
            ids.append(event.token_id)
            times.append(event.t)
        elif isinstance(event, Finished):
            finished = event
    if finished is None:  # the contract says never; fail loudly rather than report half a run
        raise EngineError("generation ended without a Finished event")
    if finished.reason == "cancelled":
        raise CancelledError("experiment cancelled")
    if finished.reason == "error":
        raise EngineError(finished.error or "generation failed")
    return RunRecord(text=finished.text, token_ids=tuple(ids), token_times=tuple(times),
                     metrics=finished.metrics, reason=finished.reason)


def model_label(loaded) -> str:
    facts = loaded.facts
    return f"{facts.name} ({facts.precision}, {facts.device})"
