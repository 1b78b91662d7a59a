"""Idle connections cannot exhaust the server: a request whose headers never finish is closed after the header
timeout (dribbling bytes does not extend it), an idle keep-alive connection after its own, and past the connection
cap the connection that has waited longest for its headers makes room, so a real request is still answered. The
real server (uvicorn on 127.0.0.1, the tiny model); socket counts stay well under a 1024 file limit."""

from __future__ import annotations

import logging
import socket
import threading

import pytest

from engine.serve.app import create_app
from engine.serve.server import BackgroundServer, ConnectionLimits
from engine.serve.worker import Worker
from tests.engine.serve.conftest import LIVENESS_S, HeldJob, Served, wait_until

IDLE = 300
PARTIAL = b"GET /v1/models HTT"  # a request line that never ends


def _serve(loaded, limits: ConnectionLimits) -> tuple[Served, BackgroundServer, Worker]:
    worker = Worker(loaded).start()
    http_server = BackgroundServer(create_app(worker), limits=limits).start()
    return Served(http_server.url, worker, http_server.port, key=None), http_server, worker


def _closed_by_server(sock: socket.socket) -> bool:
    """True once the server has closed ``sock`` (EOF or reset); False while it stays open."""
    sock.settimeout(0.0)
    try:
        while chunk := sock.recv(4096):
            del chunk  # a refusal's 503 may come first: read on to the end
        return True
    except BlockingIOError:
        return False
    except OSError:  # reset
        return True


def _open_partial(port: int, n: int) -> list[socket.socket]:
    socks = []
    for _ in range(n):
        sock = socket.create_connection(("127.0.0.1", port), timeout=LIVENESS_S)
        sock.sendall(PARTIAL)
        socks.append(sock)
    return socks


@pytest.fixture()
def served(tiny_loaded):
    served, http_server, worker = _serve(tiny_loaded, ConnectionLimits(header_timeout_s=2.0, body_timeout_s=2.0,
                                                                       keep_alive_s=1.0, max_connections=64))
    yield served
    http_server.stop()
    worker.close()


def test_hundreds_of_unfinished_requests_leave_the_server_answering_and_are_closed(served):
    idle = _open_partial(served.port, IDLE)
    try:
        reply = served.client().chat.completions.create(
            model="default", messages=[{"role": "user", "content": "Hi"}], max_tokens=2, temperature=0)
        assert reply.choices[0].finish_reason in ("stop", "length")
        wait_until(lambda: all(_closed_by_server(s) for s in idle), "the server to close every unfinished request")
        status, _, _ = served.raw("GET", "/health")
        assert status == 200
    finally:
        for sock in idle:
            sock.close()


def test_dribbling_a_request_byte_by_byte_does_not_keep_it_open(served):
    sock = socket.create_connection(("127.0.0.1", served.port), timeout=LIVENESS_S)
    stop = threading.Event()

    def dribble() -> None:  # one byte of an endless header every 0.2 s: always under any idle timeout
        try:
            sock.sendall(b"GET /health HTTP/1.1\r\nX-Slow: ")
            while not stop.wait(0.2):
                sock.sendall(b"a")
        except OSError:
            pass  # the server closed it: what the test waits for

    thread = threading.Thread(target=dribble, daemon=True)
    thread.start()
    try:
        wait_until(lambda: _closed_by_server(sock) or not thread.is_alive(),
                   "the server to close a request whose headers never end")
    finally:
        stop.set()
        thread.join(LIVENESS_S)
        sock.close()


def test_a_body_that_never_ends_is_closed_without_a_traceback(served):
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logging.getLogger("uvicorn.error").addHandler(handler)
    sock = socket.create_connection(("127.0.0.1", served.port), timeout=LIVENESS_S)
    try:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100000\r\n\r\n{\"messages\": ")
        wait_until(lambda: _closed_by_server(sock), "the server to close a request whose body never ends")
        wait_until(lambda: served.worker.alive and served.raw("GET", "/health")[0] == 200, "the server to answer")
    finally:
        sock.close()
        logging.getLogger("uvicorn.error").removeHandler(handler)
    assert not [r for r in records if r.exc_info], [r.getMessage() for r in records]


def test_an_idle_keep_alive_connection_is_closed(served):
    sock = socket.create_connection(("127.0.0.1", served.port), timeout=LIVENESS_S)
    try:
        sock.sendall(f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{served.port}\r\n\r\n".encode())
        assert sock.recv(4096).startswith(b"HTTP/1.1 200")
        wait_until(lambda: _closed_by_server(sock), "the server to close an idle keep-alive connection")
    finally:
        sock.close()


def test_past_the_cap_with_every_connection_busy_a_new_one_is_refused_with_503(tiny_loaded):
    served, http_server, worker = _serve(tiny_loaded, ConnectionLimits(max_connections=3))
    held = HeldJob(worker)  # the worker is busy: requests sent now wait in its queue, their connections busy
    busy = []
    try:
        body = b'{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}'
        for _ in range(3):
            sock = socket.create_connection(("127.0.0.1", served.port), timeout=LIVENESS_S)
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            busy.append(sock)
        wait_until(lambda: worker.waiting == 3, "three requests waiting")
        with socket.create_connection(("127.0.0.1", served.port), timeout=LIVENESS_S) as extra:
            answer = b""
            while chunk := extra.recv(4096):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 503") and b'"code":"too_many_connections"' in answer.replace(b" ", b"")
        held.release()
        for sock in busy:  # the busy ones were never cut off: each gets its answer
            assert sock.recv(4096).startswith(b"HTTP/1.1 200")
    finally:
        held.release()
        for sock in busy:
            sock.close()
        http_server.stop()
        worker.close()

