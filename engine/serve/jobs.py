"""What the server's queue carries: ``Job`` (one request) in, and the events its ``emit`` receives out.

A job's events, in order: ``Failed`` alone when it cannot start, or the engine's ``Started``, a ``Piece`` per token,
and one ``Reply`` last (``engine.serve.worker`` says when each comes); ``Record`` is what is kept of a served request.
``QueueFullError``/``WorkerClosedError`` are the queue's refusals, ``Executor``/``run_here`` the hook that says which
thread runs a job's model work. Split out of ``worker`` (which re-exports every name) so that module stays the
queue's logic alone; owns no behaviour.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from engine.core.jobs import WorkerClosedError  # noqa: F401 (re-exported: the server's queue raises it too)
from engine.errors import EngineError
from engine.events import Message, Metrics, Token
from engine.inputs import SamplingConfig


class QueueFullError(Exception):
    """``max_queue`` requests are already waiting; ``retry_after`` is an estimate in whole seconds."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"the server is busy: {retry_after} s")
        self.retry_after = retry_after


@dataclass(frozen=True)
class Piece:
    """Text the client may be shown now ("" while held back), and the token it came with.

    ``token`` is None for the last piece of a reply: bytes the decoder held back until the end.
    ``token_text`` is the token on its own (special tokens shown), filled when probabilities were asked for.
    """

    text: str
    token: Token | None = None
    token_text: str = ""
    reasoning: str = ""  # a reasoning model's thought text that came with the token (never stop-matched)


@dataclass(frozen=True)
class Failed:
    """The request could not start (a 400): nothing was generated."""

    error: EngineError


@dataclass(frozen=True)
class Reply:
    """Always the last event of a job that started. ``finish_reason``: stop | length | cancelled | error."""

    finish_reason: str
    text: str  # the whole reply as the client sees it (stop string and what followed it removed)
    metrics: Metrics
    error: str | None = None
    reasoning: str = ""  # a reasoning model's thought (``text`` is the answer)


@dataclass(frozen=True)
class Record:
    """One served request, for the status line and tests."""

    id: str
    finish_reason: str  # stop | length | cancelled | error | rejected
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int


Executor = Callable[[Callable[[], Record]], Record]  # runs one job's model work, on the thread that owns the model


def run_here(serve: Callable[[], Record]) -> Record:
    """The default executor: the job is served on the worker's own thread."""
    return serve()


@dataclass(eq=False)
class Job:
    """One request: a conversation, its sampling, and where its events go (``emit``, on the thread serving it)."""

    messages: tuple[Message, ...]  # empty for a raw completion (``text``)
    config: SamplingConfig  # max_new_tokens caps the reply; the end of the context caps it too
    emit: Callable[[Any], None]
    stop: tuple[str, ...] = ()
    text: str | None = None  # a raw text completion: this is continued, with no chat template
    constraint: Any = None  # an engine.constrain.ConstraintSpec the reply must follow (built on the model's thread)
    template_kwargs: dict[str, Any] | None = None  # chat-template variables (``enable_thinking``), checked
    tools: tuple[dict[str, Any], ...] | None = None  # the template's ``tools`` (native tool mode, engine.tools.calls)
    # Whose caches this request may reuse (``engine.serve.prefix``): "" for in-process callers (the window); the HTTP
    # side sets one per API key, or per connection on a key-less server, so cached tokens are no oracle across them.
    scope: str = ""
    # A vision model's pictures: message index -> its engine.vision.image_input.ImageInputs (engine.serve.images)
    images: dict[int, tuple[Any, ...]] | None = None
    id: str = field(default_factory=lambda: f"req-{uuid.uuid4().hex}")
    cancel: threading.Event = field(default_factory=threading.Event)
    t_arrival: float = field(default_factory=time.perf_counter)
    gone: bool = False  # emit failed: nobody is listening any more


def _routed(job: Job) -> tuple[Message, ...]:
    """What the session pool routes ``job`` by: its conversation, or its raw text under a role no chat has (a text
    and a chat never share a cache's meaning, and the next request that repeats the text finds its session)."""
    return job.messages if job.text is None else (Message("text", job.text),)
