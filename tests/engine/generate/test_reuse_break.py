"""Where a prompt stopped matching the KV cache (issue 30's marker and hint), on the real default model."""

from __future__ import annotations

import pytest

from engine.events import Finished, Message, PrefillProgress, ReuseBreak, Started
from engine.generate.reuse_break import find_break
from engine.generate.session import ChatSession
from engine.inputs import LoadSpec, SamplingConfig
from engine.models.loader import load_model

GREEDY = SamplingConfig(temperature=0.0, max_new_tokens=6)


@pytest.fixture(scope="module")
def loaded(default_model_dir):
    return load_model(LoadSpec(model=str(default_model_dir), precision="fp32", device="cpu"))


def _turn(session: ChatSession, messages: list[Message]) -> list:
    return list(session.generate(messages, GREEDY))


def test_a_changed_date_in_the_system_prompt_is_marked_in_the_system_message(loaded):
    session = ChatSession(loaded)
    first = _turn(session, [Message("system", "Today is 2026-12-02. Be brief."), Message("user", "Hello there")])
    assert first[0].reuse_break is None  # an empty cache breaks nothing
    reply = next(e for e in first if isinstance(e, Finished)).text
    second = _turn(session, [Message("system", "Today is 2026-12-03. Be brief."), Message("user", "Hello there"),
                             Message("assistant", reply), Message("user", "And now?")])
    started = second[0]
    assert isinstance(started, Started)
    broke = started.reuse_break
    assert isinstance(broke, ReuseBreak)
    assert broke.position == started.reused_tokens > 0
    assert broke.message_index == 0 and broke.role == "system"
    assert broke.changed_value == "2026-12-03" and broke.was_value == "2026-12-02"
    assert broke.recomputed_tokens == started.prompt_tokens - broke.position
    assert "3" in broke.now and "2" in broke.was and broke.before.strip()
    progress = [e for e in second if isinstance(e, PrefillProgress)]
    assert progress[-1].done == progress[-1].total == broke.recomputed_tokens


def test_a_following_turn_that_keeps_the_prefix_has_no_break(loaded):
    session = ChatSession(loaded)
    chat = [Message("system", "Today is 2026-12-02."), Message("user", "Hello there")]
    reply = next(e for e in _turn(session, chat) if isinstance(e, Finished)).text
    second = _turn(session, chat + [Message("assistant", reply), Message("user", "And now?")])
    assert second[0].reused_tokens > 0
    assert second[0].reuse_break is None or second[0].reuse_break.role == "assistant"  # a template may re-spell it


def test_an_edited_earlier_user_turn_is_found_without_a_value(loaded):
    tokenizer = loaded.tokenizer
    old = [Message("user", "Tell me about cats please")]
    new = [Message("user", "Tell me about dogs please")]
    ids = lambda m: tokenizer.apply_chat_template([{"role": x.role, "content": x.content} for x in m],  # noqa: E731
                                                  add_generation_prompt=True, tokenize=True, return_dict=False)
    broke = find_break(tokenizer, ids(old), ids(new), new)
    assert broke is not None and broke.message_index == 0 and broke.role == "user"
    assert "dog" in broke.now and "cat" in broke.was and broke.changed_value == ""
    assert find_break(tokenizer, ids(old), ids(old), old) is None  # the same prompt: nothing broke
    assert find_break(tokenizer, ids(old)[:5], ids(old), old) is None  # a longer prompt: nothing broke
