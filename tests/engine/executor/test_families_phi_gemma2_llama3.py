"""Exactness of the fast path for Phi-3/3.5/4-mini, Gemma 2 and Llama 3.x (engine/executor/families.py), as
tests/engine/executor/test_families.py checks the others: a random-weight model built from the family's real
transformers config class, its shape ratios kept and its sizes scaled down, saved with the tiny tokenizer and
loaded through the engine's loader; the fast runner's logits against transformers' own forward over its
DynamicCache at prefill and over DECODE_STEPS greedy steps (tight in fp32, same greedy tokens; within bf16
rounding in bf16), int8/int4 accepted on the fast path.

What each config makes the step compute: Phi-3-mini's fused qkv_proj / gate_up_proj and its sliding window on
every layer (crossed); Phi-4-mini's partial rotary (0.75 of each head) and longrope, with
original_max_position_embeddings scaled down so that the decode steps cross it (transformers switches from the
short to the long factors there) and a second prompt that is longer than it from the start; Gemma 2's attention
and final-logit soft-capping (caps small enough to bite on random weights), sliding layers interleaved with
global ones (window crossed), query_pre_attn_scalar unlike the head dim; Llama-3.2-1B's "llama3" RoPE scaling
with a tied head, and "dynamic" NTK scaling up to max_position_embeddings (the runner stops there).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engine.executor.fastpath import FastRunner
from engine.executor.runner import ModelRunner
from engine.executor.runners import choose_runner, make_runner
from tests.helpers.family_models import build_families, load_cpu
from tests.helpers.reference_forward import (check_bf16_rounding, check_fp32_equal, max_delta, random_prompt,
                                             reference_logits, runner_logits)

DECODE_STEPS = 64
LONGROPE_ORIGINAL = 48  # Phi-4-mini's 4,096 scaled down: a 29-token prompt's decode steps cross it


def _phi3_mini(vocab: int, bos: int, eos: int):
    # Phi-3-mini-4k: d=3072, 32 heads of 96 (no GQA), I=8192 (2.67 d), untied, sliding_window 2047 on every layer.
    from transformers import Phi3Config, Phi3ForCausalLM

    config = Phi3Config(vocab_size=vocab, hidden_size=192, intermediate_size=512, num_hidden_layers=3,
                        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256,
                        sliding_window=16, tie_word_embeddings=False, rms_norm_eps=1e-5,
                        bos_token_id=bos, eos_token_id=eos, pad_token_id=eos)
    return Phi3ForCausalLM(config)


def _phi4_mini(vocab: int, bos: int, eos: int):
    # Phi-4-mini: d=3072, 24 heads of 128 sharing 8 KV heads, partial_rotary_factor 0.75, longrope (original
    # 4,096 of 131,072), tied. Scaled: heads of 32 rotate 24 dims (12 factors per set).
    from transformers import Phi3Config, Phi3ForCausalLM

    rotary_half = int(32 * 0.75) // 2
    config = Phi3Config(vocab_size=vocab, hidden_size=192, intermediate_size=512, num_hidden_layers=3,
                        num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=256,
                        original_max_position_embeddings=LONGROPE_ORIGINAL, partial_rotary_factor=0.75,
                        rope_scaling={"type": "longrope",
                                      "short_factor": [1.0 + 0.05 * i for i in range(rotary_half)],
                                      "long_factor": [1.0 + 1.5 * i for i in range(rotary_half)]},
                        tie_word_embeddings=True, rms_norm_eps=1e-5, bos_token_id=bos, eos_token_id=eos,
                        pad_token_id=eos)
    return Phi3ForCausalLM(config)


def _gemma2(vocab: int, bos: int, eos: int):
    # Gemma-2-2B: d=2304, 8 heads of 256 sharing 4 KV heads, I=9216 (4 d), sliding (4,096) and global layers
    # alternating, query_pre_attn_scalar 256, caps 50 (attention) and 30 (logits), tied.
    from transformers import Gemma2Config, Gemma2ForCausalLM

    config = Gemma2Config(vocab_size=vocab, hidden_size=96, intermediate_size=384, num_hidden_layers=4,
                          num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=512,
                          sliding_window=8, query_pre_attn_scalar=24, attn_logit_softcapping=2.0,
                          final_logit_softcapping=3.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
                          bos_token_id=bos, eos_token_id=eos, pad_token_id=eos)
    return Gemma2ForCausalLM(config)


def _llama32(vocab: int, bos: int, eos: int):
    # Llama-3.2-1B: d=2048, 32 heads of 64 sharing 8 KV heads, I=8192, θ=500,000, "llama3" scaling (factor 32,
    # original 8,192), tied head.
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=vocab, hidden_size=128, intermediate_size=512, num_hidden_layers=2,
                         num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=1024,
                         rope_theta=500_000.0, tie_word_embeddings=True, rms_norm_eps=1e-5,
                         rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                       "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
                         bos_token_id=bos, eos_token_id=eos)
    return LlamaForCausalLM(config)


def _llama_dynamic(vocab: int, bos: int, eos: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=vocab, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=96,
                         rope_scaling={"rope_type": "dynamic", "factor": 4.0}, tie_word_embeddings=False,
                         bos_token_id=bos, eos_token_id=eos)
    return LlamaForCausalLM(config)


FAMILIES = {"phi3-mini": _phi3_mini, "phi4-mini": _phi4_mini, "gemma2": _gemma2, "llama3.2": _llama32,
            "llama-dynamic": _llama_dynamic}


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory) -> dict[str, Path]:
    return build_families(tmp_path_factory.mktemp("families_more"), FAMILIES)


_load = load_cpu


@pytest.mark.parametrize("family", list(FAMILIES))
def test_each_family_takes_the_fast_path(family_dirs, family):
    loaded = _load(family_dirs[family], "fp32")
    choice = choose_runner(loaded.model, True)
    assert choice.runner == "fast", choice.reason
    assert loaded.facts.runner == "fast" and loaded.facts.runner_reason is None  # what `engine info` shows
    assert type(make_runner(loaded, True)) is FastRunner


@pytest.mark.parametrize("family", list(FAMILIES))
def test_fp32_logits_equal_transformers_at_prefill_and_every_decode_step(family_dirs, family, capsys):
    model = _load(family_dirs[family], "fp32").model
    prompt = random_prompt(model.config.vocab_size)
    ref, tokens = reference_logits(model, prompt, DECODE_STEPS)
    for static in (False, True):  # the eager step and the fixed-shape one (what CUDA graphs capture)
        runner = FastRunner(model, static=static, max_positions=96 if static else None)
        got = runner_logits(runner, prompt, tokens, chunk=11)
        assert len(got) == DECODE_STEPS + 1
        check_fp32_equal(ref, got, 5e-5, family)
        with capsys.disabled():
            print(f"\n{family} fp32 static={static}: max |dlogit| prefill {max_delta(ref, got)[0]:.2e}, "
                  f"decode {max_delta(ref, got)[1]:.2e}, greedy {DECODE_STEPS}/{DECODE_STEPS}")


def test_longrope_prompt_longer_than_the_original_context_reads_the_long_factors(family_dirs):
    """A prompt past original_max_position_embeddings: transformers' one forward rotates every position with the
    long factors; the fast runner, prefilling it in chunks that start below that length, must do the same."""
    model = _load(family_dirs["phi4-mini"], "fp32").model
    prompt = random_prompt(model.config.vocab_size, LONGROPE_ORIGINAL + 12, seed=5)
    ref, tokens = reference_logits(model, prompt, 16)
    got = runner_logits(FastRunner(model), prompt, tokens, chunk=11)
    for step, (a, b) in enumerate(zip(ref, got)):
        torch.testing.assert_close(b, a, atol=5e-5, rtol=1e-5, msg=lambda m: f"step {step}: {m}")
    # the long factors matter here: the short set's logits would be another model's
    short = runner_logits(FastRunner(model), prompt[:LONGROPE_ORIGINAL], [], chunk=11)
    assert not torch.allclose(short[0], reference_logits(model, prompt[:LONGROPE_ORIGINAL + 1], 0)[0][0])


def test_dynamic_rope_runner_stops_at_the_models_context(family_dirs):
    """"dynamic" RoPE equals the default one up to max_position_embeddings (where the fast runner's exactness is
    checked above) and rescales past it: the fast runner's context ends there, whatever it is asked for."""
    model = _load(family_dirs["llama-dynamic"], "fp32").model
    runner = FastRunner(model, max_positions=4 * model.config.max_position_embeddings)
    with pytest.raises(ValueError, match="exceed the model's context of 96"):
        list(runner.prefill(random_prompt(model.config.vocab_size, 97)))


