"""The one Python decoder step (engine/executor/step.py) in each of its forms gives what one-token decodes give, bit
for bit, logits and cache: verify (one runner, k tokens), the batched step (n runners, one token each) and both at
once (n runners, k tokens each), for random-weight models of the fast families (built from their real transformers
configs, scaled down) at fp32, bf16, int8 and int4, on the Python step (the native step's bits are
tests/engine/executor/test_native_step.py's)."""

from __future__ import annotations

import pytest
import torch

from engine.executor.batched import decode_batch
from engine.executor.fastpath import FastRunner
from engine.executor.step import forward_rows
from engine.executor.verify import RowExact
from tests.engine.executor.test_families import _llama_biased
from tests.engine.executor.test_families_phi_gemma2_llama3 import _llama32
from tests.helpers.family_models import build_families, load_cpu
from tests.helpers.reference_forward import random_prompt

# Llama with and without biases: the families run here so far. Qwen2/3, Mistral's window, Gemma 2/3 and Phi-3 are
# tests/engine/executor/test_native_step.py's (int8/int4 against the native step) and the decode tests' for now.
FAMILIES = {"llama3.2": _llama32, "llama-biased": _llama_biased}


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory):
    return build_families(tmp_path_factory.mktemp("step_families"), FAMILIES)


def _python_runner(model, prompt: list[int]) -> FastRunner:
    """A runner on the Python step (the native one off), ``prompt`` prefilled."""
    runner = FastRunner(model)
    runner._native = None
    list(runner.prefill(prompt))
    return runner


def _same_cache(a: FastRunner, b: FastRunner) -> None:
    end = b.cached_len
    assert a.cached_ids == b.cached_ids
    assert torch.equal(a._kv.k[:, :, :end], b._kv.k[:, :, :end]) and torch.equal(a._kv.v[:, :, :end], b._kv.v[:, :, :end])


@pytest.mark.parametrize("precision", ["fp32", "bf16", "int8", "int4"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_form_of_the_step_gives_one_token_decodes_bits(family_dirs, family, precision):
    model = load_cpu(family_dirs[family], precision).model
    vocab = model.config.vocab_size
    prompts = [random_prompt(vocab, length, seed=length) for length in (12, 19, 26)]
    tokens = [random_prompt(vocab, 5, seed=100 + length) for length in (12, 19, 26)]
    alone = [_python_runner(model, prompt) for prompt in prompts]
    decoded = [torch.cat([runner.decode(token) for token in row]) for runner, row in zip(alone, tokens)]

    checked = _python_runner(model, prompts[0])  # verify: one runner, k tokens
    assert torch.equal(checked.verify(tokens[0]), decoded[0])
    _same_cache(checked, alone[0])

    batch = [_python_runner(model, prompt) for prompt in prompts]  # batched: n runners, one token each
    for step in range(len(tokens[0])):
        got = decode_batch(batch, [row[step] for row in tokens])
        assert torch.equal(got, torch.stack([rows[step] for rows in decoded])), f"step {step}"
    for a, b in zip(batch, alone):
        _same_cache(a, b)

    both = [_python_runner(model, prompt) for prompt in prompts[:2]]  # n runners, k tokens each
    rows, ids, positions = [], [], []
    for runner, row in zip(both, tokens):
        runner._ensure(runner.cached_len + 3)
        rows += [runner] * 3
        ids += row[:3]
        positions += range(runner.cached_len, runner.cached_len + 3)
    with torch.inference_mode():
        got = forward_rows(rows, ids, positions, RowExact())
    for runner, row in zip(both, tokens):
        runner._ids.extend(row[:3])
    assert torch.equal(got, torch.cat([decoded[0][:3], decoded[1][:3]]))
    for runner, reference in zip(both, alone):
        reference.crop(reference.cached_len - 2)
        _same_cache(runner, reference)
