"""The model side of the fast path: the weights of a qualifying model fused once, and the layer math.

Owns ``weights_for(model)`` (the weights as the fast path reads them: q|k|v and gate|up fused into one
projection each, with their biases where the checkpoint has them, Qwen3's and Gemma 3's q/k norm weights
stacked per head, Gemma 3's norm weights as the 1 + w its norm multiplies by; built once per model object and
shared by every runner of it, the model's own parameters made views of the fused tensors so no memory is
duplicated), the per-operation math a decoder layer is made of (``rms_norm``, Gemma's ``gemma_rms_norm``,
``rotate`` for RoPE, ``project`` through a dense or quantized weight and its bias, ``embed`` / ``embed_row``),
each written to match transformers' operation for operation, and the eager decode step's faster pieces that
are not exact (``attend_one`` for one query's attention, ``rms_norm_one_kernel``) with ``step_plan``, which
says which of them a model's decode step uses (a quantized plan takes the native row operations of
``engine.executor.native_step`` where they are loaded). Weight-only int8/int4 models (``engine/quant/quant.py``)
arrive already fused by ``quantize_model`` and are used as they are.

Which models qualify, and why one does not, is ``engine.executor.families`` (``refusal``; ``unsupported_reason``
is imported here too, where the bench has always looked for it). Does not own the KV cache, the
per-conversation state or the forward passes that put these pieces together
(``engine.executor.fastpath.FastRunner``), nor the choice between the fast and the plain runner
(``engine.executor.runners.make_runner``).
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F

from engine.executor import native_step
from engine.executor.families import family_of, refusal, unsupported_reason  # noqa: F401  (re-exported)
from engine.executor.row_forms import one_row, packed_affordable
from engine.native.library import decode_ops
from engine.quant.quant import Int8Linear, ProjectionSlice, QuantizedEmbedding, QuantizedLinear

# A projection: a dense (out, in) weight, or a module (quantized) called on (n, in) activations.
Projection = Any


def project(x: torch.Tensor, weight: Projection, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x (n, in) → (n, out) through a dense weight or a quantized module's kernel, plus ``bias`` when
    given. Callers pass 2-D activations in the model's dtype and few rows (decode), so the module's own
    checks are skipped: they cost ~15 µs a call, measured, ~5 ms a token over 30 layers."""
    if isinstance(weight, torch.Tensor):
        return F.linear(x, weight, bias)
    out = weight.kernel(x)
    return out if bias is None else out.add_(bias)  # a fresh tensor; a quantized module's fp32 bias rounds once


@dataclass(frozen=True)
class FusedLayer:
    """One decoder layer's weights as the fast path uses them."""

    attn_norm: torch.Tensor  # (d,)
    qkv: Projection  # (H*D + 2*KV*D, d): rows q | k | v
    o: Projection  # (d, H*D)
    mlp_norm: torch.Tensor  # (d,)
    gate_up: Projection  # (2*I, d): rows gate | up
    down: Projection  # (d, I)
    # Biases (None where the checkpoint has none): q|k|v fused like its weight (Qwen2); o, gate|up, down
    # only with Llama's attention_bias / mlp_bias. A quantized projection's is its module's ``bias``.
    qkv_bias: torch.Tensor | None = None  # (H*D + 2*KV*D,)
    o_bias: torch.Tensor | None = None  # (d,)
    gate_up_bias: torch.Tensor | None = None  # (2*I,)
    down_bias: torch.Tensor | None = None  # (d,)
    # Per-head RMSNorm weights of q and k before RoPE (Qwen3): rows 0..H-1 q_norm's, then KV rows k_norm's,
    # so one norm call covers the rotated heads of q|k.
    qk_norm: torch.Tensor | None = None  # (H + KV, D)
    # Gemma 3: norms of the attention output and of the MLP output before each residual add (then every norm
    # weight here is 1 + w in fp32, see ``gemma_rms_norm``), this layer's sliding window in positions (None:
    # global attention), and which of the runner's RoPE tables it reads (``FusedWeights.rope_kinds``).
    post_attn_norm: torch.Tensor | None = None  # (d,)
    post_mlp_norm: torch.Tensor | None = None  # (d,)
    window: int | None = None
    rope: int = 0


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
    # The layer types whose RoPE tables the runner computes, ``rotary_emb(x, positions, kind)``; (None,): the
    # model has one rotary embedding called without a kind.
    rope_kinds: tuple[str | None, ...] = (None,)
    gemma: bool = False  # (1 + w) norms in fp32, post norms, GeGLU (tanh-GELU), scaled embeddings
    embed_scale: torch.Tensor | None = None  # () in the model's dtype: sqrt(d) as transformers rounds it
    # Gemma 2: cap · tanh(x / cap) of the attention scores (before the mask) and of the final logits.
    attn_softcap: float | None = None
    logit_softcap: float | None = None

    def cap_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """The final logits as the model returns them: soft-capped where the family caps them."""
        cap = self.logit_softcap
        return logits if cap is None else torch.tanh(logits / cap) * cap

    def norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """This family's RMSNorm of ``x`` with a weight as stored here."""
        return gemma_rms_norm(x, weight, self.eps) if self.gemma else rms_norm(x, weight, self.eps)

    def act(self, gate: torch.Tensor) -> torch.Tensor:
        """The MLP's gate activation: SiLU, or Gemma's tanh-approximated GELU."""
        return F.gelu(gate, approximate="tanh") if self.gemma else F.silu(gate)


