"""A chat template with tool support in the Hermes/Qwen2.5 format, for the tiny model: written for these tests and
modeled on Qwen2.5-Instruct's (ChatML turns; the tools as JSON inside ``<tools>`` in the system turn; an assistant's
calls as ``<tool_call>`` JSON; tool results as ``<tool_response>`` inside a user turn). Its own wording
("Function signatures", "Reply to call one") differs from the engine's prompted mode, so a test can tell whose
description of the tools the model saw."""

from __future__ import annotations

TOOL_HEADER = "Function signatures inside <tools></tools>:"

QWEN_STYLE_TOOL_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n"
    "{% if messages[0].role == 'system' %}{{ messages[0].content }}\n\n{% endif %}"
    "# Tools\n\n" + TOOL_HEADER + "\n<tools>"
    "{% for tool in tools %}\n{{ tool | tojson }}{% endfor %}\n</tools>\n\n"
    "Reply to call one with a JSON object inside <tool_call></tool_call> tags:\n"
    '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
    "{% elif messages[0].role == 'system' %}<|im_start|>system\n{{ messages[0].content }}<|im_end|>\n{% endif %}"
    "{% for message in messages %}"
    "{% if message.role == 'user' or (message.role == 'assistant' and not message.tool_calls) %}"
    "<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n"
    "{% elif message.role == 'assistant' %}"
    "<|im_start|>assistant{% if message.content %}\n{{ message.content }}{% endif %}"
    "{% for call in message.tool_calls %}"
    '\n<tool_call>\n{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments | tojson }}}'
    "\n</tool_call>{% endfor %}<|im_end|>\n"
    "{% elif message.role == 'tool' %}"
    "{% if loop.first or messages[loop.index0 - 1].role != 'tool' %}<|im_start|>user{% endif %}"
    "\n<tool_response>\n{{ message.content }}\n</tool_response>"
    "{% if loop.last or messages[loop.index0 + 1].role != 'tool' %}<|im_end|>\n{% endif %}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_tool_model(folder, **overrides):
    """The tiny random-weight model (tests.helpers.tiny_model) with ``QWEN_STYLE_TOOL_TEMPLATE`` as its template."""
    from transformers import AutoTokenizer

    from tests.helpers.tiny_model import build_tiny_model

    folder = build_tiny_model(folder, **overrides)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.chat_template = QWEN_STYLE_TOOL_TEMPLATE
    tokenizer.save_pretrained(folder)
    return folder
