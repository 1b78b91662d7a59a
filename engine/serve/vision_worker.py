"""Serving a vision-language model (issue 44): ``VisionWorker`` is the queue of ``engine.serve.worker.Worker`` over an
``engine.vision.vlm.VisionModel``.

Each chat request is one turn of ``engine.vision.turn.VisionChat`` with the request's pictures (``Job.images``, read by
``engine.serve.images``), or none: one request at a time, no speculation. The reply budget is fixed as the worker
fixes it, the context left after the whole prompt, image tokens included, counted through the processor before
anything is computed (a prompt that does not fit is a 400). ``Started.prompt_tokens`` and the usage's
``prompt_tokens`` count the image tokens as the processor expanded them. Raw completions, tools and structured output
are refused (400): the turn has no constrained decoding. The one conversation cache is kept only while requests come
from the same prefix-cache scope (``engine.serve.app``; a new scope starts it afresh), so a cached image never tells
one client of another's.

Does not own the queue (``engine.serve.worker``), the turn (``engine.vision.turn``) or reading images
(``engine.serve.images``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Iterator

from engine.errors import BadInputError, ContextTooLongError, EngineError
from engine.events import Finished, Metrics, Started, Token
from engine.fmt import one_line
from engine.inputs import SamplingConfig
from engine.serve.jobs import Failed, Job, Piece, Record, Reply
from engine.serve.stops import StopMatcher
from engine.serve.worker import Worker, reply_end


class VisionWorker(Worker):
    """``Worker`` over an ``engine.vision.vlm.VisionModel``: a chat request is a ``VisionChat`` turn with the
    request's images (``Job.images``). One request at a time, no speculation (see the module docstring)."""

    def __init__(self, vision: Any, **options: Any) -> None:
        from engine.vision.turn import VisionChat

        options.update(parallel=1, speculation=None)
        super().__init__(vision.loaded, **options)
        self.vision = vision
        self._chat = VisionChat(vision)
        self._scope: str | None = None  # whose conversation the chat's cache holds

    def _serve_job(self, job: Job) -> Record:
        if job.cancel.is_set():
            self._emit(job, Reply("cancelled", "", Metrics()))
            return Record(job.id, "cancelled", 0, 0, 0)
        try:
            config = self._vision_budget(job)
        except EngineError as exc:
            self._emit(job, Failed(exc))
            return Record(job.id, "rejected", 0, 0, 0)
        if self._scope != job.scope:  # another client's cache: never reused across scopes
            self._chat.reset()
            self._scope = job.scope
        return self._relay(job, self._chat.generate(job.messages, job.images or {}, config, job.cancel))

    def _vision_budget(self, job: Job) -> SamplingConfig:
        if job.text is not None:
            raise BadInputError("raw completions are not served with a vision-language model: use "
                                "/v1/chat/completions")
        if job.constraint is not None or job.tools:
            raise BadInputError("tools and response_format are not supported with a vision-language model yet")
        from engine.vision.turn import build_prompt

        try:  # counted here so a prompt that does not fit is a 400 before anything is computed
            prompt = build_prompt(self.vision, job.messages, job.images or {})
        except EngineError:
            raise
        except Exception as exc:  # noqa: BLE001  (the processor's own failure on this input: the request's fault)
            raise BadInputError(f"the model's processor refused this conversation: {one_line(exc)}") from None
        room = self.context_max - len(prompt.ids)
        if room < 1:
            raise ContextTooLongError(f"the conversation, images included ({len(prompt.ids)} tokens), does not fit "
                                      f"in this model's context of {self.context_max} tokens")
        return dataclasses.replace(job.config, max_new_tokens=max(1, min(job.config.max_new_tokens, room)))

    def _relay(self, job: Job, events: Iterable[Any]) -> Record:
        """The turn's events as the worker's: ``Started``, a ``Piece`` per token (stop strings applied), one
        ``Reply``."""
        matcher = StopMatcher(job.stop)
        streamed: list[str] = []
        finished: Finished | None = None
        previous_t: float | None = None
        for event in _until_finished(events):
            if isinstance(event, Token):
                self.metrics.token(None if previous_t is None else event.t - previous_t,
                                   event.t - job.t_arrival if previous_t is None else None)
                previous_t = event.t
                streamed.append(event.text)
                if event.token_id in self._eos and not event.text:
                    continue
                self._emit(job, Piece(matcher.push(event.text), event))
                if matcher.matched is not None:
                    job.cancel.set()
            elif isinstance(event, Started):
                self.metrics.prompt(event.prompt_tokens, event.reused_tokens)
                self._emit(job, event)
            elif isinstance(event, Finished):
                finished = event
        assert finished is not None  # _until_finished ends on one
        tail, reason = reply_end(matcher, streamed, finished)
        if tail:
            self._emit(job, Piece(tail))
        m = finished.metrics
        self._emit(job, Reply(reason, matcher.text, m, finished.error))
        return Record(job.id, reason, m.prompt_tokens, m.reused_tokens, m.generated_tokens)


def _until_finished(events: Iterable[Any]) -> Iterator[Any]:
    """The turn's events, ending with a ``Finished`` even if the turn's stream broke its contract."""
    for event in events:
        yield event
        if isinstance(event, Finished):
            return
    yield Finished("error", "", Metrics(), "generation ended without a result")


__all__ = ["VisionWorker"]
