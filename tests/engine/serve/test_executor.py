"""The worker's executor hook: each request's model work runs on the thread the caller provides (as the window's
engine thread serves its API), behind the caller's own work on that thread; an executor that gives up on a request
(its thread is stopping) has it answered as cancelled - a 503 over HTTP - and the server keeps serving."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

import pytest

from engine.events import Message
from engine.inputs import SamplingConfig
from engine.serve.app import create_app
from engine.serve.server import BackgroundServer
from engine.serve.worker import Job, Piece, Record, Reply, Worker, WorkerClosedError
from tests.engine.serve.conftest import LIVENESS_S, Served, wait_until

HELLO = [{"role": "user", "content": "Hello"}]


class OwnerThread:
    """One thread that owns the model, as the window's engine thread does: the executor queues each request's
    model work on it, behind whatever else it was given."""

    def __init__(self) -> None:
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="model-owner")
        self.ran: list[str] = []  # what ran on it, in order
        self.names: set[str] = set()  # its thread's name

    def __call__(self, serve: Callable[[], Record]) -> Record:
        return self.pool.submit(self._run, "request", serve).result(LIVENESS_S)

    def _run(self, what: str, fn: Callable[[], Any]) -> Any:
        self.ran.append(what)
        self.names.add(threading.current_thread().name)
        return fn()

    def other_work(self, fn: Callable[[], Any]) -> Any:
        return self.pool.submit(self._run, "other", fn)


@pytest.fixture
def owner():
    thread = OwnerThread()
    yield thread
    thread.pool.shutdown(wait=True)


def _events_thread(worker: Worker, text: str) -> tuple[list[Any], set[str]]:
    """Submit one in-process request; its events and the names of the threads that emitted them."""
    events: list[Any] = []
    threads: set[str] = set()
    done = threading.Event()

    def emit(event: Any) -> None:
        threads.add(threading.current_thread().name)
        events.append(event)
        if isinstance(event, Reply):
            done.set()

    worker.submit(Job((Message("user", text),), SamplingConfig(temperature=0.0, max_new_tokens=6), emit))
    assert done.wait(LIVENESS_S)
    return events, threads


def test_by_default_the_workers_own_thread_serves(tiny_loaded):
    worker = Worker(tiny_loaded).start()
    try:
        events, threads = _events_thread(worker, "hi")
        assert threads == {"miaohui-serve-worker"}
        assert isinstance(events[-1], Reply) and events[-1].finish_reason == "length"
    finally:
        worker.close()


def test_the_executors_thread_serves_every_request_in_line_with_its_other_work(tiny_loaded, owner):
    worker = Worker(tiny_loaded, executor=owner).start()
    try:
        alone = Worker(tiny_loaded).start()
        try:
            expected, _ = _events_thread(alone, "hi")
        finally:
            alone.close()
        gate = threading.Event()
        blocker = owner.other_work(lambda: gate.wait(LIVENESS_S))  # the owner is busy with its own work
        result: dict[str, Any] = {}
        thread = threading.Thread(target=lambda: result.update(zip(("events", "threads"),
                                                                   _events_thread(worker, "hi"))))
        thread.start()
        wait_until(lambda: worker.running, "the request to leave the queue")  # now waiting behind the owner's work
        assert owner.ran == ["other"] and "events" not in result
        gate.set()
        thread.join(LIVENESS_S)
        assert blocker.result(LIVENESS_S) is True
        assert owner.ran == ["other", "request"]
        assert result["threads"] == owner.names and len(owner.names) == 1  # every event from the owner's thread
        assert [p.text for p in result["events"] if isinstance(p, Piece)] == \
               [p.text for p in expected if isinstance(p, Piece)]
        wait_until(lambda: worker.served == 1, "the request to be counted")  # counted just after its Reply
        assert worker.recent[-1].finish_reason == "length"
    finally:
        worker.close()


def test_an_executor_that_gives_up_gets_a_503_and_the_server_serves_on(tiny_loaded):
    refuse = {"next": True}

    def executor(serve: Callable[[], Record]) -> Record:
        if refuse["next"]:
            refuse["next"] = False
            raise WorkerClosedError("the owner is stopping")
        return serve()

    worker = Worker(tiny_loaded, executor=executor).start()
    http_server = BackgroundServer(create_app(worker)).start()
    served = Served(http_server.url, worker, http_server.port, key=None)
    try:
        status, _, body = served.raw("POST", "/v1/chat/completions", {"messages": HELLO, "max_tokens": 3})
        assert status == 503, body
        assert b"cancelled" in body and b"server_error" in body
        wait_until(lambda: worker.served == 1, "the request to be counted")
        assert worker.recent[-1].finish_reason == "cancelled"
        reply = served.client().chat.completions.create(model="default", messages=HELLO, max_tokens=3, temperature=0)
        assert reply.choices[0].finish_reason == "length" and reply.usage.completion_tokens == 3
    finally:
        http_server.stop()
        worker.close()
