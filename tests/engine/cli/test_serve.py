"""``python -m engine serve`` as a real process on the tiny model, under abuse: a web page's requests (another site's
``Host``, a body not declared JSON) are refused while the ``openai`` client is served; hundreds of unfinished
requests under a 256-file limit (macOS's default) leave it answering; Ctrl-C mid-stream is exit 130 and one line;
an API key no HTTP client can send is refused at start."""

from __future__ import annotations

import http.client
import json
import os
import queue
import re
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import openai
import pytest

from engine.cli import serve

REPO = Path(__file__).resolve().parents[3]
LIVENESS_S = 60  # only a guard against a hung process, never a measurement
QUESTION = [{"role": "user", "content": "Hi"}]


class ServeProcess:
    """``python -m engine serve --port 0`` on the tiny model; its stderr lines are collected as they come."""

    def __init__(self, model: Path, *extra: str, files: int | None = None) -> None:
        env = dict(os.environ)
        env.pop(serve.ENV_KEY, None)

        def limit_files() -> None:  # in the child: as few files as a Mac allows by default
            if files is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (files, files))

        self.proc = subprocess.Popen([sys.executable, "-m", "engine", "serve", "--model", str(model), "--precision",
                                      "fp32", "--device", "cpu", "--port", "0", *extra], cwd=REPO, env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     preexec_fn=limit_files)
        self.lines: list[str] = []
        arrived: queue.Queue[str] = queue.Queue()

        def read() -> None:
            for line in self.proc.stderr:
                self.lines.append(line.rstrip("\n"))
                arrived.put(line)
            arrived.put("")

        self._reader = threading.Thread(target=read, daemon=True)
        self._reader.start()
        self.port = 0
        while not self.port:
            line = arrived.get(timeout=LIVENESS_S * 2)
            if not line:
                pytest.fail("engine serve ended before serving: " + "\n".join(self.lines))
            found = re.search(r"serving .* at http://127\.0\.0\.1:(\d+)/v1", line)
            self.port = int(found.group(1)) if found else 0
        self.url = f"http://127.0.0.1:{self.port}/v1"

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url, api_key="none", max_retries=0, timeout=LIVENESS_S)

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=LIVENESS_S)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def stderr(self) -> list[str]:
        self._reader.join(LIVENESS_S)
        return self.lines

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(LIVENESS_S)


@pytest.fixture()
def start(tiny_model_dir) -> Iterator:
    started: list[ServeProcess] = []

    def make(*extra: str, files: int | None = None) -> ServeProcess:
        started.append(ServeProcess(tiny_model_dir, *extra, files=files))
        return started[-1]

    yield make
    for process in started:
        process.stop()


def test_a_web_page_cannot_use_it_but_the_openai_client_can(start):
    server = start("--allowed-host", "box.lan")
    body = json.dumps({"messages": QUESTION, "max_tokens": 2}).encode()
    # DNS rebinding: the page's own name, resolved to 127.0.0.1, arrives as the Host.
    status, answer = server.request("POST", "/v1/chat/completions", body,
                                    {"Host": "attacker.example", "Content-Type": "application/json"})
    assert status == 421 and json.loads(answer)["error"]["code"] == "host_not_allowed"
    # A form or text/plain POST: what a page may send cross-site without a preflight.
    status, answer = server.request("POST", "/v1/chat/completions", body, {"Content-Type": "text/plain"})
    assert status == 415 and json.loads(answer)["error"]["code"] == "unsupported_media_type"
    status, _ = server.request("POST", "/v1/chat/completions", body,
                               {"Host": f"box.lan:{server.port}", "Content-Type": "application/json"})
    assert status == 200  # a name the user allowed
    reply = server.client().chat.completions.create(model="default", messages=QUESTION, max_tokens=2)
    assert reply.choices[0].finish_reason in ("stop", "length")


def test_hundreds_of_unfinished_requests_under_a_256_file_limit_leave_it_answering(start):
    server = start(files=256)
    idle = []
    try:
        for _ in range(300):  # more than the process may open files
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=LIVENESS_S)
            sock.sendall(b"GET /v1/models HTT")  # a request line that never ends
            idle.append(sock)
        models = server.client().models.list()  # answered now, not once the idle ones time out
        assert [m.id for m in models.data]
        deadline = time.monotonic() + LIVENESS_S
        for sock in idle:  # and every one of them is closed by the server
            sock.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                while sock.recv(4096):
                    pass
            except ConnectionResetError:
                pass
            except TimeoutError:
                pytest.fail("an unfinished request was left open")
        status, _ = server.request("GET", "/health")
        assert status == 200
    finally:
        for sock in idle:
            sock.close()


def _stalled_stream(port: int) -> socket.socket:
    """A streaming request whose client stops reading after the headers: the server stays mid-stream (8,000
    tokens with 20 candidates each are megabytes more than the sockets' buffers hold, and take a while)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(LIVENESS_S)
    sock.connect(("127.0.0.1", port))
    body = json.dumps({"messages": QUESTION, "stream": True, "max_tokens": 8000, "temperature": 0, "logprobs": True,
                       "top_logprobs": 20}).encode()
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    assert sock.recv(64).startswith(b"HTTP/1.1 200")
    return sock


def test_ctrl_c_mid_stream_is_exit_130_and_one_line(tmp_path):
    from tests.helpers.tiny_model import build_tiny_model

    server = ServeProcess(build_tiny_model(tmp_path / "long", max_position_embeddings=8192))
    stalled = _stalled_stream(server.port)
    try:
        server.proc.send_signal(signal.SIGINT)
        assert server.proc.wait(LIVENESS_S) == 130
    finally:
        stalled.close()
        server.stop()
    lines = server.stderr()
    assert not any("Traceback" in line for line in lines), "\n".join(lines)
    after = lines[next(i for i, line in enumerate(lines) if line.startswith("serving ")) + 1:]
    assert len(after) == 1 and after[0].startswith("stopped (Ctrl-C): 1 open request cut off"), "\n".join(lines)


@pytest.mark.parametrize("key", ["clé-secrète", "秘密", "tab\tsecret", "nbsp\u00a0secret", " padded-secret "])
def test_an_api_key_no_http_client_can_send_is_refused_with_one_line(capsys, monkeypatch, key):
    import argparse

    monkeypatch.delenv(serve.ENV_KEY, raising=False)
    parser = argparse.ArgumentParser()
    serve.add_arguments(parser)
    assert serve.run(parser.parse_args(["--port", "0", "--model", "/no/such/model", "--api-key", key])) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and err.startswith("error: the API key"), err
    assert key.strip() not in err  # the key itself is never echoed


def test_a_non_ascii_key_from_the_environment_is_refused_at_start():
    env = {k: v for k, v in os.environ.items() if k != serve.ENV_KEY}
    proc = subprocess.run([sys.executable, "-m", "engine", "serve", "--port", "0", "--model", "/no/such/model"],
                          cwd=REPO,
                          env={**env, serve.ENV_KEY: "clé"}, capture_output=True, text=True, timeout=LIVENESS_S * 2)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: the API key") and "ASCII" in lines[0], proc.stderr
