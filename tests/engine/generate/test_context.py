"""Prompt rendering, context trimming, input sanitising and incremental detokenisation (tiny tokenizer)."""

from __future__ import annotations

import threading

import pytest

from engine.generate.context import (IncrementalDecoder, build_prompt, check_messages, held_ids, longest_token_bytes,
                                    render, sanitise_text)
from engine.errors import BadInputError, CancelledError, ContextTooLongError, TemplateError
from engine.events import Message
from tests.helpers.tiny_model import build_tiny_tokenizer


@pytest.fixture(scope="module")
def tok():
    return build_tiny_tokenizer()


def test_sanitise_removes_nul_and_repairs_surrogates():
    assert sanitise_text("a\x00b") == "ab"
    assert sanitise_text("x\ud800y") == "x\ufffdy"  # lone surrogate: not encodable in UTF-8
    assert sanitise_text("\ud83d\ude00") == "😀"  # a surrogate pair (from a UTF-16 source) is joined
    assert sanitise_text("秒回 ok") == "秒回 ok"


@pytest.mark.parametrize("messages, words", [
    ([], "empty"),
    ([Message("user", "  \n\t")], "empty"),
    ([Message("user", "hi"), Message("assistant", "hello")], "last message"),
    ([Message("robot", "hi")], "role"),
    ([Message("user", "a"), Message("system", "b"), Message("user", "c")], "system"),
])
def test_unusable_conversations_are_refused_with_one_line(messages, words):
    with pytest.raises(BadInputError) as info:
        check_messages(messages)
    assert words in str(info.value) and "\n" not in str(info.value)


def test_render_uses_the_tokenizers_own_chat_template(tok):
    messages = [Message("system", "be brief"), Message("user", "Hello 秒回 😀")]
    ids = render(tok, messages)
    expected = tok.apply_chat_template([{"role": m.role, "content": m.content} for m in messages],
                                       add_generation_prompt=True, tokenize=False)
    assert tok.decode(ids) == expected
    assert expected.endswith("<|im_start|>assistant\n")
    # NUL bytes and lone surrogates render instead of crashing the tokenizer.
    assert render(tok, check_messages([Message("user", "a\x00b\udfff")]))


def test_a_conversation_that_ends_with_a_reply_is_held_as_the_templates_own_ids_without_a_generation_prompt(tok):
    messages = [Message("system", "be brief"), Message("user", "Hello 秒回"), Message("assistant", "Hi! 😀")]
    own = tok.apply_chat_template([{"role": m.role, "content": m.content} for m in messages],
                                  add_generation_prompt=False, tokenize=True, return_dict=False)
    assert held_ids(tok, messages) == tuple(own) and not tok.decode(own).endswith("<|im_start|>assistant\n")
    with pytest.raises(BadInputError, match="last message"):  # a prompt still ends where a reply starts
        build_prompt(tok, messages, 4096, 8)
    assert held_ids(tok, messages[:2]) == tuple(tok.apply_chat_template(  # a question alone: held as it is too
        [{"role": m.role, "content": m.content} for m in messages[:2]], add_generation_prompt=False, tokenize=True,
        return_dict=False))


def _history(turns: int) -> list[Message]:
    messages = [Message("system", "You are Miaohui.")]
    for i in range(turns):
        messages += [Message("user", f"question {i}: what is the capital of France?"),
                     Message("assistant", f"answer {i}: the capital of France is Paris.")]
    return messages + [Message("user", "and the newest question?")]


def test_fitting_prompt_is_not_trimmed(tok):
    prompt = build_prompt(tok, _history(1), context_max=256, max_new_tokens=16)
    assert prompt.dropped_turns == 0 and prompt.max_new_tokens == 16


