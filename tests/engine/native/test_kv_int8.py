"""The 8-bit KV cache's native ops (engine/native/kv_int8.cpp): ``miaohui::kv_quantize`` is
engine/executor/kv_cache.py's ``quantize`` bit for bit, and ``miaohui::attend_one_q8`` is ``miaohui::attend_one``'s
arithmetic over the dequantized rows (exactly, in fp32), reading a KV head once for its group with each head's own
bits."""

from __future__ import annotations

import pytest
import torch

from engine.executor.kv_cache import dequantize, quantize
from engine.native import library as native

pytestmark = pytest.mark.skipif(not (native.decode_ops() and native.int8_kv_ops()),
                                reason="native library not built here (or from older sources), or no AVX2")

DTYPES = [torch.bfloat16, torch.float32]


def _inputs(dtype: torch.dtype) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator)

    edges = randn(6, 64)
    edges[0] = 0.0  # an all-zero vector: scale 0, codes 0
    edges[1] *= 1e-9  # below fp16's range: scale 0, codes ±127 (kv_cache.quantize's tiny divisor)
    edges[2] *= 1e-6  # fp16 subnormal scales
    edges[3] *= 1e36  # past fp16's largest scale: clamped
    edges[4] = torch.arange(64) - 31.5  # halves: rounded to even
    edges[5, ::2] = 0.0
    return [(randn(2, 3, 7, 64) * 5).to(dtype), randn(5, 40).to(dtype), randn(4, 9).to(dtype), edges.to(dtype),
            (randn(3, 72) * 1e4).to(dtype)]


@pytest.mark.parametrize("dtype", DTYPES)
def test_kv_quantize_is_quantize_bit_for_bit(dtype):
    for x in _inputs(dtype):
        codes, scales = torch.ops.miaohui.kv_quantize(x)
        want_codes, want_scales = quantize(x)
        assert codes.dtype == torch.int8 and scales.dtype == torch.float16
        assert torch.equal(codes, want_codes) and torch.equal(scales, want_scales), x.shape
    strided = _inputs(dtype)[0].transpose(1, 2)  # (..., D) not contiguous: the same bits as its contiguous copy
    assert all(torch.equal(a, b) for a, b in zip(torch.ops.miaohui.kv_quantize(strided), quantize(strided)))


def _cache(kv_heads: int, positions: int, dim: int, dtype: torch.dtype, seed: int):
    generator = torch.Generator().manual_seed(seed)
    rows = (torch.randn(2, kv_heads, positions + 3, dim, generator=generator) * 3).to(dtype)
    codes, scales = quantize(rows)
    # strided views, as Int8KVCache.attend_one reads its buffer: positions 1..positions of each head
    return codes[0, :, 1:1 + positions], codes[1, :, 1:1 + positions], scales[0, :, 1:1 + positions], \
        scales[1, :, 1:1 + positions]


@pytest.mark.parametrize("cap", [0.0, 2.0])
def test_attention_over_int8_rows_is_attend_one_over_the_dequantized_rows(cap):
    """In fp32 the dequantized rows are exact (7-bit codes times 11-bit scales), so the int8 attention equals the
    dense op over them bit for bit; in bf16 it is the fp32 reference within rounding."""
    torch.manual_seed(2)
    for positions in (1, 13, 300, 2100):
        k, v, ks, vs = _cache(2, positions, 40, torch.float32, seed=positions)
        q = torch.randn(6, 40) * 2
        got = torch.ops.miaohui.attend_one_q8(q, k, v, ks, vs, 40 ** -0.5, cap)
        want = torch.ops.miaohui.attend_one(q, dequantize(k, ks, torch.float32), dequantize(v, vs, torch.float32),
                                            40 ** -0.5, cap)
        assert torch.equal(got, want), positions
        half = torch.ops.miaohui.attend_one_q8(q.bfloat16(), k, v, ks, vs, 40 ** -0.5, cap)
        assert half.dtype == torch.bfloat16  # the fp32 result over the bf16 query, rounded once
        assert torch.equal(half, torch.ops.miaohui.attend_one_q8(q.bfloat16().float(), k, v, ks, vs, 40 ** -0.5,
                                                                 cap).bfloat16())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("heads,kv_heads,dim", [(9, 3, 64), (32, 8, 64), (16, 1, 72), (4, 4, 40)])
def test_int8_attention_reads_a_kv_head_once_for_its_group_with_each_head_s_own_bits(dtype, heads, kv_heads, dim):
    for positions in (5, 300, 2100):  # one thread, and the passes spread over threads
        k, v, ks, vs = _cache(kv_heads, positions, dim, dtype, seed=positions + heads)
        q = torch.randn(heads, dim).to(dtype)
        together = torch.ops.miaohui.attend_one_q8(q, k, v, ks, vs, dim ** -0.5, 0.0).view(heads, dim)
        group = heads // kv_heads
        for h in range(0, heads, max(1, heads // 5)):
            g = slice(h // group, h // group + 1)
            alone = torch.ops.miaohui.attend_one_q8(q[h:h + 1], k[g], v[g], ks[g], vs[g], dim ** -0.5, 0.0)
            assert torch.equal(together[h:h + 1], alone), (positions, h)


def test_int8_ops_refuse_what_they_cannot_read():
    k, v, ks, vs = _cache(2, 5, 40, torch.float32, seed=0)
    with pytest.raises(RuntimeError, match="H a multiple of KV"):
        torch.ops.miaohui.attend_one_q8(torch.randn(3, 40), k, v, ks, vs, 1.0, 0.0)
    with pytest.raises(RuntimeError, match="fp16"):
        torch.ops.miaohui.attend_one_q8(torch.randn(4, 40), k, v, ks.float(), vs, 1.0, 0.0)
    with pytest.raises(RuntimeError, match="bf16 or fp32"):
        torch.ops.miaohui.kv_quantize(torch.randn(3, 8).half())
