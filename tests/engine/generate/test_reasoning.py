"""Reasoning models: the thought told apart from the answer, in the splitter and through a real session.

The session tests use the tiny reasoning model (tests/helpers/reasoning_model.py): real weights that always write
``<think>`` thought ``</think>`` answer, under a Qwen3-style template (the model opens the thought; the
``enable_thinking`` switch) and an R1-style one (the template opens it).
"""

from __future__ import annotations

import copy

import pytest

from engine.errors import BadInputError
from engine.events import Finished, Message, Token
from engine.generate.reasoning import (ReasoningFormat, ReasoningSplitter, check_template_kwargs,
                                      continuation_text, opens_thought, reasoning_format, split_reasoning)
from engine.generate.session import ChatSession
from engine.inputs import LoadSpec, SamplingConfig
from engine.models.loader import load_model
from tests.helpers.reasoning_model import build_reasoning_model, expected_texts

FMT = ReasoningFormat()
REPLY = "<think>\nFirst, 巴黎 is…\n</think>\n\nThe answer: Paris 😀"


@pytest.mark.parametrize("cut", range(len(REPLY) + 1))
def test_every_split_of_the_stream_gives_the_same_parts(cut):
    splitter = ReasoningSplitter(FMT)
    pieces = [splitter.push(REPLY[:cut]), splitter.push(REPLY[cut:]), splitter.flush()]
    assert "".join(p[0] for p in pieces).rstrip() == "First, 巴黎 is…"
    assert "".join(p[1] for p in pieces) == "The answer: Paris 😀"


def test_character_by_character_never_shows_a_marker():
    splitter = ReasoningSplitter(FMT)
    shown = [splitter.push(ch) for ch in REPLY] + [splitter.flush()]
    assert not any("<" in thought or "<" in answer for thought, answer in shown)
    assert splitter.part == "answer"


def test_a_thought_opened_by_the_prompt_and_one_never_closed():
    assert split_reasoning("thinking hard\n</think>\nyes", FMT, inside=True) == ("thinking hard", "yes")
    assert split_reasoning("<think>cut off here", FMT) == ("cut off here", "")


def test_an_answer_that_mentions_the_markers_is_left_alone():
    text = "Use <think> and </think> tags."
    assert split_reasoning(text, FMT) == ("", text)
    assert split_reasoning("<thin", FMT) == ("", "<thin")  # an unfinished marker at the end is text
    assert split_reasoning("<think>x</think>y", None) == ("", "<think>x</think>y")  # no format: all answer


def test_format_from_the_template_and_the_prompt_tail():
    assert reasoning_format("{{ messages }}") is None
    qwen = reasoning_format("{% if enable_thinking %}..{{ m.reasoning_content }}</think>")
    assert qwen.takes_enable_thinking and qwen.passes_reasoning
    assert opens_thought("<|im_start|>assistant\n<think>\n", FMT)
    assert not opens_thought("<|im_start|>assistant\n<think>\n\n</think>\n\n", FMT)
    assert not opens_thought("<|im_start|>assistant\n", None)


def test_template_kwargs_are_checked():
    assert check_template_kwargs({"enable_thinking": False}) == {"enable_thinking": False}
    assert check_template_kwargs(None) == {}
    for bad in ({"messages": []}, {"add_generation_prompt": False}, {"x": {"nested": 1}}, {"not a name": 1}):
        with pytest.raises(BadInputError):
            check_template_kwargs(bad)


def test_continuation_text_reopens_a_cut_thought():
    assert continuation_text("abc", "", FMT, prompt_opened=False) == "<think>\nabc"
    assert continuation_text("abc", "", FMT, prompt_opened=True) == "abc"
    assert continuation_text("abc", "Par", FMT, prompt_opened=True) == "abc\n</think>\n\nPar"
    assert continuation_text("", "Par", None, prompt_opened=False) == "Par"


# -- through a real session ---------------------------------------------------------------------------------
GREEDY = SamplingConfig(temperature=0.0, max_new_tokens=40)


