"""A model's architecture read from ``config.json`` or a GGUF header, and the arithmetic on it: parameters,
weights bytes at each precision the engine offers, KV-cache bytes per token.

Two parameter counts, both always given:

- the seeds' estimate ``V·d + 12·L·d²`` (embeddings, then per layer 4·d² for attention and 8·d² for an MLP of
  width 4·d);
- the exact count for the Llama layout (``model_type`` llama, mistral, qwen2, qwen3) and the fast-path families
  that keep its projections (gemma2, gemma3_text, phi3): ``V·d`` embeddings, per layer q ``d·H·hd``, k and v
  ``d·KV·hd`` each, o ``H·hd·d``, gate/up/down ``3·d·I`` (Phi-3 stores q|k|v and gate|up fused: the same
  elements), two norms ``2·d`` (four for Gemma 2/3; plus q/k/v biases for qwen2 or ``attention_bias``, q/k norms
  for qwen3 and gemma3_text), a final norm ``d``, and ``V·d`` more for an output head only when ``tie_word_embeddings`` is false. A GGUF header
  also gives the stored count, the sum of its tensors' elements, which wins when present.

Bytes per precision follow what the loader builds (``engine/quant/quant.py``, transformers' bitsandbytes):
fp32 4 and bf16/fp16 2 bytes a parameter; ``int8`` 1 byte per projection weight plus a bf16 scale per output row,
output head (and an untied embedding) int8 too; ``int4`` half a byte plus a bf16 scale and zero per group of 32,
head int8; ``bnb-int8`` 1 byte plus an fp32 scale per row, embeddings and head in the compute dtype; ``nf4`` /
``fp4`` half a byte plus double-quantized absmax (1 byte per 64 weights, 4 per 256 blocks, a 1 KiB code table
per tensor). Norms, biases and everything unquantised stay in the activation dtype; the rotary tables add
``4·hd`` bytes (two fp32 copies of ``hd/2``). Layouts other than Llama's use the estimate and only the float
precisions are exact-ish there. Pure arithmetic: no torch, reads nothing.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from engine.errors import CorruptModelError
from engine.inputs import BNB_QUANTIZED, INT4_GROUP_SIZE, PRECISIONS
from engine.shapes.gguf_header import ArrayInfo, GgufHeader
from engine.shapes import config_check
from engine.quant.precision import GGUF_PROJECTIONS

LLAMA_LAYOUT = config_check.LLAMA_LAYOUT_TYPES
# Families the exact count knows: the Llama layout's seven projections per layer, with Gemma 2/3's two more
# norms per layer (before and after the MLP) and Phi-3's fused q|k|v and gate|up (the same elements, stored as two).
EXTRA_LAYER_NORMS = {"gemma2": 2, "gemma3_text": 2, "phi3": 0}
COUNTED_LAYOUT = (*LLAMA_LAYOUT, *EXTRA_LAYER_NORMS)
QK_NORM_TYPES = ("qwen3", "gemma3_text")
_ALIASES = {"num_hidden_layers": ("n_layer", "num_layers"), "hidden_size": ("n_embd", "d_model"),
            "num_attention_heads": ("n_head",), "max_position_embeddings": ("n_positions", "n_ctx"),
            "intermediate_size": ("n_inner",)}
NF4_BLOCK = 64  # bitsandbytes' 4-bit block; its absmax is quantized again in blocks of 256
NF4_CODE_BYTES = 256 * 4  # the fp32 code table each double-quantized tensor keeps


@dataclass(frozen=True)
class Architecture:
    """The numbers a fit estimate needs, from ``config.json`` or a GGUF header."""

    source: str  # "config.json" | "GGUF header"
    model_type: str
    layers: int
    hidden_size: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab_size: int
    context_length: int
    intermediate_size: int | None
    tied_embeddings: bool
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    stored_params: int | None = None  # GGUF: elements in the tensor table
    stored_bytes: int | None = None  # GGUF: bytes of the tensor data as quantized in the file
    file_quant: str | None = None  # GGUF: the type most elements are stored in
    # GGUF: the decoder projections' types (type → how many) and their biases' types, for the precision ``auto``
    # keeps (``engine.quant.precision.gguf_blocks``)
    projection_types: tuple[tuple[str, int], ...] = ()
    block_biases: tuple[str, ...] = ()

    @property
    def layout_known(self) -> bool:
        return self.model_type in COUNTED_LAYOUT and self.intermediate_size is not None

    @property
    def param_estimate(self) -> int:
        """The seeds' estimate V·d + 12·L·d²."""
        return self.vocab_size * self.hidden_size + 12 * self.layers * self.hidden_size ** 2

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
        """Best count: stored (GGUF), else exact (Llama layout), else the seeds' estimate."""
        return self.stored_params or self.exact_params or self.param_estimate

    def params_formula(self) -> str:
        """How ``params`` was reached, with the numbers."""
        if self.stored_params:
            return f"sum of the {self.source}'s tensor elements = {self.stored_params:,}"
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

    def kv_bytes_per_token(self, element_bytes: int) -> int:
        """2 (K and V) · layers · kv_heads · head_dim · bytes: GQA aware."""
        return 2 * self.layers * self.kv_heads * self.head_dim * element_bytes

    def weights_bytes(self, precision: str, float_bytes: int = 2) -> int:
        """Bytes of the weights as the loader builds them in ``precision``.

        ``float_bytes`` is the activation dtype's size for the bnb precisions (bf16 2, fp32 4 on a CPU
        without native bf16); int8/int4 always keep bf16 beside their integers.
        """
        buffers = 4 * self.head_dim if self.model_type in COUNTED_LAYOUT else 0
        if precision in ("fp32",):
            return 4 * self.params + buffers
        if precision in ("bf16", "fp16", "auto"):
            return 2 * self.params + buffers
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
        if precision in ("nf4", "fp4"):
            quantized = sum(_nf4_bytes(n) for n in tensors)
            return quantized + float_bytes * (tables + self.small_params()) + buffers
        raise ValueError(precision)

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


