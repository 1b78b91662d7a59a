"""engine.bench.variants: every variant produces exactly the tokens asked for, the same greedy ids, and the
engine's session reuses its cache on a follow-up turn."""

from __future__ import annotations

import pytest

from engine.bench.variants import variants_for
from engine.events import Message
from engine.inputs import LoadSpec
from engine.models.loader import load_model

MESSAGES = [Message("system", "You are a helpful assistant."), Message("user", "Hello there, how are you?")]


@pytest.fixture(scope="module")
def variants(tiny_model_dir):
    loaded = load_model(LoadSpec(model=str(tiny_model_dir), precision="fp32", device="cpu"))
    return variants_for(loaded, compile_step=False)


def test_names_and_caches(variants):
    assert [v.name for v in variants] == ["baseline", "engine", "fastpath"]
    assert [v.keeps_cache for v in variants] == [False, True, True]


def test_every_variant_makes_exactly_the_tokens_asked_for_and_the_same_ids(variants):
    samples = [v.run(MESSAGES, 5) for v in variants]
    assert all(len(s.ids) == 5 for s in samples)
    assert samples[1].ids == samples[0].ids and samples[2].ids == samples[0].ids
    assert all(s.ttft_s > 0 and s.decode_tok_s > 0 for s in samples)


def test_a_session_reuses_the_earlier_turn(variants):
    engine = variants[1]
    session = engine.session()
    first = engine.run(MESSAGES, 2, session=session)
    follow = MESSAGES + [Message("assistant", "Fine."), Message("user", "And then?")]
    assert engine.run(follow, 1, session=session).reused_tokens > 0
    assert first.reused_tokens == 0