# One fused set per model object: a second runner (a new conversation) must not fuse again.
_WEIGHTS: "weakref.WeakKeyDictionary[Any, FusedWeights]" = weakref.WeakKeyDictionary()
_WEIGHTS_LOCK = threading.Lock()


def _projection(linear: torch.nn.Module) -> tuple[Projection, torch.Tensor | None]:
    """(weight or quantized module, bias or None) of one linear."""
    bias = linear.bias
    if isinstance(linear, QuantizedLinear):
        return linear, bias
    return linear.weight.detach(), None if bias is None else bias.detach()


def _fuse(linears: Sequence[torch.nn.Module]) -> tuple[Projection, torch.Tensor | None]:
    """Concatenate the linears' weights (and biases) by rows and make each parameter a view of its slice.

    The model keeps working unchanged (same values, same Parameter objects) and the fused copy costs
    no extra memory once the old separate tensors are released. A linear without a bias among biased
    ones contributes zeros (adding 0 is exact). Quantized linears are kept apart, already fused with
    their bias by ``quantize_model``.
    """
    if any(isinstance(lin, QuantizedLinear) for lin in linears):
        fused = linears[0].fused if isinstance(linears[0], ProjectionSlice) else None
        if fused is None or not all(isinstance(lin, ProjectionSlice) and lin.fused is fused for lin in linears) \
                or linears[-1].end != fused.out_features:
            raise ValueError("quantized projections not fused by engine.quant.quant.quantize_model")
        return fused, fused.bias
    weight = torch.cat([lin.weight.detach() for lin in linears], dim=0).contiguous()
    biased = any(lin.bias is not None for lin in linears)
    bias = torch.cat([lin.bias.detach() if lin.bias is not None else lin.weight.new_zeros(lin.weight.shape[0])
                      for lin in linears]) if biased else None
    start = 0
    for lin in linears:
        rows = lin.weight.shape[0]
        lin.weight.data = weight[start:start + rows]
        if lin.bias is not None:
            lin.bias.data = bias[start:start + rows]  # type: ignore[index]
        start += rows
    return weight, bias


def _qk_norm(attn: torch.nn.Module, heads: int, kv_heads: int, gemma: bool) -> torch.Tensor:
    """q_norm's weight repeated for the H query heads, then k_norm's for the KV heads: (H + KV, D)."""
    q, k = _norm_weight(attn.q_norm, gemma), _norm_weight(attn.k_norm, gemma)
    return torch.cat((q.expand(heads, -1), k.expand(kv_heads, -1))).contiguous()


def _norm_weight(norm: torch.nn.Module, gemma: bool) -> torch.Tensor:
    """A norm's weight as ``FusedWeights.norm`` takes it: Gemma's 1 + w in fp32 (what its forward computes
    every call, here once), else the weight itself (no copy)."""
    return 1.0 + norm.weight.detach().float() if gemma else norm.weight.detach()


