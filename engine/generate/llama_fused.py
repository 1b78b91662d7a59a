"""The model side of the fast path: which Llama-family models qualify, their weights fused once, the layer math.

Owns ``unsupported_reason(model)`` (why a model cannot take the fast path, or None), ``weights_for(model)``
(the weights as the fast path reads them: q|k|v and gate|up fused into one projection each, built once per
model object and shared by every runner of it, the model's own parameters made views of the fused tensors
so no memory is duplicated), the per-operation math a decoder layer is made of (``rms_norm``, ``rotate`` for
RoPE, ``project`` through a dense or quantized weight, ``embed`` / ``embed_row``), each written to match
transformers' Llama operation for operation, and the eager decode step's faster pieces that are not exact
(``attend_one`` for one query's attention, ``rms_norm_one_kernel``) with ``step_plan``, which says which of
them a model's decode step uses. Weight-only int8/int4 models (``engine/models/quant.py``) arrive already fused
by ``quantize_model`` and are used as they are.

Does not own the KV cache, the per-conversation state or the forward passes that put these pieces together
(``engine.generate.fastpath.FastRunner``), nor the choice between the fast and the plain runner
(``engine.generate.runners.make_runner``).
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F

from engine.models.quant import Int8Linear, ProjectionSlice, QuantizedEmbedding, QuantizedLinear

# Architectures whose decoder is exactly Llama's (pre-norm, RoPE, GQA, gated SiLU MLP, no biases).
SUPPORTED_MODEL_TYPES = ("llama", "mistral")
# RoPE variants whose cos/sin depend on the position only, so a table computed once is exact; "dynamic"
# and "longrope" change their frequencies with the sequence length.
STATIC_ROPE_TYPES = ("default", "linear", "llama3", "yarn")


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


def project(x: torch.Tensor, weight: Projection) -> torch.Tensor:
    """x (n, in) → (n, out) through a dense weight or a quantized module's kernel. Callers pass 2-D
    activations in the model's dtype and few rows (decode), so the module's own checks are skipped:
    they cost ~15 µs a call, measured, ~5 ms a token over 30 layers."""
    return F.linear(x, weight) if isinstance(weight, torch.Tensor) else weight.kernel(x)


@dataclass(frozen=True)
class FusedLayer:
    """One decoder layer's weights as the fast path uses them."""

    attn_norm: torch.Tensor  # (d,)
    qkv: Projection  # (H*D + 2*KV*D, d): rows q | k | v
    o: Projection  # (d, H*D)
    mlp_norm: torch.Tensor  # (d,)
    gate_up: Projection  # (2*I, d): rows gate | up
    down: Projection  # (d, I)


@dataclass(frozen=True)
class FusedWeights:
    """Everything the forward reads, built once per model (shared by every runner of that model)."""

    embed: torch.Tensor | Int8Linear  # (V, d); quantized models read rows of an int8 table
    layers: tuple[FusedLayer, ...]
    final_norm: torch.Tensor  # (d,)
    lm_head: Projection  # (V, d); the embedding itself when tied
    eps: float
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    scaling: float


# One fused set per model object: a second runner (a new conversation) must not fuse again.
_WEIGHTS: "weakref.WeakKeyDictionary[Any, FusedWeights]" = weakref.WeakKeyDictionary()
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


