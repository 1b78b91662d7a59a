"""engine chat's prefill progress line: on a real pseudo-terminal it counts up in percent and is erased at 100 %;
a stream that is not a terminal and a short prompt get nothing."""

from __future__ import annotations

import io
import os

from engine.cli.prefill_line import PrefillLine
from engine.events import PrefillProgress


def _read_all(master: int) -> str:
    """Everything written to the terminal (its slave end closed: reading ends with EIO)."""
    data = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:
            break
        if not chunk:
            break
        data += chunk
    os.close(master)
    return data.decode("utf-8")


def test_a_long_prompt_on_a_terminal_counts_up_and_is_erased():
    master, slave = os.openpty()
    with open(slave, "w", encoding="utf-8", closefd=True) as tty:
        line = PrefillLine(tty, long_prompt=512)
        for done in (256, 512, 768, 1000):
            line.show(PrefillProgress(done, 1000))
    written = _read_all(master)
    shown = [part.strip() for part in written.split("\r") if part.strip()]
    assert shown == ["prefill 25 % (256/1000 tokens)", "prefill 51 % (512/1000 tokens)",
                     "prefill 76 % (768/1000 tokens)"]
    assert written.endswith("\r")  # the finished line blanked and the cursor back at its start


def test_no_terminal_or_a_short_prompt_prints_nothing():
    stream = io.StringIO()
    line = PrefillLine(stream, long_prompt=512)
    for done in (256, 1000):
        line.show(PrefillProgress(done, 1000))
    assert stream.getvalue() == ""
    master, slave = os.openpty()
    with open(slave, "w", encoding="utf-8", closefd=True) as tty:
        short = PrefillLine(tty, long_prompt=512)
        short.show(PrefillProgress(100, 200))
        tty.write("x")
    assert _read_all(master) == "x"
