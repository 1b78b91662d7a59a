"""``verify(ids)`` on both runners: one forward over several tokens gives the logits one-token decodes give."""

from __future__ import annotations

import pytest
import torch

from engine.executor.fastpath import FastRunner
from engine.executor.runner import ModelRunner
from engine.inputs import LoadSpec
from engine.models.loader import load_model


@pytest.fixture(scope="module")
def tiny_fp32(tiny_model_dir):
    return load_model(LoadSpec(model=str(tiny_model_dir), precision="fp32", device="cpu"))


@pytest.mark.parametrize("kind", [ModelRunner, FastRunner])
def test_verify_matches_decode_and_crop_rolls_back(tiny_fp32, kind):
    prompt, more = [1, 5, 9, 13, 17, 21], [30, 31, 32, 33]
    step = kind(tiny_fp32.model)
    for _ in step.prefill(prompt):
        pass
    expected = [step.decode(t)[0] for t in more]
    check = kind(tiny_fp32.model)
    for _ in check.prefill(prompt):
        pass
    logits = check.verify(more)
    assert logits.shape == (len(more), tiny_fp32.model.config.vocab_size)
    for got, want in zip(logits, expected):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert check.cached_ids == tuple(prompt + more)
    # Reject the last two: crop back in place, and the next decode sees only the kept prefix.
    check.crop(len(prompt) + 2)
    again = check.decode(more[2])[0]
    torch.testing.assert_close(again, expected[2], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("precision", ["bf16", "int8"])
def test_fast_verify_is_bit_identical_to_decode(tiny_model_dir, precision):
    """Logits and cache entries exactly as one-token decodes write them (what keeps greedy speculation exact)."""
    loaded = load_model(LoadSpec(model=str(tiny_model_dir), precision=precision, device="cpu"))
    prompt, more = [1, 5, 9, 13, 17, 21], [30, 31, 32, 33, 34, 35, 36, 37, 38]
    step, check = FastRunner(loaded.model), FastRunner(loaded.model)
    for runner in (step, check):
        for _ in runner.prefill(prompt):
            pass
    expected = torch.cat([step.decode(t) for t in more])
    assert torch.equal(check.verify(more), expected)
    end = len(prompt) + len(more)
    assert torch.equal(check._k[:, :, :end], step._k[:, :, :end]) and torch.equal(check._v[:, :, :end], step._v[:, :, :end])


@pytest.mark.default_model
def test_fast_verify_is_bit_identical_on_the_default_model(default_model_dir):
    """SmolLM2's 576 x 1536 down projection rounds rows differently when batched: verify must not batch it."""
    loaded = load_model(LoadSpec(model=str(default_model_dir), precision="bf16", device="cpu"))
    for prompt_len in (100, 300):  # decode's SDPA, then its fp32 attention past EXACT_ATTENTION_POSITIONS
        step, check = FastRunner(loaded.model), FastRunner(loaded.model)
        for runner in (step, check):
            for _ in runner.prefill(list(range(1000, 1000 + prompt_len))):
                pass
        more = [5, 6, 7, 8, 9]
        expected = torch.cat([step.decode(t) for t in more])
        assert torch.equal(check.verify(more), expected)
        end = prompt_len + len(more)
        assert torch.equal(check._k[:, :, :end], step._k[:, :, :end])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rows_that_cannot_batch_go_singly_through_an_exact_projection(dtype):
    """A projection judged not row-exact (forced here) runs row by row, through the packed weight only where its
    probe matched F.linear's one-row products: either way every row is F.linear's own, bit for bit."""
    from engine.executor.row_products import packed_rows
    from engine.executor.verify import RowExact

    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(96, 384, generator=generator).to(dtype)
    bias = torch.randn(96, generator=generator).to(dtype)
    x = torch.randn(5, 384, generator=generator).to(dtype)
    exact = RowExact()
    exact._known[("down", 5)] = False  # as the default model's down projection measures
    def project(t):
        return torch.nn.functional.linear(t, weight, bias)

    out = exact(project, x, "down", (("down", 0), weight, bias))
    assert torch.equal(out, torch.cat([project(x[i:i + 1]) for i in range(5)]))
    packed = packed_rows(weight, bias)
    if packed is not None and exact._known[("down", "packed", 1)]:
        assert exact._packed[("down", 0)] is not None
    assert packed_rows(object(), None) is None  # a quantized module: no packing, its own kernel row by row


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rows_that_batch_exactly_run_through_the_packed_weight_only_where_it_gives_the_same_bits(dtype):
    """A projection judged row-exact (forced here) runs on all rows at once, through the packed weight where a probe
    on that many rows found its bits equal to F.linear's: either way the result is F.linear's own."""
    from engine.executor.verify import RowExact

    generator = torch.Generator().manual_seed(1)
    weight = torch.randn(96, 384, generator=generator).to(dtype)
    x = torch.randn(5, 384, generator=generator).to(dtype)
    exact = RowExact()
    exact._known[("qkv", 5)] = True

    def project(t):
        return torch.nn.functional.linear(t, weight)

    out = exact(project, x, "qkv", (("qkv", 0), weight, None))
    assert torch.equal(out, project(x))
    assert ("qkv", "packed", 5) in exact._known or exact._packed[("qkv", 0)] is None  # probed, unless none packs
