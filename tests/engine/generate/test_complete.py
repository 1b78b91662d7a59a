"""``ChatSession.complete``: a plain text continued with no chat template (issue 26), on the tiny model without a
template, through the same loop as chat: greedy equals transformers' own forward, the same events and metrics,
KV-cache reuse, cancel, and the context rule (never cut; the budget shrinks; no room is refused)."""

from __future__ import annotations

import dataclasses
import json
import shutil
import threading
from pathlib import Path

import pytest
import torch

from engine.errors import BadInputError, ContextTooLongError
from engine.events import Message, Metrics, PrefillProgress, Stats, Token
from engine.generate.session import ChatSession
from engine.inputs import LoadSpec, SamplingConfig
from engine.models.loader import load_model
from tests.helpers.base_model import without_chat_template
from tests.engine.generate.test_session import checked

GREEDY = SamplingConfig(temperature=0.0, max_new_tokens=12)
TEXT = "The capital of France is"


@pytest.fixture(scope="module")
def base_dir(tiny_model_dir, tmp_path_factory):
    return without_chat_template(tiny_model_dir, tmp_path_factory.mktemp("base") / "tiny-base")


@pytest.fixture(scope="module")
def loaded(base_dir):
    return load_model(LoadSpec(model=str(base_dir), precision="fp32", device="cpu"))


def complete(session: ChatSession, text: str = TEXT, config: SamplingConfig = GREEDY, cancel=None) -> list:
    return checked(list(session.complete(text, config, cancel)))


def token_ids(events) -> list[int]:
    return [e.token_id for e in events if isinstance(e, Token)]


def manual_greedy(model, ids: list[int], steps: int, eos: frozenset[int]) -> list[int]:
    """Greedy decoding by hand over transformers' forward: the whole sequence each step, argmax of the last logits."""
    sequence, chosen = list(ids), []
    with torch.no_grad():
        for _ in range(steps):
            logits = model(input_ids=torch.tensor([sequence])).logits[0, -1]
            token = int(torch.argmax(logits))
            chosen.append(token)
            if token in eos:
                break
            sequence.append(token)
    return chosen


def test_the_template_less_model_cannot_chat_but_completes(loaded):
    assert not loaded.tokenizer.chat_template
    with pytest.raises(BadInputError):
        ChatSession(loaded).generate([Message("user", "Hello")], GREEDY)
    events = complete(ChatSession(loaded))
    assert events[-1].reason in ("length", "eos") and events[-1].text


def test_greedy_completion_equals_a_manual_greedy_loop_over_transformers_forward(loaded):
    ids = loaded.tokenizer.encode(TEXT)
    expected = manual_greedy(loaded.model, ids, GREEDY.max_new_tokens, frozenset(loaded.eos_token_ids))
    events = complete(ChatSession(loaded))
    assert token_ids(events) == expected
    assert events[-1].text == loaded.tokenizer.decode(expected, skip_special_tokens=True)
    started = events[0]
    assert started.prompt_tokens == len(ids) and started.dropped_turns == 0