def weights_for(model: Any) -> FusedWeights:
    """The fused weights of ``model``: built on first use, then shared until the model's modules change."""
    with _WEIGHTS_LOCK:
        cached = _WEIGHTS.get(model)
        if cached is not None and _still_backs(model, cached):
            return cached
        config = model.config
        inner = model.model
        heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        family = family_of(model)
        qk_norm = family is not None and family.qk_norm
        gemma = family is not None and family.gemma
        fused_checkpoint = family is not None and family.fused_checkpoint
        layer_types = list(getattr(config, "layer_types", None) or []) if gemma else []
        layer_ropes = family is not None and family.layer_ropes
        rope_kinds: tuple[str | None, ...] = tuple(sorted(set(layer_types))) if layer_ropes else (None,)
        # Phi-3 and Mistral with a sliding_window slide every layer (transformers' mask does); Gemma by layer type.
        every_window = int(config.sliding_window) if family is not None and family.window_every_layer \
            and getattr(config, "sliding_window", None) else None
        layers = []
        with torch.no_grad():
            for index, layer in enumerate(inner.layers):
                attn, mlp = layer.self_attn, layer.mlp
                if fused_checkpoint:  # Phi-3: already q|k|v and gate|up in the checkpoint, in this row order
                    qkv, qkv_bias = _projection(attn.qkv_proj)
                    gate_up, gate_up_bias = _projection(mlp.gate_up_proj)
                else:
                    qkv, qkv_bias = _fuse((attn.q_proj, attn.k_proj, attn.v_proj))
                    gate_up, gate_up_bias = _fuse((mlp.gate_proj, mlp.up_proj))
                o, o_bias = _projection(attn.o_proj)
                down, down_bias = _projection(mlp.down_proj)
                kind = layer_types[index] if gemma else None
                layers.append(FusedLayer(
                    attn_norm=_norm_weight(layer.input_layernorm, gemma), qkv=qkv, o=o,
                    mlp_norm=_norm_weight(layer.pre_feedforward_layernorm if gemma else layer.post_attention_layernorm,
                                          gemma),
                    gate_up=gate_up, down=down,
                    qkv_bias=qkv_bias, o_bias=o_bias, gate_up_bias=gate_up_bias, down_bias=down_bias,
                    qk_norm=_qk_norm(attn, heads, kv_heads, gemma) if qk_norm else None,
                    post_attn_norm=_norm_weight(layer.post_attention_layernorm, gemma) if gemma else None,
                    post_mlp_norm=_norm_weight(layer.post_feedforward_layernorm, gemma) if gemma else None,
                    window=int(config.sliding_window) if kind == "sliding_attention" else every_window,
                    rope=rope_kinds.index(kind) if layer_ropes else 0,
                ))
        embedding = inner.embed_tokens
        table = embedding.table if isinstance(embedding, QuantizedEmbedding) else embedding.weight.detach()
        weights = FusedWeights(
            embed=table,
            layers=tuple(layers),
            final_norm=_norm_weight(inner.norm, gemma),
            lm_head=_projection(model.lm_head)[0],
            eps=float(config.rms_norm_eps),
            heads=heads,
            kv_heads=kv_heads,
            head_dim=head_dim,
            intermediate=config.intermediate_size,
            scaling=(config.query_pre_attn_scalar if gemma else head_dim) ** -0.5,
            rope_kinds=rope_kinds,
            gemma=gemma,
            embed_scale=embedding.embed_scale.to(table.dtype) if gemma else None,
            attn_softcap=_cap(config, "attn_logit_softcapping") if family is not None and family.softcap else None,
            logit_softcap=_cap(config, "final_logit_softcapping") if family is not None and family.softcap else None,
        )
        _WEIGHTS[model] = weights
        return weights


def _cap(config: Any, name: str) -> float | None:
    value = getattr(config, name, None)
    return float(value) if value else None


def _still_backs(model: Any, w: FusedWeights) -> bool:
    """True while the model's modules still hold the tensors ``w`` was built from (a swapped head or
    reloaded layer means the fused set is stale and must be rebuilt)."""
    inner = model.model
    embedding = inner.embed_tokens
    same = [(embedding.table if isinstance(embedding, QuantizedEmbedding) else embedding.weight, w.embed),
            (_projection(model.lm_head)[0], w.lm_head)]
    if not w.gemma:  # Gemma's norm weights are 1 + w, computed: there is no tensor of the model's to compare
        same.append((inner.norm.weight, w.final_norm))
    for layer, fused in zip(inner.layers, w.layers):
        qkv, gate_up = fused.qkv, fused.gate_up
        attn, mlp = layer.self_attn, layer.mlp
        q_source = _projection(attn.qkv_proj)[0] if hasattr(attn, "qkv_proj") else _source(attn.q_proj)
        gate_source = _projection(mlp.gate_up_proj)[0] if hasattr(mlp, "gate_up_proj") else _source(mlp.gate_proj)
        same += [(q_source, qkv), (gate_source, gate_up),
                 (_projection(layer.self_attn.o_proj)[0], fused.o), (_projection(layer.mlp.down_proj)[0], fused.down)]
        if not w.gemma:
            same.append((layer.input_layernorm.weight, fused.attn_norm))
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


