"""Ctrl-C for the long sub-commands: the first press asks the work to stop cleanly, a second one interrupts.

Owns one context manager, ``first_ctrl_c_sets(event)``: inside it, the first SIGINT sets ``event`` (the engine
polls it every decode step, a download every chunk) and restores Python's own handler, so a second press raises
``KeyboardInterrupt`` (exit 130 from ``engine/__main__.py``). Off the main thread signals cannot be handled, and
it does nothing. The previous handler is back when the block ends.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any


@dataclass
class Interrupt:
    """Whether Ctrl-C was pressed inside the block (mutable: the signal handler sets it)."""

    pressed: bool = False


@contextmanager
def first_ctrl_c_sets(event: threading.Event) -> Iterator[Interrupt]:
    """Set ``event`` on the first Ctrl-C inside the block; see the module docstring."""
    state = Interrupt()

    def on_sigint(_signum: int, _frame: Any) -> None:
        state.pressed = True
        event.set()
        signal.signal(signal.SIGINT, signal.default_int_handler)

    previous = (signal.signal(signal.SIGINT, on_sigint)
                if threading.current_thread() is threading.main_thread() else None)
    try:
        yield state
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
