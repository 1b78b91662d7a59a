"""``--kv auto|int8`` on ``engine chat``, ``complete``, ``serve`` and ``bench``: int8 gives a real 8-bit KV cache whose
measured bytes the JSON reports (and the formula agrees); a bad value is one line and exit status 2 before anything
loads; a model the fast runner cannot decode is refused rather than silently given a 16-bit cache."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from engine.__main__ import main
from engine.cli import serve
from engine.inputs import KV_SCALE_BYTES
from tests.engine.cli.test_chat import REPO

BAD = "unknown KV cache precision 'int4': choose auto or int8"


def test_chat_with_an_int8_cache_reports_its_real_bytes(tiny_model_dir, capsys):
    common = ["chat", "--prompt", "Hello 秒回", "--model", str(tiny_model_dir), "--precision", "fp32",
              "--max-new-tokens", "6", "--temperature", "0", "--json"]
    assert main(common) == 0
    dense = json.loads(capsys.readouterr().out)
    assert main([*common, "--kv", "int8"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["model"]["kv_precision"] == "int8" and dense["model"]["kv_precision"] == "auto"
    assert data["kv_cache_bytes"] == data["kv_cache_bytes_formula"] > 0
    head_dim = data["model"]["head_dim"]  # 16: fp32 elements 4 bytes → 1 byte and a 2-byte scale per 16
    assert data["kv_cache_bytes"] / dense["kv_cache_bytes"] == (head_dim + KV_SCALE_BYTES) / (4 * head_dim)


@pytest.mark.parametrize("command", [["chat", "--prompt", "hi"], ["complete", "--prompt", "hi"]])
def test_a_bad_kv_value_is_one_line_and_exit_2(command, capsys):
    assert main([*command, "--kv", "int4", "--model", "/nonexistent/model"]) == 2  # refused before the model
    err = capsys.readouterr().err
    assert err == f"error: {BAD}\n"


def test_an_int8_cache_on_the_plain_runner_is_refused_in_one_line(tiny_model_dir, monkeypatch, capsys):
    monkeypatch.setenv("MIAOHUI_FASTPATH", "0")
    assert main(["chat", "--prompt", "hi", "--model", str(tiny_model_dir), "--kv", "int8"]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]  # after the progress
    assert lines == ["error: an int8 KV cache needs the fast runner, and this model gets the plain one: "
                     "MIAOHUI_FASTPATH=0 in the environment"]


def test_chat_against_a_server_refuses_kv():
    assert main(["chat", "--prompt", "hi", "--base-url", "http://127.0.0.1:9/v1", "--kv", "int8"]) == 2


@pytest.mark.parametrize("command, prefix", [
    (["serve", "--port", "0"], f"error: --kv: {BAD}"),
    (["bench"], f"error: {BAD}"),
])
def test_serve_and_bench_refuse_a_bad_kv_value_in_one_line(command, prefix):
    env = dict(os.environ)
    env.pop(serve.ENV_KEY, None)
    proc = subprocess.run([sys.executable, "-m", "engine", *command, "--kv", "int4"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0] == prefix, proc.stderr


def test_serve_with_an_int8_cache_answers_and_reports_its_bytes(tiny_model_dir):
    """A real ``engine serve --kv int8``: a greedy reply, the same again, and ``miaohui:kv_cache_bytes`` counts int8
    bytes (a multiple of the int8 cache's bytes per token)."""
    from tests.engine.cli.test_serve import QUESTION, ServeProcess

    server = ServeProcess(tiny_model_dir, "--kv", "int8")
    try:
        client = server.client()
        reply = client.chat.completions.create(model="default", messages=QUESTION, max_tokens=12, temperature=0)
        again = client.chat.completions.create(model="default", messages=QUESTION, max_tokens=12, temperature=0)
        assert reply.usage.completion_tokens > 0 and reply.choices[0].message.content == again.choices[0].message.content
        status, body = server.request("GET", "/metrics")
        assert status == 200
        found = re.search(r'^miaohui:kv_cache_bytes{model_name="[^"]+"} ([0-9.e+]+)', body.decode("utf-8"), re.M)
        per_token = 2 * 2 * 2 * (16 + KV_SCALE_BYTES)  # the tiny model: 2 layers, 2 KV heads, head_dim 16
        assert found and float(found.group(1)) > 0 and float(found.group(1)) % per_token == 0
    finally:
        server.stop()
