"""SamplingConfig validation and the Sampler on hand-made logits (no model needed)."""

from __future__ import annotations

import pytest
import torch
from transformers import (RepetitionPenaltyLogitsProcessor, TemperatureLogitsWarper, TopKLogitsWarper,
                          TopPLogitsWarper)

from engine.errors import BadInputError
from engine.generate.sampling import Sampler, build_processors
from engine.inputs import SamplingConfig

VOCAB = 64


@pytest.mark.parametrize("field, value", [
    ("temperature", -0.1), ("temperature", float("nan")), ("top_p", 0.0), ("top_p", 1.5), ("top_k", -1),
    ("top_k", 2.5), ("repetition_penalty", 0.0), ("max_new_tokens", 0), ("seed", -1), ("seed", "7"),
    ("top_logprobs", 21), ("prefill_chunk", 0), ("use_kv_cache", 1),
])
def test_out_of_range_values_are_refused_with_one_line(field, value):
    with pytest.raises(BadInputError) as info:
        SamplingConfig(**{field: value})
    assert field in str(info.value) and "\n" not in str(info.value)


def test_processors_are_transformers_own_in_generate_order():
    kinds = [type(p) for p in build_processors(SamplingConfig(temperature=0.8, top_k=10, top_p=0.9,
                                                              repetition_penalty=1.2))]
    assert kinds == [RepetitionPenaltyLogitsProcessor, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper]
    # Greedy: warpers cannot change an argmax, so none run; a repetition penalty can, so it stays.
    assert [type(p) for p in build_processors(SamplingConfig(temperature=0.0, repetition_penalty=1.0))] == []
    assert [type(p) for p in build_processors(SamplingConfig(temperature=0.0, repetition_penalty=1.1))] == [
        RepetitionPenaltyLogitsProcessor]


def _draw(config: SamplingConfig, logits: torch.Tensor, steps: int = 30) -> list[int]:
    sampler = Sampler(config, "cpu", prompt_ids=[1, 2, 3])
    return [sampler.choose(logits).token_id for _ in range(steps)]


def test_same_seed_same_tokens_other_seed_other_tokens():
    uniform = torch.zeros((1, VOCAB))  # every token equally likely: only the generator decides
    config = SamplingConfig(temperature=1.0, top_k=0, top_p=1.0, seed=1234)
    first = _draw(config, uniform)
    assert first == _draw(config, uniform)
    assert first != _draw(SamplingConfig(temperature=1.0, top_k=0, top_p=1.0, seed=4321), uniform)
    assert len(set(first)) > 5  # it really samples


def test_greedy_takes_the_argmax_and_reports_the_top_candidates():
    logits = torch.linspace(0, 3, VOCAB).unsqueeze(0)
    choice = Sampler(SamplingConfig(temperature=0.0, top_logprobs=5), "cpu", [0]).choose(logits)
    assert choice.token_id == VOCAB - 1
    assert choice.top_ids == tuple(range(VOCAB - 1, VOCAB - 6, -1))
    assert list(choice.top_probs) == sorted(choice.top_probs, reverse=True)
    assert choice.prob == pytest.approx(torch.softmax(logits, -1)[0, -1].item())
    # Without the inspector nothing extra is computed.
    assert Sampler(SamplingConfig(temperature=0.0), "cpu", [0]).choose(logits).prob is None


def test_greedys_argmax_is_torchs_the_first_of_ties_included():
    """The CPU's argmax goes through numpy (``argmax``): the same index as ``torch.argmax``, the first where
    several scores tie (a repetition penalty or a constraint's mask makes ties), on a vocabulary of real size."""
    from engine.generate.sampling import argmax

    generator = torch.Generator().manual_seed(0)
    for _ in range(20):
        scores = torch.randn((1, 49152), generator=generator)
        assert torch.equal(argmax(scores), torch.argmax(scores, dim=-1))
    scores = torch.full((1, 49152), float("-inf"))
    assert int(argmax(scores)) == 0 == int(torch.argmax(scores, dim=-1))  # everything masked: the first
    scores[0, [7, 300, 40000]] = 2.5
    assert int(argmax(scores)) == 7 == int(torch.argmax(scores, dim=-1))  # ties: the first


def test_top_k_1_and_top_p_cut_the_distribution_before_sampling():
    logits = torch.full((1, VOCAB), -10.0)
    logits[0, 7] = 5.0  # p(7) ≈ 0.62: alone it does not reach top_p 0.9, with 9 it does
    logits[0, 9] = 4.5
    assert set(_draw(SamplingConfig(temperature=1.0, top_k=1, top_p=1.0, seed=0), logits)) == {7}
    drawn = _draw(SamplingConfig(temperature=1.0, top_k=0, top_p=0.9, seed=0), logits, steps=60)
    assert set(drawn) <= {7, 9}
    # The reported candidates are those of the final distribution: after top-p only 7 and 9 remain.
    choice = Sampler(SamplingConfig(temperature=1.0, top_k=0, top_p=0.9, seed=0, top_logprobs=3), "cpu", [0]).choose(logits)
    assert choice.top_ids[:2] == (7, 9) and choice.top_probs[2] == 0.0
    assert sum(choice.top_probs) == pytest.approx(1.0)


def test_repetition_penalty_sees_prompt_and_reply_tokens():
    logits = torch.zeros((1, VOCAB))
    logits[0, [3, 4, 5]] = 1.0
    sampler = Sampler(SamplingConfig(temperature=0.0, repetition_penalty=2.0), "cpu", prompt_ids=[3])
    assert sampler.choose(logits).token_id == 4  # 3 is in the prompt: penalised
    assert sampler.choose(logits).token_id == 5  # 4 was just generated: penalised too


def test_a_huge_budget_allocates_only_what_the_reply_uses_and_penalises_like_a_full_buffer():
    # --max-new-tokens 10**12 with a repetition penalty: the id buffer once asked for 8 TB up front. It now
    # starts small and doubles; the choices over 2 500 tokens (two doublings) match a penalty applied by hand.
    torch.manual_seed(0)
    steps, prompt = 2500, [1, 2, 3]
    sampler = Sampler(SamplingConfig(temperature=0.0, repetition_penalty=1.3, max_new_tokens=10**12), "cpu", prompt)
    penalty = RepetitionPenaltyLogitsProcessor(penalty=1.3)
    ids = list(prompt)
    for _ in range(steps):
        logits = torch.randn((1, VOCAB))
        expected = int(torch.argmax(penalty(torch.tensor([ids]), logits.clone()), dim=-1))
        assert sampler.choose(logits).token_id == expected
        ids.append(expected)
