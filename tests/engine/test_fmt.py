"""engine/fmt.py's terminal_text: a reply's control characters reach a terminal as their escapes, lines kept."""

from __future__ import annotations

from engine.fmt import terminal_text


def test_a_reply_s_terminal_escapes_are_shown_not_obeyed():
    assert terminal_text("a\x1b]0;pwned\x07b") == "a\\x1b]0;pwned\\x07b"
    assert terminal_text("line one\nline\ttwo") == "line one\nline\ttwo"  # newlines and tabs stay
    assert terminal_text("over\rwrite") == "over\\rwrite"  # a carriage return would overwrite the line
    assert terminal_text("abc\u202edcba") == "abc\\u202edcba"  # no reordering of what follows
    long = "很长的回答" * 100
    assert terminal_text(long) == long  # never cut, unlike a name
    # Piece by piece, as the stream writes it, an escape split across pieces is escaped all the same.
    assert terminal_text("Hi \x1b]0;pw") + terminal_text("ned\x07") == terminal_text("Hi \x1b]0;pwned\x07")


def test_bandwidths_read_in_decimal_gb_per_second():
    from engine.fmt import format_rate

    assert format_rate(6.0e9) == "6.00 GB/s" and format_rate(26.9e9) == "26.9 GB/s"
    assert format_rate(None) == "—" and format_rate(0) == "—"
