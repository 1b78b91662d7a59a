"""``Shape``: the one record of a decoder's dimensions, and every number that follows from them alone.

Read from a ``config.json`` or a GGUF header before a load (``engine.library.arch.Architecture`` is a shape plus
where it was read and what the file stores) and from a loaded model after one (``engine.models.model.ModelFacts``
holds one). Owns, once for the whole engine:

- the parameter count: the seeds' estimate ``V·d + 12·L·d²`` (embeddings, then per layer 4·d² for attention and
  8·d² for an MLP of width 4·d), and the exact count for the Llama layout (``model_type`` llama, mistral, qwen2,
  qwen3) and the fast-path families that keep its projections (gemma2, gemma3_text, phi3): ``V·d`` embeddings, per
  layer q ``d·H·hd``, k and v ``d·KV·hd`` each, o ``H·hd·d``, gate/up/down ``3·d·I`` (Phi-3 stores q|k|v and
  gate|up fused: the same elements), two norms ``2·d`` (four for Gemma 2/3; plus q/k/v biases for qwen2 or
  ``attention_bias``, q/k norms for qwen3 and gemma3_text), a final norm ``d``, and ``V·d`` more for an output
  head only when ``tie_word_embeddings`` is false;
- KV-cache bytes per token, GQA aware, and the seeds' no-GQA form beside it;
- weights bytes at each precision, as the loader builds them (``engine/quant/quant.py``, transformers'
  bitsandbytes): fp32 4 and bf16/fp16 2 bytes a parameter; ``int8`` 1 byte per projection weight plus a bf16
  scale per output row, output head (and an untied embedding) int8 too; ``int4`` half a byte plus a bf16 scale
  and zero per group of 32, head int8; ``bnb-int8`` 1 byte plus an fp32 scale per row, embeddings and head in the
  compute dtype; ``nf4`` / ``fp4`` half a byte plus double-quantized absmax (1 byte per 64 weights, 4 per 256
  blocks, a 1 KiB code table per tensor). Norms, biases and everything unquantised stay in the activation dtype;
  the rotary tables add ``4·hd`` bytes (two fp32 copies of ``hd/2``). Layouts other than Llama's use the estimate
  and only the float precisions are exact-ish there. ``estimate_weights_bytes`` gives the same precisions for a
  loaded model from its measured linears (``engine info``'s card).

``auto`` is not a precision here: which precision ``auto`` means is ``engine.quant.precision.choose_precision``'s
decision, asked before these numbers. Pure arithmetic: no torch, reads nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from engine.inputs import BNB_QUANTIZED, INT4_GROUP_SIZE, KV_SCALE_BYTES, PRECISIONS
from engine.shapes.config_check import LLAMA_LAYOUT_TYPES

LLAMA_LAYOUT = LLAMA_LAYOUT_TYPES
# Families the exact count knows: the Llama layout's seven projections per layer, with Gemma 2/3's two more
# norms per layer (before and after the MLP) and Phi-3's fused q|k|v and gate|up (the same elements, stored as two).
EXTRA_LAYER_NORMS = {"gemma2": 2, "gemma3_text": 2, "phi3": 0}
COUNTED_LAYOUT = (*LLAMA_LAYOUT, *EXTRA_LAYER_NORMS)
QK_NORM_TYPES = ("qwen3", "gemma3_text")
NF4_BLOCK = 64  # bitsandbytes' 4-bit block; its absmax is quantized again in blocks of 256
NF4_CODE_BYTES = 256 * 4  # the fp32 code table each double-quantized tensor keeps


def param_estimate(vocab_size: int, hidden_size: int, layers: int) -> int:
    """The seeds' estimate V·d + 12·L·d² (embeddings + attention and MLP blocks)."""
    return vocab_size * hidden_size + 12 * layers * hidden_size ** 2


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, float_bytes: int, kv_precision: str = "auto") -> int:
    """Bytes one token's K and V take over all layers: 2 · layers · kv_heads · head_dim · ``float_bytes``, or for an
    int8 cache 2 · layers · kv_heads · (head_dim · 1 + ``KV_SCALE_BYTES``)."""
    if kv_precision == "int8":
        return 2 * layers * kv_heads * (head_dim + KV_SCALE_BYTES)
    return 2 * layers * kv_heads * head_dim * float_bytes


def engine_precisions() -> tuple[str, ...]:
    """The precisions weights bytes are given for: every one the engine offers except ``auto`` (a choice, not a
    precision: ``engine.quant.precision.choose_precision`` makes it)."""
    return tuple(p for p in PRECISIONS if p != "auto")


