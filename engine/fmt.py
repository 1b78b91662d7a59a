"""The one home of the small text helpers that the engine, its command lines and the window all use.

Owns: an exception or text as one printable line (``one_line``), a string chosen outside this program as plain text
to show (``outside_text``), a reply's text for a terminal (``terminal_text``), the first index where two sequences differ (``first_difference``) and byte counts in
binary units (``format_bytes``: B, KiB, MiB, GiB, never "KB").
Pure Python, no torch and no Qt, so the window can import it without loading the engine.
"""
from __future__ import annotations

import re
from collections.abc import Sequence

from engine.errors import printable

_UNITS = (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))
# Unicode's bidirectional controls: a name holding them is shown in another order than it is read ("Trojan
# Source"), e.g. a model id whose letters reverse the rest of a status line.
_BIDI = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
MAX_OUTSIDE_CHARS = 200  # a model name, a file name: past this it is cut with "…", never a wall of text


def one_line(value: object, *, max_chars: int | None = None, name_type: bool = False) -> str:
    """The first non-blank line of ``value`` (an exception or any text), control characters escaped.

    An exception with no text reads as its class name; ``name_type`` prefixes the class name anyway
    ("ValueError: …"), for messages whose reader needs to know what failed. ``max_chars`` cuts a long line with "…".
    """
    line = next((part.strip() for part in str(value).splitlines() if part.strip()), "")
    if isinstance(value, BaseException) and (name_type or not line):
        line = f"{type(value).__name__}: {line}" if line else type(value).__name__
    if max_chars is not None and len(line) > max_chars:
        line = line[:max_chars] + "…"
    return printable(line)


def outside_text(value: object, *, max_chars: int = MAX_OUTSIDE_CHARS) -> str:
    """A string someone else chose (a server's model name or error text, a hub's file name) as plain text to show.

    Control characters are escaped (``printable``: no terminal escape or bell, no forged second line), and so are
    the bidirectional controls; a text longer than ``max_chars`` is cut with "…". Markup is left as the characters
    it is: a terminal shows them as they are, and every Qt widget that shows such a text is set to plain text
    (``Qt.TextFormat.PlainText``), so ``<b>`` is never bold and ``<img>`` never loads.
    """
    text = str(value)
    if len(text) > max_chars:
        text = text[:max_chars] + "…"
    return _BIDI.sub(lambda match: f"\\u{ord(match.group()):04x}", printable(text))


def terminal_text(text: str) -> str:
    """A reply's text as ``engine chat`` writes it to a terminal: lines and tabs kept, every other control character
    (ESC, BEL, a carriage return that would overwrite the line) and the bidirectional controls escaped.

    A server, or a model, can put terminal escapes in a reply (a changed window title, a faked prompt, a
    hyperlink); they reach the screen as the characters ``\\x1b…``, never as commands. Streamed text goes through
    this piece by piece, so an escape sequence split across pieces is escaped all the same (each character is)."""
    return "\n".join("\t".join(outside_text(part, max_chars=len(part)) for part in line.split("\t"))
                     for line in text.split("\n"))


def first_difference(a: Sequence[object], b: Sequence[object]) -> int | None:
    """The first index where ``a`` and ``b`` differ (strings or token ids); ``None`` when they are equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def format_rate(bytes_per_s: float | None) -> str:
    """A bandwidth in GB/s, decimal as bandwidths are quoted (sizes stay binary: ``format_bytes``); two decimals
    below 10 GB/s, where a busy machine's decode lives. None or 0 reads as "—"."""
    if not bytes_per_s:
        return "—"
    return f"{bytes_per_s / 1e9:.2f} GB/s" if bytes_per_s < 10e9 else f"{bytes_per_s / 1e9:.1f} GB/s"


def format_bytes(value: float | None, digits: int = 1) -> str:
    """Bytes in the largest binary unit that keeps the number at least 1 ("22.5 MiB"); exact below 1 KiB.

    ``None`` (a figure that cannot be known) reads as "—".
    """
    if value is None:
        return "—"
    for unit, size in _UNITS:
        if abs(value) >= size:
            return f"{value / size:.{digits}f} {unit}"
    return f"{int(value)} B"
