"""Greedy speculative decoding gives, token for token, the reply plain decoding gives: each drafter, on the tiny
model (and self-speculation on its int4 copy), with drafts both accepted and rejected."""

from __future__ import annotations

import pytest

from engine.generate.session import ChatSession
from engine.inputs import LoadSpec, SamplingConfig, SpeculationConfig
from engine.models.loader import load_model
from engine.speculate.drafters import DraftModelError
from tests.helpers.replies import reply

GREEDY = SamplingConfig(temperature=0.0, max_new_tokens=60, repetition_penalty=1.0)
GREEDY_PENALTY = SamplingConfig(temperature=0.0, max_new_tokens=60, repetition_penalty=1.3)


@pytest.mark.parametrize("config", [GREEDY, GREEDY_PENALTY], ids=["plain", "repetition-penalty"])
def test_prompt_lookup_greedy_is_exact(tiny_fp32, config):
    """The tiny model repeats itself: lookup drafts it, and every draft is accepted."""
    plain, _ = reply(ChatSession(tiny_fp32), config)
    spec_session = ChatSession(tiny_fp32, speculation=SpeculationConfig("prompt-lookup"))
    fast, finished = reply(spec_session, config)
    assert fast == plain
    m = finished.metrics
    assert m.speculation == "prompt-lookup" and m.drafts > 0 and m.draft_tokens >= m.accepted_tokens
    assert m.target_steps < len(fast)  # some tokens came without a forward of their own
    # The second turn, in the same session, reuses the caches and is exact too.
    assert reply(spec_session, config)[0] == plain


def test_prompt_lookup_on_varied_text_is_exact(lively):
    for config in (GREEDY, GREEDY_PENALTY):
        plain, _ = reply(ChatSession(lively), config)
        fast, _ = reply(ChatSession(lively, speculation=SpeculationConfig("prompt-lookup")), config)
        assert fast == plain


@pytest.mark.parametrize("config", [GREEDY, GREEDY_PENALTY], ids=["plain", "repetition-penalty"])
def test_draft_model_greedy_is_exact(lively, other_lively_dir, config):
    plain, _ = reply(ChatSession(lively), config)
    session = ChatSession(lively, speculation=SpeculationConfig("draft", draft_model=str(other_lively_dir)))
    fast, finished = reply(session, config)
    assert fast == plain
    m = finished.metrics
    assert m.speculation.startswith("draft:") and m.drafts > 0
    assert m.accepted_tokens < m.draft_tokens  # another model: some drafts were rejected, and rolled back


def test_draft_model_agreeing_is_exact_and_accepted(lively, lively_dir):
    """The same weights as draft (loaded at ``auto``: bf16 on a CPU for a model this small) mostly agree."""
    plain, _ = reply(ChatSession(lively), GREEDY)
    fast, finished = reply(ChatSession(lively, speculation=SpeculationConfig("draft", draft_model=str(lively_dir))),
                           GREEDY)
    assert fast == plain
    m = finished.metrics
    assert m.acceptance_rate is not None and m.acceptance_rate > 0.6
    # How many per step depends on the draft length, which follows measured times (engine.speculate.length): on a
    # model this small drafting costs about what verifying does, so drafts stay short; still well above one.
    assert m.tokens_per_step is not None and m.tokens_per_step > 1.3


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_self_speculation_int4_drafts_exactly(lively_dir, precision):
    target = load_model(LoadSpec(model=str(lively_dir), precision=precision, device="cpu"))
    plain, _ = reply(ChatSession(target), GREEDY)
    session = ChatSession(target, speculation=SpeculationConfig("self"))
    fast, finished = reply(session, GREEDY)
    assert fast == plain
    m = finished.metrics
    assert m.speculation == "self" and m.drafts > 0 and m.accepted_tokens > 0
    assert target.facts.precision == precision  # the copy is quantized, never the model it drafts for


def test_int4_model_cannot_self_speculate(tiny_model_dir):
    int4 = load_model(LoadSpec(model=str(tiny_model_dir), precision="int4", device="cpu"))
    with pytest.raises(DraftModelError, match="int4 already"):
        ChatSession(int4, speculation=SpeculationConfig("self"))


def test_draft_model_of_another_vocabulary_is_refused(tiny_fp32, foreign_tiny_dir):
    with pytest.raises(DraftModelError) as caught:
        ChatSession(tiny_fp32, speculation=SpeculationConfig("draft", draft_model=str(foreign_tiny_dir)))
    message = str(caught.value)
    assert "vocabularies differ" in message and "\n" not in message


@pytest.mark.default_model
@pytest.mark.parametrize("method", ["prompt-lookup", "self"])
def test_default_model_bf16_speculation_is_exact(default_model_dir, method):
    """The real default model in bf16: speculation's verify rounds exactly as its decode step does."""
    target = load_model(LoadSpec(model=str(default_model_dir), precision="bf16", device="cpu"))
    config = SamplingConfig(temperature=0.0, max_new_tokens=48)
    text = "Repeat this sentence twice: the quick brown fox jumps over the lazy dog near the river bank."
    plain, _ = reply(ChatSession(target), config, text)
    fast, finished = reply(ChatSession(target, speculation=SpeculationConfig(method)), config, text)
    assert fast == plain
    assert finished.metrics.drafts > 0
