"""``decode_batch``: several conversations' next tokens in one forward give what each decodes alone."""

from __future__ import annotations

import pytest
import torch

from engine.generate.batched import batchable, decode_batch
from engine.generate.fastpath import FastRunner
from engine.inputs import LoadSpec
from engine.models.loader import load_model


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    return load_model(LoadSpec(model=str(tiny_model_dir), precision="fp32", device="cpu"))


PROMPTS = ([5, 9, 17, 30], [7, 7, 100, 3, 44, 61, 2, 8, 9, 10], [12], [40, 41, 42, 43, 44, 45])


def _greedy_alone(loaded, prompt: list[int], steps: int) -> list[int]:
    runner = FastRunner(loaded.model)
    logits = None
    for _, logits in runner.prefill(prompt):
        pass
    out = []
    for _ in range(steps):
        token = int(torch.argmax(logits[0]))
        out.append(token)
        logits = runner.decode(token)
    return out


def test_a_batch_of_sequences_of_different_lengths_decodes_as_each_alone(tiny):
    steps = 12
    alone = [_greedy_alone(tiny, list(p), steps) for p in PROMPTS]
    runners = [FastRunner(tiny.model) for _ in PROMPTS]
    assert all(batchable(r) for r in runners)
    logits = []
    for runner, prompt in zip(runners, PROMPTS):
        for _, last in runner.prefill(list(prompt)):
            pass
        logits.append(last)
    together: list[list[int]] = [[] for _ in PROMPTS]
    reference = FastRunner(tiny.model)
    for _ in range(steps):
        tokens = [int(torch.argmax(row[0])) for row in logits]
        for out, token in zip(together, tokens):
            out.append(token)
        batch = decode_batch(runners, tokens)
        assert batch.shape == (len(PROMPTS), reference._w.embed.shape[0])
        logits = [batch[i:i + 1] for i in range(len(PROMPTS))]
    assert together == alone
    for runner, prompt, out in zip(runners, PROMPTS, together):
        assert runner.cached_ids == tuple(prompt) + tuple(out)  # each fed back once, in its own cache


def test_a_batch_of_one_is_the_runners_own_step(tiny):
    a, b = FastRunner(tiny.model), FastRunner(tiny.model)
    for runner in (a, b):
        for _ in runner.prefill([3, 4, 5]):
            pass
    assert torch.equal(decode_batch([a], [9]), b.decode(9))


def test_a_batch_refuses_mismatched_tokens(tiny):
    runner = FastRunner(tiny.model)
    with pytest.raises(ValueError):
        decode_batch([runner], [1, 2])
