"""engine.executor.kv_cache: the fast runner's 8-bit KV cache holds half the bytes (plus its scales), agrees with the
16-bit cache on the next token, and keeps crop, rollback, speculation, batching and the static step working."""

from __future__ import annotations

import pytest
import torch

from engine.bench.kv_cache import agreement, scored_top1, teacher_forced_top1
from engine.errors import BadInputError
from engine.events import Finished
from engine.executor.batched import decode_batch
from engine.executor.fastpath import FastRunner
from engine.executor.kv_cache import dequantize, quantize
from engine.executor.runners import make_runner
from engine.generate.session import ChatSession
from engine.inputs import KV_SCALE_BYTES, LoadSpec, SamplingConfig, SpeculationConfig
from engine.models.loader import load_model
from engine.quant.quality import quality_ids
from tests.helpers.reference_forward import random_prompt, runner_logits
from tests.helpers.replies import reply

GREEDY = SamplingConfig(temperature=0.0, max_new_tokens=40, repetition_penalty=1.0)


@pytest.fixture(scope="module")
def tiny_bf16(tiny_model_dir):
    return load_model(LoadSpec(model=str(tiny_model_dir), precision="bf16", device="cpu"))


@pytest.fixture(scope="module")
def tiny_int8_kv(tiny_model_dir):
    return load_model(LoadSpec(model=str(tiny_model_dir), precision="fp32", device="cpu", kv_precision="int8"))


def test_quantize_is_within_half_a_step_of_every_element():
    generator = torch.Generator().manual_seed(0)
    spread = torch.exp2(torch.randint(-8, 9, (4, 7, 64), generator=generator).float())  # many magnitudes per head
    x = (torch.randn(4, 7, 64, generator=generator) * spread).to(torch.bfloat16)
    q, scale = quantize(x)
    assert q.dtype == torch.int8 and scale.dtype == torch.float16 and scale.shape == (4, 7)
    assert int(q.abs().max()) == 127  # each vector's largest magnitude uses the whole range
    error = (dequantize(q, scale, torch.float32) - x.float()).abs()
    assert bool((error <= scale.float().unsqueeze(-1) * 0.5 * (1 + 1e-3)).all())
    zeros, zero_scale = quantize(torch.zeros(2, 3, 8))
    assert not zeros.any() and not zero_scale.any()


def test_int8_cache_bytes_are_half_plus_one_scale_per_head_and_position(tiny_bf16):
    """The elements are exactly half of the bf16 cache's; each (layer, KV head, position) adds a 2-byte scale for K
    and one for V: (head_dim + 2) / (2 · head_dim) of bf16 in all, 0.5625 at the tiny model's head_dim 16 (0.516 at
    the default model's 64)."""
    model = tiny_bf16.model
    layers, kv_heads = model.config.num_hidden_layers, model.config.num_key_value_heads
    head_dim = model.config.hidden_size // model.config.num_attention_heads
    prompt = random_prompt(model.config.vocab_size, 37)
    dense, int8 = FastRunner(model), FastRunner(model, kv_precision="int8")
    for runner in (dense, int8):
        list(runner.prefill(prompt, chunk=16))
    (dense_filled, _), (int8_filled, int8_allocated) = dense.kv_bytes(), int8.kv_bytes()
    scales = 2 * layers * kv_heads * len(prompt) * KV_SCALE_BYTES
    assert dense_filled == 2 * layers * kv_heads * len(prompt) * head_dim * 2
    assert int8_filled - scales == dense_filled // 2  # the int8 elements: exactly half
    assert int8_filled / dense_filled == (head_dim + KV_SCALE_BYTES) / (2 * head_dim)
    assert int8_allocated == sum(t.nbytes for t in int8._kv.tensors())  # what is really held


def test_int8_logits_stay_near_the_16_bit_ones_and_agree_on_the_tiny_model(tiny_model_dir):
    """Teacher-forced over 200 decode-step positions of a random prompt on the random-weight tiny model (fp32
    weights, so only the cache differs): measured 100% top-1 agreement (200 of 200) and logits within 0.08% of their
    range (the bound below is 2%)."""
    loaded = load_model(LoadSpec(model=str(tiny_model_dir), precision="fp32", device="cpu"))
    ids = random_prompt(loaded.model.config.vocab_size, 201, seed=3)
    dense, int8 = FastRunner(loaded.model), FastRunner(loaded.model, kv_precision="int8")
    assert agreement(teacher_forced_top1(int8, ids), teacher_forced_top1(dense, ids)) >= 0.99
    dense.reset()
    int8.reset()
    a, b = runner_logits(dense, ids[:40], ids[40:60]), runner_logits(int8, ids[:40], ids[40:60])
    for x, y in zip(a, b):
        assert (x - y).abs().max() <= 0.02 * (x.max() - x.min())


