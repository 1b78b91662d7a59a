"""A model without a chat template (a base model, here a GGUF whose metadata has none) is refused with one line that
says what the user can do instead (issue 31, defect 11e): through the real ``python -m engine chat`` process, and
where the lab's token view renders a conversation (``render_text``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import gguf
import pytest
from transformers import AutoTokenizer

from engine.errors import TemplateError
from engine.generate.chat_template import NO_CHAT_TEMPLATE, render_text
from tests.engine._local_models import write_llama_gguf

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def base_gguf(tiny_model_dir, tmp_path, monkeypatch) -> Path:
    """The tiny model as a GGUF written without tokenizer.chat_template, as a base model's file is."""
    monkeypatch.setattr(gguf.GGUFWriter, "add_chat_template", lambda self, value: None)
    path = write_llama_gguf(tiny_model_dir, tmp_path / "tiny-base.gguf")
    assert "tokenizer.chat_template" not in gguf.GGUFReader(str(path)).fields
    return path


def test_chat_with_a_template_less_gguf_says_what_to_use_instead(home, base_gguf):
    env = {**os.environ, "MIAOHUI_HOME": str(home)}
    result = subprocess.run([sys.executable, "-m", "engine", "chat", "--model", str(base_gguf), "--prompt", "Hello",
                             "--max-new-tokens", "4", "--device", "cpu"], capture_output=True, text=True, cwd=ROOT,
                            env=env, timeout=300)
    assert result.returncode == 2, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert errors == [f"error: {NO_CHAT_TEMPLATE}"]
    assert "instruct or chat version" in NO_CHAT_TEMPLATE and "base model" in NO_CHAT_TEMPLATE


def test_render_text_of_a_template_less_tokenizer_says_the_same(tiny_model_dir):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    tokenizer.chat_template = None
    with pytest.raises(TemplateError) as info:
        render_text(tokenizer, [{"role": "user", "content": "Hello"}])
    assert str(info.value) == NO_CHAT_TEMPLATE
