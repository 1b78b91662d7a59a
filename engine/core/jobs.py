"""The engine core's jobs and what it reports back beyond the engine's own events: typed, frozen, validated when built.

Owns what a client may ask of the core (``LoadJob``, ``GenerateJob`` (with the files attached to its last message and
the conversation's images),
``TaskJob``, ``ServeJob`` for an API server's model work, ``PersistJob`` to keep a conversation's cache on disk),
the reports (``LoadFailure``, ``ReplyStarted``), a job on its way (``QueuedJob``: its id and cancel flag) and the
buffer its events travel in (``EventBuffer``). Not how they are run (``engine.core.core``) nor how a client posts
them (``app.runtime.bridge`` for the window).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from engine.events import Finished, Message, Started
from engine.errors import ErrorKind
from engine.inputs import LoadSpec, SamplingConfig, SpeculationConfig
from engine.models.model import LoadedModel
from engine.remote import RemoteModel, RemoteSpec

TaskFn = Callable[[LoadedModel, threading.Event], object]

class WorkerClosedError(Exception):
    """The engine thread, or a server's queue in front of it, was closed (shutting down), or can no longer run a job.

    Lives with the jobs, on the core's floor, because the core's thread (``engine.core.engine_thread``) and its
    hand-over (``engine.core.handoff``) raise it; the server's queue (``engine.serve.jobs``) re-exports it."""


@dataclass(frozen=True)
class LoadJob:
    """Load ``spec``'s model, or connect to a server's (``RemoteSpec``: its models are listed and the name checked);
    the previous one stays loaded until this one succeeds."""

    spec: LoadSpec | RemoteSpec


@dataclass(frozen=True)
class GenerateJob:
    """Stream a reply to ``messages`` (the whole conversation) in ``conversation_id``'s session."""

    conversation_id: int
    messages: tuple[Message, ...]
    config: SamplingConfig
    prefix_from: int | None = None  # a fork's first turn: the conversation whose session may be handed over
    template_kwargs: dict[str, Any] | None = None  # chat-template variables (enable_thinking); a local model's only
    partial: Message | None = None  # the reply cut at its length limit or stopped, continued where it stopped
    text: str | None = None  # Complete text: this document is continued raw (no chat template), ``messages`` unused
    speculation: SpeculationConfig | None = None  # speculative decoding (app.window.speculation); a local model's only
    tools: Any = None  # MCP tools and JSON schema (a ``ReplyTools``), run by the client's ``ToolRunner``
    documents: tuple[str, ...] = ()  # files attached to the last user message: it is grounded in them here
    docs_mode: str = "auto"  # whole, retrieve, or auto: whole when they fit the context (engine.docs.grounding)
    collections: tuple[str, ...] = ()  # the conversation's collections (app.window.docs_choice): searched for it too
    images: tuple[tuple[int, tuple[str, ...]], ...] = ()  # (message index, image files): a vision turn's pictures


@dataclass(frozen=True)
class TaskJob:
    """Run ``fn(loaded_model, cancel_event)`` on the worker thread (lab, tokenizer, model card). ``needs_model``
    False: it runs with no model loaded too (``loaded_model`` None), as indexing a collection does. ``vision``: ``fn``
    gets the vision-language model (``engine.vision.vlm.VisionModel``: its processor, its vision tower) instead, and
    fails with ``NoVisionError``'s line on a text model (the lab's "What an image costs", counting image tokens)."""

    fn: TaskFn
    needs_model: bool = True
    vision: bool = False


@dataclass(frozen=True)
class ServeJob:
    """The window's API server's work on the worker thread (one request's model work, or setting up the server's
    queue for a newly loaded model): ``run(model)`` with the model loaded now (None: none yet).

    Posted by ``Bridge.post_serve_job`` from any thread (``app.runtime.api_serving``), outside the Bridge's bookkeeping:
    it waits in line with the chat's jobs, and ``run`` reports its own outcome to whoever waits on it."""

    run: Callable[[LoadedModel | RemoteModel | None], None]


@dataclass(frozen=True)
class PersistJob:
    """Write conversation ``conversation_id``'s KV cache to disk if memory holds one its file does not (the user
    switched away from it: a crash would lose it), unless ``wanted()`` is False by then (a reply was asked for since:
    the reply goes first). ``forget``: the conversation was deleted: its session and its file go instead.

    Posted by ``Bridge.keep_on_disk`` / ``Bridge.forget_kv`` outside the GUI's bookkeeping, one at a time, when the
    worker is idle: a reply asked for during the write waits for that write only."""

    conversation_id: int
    wanted: Callable[[], bool] = lambda: True
    forget: bool = False


Job = LoadJob | GenerateJob | TaskJob | ServeJob | PersistJob


@dataclass(frozen=True)
class LoadFailure:
    """A load that did not happen: what went wrong (act on ``kind``), one line for the user, and the spec."""

    kind: ErrorKind
    message: str
    spec: LoadSpec | RemoteSpec


@dataclass(frozen=True)
class ReplyStarted(Started):
    """The engine's ``Started``, plus what only the worker knows: this conversation's session had been
    evicted from ``SessionCache``, so its whole prompt is computed again (``reused_tokens`` is 0); and how many of
    ``reused_tokens`` came from a cached document prefix (``engine.docs.kv_prefix``: another conversation attached
    the same files, or a file kept on disk)."""

    kv_evicted: bool = False
    document_prefix_tokens: int = 0


@dataclass
class QueuedJob:
    """A job on its way through the worker, with its id and cancel flag (mutable only in those flags)."""

    job_id: int
    job: Job
    cancel: threading.Event = field(default_factory=threading.Event)
    reported: bool = False  # a generation's Finished reached the GUI (the job may still be winding down)

    @property
    def generating(self) -> bool:
        """A reply whose Finished has not reached the GUI yet."""
        return isinstance(self.job, GenerateJob) and not self.reported


def finished_without_run(reason: str, error: str | None = None) -> Finished:
    """A Finished event for a generation that never reached the engine (cancelled in the queue, no model)."""
    return Finished(reason=reason, text="", error=error)  # type: ignore[arg-type]


class EventBuffer:
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
