"""A prompt chunk's attention in the fast runner's prefill (engine/executor/fastpath.py): which form computes it.

- **native** (``native_chunk_attention``): ``miaohui::prefill_attention`` (engine/native/prefill_attention.cpp), for
  a quantized model's plain causal layers (no sliding window, no extra keys of a vision layout), on AVX-512 BF16's dot
  products or, without them (or in fp32, which a CPU without native bf16 computes in), AVX2's fp32 multiply-adds.
  torch's CPU SDPA computes a chunk after the first against every key of the cache and masks afterwards, at ~140
  GFLOP/s; the op skips the blocks of keys a query cannot see and runs at ~300 (2.4-2.8x faster
  per call on a 2-core EPYC, Llama-3.2-1B shapes; a 3,264-token prompt's attention 6.3 s → 2.2 s). It is SDPA within
  the bf16 rounding of the probabilities, not its bits, so like the decode step's ``attend_one`` it is for quantized
  models, whose logits promise no bits; a dense model keeps SDPA and transformers' exact numbers.
- **soft-capped** (Gemma 2): ``engine.executor.llama_fused.capped_attention``, transformers' eager arithmetic (SDPA has
  no soft cap).
- **SDPA** otherwise, with the chunk's mask (``None``: the chunk starts at 0 and is plainly causal).

``MIAOHUI_PREFILL_ATTENTION=sdpa`` keeps SDPA where the native form would run (to compare). Owns the choice; not the
math (the op, ``capped_attention``) nor the masks (the runner's ``_forward_chunk``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from engine.executor.llama_fused import capped_attention
from engine.native.library import prefill_attention_isa


def native_chunk_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start: int,
                           scaling: float) -> torch.Tensor | None:
    """q (H, n, D) at positions start..start+n-1, k and v (KV, ≥ start+n, D), query i seeing keys 0..start+i →
    (n, H·D) on the native op (fp32, as a CPU without native bf16 computes, on its AVX2 path); None where it cannot
    run here (no AVX2, not bf16 or fp32 on a CPU, a head dim not a multiple of 32 or over 256,
    ``MIAOHUI_PREFILL_ATTENTION=sdpa``)."""
    dim = q.shape[-1]
    if not (q.device.type == "cpu" and q.dtype == k.dtype == v.dtype and q.dtype in (torch.bfloat16, torch.float32)
            and dim % 32 == 0 and dim <= 256 and q.stride(-1) == k.stride(-1) == v.stride(-1) == 1):
        return None
    isa = prefill_attention_isa()
    return None if isa is None else torch.ops.miaohui.prefill_attention(q, k, v, start, scaling, isa)


def chunk_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start: int, scaling: float,
                    mask: torch.Tensor | None, softcap: float | None, plain: bool) -> torch.Tensor:
    """The chunk's attention (n, H·D): q (H, n, D), k and v the cache's first start + n positions (KV, start+n, D),
    ``mask`` (n, start+n) bool of the keys each query sees (None: plainly causal from position 0), ``softcap`` Gemma
    2's, ``plain`` whether the native form may run (a quantized model's layer, plainly causal: ``mask`` is then None or
    exactly the causal one from ``start``)."""
    heads, n, _ = q.shape
    if softcap is not None:
        causal = mask if mask is not None else torch.ones(n, start + n, dtype=torch.bool, device=q.device).tril()
        return capped_attention(q, k, v, scaling, softcap, causal)
    if plain and (out := native_chunk_attention(q, k, v, start, scaling)) is not None:
        return out
    return F.scaled_dot_product_attention(q[None], k[None], v[None], attn_mask=mask, is_causal=mask is None,
                                          scale=scaling, enable_gqa=True)[0].transpose(0, 1).reshape(n, -1)
