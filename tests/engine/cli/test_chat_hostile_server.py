"""``python -m engine chat --base-url`` against hostile servers, as real processes (issue 31, defects 7-9): one that
accepts and never answers, a stream that never ends, a ``data:`` line of hundreds of MB, a chunk that is not UTF-8
or not JSON, a model named with a terminal escape. Each ends with its one line (or the reply cut at the
``max_tokens`` asked for) and no traceback; nothing the server chose reaches the terminal as a control character.
The servers are ``tests.helpers.openai_wire``'s, on 127.0.0.1."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.remote.session import TOKEN_MARGIN
from tests.helpers.openai_wire import WORDS, SilentServer, WireServer

REPO = Path(__file__).resolve().parents[3]
TERMINAL_ESCAPE = "\x1b]0;pwned\x07"  # OSC 0: sets the terminal's title, then BEL
# Every process gets this long at most: a failure is a hang (the bug), never a slow machine.
PROCESS_TIMEOUT_S = 120


def chat(url: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "engine", "chat", "--prompt", "hi", "--base-url", url, *args],
                          cwd=REPO, capture_output=True, timeout=PROCESS_TIMEOUT_S)


def error_line(proc: subprocess.CompletedProcess[bytes]) -> str:
    err = proc.stderr.decode()
    assert err.endswith("\n") and err.count("error: ") == 1 and "Traceback" not in err, err[-2000:]
    return err.splitlines()[-1]


def test_a_server_that_accepts_and_never_answers_is_given_up_within_seconds_with_one_line():
    with SilentServer() as silent:
        proc = chat(silent.url)  # before: nothing for 300 s (the read timeout), so past PROCESS_TIMEOUT_S
    assert proc.returncode == 2 and proc.stdout == b""
    line = error_line(proc)
    assert line.startswith("error: 127.0.0.1:") and "did not answer in time" in line


def test_a_stream_that_never_ends_is_cut_at_the_max_tokens_asked_for():
    with WireServer("forever") as wire:
        proc = chat(wire.url, "--max-new-tokens", "20", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(proc.stdout)
    assert data["finish_reason"] == "length" and "error" not in data
    assert 20 <= data["generated_tokens"] <= 20 + TOKEN_MARGIN and data["text"] == WORDS[0] * data["generated_tokens"]


def test_a_giant_data_line_fails_with_one_line_without_reading_it_whole():
    with WireServer("giant") as wire:
        proc = chat(wire.url, "--max-new-tokens", "8")
    assert proc.returncode == 1
    line = error_line(proc)
    assert line.startswith("error: 127.0.0.1:") and "event of more than 1.0 MiB" in line


@pytest.mark.parametrize("mode, words", [("bad-utf8", "not UTF-8"), ("bad-json", "not JSON")])
def test_a_chunk_that_is_not_utf8_or_json_ends_the_reply_with_one_line_and_keeps_the_text(mode, words):
    with WireServer(mode) as wire:
        proc = chat(wire.url, "--max-new-tokens", "8")
    assert proc.returncode == 1 and proc.stdout.decode() == WORDS[0] + "\n"
    line = error_line(proc)
    assert line.startswith("error: 127.0.0.1:") and words in line
    assert "UnicodeDecodeError" not in line and "JSONDecodeError" not in line


@pytest.mark.parametrize("mode", ["ok", "error"])
def test_a_model_name_that_is_a_terminal_escape_never_reaches_the_terminal(mode):
    with WireServer(mode, model=TERMINAL_ESCAPE) as wire:  # "error": the same text as the server's error message
        proc = chat(wire.url, "--max-new-tokens", "8")
    assert proc.returncode == (0 if mode == "ok" else 1), proc.stderr[-2000:]
    shown = proc.stdout + proc.stderr
    assert b"\x1b" not in shown and b"\x07" not in shown
    if mode == "error":  # the server's message names it: said, escaped
        assert r"\x1b]0;pwned\x07" in proc.stderr.decode()
    else:  # the footer says "remote", never a model name, in the precision's place (issue 41)
        assert proc.stderr.decode().rstrip().endswith("remote")


def test_a_reply_s_terminal_escape_is_shown_not_obeyed():
    with WireServer("escape-reply") as wire:
        proc = chat(wire.url, "--max-new-tokens", "8")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert b"\x1b" not in proc.stdout and b"\x07" not in proc.stdout and b"\r" not in proc.stdout
    assert proc.stdout.decode() == "Hi \\x1b]0;pwned\\x07 there\\r\n\n"  # its characters, lines kept
