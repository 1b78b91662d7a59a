"""engine/cli/interrupt.py: the first Ctrl-C sets the event, a second one interrupts, the handler comes back."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from engine.cli.interrupt import first_ctrl_c_sets


def test_first_ctrl_c_sets_the_event_the_second_interrupts_and_the_handler_is_restored():
    before = signal.getsignal(signal.SIGINT)
    event = threading.Event()
    with pytest.raises(KeyboardInterrupt):
        with first_ctrl_c_sets(event) as interrupt:
            os.kill(os.getpid(), signal.SIGINT)
            assert event.is_set() and interrupt.pressed
            os.kill(os.getpid(), signal.SIGINT)  # the second press is Python's own KeyboardInterrupt
    assert signal.getsignal(signal.SIGINT) is before


def test_off_the_main_thread_it_does_nothing():
    seen: list[bool] = []

    def work() -> None:
        with first_ctrl_c_sets(threading.Event()) as interrupt:
            seen.append(interrupt.pressed)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert seen == [False]
