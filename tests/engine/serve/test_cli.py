"""``python -m engine serve``: safe defaults and one-line refusals (exit 2), and a real run answered over HTTP."""

from __future__ import annotations

import argparse
import contextlib
import os
import queue
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Iterator

import openai
import pytest

from engine.cli import serve
from tests.engine.serve.conftest import LIVENESS_S

REPO = Path(__file__).resolve().parents[3]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop(serve.ENV_KEY, None)
    return env


def _run(capsys, monkeypatch, *argv: str) -> tuple[int, str, str]:
    monkeypatch.delenv(serve.ENV_KEY, raising=False)
    parser = argparse.ArgumentParser()
    serve.add_arguments(parser)
    code = serve.run(parser.parse_args(list(argv)))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_public_address_without_a_key_is_refused_with_one_line():
    proc = subprocess.run([sys.executable, "-m", "engine", "serve", "--host", "0.0.0.0"], cwd=REPO, env=_env(),
                          capture_output=True, text=True, timeout=LIVENESS_S * 2)
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: refusing to listen on 0.0.0.0 without an API key")


@pytest.mark.parametrize("argv, words", [
    (("--host", "192.168.1.10"), "refusing to listen"),
    (("--host", "example.org"), "refusing to listen"),
    (("--port", "70000"), "--port must be between"),
    (("--max-queue", "0"), "--max-queue must be at least 1"),
    (("--max-body-bytes", "0"), "--max-body-bytes must be at least 1"),
    (("--parallel", "0"), "--parallel must be between 1 and 64"),
    (("--parallel", "65"), "--parallel must be between 1 and 64"),
    (("--api-key", " "), "the API key is empty"),
    (("--allowed-host", "http://box.lan/"), "--allowed-host takes a host name"),
    (("--allowed-host", ""), "--allowed-host takes a host name"),
    (("--port", "0", "--model", "/no/such/model"), ""),
    (("--kv-store-mb", "0"), "--kv-store-mb must be at least 1"),
    (("--kv-store", __file__), "--kv-store takes a folder"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, monkeypatch, argv, words):
    code, out, err = _run(capsys, monkeypatch, *argv)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: ") and words in err


def test_a_port_in_use_is_one_line_and_exit_2(capsys, monkeypatch):
    from engine.serve.server import bind_socket

    taken = bind_socket("127.0.0.1", 0)
    taken.listen(1)
    try:
        code, _, err = _run(capsys, monkeypatch, "--port", str(taken.getsockname()[1]), "--model", "/no/such/model")
    finally:
        taken.close()
    assert code == 2 and err.startswith("error: cannot listen on 127.0.0.1:") and len(err.strip().splitlines()) == 1


def test_a_key_allows_a_public_address(monkeypatch):
    monkeypatch.delenv(serve.ENV_KEY, raising=False)
    parser = argparse.ArgumentParser()
    serve.add_arguments(parser)
    assert serve.check(parser.parse_args(["--host", "0.0.0.0"]), "secret") is None
    assert serve.check(parser.parse_args(["--host", "::1"]), None) is None
    assert serve.check(parser.parse_args(["--host", "localhost"]), None) is None


def test_the_commands_defaults_are_the_servers():
    from engine.core import sessions  # the session pool moved to the engine core (issue 42)
    from engine.serve import app, worker

    assert serve.DEFAULT_MAX_QUEUE == worker.DEFAULT_MAX_QUEUE
    assert serve.DEFAULT_MAX_BODY_BYTES == app.DEFAULT_MAX_BODY_BYTES
    assert serve.DEFAULT_SESSIONS == sessions.DEFAULT_SIZE
    from engine.serve import batching

    assert (serve.DEFAULT_PARALLEL, serve.MAX_PARALLEL) == (batching.DEFAULT_PARALLEL, batching.MAX_PARALLEL)
    from engine.generate import kv_store

    assert serve.DEFAULT_KV_STORE_MB << 20 == kv_store.DEFAULT_BUDGET_BYTES


@contextlib.contextmanager
def _serving(model: str, env: dict[str, str], started: str) -> Iterator[tuple[subprocess.Popen, str]]:
    """``engine serve`` of ``model`` in a process on a free port: the process and its URL, once its stderr printed a
    line matching ``started`` (its group: the URL); killed afterwards if the test left it running."""
    proc = subprocess.Popen([sys.executable, "-m", "engine", "serve", "--model", model, "--precision", "fp32",
                             "--device", "cpu", "--port", "0"], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stderr], daemon=True).start()
    try:
        url = None
        while url is None:
            found = re.search(started, lines.get(timeout=LIVENESS_S * 2))
            url = found.group(1) if found else None
        yield proc, url
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_serves_the_model_until_interrupted(tiny_model_dir):
    env = dict(_env(), **{serve.ENV_KEY: "from-the-environment"})
    with _serving(str(tiny_model_dir), env, r"serving .* at (http://127\.0\.0\.1:\d+/v1) \(API key required") \
            as (proc, url):
        client = openai.OpenAI(base_url=url, api_key="from-the-environment", max_retries=0, timeout=LIVENESS_S)
        reply = client.chat.completions.create(model="default", messages=[{"role": "user", "content": "Hi"}],
                                               max_tokens=3, temperature=0)
        assert reply.choices[0].finish_reason in ("stop", "length")
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=url, api_key="wrong", max_retries=0).models.list()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=LIVENESS_S) in (0, 130)


def test_serves_a_vision_model_with_images(tmp_path):
    from tests.engine.serve.test_images import data_url, png_bytes, with_image
    from tests.helpers.vision_models import build_vision_family

    folder = build_vision_family(tmp_path / "llava", "llava")
    with _serving(str(folder), _env(), r"serving .* at (http://127\.0\.0\.1:\d+/v1)") as (proc, url):
        client = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=LIVENESS_S)
        reply = client.chat.completions.create(model="default", messages=with_image(data_url(png_bytes())),
                                               max_tokens=3, temperature=0)
        assert reply.choices[0].finish_reason in ("stop", "length") and reply.usage.prompt_tokens > 20
        with pytest.raises(openai.BadRequestError, match="allow-downloads"):  # started without it
            client.chat.completions.create(model="default", messages=with_image("http://127.0.0.1:9/a.png"),
                                           max_tokens=3)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=LIVENESS_S) in (0, 130)


@pytest.mark.parametrize("value", ["lots", "0", "-1G", "nan", "G", ""])
def test_a_memory_budget_that_is_not_a_size_is_one_line_and_exit_2(capsys, monkeypatch, value):
    code, out, err = _run(capsys, monkeypatch, f"--memory-budget={value}")
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: --memory-budget: expected auto")


def test_memory_budgets_are_read_in_mib_or_with_a_suffix():
    assert serve.memory_budget("auto") is None
    assert serve.memory_budget("512") == serve.memory_budget("512M") == 512 << 20
    assert serve.memory_budget("1.5g") == 3 << 29
