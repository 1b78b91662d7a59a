"""The app's one way to run background work other than the engine's own (that is ``app.runtime.bridge``'s worker
thread): ``TaskRunner``, whose results come back as queued signals to the GUI thread. The Models window's
``engine.library`` calls, a server's model list (``app.widgets.remote_dialog``) and its ``/metrics`` readings
(``app.window.remote_source``) all run through it.

``TaskRunner.submit(fn, on_done, on_failed, on_progress)`` runs ``fn`` on one of the runner's threads;
``on_done(result)`` or ``on_failed(exc)`` then runs on the GUI thread (a QObject's slot: not at all once that object
is gone). With ``with_report=True`` ``fn`` gets one argument, ``report(value)``, to send progress to
``on_progress``; every report is delivered, in order, before the result (the receiver rate-limits its redraws).
``error_line(exc)`` turns any exception into the one line the window shows (an ``EngineError``'s own message;
anything else its type and first line, with the traceback logged, never shown).

The threads: by default a private ``QThreadPool`` (``max_threads`` at once, the rest queued), which ``wait`` waits
for and which is waited for when the runner goes (a download pauses before the app quits). ``daemon=True`` runs each
task on a daemon thread instead, never waited for: for calls that only wait on the network, own nothing and carry
their own timeouts (a server that never answers must not hold the window's closing).

Owns the threads and the hand-over to the GUI thread; not what runs (its callers decide) nor how it looks.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable

from PySide6.QtCore import QObject, QRunnable, QThreadPool, Signal, Slot

from engine.errors import EngineError
from engine.fmt import one_line

log = logging.getLogger(__name__)

MAX_THREADS = 4  # a download, a search, a model page and a fit estimate can all be under way at once


def error_line(exc: BaseException) -> str:
    """The one line a user sees for ``exc``."""
    if isinstance(exc, EngineError):
        return one_line(str(exc), max_chars=400)
    return one_line(exc, max_chars=300, name_type=True)


class _Relay(QObject):
    """Lives on the GUI thread; emitted from a pool thread, so its slots run queued on the GUI thread."""

    done = Signal(object)
    failed = Signal(object)
    progress = Signal(object)


class _Task(QRunnable):
    def __init__(self, fn: Callable[..., Any], relay: _Relay, with_report: bool) -> None:
        super().__init__()
        self.setAutoDelete(True)
        self._fn, self._relay, self._with_report = fn, relay, with_report

    def _report(self, value: Any) -> None:
        self._relay.progress.emit(value)

    def run(self) -> None:
        try:
            result = self._fn(self._report) if self._with_report else self._fn()
        except Exception as exc:  # noqa: BLE001 - every failure becomes one line in the window
            if not isinstance(exc, EngineError):
                log.error("background task failed", exc_info=True)
            self._relay.failed.emit(exc)
        else:
            self._relay.done.emit(result)
        finally:
            self._relay = None  # type: ignore[assignment]  # the runner deletes it on the GUI thread


class TaskRunner(QObject):
    """Runs tasks off the GUI thread; ``busy()`` while any task's result is still to be delivered."""

    def __init__(self, parent: QObject | None = None, max_threads: int = MAX_THREADS, daemon: bool = False,
                 name: str = "miaohui-background") -> None:
        super().__init__(parent)
        self._daemon, self._name = daemon, name
        self._pool = QThreadPool(self)
        self._pool.setMaxThreadCount(max_threads)
        self._live: set[_Relay] = set()  # kept until delivered: a queued signal needs its sender alive

    def submit(self, fn: Callable[..., Any], on_done: Callable[[Any], None], on_failed: Callable[[BaseException], None],
               on_progress: Callable[[Any], None] | None = None, with_report: bool = False) -> None:
        relay = _Relay()
        self._live.add(relay)
        relay.done.connect(on_done)
        relay.failed.connect(on_failed)
        relay.done.connect(self._on_delivered)
        relay.failed.connect(self._on_delivered)
        if on_progress is not None:
            relay.progress.connect(on_progress)
        task = _Task(fn, relay, with_report)
        if self._daemon:
            threading.Thread(target=task.run, name=self._name, daemon=True).start()
        else:
            self._pool.start(task)

    @Slot(object)
    def _on_delivered(self, _value: object) -> None:
        relay = self.sender()
        self._live.discard(relay)  # type: ignore[arg-type]
        if relay is not None:
            relay.deleteLater()

    def busy(self) -> bool:
        return bool(self._live)

    def wait(self, timeout_ms: int) -> bool:
        """Wait for the running tasks (daemon ones never); True when none is left."""
        return self._pool.waitForDone(timeout_ms)
