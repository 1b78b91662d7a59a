"""Stop strings over a stream of text deltas: ``StopMatcher``.

OpenAI's ``stop``: the reply ends where the text first contains one of the strings, and the string is
not part of the reply. Text arrives a token at a time, so a delta ending with the start of a stop string
("Obs" of "Observation:") is held back until the next delta shows whether the string completes; anything
already let out can never become part of a match. This module knows nothing of tokens or models.
"""

from __future__ import annotations

from collections.abc import Iterable


class StopMatcher:
    """Feed deltas with ``push``; it returns the text safe to show and sets ``matched`` on a stop."""

    def __init__(self, stops: Iterable[str]) -> None:
        self.stops = tuple(s for s in stops if s)
        self.matched: str | None = None  # the stop string that ended the text, once one has
        self._held = ""  # a tail that could still be the start of a stop string
        self._shown: list[str] = []

    def push(self, delta: str) -> str:
        """Add ``delta``; return the text that can be shown now ("" while held back or after a stop)."""
        if self.matched is not None or not delta:
            return ""
        if not self.stops:
            self._shown.append(delta)
            return delta
        buffer = self._held + delta
        hits = [(index, stop) for stop in self.stops if (index := buffer.find(stop)) >= 0]
        if hits:
            index, stop = min(hits)
            self.matched, self._held = stop, ""
            return self._show(buffer[:index])
        keep = max((k for stop in self.stops for k in range(min(len(stop) - 1, len(buffer)), 0, -1)
                    if buffer.endswith(stop[:k])), default=0)
        self._held = buffer[len(buffer) - keep:] if keep else ""
        return self._show(buffer[:len(buffer) - keep])

    def flush(self) -> str:
        """At the end of the reply: the held-back tail, which no stop string completed."""
        held, self._held = self._held, ""
        return "" if self.matched is not None else self._show(held)

    @property
    def text(self) -> str:
        """Everything shown so far."""
        return "".join(self._shown)

    def _show(self, text: str) -> str:
        if text:
            self._shown.append(text)
        return text
