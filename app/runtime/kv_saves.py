"""The queue of conversations whose KV cache goes to disk when the engine is idle (issue 29): ``KVSaves``.

``Bridge.keep_on_disk`` hands it the conversation the user switched away from; it posts one ``PersistJob`` at a
time, only while the GUI has no job running, so a reply waits for at most the write in progress. A save posted
before a reply was asked for gives way to it (the worker checks when the save starts) and is posted again once the
engine is idle; a save that ran is not, whenever the reply was asked for: only the worker knows which happened, so
the job's ``wanted`` records it (it once wrote the same conversation twice, when a reply came during the write).
Owns the order and the bookkeeping of saves; not the writing (``engine.core.kv_persist``) nor when the user
switches (``app.window.kv_keeping``).
"""

from __future__ import annotations

import collections
import threading
from typing import Callable

from engine.core.engine_thread import EngineThread
from app.runtime.worker import PersistJob, QueuedJob


class KVSaves:
    """One save at a time on ``engine``'s queue. ``next_id`` numbers its jobs among the bridge's; ``asked`` is how
    many jobs the GUI has asked for so far (a save gives way to any asked for after it was posted)."""

    def __init__(self, engine: EngineThread, next_id: Callable[[], int], asked: Callable[[], int]) -> None:
        self._engine, self._next_id, self._asked = engine, next_id, asked
        self._waiting: collections.deque[int] = collections.deque()  # conversations to keep on disk, when idle
        # The save posted now: (job id, conversation, set by the worker when the save gave way to a reply).
        self._posted: tuple[int, int, threading.Event] | None = None

    def pending(self) -> bool:
        """True while a conversation's cache waits to be written or is being written."""
        return self._posted is not None or bool(self._waiting)

    def keep(self, conversation_id: int) -> None:
        """Write ``conversation_id``'s cache once the engine is idle (``post_when_idle``), after those asked before."""
        if conversation_id not in self._waiting:
            self._waiting.append(conversation_id)

    def forget(self, conversation_id: int) -> None:
        """``conversation_id`` was deleted: not written any more (a save of it in progress ends first)."""
        if conversation_id in self._waiting:
            self._waiting.remove(conversation_id)
        self._engine.submit(QueuedJob(0, PersistJob(conversation_id, forget=True)))

    def post_when_idle(self, idle: bool) -> None:
        """Post the next save if the GUI has no job running (``idle``) and no save is posted."""
        if not idle or self._posted is not None or not self._waiting:
            return
        conversation_id, asked, gave_way = self._waiting.popleft(), self._asked(), threading.Event()

        def wanted() -> bool:  # on the worker, when the save starts: a reply asked for since goes first
            if self._asked() != asked:  # an int read is atomic
                gave_way.set()
            return not gave_way.is_set()

        self._posted = (self._next_id(), conversation_id, gave_way)
        self._engine.submit(QueuedJob(self._posted[0], PersistJob(conversation_id, wanted)))

    def finished(self, job_id: int) -> bool:
        """The engine reported ``job_id`` done: True if it was the posted save (one that gave way waits again, first)."""
        if self._posted is None or job_id != self._posted[0]:
            return False
        _, conversation_id, gave_way = self._posted
        self._posted = None
        if gave_way.is_set() and conversation_id not in self._waiting:
            self._waiting.appendleft(conversation_id)
        return True


__all__ = ["KVSaves"]