def _nf4_bytes(n: int) -> int:
    blocks = math.ceil(n / NF4_BLOCK)
    return math.ceil(n / 2) + blocks + 4 * math.ceil(blocks / 256) + NF4_CODE_BYTES


def engine_precisions() -> tuple[str, ...]:
    """The precisions a fit estimate reports: every one the engine offers except ``auto``."""
    return tuple(p for p in PRECISIONS if p != "auto")


# ---------------------------------------------------------------- reading the numbers


def _field(config: Mapping[str, Any], name: str) -> Any:
    for key in (name,) + _ALIASES.get(name, ()):
        if config.get(key) is not None:
            return config[key]
    return None


def _need(value: Any, name: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise CorruptModelError(f"corrupt or incomplete: {where}: no usable {name} ({value!r}): cannot estimate "
                                "the model's size")
    return value


def from_config(config: Mapping[str, Any], where: str = "config.json") -> Architecture:
    """The architecture a Hugging Face ``config.json`` describes (its ``text_config`` for a multimodal one)."""
    if not isinstance(config, Mapping):
        raise CorruptModelError(f"corrupt or incomplete: {where}: not a JSON object")
    config_check.check_config_values(config, Path(where))
    text = config.get("text_config") if isinstance(config.get("text_config"), Mapping) else config
    model_type = str(text.get("model_type") or config.get("model_type") or "")
    layers = _need(_field(text, "num_hidden_layers"), "num_hidden_layers", where)
    hidden = _need(_field(text, "hidden_size"), "hidden_size", where)
    heads = _need(_field(text, "num_attention_heads"), "num_attention_heads", where)
    vocab = _need(_field(text, "vocab_size"), "vocab_size", where)
    kv_heads = _field(text, "num_key_value_heads") or heads
    head_dim = _field(text, "head_dim") or hidden // heads
    tied = text.get("tie_word_embeddings", config.get("tie_word_embeddings"))
    if tied is None:  # transformers' defaults: False for the Llama family's configs, True for PretrainedConfig
        tied = model_type not in LLAMA_LAYOUT
    attention_bias = bool(text.get("attention_bias", False))
    return Architecture(
        source="config.json", model_type=model_type, layers=layers, hidden_size=hidden, heads=heads,
        kv_heads=_need(kv_heads, "num_key_value_heads", where), head_dim=_need(head_dim, "head_dim", where),
        vocab_size=vocab, context_length=int(_field(text, "max_position_embeddings") or 0),
        intermediate_size=_field(text, "intermediate_size"), tied_embeddings=bool(tied),
        qkv_bias=attention_bias or model_type == "qwen2", o_bias=attention_bias and model_type != "qwen2",
        mlp_bias=bool(text.get("mlp_bias", False)), qk_norm=model_type in QK_NORM_TYPES)


def from_gguf(header: GgufHeader, where: str = "GGUF header") -> Architecture:
    """The architecture a GGUF header describes; its tensor table gives the stored parameters and bytes."""
    arch = header.architecture
    if not arch:
        raise CorruptModelError(f"corrupt or incomplete: {where}: no general.architecture")

    def number(key: str, required: bool = True) -> int | None:
        value = header.arch_field(key)
        if value is None and not required:
            return None
        return _need(value, f"{arch}.{key}", where)

    names = {t.name: t for t in header.tensors}
    tokens = header.fields.get("tokenizer.ggml.tokens")
    vocab = header.arch_field("vocab_size") or (tokens.count if isinstance(tokens, ArrayInfo) else None)
    if vocab is None and "token_embd.weight" in names:
        vocab = names["token_embd.weight"].shape[-1]
    hidden = number("embedding_length")
    heads = number("attention.head_count")
    counts = header.quant_counts
    return Architecture(
        source="GGUF header", model_type=arch, layers=number("block_count"), hidden_size=hidden,  # type: ignore[arg-type]
        heads=heads, kv_heads=number("attention.head_count_kv", False) or heads,  # type: ignore[arg-type]
        head_dim=number("attention.key_length", False) or hidden // heads,  # type: ignore[operator]
        vocab_size=_need(vocab, "vocabulary size", where), context_length=number("context_length", False) or 0,
        intermediate_size=number("feed_forward_length", False), tied_embeddings="output.weight" not in names,
        qkv_bias="blk.0.attn_q.bias" in names, o_bias="blk.0.attn_output.bias" in names,
        mlp_bias="blk.0.ffn_up.bias" in names, qk_norm="blk.0.attn_q_norm.weight" in names,
        stored_params=header.elements or None, stored_bytes=header.tensor_bytes or None,
        file_quant=max(counts, key=counts.__getitem__) if counts else None,
        projection_types=tuple(sorted(Counter(t.quant for t in header.tensors
                                              if _projection(t.name, "weight")).items())),
        block_biases=tuple(sorted(t.quant for t in header.tensors if _projection(t.name, "bias"))))


def _projection(name: str, part: str) -> bool:
    """A decoder projection's ``part`` (weight | bias) in a GGUF: ``blk.<i>.<attn_q…ffn_down>.<part>``."""
    pieces = name.split(".")
    return len(pieces) == 4 and pieces[0] == "blk" and pieces[2] in GGUF_PROJECTIONS and pieces[3] == part
