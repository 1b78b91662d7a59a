"""Mistral's sliding window on the fast path (engine/executor/families.py): every layer attends to its last
``sliding_window`` positions, as transformers' mask for Mistral does.

The model is random-weight (its weights mean nothing): transformers' real MistralConfig with Mistral-7B-v0.1's
shape ratios scaled down, saved with the tiny tokenizer (tests/helpers/family_models.py) and loaded through the
engine's loader. The window is 16 positions: the 29-token prompt already crosses it and each of the 64 greedy
decode steps moves it on. The fast runner's logits against transformers' own forward over its DynamicCache,
at prefill and at every decode step: tight in fp32 with the same greedy tokens, within bf16 rounding in bf16;
int8/int4 accepted on the fast path. A window wider than the whole sequence would hide a step that ignored
it, so the test also checks that the window changes the logits.
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
WINDOW = 16


def _mistral(vocab: int, bos: int, eos: int, window: int | None = WINDOW):
    # Mistral-7B-v0.1: d=4096, 32 heads of 128 sharing 8 KV heads, I=14336 (3.5 d), θ=10,000, untied, every layer
    # sliding by 4,096. Scaled: d=128, 8 heads of 16 sharing 2 KV heads, I=448.
    from transformers import MistralConfig, MistralForCausalLM

    config = MistralConfig(vocab_size=vocab, hidden_size=128, intermediate_size=448, num_hidden_layers=3,
                           num_attention_heads=8, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
                           sliding_window=window, rope_theta=10_000.0, tie_word_embeddings=False, rms_norm_eps=1e-5,
                           bos_token_id=bos, eos_token_id=eos, pad_token_id=eos)
    return MistralForCausalLM(config)


def _mistral_no_window(vocab: int, bos: int, eos: int):
    return _mistral(vocab, bos, eos, window=None)  # Mistral-7B-v0.2 and later: full attention


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory) -> dict[str, Path]:
    return build_families(tmp_path_factory.mktemp("mistral"), {"mistral": _mistral,
                                                               "mistral-full": _mistral_no_window})


def test_a_sliding_window_mistral_takes_the_fast_path(family_dirs):
    loaded = load_cpu(family_dirs["mistral"], "fp32")
    assert loaded.model.config.sliding_window == WINDOW
    choice = choose_runner(loaded.model, True)
    assert choice.runner == "fast", choice.reason
    assert loaded.facts.runner == "fast" and loaded.facts.runner_reason is None
    assert type(make_runner(loaded, True)) is FastRunner


def test_fp32_logits_equal_transformers_past_the_window(family_dirs, capsys):
    model = load_cpu(family_dirs["mistral"], "fp32").model
    prompt = random_prompt(model.config.vocab_size)
    assert len(prompt) + DECODE_STEPS > 4 * WINDOW
    ref, tokens = reference_logits(model, prompt, DECODE_STEPS)
    for static in (False, True):  # the eager step and the fixed-shape one (what CUDA graphs capture)
        runner = FastRunner(model, static=static, max_positions=128 if static else None)
        got = runner_logits(runner, prompt, tokens, chunk=11)
        assert len(got) == DECODE_STEPS + 1
        check_fp32_equal(ref, got, 1e-4, "mistral")
        with capsys.disabled():
            prefill, decode = max_delta(ref, got)
            print(f"\nmistral (window {WINDOW}) fp32 static={static}: max |dlogit| prefill {prefill:.2e}, "
                  f"decode {decode:.2e}, greedy {DECODE_STEPS}/{DECODE_STEPS}")


def test_the_window_changes_the_logits(family_dirs):
    """The same weights with full attention answer otherwise past the window: the test above checks the window."""
    windowed = load_cpu(family_dirs["mistral"], "fp32").model
    full = load_cpu(family_dirs["mistral-full"], "fp32").model
    full.load_state_dict(windowed.state_dict())
    prompt = random_prompt(windowed.config.vocab_size)
    a = runner_logits(FastRunner(windowed), prompt, [], chunk=11)[0]
    b = runner_logits(FastRunner(full), prompt, [], chunk=11)[0]
    assert (a - b).abs().max().item() > 1e-2
    torch.testing.assert_close(b, reference_logits(full, prompt, 0)[0][0], atol=1e-4, rtol=1e-5)


def test_bf16_logits_stay_within_rounding_of_transformers(family_dirs, capsys):
    model = load_cpu(family_dirs["mistral"], "bf16").model
    prompt = random_prompt(model.config.vocab_size, seed=2)
    ref, tokens = reference_logits(model, prompt, DECODE_STEPS)
    got = runner_logits(FastRunner(model, upcast_prefill=False), prompt, tokens, chunk=10)
    line = check_bf16_rounding(ref, got, f"mistral (window {WINDOW})")
    with capsys.disabled():
        print("\n" + line)


@pytest.mark.parametrize("precision", ["int8", "int4"])
def test_quantized_mistral_runs_on_the_fast_path_and_agrees_with_the_plain_runner(family_dirs, precision, capsys):
    """int8/int4 accepted: the fast path computes what transformers' forward over the same quantized modules
    computes, window included (same next token on nearly every step of a 64-token sequence)."""
    loaded = load_cpu(family_dirs["mistral"], precision)
    model = loaded.model
    assert loaded.facts.precision == precision and loaded.facts.runner == "fast"
    assert choose_runner(model, True).runner == "fast"
    sequence = random_prompt(model.config.vocab_size, 64, seed=3)
    fast = FastRunner(model)
    got = [[logits for _, logits in fast.prefill(sequence[:8])][-1][0]]
    got += [fast.decode(token)[0] for token in sequence[8:]]
    plain = ModelRunner(model)
    want = [[logits for _, logits in plain.prefill(sequence[:8])][-1][0]]
    want += [plain.decode(token)[0] for token in sequence[8:]]
    same = sum(int(a.argmax()) == int(b.argmax()) for a, b in zip(got, want)) / len(got)
    with capsys.disabled():
        print(f"\nmistral (window {WINDOW}) {precision}: greedy agreement with the plain runner {same:.0%}")
    assert same >= 0.9, same
