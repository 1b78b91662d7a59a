"""What sending a message would cost, measured before it is sent: ``measure_prompt``.

Renders and trims the conversation exactly as the next reply will (``engine.generate.context.build_prompt``)
and compares the ids with what a KV cache holds, the way ``ChatSession`` reuses it, so the GUI can say
while the user types how many tokens the message is, how much of the context the turn will use, how many
tokens prefill must compute, and whether old messages will be left out; a conversation that ends with a reply is
counted as it is held (the context bar's figure), not answered. Plain counts cross back
(``PromptMeasure``); the forecast arithmetic on them is the GUI's (``app.window.forecast``). Owns no model, no
cache and no generation; runs on the thread that owns the model.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Sequence

from engine.events import Message
from engine.generate.context import build_prompt, content_tokens, held_ids

_UNKNOWN_CONTEXT = 1 << 30  # as ChatSession: a model that declares no context length is not bounded here


@dataclass(frozen=True)
class PromptMeasure:
    """Token counts of the turn that sending ``text`` would start."""

    text_tokens: int  # the message alone, without the template's markup
    prompt_tokens: int  # the whole rendered prompt after trimming (system + kept history + the message)
    cached_tokens: int  # of those, the prefix the KV cache already holds (never the last: it is computed)
    dropped_turns: int  # oldest messages the send would leave out to fit the context
    context_max: int  # the model's context length (0: the model does not say)
    reply_budget: int  # max new tokens the reply keeps (lower than asked when the context has less room)


def shared_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two id sequences."""
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def measure_prompt(loaded: Any, messages: Sequence[Message], max_new_tokens: int,
                   cached_ids: Sequence[int] = (), cancel: threading.Event | None = None) -> PromptMeasure:
    """Measure the turn answering ``messages`` (whose last is the message being written) with a reply budget
    of ``max_new_tokens``, given the ids the conversation's KV cache holds. Raises what ``build_prompt``
    raises (``ContextTooLongError`` when the message cannot fit, ``BadInputError``, ``TemplateError``).
    A conversation whose last message is a reply is counted as it stands (``_measure_held``): nothing to answer."""
    context_max = loaded.facts.context_length or 0
    if messages and messages[-1].role == "assistant":
        return _measure_held(loaded.tokenizer, messages, context_max, cached_ids, cancel)
    budget = min(max_new_tokens, context_max or _UNKNOWN_CONTEXT)
    prompt = build_prompt(loaded.tokenizer, messages, context_max or _UNKNOWN_CONTEXT, budget, cancel)
    text_tokens = content_tokens(loaded.tokenizer, [messages[-1].content])[0]
    cached = min(shared_prefix(cached_ids, prompt.ids), len(prompt.ids) - 1)
    return PromptMeasure(text_tokens, len(prompt.ids), max(0, cached), prompt.dropped_turns, context_max,
                         prompt.max_new_tokens)


def _measure_held(tokenizer: Any, messages: Sequence[Message], context_max: int, cached_ids: Sequence[int],
                  cancel: threading.Event | None) -> PromptMeasure:
    """A conversation that ends with a reply, counted as the context holds it (the context bar's figure for a
    conversation opened after its reply): its template tokens with no generation prompt (``held_ids``), untrimmed,
    no reply budget; ``text_tokens`` is the reply's own."""
    ids = held_ids(tokenizer, messages, cancel)
    text_tokens = content_tokens(tokenizer, [messages[-1].content])[0]
    return PromptMeasure(text_tokens, len(ids), shared_prefix(cached_ids, ids), 0, context_max, 0)
