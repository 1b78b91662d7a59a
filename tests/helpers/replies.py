"""One whole reply of a ``ChatSession`` as token ids and its ``Finished`` (the speculation and KV-cache tests compare
replies token for token), and the repeat-heavy prompt those tests share (prompt lookup has something to copy).
Owns nothing else.
"""

from __future__ import annotations

from engine.events import Finished, Message, Token
from engine.generate.session import ChatSession
from engine.inputs import SamplingConfig

REPEAT = ("Copy this list exactly: alpha beta gamma delta, alpha beta gamma delta, alpha beta gamma delta, "
          "one two three four five, one two three four five.")


def reply(session: ChatSession, config: SamplingConfig, text: str = REPEAT) -> tuple[list[int], Finished]:
    """The token ids of one reply to ``text`` and how it finished (a length or end-of-sequence stop, else it fails)."""
    ids, finished = [], None
    for event in session.generate([Message("user", text)], config):
        if isinstance(event, Token):
            ids.append(event.token_id)
        elif isinstance(event, Finished):
            finished = event
    assert finished is not None and finished.reason in ("length", "eos"), finished
    return ids, finished
