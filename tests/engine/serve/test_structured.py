"""response_format, tools and tool_choice through a real server and the official openai client (the tiny
random-weight model, with room for the tool descriptions: its weights know nothing, so every valid reply here is
the constraint's doing)."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest

from engine.inputs import LoadSpec
from engine.models.loader import load_model
from engine.serve.schemas import parse_chat
from engine.serve.tools import TOOL_OPEN, TOOLS_MODE_HEADER, CallStream, parse_tools
from tests.engine.serve.conftest import start_server
from tests.helpers.tiny_model import build_tiny_model

WEATHER = {"type": "object", "properties": {"city": {"enum": ["Paris", "Rome", "Oslo"]},
                                            "days": {"type": "integer", "minimum": 1, "maximum": 7}},
           "required": ["city", "days"], "additionalProperties": False}
TIME = {"type": "object", "properties": {"zone": {"type": "string", "maxLength": 8}}, "required": ["zone"],
        "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather forecast",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "get_time", "description": "Current time", "parameters": TIME}}]
PARAMS = {"get_weather": WEATHER, "get_time": TIME}
ANSWER = {"type": "object", "properties": {"answer": {"type": "string", "maxLength": 10},
                                           "score": {"type": "integer", "minimum": 0, "maximum": 100}},
          "required": ["answer", "score"], "additionalProperties": False}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    folder = build_tiny_model(tmp_path_factory.mktemp("tiny-long"), max_position_embeddings=4096)
    loaded = load_model(LoadSpec(model=str(folder), precision="fp32", device="cpu"))
    handle, stop = start_server(loaded)
    yield handle
    stop()


def _response_format(schema):
    return {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema, "strict": True}}


@pytest.mark.parametrize("seed", range(4))
def test_json_schema_reply_validates(served, seed):
    reply = served.client().chat.completions.create(
        model="default", messages=[{"role": "user", "content": f"Rate idea {seed}"}], seed=seed, max_tokens=300,
        response_format=_response_format(ANSWER))
    assert reply.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(reply.choices[0].message.content), ANSWER)


def _check_calls(calls, names=PARAMS):
    assert calls
    for call in calls:
        assert call.type == "function" and call.id.startswith("call_")
        assert call.function.name in names
        jsonschema.validate(json.loads(call.function.arguments), PARAMS[call.function.name])


@pytest.mark.parametrize("seed", range(3))
def test_tool_choice_required_gives_calls_whose_arguments_validate(served, seed):
    raw = served.client().chat.completions.with_raw_response.create(
        model="default", messages=ASK, tools=TOOLS, tool_choice="required", seed=seed, max_tokens=400)
    assert raw.headers[TOOLS_MODE_HEADER] == "prompted"
    reply = raw.parse()
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    _check_calls(choice.message.tool_calls)


def test_a_named_function_without_parallel_calls_is_called_once(served):
    reply = served.client().chat.completions.create(
        model="default", messages=ASK, tools=TOOLS, parallel_tool_calls=False, max_tokens=200,
        tool_choice={"type": "function", "function": {"name": "get_time"}}, seed=5)
    calls = reply.choices[0].message.tool_calls
    assert len(calls) == 1
    _check_calls(calls, names={"get_time"})


def test_streamed_tool_call_deltas_reassemble(served):
    stream = served.client().chat.completions.create(
        model="default", messages=ASK, tools=TOOLS, tool_choice="required", seed=7, max_tokens=400, stream=True)
    calls: dict[int, dict] = {}
    finish = None
    for chunk in stream:
        choice = chunk.choices[0]
        assert not choice.delta.content  # a forced call never leaks out as text
        for delta in choice.delta.tool_calls or []:
            call = calls.setdefault(delta.index, {"id": None, "name": "", "arguments": ""})
            call["id"] = delta.id or call["id"]
            if delta.function:
                call["name"] += delta.function.name or ""
                call["arguments"] += delta.function.arguments or ""
        finish = choice.finish_reason or finish
    assert finish == "tool_calls" and calls
    for call in calls.values():
        assert call["id"].startswith("call_")
        jsonschema.validate(json.loads(call["arguments"]), PARAMS[call["name"]])


def test_tool_results_go_back_through_the_template(served):
    history = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather",
                                                              "arguments": '{"city": "Paris", "days": 1}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"},
        {"role": "user", "content": "And tomorrow?"}]
    body = {"messages": history, "tools": TOOLS, "max_tokens": 3, "temperature": 0}
    parsed = parse_chat(json.dumps(body).encode())
    texts = [(m.role, m.content) for m in parsed.messages]
    assert texts[0][0] == "system" and "get_weather" in texts[0][1]
    assert texts[2] == ("assistant", TOOL_OPEN + '{"name": "get_weather", "arguments": {"city": "Paris", "days": 1}}'
                                     "</tool_call>")
    assert texts[3][0] == "user" and "sunny, 21 C" in texts[3][1] and "<tool_response>" in texts[3][1]
    status, headers, reply = served.raw("POST", "/v1/chat/completions", body)
    assert status == 200, reply
    assert headers[TOOLS_MODE_HEADER.lower()] == "prompted"


BAD = {
    "schema not an object": {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": [1]}}},
    "schema of an unknown type": {"response_format": _response_format({"type": "nonsense"})},
    "unknown response format": {"response_format": {"type": "xml"}},
    "tool parameters not a schema": {"tools": [{"type": "function", "function": {"name": "f", "parameters": 3}}]},
    "tool name with spaces": {"tools": [{"type": "function", "function": {"name": "two words"}}]},
    "tool of another type": {"tools": [{"type": "retrieval"}]},
    "required without tools": {"tool_choice": "required"},
    "unknown tool named": {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
    "unknown tool_choice": {"tools": TOOLS, "tool_choice": "always"},
    "tools with a response format": {"tools": TOOLS, "response_format": {"type": "json_object"}},
    "legacy functions": {"functions": [{"name": "f"}]},
    # Issue 40, item 8: schemas whose only instances are infinite answered 200 "stop" with '' or '{"a":'.
    "schema that is its own $ref": {"response_format": _response_format({"$ref": "#"})},
    "two $defs that refer to each other": {"response_format": _response_format(
        {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"})},
    "an object that requires itself": {"response_format": _response_format(
        {"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]})},
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_schemas_and_tools_are_400_and_the_server_keeps_serving(served, name):
    with pytest.raises(openai.BadRequestError) as caught:
        served.client().chat.completions.create(model="default", messages=ASK, max_tokens=2,
                                                 extra_body=BAD[name])
    error = caught.value.body
    assert error["type"] == "invalid_request_error" and error["message"] and "\n" not in error["message"]
    reply = served.client().chat.completions.create(model="default", messages=ASK, max_tokens=2, temperature=0)
    assert reply.choices[0].message.content is not None


def test_auto_streams_text_at_once_and_holds_back_a_call():
    plan = parse_tools(TOOLS, "auto", True)
    text = CallStream(plan)
    assert text.push(" <to") == "" and text.push("day") == " <today"  # diverged from the call tag: content
    assert text.push(" sun") == " sun"
    call = CallStream(plan)
    whole = ' <tool_call>{"name": "get_time", "arguments": {"zone": "UTC"}}</tool_call>'
    assert call.push(whole[:12]) == "" and call.push(whole[12:]) == ""
    assert plan.parse(whole)[0]["function"] == {"name": "get_time", "arguments": '{"zone": "UTC"}'}
    assert plan.parse("It is noon. " + whole) is None  # text first: a reply, not a call
    assert plan.parse('<tool_call>{"name": "rm_rf"}</tool_call>') is None  # no such tool
    # Cut at the budget while repeating the same call: the whole calls count, each once.
    repeated = plan.parse(whole + "\n" + whole + '\n<tool_call>{"name": "get_t')
    assert [c["function"] for c in repeated] == [{"name": "get_time", "arguments": '{"zone": "UTC"}'}]
