"""A real server for the serve tests: the tiny model, a ``Worker``, the FastAPI app and uvicorn on an ephemeral
port of 127.0.0.1 in a background thread; the official ``openai`` client and ``http.client`` talk to it."""

from __future__ import annotations

import http.client
import json
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

import openai
import pytest

from engine.events import Message
from engine.inputs import LoadSpec, SamplingConfig
from engine.models.loader import load_model
from engine.serve.app import create_app
from engine.serve.server import BackgroundServer
from engine.serve.worker import Job, Piece, Reply, Worker

KEY = "sk-test-key"
LIVENESS_S = 60  # generous: only a guard against a hung server, never a measurement


@dataclass
class Served:
    """A running server: its base URL, its worker, and what it was started with."""

    url: str
    worker: Worker
    port: int
    key: str | None = KEY

    def client(self, **kwargs: Any) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url + "/v1", api_key=self.key or "none", max_retries=0,
                             timeout=LIVENESS_S, **kwargs)

    def raw(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None,
            key: str | None = "default") -> tuple[int, dict[str, str], bytes]:
        """One request with http.client; ``body`` a dict (sent as JSON) or bytes as they are."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=LIVENESS_S)
        try:
            sent = {"Content-Type": "application/json"}
            if key == "default":
                key = self.key
            if key is not None:
                sent["Authorization"] = f"Bearer {key}"
            sent.update(headers or {})
            data = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
            conn.request(method, path, body=data, headers=sent)
            response = conn.getresponse()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
        finally:
            conn.close()


def start_server(loaded: Any, *, key: str | None = KEY, **options: Any) -> tuple[Served, Callable[[], None]]:
    """Start worker + HTTP server; returns the handle and the function that stops both."""
    worker_options = {k: options.pop(k) for k in ("max_queue", "sessions", "parallel", "speculation", "executor")
                      if k in options}
    worker = Worker(loaded, **worker_options).start()
    http_server = BackgroundServer(create_app(worker, api_key=key, **options)).start()

    def stop() -> None:
        http_server.stop()
        worker.close()

    return Served(http_server.url, worker, http_server.port, key), stop


@pytest.fixture(scope="module")
def tiny_loaded(tiny_model_dir):
    return load_model(LoadSpec(model=str(tiny_model_dir), precision="fp32", device="cpu"))


@pytest.fixture(scope="module")
def server(tiny_loaded):
    served, stop = start_server(tiny_loaded, max_body_bytes=64 * 1024)
    yield served
    stop()


def wait_until(condition: Callable[[], bool], what: str, timeout: float = LIVENESS_S) -> None:
    """Poll ``condition`` until it holds; fail (never hang) after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.005)


class HeldJob:
    """An in-process request (as the window would submit one) whose consumer holds the worker on its first
    token until ``release()``: the worker is then provably busy, with no timing assumption."""

    def __init__(self, worker: Worker) -> None:
        self.holding = threading.Event()
        self._release = threading.Event()
        self.reply: Reply | None = None
        self.job = Job((Message("user", "hold the worker"),), SamplingConfig(temperature=0.0, max_new_tokens=4),
                       self._emit)
        worker.submit(self.job)
        if not self.holding.wait(LIVENESS_S):
            pytest.fail("the worker never started the held job")

    def _emit(self, event: Any) -> None:
        if isinstance(event, Piece) and not self.holding.is_set():
            self.holding.set()
            self._release.wait(LIVENESS_S)
        elif isinstance(event, Reply):
            self.reply = event

    def release(self) -> None:
        self._release.set()
