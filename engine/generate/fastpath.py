"""A faster decode path for Llama-family models: fused projections, a static KV cache, few ops per step.

Owns ``FastRunner`` (the same interface as ``engine.generate.runner.ModelRunner``: chunked prefill, one-token
decode, crop, measured KV bytes) and ``unsupported_reason(model)``, which says why a model cannot use it
(the factory then falls back to the plain runner). The forward pass is a compact re-implementation of
transformers' Llama decoder (RMSNorm, RoPE from the model's own rotary embedding, grouped-query
attention, SiLU MLP, tied or untied lm_head) that reads the model's weights; it never changes them.

Why it is faster at batch 1: decode is dominated by per-operation overhead (a small GEMV costs tens
of microseconds whatever its size), so each layer runs 4 matrix products instead of 7 (q|k|v and
gate|up fused once at construction, the model's own parameters then made views of the fused
tensors so no memory is duplicated), the KV cache is allocated once and written in place (no
``torch.cat`` per token, crop is O(1)), RoPE tables are computed once, and attention reads the
filled cache prefix in place (GQA inside the kernel, no ``repeat_kv`` copies). On CUDA a static-shape
step (``static=True``) can be captured as a CUDA graph with ``torch.compile(mode="reduce-overhead")``.

Weight-only int8/int4 models (``engine/models/quant.py``) run here too: ``quantize_model`` already fused
q|k|v and gate|up, the step calls the packed kernels directly, and prefill dequantizes one
projection at a time for its matrix product. Does not know text, templates, sampling or timing; does not handle
bitsandbytes-quantized, offloaded or non-Llama models (``unsupported_reason`` names the case).
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import torch
import torch.nn.functional as F

from engine.cpu import native_gemm
from engine.models.quant import Int8Linear, ProjectionSlice, QuantizedEmbedding, QuantizedLinear
from engine.generate.runner import ModelRunner, model_device

log = logging.getLogger(__name__)

# Architectures whose decoder is exactly Llama's (pre-norm, RoPE, GQA, gated SiLU MLP, no biases).
SUPPORTED_MODEL_TYPES = ("llama", "mistral")
# RoPE variants whose cos/sin depend on the position only, so a table computed once is exact; "dynamic"
# and "longrope" change their frequencies with the sequence length.
STATIC_ROPE_TYPES = ("default", "linear", "llama3", "yarn")
# First cache allocation in positions; it doubles when full (rare, amortised), capped at the context.
INITIAL_CAPACITY = 1024
QUANTIZED_PREFILL_CHUNK = 1024  # smallest prefill chunk for int8/int4 weights (see FastRunner.prefill)


def unsupported_reason(model: Any) -> str | None:
    """Why ``model`` cannot run on the fast path, or None when it can."""
    config = getattr(model, "config", None)
    if config is None:
        return "no config"
    if getattr(config, "model_type", None) not in SUPPORTED_MODEL_TYPES:
        return f"architecture {getattr(config, 'model_type', '?')} is not Llama-family"
    if getattr(config, "sliding_window", None):
        return "sliding-window attention"
    if getattr(config, "hidden_act", "silu") != "silu":
        return f"activation {config.hidden_act}"
    if getattr(config, "attention_bias", False) or getattr(config, "mlp_bias", False):
        return "projection biases"
    rope = getattr(config, "rope_parameters", None) or {}
    rope_type = rope.get("rope_type", "default") if isinstance(rope, dict) else "default"
    if rope_type not in STATIC_ROPE_TYPES:
        return f"rope type {rope_type}"
    if getattr(model, "hf_device_map", None) and len(set(map(str, model.hf_device_map.values()))) > 1:
        return "model split across devices"
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if layers is None or not hasattr(inner, "rotary_emb"):
        return "unexpected module layout"
    linears = [model.lm_head] + [m for layer in layers for m in (
        layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj, layer.self_attn.o_proj,
        layer.mlp.gate_proj, layer.mlp.up_proj, layer.mlp.down_proj)]
    for linear in linears:
        # bitsandbytes' Linear8bitLt / Linear4bit subclass nn.Linear: only the plain class qualifies.
        if isinstance(linear, QuantizedLinear):
            continue
        if type(linear) is not torch.nn.Linear:
            return f"quantized or custom layer {type(linear).__name__}"
        if linear.bias is not None:
            return "projection biases"
    devices = {p.device for p in model.parameters()}
    dtypes = {p.dtype for p in model.parameters()}
    if len(devices) != 1 or next(iter(devices)).type not in ("cpu", "cuda"):
        return "parameters on several devices or on meta"
    if not dtypes <= {torch.float32, torch.bfloat16, torch.float16} or len(dtypes) != 1:
        return f"parameter dtypes {sorted(map(str, dtypes))}"
    return None


# A projection: a dense (out, in) weight, or a module (quantized) called on (n, in) activations.
Projection = Any


def _project(x: torch.Tensor, weight: Projection) -> torch.Tensor:
    """x (n, in) → (n, out) through a dense weight or a quantized module's kernel. Callers pass 2-D
    activations in the model's dtype and few rows (decode), so the module's own checks are skipped:
    they cost ~15 µs a call, measured, ~5 ms a token over 30 layers."""
    return F.linear(x, weight) if isinstance(weight, torch.Tensor) else weight.kernel(x)


@dataclass(frozen=True)
class _Layer:
    """One decoder layer's weights as the fast path uses them."""

    attn_norm: torch.Tensor  # (d,)
    qkv: Projection  # (H*D + 2*KV*D, d): rows q | k | v
    o: Projection  # (d, H*D)
    mlp_norm: torch.Tensor  # (d,)
    gate_up: Projection  # (2*I, d): rows gate | up
    down: Projection  # (d, I)


