"""``python -m engine complete`` (issue 26): a plain text continued on any local model, a base model without a chat
template included (a folder and a GGUF), streamed, ``--json`` with chat's keys, chat's exit statuses; and ``engine
chat`` on such a model refused from the files' metadata before the weights load, with the one line saying what to
do instead."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import gguf
import pytest

from engine.__main__ import main
from engine.generate.chat_template import NO_CHAT_TEMPLATE
from engine.errors import BadInputError
from engine.inputs import LoadSpec
from engine.models.loader import load_model
from tests.engine._local_models import write_llama_gguf
from tests.helpers.base_model import without_chat_template

REPO = Path(__file__).resolve().parents[3]
TEXT = "The capital of France is"


@pytest.fixture(scope="module")
def base_dir(tiny_model_dir, tmp_path_factory) -> Path:
    return without_chat_template(tiny_model_dir, tmp_path_factory.mktemp("base") / "tiny-base")


@pytest.fixture(scope="module")
def base_gguf(tiny_model_dir, tmp_path_factory) -> Path:
    """The tiny model as a GGUF written without tokenizer.chat_template, as a base model's file is."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(gguf.GGUFWriter, "add_chat_template", lambda self, value: None)
        path = write_llama_gguf(tiny_model_dir, tmp_path_factory.mktemp("base-gguf") / "tiny-base.gguf")
    assert "tokenizer.chat_template" not in gguf.GGUFReader(str(path)).fields
    return path


