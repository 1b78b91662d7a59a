"""``python -m engine chat``: streaming, --json keys, exit statuses, Ctrl-C; the default model answers Paris."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from engine.__main__ import main

REPO = Path(__file__).resolve().parents[3]
# issue 3: the --json object has at least these keys.
JSON_KEYS = {"text", "finish_reason", "prompt_tokens", "generated_tokens", "ttft_s", "prefill_s", "prefill_tok_s",
             "decode_tok_s", "itl_s", "e2e_s", "kv_cache_bytes", "kv_cache_bytes_formula",
             "kv_cache_bytes_formula_no_gqa", "weights_bytes", "peak_memory_bytes", "device", "precision", "model"}


def chat(*args: str) -> int:
    return main(["chat", *args])


def test_json_has_every_key_of_the_issue(tiny_model_dir, capsys):
    rc = chat("--prompt", "Hello 秒回", "--model", str(tiny_model_dir), "--precision", "fp32",
              "--max-new-tokens", "6", "--json")
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert rc == 0 and JSON_KEYS <= set(data)
    assert data["finish_reason"] == "length" and data["generated_tokens"] == 6 and len(data["itl_s"]) == 5
    assert data["kv_cache_bytes"] == data["kv_cache_bytes_formula"] > 0
    assert data["model"]["layers"] == 2 and data["model"]["kv_heads"] == 2 and data["model"]["name"]
    assert data["precision"] == "fp32" and data["device"] == "cpu"


def test_streams_text_to_stdout_and_a_summary_line_to_stderr(tiny_model_dir, capsys):
    common = ["--prompt", "What is the capital of France?", "--model", str(tiny_model_dir), "--precision", "fp32",
              "--max-new-tokens", "8", "--temperature", "1.2", "--seed", "3", "--top-k", "0"]
    assert chat(*common) == 0
    out, err = capsys.readouterr()
    assert chat(*common, "--json") == 0
    data = json.loads(capsys.readouterr().out)
    assert out == data["text"] + "\n"  # what streamed is the reply (same seed, same text)
    summary = err.strip().splitlines()[-1]
    assert summary.startswith("[length] TTFT") and "tok/s" in summary and "KV" in summary and "no-GQA" in summary


@pytest.mark.parametrize("args, words", [
    (["--prompt", "   "], "empty"),
    (["--prompt", "hi", "--temperature", "-1"], "temperature"),
    (["--prompt", "hi", "--top-logprobs-typo"], None),
    (["--prompt", "hi", "--model", "/nonexistent/model"], "no model at"),
])
def test_bad_input_or_missing_model_exits_2_with_one_line(args, words, capsys):
    if words is None:  # argparse's own refusal of an unknown option is also exit 2
        with pytest.raises(SystemExit) as info:
            chat(*args)
        assert info.value.code == 2
        return
    assert chat(*args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and words in err and err.count("\n") == 1 and "Traceback" not in err


def test_ctrl_c_prints_what_was_generated_and_exits_130(tiny_model_dir, monkeypatch, capsys):
    class InterruptingStdout:
        """stdout that presses Ctrl-C (a real SIGINT to this process) when the first text arrives."""

        def __init__(self):
            self.parts: list[str] = []

        def write(self, text: str) -> int:
            if not self.parts:
                os.kill(os.getpid(), signal.SIGINT)
            self.parts.append(text)
            return len(text)

        def flush(self) -> None:
            pass

    stdout = InterruptingStdout()
    monkeypatch.setattr(sys, "stdout", stdout)
    rc = chat("--prompt", "Hello", "--model", str(tiny_model_dir), "--precision", "fp32", "--max-new-tokens", "200")
    err = capsys.readouterr().err
    assert rc == 130
    assert "[cancelled]" in err
    assert stdout.parts[-1].endswith("\n") and 1 <= len(stdout.parts) - 1 < 200  # partial reply, then newline
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler was put back


@pytest.mark.default_model
def test_default_model_answers_paris_in_bf16(default_model_dir):
    env = dict(os.environ, MIAOHUI_HOME=str(default_model_dir.parents[1]))
    proc = subprocess.run([sys.executable, "-m", "engine", "chat", "--prompt", "What is the capital of France?",
                           "--precision", "bf16", "--max-new-tokens", "24", "--temperature", "0", "--json"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(proc.stdout)
    assert "Paris" in data["text"] and data["precision"] == "bf16"
    assert data["model"]["layers"] == 30 and data["model"]["kv_heads"] == 3
    # bf16 cache: 2 × 30 layers × 3 KV heads × 64 × 2 bytes per token, measured from the tensors.
    assert data["kv_cache_bytes"] == data["kv_cache_bytes_formula"] == 23040 * (data["prompt_tokens"]
                                                                               + data["generated_tokens"] - 1)


def _model_with_template(tiny_model_dir: Path, folder: Path, template: str) -> Path:
    """The tiny model with its chat template replaced (a downloaded model's template is its author's code)."""
    shutil.copytree(tiny_model_dir, folder)
    (folder / "chat_template.jinja").write_text(template, encoding="utf-8")
    return folder


def test_a_runaway_template_exits_2_with_one_line_in_a_real_process(tiny_model_dir, tmp_path):
    # Issue 18: nested loops over huge ranges ran for minutes and grew to 9 GB.
    nested = "{% for i in range(10**9) %}{% for j in range(10**9) %}{{ j }}{% endfor %}{% endfor %}"
    model = _model_with_template(tiny_model_dir, tmp_path / "hostile", nested)
    proc = subprocess.run([sys.executable, "-m", "engine", "chat", "--model", str(model), "--prompt", "hi",
                           "--precision", "fp32", "--device", "cpu", "--max-new-tokens", "4"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert _error_line(proc.stderr).startswith("error: this model's chat template asks for a size of 1,000,000,000")
    assert proc.stdout == ""


def _error_line(err: str) -> str:
    """The one error line, which ends stderr (after the loader's progress bar, drawn with carriage returns)."""
    assert err.endswith("\n") and err.count("error: ") == 1 and "Traceback" not in err, err[-2000:]
    return err[:-1].split("\n")[-1].split("\r")[-1]


@pytest.mark.parametrize("template, words", [
    ("{% for message in messages %}{{ message.content }", "syntax error"),
    ("{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}",
     "refused the conversation: Conversation roles must alternate"),
    ("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "calls itself too deeply"),
    ("{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}", "builds text of"),
])
def test_template_failures_exit_2_with_one_line(tiny_model_dir, tmp_path, capsys, template, words):
    model = _model_with_template(tiny_model_dir, tmp_path / "broken", template)
    assert chat("--prompt", "hi", "--model", str(model), "--precision", "fp32", "--max-new-tokens", "4") == 2
    line = _error_line(capsys.readouterr().err)
    assert line.startswith("error: this model's chat template") and words in line


def test_an_absurd_max_new_tokens_is_accepted_and_capped_by_the_context(tiny_model_dir, capsys):
    rc = chat("--prompt", "Hi", "--model", str(tiny_model_dir), "--precision", "fp32", "--max-new-tokens",
              str(10**12), "--repetition-penalty", "1.3", "--json")
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert rc == 0 and data["finish_reason"] in ("eos", "length") and "error" not in data
    assert data["prompt_tokens"] + data["generated_tokens"] <= data["model"]["context_length"] == 256
