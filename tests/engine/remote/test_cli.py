"""``python -m engine chat --base-url``: the same JSON keys as a local run (unknown figures null), the key from
``--api-key`` or ``$MIAOHUI_API_KEY``, exit 2 with one line for a server that cannot be used, 1 when the reply fails."""

from __future__ import annotations

import json

import pytest

from engine.__main__ import main
from engine.remote.session import UNKNOWN_ALWAYS


def chat_json(capsys, *args: str) -> tuple[int, dict]:
    rc = main(["chat", "--prompt", "Hello", "--max-new-tokens", "6", "--temperature", "0", "--json", *args])
    out = capsys.readouterr().out
    return rc, json.loads(out)


def test_the_json_of_a_remote_run_has_the_keys_of_a_local_run(server, tiny_model_dir, capsys):
    rc_local, local = chat_json(capsys, "--model", str(tiny_model_dir), "--precision", "fp32", "--device", "cpu")
    rc_remote, remote = chat_json(capsys, "--base-url", server.url, "--api-key", server.key)
    assert rc_local == rc_remote == 0
    assert set(remote) == set(local) and set(remote["model"]) == set(local["model"])
    assert remote["roofline"] is None and local["roofline"]["bytes_per_token"] > 0  # a server's memory is not ours
    assert remote["text"] == local["text"]  # the same tiny model, greedy, behind the server
    assert remote["generated_tokens"] == local["generated_tokens"] == 6 and remote["finish_reason"] == "length"
    assert remote["prompt_tokens"] == local["prompt_tokens"] and remote["ttft_s"] > 0
    for name in UNKNOWN_ALWAYS:
        assert remote[name] is None and local[name] is not None, name
    assert remote["device"] == f"remote: 127.0.0.1:{server.port}" and remote["model"]["layers"] is None
    assert remote["precision"] == "remote" and remote["model"]["context_length"] == 256


def test_the_key_can_come_from_the_environment_and_streams_like_a_local_run(server, monkeypatch, capsys):
    monkeypatch.setenv("MIAOHUI_API_KEY", server.key)
    assert main(["chat", "--prompt", "Hello", "--max-new-tokens", "5", "--base-url", server.url]) == 0
    out, err = capsys.readouterr()
    summary = err.strip().splitlines()[-1]
    assert out.endswith("\n")  # the streamed text, then a newline
    assert summary.startswith("[length] TTFT") and "prefill n/a tok" not in summary  # usage gave the prompt count
    assert "KV —" in summary and "remote: 127.0.0.1" in summary


@pytest.mark.parametrize("args, words", [
    (["--base-url", "127.0.0.1:8000"], "no scheme"),
    (["--base-url", "http://127.0.0.1:1"], "connection refused"),
    (["--base-url", "SERVER", "--api-key", "sk-wrong"], "refused the API key"),
    (["--base-url", "SERVER", "--model", "nope"], "does not serve 'nope'"),
])
def test_a_server_that_cannot_be_used_exits_2_with_one_line(server, args, words, monkeypatch, capsys):
    monkeypatch.setenv("MIAOHUI_API_KEY", server.key)
    args = [server.url if a == "SERVER" else a for a in args]
    assert main(["chat", "--prompt", "hi", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and words in err and err.count("\n") == 1 and "Traceback" not in err
    assert "sk-wrong" not in err


def test_a_reply_the_server_refuses_exits_1(server, capsys):
    long_prompt = " ".join(["word"] * 400)  # past the tiny model's 256 positions: engine serve answers 400
    rc = main(["chat", "--prompt", long_prompt, "--base-url", server.url, "--api-key", server.key, "--json"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 1 and data["finish_reason"] == "error" and "HTTP 400" in data["error"]