# One decoder layer as the eager decode step calls it: attn_norm, qkv, o, mlp_norm, gate_up, down (each
# projection with its bias bound in), qk_norm, post_attn_norm, post_mlp_norm (each or None), window, rope.
StepLayer = tuple[torch.Tensor, Callable[[torch.Tensor], torch.Tensor], Callable[[torch.Tensor], torch.Tensor],
                  torch.Tensor, Callable[[torch.Tensor], torch.Tensor], Callable[[torch.Tensor], torch.Tensor],
                  torch.Tensor | None, torch.Tensor | None, torch.Tensor | None, int | None, int]


@dataclass(frozen=True)
class StepPlan:
    """The eager decode step's weights as plain functions, built once per runner: per call, a closure over a
    tensor costs less than ``project``'s type check and a quantized module's attribute lookups.

    Dense weights: transformers' exact operations (``rms_norm``, ``F.linear`` or a form probed to its bits), so logits stay bit-identical.
    Quantized weights: each module's ``bound_kernel`` with the native row operations where they are loaded (norms and
    q/k norms, the MLP's activation: the very functions of ``engine.executor.native_step``'s one-call step), else
    ``rms_norm_one_kernel`` with padded norm weights and the exact q/k norm."""

    layers: tuple[StepLayer, ...]
    final_norm: torch.Tensor
    head: Callable[[torch.Tensor], torch.Tensor]
    norm: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (x, the norm weight as in this plan) -> x normed
    qk_norm: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (q|k heads (..., H+KV, D), per-head weights)
    mlp: Callable[[torch.Tensor], torch.Tensor]  # gate|up (n, 2I) -> act(gate) * up (n, I)
    native: bool = False  # the quantized plan of engine.executor.native_step: its row operations, in C++


def _call(weight: Projection, bias: torch.Tensor | None = None, packed_ok: bool = False) -> Callable[..., Any]:
    """``project`` with weight and bias bound, decided once; a dense row in its measured form (``row_forms``)."""
    if isinstance(weight, torch.Tensor):
        return one_row(weight, bias, packed_ok)
    kernel = weight.bound_kernel()
    if bias is None:
        return kernel
    return lambda x: kernel(x).add_(bias)  # the kernel's output is a fresh tensor: add in place


def step_plan(w: FusedWeights, quantized: bool) -> StepPlan:
    """The decode step's plan for ``w`` (``quantized``: the projections are int8/int4 modules)."""
    eps, intermediate, act = w.eps, w.intermediate, w.act
    qk_norm: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = w.norm
    native = quantized and decode_ops() and (not w.gemma or native_step.has_gemma_ops()) \
        and w.final_norm.device.type == "cpu" and w.final_norm.dtype in (torch.bfloat16, torch.float32)

    def mlp(gate_up: torch.Tensor) -> torch.Tensor:
        return act(gate_up[:, :intermediate]) * gate_up[:, intermediate:]
    if native:  # Gemma's too: the C++ norm takes its fp32 (1 + w) weight, GeGLU its own op
        norm, mlp = native_step.plan_ops(eps, intermediate, gelu=w.gemma)
        norm_weight, qk_norm = (lambda weight: weight), norm
    elif w.gemma:  # Gemma's (1 + w) fp32 norm weights have no one-kernel form in torch
        norm, norm_weight = w.norm, (lambda weight: weight)
    elif quantized:
        def norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
            return rms_norm_one_kernel(x, weight, eps)
        norm_weight = padded_norm_weight
    else:
        def norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
            return rms_norm(x, weight, eps)

        def norm_weight(weight: torch.Tensor) -> torch.Tensor:
            return weight
    ok = packed_affordable([w.lm_head, *(t for ly in w.layers for t in (ly.qkv, ly.o, ly.gate_up, ly.down))])
    layers = tuple((norm_weight(layer.attn_norm), _call(layer.qkv, layer.qkv_bias, ok),
                    _call(layer.o, layer.o_bias, ok), norm_weight(layer.mlp_norm),
                    _call(layer.gate_up, layer.gate_up_bias, ok), _call(layer.down, layer.down_bias, ok),
                    layer.qk_norm, layer.post_attn_norm, layer.post_mlp_norm, layer.window, layer.rope)
                   for layer in w.layers)
    return StepPlan(layers, norm_weight(w.final_norm), _call(w.lm_head, None, ok), norm, qk_norm, mlp, native)


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


