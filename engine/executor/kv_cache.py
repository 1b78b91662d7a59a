"""The fast runner's KV cache buffers: ``DenseKVCache`` (the model's dtype) and ``Int8KVCache`` (8-bit).

Both are preallocated (layers, kv_heads, capacity, head_dim), grown by ``FastRunner`` when full, written in place
(so crop stays O(1)) and read the same way: ``write`` a chunk of positions, ``write_at`` one position given as a
tensor (the static step), ``read`` a span back in the model's dtype, ``tensors``/``nbytes``/``bytes_per_position``.

A dense cache may start with a shared prefix (``attach``: an ``engine.executor.kv_blocks.SharedPrefix``, rows of a
pool read in place): positions before its length (``base``) are the prefix's, the buffers hold position p at
index p - base, and ``read`` joins the two (``SharedPrefix.join``), so a reader sees one span as before.

``Int8KVCache`` keeps keys and values as int8 with one fp16 scale per (layer, KV head, position). Owns ``quantize``
(symmetric absmax rounding of each head's vector at one position) and the reads: ``attend_one`` (one query's
attention straight from the int8 rows, the scales applied to the scores and to the probabilities instead of to the
cache: (q · k_int8) · s_k and (p · s_v) · v_int8 equal q · (s_k · k_int8) and p · (s_v · v_int8), so no dequantized
copy of the cache is made per step) and ``read`` (the dequantized span, for prefill's SDPA and Gemma 2's capped
attention).

On a CPU where the native library has them (``native_kv``), the writes quantize with ``miaohui::kv_quantize`` (the
bits of ``quantize``, tested equal) and ``attend_one`` is ``miaohui::attend_one_q8`` (engine/native/kv_int8.cpp), Gemma
2's soft cap included: the functions the native decode step calls over this cache (``DecodeStep.step_q8``), so the
Python step and the native one write and read the same bits (tests/engine/executor/test_native_step_int8kv.py).

Why by hand: transformers' ``QuantizedCache`` needs optimum-quanto or HQQ and plugs into its own ``DynamicCache``
(``torch.cat`` per token), which the fast runner does not use; these are a few plain torch operations that exist
on CPU and CUDA alike. Why per (layer, head, position) scales: each write quantizes only the new position, so
nothing already stored is ever re-quantized (a per-channel scale over positions would have to be fixed before the
positions exist, or re-quantize on growth), and crop or rollback just forgets positions. Measured agreement with the
16-bit cache (docs/BENCHMARK.md, ``engine.bench.kv_cache``) is the justification for not using finer blocks.

Bytes: one byte per element plus ``KV_SCALE_BYTES`` per head and position: (head_dim + 2) / (2 · head_dim) of a
bf16 cache, 0.516x at head_dim 64, 0.5x exactly for the elements alone.

Does not own which attention the runner computes over a dense cache (``engine.executor.fastpath``), when it uses
which cache (``FastRunner(kv_precision=...)``) or the byte arithmetic of the estimates
(``engine.inputs.kv_bytes_per_token``).
"""

from __future__ import annotations

from typing import Any

import torch

from engine.executor.llama_fused import capped_attention
from engine.inputs import KV_SCALE_BYTES
from engine.native.library import decode_ops, int8_kv_ops

QMAX = 127  # symmetric: -127..127, so the scale maps the head's largest magnitude exactly
SCALE_DTYPE = torch.float16  # KV_SCALE_BYTES each: finer than bf16's 8 bits of mantissa, ample range for K and V
_SCALE_MAX = torch.finfo(SCALE_DTYPE).max
_TINY = torch.finfo(torch.float32).tiny
assert torch.empty(0, dtype=SCALE_DTYPE).element_size() == KV_SCALE_BYTES


