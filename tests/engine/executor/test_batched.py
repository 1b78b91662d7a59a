"""``decode_batch``: several conversations' next tokens in one forward give what each decodes alone."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from engine.executor.batched import batchable, decode_batch, rows_apart
from engine.executor.fastpath import FastRunner
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


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_batch_logits_are_bit_identical_to_each_sequence_alone(tiny_model_dir, precision):
    loaded = load_model(LoadSpec(model=str(tiny_model_dir), precision=precision, device="cpu"))
    alone, together = [FastRunner(loaded.model) for _ in PROMPTS], [FastRunner(loaded.model) for _ in PROMPTS]
    for a, b, prompt in zip(alone, together, PROMPTS):
        for runner in (a, b):
            for _ in runner.prefill(list(prompt)):
                pass
    for step in range(6):
        tokens = [(7 * step + 3 * i) % 300 for i in range(len(PROMPTS))]
        batch = decode_batch(together, tokens)
        for i, (runner, token) in enumerate(zip(alone, tokens)):
            assert torch.equal(batch[i:i + 1], runner.decode(token)), (precision, step, i)


def test_rows_apart_is_false_for_a_quantized_module_and_a_single_row():
    assert rows_apart(object(), 4) is False
    assert rows_apart(torch.ones(4, 4), 1) is False


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_split_projection_runs_in_an_exact_form_and_one_with_a_bias_row_by_row_through_its_own_call(dtype):
    """Whatever form ``probe`` times fastest (bmm, packed weight, plain rows), each row gets its one-row bits;
    a projection with a bias goes row by row through the step plan's own call."""
    from engine.executor import batched

    generator = torch.Generator().manual_seed(3)
    weight = torch.randn(160, 384, generator=generator).to(dtype)
    bias = torch.randn(160, generator=generator).to(dtype)
    x = torch.randn(16, 384, generator=generator).to(dtype)
    alone = torch.cat([F.linear(x[i:i + 1], weight) for i in range(16)])
    form = batched._fastest_exact(weight, x, alone, 8, range(0, 16, 8))
    assert form in ("bmm", "packed", "rows")
    assert torch.equal(batched._split(form, weight, None)(x[:8]), alone[:8])
    key = batched._key(weight, 8)
    calls = []

    def call(row):
        calls.append(row.shape[0])
        return F.linear(row, weight, bias)

    try:  # forced apart, as the default model's bf16 down projection measures
        batched._ROWS_APART[key], batched._SPLIT_FORM[key] = True, form
        out = batched._exact(call, weight, 8, bias)(x[:8])
    finally:
        batched._ROWS_APART.pop(key), batched._SPLIT_FORM.pop(key)
    assert calls == [1] * 8 and torch.equal(out, torch.cat([F.linear(x[i:i + 1], weight, bias) for i in range(8)]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rows_that_batch_exactly_run_packed_only_where_the_probe_found_the_rows_alone_bits(dtype):
    """A projection whose B-row product equals its rows alone runs through the packed weight only where ``probe``
    found the packed B-row product equal to the rows alone too; with a bias, the plan's own call."""
    from engine.executor import batched

    generator = torch.Generator().manual_seed(5)
    weight = torch.randn(128, 320, generator=generator).to(dtype)
    batched.probe(weight, (4,), 16)
    key = batched._key(weight, 4)
    x = torch.randn(4, 320, generator=generator).to(dtype)
    alone = torch.cat([F.linear(x[i:i + 1], weight) for i in range(4)])
    chosen = batched._exact(lambda t: F.linear(t, weight), weight, 4)
    assert torch.equal(chosen(x), alone)  # whichever form: each row its one-row bits
    if batched._PACKED_SAME[key]:
        assert torch.equal(chosen(x), F.linear(x, weight))

    def call(t):
        return F.linear(t, weight, torch.ones(128, dtype=dtype))

    if not batched._ROWS_APART[key]:
        assert batched._exact(call, weight, 4, torch.ones(128, dtype=dtype)) is call
