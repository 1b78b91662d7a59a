"""The words of the "Cache stopped matching" row (issue 30): a ``ReuseBreak``'s marker — the few tokens around the
first prompt token the KV cache held something else for, ⟦ ⟧ around where they part, and the message it falls in —
and its hint: a changed value (a date, a time) in a message the cache had seen says what changed and how many tokens
that cost. Owns the wording only, built from the break's typed fields (position, role, message index, token counts),
never by translating an engine string; every text is a literal ``translate("TtftView", …)`` call, so that lupdate
finds it (a helper taking the text as a variable hid them from it, and they showed in English in the Chinese window).
The engine finds the break (``engine.generate.reuse_break``).
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QCoreApplication

SHOWN_CHARS = 24  # of each side's tokens: the marker stays one line in the panel


translate = QCoreApplication.translate  # called by this name, lupdate finds every text


def _visible(text: str, keep_end: bool = False) -> str:
    """Whitespace made visible (a newline as ⏎), cut to ``SHOWN_CHARS`` from the side away from the break."""
    text = text.replace("\r", "").replace("\n", "⏎").replace("\t", "→")
    if len(text) > SHOWN_CHARS:
        text = "…" + text[-SHOWN_CHARS:] if keep_end else text[:SHOWN_CHARS] + "…"
    return text


def where(broke: Any) -> str:
    """The message the break falls in, in words."""
    if broke.message_index is None:
        return translate("TtftView", "the chat template's markup")
    if broke.role == "system":
        return translate("TtftView", "the system prompt")
    n = broke.message_index + 1
    if broke.role == "user":
        return translate("TtftView", "message {n} (yours)").format(n=n)
    return translate("TtftView", "message {n} (a reply)").format(n=n)


def break_text(_owner: Any, broke: Any) -> str:
    """Marker line, then the hint line: what changed and the tokens it cost."""
    marker = translate("TtftView", "token {position} in {where}: “{before}⟦{now}⟧” (the cache had “⟦{was}⟧”)").format(
        position=broke.position, where=where(broke), before=_visible(broke.before, keep_end=True),
        now=_visible(broke.now), was=_visible(broke.was))
    if broke.changed_value:
        hint = translate("TtftView", "{where} changed at “{value}” (was “{was}”), so {n} tokens were recomputed.")
        hint = hint.format(where=where(broke), value=broke.changed_value, was=broke.was_value or "—",
                           n=broke.recomputed_tokens)
    else:
        hint = translate("TtftView", "{where} changed there, so {n} tokens were recomputed.").format(where=where(broke),
                                                                                  n=broke.recomputed_tokens)
    return f"{marker}\n{hint[:1].upper()}{hint[1:]}"