def test_long_history_drops_oldest_turns_but_keeps_system_and_newest_user(tok):
    messages = _history(12)
    full = len(render(tok, messages))
    prompt = build_prompt(tok, messages, context_max=256, max_new_tokens=32)
    assert full + 32 > 256
    assert len(prompt.ids) + 32 <= 256
    assert prompt.dropped_turns > 0 and prompt.dropped_turns % 2 == 0  # whole user/assistant pairs
    kept = [messages[0]] + messages[1 + prompt.dropped_turns:]
    assert list(prompt.ids) == render(tok, kept)  # system kept, history restarts at a user turn
    # As many turns as fit: one more kept message would not fit.
    one_more = [messages[0]] + messages[1 + prompt.dropped_turns - 2:]
    assert len(render(tok, one_more)) + 32 > 256


def test_reply_budget_shrinks_when_only_the_newest_message_fits(tok):
    messages = [Message("system", "sys"), Message("user", "Paris " * 60)]
    n = len(render(tok, messages))
    prompt = build_prompt(tok, messages, context_max=n + 5, max_new_tokens=100)
    assert prompt.max_new_tokens == 5 and prompt.dropped_turns == 0


def test_a_message_that_cannot_fit_is_refused(tok):
    with pytest.raises(ContextTooLongError, match=r"your message is (at least )?[\d,]+ tokens .* holds 64"):
        build_prompt(tok, [Message("user", "the capital of France " * 40)], context_max=64, max_new_tokens=8)
    # It would fit alone, not with the system prompt: the message says so.
    short = [Message("system", "a very long system prompt " * 20), Message("user", "hi")]
    with pytest.raises(ContextTooLongError, match="system prompt"):
        build_prompt(tok, short, context_max=len(render(tok, short[1:])) + 1, max_new_tokens=8)


def test_a_huge_paste_is_refused_before_it_is_tokenised(tok, monkeypatch):
    longest = longest_token_bytes(tok)
    assert 0 < longest == longest_token_bytes(tok)  # computed once, then cached
    assert all(len(t.encode("utf-8")) <= longest for t in tok.get_vocab())
    calls: list[int] = []
    original = type(tok).apply_chat_template
    monkeypatch.setattr(type(tok), "apply_chat_template",
                        lambda self, *a, **k: calls.append(1) or original(self, *a, **k))
    paste = "粘贴 paste مرحبا " * 60_000  # ~1.4 MB
    with pytest.raises(ContextTooLongError, match=r"your message is at least [\d,]+ tokens .* holds 256: shorten it"):
        build_prompt(tok, [Message("user", paste)], context_max=256, max_new_tokens=8)
    assert calls == []  # refused from its length alone
    # Under the bound the usual path decides, with the exact count.
    text = "x" * (longest * 200)
    with pytest.raises(ContextTooLongError, match=r"your message is [\d,]+ tokens .* holds 256"):
        build_prompt(tok, [Message("user", text)], context_max=256, max_new_tokens=8)
    assert calls


def test_incremental_decoder_never_emits_half_a_character(tok):
    text = "我昨天认识的那个人 😀 and Paris مرحبا"
    ids = tok.encode(text, add_special_tokens=False)
    assert len(ids) > len(text) // 2  # byte-level pieces: many characters span several tokens
    decoder = IncrementalDecoder(tok)
    deltas = [decoder.push(i) for i in ids]
    assert "" in deltas  # some tokens ended mid-character and were held back
    assert not any("\ufffd" in d for d in deltas)
    assert "".join(deltas) + decoder.flush() == text == decoder.text
    # The end token adds no text; the inspector still shows it.
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    assert decoder.push(eos) == "" and decoder.token_text(eos) == "<|im_end|>"


