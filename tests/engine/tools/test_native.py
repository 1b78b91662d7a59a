"""Which tool mode a model's chat template gets: native (the template describes the tools and writes calls and
results itself, in the ``<tool_call>`` / ``<tool_response>`` format) or prompted (anything else)."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from engine.tools.calls import native_tools
from tests.helpers.tiny_model import build_tiny_tokenizer
from tests.helpers.tool_template import QWEN_STYLE_TOOL_TEMPLATE

# Tool support in another call format (Llama 3.1's bare JSON): the template knows tools, but not this format.
OTHER_FORMAT = (
    "{% if tools %}Tools: {% for t in tools %}{{ t | tojson }}{% endfor %}\n{% endif %}"
    "{% for m in messages %}{% if m.tool_calls %}{% for c in m.tool_calls %}"
    '{"name": "{{ c.function.name }}", "parameters": {{ c.function.arguments | tojson }}}{% endfor %}'
    "{% else %}{{ m.role }}: {{ m.content }}\n{% endif %}{% endfor %}"
)


def _tokenizer(template):
    tokenizer = build_tiny_tokenizer()
    tokenizer.chat_template = template
    return tokenizer


def test_a_qwen_style_tool_template_is_native():
    assert native_tools(_tokenizer(QWEN_STYLE_TOOL_TEMPLATE)) is True


def test_a_plain_chatml_template_is_prompted():
    assert native_tools(build_tiny_tokenizer()) is False


def test_tools_in_another_call_format_are_prompted():
    assert native_tools(_tokenizer(OTHER_FORMAT)) is False


def test_a_template_that_fails_on_the_probe_is_prompted():
    assert native_tools(_tokenizer("{{ raise_exception('no tools here') }}")) is False


@pytest.mark.default_model
def test_the_default_model_is_prompted(default_model_dir):
    assert native_tools(AutoTokenizer.from_pretrained(default_model_dir)) is False