@dataclass(frozen=True)
class _Weights:
    """Everything the forward reads, built once per model (shared by every runner of that model)."""

    embed: torch.Tensor | Int8Linear  # (V, d); quantized models read rows of an int8 table
    layers: tuple[_Layer, ...]
    final_norm: torch.Tensor  # (d,)
    lm_head: Projection  # (V, d); the embedding itself when tied
    eps: float
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    scaling: float


# One fused set per model object: a second runner (a new conversation) must not fuse again.
_WEIGHTS: "weakref.WeakKeyDictionary[Any, _Weights]" = weakref.WeakKeyDictionary()
_WEIGHTS_LOCK = threading.Lock()


def _projection(linear: torch.nn.Module) -> Projection:
    return linear if isinstance(linear, QuantizedLinear) else linear.weight.detach()


def _fuse(linears: Sequence[torch.nn.Module]) -> Projection:
    """Concatenate the linears' weights by rows and make each parameter a view of its slice.

    The model keeps working unchanged (same values, same Parameter objects) and the fused copy costs
    no extra memory once the old separate tensors are released. Quantized linears are kept apart.
    """
    if any(isinstance(lin, QuantizedLinear) for lin in linears):
        fused = linears[0].fused if isinstance(linears[0], ProjectionSlice) else None
        if fused is None or not all(isinstance(lin, ProjectionSlice) and lin.fused is fused for lin in linears) \
                or linears[-1].end != fused.out_features:
            raise ValueError("quantized projections not fused by engine.models.quant.quantize_model")
        return fused
    fused = torch.cat([lin.weight.detach() for lin in linears], dim=0).contiguous()
    start = 0
    for lin in linears:
        rows = lin.weight.shape[0]
        lin.weight.data = fused[start:start + rows]
        start += rows
    return fused


