"""Native tool mode through a real server and the official openai client: a model whose chat template supports
tools in the ``<tool_call>`` format (the tiny random-weight model with a template modeled on Qwen2.5's,
tests.helpers.tool_template) gets the request's ``tools`` and its tool turns through that template; the plain
ChatML template of the same model stays prompted (tests/engine/serve/test_structured.py covers that mode)."""

from __future__ import annotations

import json

import jsonschema
import pytest

from engine.generate.context import build_prompt
from engine.inputs import LoadSpec
from engine.models.loader import load_model
from engine.serve.schemas import parse_chat
from engine.serve.tools import TOOLS_MODE_HEADER
from tests.engine.serve.conftest import start_server
from tests.engine.serve.test_structured import ASK, PARAMS, TOOLS
from tests.helpers.tiny_model import build_tiny_model
from tests.helpers.tool_template import TOOL_HEADER, build_tool_model

HISTORY = ASK + [
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather",
                                                          "arguments": '{"city": "Paris", "days": 1}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"}]


@pytest.fixture(scope="module")
def native(tmp_path_factory):
    folder = build_tool_model(tmp_path_factory.mktemp("tiny-tools"), max_position_embeddings=4096)
    loaded = load_model(LoadSpec(model=str(folder), precision="fp32", device="cpu"))
    handle, stop = start_server(loaded)
    yield handle, loaded
    stop()


@pytest.fixture(scope="module")
def prompted(tmp_path_factory):
    folder = build_tiny_model(tmp_path_factory.mktemp("tiny-plain"), max_position_embeddings=4096)
    handle, stop = start_server(load_model(LoadSpec(model=str(folder), precision="fp32", device="cpu")))
    yield handle
    stop()


@pytest.mark.parametrize("seed", range(2))
def test_required_call_is_native_and_its_arguments_validate(native, seed):
    served, _ = native
    raw = served.client().chat.completions.with_raw_response.create(
        model="default", messages=ASK, tools=TOOLS, tool_choice="required", seed=seed, max_tokens=400)
    assert raw.headers[TOOLS_MODE_HEADER] == "native"
    choice = raw.parse().choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    for call in choice.message.tool_calls:
        jsonschema.validate(json.loads(call.function.arguments), PARAMS[call.function.name])


def test_the_plain_template_stays_prompted(prompted):
    raw = prompted.client().chat.completions.with_raw_response.create(
        model="default", messages=ASK, tools=TOOLS, tool_choice="required", seed=0, max_tokens=400)
    assert raw.headers[TOOLS_MODE_HEADER] == "prompted"
    assert raw.parse().choices[0].finish_reason == "tool_calls"


def test_a_tool_result_goes_back_through_the_template_and_is_answered(native):
    served, loaded = native
    raw = served.client().chat.completions.with_raw_response.create(
        model="default", messages=HISTORY, tools=TOOLS, max_tokens=5, temperature=0)
    assert raw.headers[TOOLS_MODE_HEADER] == "native"
    reply = raw.parse()
    assert reply.choices[0].finish_reason in ("stop", "length", "tool_calls")
    # The prompt the server rendered for this request, token for token (same count as the reply's usage).
    parsed = parse_chat(json.dumps({"messages": HISTORY, "tools": TOOLS}).encode(), native=True)
    assert [m.role for m in parsed.messages] == ["user", "assistant", "tool"]
    ids = build_prompt(loaded.tokenizer, parsed.messages, 4096, 1, tools=parsed.template_tools).ids
    assert reply.usage.prompt_tokens == len(ids)
    seen = loaded.tokenizer.decode(list(ids), skip_special_tokens=False)
    assert "<tool_response>\nsunny, 21 C\n</tool_response>" in seen  # the template's own wrapper
    assert TOOL_HEADER in seen and '"description": "Weather forecast"' in seen  # its description of `tools`
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 1}}\n</tool_call>' in seen
    assert "You can call functions" not in seen  # not the prompted mode's system text
