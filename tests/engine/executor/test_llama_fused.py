"""engine.executor.llama_fused's per-operation math that the fast path's own tests do not reach directly:
``attend_one``, the quantized decode step's attention, against transformers' reference (SDPA with GQA)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from engine.executor.llama_fused import attend_one


@pytest.mark.parametrize("positions", [1, 37, 1500])
def test_attend_one_equals_grouped_query_sdpa(positions):
    """Each query head must attend with its own KV head (heads 0-2 → KV 0, 3-5 → KV 1, ...), over exactly
    the positions given; the result is fp32 math rounded once, so it is within one bf16 step of SDPA's."""
    generator = torch.Generator().manual_seed(positions)
    heads, kv_heads, dim = 9, 3, 64
    q = torch.randn(heads, dim, generator=generator).to(torch.bfloat16)
    cache = torch.randn(2, kv_heads, positions + 50, dim, generator=generator).to(torch.bfloat16)
    k, v = cache[0, :, :positions], cache[1, :, :positions]  # a filled prefix of a larger cache, as in decode
    got = attend_one(q, k, v, dim ** -0.5)
    reference = F.scaled_dot_product_attention(q.float().view(1, heads, 1, dim), k.float()[None], v.float()[None],
                                               scale=dim ** -0.5, enable_gqa=True).view(1, heads * dim)
    assert got.shape == (1, heads * dim) and got.dtype == torch.bfloat16
    assert (got.float() - reference).abs().max() <= 2 ** -8 * reference.abs().max()
    # A swapped grouping (query head h reading KV head h % 3) would give another answer:
    wrong = F.scaled_dot_product_attention(q.float().view(1, heads, 1, dim), k.float().repeat(3, 1, 1)[None],
                                           v.float().repeat(3, 1, 1)[None], scale=dim ** -0.5).view(1, heads * dim)
    if positions > 1:
        assert (got.float() - wrong).abs().max() > 0.05
