"""``POST /v1/completions`` as a raw text completion (issue 26): the prompt continued with no chat template, so a
base model without one is served. A real server on an ephemeral port over the tiny model without a chat template,
the official ``openai`` client's ``completions.create``; the reference is ``ChatSession.complete`` on the same
model."""

from __future__ import annotations

import json

import openai
import pytest

from engine.generate.session import ChatSession
from engine.inputs import LoadSpec, SamplingConfig
from engine.models.loader import load_model
from engine.events import Finished
from tests.engine.serve.conftest import start_server
from tests.helpers.base_model import without_chat_template

PROMPT = "The capital of France is"
STEPS = 8


@pytest.fixture(scope="module")
def base_loaded(tiny_model_dir, tmp_path_factory):
    base = without_chat_template(tiny_model_dir, tmp_path_factory.mktemp("base") / "tiny-base")
    return load_model(LoadSpec(model=str(base), precision="fp32", device="cpu"))


@pytest.fixture(scope="module")
def base_server(base_loaded):
    served, stop = start_server(base_loaded)
    yield served
    stop()


@pytest.fixture(scope="module")
def reference(base_loaded) -> str:
    """``ChatSession.complete``'s greedy continuation of PROMPT, STEPS tokens at most."""
    events = list(ChatSession(base_loaded).complete(PROMPT, SamplingConfig(temperature=0.0, max_new_tokens=STEPS)))
    finished = events[-1]
    assert isinstance(finished, Finished) and finished.reason in ("eos", "length")
    return finished.text


def _create(served, **kwargs):
    return served.client().completions.create(model="default", prompt=PROMPT, max_tokens=STEPS, temperature=0,
                                              **kwargs)


def test_a_template_less_model_continues_the_prompt_raw_streamed_or_whole(base_server, reference):
    raw = base_server.client().completions.with_raw_response.create(model="default", prompt=PROMPT,
                                                                    max_tokens=STEPS, temperature=0)
    assert raw.headers["x-miaohui-completion-mode"] == "raw"
    whole = raw.parse()
    choice = whole.choices[0]
    assert whole.object == "text_completion" and reference and choice.text == reference
    assert choice.finish_reason in ("stop", "length") and 1 <= whole.usage.completion_tokens <= STEPS
    assert whole.usage.prompt_tokens == len(base_server.worker.loaded.tokenizer.encode(PROMPT))
    chunks = list(_create(base_server, stream=True, stream_options={"include_usage": True}))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == reference
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == choice.finish_reason


def test_a_one_string_list_is_the_same_prompt(base_server, reference):
    reply = base_server.client().completions.create(model="default", prompt=[PROMPT], max_tokens=STEPS, temperature=0)
    assert reply.choices[0].text == reference


def test_echo_returns_the_prompt_before_the_continuation(base_server, reference):
    assert _create(base_server, echo=True).choices[0].text == PROMPT + reference
    chunks = [c.choices[0].text for c in _create(base_server, echo=True, stream=True) if c.choices]
    assert chunks[0] == PROMPT and "".join(chunks) == PROMPT + reference


def test_stop_strings_and_max_tokens_apply_to_the_continuation(base_server, reference):
    stop = reference[len(reference) // 2:][:3]
    assert stop.strip(), f"the greedy continuation {reference!r} has no stop string to test with"
    reply = _create(base_server, stop=[stop])
    assert reply.choices[0].finish_reason == "stop" and reply.choices[0].text == reference[:reference.index(stop)]
    short = base_server.client().completions.create(model="default", prompt=PROMPT, max_tokens=1, temperature=0)
    assert short.usage.completion_tokens == 1


def test_logprobs_in_the_legacy_completions_shape(base_server, reference):
    choice = _create(base_server, logprobs=2).choices[0]
    assert choice.text == reference
    logprobs = choice.logprobs
    n = len(logprobs.tokens)
    assert n >= 1 and len(logprobs.token_logprobs) == len(logprobs.top_logprobs) == len(logprobs.text_offset) == n
    assert logprobs.text_offset[0] == 0 and logprobs.text_offset == sorted(logprobs.text_offset)
    assert all(len(top) <= 2 for top in logprobs.top_logprobs)


@pytest.mark.parametrize("fields, param, words", [
    ({"suffix": " and that is all."}, "suffix", "suffix"),
    ({"prompt": [1, 2, 3]}, "prompt", "token ids"),
    ({"prompt": ["one", "two"]}, "prompt", "one"),
    ({"echo": True, "logprobs": 1}, "logprobs", "echo"),
])
def test_what_a_raw_completion_cannot_do_is_a_clear_400_and_the_server_keeps_serving(base_server, reference, fields,
                                                                                     param, words):
    body = {"model": "default", "prompt": PROMPT, "max_tokens": 2, **fields}
    status, _, raw = base_server.raw("POST", "/v1/completions", body)
    error = json.loads(raw)["error"]
    assert status == 400 and error["param"] == param and words in error["message"], error
    assert _create(base_server).choices[0].text == reference


def test_suffix_through_the_openai_client_is_a_bad_request(base_server, reference):
    with pytest.raises(openai.BadRequestError, match="suffix"):
        _create(base_server, suffix="!")
    assert _create(base_server).choices[0].text == reference


def test_the_chat_route_on_a_template_less_model_still_refuses_clearly(base_server, reference):
    with pytest.raises(openai.BadRequestError, match="chat template") as caught:
        base_server.client().chat.completions.create(model="default", messages=[{"role": "user", "content": "Hi"}],
                                                     max_tokens=2)
    assert caught.value.status_code == 400
    assert _create(base_server).choices[0].text == reference


def test_an_empty_prompt_or_one_beyond_the_context_is_a_400_when_the_job_starts(base_server, reference):
    status, _, raw = base_server.raw("POST", "/v1/completions", {"prompt": "", "max_tokens": 2})
    assert status == 400 and json.loads(raw)["error"]["param"] == "prompt"
    too_long = "word " * (base_server.worker.context_max + 8)
    status, _, raw = base_server.raw("POST", "/v1/completions", {"prompt": too_long, "max_tokens": 2})
    error = json.loads(raw)["error"]
    assert status == 400 and error["param"] == "prompt" and error["code"] == "context_length_exceeded", error
    assert _create(base_server).choices[0].text == reference