def gemma_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' Gemma3RMSNorm, operation for operation, with ``weight`` = 1 + w in fp32 (``_norm_weight``):
    normalised and multiplied in fp32, rounded once (where Llama's rounds before the weight)."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight).to(x.dtype)


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


def attend_one(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scaling: float,
               softcap: float | None = None) -> torch.Tensor:
    """One query's grouped-query attention over the filled cache: q (H, D), k and v (KV, n, D) → (1, H·D),
    the scaled scores soft-capped (cap · tanh(s / cap), Gemma 2's, in fp32: the quantized step's) where ``softcap``.

    Computed in fp32 from the exactly upcast bf16 cache (scores, softmax and the weighted sum), rounded
    once. Why not ``scaled_dot_product_attention``, which prefill keeps: its CPU flash kernel costs ~50 µs
    for a single query even over a few dozen positions and grows to ~2.2 ms at 4,096 (9 heads, 3 KV heads,
    head dim 64; ~2.7 ms per token at ~100 positions over 30 layers), where this costs ~45 µs at 32
    positions, ~140 µs at 1,024 and ~400-650 µs at 4,096 (measured on a 2-core AMD EPYC with AVX-512, and
    with oneDNN and ATen limited to AVX2; a bf16 batched product on the cache as it is was faster only past
    ~8,000 positions, and only with native bf16). Its logits differ from SDPA's by bf16 rounding, so the
    dense path keeps SDPA while it promises transformers' exact numbers (``engine/executor/fastpath.py``).

    On a CPU where the native library is loaded it is ``miaohui::attend_one`` (engine/native/decode_step.cpp): the same
    fp32 computation as one loop over the bf16 cache in place (no upcast copy of it per layer), and the very function
    the native quantized step calls, so verify and batched rows keep that step's bits."""
    if _native_attention(q):
        return torch.ops.miaohui.attend_one(q, k, v, scaling, softcap or 0.0)
    kv_heads, _, dim = k.shape
    queries = q.view(kv_heads, -1, dim).float()  # (KV, G, D): the G query heads that share a KV head
    scores = torch.bmm(queries, k.float().transpose(1, 2)).mul_(scaling)  # (KV, G, n)
    probs = torch.softmax(torch.tanh(scores / softcap) * softcap if softcap else scores, dim=-1)
    return torch.bmm(probs, v.float()).to(q.dtype).view(1, -1)  # (1, H·D)


def _native_attention(q: torch.Tensor) -> bool:
    return q.device.type == "cpu" and q.dtype in (torch.bfloat16, torch.float32) and decode_ops()


def rotate(x: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor) -> torch.Tensor:
    """RoPE: x·cos + rotate_half(x)·sin, with rotate_half's negation folded into ``sin_signed``.

    rotate_half(x) = cat(-x2, x1); cat(x2, x1)·cat(-s1, s2) gives the same products exactly (a sign
    flip is exact), one operation fewer per step. Partial rotary (Phi-4-mini's partial_rotary_factor):
    tables narrower than the head rotate its first dimensions only and pass the rest through, as
    transformers' ``apply_rotary_pos_emb`` does.
    """
    rotary = cos.shape[-1]
    if rotary != x.shape[-1]:
        head = x[..., :rotary]
        return torch.cat((head * cos + head.roll(rotary // 2, dims=-1) * sin_signed, x[..., rotary:]), dim=-1)
    # roll by half a head = cat(x2, x1): the same values in one operation instead of three
    return x * cos + x.roll(rotary // 2, dims=-1) * sin_signed


def capped_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scaling: float, cap: float,
                     mask: torch.Tensor | None) -> torch.Tensor:
    """Gemma 2's soft-capped grouped-query attention, operation for operation as transformers' eager
    attention (SDPA has no soft-capping): q (H, n, D), k and v (KV, m, D), ``mask`` (n, m) bool of the keys
    each query sees (None: all) → (n, H·D). Products and the cap in the model's dtype, softmax in fp32."""
    heads, n, dim = q.shape
    kv_heads = k.shape[0]
    queries = q.view(kv_heads, heads // kv_heads, n, dim)  # (KV, G, n, D)
    scores = torch.matmul(queries, k[:, None].transpose(2, 3)) * scaling  # (KV, G, n, m)
    scores = torch.tanh(scores / cap) * cap
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    out = torch.matmul(probs, v[:, None])  # (KV, G, n, D)
    return out.view(heads, n, dim).transpose(0, 1).reshape(n, heads * dim)
