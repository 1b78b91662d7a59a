"""app.runtime.background.TaskRunner: results and failures come back on the GUI thread, from its pool or (daemon=True)
from daemon threads that nobody waits for, as a server's model list and /metrics readings need (issue 30)."""

from __future__ import annotations

import threading

from PySide6.QtCore import QObject, QThread, Slot

from app.runtime.background import TaskRunner, error_line
from engine.remote import RemoteError


class _Receiver(QObject):
    def __init__(self) -> None:
        super().__init__()
        self.got: list[tuple[str, object, bool]] = []  # (what, value, on the GUI thread)

    @Slot(object)
    def on_done(self, value: object) -> None:
        self.got.append(("done", value, QThread.currentThread() is self.thread()))

    @Slot(object)
    def on_failed(self, exc: object) -> None:
        self.got.append(("failed", exc, QThread.currentThread() is self.thread()))


def test_a_daemon_task_delivers_its_result_and_failure_on_the_gui_thread(qtbot):
    runner, receiver = TaskRunner(daemon=True, name="test-daemon"), _Receiver()
    names: list[str] = []

    def work() -> int:
        names.append(threading.current_thread().name)
        assert threading.current_thread().daemon
        return 42

    def fail() -> None:
        raise RemoteError("the server did not answer in time")

    runner.submit(work, receiver.on_done, receiver.on_failed)
    runner.submit(fail, receiver.on_done, receiver.on_failed)
    qtbot.waitUntil(lambda: len(receiver.got) == 2 and not runner.busy(), timeout=5000)
    assert sorted((what, on_gui) for what, _value, on_gui in receiver.got) == [("done", True), ("failed", True)]
    assert ("done", 42, True) in receiver.got and names == ["test-daemon"]
    failure = next(value for what, value, _ in receiver.got if what == "failed")
    assert error_line(failure) == "the server did not answer in time"


def test_a_daemon_task_that_hangs_is_never_waited_for(qtbot):
    runner, receiver, release = TaskRunner(daemon=True), _Receiver(), threading.Event()
    runner.submit(lambda: release.wait(30), receiver.on_done, receiver.on_failed)
    assert runner.busy() and runner.wait(0)  # nothing in the pool: closing the window would not block on it
    release.set()
    qtbot.waitUntil(lambda: receiver.got == [("done", True, True)], timeout=5000)


def test_pool_tasks_are_waited_for(qtbot):
    runner, receiver, release = TaskRunner(max_threads=1), _Receiver(), threading.Event()
    runner.submit(lambda: release.wait(30), receiver.on_done, receiver.on_failed)
    assert not runner.wait(50)  # the Models window waits for its download to pause before the app quits
    release.set()
    assert runner.wait(5000)
    qtbot.waitUntil(lambda: receiver.got == [("done", True, True)], timeout=5000)
