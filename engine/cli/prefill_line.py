"""``engine chat``'s prefill progress on a terminal (issue 30): while a long prompt prefills, one line on stderr,
rewritten in place once per chunk (``PrefillProgress``): "prefill 42 % (430/1024 tokens)", erased when the prompt is
in, so the reply starts on a clean line. Only when stderr is a terminal and the prompt's new tokens are at least
``LONG_PROMPT`` (a short prompt is in before anyone could read it); ``--json`` and a redirected stderr never see it.
Owns that line only.
"""

from __future__ import annotations

import sys
from typing import TextIO

from engine.events import PrefillProgress

LONG_PROMPT = 512  # new prompt tokens from which progress is worth a line (two chunks or more)


class PrefillLine:
    """``show(event)`` for each ``PrefillProgress``; writes only to a terminal, only for a long prompt."""

    def __init__(self, stream: TextIO | None = None, long_prompt: int = LONG_PROMPT) -> None:
        self._stream = stream if stream is not None else sys.stderr
        try:
            self._on = self._stream.isatty()
        except (AttributeError, ValueError):
            self._on = False
        self._long = long_prompt
        self._width = 0

    def show(self, event: PrefillProgress) -> None:
        if not self._on or event.total < self._long:
            return
        if event.done >= event.total:
            text = ""
        else:
            text = f"prefill {100 * event.done // event.total} % ({event.done}/{event.total} tokens)"
        self._stream.write("\r" + text.ljust(self._width) + ("\r" if not text else ""))
        self._stream.flush()
        self._width = max(self._width, len(text))