def quantize(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x (..., D) → (int8 (..., D), fp16 scale (...)): each vector divided by its own absmax / 127, rounded.

    The scale is rounded to fp16 first and the vector divided by that rounded scale, so dequantizing with the stored
    scale is off by at most half a step per element. An all-zero vector gets scale 0 and zeros."""
    wide = x.float()
    scale = (wide.abs().amax(dim=-1, keepdim=True) / QMAX).clamp_(max=_SCALE_MAX).to(SCALE_DTYPE)
    # a zero scale (an all-zero vector, or one below fp16's range) divides by a tiny number: zeros, or ±127 that
    # the zero scale dequantizes to zero, within 4e-6 of the truth
    q = (wide / scale.float().clamp_(min=_TINY)).round_().clamp_(-QMAX, QMAX).to(torch.int8)
    return q, scale.squeeze(-1)


def native_kv(x: torch.Tensor) -> bool:
    """Whether the int8 cache's native ops (``miaohui::kv_quantize``, ``attend_one_q8``) take ``x`` here: a CPU tensor
    in bf16 or fp32, a library built from sources that have them, and ``MIAOHUI_NATIVE_KV`` not 0
    (``engine.native.library.int8_kv_ops``)."""
    return x.device.type == "cpu" and x.dtype in (torch.bfloat16, torch.float32) and decode_ops() and int8_kv_ops()


def dequantize(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """int8 (..., D) and scales (...) → (..., D) in ``dtype`` (products in fp32, rounded once)."""
    return (q.float() * scale.float().unsqueeze(-1)).to(dtype)


class DenseKVCache:
    """K and V of every layer (layers, kv_heads, capacity, head_dim) in the model's dtype, with per-layer views
    ``k_layers``/``v_layers`` made once per allocation (the decode step's per-token indexing stays cheap), after an
    optional shared prefix of ``base`` positions (see the module docstring)."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int, dtype: torch.dtype, device: torch.device) -> None:
        self._shape, self._dtype, self._device = (layers, kv_heads, head_dim), dtype, device
        self.capacity = 0
        self.k = self.v = torch.empty(0, dtype=dtype)
        self.k_layers: tuple[torch.Tensor, ...] = ()
        self.v_layers: tuple[torch.Tensor, ...] = ()
        self.prefix: Any = None  # a SharedPrefix, or None
        self.base = 0

    def grow(self, capacity: int) -> None:
        """(Re)allocate for ``capacity`` positions of its own, keeping the first ``self.capacity``."""
        layers, kv_heads, head_dim = self._shape
        k = torch.zeros((layers, kv_heads, capacity, head_dim), dtype=self._dtype, device=self._device)
        v = torch.zeros_like(k)
        if self.capacity:
            k[:, :, :self.capacity], v[:, :, :self.capacity] = self.k, self.v
        self.k, self.v, self.capacity = k, v, capacity
        self.k_layers, self.v_layers = k.unbind(0), v.unbind(0)

    # -- a shared prefix ------------------------------------------------------------------------------------
    def attach(self, prefix: Any) -> None:
        """Read ``prefix`` as the first positions (the own rows are forgotten); the previous prefix is released."""
        self.detach()
        self.prefix, self.base = prefix, len(prefix)

    def detach(self) -> None:
        """No shared prefix any more (its references released); the own rows are forgotten."""
        if self.prefix is not None:
            self.prefix.pool.release(self.prefix)
        self.prefix, self.base = None, 0

    @property
    def held_in_prefix(self) -> int:
        """The positions the prefix's runs of pool rows hold (``base``: what the native step reads in place)."""
        return 0 if self.prefix is None else self.prefix.rows_held

    def shorten(self, n: int) -> int:
        """Keep at most the first ``n`` positions of the prefix (whole blocks, own rows forgotten): the new base."""
        if self.prefix is not None and n < self.base:
            from engine.executor.kv_blocks import BLOCK

            shorter = self.prefix.shorter(n // BLOCK)
            self.prefix, self.base = shorter, len(shorter) if shorter is not None else 0
        return self.base

    def rows(self, end: int) -> tuple[torch.Tensor, torch.Tensor]:
        """All layers' K and V of positions 0..end-1 (layers, kv_heads, end, head_dim): views when nothing is
        shared, else copies of the prefix and the own rows joined."""
        if self.prefix is None:
            return self.k[:, :, :end], self.v[:, :, :end]
        k, v = self.prefix.rows()
        own = max(0, end - self.base)
        return (torch.cat((k, self.k[:, :, :own]), dim=2)[:, :, :end],
                torch.cat((v, self.v[:, :, :own]), dim=2)[:, :, :end])

    def tensors(self) -> list[torch.Tensor]:
        return [self.k, self.v]

    def step_args(self) -> tuple[torch.Tensor, ...]:
        """What ``DecodeStep.step`` reads and writes (engine/executor/native_step.py): K and V."""
        return self.k, self.v

    def layers(self) -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
        """The per-layer views of K and of V."""
        return self.k_layers, self.v_layers

    @property
    def nbytes(self) -> int:
        return self.k.nbytes + self.v.nbytes

    @property
    def bytes_per_position(self) -> int:
        layers, kv_heads, head_dim = self._shape
        return 2 * layers * kv_heads * head_dim * self.k.element_size()

    def write(self, layer: int, start: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store ``k`` and ``v`` (kv_heads, n, head_dim) at positions start..start+n-1 of ``layer`` (>= ``base``)."""
        start -= self.base
        self.k[layer, :, start:start + k.shape[1]] = k
        self.v[layer, :, start:start + v.shape[1]] = v

    def write_at(self, layer: int, pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store ``k`` and ``v`` (kv_heads, 1, head_dim) at the position the (1,) tensor ``pos`` holds (the static
        step: never with a shared prefix)."""
        self.k_layers[layer].index_copy_(1, pos, k)
        self.v_layers[layer].index_copy_(1, pos, v)

    def read(self, layer: int, first: int, end: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Positions first..end-1 of ``layer`` (kv_heads, end - first, head_dim): views, or with a shared prefix the
        prefix and the own rows joined (``SharedPrefix.join``)."""
        if self.prefix is None:
            return self.k_layers[layer][:, first:end], self.v_layers[layer][:, first:end]
        k, v = self.prefix.join(layer, self.k_layers[layer][:, :end - self.base], self.v_layers[layer][:, :end - self.base])
        return (k, v) if first == 0 else (k[:, first:], v[:, first:])


class Int8KVCache:
    """K and V of every layer as int8 in one buffer (2, layers, kv_heads, capacity, head_dim; ``k`` and ``v`` are its
    halves) with fp16 scales (2, layers, kv_heads, capacity). One buffer for both: a token's K and V are quantized
    and stored in one call each, which matters at one token per step (each operation costs microseconds whatever its
    size). Positions past what the runner counts as cached may hold stale values: never read, overwritten.
    Never starts with a shared prefix (``base`` is always 0)."""

    prefix = None
    base = 0
    held_in_prefix = 0  # never a shared prefix

    def __init__(self, layers: int, kv_heads: int, head_dim: int, dtype: torch.dtype, device: torch.device) -> None:
        self._shape = (layers, kv_heads, head_dim)
        self._dtype = dtype  # what reads return: the model's activations dtype
        self._device = device
        self.capacity = 0
        self.kv = torch.empty((2, 0), dtype=torch.int8)
        self.scale = torch.empty((2, 0), dtype=SCALE_DTYPE)
        self.k = self.v = self.k_scale = self.v_scale = torch.empty(0)

    def grow(self, capacity: int) -> None:
        """(Re)allocate for ``capacity`` positions, keeping the first ``self.capacity``."""
        layers, kv_heads, head_dim = self._shape
        kv = torch.zeros((2, layers, kv_heads, capacity, head_dim), dtype=torch.int8, device=self._device)
        scale = torch.zeros((2, layers, kv_heads, capacity), dtype=SCALE_DTYPE, device=self._device)
        if self.capacity:
            kv[:, :, :, :self.capacity], scale[:, :, :, :self.capacity] = self.kv, self.scale
        self.kv, self.scale, self.capacity = kv, scale, capacity
        (self.k, self.v), (self.k_scale, self.v_scale) = kv.unbind(0), scale.unbind(0)

    def tensors(self) -> list[torch.Tensor]:
        """The two buffers (for ``torch._dynamo.mark_static_address``)."""
        return [self.kv, self.scale]

    def step_args(self) -> tuple[torch.Tensor, ...]:
        """What ``DecodeStep.step_q8`` reads and writes (engine/executor/native_step.py): K, V, their scales."""
        return self.k, self.v, self.k_scale, self.v_scale

    @property
    def nbytes(self) -> int:
        """Bytes allocated: the int8 elements and the scales."""
        return sum(t.nbytes for t in self.tensors())

    @property
    def bytes_per_position(self) -> int:
        """Bytes one cached position takes over all layers: K and V, one byte per element plus a scale per head."""
        layers, kv_heads, head_dim = self._shape
        return 2 * layers * kv_heads * (head_dim + KV_SCALE_BYTES)

    # -- writes ---------------------------------------------------------------------------------------------
    def write(self, layer: int, start: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store ``k`` and ``v`` (kv_heads, n, head_dim) at positions start..start+n-1 of ``layer``."""
        end = start + k.shape[1]
        both = torch.stack((k, v))
        self.kv[:, layer, :, start:end], self.scale[:, layer, :, start:end] = \
            torch.ops.miaohui.kv_quantize(both) if native_kv(both) else quantize(both)

    def write_at(self, layer: int, pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store ``k`` and ``v`` (kv_heads, 1, head_dim) at the position held by the (1,) tensor ``pos``: fixed
        shapes, no host read of ``pos`` (the static step)."""
        q, scale = quantize(torch.stack((k, v)))
        self.kv[:, layer].index_copy_(2, pos, q)
        self.scale[:, layer].index_copy_(2, pos, scale)

    # -- reads ----------------------------------------------------------------------------------------------
    def read(self, layer: int, first: int, end: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Positions first..end-1 of ``layer`` dequantized: K and V (kv_heads, end - first, head_dim)."""
        return (dequantize(self.k[layer, :, first:end], self.k_scale[layer, :, first:end], self._dtype),
                dequantize(self.v[layer, :, first:end], self.v_scale[layer, :, first:end], self._dtype))

    def attend_one(self, layer: int, q: torch.Tensor, first: int, end: int, scaling: float,
                   softcap: float | None = None) -> torch.Tensor:
        """One query's grouped-query attention over positions first..end-1: q (H, D) → (1, H·D) in q's dtype.

        Scores, softmax and the weighted sum in fp32 from the int8 rows (exactly representable), the scales folded
        into the scores and the probabilities. Gemma 2's soft cap reads the dequantized prefix instead. Natively
        (``native_kv``): ``miaohui::attend_one_q8``, the native step's own attention, the soft cap in it."""
        if native_kv(q):
            return torch.ops.miaohui.attend_one_q8(q, self.k[layer, :, first:end], self.v[layer, :, first:end],
                                                   self.k_scale[layer, :, first:end], self.v_scale[layer, :, first:end],
                                                   scaling, softcap or 0.0)
        if softcap is not None:
            k, v = self.read(layer, first, end)
            return capped_attention(q[:, None], k, v, scaling, softcap, None).reshape(1, -1)
        kv_heads, head_dim = self._shape[1], self._shape[2]
        queries = q.view(kv_heads, -1, head_dim).float()  # (KV, G, D)
        scores = torch.bmm(queries, self.k[layer, :, first:end].float().transpose(1, 2))  # (KV, G, n)
        scores.mul_(self.k_scale[layer, :, first:end].float().mul(scaling).unsqueeze(1))
        probs = torch.softmax(scores, dim=-1).mul_(self.v_scale[layer, :, first:end].float().unsqueeze(1))
        return torch.bmm(probs, self.v[layer, :, first:end].float()).to(q.dtype).view(1, -1)  # (1, H·D)
