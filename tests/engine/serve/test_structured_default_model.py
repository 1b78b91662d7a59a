"""The issue's bar on the real default model: the official openai client gets json_schema replies that validate on
20 varied prompts, and a tool_choice: required call whose arguments validate."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest

from engine.inputs import LoadSpec
from engine.models.loader import load_model
from tests.engine.serve.conftest import start_server

SCHEMA = {"type": "object", "properties": {
    "summary": {"type": "string", "maxLength": 40},
    "sentiment": {"enum": ["positive", "neutral", "negative"]},
    "confidence": {"type": "integer", "minimum": 0, "maximum": 10},
    "keywords": {"type": "array", "items": {"type": "string", "maxLength": 16}, "maxItems": 2}},
    "required": ["summary", "sentiment", "confidence", "keywords"], "additionalProperties": False}
PROMPTS = [
    "I love this phone, the battery lasts two days.", "The train was late again and nobody told us why.",
    "What is the capital of France?", "Write a haiku about autumn.", "Explain photosynthesis to a child.",
    "My cat knocked a glass off the table.", "Review: the film was long but the music was wonderful.",
    "List three prime numbers.", "How do I boil an egg?", "The meeting is moved to Thursday at 3 pm.",
    "Translate 'good morning' into Spanish.", "Why is the sky blue?", "I failed my driving test today.",
    "Recommend a book for a long flight.", "The soup was cold and too salty.", "Summarise the plot of Hamlet.",
    "Is it better to rent or to buy a house?", "Our team won the championship!", "2 + 2 = ?",
    "Describe the smell of rain.",
]
WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40},
                                            "unit": {"enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "unit"], "additionalProperties": False}


def _client(served) -> openai.OpenAI:
    # A generous bound for one reply of up to 120 tokens on a shared, busy CPU (a guard against a hang only).
    return openai.OpenAI(base_url=served.url + "/v1", api_key=served.key, max_retries=0, timeout=600)


@pytest.fixture(scope="module")
def served(default_model_dir):
    loaded = load_model(LoadSpec(model=str(default_model_dir), precision="bf16", device="cpu"))
    handle, stop = start_server(loaded)
    yield handle
    stop()


@pytest.mark.default_model
@pytest.mark.timeout(3600)  # 20 replies on a shared 2-core CPU: a guard against a hang, not a speed bound
def test_json_schema_replies_validate_on_20_prompts(served):
    assert len(set(PROMPTS)) == 20
    client = _client(served)
    for i, prompt in enumerate(PROMPTS):
        reply = client.chat.completions.create(
            model="default", messages=[{"role": "user", "content": prompt}], seed=i, temperature=0.7,
            max_tokens=120,
            response_format={"type": "json_schema", "json_schema": {"name": "note", "schema": SCHEMA, "strict": True}})
        assert reply.choices[0].finish_reason == "stop", (prompt, reply.choices[0].message.content)
        jsonschema.validate(json.loads(reply.choices[0].message.content), SCHEMA)


@pytest.mark.default_model
def test_required_tool_call_arguments_validate(served):
    reply = _client(served).chat.completions.create(
        model="default", messages=[{"role": "user", "content": "What's the weather like in Lyon today?"}],
        tools=[{"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
                                                 "parameters": WEATHER}}],
        tool_choice="required", temperature=0, max_tokens=120)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    for call in choice.message.tool_calls:
        assert call.function.name == "get_weather"
        jsonschema.validate(json.loads(call.function.arguments), WEATHER)