def _weights_for(model: Any) -> _Weights:
    with _WEIGHTS_LOCK:
        cached = _WEIGHTS.get(model)
        if cached is not None and _still_backs(model, cached):
            return cached
        config = model.config
        inner = model.model
        heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        layers = []
        with torch.no_grad():
            for layer in inner.layers:
                attn, mlp = layer.self_attn, layer.mlp
                layers.append(_Layer(
                    attn_norm=layer.input_layernorm.weight.detach(),
                    qkv=_fuse((attn.q_proj, attn.k_proj, attn.v_proj)),
                    o=_projection(attn.o_proj),
                    mlp_norm=layer.post_attention_layernorm.weight.detach(),
                    gate_up=_fuse((mlp.gate_proj, mlp.up_proj)),
                    down=_projection(mlp.down_proj),
                ))
        embed = inner.embed_tokens
        weights = _Weights(
            embed=embed.table if isinstance(embed, QuantizedEmbedding) else embed.weight.detach(),
            layers=tuple(layers),
            final_norm=inner.norm.weight.detach(),
            lm_head=_projection(model.lm_head),
            eps=float(config.rms_norm_eps),
            heads=heads,
            kv_heads=config.num_key_value_heads,
            head_dim=head_dim,
            intermediate=config.intermediate_size,
            scaling=head_dim ** -0.5,
        )
        _WEIGHTS[model] = weights
        return weights


def _still_backs(model: Any, w: _Weights) -> bool:
    """True while the model's modules still hold the tensors ``w`` was built from (a swapped head or
    reloaded layer means the fused set is stale and must be rebuilt)."""
    inner = model.model
    embed = inner.embed_tokens
    same = [(embed.table if isinstance(embed, QuantizedEmbedding) else embed.weight, w.embed),
            (_projection(model.lm_head), w.lm_head), (inner.norm.weight, w.final_norm)]
    for layer, fused in zip(inner.layers, w.layers):
        qkv, gate_up = fused.qkv, fused.gate_up
        same += [(_source(layer.self_attn.q_proj), qkv), (_source(layer.mlp.gate_proj), gate_up),
                 (_projection(layer.self_attn.o_proj), fused.o), (_projection(layer.mlp.down_proj), fused.down),
                 (layer.input_layernorm.weight, fused.attn_norm)]
    return len(inner.layers) == len(w.layers) and all(_same(a, b) for a, b in same)


def _source(linear: torch.nn.Module) -> Any:
    """What the fast path built a fused projection from: the weight, the quantized module, or its fused module."""
    if isinstance(linear, ProjectionSlice):
        return linear.fused
    return linear if isinstance(linear, QuantizedLinear) else linear.weight


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.data_ptr() == b.data_ptr()
    return a is b


def _embed(table: torch.Tensor | Int8Linear, ids: torch.Tensor) -> torch.Tensor:
    """Embeddings of ``ids`` (n,) → (n, d), from a dense table or a quantized one."""
    return F.embedding(ids, table) if isinstance(table, torch.Tensor) else table.rows(ids)


def _embed_row(table: torch.Tensor | Int8Linear, token_id: int) -> torch.Tensor:
    """One token's embedding (1, d) by slicing: no index tensor to build per decode step."""
    if isinstance(table, torch.Tensor):
        return table[token_id:token_id + 1]
    return table.row(token_id)


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' LlamaRMSNorm, operation for operation (fp32 statistics), so results match bit for bit."""
    xf = x.float()
    variance = xf.pow(2).mean(-1, keepdim=True)
    return weight * (xf * torch.rsqrt(variance + eps)).to(x.dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor) -> torch.Tensor:
    """RoPE: x·cos + rotate_half(x)·sin, with rotate_half's negation folded into ``sin_signed``.

    rotate_half(x) = cat(-x2, x1); cat(x2, x1)·cat(-s1, s2) gives the same products exactly (a sign
    flip is exact), one operation fewer per step.
    """
    half = x.shape[-1] // 2
    return x * cos + torch.cat((x[..., half:], x[..., :half]), dim=-1) * sin_signed


