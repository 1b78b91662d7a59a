"""``quantize_model``: a Llama-family model's projections, head and embedding replaced by int8/int4 modules, in place;
which module each weight becomes (``int8_module``, ``int4_module``: the int8-activation tiles of
engine/quant/tiled.py where they run, else the aten modules of engine/quant/linears.py, whose docstring says why
each kernel); and the modules a rewrite adds: ``ProjectionSlice`` (q, k, v of one fused q|k|v product) and
``QuantizedEmbedding`` (rows of the int8 table). The linears are re-exported here, where callers import them.
Owns the rewrite; not the kernels, the cache (engine/quant/quant_cache.py) nor loading (engine/models/loader.py).
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn

from engine.inputs import INT4_GROUP_SIZE, NATIVE_QUANTIZED
from engine.quant.linears import Int4Linear, Int4SymLinear, Int8Linear, QuantizedLinear, _unpack, int4_codes
from engine.quant.tiled import Int4Q8Linear, Int8Q8Linear


def int8_module(weight: torch.Tensor, dtype: torch.dtype = torch.bfloat16) -> Int8Linear:
    """A dense (out, in) weight as int8, per-row scales: in the int8-activation tiles where they run."""
    plain = Int8Linear.from_dense(weight, dtype)
    return Int8Q8Linear.from_int8(plain.qweight, plain.scales) or plain


def int4_module(q: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, group: int = INT4_GROUP_SIZE,
                dtype: torch.dtype = torch.bfloat16) -> Int4Linear:
    """0..15 codes and per-group scale and zero (``Int4Linear.from_codes``' arguments) as int4: in the
    int8-activation tiles where they run (any output width), else aten's packing (or ``Int4SymLinear``)."""
    if q.shape[1] % group == 0 and (tiled := Int4Q8Linear.from_tiled_codes(q, scale, zero, group, dtype)):
        return tiled
    return Int4Linear.from_codes(q, scale, zero, group, dtype)


class QuantizedEmbedding(nn.Module):
    """Token embeddings read from an ``Int8Linear`` (the tied lm_head, or the embedding's own rows).

    ``embed_scale`` (Gemma 3's sqrt(d), a 0-d tensor, or None) multiplies the rows as the scaled embedding it
    replaces did: rounded to the rows' dtype first."""

    def __init__(self, table: Int8Linear, embed_scale: torch.Tensor | None = None) -> None:
        super().__init__()
        self.table = table
        self.num_embeddings, self.embedding_dim = table.out_features, table.in_features
        self.register_buffer("embed_scale", embed_scale, persistent=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        rows = self.table.rows(ids.reshape(-1)).view(*ids.shape, self.embedding_dim)
        return rows if self.embed_scale is None else rows * self.embed_scale.to(rows.dtype)


class ProjectionSlice(QuantizedLinear):
    """Rows ``start:end`` of a fused quantized projection (q, k or v of q|k|v; gate or up of gate|up).

    The packed int4 layout cannot be cut into row slices that the kernel accepts (its scales would be
    a strided view, which it silently misreads), so q, k and v share one fused module. transformers'
    attention projects one hidden state with q, k and v in that order: the first slice always computes
    the fused product and keeps it, the following slices reuse it when they are given the very same
    tensor (and, outside inference mode, at the same version), and the last slice drops it. One
    product instead of three, and no weight stored twice; any other call order is merely slower.
    """

    def __init__(self, fused: QuantizedLinear, start: int, end: int) -> None:
        super().__init__()  # its own ``bias`` stays None: the fused module's output already has it
        self.fused, self.start, self.end = fused, start, end
        self.in_features, self.out_features = fused.in_features, end - start

    @property
    def dtype(self) -> torch.dtype:
        return self.fused.dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        version = None if x.is_inference() else x._version  # inference tensors keep no version counter
        memo = self.fused.__dict__.get("_memo")
        if self.start == 0 or memo is None or memo[0] is not x or memo[1] != version:
            memo = (x, version, self.fused(x))
        self.fused.__dict__["_memo"] = None if self.end == self.fused.out_features else memo
        return memo[2][..., self.start:self.end]

    def dequantize(self) -> torch.Tensor:
        return self.fused.dequantize()[self.start:self.end]

    @property
    def can_dequantize(self) -> bool:
        return self.fused.can_dequantize

    @property
    def kernel_rows(self) -> int:  # type: ignore[override]
        return self.fused.kernel_rows

    @property
    def nbytes(self) -> int:
        return 0  # the fused module holds the bytes


def projection_groups(model: Any) -> list[tuple[str, nn.Module, tuple[str, ...]]]:
    """(name, parent, attributes) of every group of projections that read the same input in a
    Llama-family decoder; the name is the quantized module's key in a cache. Phi-3's checkpoints hold q|k|v
    and gate|up already fused (``qkv_proj``, ``gate_up_proj``): one attribute each, the same keys."""
    found = []
    for index, layer in enumerate(model.model.layers):
        attn, mlp = layer.self_attn, layer.mlp
        found += [(f"layers.{index}.qkv", attn, ("qkv_proj",) if hasattr(attn, "qkv_proj") else
                   ("q_proj", "k_proj", "v_proj")),
                  (f"layers.{index}.o", attn, ("o_proj",)),
                  (f"layers.{index}.gate_up", mlp, ("gate_up_proj",) if hasattr(mlp, "gate_up_proj") else
                   ("gate_proj", "up_proj")),
                  (f"layers.{index}.down", mlp, ("down_proj",))]
    return found


# How quantize_model gets each quantized module: (cache key, dense weight, "int8" | "int4") -> module.
Maker = Callable[[str, torch.Tensor, str], QuantizedLinear]


def quantize_model(model: Any, scheme: str, group: int = INT4_GROUP_SIZE,
                   make: Maker | None = None) -> dict[str, QuantizedLinear]:
    """Replace a Llama-family model's projections, lm_head and embedding with quantized modules, in place.

    ``make`` builds each module (default: quantize the dense weight; ``engine/quant/quant_cache.py`` passes one
    that reads them from a cache). Returns the modules by key, for the cache to save. The dense weights
    are released as each is replaced, so peak memory is the dense model plus one layer. Projection biases
    (Qwen2's q/k/v, Llama's ``attention_bias``/``mlp_bias``) are kept dense on the quantized module, fused like
    the weights, zeros for a member without one; they are not the cache's (they come from the model each
    load). They are kept in fp32 (``forward`` adds them to the kernel's output and rounds once): a bias is a
    few thousand numbers, and Qwen2's q/k biases are large enough for bf16 rounding to move attention.
    Raises ValueError for a model whose layout this does not know, or an output head with a bias.
    """
    if scheme not in NATIVE_QUANTIZED:
        raise ValueError(f"unknown scheme {scheme!r}")
    inner = getattr(model, "model", None)
    if inner is None or not hasattr(inner, "layers") or not hasattr(model, "lm_head"):
        raise ValueError("int8/int4 need a Llama-family model (decoder layers with q/k/v/o and gate/up/down)")
    if getattr(model.lm_head, "bias", None) is not None:
        raise ValueError("int8/int4 need an output head without a bias")
    dtype = inner.embed_tokens.weight.dtype

    def from_dense(key: str, weight: torch.Tensor, kind: str) -> QuantizedLinear:
        return int8_module(weight, dtype) if kind == "int8" else int4_module(*int4_codes(weight, group), group, dtype)

    build = make or from_dense
    built: dict[str, QuantizedLinear] = {}
    with torch.no_grad():
        for key, parent, names in projection_groups(model):
            linears = [getattr(parent, name) for name in names]
            for linear in linears:
                if not isinstance(linear, nn.Linear):
                    raise ValueError(f"int8/int4 need linear projections, found {type(linear).__name__}")
            weight = torch.cat([linear.weight for linear in linears]) if len(linears) > 1 else linears[0].weight
            quantized = built[key] = build(key, weight, scheme)
            if any(linear.bias is not None for linear in linears):
                quantized.bias = torch.cat([linear.bias.detach().float() if linear.bias is not None
                                            else linear.weight.new_zeros(linear.out_features, dtype=torch.float32)
                                            for linear in linears])
            if len(linears) == 1:
                setattr(parent, names[0], quantized)
                continue
            start = 0
            for name, linear in zip(names, linears):
                setattr(parent, name, ProjectionSlice(quantized, start, start + linear.out_features))
                start += linear.out_features
            del linears, weight
        tied = model.lm_head.weight.data_ptr() == inner.embed_tokens.weight.data_ptr()
        head = built["lm_head"] = build("lm_head", model.lm_head.weight, "int8")
        model.lm_head = head
        if not tied:
            table = built["embed"] = build("embed", inner.embed_tokens.weight, "int8")
        scale = getattr(inner.embed_tokens, "embed_scale", None)  # Gemma 3's scaled embedding
        inner.embed_tokens = QuantizedEmbedding(head if tied else table, scale)  # type: ignore[arg-type]
    # transformers would re-tie a dense lm_head to the embedding on some calls: there is none now.
    model.config.tie_word_embeddings = False
    if hasattr(model, "_tied_weights_keys"):
        model._tied_weights_keys = None
    return built


__all__ = ["Int8Linear", "Int4Linear", "Int4SymLinear", "int4_codes", "QuantizedLinear", "ProjectionSlice", "QuantizedEmbedding",
           "quantize_model", "projection_groups", "int8_module", "int4_module", "_unpack"]
