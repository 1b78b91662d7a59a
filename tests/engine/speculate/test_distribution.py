"""Sampled speculative decoding leaves the distribution of the reply unchanged (chi-square tests, fixed seeds).

The rule itself on fixed distributions (a drafter's ``q`` far from the target's ``p``, and prompt lookup's point
mass); then whole replies of the tiny model with a draft model that agrees about half the time, under temperature, top-k and a
repetition penalty, against the exact distribution of three-token replies computed from the model."""

from __future__ import annotations

import math

import pytest
import torch

from engine.events import Token
from engine.executor.runner import ModelRunner
from engine.generate.session import ChatSession
from engine.inputs import SamplingConfig, SpeculationConfig
from engine.speculate.accept import Shaper, accept


def chi2_threshold(df: int, z: float = 3.29) -> float:
    """The chi-square quantile at 1 - 5e-4 (z of the normal), by the Wilson-Hilferty approximation."""
    a = 2.0 / (9.0 * df)
    return df * (1.0 - a + z * math.sqrt(a)) ** 3


def chi2(counts: dict, expected: dict, n: int) -> tuple[float, int]:
    """Pearson's statistic and degrees of freedom; outcomes expected fewer than 5 times are pooled."""
    stat, pooled_obs, pooled_exp, cells = 0.0, 0, 0.0, 0
    for key, p in expected.items():
        e = n * p
        if e < 5:
            pooled_obs += counts.get(key, 0)
            pooled_exp += e
            continue
        stat += (counts.get(key, 0) - e) ** 2 / e
        cells += 1
    unexpected = sum(v for k, v in counts.items() if k not in expected)
    assert unexpected == 0, "an outcome the exact distribution gives probability 0"
    if pooled_exp > 0:
        stat += (pooled_obs - pooled_exp) ** 2 / pooled_exp
        cells += 1
    return stat, cells - 1


P = torch.tensor([0.35, 0.25, 0.2, 0.1, 0.06, 0.04])
Q = torch.tensor([0.05, 0.1, 0.1, 0.15, 0.3, 0.3])  # a drafter that mostly guesses what the target rarely says


@pytest.mark.parametrize("point_mass", [False, True], ids=["draft-distribution", "prompt-lookup"])
def test_acceptance_rule_keeps_the_target_distribution(point_mass):
    generator = torch.Generator().manual_seed(1234)
    shaper = Shaper(SamplingConfig(temperature=1.0, top_k=0, top_p=1.0, repetition_penalty=1.0), generator)
    logits = torch.stack([P.log(), P.log()])  # (k + 1, vocab): the target after the chosen token and the draft
    n, counts, kept = 20_000, {}, 0
    for _ in range(n):
        if point_mass:
            drafted, q = 4, None  # lookup always proposes token 4 (p = 0.06)
        else:
            drafted = int(torch.multinomial(Q, 1, generator=generator))
            q = Q[None]
        verdict = accept(shaper, logits, [7], [drafted], q)
        first = verdict.choices[0].token_id
        counts[first] = counts.get(first, 0) + 1
        kept += verdict.accepted
    stat, df = chi2(counts, {i: float(p) for i, p in enumerate(P)}, n)
    assert stat < chi2_threshold(df), (stat, counts)
    # The rejections are real (this is no test of always accepting or always rejecting):
    assert 0.0 < kept / n < 0.9
    if not point_mass:  # and the statistic can tell: the draft's own distribution is refused by it
        assert chi2(counts, {i: float(q_) for i, q_ in enumerate(Q)}, n)[0] > chi2_threshold(df)


CONFIG = dict(temperature=1.0, top_k=3, top_p=1.0, repetition_penalty=1.5, max_new_tokens=3)
PROMPT = "alpha beta gamma"  # a text continued (no chat template to render per run)
RUNS = 400


def exact_replies(loaded, prompt_ids, config: SamplingConfig) -> dict[tuple[int, ...], float]:
    """P(t1, t2, t3) of plain sampling, from the model's logits and the same sampling processors."""
    shaper = Shaper(config, None)
    runner = ModelRunner(loaded.model)

    def probs(ids):
        runner.reset()
        logits = None
        for _, logits in runner.prefill(ids):
            pass
        return torch.softmax(shaper.scores(logits, ids)[0], dim=-1)

    out: dict[tuple[int, ...], float] = {}
    p1 = probs(prompt_ids)
    for t1 in torch.nonzero(p1).flatten().tolist():
        p2 = probs(prompt_ids + [t1])
        for t2 in torch.nonzero(p2).flatten().tolist():
            p3 = probs(prompt_ids + [t1, t2])
            for t3 in torch.nonzero(p3).flatten().tolist():
                out[(t1, t2, t3)] = float(p1[t1] * p2[t2] * p3[t3])
    return out


def test_sampled_replies_with_a_draft_model_are_distributed_as_plain_ones(lively, near_lively_dir):
    session = ChatSession(lively, speculation=SpeculationConfig("draft", draft_model=str(near_lively_dir)))
    counts: dict[tuple[int, ...], int] = {}
    drafted = accepted = 0
    for seed in range(RUNS):
        ids, metrics = [], None
        for event in session.complete(PROMPT, SamplingConfig(seed=seed, **CONFIG)):
            if isinstance(event, Token):
                ids.append(event.token_id)
            elif hasattr(event, "metrics") and hasattr(event, "reason"):
                metrics = event.metrics
        counts[tuple(ids)] = counts.get(tuple(ids), 0) + 1
        drafted += metrics.draft_tokens
        accepted += metrics.accepted_tokens
    from engine.generate.context import build_text_prompt

    prompt = build_text_prompt(lively.tokenizer, PROMPT, 256, 3)
    expected = exact_replies(lively, list(prompt.ids), SamplingConfig(**CONFIG))
    assert math.isclose(sum(expected.values()), 1.0, rel_tol=1e-4)
    stat, df = chi2(counts, expected, RUNS)
    assert stat < chi2_threshold(df), (stat, df)
    assert drafted > 0 and 0 < accepted < drafted  # drafts both kept and rejected
