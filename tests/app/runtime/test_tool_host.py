"""The question before a tool that may change something crosses threads without deadlock: the worker's side
waits on the request (polling its reply's cancel flag), the GUI's side answers it; both answers, a stop while
waiting, and a second answer (ignored) are checked with real threads."""

from __future__ import annotations

import threading
import time

import pytest

from app.runtime.tool_host import ConfirmRequest


def _wait_in_thread(request: ConfirmRequest, cancel: threading.Event) -> tuple[threading.Thread, list]:
    got: list = []
    thread = threading.Thread(target=lambda: got.append(request.wait(cancel)))
    thread.start()
    return thread, got


@pytest.mark.parametrize("allowed", [True, False])
def test_the_answer_from_another_thread_reaches_the_waiting_worker(allowed):
    request, cancel = ConfirmRequest("shout", '{"text": "hi"}'), threading.Event()
    thread, got = _wait_in_thread(request, cancel)
    time.sleep(0.3)
    assert thread.is_alive()  # it waits for the user, however long
    request.answer(allowed)
    thread.join(5)
    assert got == [allowed]
    request.answer(not allowed)  # a second answer (the dialog closing after its button) changes nothing
    assert request.wait(cancel) is allowed


def test_a_stop_while_waiting_ends_the_wait_without_an_answer():
    request, cancel = ConfirmRequest("crash", "{}"), threading.Event()
    thread, got = _wait_in_thread(request, cancel)
    time.sleep(0.2)
    cancel.set()
    thread.join(5)
    assert got == [None] and not thread.is_alive()