def weights_for(model: Any) -> FusedWeights:
    """The fused weights of ``model``: built on first use, then shared until the model's modules change."""
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
                layers.append(FusedLayer(
                    attn_norm=layer.input_layernorm.weight.detach(),
                    qkv=_fuse((attn.q_proj, attn.k_proj, attn.v_proj)),
                    o=_projection(attn.o_proj),
                    mlp_norm=layer.post_attention_layernorm.weight.detach(),
                    gate_up=_fuse((mlp.gate_proj, mlp.up_proj)),
                    down=_projection(mlp.down_proj),
                ))
        embedding = inner.embed_tokens
        weights = FusedWeights(
            embed=embedding.table if isinstance(embedding, QuantizedEmbedding) else embedding.weight.detach(),
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


def _still_backs(model: Any, w: FusedWeights) -> bool:
    """True while the model's modules still hold the tensors ``w`` was built from (a swapped head or
    reloaded layer means the fused set is stale and must be rebuilt)."""
    inner = model.model
    embedding = inner.embed_tokens
    same = [(embedding.table if isinstance(embedding, QuantizedEmbedding) else embedding.weight, w.embed),
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


# One decoder layer as the eager decode step calls it: attn_norm, qkv, o, mlp_norm, gate_up, down.
StepLayer = tuple[torch.Tensor, Callable[[torch.Tensor], torch.Tensor], Callable[[torch.Tensor], torch.Tensor],
                  torch.Tensor, Callable[[torch.Tensor], torch.Tensor], Callable[[torch.Tensor], torch.Tensor]]


@dataclass(frozen=True)
class StepPlan:
    """The eager decode step's weights as plain functions, built once per runner: per call, a closure over a
    tensor costs less than ``project``'s type check and a quantized module's attribute lookups.

    Dense weights: transformers' exact operations (``rms_norm``, ``F.linear``), so logits stay bit-identical.
    Quantized weights: ``rms_norm_one_kernel`` with padded norm weights, and each module's ``bound_kernel``."""

    layers: tuple[StepLayer, ...]
    final_norm: torch.Tensor
    head: Callable[[torch.Tensor], torch.Tensor]
    norm: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (x, the norm weight as in this plan) -> x normed


def _call(weight: Projection) -> Callable[[torch.Tensor], torch.Tensor]:
    """``project`` with its weight bound: the same dispatch, decided once instead of per call."""
    if isinstance(weight, torch.Tensor):
        return lambda x: F.linear(x, weight)
    return weight.bound_kernel()


def step_plan(w: FusedWeights, quantized: bool) -> StepPlan:
    """The decode step's plan for ``w`` (``quantized``: the projections are int8/int4 modules)."""
    eps = w.eps
    if quantized:
        def norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
            return rms_norm_one_kernel(x, weight, eps)
        norm_weight = padded_norm_weight
    else:
        def norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
            return rms_norm(x, weight, eps)

        def norm_weight(weight: torch.Tensor) -> torch.Tensor:
            return weight
    layers = tuple((norm_weight(layer.attn_norm), _call(layer.qkv), _call(layer.o), norm_weight(layer.mlp_norm),
                    _call(layer.gate_up), _call(layer.down)) for layer in w.layers)
    return StepPlan(layers, norm_weight(w.final_norm), _call(w.lm_head), norm)


def embed(table: torch.Tensor | Int8Linear, ids: torch.Tensor) -> torch.Tensor:
    """Embeddings of ``ids`` (n,) → (n, d), from a dense table or a quantized one."""
    return F.embedding(ids, table) if isinstance(table, torch.Tensor) else table.rows(ids)


def embed_row(table: torch.Tensor | Int8Linear, token_id: int) -> torch.Tensor:
    """One token's embedding (1, d) by slicing: no index tensor to build per decode step."""
    if isinstance(table, torch.Tensor):
        return table[token_id:token_id + 1]
    return table.row(token_id)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' LlamaRMSNorm, operation for operation (fp32 statistics), so results match bit for bit."""
    xf = x.float()
    variance = xf.pow(2).mean(-1, keepdim=True)
    return weight * (xf * torch.rsqrt(variance + eps)).to(x.dtype)


def padded_norm_weight(weight: torch.Tensor) -> torch.Tensor:
    """An RMSNorm weight (d,) as ``rms_norm_one_kernel`` takes it: (2d,), the weight then zeros."""
    return torch.cat((weight, torch.zeros_like(weight)))


def rms_norm_one_kernel(x: torch.Tensor, padded_weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm through torch's fused LayerNorm kernel: 3 operations instead of ``rms_norm``'s 8 (~7 µs
    instead of ~15 for one row of 576, measured; 61 calls per token on the default model).

    LayerNorm over [x, -x] sees mean 0 and variance mean(x²), so the first half of its output is
    x · rsqrt(mean(x²) + eps) · weight. It computes in fp32 and rounds once where transformers rounds twice
    (before and after the weight): within one bf16 step of ``rms_norm``, not bit-identical, so only the
    quantized decode step, which has no exact reference, uses it. torch's own ``rms_norm`` is a composite of
    the same 8 operations on a CPU (torch 2.13)."""
    d = x.shape[-1]
    return F.layer_norm(torch.cat((x, x.neg()), dim=-1), (2 * d,), padded_weight, None, eps)[..., :d]


def attend_one(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scaling: float) -> torch.Tensor:
    """One query's grouped-query attention over the filled cache: q (H, D), k and v (KV, n, D) → (1, H·D).

    Computed in fp32 from the exactly upcast bf16 cache (scores, softmax and the weighted sum), rounded
    once. Why not ``scaled_dot_product_attention``, which prefill keeps: its CPU flash kernel costs ~50 µs
    for a single query even over a few dozen positions and grows to ~2.2 ms at 4,096 (9 heads, 3 KV heads,
    head dim 64; ~2.7 ms per token at ~100 positions over 30 layers), where this costs ~45 µs at 32
    positions, ~140 µs at 1,024 and ~400-650 µs at 4,096 (measured on a 2-core AMD EPYC with AVX-512, and
    with oneDNN and ATen limited to AVX2; a bf16 batched product on the cache as it is was faster only past
    ~8,000 positions, and only with native bf16). Its logits differ from SDPA's by bf16 rounding, so the
    dense path keeps SDPA while it promises transformers' exact numbers (``engine/generate/fastpath.py``).
    """
    kv_heads, _, dim = k.shape
    queries = q.view(kv_heads, -1, dim).float()  # (KV, G, D): the G query heads that share a KV head
    scores = torch.bmm(queries, k.float().transpose(1, 2))  # (KV, G, n)
    probs = torch.softmax(scores.mul_(scaling), dim=-1)
    return torch.bmm(probs, v.float()).to(q.dtype).view(1, -1)  # (1, H·D)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor) -> torch.Tensor:
    """RoPE: x·cos + rotate_half(x)·sin, with rotate_half's negation folded into ``sin_signed``.

    rotate_half(x) = cat(-x2, x1); cat(x2, x1)·cat(-s1, s2) gives the same products exactly (a sign
    flip is exact), one operation fewer per step.
    """
    # roll by half a head = cat(x2, x1): the same values in one operation instead of three
    return x * cos + x.roll(x.shape[-1] // 2, dims=-1) * sin_signed
