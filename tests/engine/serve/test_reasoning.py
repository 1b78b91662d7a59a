"""A reasoning model served: ``reasoning_content`` beside ``content`` (whole and streamed, as vLLM and DeepSeek's
API give it), ``chat_template_kwargs: {enable_thinking: false}`` (vLLM's switch), the thought's tokens in the usage,
and an earlier thought sent back; through the official ``openai`` client against a real server."""

from __future__ import annotations

import json

import pytest

from engine.inputs import LoadSpec
from engine.models.loader import load_model
from tests.engine.serve.conftest import start_server
from tests.helpers.reasoning_model import expected_texts

ASK = [{"role": "user", "content": "Capital of France?"}]


@pytest.fixture(scope="module")
def served(reasoning_model_dir):
    served, stop = start_server(load_model(LoadSpec(model=str(reasoning_model_dir), precision="fp32",
                                                    device="cpu")))
    yield served
    stop()


def test_the_answer_and_the_thought_apart(served, reasoning_model_dir):
    thought, answer = expected_texts(reasoning_model_dir)
    reply = served.client().chat.completions.create(model=served.worker.model_id, messages=ASK, temperature=0)
    message = reply.choices[0].message
    assert (message.content, message.reasoning_content) == (answer, thought)
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage.completion_tokens_details.reasoning_tokens > 0


def test_streamed_deltas_carry_reasoning_content_then_content(served, reasoning_model_dir):
    thought, answer = expected_texts(reasoning_model_dir)
    stream = served.client().chat.completions.create(model=served.worker.model_id, messages=ASK, temperature=0, stream=True)
    kinds, thoughts, texts = [], [], []
    for chunk in stream:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        piece = getattr(delta, "reasoning_content", None)
        if piece:
            thoughts.append(piece)
            kinds.append("reasoning")
        if delta.content:
            texts.append(delta.content)
            kinds.append("answer")
    assert "".join(thoughts).strip() == thought and "".join(texts) == answer
    assert kinds == sorted(kinds, reverse=True)  # every thought delta before the first answer delta


def test_enable_thinking_false_through_chat_template_kwargs(served, reasoning_model_dir):
    _, answer = expected_texts(reasoning_model_dir)
    reply = served.client().chat.completions.create(
        model=served.worker.model_id, messages=ASK, temperature=0, extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    message = reply.choices[0].message
    assert message.content == answer and getattr(message, "reasoning_content", None) is None


@pytest.mark.parametrize("kwargs", [{"messages": []}, {"enable_thinking": {"deep": True}}, "yes"])
def test_bad_chat_template_kwargs_are_a_400_and_the_server_keeps_serving(served, kwargs):
    status, _, body = served.raw("POST", "/v1/chat/completions",
                                 {"model": served.worker.model_id, "messages": ASK, "chat_template_kwargs": kwargs})
    assert status == 400 and "chat_template_kwargs" in json.loads(body)["error"]["message"] + str(
        json.loads(body)["error"].get("param"))
    assert served.client().chat.completions.create(model=served.worker.model_id, messages=ASK, max_tokens=2).choices


def test_an_earlier_thought_is_accepted_back(served, reasoning_model_dir):
    thought, answer = expected_texts(reasoning_model_dir)
    history = ASK + [{"role": "assistant", "content": answer, "reasoning_content": thought},
                     {"role": "user", "content": "And Spain?"}]
    reply = served.client().chat.completions.create(model=served.worker.model_id, messages=history, temperature=0)
    assert reply.choices[0].message.content == answer