def test_a_reply_cut_inside_a_character_ends_before_it_not_in_a_replacement_character(tok):
    ids = tok.encode("😀", add_special_tokens=False)
    decoder = IncrementalDecoder(tok)
    assert decoder.push(ids[0]) == ""
    assert decoder.flush() == "" and decoder.text == ""
    # A Chinese reply cut at the token limit: every whole character is kept, the half one is dropped.
    text = "键值缓存保存了每一层的键和值"
    ids = tok.encode(text, add_special_tokens=False)
    for cut in range(1, len(ids)):
        decoder = IncrementalDecoder(tok)
        streamed = "".join(decoder.push(i) for i in ids[:cut]) + decoder.flush()
        assert "\ufffd" not in streamed and text.startswith(streamed), (cut, streamed)
        assert len(text) - len(streamed) <= 1 or tok.decode(ids[:cut]).rstrip("\ufffd") == streamed


def test_a_runaway_template_is_refused_with_one_line_instead_of_running(tok):
    # Issue 18: nested loops over huge ranges ran for minutes at 9 GB; a template's own error was a traceback.
    own = tok.chat_template
    tok.chat_template = "{% for i in range(10**9) %}{% for j in range(10**9) %}{{ j }}{% endfor %}{% endfor %}"
    try:
        with pytest.raises(TemplateError) as info:
            build_prompt(tok, _history(1), context_max=256, max_new_tokens=16)
        assert "\n" not in str(info.value)
    finally:
        tok.chat_template = own  # the module's tokenizer: back to its own template


def test_cancel_stops_trimming_renders(tok):
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(CancelledError):
        build_prompt(tok, _history(40), context_max=256, max_new_tokens=16, cancel=cancel)


def _rendered_chars(tok, monkeypatch) -> list[int]:
    """Spy on the one tokenising step of ``render``: the characters of each rendered prompt it tokenises."""
    sizes: list[int] = []
    original = type(tok).apply_chat_template

    def spy(self, conversation, *args, **kwargs):
        sizes.append(len(kwargs.get("miaohui_rendered_chat", "")))
        return original(self, conversation, *args, **kwargs)

    monkeypatch.setattr(type(tok), "apply_chat_template", spy)
    return sizes


def test_a_conversation_far_beyond_the_context_is_trimmed_from_per_turn_counts(tok, monkeypatch):
    # Issue 31 (5): the whole history was rendered and tokenised first and again at each step of the search, so
    # 8,000 turns ran out the template's 5 s budget and were refused instead of trimmed.
    messages = _history(20_000)
    sizes = _rendered_chars(tok, monkeypatch)
    prompt = build_prompt(tok, messages, context_max=256, max_new_tokens=32)
    monkeypatch.undo()
    kept = [messages[0]] + messages[1 + prompt.dropped_turns:]
    assert list(prompt.ids) == render(tok, kept) and len(prompt.ids) + 32 <= 256
    one_more = [messages[0]] + messages[1 + prompt.dropped_turns - 2:]
    assert len(render(tok, one_more)) + 32 > 256  # still as many turns as fit
    # Only suffixes near the kept one were rendered: a few times the kept prompt, not the history.
    kept_chars = len(tok.decode(prompt.ids))
    assert 0 < len(sizes) <= 12 and sum(sizes) <= 12 * kept_chars, sizes


def test_a_conversation_fifty_times_the_context_with_a_huge_old_turn(tok, monkeypatch):
    # One pasted document far back in the history is never tokenised, only counted out by its length.
    old = [Message("user", "summarise: " + "the capital of France is Paris. " * 40_000), Message("assistant", "ok")]
    messages = [Message("system", "You are Miaohui.")] + old + _history(300)[1:]
    sizes = _rendered_chars(tok, monkeypatch)
    prompt = build_prompt(tok, messages, context_max=256, max_new_tokens=16)
    assert prompt.dropped_turns >= 2 and max(sizes) < 10_000
    # A reply budget larger than the room left shrinks to it; a last message that cannot fit alone is refused.
    with pytest.raises(ContextTooLongError, match=r"your message is [\d,]+ tokens .* holds 256"):
        build_prompt(tok, messages[:-1] + [Message("user", "Paris " * 300)], context_max=256, max_new_tokens=16)
