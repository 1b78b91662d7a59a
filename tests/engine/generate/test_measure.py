"""measure_prompt on the tiny model: it predicts what the next turn's ChatSession computes, trims and reuses."""

from __future__ import annotations

import pytest

from engine.errors import ContextTooLongError
from engine.events import Finished, Message, Started
from engine.generate.measure import measure_prompt, shared_prefix
from engine.generate.session import ChatSession
from engine.inputs import LoadSpec, SamplingConfig
from engine.models.loader import load_model

GREEDY = SamplingConfig(temperature=0.0, max_new_tokens=8)


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    return load_model(LoadSpec(model=str(tiny_model_dir), precision="fp32", device="cpu"))


def _turn(session: ChatSession, messages: list[Message]) -> tuple[Started, Finished]:
    events = list(session.generate(messages, GREEDY))
    return events[0], events[-1]


def test_shared_prefix():
    assert (shared_prefix([1, 2, 3], [1, 2, 4]), shared_prefix([], [1]), shared_prefix([1, 2], [1, 2, 3])) == (2, 0, 2)


def test_the_measure_of_a_turn_is_what_the_session_then_computes(loaded):
    session = ChatSession(loaded)
    first = [Message("system", "You are Miaohui."), Message("user", "What is the capital of France?")]
    cold = measure_prompt(loaded, first, GREEDY.max_new_tokens, session.cached_ids())
    started, finished = _turn(session, first)
    assert (cold.prompt_tokens, cold.cached_tokens, cold.dropped_turns) == (started.prompt_tokens, 0, 0)
    assert cold.text_tokens == len(loaded.tokenizer.encode("What is the capital of France?", add_special_tokens=False))
    assert cold.context_max == loaded.facts.context_length and cold.reply_budget == GREEDY.max_new_tokens

    second = first + [Message("assistant", finished.text), Message("user", "And of Italy?")]
    warm = measure_prompt(loaded, second, GREEDY.max_new_tokens, session.cached_ids())
    started, _ = _turn(session, second)
    assert warm.cached_tokens == started.reused_tokens > 0 and warm.prompt_tokens == started.prompt_tokens
    assert measure_prompt(loaded, second, 8, session.cached_ids(use_kv_cache=False)).cached_tokens == 0


def test_trimming_and_refusals_are_the_sessions(loaded):
    context = loaded.facts.context_length
    words = "KV cache " * (context // 3)
    history = [Message("user", words), Message("assistant", "ok"), Message("user", "short question")]
    measured = measure_prompt(loaded, history, GREEDY.max_new_tokens)
    started, _ = _turn(ChatSession(loaded), history)
    assert measured.dropped_turns == started.dropped_turns == 2 and measured.prompt_tokens == started.prompt_tokens
    with pytest.raises(ContextTooLongError):
        measure_prompt(loaded, [Message("user", "KV cache " * context)], GREEDY.max_new_tokens)


def test_the_forecast_of_a_history_of_thousands_of_turns_is_the_sessions_trim(loaded):
    # Issue 31 (5): measuring rendered the whole history first, so the composer's forecast of a 20,000-turn
    # conversation ran out the template's 5 s budget instead of saying how many turns would be left out.
    history = [Message("system", "You are Miaohui.")]
    for i in range(20_000):
        history += [Message("user", f"question {i} about Paris"), Message("assistant", f"answer {i}: Paris.")]
    history.append(Message("user", "newest"))
    measured = measure_prompt(loaded, history, GREEDY.max_new_tokens)
    started, finished = _turn(ChatSession(loaded), history)
    assert measured.dropped_turns == started.dropped_turns > 39_000 and measured.prompt_tokens == started.prompt_tokens
    assert measured.text_tokens == len(loaded.tokenizer.encode("newest", add_special_tokens=False))
    assert finished.reason in ("eos", "length")


def test_a_conversation_that_ends_with_a_reply_is_counted_as_the_template_holds_it(loaded):
    session = ChatSession(loaded)
    question = [Message("system", "You are Miaohui."), Message("user", "What is the capital of France?")]
    _started, finished = _turn(session, question)
    held = question + [Message("assistant", "Paris, on the Seine.")]
    measured = measure_prompt(loaded, held, GREEDY.max_new_tokens, session.cached_ids())
    own = loaded.tokenizer.apply_chat_template([{"role": m.role, "content": m.content} for m in held],
                                               add_generation_prompt=False, tokenize=True, return_dict=False)
    assert measured.prompt_tokens == len(own)  # the template's own count: no generation prompt after the reply
    assert measured.text_tokens == len(loaded.tokenizer.encode("Paris, on the Seine.", add_special_tokens=False))
    assert (measured.dropped_turns, measured.reply_budget) == (0, 0)
    assert measured.context_max == loaded.facts.context_length
    assert measured.cached_tokens == shared_prefix(session.cached_ids(), own) > 0  # the question's turn is cached
