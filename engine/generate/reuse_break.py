"""Where a prompt stopped matching the KV cache, and why (issue 30's "Why this TTFT" marker and hint).

``find_break(tokenizer, cached_ids, ids, messages, dropped_turns)`` compares the ids the cache held before a reply
with the new prompt's: when they part at a token both have (not merely a longer prompt, nor a prompt the cache
already covers), it returns a ``ReuseBreak`` (``engine.events``): the token position, a few tokens of text either
side (what the prompt has there now and what the cache held), the message the position falls in (found by its text
in the decoded prompt; None in the template's markup between messages) and, when digits meet the break (a date or a
time in a system prompt that changes between turns), the changed value now and before. Everything from that
position on was computed again. Owns the comparison and the text around it; the session calls it once per reply
whose cache broke (one decode of the prompt, no model work).

Written here rather than taken from a library: no tokenizer or serving library reports where a prefix cache stopped
matching in terms of the conversation's messages.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from engine.events import Message, ReuseBreak
from engine.generate.context import common_prefix

AROUND = 4  # tokens of text shown before and after the break
# A changing value: digits, possibly joined into a date or time (2026-12-02, 14:05, 2026年12月2日, 02.12.2026).
_VALUE = re.compile(r"\d+(?:[-/:.年月日T ]\d+)*[年月日]?")


def _decode(tokenizer: Any, ids: Sequence[int]) -> str:
    return tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)


def _value_at(text: str, offset: int) -> str:
    """The digit run (a date, a time) that touches ``offset`` in ``text``; "" when none does."""
    for match in _VALUE.finditer(text):
        if match.start() <= offset + 1 and match.end() >= offset:
            return match.group(0).strip()
        if match.start() > offset + 1:
            break
    return ""


def _kept(messages: Sequence[Message], dropped_turns: int) -> list[tuple[int, Message]]:
    """The messages the prompt holds, with their index in ``messages`` (the oldest ``dropped_turns`` left out)."""
    indexed = list(enumerate(messages))
    if indexed and indexed[0][1].role == "system":
        return indexed[:1] + indexed[1 + dropped_turns:]
    return indexed[dropped_turns:]


def _message_at(text: str, offset: int, kept: list[tuple[int, Message]]) -> tuple[int | None, str]:
    cursor = 0
    for index, message in kept:
        if not message.content:
            continue
        start = text.find(message.content, cursor)
        if start < 0:
            continue
        end = start + len(message.content)
        if start <= offset < end:
            return index, message.role
        if offset < start:
            return None, ""  # the template's markup before this message
        cursor = end
    return None, ""


def find_break(tokenizer: Any, cached_ids: Sequence[int], ids: Sequence[int], messages: Sequence[Message] = (),
               dropped_turns: int = 0) -> ReuseBreak | None:
    """The first position where ``ids`` and ``cached_ids`` hold different tokens, described; None when they never
    differ at a position both hold (the cache was empty, fully reused, or longer than the prompt)."""
    position = common_prefix(cached_ids, ids)
    if position >= len(cached_ids) or position >= len(ids):
        return None
    prefix = _decode(tokenizer, ids[:position])
    offset = len(prefix)
    now_text = prefix + _decode(tokenizer, ids[position:])
    was_text = prefix + _decode(tokenizer, cached_ids[position:])
    index, role = _message_at(now_text, offset, _kept(messages, dropped_turns))
    return ReuseBreak(position=position, cached_tokens=len(cached_ids), recomputed_tokens=len(ids) - position,
                      message_index=index, role=role,
                      before=_decode(tokenizer, ids[max(0, position - AROUND):position]),
                      now=_decode(tokenizer, ids[position:position + AROUND]),
                      was=_decode(tokenizer, cached_ids[position:position + AROUND]),
                      changed_value=_value_at(now_text, offset), was_value=_value_at(was_text, offset))