@pytest.fixture(scope="module")
def qwen(reasoning_model_dir):
    return ChatSession(load_model(LoadSpec(model=str(reasoning_model_dir), precision="fp32", device="cpu")))


@pytest.fixture(scope="module")
def r1(tmp_path_factory):
    folder = build_reasoning_model(tmp_path_factory.mktemp("r1"), opens=True)
    return ChatSession(load_model(LoadSpec(model=str(folder), precision="fp32", device="cpu")))


def _run(session, **kwargs):
    events = list(session.generate([Message("user", "Capital of France?")], kwargs.pop("config", GREEDY),
                                   **kwargs))
    return [e for e in events if isinstance(e, Token)], events[-1]


@pytest.mark.parametrize("which", ["qwen", "r1"])
def test_the_reply_is_split_and_each_token_says_its_part(which, request, reasoning_model_dir):
    session = request.getfixturevalue(which)
    thought, answer = expected_texts(reasoning_model_dir)
    tokens, finished = _run(session)
    assert isinstance(finished, Finished) and finished.reason == "eos"
    assert (finished.reasoning, finished.text) == (thought.strip(), answer.strip())
    assert "".join(t.reasoning for t in tokens).strip() == thought.strip()
    assert "".join(t.text for t in tokens) == finished.text
    parts = [t.part for t in tokens]
    assert parts == sorted(parts, reverse=True) and "reasoning" in parts and "answer" in parts  # thought first
    m = finished.metrics
    assert m.thinking_tokens == parts.count("reasoning")
    assert m.ttft_thought_s == m.ttft_s < m.ttft_answer_s <= m.e2e_s
    assert m.thinking_s is not None and m.thinking_s >= 0
    assert m.to_dict()["thinking_tokens"] == m.thinking_tokens


def test_enable_thinking_false_answers_without_a_thought(qwen, reasoning_model_dir):
    _, answer = expected_texts(reasoning_model_dir)
    tokens, finished = _run(qwen, template_kwargs={"enable_thinking": False})
    assert (finished.reasoning, finished.text.strip()) == ("", answer.strip())
    assert {t.part for t in tokens} == {"answer"}
    assert finished.metrics.thinking_tokens == 0 and finished.metrics.ttft_thought_s is None
    assert finished.metrics.ttft_answer_s == finished.metrics.ttft_s


def test_a_bad_template_kwarg_is_refused_before_anything_runs(qwen):
    with pytest.raises(BadInputError):
        qwen.generate([Message("user", "hi")], GREEDY, template_kwargs={"messages": "x"})


@pytest.mark.parametrize("cut", [2, 3, 6])
def test_a_reply_cut_at_its_limit_continues_where_it_stopped(qwen, cut, reasoning_model_dir):
    thought, answer = expected_texts(reasoning_model_dir)
    _, first = _run(qwen, config=SamplingConfig(temperature=0.0, max_new_tokens=cut))
    assert first.reason == "length"
    _, rest = _run(qwen, partial=Message("assistant", first.text, first.reasoning))
    assert rest.reason == "eos"
    assert (first.reasoning + rest.reasoning).strip() == thought.strip()
    assert first.text + rest.text == answer.strip()


def test_an_earlier_thought_goes_back_only_as_the_template_takes_it(qwen, r1):
    from engine.generate.context import build_prompt

    history = [Message("user", "a"), Message("assistant", "Paris", "SECRET THOUGHT"), Message("user", "b")]
    for session, kept in ((qwen, False), (r1, False)):
        ids = build_prompt(session.loaded.tokenizer, history, 256, 8).ids
        assert ("SECRET" in session.loaded.tokenizer.decode(ids)) is kept
    # A template that reads reasoning_content is given it (and may show it).
    tokenizer = copy.deepcopy(qwen.loaded.tokenizer)
    tokenizer.chat_template = ("{% for m in messages %}{{ m.role }}:{{ m.get('reasoning_content', '') }}|{{ m.content }}"
                               "</think>\n{% endfor %}")
    assert "SECRET THOUGHT|Paris" in tokenizer.decode(build_prompt(tokenizer, history, 256, 8).ids)
