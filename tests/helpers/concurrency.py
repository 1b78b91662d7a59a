"""Calls started at the same moment, one thread each: what the batching tests of the server and of the window's
server send (``all_at_once``)."""

from __future__ import annotations

import threading
from typing import Any, Callable


def all_at_once(call: Callable[[int], Any], count: int, timeout_s: float) -> list[Any]:
    """``call(i)`` for i in range(count), each on its own thread, released together by a barrier; the results in
    order, an exception in place of a result that raised (the caller's comparison reports it)."""
    results: list[Any] = [None] * count
    start = threading.Barrier(count)

    def one(i: int) -> None:
        start.wait(timeout_s)
        try:
            results[i] = call(i)
        except Exception as exc:  # noqa: BLE001  (reported by the comparison)
            results[i] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout_s)
    return results