@dataclass(frozen=True, kw_only=True)
class Shape:
    """A decoder's dimensions; what a config does not say (``model_type``, MLP width, biases) may be left out, and
    then only the layout-free numbers (estimate, KV bytes, float weights) are exact."""

    model_type: str = ""
    layers: int
    hidden_size: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab_size: int
    context_length: int = 0
    intermediate_size: int | None = None
    tied_embeddings: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False

    @property
    def layout_known(self) -> bool:
        return self.model_type in COUNTED_LAYOUT and self.intermediate_size is not None

    @property
    def param_estimate(self) -> int:
        """The seeds' estimate V·d + 12·L·d²."""
        return param_estimate(self.vocab_size, self.hidden_size, self.layers)

    @property
    def attention_kind(self) -> str:
        if self.kv_heads == 1:
            return "MQA"
        return "GQA" if self.kv_heads < self.heads else "MHA"

    def layer_tensors(self) -> tuple[int, ...]:
        """Weight elements of each projection in one layer: q, k, v, o, gate, up, down (known layout only)."""
        d, q, kv, inner = self.hidden_size, self.heads * self.head_dim, self.kv_heads * self.head_dim, self.intermediate_size
        return (d * q, d * kv, d * kv, q * d, d * inner, d * inner, inner * d)  # type: ignore[operator]

    def layer_rows(self) -> int:
        """Output rows of one layer's projections (one int8 scale each)."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        return q + 2 * kv + self.hidden_size + 2 * self.intermediate_size + self.hidden_size  # type: ignore[operator]

    def small_params(self) -> int:
        """Norms and biases: everything the quantized precisions keep in the activation dtype."""
        d, q, kv = self.hidden_size, self.heads * self.head_dim, self.kv_heads * self.head_dim
        per_layer = (2 + EXTRA_LAYER_NORMS.get(self.model_type, 0)) * d + (q + 2 * kv if self.qkv_bias else 0) + (d if self.o_bias else 0)
        per_layer += (2 * self.intermediate_size + d if self.mlp_bias else 0) + (2 * self.head_dim if self.qk_norm else 0)  # type: ignore[operator]
        return self.layers * per_layer + d

    @property
    def embed_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def head_params(self) -> int:
        return 0 if self.tied_embeddings else self.embed_params

    @property
    def exact_params(self) -> int | None:
        """The Llama-layout count from the config (None for other layouts)."""
        if not self.layout_known:
            return None
        return self.embed_params + self.head_params + self.layers * sum(self.layer_tensors()) + self.small_params()

    @property
    def params(self) -> int:
        """Best count from the shape alone: exact (Llama layout), else the seeds' estimate."""
        return self.exact_params or self.param_estimate

    def params_formula(self) -> str:
        """How ``params`` was reached, with the numbers."""
        exact = self.exact_params
        if exact is None:
            return (f"estimate V·d + 12·L·d² = {self.vocab_size}·{self.hidden_size} + 12·{self.layers}·"
                    f"{self.hidden_size}² = {self.param_estimate:,} (layout {self.model_type!r} not known exactly)")
        d, h, kv, hd, i = self.hidden_size, self.heads, self.kv_heads, self.head_dim, self.intermediate_size
        extras = "".join([" + qkv bias" if self.qkv_bias else "", " + o bias" if self.o_bias else "",
                          " + MLP bias" if self.mlp_bias else "", " + q/k norms 2·hd" if self.qk_norm else ""])
        head = "tied: the output head shares the embedding" if self.tied_embeddings else "+ V·d output head (untied)"
        norms = 2 + EXTRA_LAYER_NORMS.get(self.model_type, 0)
        return (f"V·d + L·(d·H·hd + 2·d·KV·hd + H·hd·d + 3·d·I + {norms}·d{extras}) + d = {self.vocab_size}·{d} + "
                f"{self.layers}·({d}·{h}·{hd} + 2·{d}·{kv}·{hd} + {h}·{hd}·{d} + 3·{d}·{i} + {norms}·{d}) + {d} "
                f"= {exact:,} ({head})")

    def kv_bytes_per_token(self, element_bytes: int, kv_precision: str = "auto") -> int:
        """2 (K and V) · layers · kv_heads · head_dim · bytes: GQA aware (int8: 1 byte plus a scale per KV head)."""
        return kv_bytes_per_token(self.layers, self.kv_heads, self.head_dim, element_bytes, kv_precision)

    def kv_bytes_per_token_no_gqa(self, element_bytes: int, kv_precision: str = "auto") -> int:
        """2 × layers × d_model × bytes: what the cache would cost without GQA (docs/DESIGN.md §Metrics); an int8
        cache then has a scale per query head, as a KV head would have."""
        if kv_precision == "int8":
            return kv_bytes_per_token(self.layers, self.heads, self.hidden_size // self.heads, 1, "int8")
        return 2 * self.layers * self.hidden_size * element_bytes

    def weights_bytes(self, precision: str, float_bytes: int = 2) -> int:
        """Bytes of the weights as the loader builds them in ``precision`` (one of ``engine_precisions()``).

        ``float_bytes`` is the activation dtype's size for the bnb precisions (bf16 2, fp32 4 on a CPU
        without native bf16); int8/int4 always keep bf16 beside their integers.
        """
        buffers = 4 * self.head_dim if self.model_type in COUNTED_LAYOUT else 0
        if precision in ("fp32",):
            return 4 * self.params + buffers
        if precision in ("bf16", "fp16"):
            return 2 * self.params + buffers
        if precision not in engine_precisions():
            raise ValueError(f"{precision!r} is not a weights precision (auto is decided by choose_precision first)")
        if not self.layout_known:
            return self._estimated_quantized(precision, float_bytes) + buffers
        tensors = self.layer_tensors() * self.layers
        linear = sum(tensors)
        rows = self.layer_rows() * self.layers
        tables = self.embed_params + self.head_params  # dense embedding + untied head
        if precision in ("int8", "int4"):
            int8_tables = (1 if self.tied_embeddings else 2) * (self.embed_params + 2 * self.vocab_size)
            packed = linear + 2 * rows if precision == "int8" else linear // 2 + (linear // INT4_GROUP_SIZE) * 4
            return packed + int8_tables + 2 * self.small_params() + buffers
        if precision == "bnb-int8":
            return linear + 4 * rows + float_bytes * (tables + self.small_params()) + buffers
        quantized = sum(_nf4_bytes(n) for n in tensors)  # nf4 / fp4
        return quantized + float_bytes * (tables + self.small_params()) + buffers

    def _estimated_quantized(self, precision: str, float_bytes: int) -> int:
        """Quantized bytes for a layout not known exactly: the 12·L·d² block weights quantized, the rest dense."""
        linear = 12 * self.layers * self.hidden_size ** 2
        rest = max(0, self.params - linear)
        per_weight = {"int8": 1.0, "bnb-int8": 1.0, "int4": 0.625, "nf4": 0.5 + 1 / NF4_BLOCK, "fp4": 0.5 + 1 / NF4_BLOCK}
        return int(linear * per_weight[precision]) + (float_bytes if precision in BNB_QUANTIZED else 2) * rest

    def precision_problem(self, precision: str) -> str | None:
        """Why the engine cannot load this model in ``precision``, or None when it can."""
        if precision not in ("int8", "int4"):
            return None
        if not self.layout_known:
            return (f"int8/int4 need a family the fast path knows ({', '.join(COUNTED_LAYOUT)}; this is "
                    f"{self.model_type or 'unknown'})")
        if precision == "int4":
            ins = (self.hidden_size, self.heads * self.head_dim, self.intermediate_size)
            outs = (self.heads * self.head_dim + 2 * self.kv_heads * self.head_dim, self.hidden_size,
                    2 * self.intermediate_size)  # type: ignore[operator]
            if any(n % INT4_GROUP_SIZE for n in ins) or any(n % 16 for n in outs):  # type: ignore[operator]
                return f"int4 needs widths divisible by {INT4_GROUP_SIZE}"
        return None


def estimate_weights_bytes(params: int, shapes: list[tuple[int, int]], double_quant: bool = True) -> dict[str, int]:
    """Bytes of a loaded model's parameters in each precision, from its measured linears rather than a config (the
    ``engine info`` card: its numbers stay what they were); quantised formats keep unquantised parts in 16 bits.

    ``shapes`` are the (out, in) of the linear layers bitsandbytes quantises. bnb-int8 adds one fp32
    scale per output row; 4-bit adds one absmax per 64 weights (fp32, or 8-bit plus one fp32 per
    256 blocks when double-quantised). Native int8 (engine/quant/quant.py) adds one bf16 scale per row;
    int4 a bf16 scale and zero per group of 32; both also keep the output projection and the
    embedding (one table when tied, so the estimate may count it twice when untied) in int8.
    """
    quantized = sum(o * i for o, i in shapes)
    rows = sum(o for o, _ in shapes)
    rest16 = (params - quantized) * 2
    blocks = math.ceil(quantized / NF4_BLOCK)
    absmax = blocks + math.ceil(blocks / 256) * 4 if double_quant else blocks * 4
    four_bit = math.ceil(quantized / 2) + absmax + rest16
    rest8 = params - quantized  # the int8 embedding/lm_head table; norms (<0.1%) counted at a byte too
    native_int8 = quantized + rows * 2 + rest8
    native_int4 = quantized // 2 + (quantized // INT4_GROUP_SIZE) * 4 + rest8
    return {"fp32": params * 4, "bf16": params * 2, "fp16": params * 2, "int8": native_int8, "int4": native_int4,
            "bnb-int8": quantized + rows * 4 + rest16, "nf4": four_bit, "fp4": four_bit}


def _nf4_bytes(n: int) -> int:
    blocks = math.ceil(n / NF4_BLOCK)
    return math.ceil(n / 2) + blocks + 4 * math.ceil(blocks / 256) + NF4_CODE_BYTES