def engine(*args: str, stdin: str | None = None, home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "MIAOHUI_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "engine", *args], input=stdin, capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=300)


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error: ")]


# ---------------------------------------------------------------- the real process


def test_the_process_streams_a_continuation_of_a_template_less_model(base_dir, home):
    result = engine("complete", "--prompt", TEXT, "--model", str(base_dir), "--precision", "fp32", "--device", "cpu",
                    "--max-new-tokens", "8", home=home)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.endswith("\n") and result.stdout.strip()
    assert "[length] TTFT" in result.stderr and "8 tokens" in result.stderr and "Traceback" not in result.stderr
    as_json = engine("complete", "--prompt", TEXT, "--model", str(base_dir), "--precision", "fp32", "--device",
                     "cpu", "--max-new-tokens", "8", "--json", home=home)
    assert as_json.returncode == 0, as_json.stderr[-2000:]
    data = json.loads(as_json.stdout)
    assert result.stdout == data["text"] + "\n"  # a fixed seed: the streamed text is the JSON's
    assert data["finish_reason"] == "length" and data["generated_tokens"] == 8 and data["dropped_turns"] == 0


def test_json_has_exactly_chats_keys(tiny_model_dir, base_dir, home, capsys):
    chat_rc = main(["chat", "--prompt", "Hello", "--model", str(tiny_model_dir), "--precision", "fp32",
                    "--device", "cpu", "--max-new-tokens", "4", "--json"])
    chat_data = json.loads(capsys.readouterr().out)
    result = engine("complete", "--prompt", "Hello", "--model", str(base_dir), "--precision", "fp32", "--device",
                    "cpu", "--max-new-tokens", "4", "--json", home=home)
    assert chat_rc == 0 and result.returncode == 0, result.stderr[-2000:]
    data = json.loads(result.stdout)
    assert set(data) == set(chat_data)
    assert set(data["model"]) == set(chat_data["model"])
    assert data["prompt_tokens"] > 0 and data["finish_reason"] == "length"
    assert data["kv_cache_bytes"] == data["kv_cache_bytes_formula"] > 0
    # The roofline pairs the decode rate with the KV read at the reply's mean length, not the final cache.
    read = data["prompt_tokens"] + data["generated_tokens"] / 2
    held = data["prompt_tokens"] + data["generated_tokens"] - 1
    assert data["roofline"]["kv_bytes"] == round(data["kv_cache_bytes"] * read / held) < data["kv_cache_bytes"]
    assert data["roofline"]["weights_bytes"] > 0


def test_a_template_less_gguf_completes_from_stdin(base_gguf, home):
    result = engine("complete", "--prompt-file", "-", "--model", str(base_gguf), "--precision", "fp32", "--device",
                    "cpu", "--max-new-tokens", "6", "--json", stdin="我昨天认识的那个人，", home=home)
    assert result.returncode == 0, result.stderr[-2000:]
    data = json.loads(result.stdout)
    assert data["generated_tokens"] == 6 and "\ufffd" not in data["text"]


def test_bad_input_exits_2_with_one_line_before_the_model_loads(tmp_path, home):
    missing = engine("complete", "--prompt-file", str(tmp_path / "nothing.txt"), "--model", str(tmp_path / "no-model"),
                     home=home)
    assert missing.returncode == 2 and error_lines(missing.stderr) == [f"error: no prompt file at {tmp_path / 'nothing.txt'}"]
    (tmp_path / "latin1.txt").write_bytes("café".encode("latin-1"))
    for args in (["--prompt", ""], ["--prompt-file", str(tmp_path / "latin1.txt")]):
        result = engine("complete", *args, "--model", str(tmp_path / "no-model"), home=home)
        assert result.returncode == 2, result.stderr[-2000:]
        # The prompt is judged first: the missing model is never reached.
        assert len(error_lines(result.stderr)) == 1 and "no model" not in result.stderr
        assert "Traceback" not in result.stderr
    folder = engine("complete", "--prompt-file", str(tmp_path), "--model", str(tmp_path / "no-model"), home=home)
    assert folder.returncode == 2 and error_lines(folder.stderr) == [f"error: the prompt file {tmp_path} is a folder"]
    no_model = engine("complete", "--prompt", TEXT, "--model", str(tmp_path / "no-model"), home=home)
    assert no_model.returncode == 2 and len(error_lines(no_model.stderr)) == 1


def test_a_prompt_longer_than_the_context_is_refused_with_exit_2(base_dir, capsys):
    rc = main(["complete", "--prompt", " Paris" * 2000, "--model", str(base_dir), "--precision", "fp32",
               "--device", "cpu"])
    err = capsys.readouterr().err
    assert rc == 2 and len(error_lines(err)) == 1 and "context holds 256" in err


def test_streams_token_by_token_and_ctrl_c_prints_what_was_generated_and_exits_130(base_dir, monkeypatch, capsys):
    class InterruptingStdout:
        """stdout that records each write and presses Ctrl-C (a real SIGINT to this process) at the third."""

        def __init__(self):
            self.parts: list[str] = []

        def write(self, text: str) -> int:
            self.parts.append(text)
            if len(self.parts) == 3:
                os.kill(os.getpid(), signal.SIGINT)
            return len(text)

        def flush(self) -> None:
            pass

    stdout = InterruptingStdout()
    monkeypatch.setattr(sys, "stdout", stdout)
    rc = main(["complete", "--prompt", TEXT, "--model", str(base_dir), "--precision", "fp32", "--device", "cpu",
               "--max-new-tokens", "200"])
    err = capsys.readouterr().err
    assert rc == 130 and "[cancelled]" in err
    assert 3 <= len(stdout.parts) - 1 < 200 and stdout.parts[-1].endswith("\n")  # a write per token, then newline
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


# ---------------------------------------------------------------- chat refused before the weights load


def chat_importing(model: Path, home: Path) -> tuple[subprocess.CompletedProcess, set[str]]:
    """``engine chat`` on ``model`` under ``-X importtime``: the result and every module the process imported."""
    env = {**os.environ, "MIAOHUI_HOME": str(home)}
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", "engine", "chat", "--model", str(model),
                             "--prompt", "Hello", "--device", "cpu"], capture_output=True, text=True, cwd=REPO,
                            env=env, timeout=300)
    modules = {line.rsplit("|", 1)[1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}
    return result, modules


@pytest.mark.parametrize("kind", ["folder", "gguf"])
def test_chat_on_a_template_less_model_is_refused_before_torch_or_a_weight_loads(kind, base_dir, base_gguf, home):
    result, modules = chat_importing(base_dir if kind == "folder" else base_gguf, home)
    assert result.returncode == 2, result.stderr[-2000:]
    assert error_lines(result.stderr) == [f"error: {NO_CHAT_TEMPLATE}"]
    assert "Traceback" not in result.stderr and result.stdout == ""
    # No weight can have been read: torch, which every load of weights needs, was never imported.
    assert "torch" not in modules and "transformers" not in modules and "engine.models.template_meta" in modules
    assert "python -m engine complete" in NO_CHAT_TEMPLATE and "instruct or chat version" in NO_CHAT_TEMPLATE


@pytest.mark.parametrize("kind", ["folder", "gguf"])
def test_load_for_chat_refuses_without_calling_the_weight_or_tokenizer_loaders(kind, base_dir, base_gguf):
    calls: list[str] = []

    def recorder(folder: str, **kwargs):
        calls.append(folder)
        raise AssertionError("a loader was called")

    model = base_dir if kind == "folder" else base_gguf
    with pytest.raises(BadInputError) as info:
        load_model(LoadSpec(model=str(model), device="cpu"), chat=True, from_pretrained=recorder,
                   tokenizer_from_pretrained=recorder)
    assert str(info.value) == NO_CHAT_TEMPLATE and calls == []


def test_a_model_with_a_template_still_loads_for_chat(tiny_model_dir):
    loaded = load_model(LoadSpec(model=str(tiny_model_dir), precision="fp32", device="cpu"), chat=True)
    assert loaded.tokenizer.chat_template


def test_a_prompt_file_is_read_as_utf8_text(base_dir, tmp_path, capsys):
    prompt = tmp_path / "story.txt"
    prompt.write_text("秒回的秘密：", encoding="utf-8")
    rc = main(["complete", "--prompt-file", str(prompt), "--model", str(base_dir), "--precision", "fp32",
               "--device", "cpu", "--max-new-tokens", "3", "--json"])
    file_data = json.loads(capsys.readouterr().out)
    rc_inline = main(["complete", "--prompt", "秒回的秘密：", "--model", str(base_dir), "--precision", "fp32",
                      "--device", "cpu", "--max-new-tokens", "3", "--json"])
    inline = json.loads(capsys.readouterr().out)
    assert rc == rc_inline == 0
    assert file_data["prompt_tokens"] == inline["prompt_tokens"] and file_data["text"] == inline["text"]