class FastRunner(ModelRunner):
    """Forward passes over a preallocated KV cache (layers, kv_heads, capacity, head_dim) for K and V.

    Same contract as ``ModelRunner``. Positions at or past ``cached_len`` may hold stale values: they
    are never read and are overwritten by the next write, so crop just forgets ids and an interrupted
    forward cannot corrupt the valid prefix.

    ``upcast_prefill`` (default: only on CPUs without a native bf16/fp16 kernel) runs prefill's matrix
    products in fp32 on exactly upcast bf16/fp16 operands.

    ``static=True`` uses a step whose tensor shapes never change (attention over the whole capacity with
    a mask, position given as a tensor): what CUDA graphs need. ``compile=True`` wraps the decode step
    in ``torch.compile`` (``mode="reduce-overhead"`` on CUDA), falling back to eager on any failure;
    ``compile_s`` then reports the time the first compiled step took.
    """

    def __init__(self, model: Any, *, max_positions: int | None = None, static: bool = False,
                 compile: bool = False, initial_capacity: int = INITIAL_CAPACITY,
                 upcast_prefill: bool | None = None) -> None:
        reason = unsupported_reason(model)
        if reason is not None:
            raise ValueError(f"fast path not available: {reason}")
        self._w = _weights_for(model)
        self._dtype = self._w.embed.dtype
        device = model_device(model)
        limit = max_positions or getattr(model.config, "max_position_embeddings", None) or 4096
        self._max_positions = int(limit)
        self._static = static
        self._capacity = 0
        self._k = self._v = self._cos = self._sin = torch.empty(0)
        self._rotary = model.model.rotary_emb
        self._device = device
        self._grow(self._max_positions if static else min(initial_capacity, self._max_positions))
        self.compile_s: float | None = None
        self._step: Callable[..., torch.Tensor] = self._decode_static if static else self._decode_eager
        self._compiled = False
        self._want_compile = compile
        if upcast_prefill is None:  # auto: only where the low-precision kernel is the slow generic one
            upcast_prefill = device.type == "cpu" and not native_gemm(self._dtype)
        self._upcast_prefill = upcast_prefill
        self._quantized = not isinstance(self._w.layers[0].qkv, torch.Tensor) if self._w.layers else False
        super().__init__(model, use_kv_cache=True)
        if static:
            self._pos_t = torch.zeros(1, dtype=torch.long, device=device)  # (1,) position of the step
            self._positions = torch.arange(self._max_positions, device=device)  # (capacity,)
            if compile:
                self._mark_static()

    def _mark_static(self) -> None:
        """Tell dynamo the tensors the step reads live at fixed addresses (as transformers' StaticCache
        does): CUDA graphs then read them in place instead of copying weights and cache in per replay,
        and in-place cache writes do not disable the graph."""
        tensors = [self._k, self._v, self._cos, self._sin, self._positions, self._pos_t, self._step_input,
                   self._w.embed, self._w.final_norm, self._w.lm_head]
        for layer in self._w.layers:
            tensors += [layer.attn_norm, layer.qkv, layer.o, layer.mlp_norm, layer.gate_up, layer.down]
        tensors = [t for t in tensors if isinstance(t, torch.Tensor)]  # quantized modules hold their own
        try:
            for tensor in tensors:
                torch._dynamo.mark_static_address(tensor)
        except Exception as exc:  # noqa: BLE001  (only costs speed)
            log.warning("could not mark static addresses: %s", exc)

    # -- cache -------------------------------------------------------------------------------------
    def _grow(self, capacity: int) -> None:
        """(Re)allocate the cache and RoPE tables for ``capacity`` positions, keeping what is cached."""
        w = self._w
        shape = (len(w.layers), w.kv_heads, capacity, w.head_dim)  # (layers, kv_heads, positions, head_dim)
        k = torch.zeros(shape, dtype=self._dtype, device=self._device)
        v = torch.zeros(shape, dtype=self._dtype, device=self._device)
        if self._capacity:
            k[:, :, :self._capacity] = self._k
            v[:, :, :self._capacity] = self._v
        self._k, self._v = k, v
        with torch.inference_mode():
            positions = torch.arange(capacity, device=self._device)[None]  # (1, capacity)
            probe = torch.empty(1, dtype=self._dtype, device=self._device)
            cos, sin = self._rotary(probe, positions)  # (1, capacity, head_dim), the model's own RoPE
            half = w.head_dim // 2
            self._cos = cos[0].contiguous()
            self._sin = torch.cat((-sin[0, :, :half], sin[0, :, half:]), dim=-1).contiguous()
        self._capacity = capacity

    def _ensure(self, positions: int) -> None:
        if positions > self._max_positions:
            raise ValueError(f"{positions} positions exceed the model's context of {self._max_positions}")
        if positions > self._capacity:
            capacity = self._capacity
            while capacity < positions:
                capacity *= 2
            self._grow(min(capacity, self._max_positions))

    def reset(self) -> None:
        """Forget every cached position (the buffers stay allocated for reuse)."""
        self._ids = []
        self._dirty = False

    def crop(self, n: int) -> None:
        """Keep the first ``n`` positions: O(1), later positions are simply overwritten."""
        del self._ids[max(0, n):]

    def kv_bytes(self) -> tuple[int, int]:
        """(filled, allocated) bytes of the key and value buffers."""
        per_position = 2 * len(self._w.layers) * self._w.kv_heads * self._w.head_dim * self._k.element_size()
        return per_position * len(self._ids), self._k.nbytes + self._v.nbytes

    # -- forward passes --------------------------------------------------------------------------
    @torch.inference_mode()
    def _forward_chunk(self, ids: torch.Tensor, start: int) -> torch.Tensor:
        """Logits (1, vocab) of the last of ``ids`` (n,) placed at positions start..start+n-1."""
        w = self._w
        n = ids.shape[0]
        end = start + n
        heads, kvh, dim = w.heads, w.kv_heads, w.head_dim
        cos = self._cos[start:end, None, :]  # (n, 1, head_dim): broadcast over heads
        sin = self._sin[start:end, None, :]
        x = _embed(w.embed, ids)  # (n, d)
        mask = None
        if start:
            # Query i (at start+i) sees keys 0..start+i.
            mask = torch.ones(n, end, dtype=torch.bool, device=x.device).tril(diagonal=start)  # (n, end)
        linear = self._prefill_linear
        for index, layer in enumerate(w.layers):
            h = _rms_norm(x, layer.attn_norm, w.eps)
            qkv = linear(h, layer.qkv)  # (n, (H + 2KV) * D)
            qk = _rotate(qkv[:, :(heads + kvh) * dim].view(n, heads + kvh, dim), cos, sin)  # (n, H+KV, D)
            self._k[index, :, start:end] = qk[:, heads:].transpose(0, 1)
            self._v[index, :, start:end] = qkv[:, (heads + kvh) * dim:].view(n, kvh, dim).transpose(0, 1)
            q = qk[:, :heads].transpose(0, 1)[None]  # (1, H, n, D)
            attn = F.scaled_dot_product_attention(
                q, self._k[index, :, :end][None], self._v[index, :, :end][None], attn_mask=mask,
                is_causal=mask is None, scale=w.scaling, enable_gqa=True)  # (1, H, n, D)
            x = x + linear(attn[0].transpose(0, 1).reshape(n, heads * dim), layer.o)
            h = _rms_norm(x, layer.mlp_norm, w.eps)
            gate_up = linear(h, layer.gate_up)  # (n, 2I)
            x = x + linear(F.silu(gate_up[:, :w.intermediate]) * gate_up[:, w.intermediate:], layer.down)
        h = _rms_norm(x[-1:], w.final_norm, w.eps)
        return _project(h, w.lm_head)  # (1, vocab)

    def _prefill_linear(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """A prefill matrix product; on CPUs without a native bf16/fp16 kernel it runs in fp32 on exactly
        upcast operands and rounds the result once, which is what a bf16 GEMM with fp32 accumulation
        computes, only in another summation order (so logits may differ by a rounding step). Decode
        (one row) keeps the model's precision: there the upcast would cost more than it saves."""
        rows = x.shape[0]
        if not isinstance(weight, torch.Tensor):  # quantized: dense GEMM on a dequantized copy for many rows
            if rows <= weight.kernel_rows or not weight.can_dequantize:
                return weight(x)
            weight = weight.dequantize()
        if self._upcast_prefill and rows > 1:
            return F.linear(x.float(), weight.float()).to(x.dtype)
        return F.linear(x, weight)

    def _decode_eager(self, token_id: int, pos: int) -> torch.Tensor:
        """One token at ``pos``: logits (1, vocab). Attention reads only the filled cache prefix."""
        w = self._w
        heads, kvh, dim = w.heads, w.kv_heads, w.head_dim
        cos, sin = self._cos[pos], self._sin[pos]  # (head_dim,)
        x = _embed_row(w.embed, token_id)  # (1, d)
        for index, layer in enumerate(w.layers):
            h = _rms_norm(x, layer.attn_norm, w.eps)
            qkv = _project(h, layer.qkv)  # (1, (H + 2KV) * D)
            qk = _rotate(qkv[0, :(heads + kvh) * dim].view(heads + kvh, dim), cos, sin)  # (H+KV, D)
            k_cache, v_cache = self._k[index], self._v[index]  # (KV, capacity, D)
            k_cache[:, pos] = qk[heads:]
            v_cache[:, pos] = qkv[0, (heads + kvh) * dim:].view(kvh, dim)
            # The same SDPA call transformers makes for one query (GQA in the kernel, no mask): its bf16
            # rounding is then identical, so greedy text matches generate()'s; measured on a 2-core AVX2
            # CPU it is also faster than bmm + softmax + bmm (bf16 bmm is emulated there).
            attn = F.scaled_dot_product_attention(
                qk[:heads].view(1, heads, 1, dim), k_cache[None, :, :pos + 1], v_cache[None, :, :pos + 1],
                scale=w.scaling, enable_gqa=True)  # (1, H, 1, D)
            x = x + _project(attn.view(1, heads * dim), layer.o)
            h = _rms_norm(x, layer.mlp_norm, w.eps)
            gate_up = _project(h, layer.gate_up)  # (1, 2I)
            x = x + _project(F.silu(gate_up[:, :w.intermediate]) * gate_up[:, w.intermediate:], layer.down)
        return _project(_rms_norm(x, w.final_norm, w.eps), w.lm_head)  # (1, vocab)

    def _decode_static(self, token: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """The decode step with fixed shapes: ``token`` and ``pos`` are (1,) tensors, attention spans
        the whole capacity with positions after ``pos`` masked. Capturable as one CUDA graph."""
        w = self._w
        heads, kvh, dim = w.heads, w.kv_heads, w.head_dim
        groups = heads // kvh
        cos, sin = self._cos.index_select(0, pos), self._sin.index_select(0, pos)  # (1, head_dim)
        visible = self._positions <= pos  # (capacity,)
        x = _embed(w.embed, token)  # (1, d)
        for index, layer in enumerate(w.layers):
            h = _rms_norm(x, layer.attn_norm, w.eps)
            qkv = _project(h, layer.qkv)
            qk = _rotate(qkv[:, :(heads + kvh) * dim].view(heads + kvh, dim), cos, sin)  # (H+KV, D)
            k_cache, v_cache = self._k[index], self._v[index]
            k_cache.index_copy_(1, pos, qk[heads:, None, :])
            v_cache.index_copy_(1, pos, qkv[:, (heads + kvh) * dim:].view(kvh, 1, dim))
            scores = torch.matmul(qk[:heads].view(kvh, groups, dim), k_cache.transpose(1, 2)) * w.scaling
            scores = scores.masked_fill(~visible, float("-inf"))  # (KV, G, capacity)
            probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(self._dtype)
            attn = torch.matmul(probs, v_cache)  # (KV, G, D)
            x = x + _project(attn.view(1, heads * dim), layer.o)
            h = _rms_norm(x, layer.mlp_norm, w.eps)
            gate_up = _project(h, layer.gate_up)
            x = x + _project(F.silu(gate_up[:, :w.intermediate]) * gate_up[:, w.intermediate:], layer.down)
        return _project(_rms_norm(x, w.final_norm, w.eps), w.lm_head)

    def _maybe_compile(self) -> None:
        """Compile the step once, on first use; any failure leaves the eager step in place."""
        self._want_compile = False
        mode = "reduce-overhead" if self._device.type == "cuda" else None
        try:
            self._step = torch.compile(self._step, mode=mode, dynamic=not self._static)
            self._compiled = True
        except Exception as exc:  # noqa: BLE001  (compilation is an optimisation, never a failure)
            log.warning("torch.compile unavailable, decoding eagerly: %s", exc)

    # -- the ModelRunner interface ------------------------------------------------------------------
    def prefill(self, ids: Sequence[int], cancel: threading.Event | None = None,
                chunk: int = 256) -> Iterator[tuple[int, torch.Tensor | None]]:
        """Append ``ids`` ``chunk`` tokens per forward; yields ``(done, logits or None)`` like ModelRunner."""
        total = len(ids)
        if total == 0:
            raise ValueError("prefill needs at least one token")
        if self._quantized:
            # Each chunk dequantizes every projection once for its matrix products, so fewer, larger
            # chunks cost fewer dequantizations (measured: two 256-token chunks of int4 spent more time
            # dequantizing than multiplying). Stop is then checked every QUANTIZED_PREFILL_CHUNK tokens.
            chunk = max(chunk, QUANTIZED_PREFILL_CHUNK)
        self._ensure(len(self._ids) + total)
        ids_t = torch.tensor(list(ids), dtype=torch.long, device=self._device)  # (total,)
        done = 0
        while done < total:
            if cancel is not None and cancel.is_set():
                return
            end = min(total, done + chunk)
            logits = self._forward_chunk(ids_t[done:end], len(self._ids))
            self._ids.extend(ids[done:end])
            done = end
            yield done, logits if done == total else None

    def decode(self, token_id: int) -> torch.Tensor:
        """Append one token and return the next position's logits (1, vocab)."""
        pos = len(self._ids)
        self._ensure(pos + 1)
        if self._want_compile:
            self._maybe_compile()
        with torch.inference_mode():
            if self._static:
                self._step_input.fill_(token_id)
                self._pos_t.fill_(pos)
                args: tuple[Any, ...] = (self._step_input[0], self._pos_t)
            else:
                args = (token_id, pos)
            if self._compiled and self.compile_s is None:
                t0 = time.perf_counter()
                logits = self._run_step(args)
                self.sync()
                self.compile_s = time.perf_counter() - t0
            else:
                logits = self._run_step(args)
        self._ids.append(token_id)
        return logits

    def _run_step(self, args: tuple[Any, ...]) -> torch.Tensor:
        try:
            logits = self._step(*args)
        except Exception as exc:  # noqa: BLE001
            if not self._compiled:
                raise
            log.warning("compiled decode step failed, decoding eagerly from now on: %s", exc)
            self._compiled = False
            self._step = self._decode_static if self._static else self._decode_eager
            logits = self._step(*args)
        if self._compiled and self._device.type == "cuda":
            logits = logits.clone()  # a CUDA-graph output is overwritten by the next replay
        return logits


def make_fast_runner(loaded: Any, use_kv_cache: bool = True, **options: Any) -> ModelRunner:
    """A ``FastRunner`` when ``loaded`` supports it and a cache is wanted, else the plain runner.

    ``MIAOHUI_FASTPATH=0`` in the environment forces the plain runner (to compare, or to rule it out).
    """
    model = loaded.model
    wanted = use_kv_cache and os.environ.get("MIAOHUI_FASTPATH", "1") != "0"
    if wanted and unsupported_reason(model) is None:
        try:
            return FastRunner(model, **options)
        except torch.OutOfMemoryError:
            raise  # the session turns this into its out-of-memory advice
        except Exception as exc:  # noqa: BLE001  (an optimisation must never cost the user a reply)
            log.warning("fast path unavailable, using the plain runner: %s", exc)
    return ModelRunner(model, use_kv_cache=use_kv_cache)