@pytest.mark.default_model
def test_default_model_agrees_with_the_16_bit_cache_on_97_5_percent_of_512_positions(default_model_dir):
    """A quality figure on the real model and real text (engine.quant.quality's prose, 512 teacher-forced positions,
    scored by prefill's forward in 64-token chunks, each reading the earlier chunks' and its own rows as stored), with
    a margin measured on more than one kind of CPU. Measured: 99.4% (509 of 512) on an AMD EPYC with AVX-512;
    98.8% (506) on an Intel Xeon with AMX; 99.4% there with MIAOHUI_CPU_BF16=0, with oneDNN capped below AMX
    (ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16) and capped at AVX2 with MIAOHUI_NATIVE_ISA=avx2. The bar, 97.5% (at most 12
    positions of 512 differ), leaves twice the worst of those; the 99% target is `engine bench`'s
    (engine/bench/kv_cache.py), not a test's."""
    loaded = load_model(LoadSpec(model=str(default_model_dir), precision="bf16", device="cpu"))
    ids = quality_ids(loaded.tokenizer, 513)
    dense, int8 = FastRunner(loaded.model), FastRunner(loaded.model, kv_precision="int8")
    share = agreement(scored_top1(int8, ids, 64), scored_top1(dense, ids, 64))
    assert share >= 0.975, share


def test_crop_keeps_the_prefix_and_later_writes_replace_what_was_cut(tiny_int8_kv):
    model = tiny_int8_kv.model
    vocab = model.config.vocab_size
    a, b, c = random_prompt(vocab, 13, 2), random_prompt(vocab, 9, 3), random_prompt(vocab, 10, 4)
    runner = FastRunner(model, initial_capacity=8, kv_precision="int8")  # grows twice, keeping what it holds
    list(runner.prefill(a + b, chunk=5))
    runner.decode(7)
    runner.crop(len(a))
    reused = [logits for _, logits in runner.prefill(c, chunk=4)][-1]
    fresh_runner = FastRunner(model, kv_precision="int8")
    list(fresh_runner.prefill(a, chunk=5))
    fresh = [logits for _, logits in fresh_runner.prefill(c, chunk=4)][-1]
    torch.testing.assert_close(reused, fresh, atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(runner.decode(5), fresh_runner.decode(5), atol=2e-5, rtol=1e-5)


def _reply(session: ChatSession) -> tuple[list[int], Finished]:
    return reply(session, GREEDY)


def test_speculation_with_prompt_lookup_gives_the_tokens_plain_decoding_gives(tiny_int8_kv):
    """Drafts verified and rejected ones cropped away on the int8 cache: the greedy reply equals plain decoding's
    with the same cache, turn after turn; the metrics' KV bytes are the int8 cache's real bytes, as the formula."""
    plain, finished = _reply(ChatSession(tiny_int8_kv))
    session = ChatSession(tiny_int8_kv, speculation=SpeculationConfig("prompt-lookup"))
    fast, spec_finished = _reply(session)
    assert fast == plain
    assert spec_finished.metrics.drafts > 0
    assert _reply(session)[0] == plain  # the second turn reuses and crops the cache
    m = finished.metrics
    assert session._runner.kv_precision == "int8"
    assert m.kv_cache_bytes == m.kv_cache_bytes_formula > 0
    assert tiny_int8_kv.facts.kv_bytes_per_token == 2 * 2 * 2 * (16 + KV_SCALE_BYTES)  # layers, KV heads, head_dim


def test_a_batched_step_over_int8_caches_equals_each_sequence_alone(tiny_int8_kv):
    model = tiny_int8_kv.model
    vocab = model.config.vocab_size
    prompts = [random_prompt(vocab, 11, 5), random_prompt(vocab, 23, 6)]
    together = [make_runner(tiny_int8_kv) for _ in prompts]
    alone = [make_runner(tiny_int8_kv) for _ in prompts]
    for runner, prompt in [*zip(together, prompts), *zip(alone, prompts)]:
        list(runner.prefill(prompt))
    assert all(r.kv_precision == "int8" for r in together)
    for token in (3, 9, 27):
        batched = decode_batch(together, [token, token])
        for row, runner in zip(batched, alone):
            assert torch.equal(row, runner.decode(token)[0])


def test_the_static_step_reads_the_int8_cache_as_the_eager_one(tiny_int8_kv):
    model = tiny_int8_kv.model
    prompt = random_prompt(model.config.vocab_size, 11)
    tokens = [5, 17, 33, 2]
    eager = runner_logits(FastRunner(model, kv_precision="int8"), prompt, tokens)
    static = runner_logits(FastRunner(model, static=True, max_positions=64, kv_precision="int8"), prompt, tokens)
    for a, b in zip(eager, static):
        torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-5)


def test_bad_kv_precisions_are_refused_in_one_line(tiny_model_dir, monkeypatch):
    with pytest.raises(BadInputError, match="unknown KV cache precision 'int4': choose auto or int8"):
        LoadSpec(kv_precision="int4")
    with pytest.raises(ValueError, match="unknown KV cache precision"):
        FastRunner(load_model(LoadSpec(model=str(tiny_model_dir), device="cpu", precision="fp32")).model,
                   kv_precision="fp8")
    monkeypatch.setenv("MIAOHUI_FASTPATH", "0")  # the plain runner has no int8 cache: refused, not ignored
    with pytest.raises(BadInputError, match="an int8 KV cache needs the fast runner.*MIAOHUI_FASTPATH=0"):
        load_model(LoadSpec(model=str(tiny_model_dir), device="cpu", precision="fp32", kv_precision="int8"))