@pytest.mark.parametrize("family", list(FAMILIES))
def test_bf16_logits_stay_within_rounding_of_transformers(family_dirs, family, capsys):
    model = _load(family_dirs[family], "bf16").model
    prompt = random_prompt(model.config.vocab_size, seed=2)
    ref, tokens = reference_logits(model, prompt, DECODE_STEPS)
    got = runner_logits(FastRunner(model, upcast_prefill=False), prompt, tokens, chunk=10)
    line = check_bf16_rounding(ref, got, family)
    with capsys.disabled():
        print("\n" + line)


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("precision", ["int8", "int4"])
def test_quantized_families_run_on_the_fast_path_and_agree_with_the_plain_runner(family_dirs, family, precision):
    """int8/int4 accepted: packed q|k|v and gate|up (Phi-3's come fused), the fast path computes what
    transformers' forward over the same quantized modules computes (same next token on nearly every step)."""
    loaded = _load(family_dirs[family], precision)
    model = loaded.model
    assert loaded.facts.precision == precision
    assert choose_runner(model, True).runner == "fast"
    sequence = random_prompt(model.config.vocab_size, 64, seed=3)
    fast = FastRunner(model)
    got = [[logits for _, logits in fast.prefill(sequence[:8])][-1][0]]
    got += [fast.decode(token)[0] for token in sequence[8:]]
    plain = ModelRunner(model)
    want = [[logits for _, logits in plain.prefill(sequence[:8])][-1][0]]
    want += [plain.decode(token)[0] for token in sequence[8:]]
    same = sum(int(a.argmax()) == int(b.argmax()) for a, b in zip(got, want)) / len(got)
    assert same >= 0.9, same
