"""A prompt chunk's causal attention on ``miaohui::prefill_attention`` (engine/native/prefill_attention.cpp), on each
instruction-set path the CPU has: within bf16 rounding of an fp32 reference (and as close as torch's SDPA gets; fp32
within fp32 rounding), exactly causal (a key past a query's position, or past the chunk, never changes its row), each
row's bits independent of the chunk it is computed in and of the thread count, and bad input one clear error."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from engine.native import library as native

pytestmark = pytest.mark.skipif(native.prefill_attention_isa() is None,
                                reason="native library not built here, or a CPU without AVX2")


@pytest.fixture(params=sorted(native.ATTENTION_ISAS.items()), ids=lambda item: item[0])
def isa(request) -> int:
    """Each instruction-set path this CPU runs: AVX2's fp32 multiply-adds, AVX-512 BF16's dot products."""
    if request.param[1] > int(torch.ops.miaohui.prefill_attention_isa()):
        pytest.skip(f"this CPU lacks {request.param[0]}")
    return request.param[1]

# (heads, KV heads, head dim, chunk rows, start): GQA groups of 1, 3, 4 and 7, every head dim the op takes, one query,
# rows not a multiple of the 4 it takes together, chunks crossing blocks of 64 keys.
SHAPES = [(32, 8, 64, 37, 0), (9, 3, 64, 50, 13), (14, 2, 128, 33, 70), (4, 4, 256, 5, 3), (8, 2, 96, 1, 40),
          (6, 2, 32, 70, 0), (7, 1, 64, 130, 200)]


def _inputs(heads: int, kv_heads: int, dim: int, n: int, start: int, extra: int = 5, seed: int = 0,
            dtype: torch.dtype = torch.bfloat16):
    g = torch.Generator().manual_seed(seed)
    qkv = torch.randn(n, heads + 2 * kv_heads, dim, generator=g).to(dtype)
    q = qkv[:, :heads].transpose(0, 1)  # (H, n, D) strided, as the runner passes it
    k = torch.randn(kv_heads, start + n + extra, dim, generator=g).to(dtype)
    v = torch.randn(kv_heads, start + n + extra, dim, generator=g).to(dtype)
    return q, k, v


def _reference(q, k, v, start: int, scale: float) -> torch.Tensor:
    heads, n, dim = q.shape
    end, group = start + n, heads // k.shape[0]
    keys = k[:, :end].float().repeat_interleave(group, 0)
    values = v[:, :end].float().repeat_interleave(group, 0)
    scores = (q.float() @ keys.transpose(1, 2)) * scale
    scores = scores.masked_fill(~torch.ones(n, end, dtype=torch.bool).tril(start), float("-inf"))
    return (scores.softmax(-1) @ values).transpose(0, 1).reshape(n, heads * dim)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "-".join(map(str, s)))
def test_it_is_the_reference_within_bf16_rounding_as_sdpa_is(shape, isa):
    heads, kv_heads, dim, n, start = shape
    q, k, v = _inputs(*shape)
    scale = dim ** -0.5
    out = torch.ops.miaohui.prefill_attention(q, k, v, start, scale, isa)
    assert out.shape == (n, heads * dim) and out.dtype == torch.bfloat16
    reference = _reference(q, k, v, start, scale)
    mask = torch.ones(n, start + n, dtype=torch.bool).tril(start)
    sdpa = F.scaled_dot_product_attention(q[None], k[None, :, :start + n], v[None, :, :start + n], attn_mask=mask,
                                          scale=scale, enable_gqa=True)[0].transpose(0, 1).reshape(n, -1)
    error, sdpa_error = (out.float() - reference).abs().max(), (sdpa.float() - reference).abs().max()
    # the output's own bf16 rounding (≤ 2^-9 of |out| ≤ max |v| ≈ 4.5) bounds both; the probabilities' adds a little
    assert error <= 1.5e-2 and error <= 2 * sdpa_error + 2e-3


def test_fp32_runs_on_the_avx2_path_within_fp32_rounding():
    """A CPU without native bf16 computes an int4 model in fp32: every product and probability in fp32."""
    q, k, v = _inputs(14, 2, 128, 33, 70, dtype=torch.float32)
    out = torch.ops.miaohui.prefill_attention(q, k, v, 70, 128 ** -0.5, 0)
    assert out.dtype == torch.float32 and out.shape == (33, 14 * 128)
    assert (out - _reference(q, k, v, 70, 128 ** -0.5)).abs().max() <= 1e-5


def test_a_key_past_a_querys_position_never_changes_its_row(isa):
    q, k, v = _inputs(8, 2, 64, 70, 30, extra=40)
    before = torch.ops.miaohui.prefill_attention(q, k, v, 30, 0.125, isa)
    k2, v2 = k.clone(), v.clone()
    k2[:, 30 + 69] += 3.0  # the chunk's last position: seen by its last row only
    v2[:, 30 + 69] -= 3.0
    k2[:, 100:] = float("nan")  # past the chunk: never read
    v2[:, 100:] = float("nan")
    after = torch.ops.miaohui.prefill_attention(q, k2, v2, 30, 0.125, isa)
    assert torch.equal(after[:-1], before[:-1]) and not torch.equal(after[-1], before[-1])


def test_each_rows_bits_do_not_depend_on_the_chunk_it_is_computed_in(isa):
    """The runner prefills a prompt in chunks: the same positions give the same rows whole or split."""
    q, k, v = _inputs(9, 3, 64, 150, 0)
    whole = torch.ops.miaohui.prefill_attention(q, k, v, 0, 0.125, isa)
    first = torch.ops.miaohui.prefill_attention(q[:, :61], k, v, 0, 0.125, isa)
    second = torch.ops.miaohui.prefill_attention(q[:, 61:], k, v, 61, 0.125, isa)
    assert torch.equal(torch.cat((first, second)), whole)


def test_it_gives_the_same_bits_on_one_thread_or_all(isa):
    q, k, v = _inputs(32, 8, 64, 90, 20)
    together = torch.ops.miaohui.prefill_attention(q, k, v, 20, 0.125, isa)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        alone = torch.ops.miaohui.prefill_attention(q, k, v, 20, 0.125, isa)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(together, alone)


def test_bad_input_is_one_clear_error():
    isa = 0  # the best this CPU has
    q, k, v = _inputs(8, 2, 64, 10, 0)
    with pytest.raises(RuntimeError, match="in q's dtype"):
        torch.ops.miaohui.prefill_attention(q.float(), k, v, 0, 0.125)
    with pytest.raises(RuntimeError, match="bf16 or fp32"):
        torch.ops.miaohui.prefill_attention(q.half(), k.half(), v.half(), 0, 0.125)
    with pytest.raises(RuntimeError, match="start \\+ n keys"):
        torch.ops.miaohui.prefill_attention(q, k, v, 10, 0.125, isa)  # 15 keys held, 20 needed
    with pytest.raises(RuntimeError, match="multiple of the KV heads"):
        torch.ops.miaohui.prefill_attention(q[:7], k, v, 0, 0.125, isa)
    with pytest.raises(RuntimeError, match="isa"):
        torch.ops.miaohui.prefill_attention(q, k, v, 0, 0.125, 7)
