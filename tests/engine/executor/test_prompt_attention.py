"""Which form a prompt chunk's attention takes in the fast runner (engine/executor/prompt_attention.py): the native
op for a quantized model's plain causal layers, in every chunk, its logits within bf16 rounding of SDPA's; SDPA for a
dense model (transformers' exact numbers) and where ``MIAOHUI_PREFILL_ATTENTION=sdpa``; the native form's own limits."""

from __future__ import annotations

import pytest
import torch

from engine.executor import prompt_attention
from engine.executor.fastpath import FastRunner
from engine.native import library as native
from tests.helpers.family_models import load_cpu

needs_op = pytest.mark.skipif(native.prefill_attention_isa() is None,
                              reason="native library not built here, or a CPU without AVX2")


def _counting(monkeypatch) -> list[int]:
    """Counts the chunks the native form computed (the real op still runs)."""
    ran: list[int] = []
    real = prompt_attention.native_chunk_attention

    def spy(q, k, v, start, scaling):
        out = real(q, k, v, start, scaling)
        if out is not None:
            ran.append(start)
        return out

    monkeypatch.setattr(prompt_attention, "native_chunk_attention", spy)
    return ran


def _two_prefills(model, first: list[int], second: list[int]) -> torch.Tensor:
    runner = FastRunner(model)
    list(runner.prefill(first))
    return [logits for _, logits in runner.prefill(second)][-1][0].float()  # a chunk starting past position 0


@needs_op
def test_a_quantized_models_chunks_take_the_native_form_within_rounding_of_sdpa(default_model_dir, monkeypatch):
    model = load_cpu(default_model_dir, "int4").model
    layers = model.config.num_hidden_layers
    first, second = list(range(300, 380)), list(range(1000, 1045))
    ran = _counting(monkeypatch)
    native_logits = _two_prefills(model, first, second)
    assert ran == [0] * layers + [len(first)] * layers  # every layer of both chunks
    monkeypatch.setenv(native.PREFILL_ATTENTION_ENV, "sdpa")
    sdpa_logits = _two_prefills(model, first, second)
    assert len(ran) == 2 * layers  # SDPA: the native form declined
    scale = sdpa_logits.abs().max()
    assert (native_logits - sdpa_logits).abs().max() <= 0.05 * scale  # measured 0.022 (0.5 of 22.75)


@needs_op
def test_a_dense_model_keeps_sdpa(default_model_dir, monkeypatch):
    model = load_cpu(default_model_dir, "bf16").model
    ran = _counting(monkeypatch)
    _two_prefills(model, list(range(300, 340)), list(range(1000, 1010)))
    assert ran == []


@needs_op
def test_the_native_form_declines_what_it_cannot_run(monkeypatch):
    q, k, v = torch.randn(8, 10, 64).bfloat16(), torch.randn(2, 10, 64).bfloat16(), torch.randn(2, 10, 64).bfloat16()
    assert prompt_attention.native_chunk_attention(q.half(), k.half(), v.half(), 0, 0.125) is None  # fp16: SDPA
    narrow = torch.randn(8, 10, 48).bfloat16(), torch.randn(2, 10, 48).bfloat16(), torch.randn(2, 10, 48).bfloat16()
    assert prompt_attention.native_chunk_attention(*narrow, 0, 0.125) is None  # head dim not a multiple of 32
    monkeypatch.setenv(native.PREFILL_ATTENTION_ENV, "sdpa")
    assert prompt_attention.native_chunk_attention(q, k, v, 0, 0.125) is None
    monkeypatch.delenv(native.PREFILL_ATTENTION_ENV)
    monkeypatch.setenv("MIAOHUI_NATIVE", "0")  # torch's kernels only
    assert prompt_attention.native_chunk_attention(q, k, v, 0, 0.125) is None


@needs_op
def test_the_avx2_cap_reaches_the_attention(monkeypatch):
    """``MIAOHUI_NATIVE_ISA=avx2`` emulates an AVX2-only CPU for the attention as for the products."""
    monkeypatch.setenv("MIAOHUI_NATIVE_ISA", "avx2")
    assert native.prefill_attention_isa() == native.ATTENTION_ISAS["avx2"]
