"""The tokenizer view's data: ids exactly as the tokenizer gives them, covered text, split characters, counts."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from engine.errors import BadInputError
from engine.lab.tokenview import MAX_CHARS, token_view, tokenize_view


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return AutoTokenizer.from_pretrained(str(tiny_model_dir))


def test_ids_and_pieces_match_the_tokenizer(tokenizer):
    text = "Hello, how are you today? 秒回"
    view = tokenize_view(tokenizer, text)
    assert [p.token_id for p in view.pieces] == tokenizer(text, add_special_tokens=False).input_ids
    assert [p.index for p in view.pieces] == list(range(view.token_count))
    assert view.char_count == len(text) and view.byte_count == len(text.encode("utf-8"))
    assert view.chars_per_token == pytest.approx(len(text) / view.token_count)
    # the covered spans tile the text: nothing lost, nothing invented
    covered = "".join(p.text for p in view.pieces if p.part == 1)
    assert covered == text
    assert sum(count for _, count in view.counts) == view.token_count
    assert view.counts == tuple(sorted(view.counts, key=lambda c: (-c[1], c[0])))


def test_a_character_outside_the_vocabulary_is_split_into_byte_parts(tokenizer):
    view = tokenize_view(tokenizer, "鲸")  # not in the tiny tokenizer's training text: 3 UTF-8 bytes
    assert view.token_count == 3
    assert [(p.part, p.parts, p.text) for p in view.pieces] == [(1, 3, "鲸"), (2, 3, "鲸"), (3, 3, "鲸")]
    assert view.split_chars == 1
    assert [p.label for p in view.pieces] == ["鲸(1/3)", "鲸(2/3)", "鲸(3/3)"]


def test_tokens_that_cut_a_character_between_them_are_marked(tokenizer):
    # The tiny BPE merged the last bytes of 昨 with the first of 天: spans overlap instead of repeating.
    view = tokenize_view(tokenizer, "我昨天")
    spans = [(p.start, p.end) for p in view.pieces]
    assert spans == [(0, 1), (1, 2), (1, 3), (2, 3)]
    assert [p.label for p in view.pieces] == ["我", "昨…", "…昨天…", "…天"]
    assert view.split_chars == 2  # 昨 and 天 are each covered by more than one token
    assert not view.pieces[0].starts_inside and not view.pieces[0].ends_inside


def test_repeated_tokens_are_counted(tokenizer):
    view = tokenize_view(tokenizer, "Paris Paris Paris")
    top_id, top_count = view.counts[0]
    assert top_count >= 2 and sum(p.token_id == top_id for p in view.pieces) == top_count


def test_chat_template_adds_marked_special_tokens(tokenizer):
    view = tokenize_view(tokenizer, "Hi", with_template=True)
    assert view.with_template and view.text.startswith("<|im_start|>user\nHi<|im_end|>")
    specials = [p.token for p in view.pieces if p.special]
    assert specials == ["<|im_start|>", "<|im_end|>", "<|im_start|>"]
    assert view.pieces[0].label == "<|im_start|>"


def test_empty_and_oversized_text(tokenizer):
    empty = tokenize_view(tokenizer, "")
    assert empty.token_count == 0 and empty.chars_per_token == 0.0
    with pytest.raises(BadInputError, match="too long"):
        tokenize_view(tokenizer, "a" * (MAX_CHARS + 1))


def test_task_entry_uses_the_loaded_tokenizer(tokenizer):
    class Loaded:  # the task only reads .tokenizer; a LoadedModel has it too
        pass

    loaded = Loaded()
    loaded.tokenizer = tokenizer
    view = token_view(loaded, None, text="Paris")
    assert view.token_count >= 1 and view.text == "Paris"


@pytest.mark.default_model
def test_default_model_splits_each_chinese_character_in_two(default_model_dir):
    tok = AutoTokenizer.from_pretrained(str(default_model_dir))
    view = tokenize_view(tok, "我昨天")
    assert [p.label for p in view.pieces] == ["我(1/2)", "我(2/2)", "昨(1/2)", "昨(2/2)", "天(1/2)", "天(2/2)"]
    assert view.split_chars == 3