def _adding_bos(folder: Path, dest: Path) -> Path:
    """A copy of ``folder`` whose tokenizer prepends its BOS to every encoding, as Llama's and Gemma's do."""
    shutil.copytree(folder, dest)
    path = dest / "tokenizer.json"
    spec = json.loads(path.read_text(encoding="utf-8"))
    bos = "<|im_start|>"
    bos_id = next(token["id"] for token in spec["added_tokens"] if token["content"] == bos)
    first, text = {"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}
    spec["post_processor"] = {"type": "TemplateProcessing", "single": [first, text], "pair": [first, text, text],
                              "special_tokens": {bos: {"id": bos, "ids": [bos_id], "tokens": [bos]}}}
    path.write_text(json.dumps(spec), encoding="utf-8")
    return dest


def test_the_prompt_is_the_tokenizers_own_encoding_its_bos_included(loaded, base_dir, tmp_path):
    # The tiny tokenizer adds no special token: the prompt is the text's tokens alone.
    session = ChatSession(loaded)
    started = complete(session)[0]
    assert session.cached_ids()[:started.prompt_tokens] == tuple(loaded.tokenizer(TEXT, add_special_tokens=False)
                                                                  ["input_ids"])
    # One that prepends a BOS gets it, once, and greedy still equals transformers' forward over those ids.
    with_bos = load_model(LoadSpec(model=str(_adding_bos(base_dir, tmp_path / "bos")), precision="fp32",
                                   device="cpu"))
    ids = with_bos.tokenizer.encode(TEXT)
    assert ids[0] == with_bos.tokenizer.bos_token_id and ids[1] != ids[0]
    session = ChatSession(with_bos)
    events = complete(session, config=dataclasses.replace(GREEDY, max_new_tokens=5))
    assert session.cached_ids()[:len(ids)] == tuple(ids) and events[0].prompt_tokens == len(ids)
    assert token_ids(events) == manual_greedy(with_bos.model, ids, 5, frozenset(with_bos.eos_token_ids))


def test_the_stream_and_metrics_are_chats(loaded):
    config = dataclasses.replace(GREEDY, max_new_tokens=20, top_logprobs=3)
    events = complete(ChatSession(loaded), config=config)
    finished = events[-1]
    tokens = [e for e in events if isinstance(e, Token)]
    assert [t.index for t in tokens] == list(range(len(tokens)))
    assert all(len(t.top) == 3 and t.top[0].token_id == t.token_id for t in tokens)
    assert any(isinstance(e, PrefillProgress) for e in events)
    assert isinstance(finished.metrics, Metrics)
    m = finished.metrics
    assert m.generated_tokens == len(tokens) and m.prompt_tokens == events[0].prompt_tokens
    assert m.context_tokens == m.prompt_tokens + m.generated_tokens and m.dropped_turns == 0
    assert m.kv_cache_bytes == m.kv_cache_bytes_formula > 0 and m.ttft_s is not None
    if finished.reason == "length":
        assert len(tokens) == 20 and any(isinstance(e, Stats) for e in events)


def test_continuing_the_continuation_reuses_the_cache_and_matches_a_fresh_session(loaded):
    session = ChatSession(loaded)
    first = complete(session)
    longer = TEXT + first[-1].text
    again = complete(session, longer)
    fresh = complete(ChatSession(loaded), longer)
    assert token_ids(again) == token_ids(fresh)
    assert again[0].reused_tokens >= len(loaded.tokenizer.encode(TEXT))
    assert fresh[0].reused_tokens == 0
    assert again[-1].metrics.prefill_tokens == again[0].prompt_tokens - again[0].reused_tokens


def test_cancel_after_the_kth_token_stops_before_another(loaded):
    cancel = threading.Event()
    seen = []
    for event in ChatSession(loaded).complete(TEXT, dataclasses.replace(GREEDY, max_new_tokens=100), cancel):
        if isinstance(event, Token):
            seen.append(event)
            if len(seen) == 3:
                cancel.set()
        last = event
    assert last.reason == "cancelled" and len(seen) == 3


def test_a_prompt_that_leaves_no_room_is_refused_and_one_that_leaves_some_shrinks_the_budget(loaded):
    context = loaded.facts.context_length
    word = " Paris"
    per_word = len(loaded.tokenizer.encode(word * 10)) / 10
    with pytest.raises(ContextTooLongError) as info:
        ChatSession(loaded).complete(word * int(context * 2 / per_word), GREEDY)
    assert "\n" not in str(info.value) and "shorten it" in str(info.value)
    with pytest.raises(ContextTooLongError):  # far too long: refused from its length, before it is tokenised
        ChatSession(loaded).complete("x" * 10_000_000, GREEDY)
    text = word * 40
    while len(loaded.tokenizer.encode(text)) < context - 5:
        text += word
    room = context - len(loaded.tokenizer.encode(text))
    assert 1 <= room <= 5
    events = complete(ChatSession(loaded), text, dataclasses.replace(GREEDY, max_new_tokens=50))
    tokens = token_ids(events)
    assert events[-1].reason == "eos" or len(tokens) == room
    assert events[-1].metrics.context_tokens <= context


def test_empty_or_non_text_is_refused_before_anything_runs(loaded):
    session = ChatSession(loaded)
    for bad in ("", "\x00", None):
        with pytest.raises(BadInputError):
            session.complete(bad, GREEDY)  # type: ignore[arg-type]
    assert session.cached_tokens == 0


def test_the_model_with_a_template_completes_too_and_chat_still_works_on_the_same_session(tiny_model_dir):
    loaded = load_model(LoadSpec(model=str(tiny_model_dir), precision="fp32", device="cpu"))
    session = ChatSession(loaded)
    ids = loaded.tokenizer.encode(TEXT)
    expected = manual_greedy(loaded.model, ids, 6, frozenset(loaded.eos_token_ids))
    assert token_ids(complete(session, config=dataclasses.replace(GREEDY, max_new_tokens=6))) == expected
    chat = list(session.generate([Message("user", "Hello")], dataclasses.replace(GREEDY, max_new_tokens=4)))
    assert chat[-1].reason in ("length", "eos") and chat[-1].error is None
