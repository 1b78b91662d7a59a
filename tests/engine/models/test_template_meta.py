"""``engine.models.template_meta``: whether a model ships a chat template, from the files transformers takes one
from, never the weights (issue 26): every place counts, an empty one does not, and a GGUF is judged by its header."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from engine.errors import BadInputError, CorruptModelError
from engine.generate.chat_template import NO_CHAT_TEMPLATE
from engine.models.template_meta import has_chat_template, require_chat_template
from tests.engine._local_models import write_llama_gguf
from tests.helpers.base_model import without_chat_template
from tests.helpers.tiny_model import CHATML_TEMPLATE


@pytest.fixture
def base(tiny_model_dir, tmp_path) -> Path:
    return without_chat_template(tiny_model_dir, tmp_path / "base")


def _set_config(folder: Path, **fields) -> None:
    path = folder / "tokenizer_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))


def test_the_tiny_model_has_one_and_its_base_copy_none(tiny_model_dir, base):
    assert has_chat_template(tiny_model_dir)
    assert not has_chat_template(base)
    with pytest.raises(BadInputError) as info:
        require_chat_template(base)
    assert str(info.value) == NO_CHAT_TEMPLATE


def test_each_place_transformers_reads_counts(base):
    _set_config(base, chat_template=CHATML_TEMPLATE)
    assert has_chat_template(base)
    _set_config(base, chat_template=[{"name": "default", "template": CHATML_TEMPLATE}])
    assert has_chat_template(base)
    _set_config(base, chat_template="  ")  # an empty template is none
    assert not has_chat_template(base)
    (base / "additional_chat_templates").mkdir()
    (base / "additional_chat_templates" / "tool_use.jinja").write_text(CHATML_TEMPLATE)
    assert has_chat_template(base)
    shutil.rmtree(base / "additional_chat_templates")
    (base / "chat_template.jinja").write_text(CHATML_TEMPLATE)
    assert has_chat_template(base)


def test_a_gguf_is_judged_by_its_header(tiny_model_dir, tmp_path):
    path = write_llama_gguf(tiny_model_dir, tmp_path / "tiny.gguf")
    assert has_chat_template(path.parent, path.name)
    with path.open("r+b") as handle:  # a damaged header is the loader's refusal, not a missing template
        handle.truncate(64)
    with pytest.raises(CorruptModelError):
        has_chat_template(path.parent, path.name)
