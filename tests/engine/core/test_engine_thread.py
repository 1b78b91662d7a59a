"""``engine.core.engine_thread.EngineThread``: the core's own thread runs its jobs in order, ``call`` returns a result
or raises what was raised, and a closed thread refuses new work with a typed error."""

from __future__ import annotations

import threading

import pytest

from engine.core.core import EngineCore
from engine.core.engine_thread import EngineThread
from engine.core.jobs import QueuedJob, TaskJob, WorkerClosedError
from tests.engine.core.test_core import Recorder
from tests.engine.serve.conftest import wait_until


def test_jobs_run_in_order_on_the_engine_thread_and_calls_return_or_raise(home):
    reports = Recorder()
    thread = EngineThread(EngineCore(reports)).start()
    try:
        seen: list[int] = []
        for i in range(3):
            thread.post(TaskJob(lambda _loaded, _cancel, i=i: seen.append(i), needs_model=False))
        assert thread.call(threading.get_ident) == thread.ident != threading.get_ident()
        # The call's own job is counted just after it returns (the count follows a job's end): wait for it (bounded).
        assert seen == [0, 1, 2]
        wait_until(lambda: thread.jobs_run >= 4, "the call's job counted")
        assert thread.jobs_run == 4
        with pytest.raises(ZeroDivisionError):
            thread.call(lambda: 1 / 0)
        thread.run_job(TaskJob(lambda _loaded, _cancel: "done", needs_model=False))
        assert reports.of("task")[-1] == "done"
    finally:
        thread.close()
    assert thread.post(TaskJob(lambda _l, _c: None, needs_model=False)) is None
    with pytest.raises(WorkerClosedError):
        thread.call(lambda: None)


def test_a_clients_numbered_jobs_are_reported_done_and_those_queued_at_close_are_dropped(home):
    done: list[tuple[int, bool]] = []
    gate, started = threading.Event(), threading.Event()

    def hold(_loaded, cancel):
        started.set()
        gate.wait(60)  # liveness guard only
        return cancel.is_set()

    reports = Recorder()
    thread = EngineThread(EngineCore(reports), on_done=lambda q: done.append((q.job_id, q.cancel.is_set()))).start()
    assert thread.submit(QueuedJob(7, TaskJob(hold, needs_model=False)))
    assert thread.submit(QueuedJob(8, TaskJob(lambda _l, cancel: cancel.is_set(), needs_model=False)))
    assert started.wait(60)
    assert thread.close(timeout=0) is False  # the flags are set; the held job still runs
    gate.set()
    assert thread.close(timeout=60) is True
    assert done == [(7, True)]  # the running one saw its cancel; the queued one never ran
    assert not thread.submit(QueuedJob(9, TaskJob(lambda _l, _c: None, needs_model=False)))
