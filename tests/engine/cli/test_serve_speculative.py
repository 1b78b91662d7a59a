"""``python -m engine serve --speculative``: values ``engine chat`` would refuse are one line and exit 2 before anything
loads, a draft model that cannot be loaded is one line and exit 2, and prompt lookup serves as a real process (one
request at a time, said in one line) with the spec-decode counters on /metrics."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from engine.cli import serve
from tests.engine.cli.test_serve import LIVENESS_S, QUESTION, REPO, ServeProcess


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop(serve.ENV_KEY, None)
    return env


@pytest.mark.parametrize("value, words", [
    ("nonsense", "--speculative: unknown speculation 'nonsense': choose prompt-lookup, draft:MODEL or self"),
    ("draft", "--speculative: draft speculation needs a model"),
    ("draft:", "--speculative: draft speculation needs a model"),
    ("", "--speculative: unknown speculation ''"),
])
def test_a_bad_speculative_value_is_one_line_and_exit_2(value, words):
    proc = subprocess.run([sys.executable, "-m", "engine", "serve", "--port", "0", "--speculative", value], cwd=REPO,
                          env=_env(), capture_output=True, text=True, timeout=LIVENESS_S * 2)
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: " + words), proc.stderr


def test_a_draft_model_that_cannot_load_is_one_line_and_exit_2(tiny_model_dir, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "engine", "serve", "--model", str(tiny_model_dir), "--precision",
                           "fp32", "--device", "cpu", "--port", "0", "--speculative", f"draft:{tmp_path / 'none'}"],
                          cwd=REPO, env=_env(), capture_output=True, text=True, timeout=LIVENESS_S * 2)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.strip().splitlines() if "Loading weights" not in line]  # the target's bar
    assert len(lines) == 1 and lines[0].startswith("error: ") and "none" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_prompt_lookup_serves_as_a_real_process(tiny_model_dir):
    server = ServeProcess(tiny_model_dir, "--speculative", "prompt-lookup")
    try:
        assert any(line.startswith("serving one request at a time: speculative decoding") for line in server.lines)
        reply = server.client().chat.completions.create(model="default", messages=QUESTION, max_tokens=24,
                                                        temperature=0)
        assert reply.usage.completion_tokens > 0
        status, body = server.request("GET", "/metrics")
        assert status == 200
        text = body.decode("utf-8")
        for name in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"):
            assert re.search(rf'^vllm:spec_decode_{name}_total{{model_name="[^"]+"}} \d', text, re.M), name
    finally:
        server.stop()
