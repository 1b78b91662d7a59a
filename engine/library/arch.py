"""A model's architecture read from ``config.json`` or a GGUF header: a ``Shape`` (``engine.shapes.shape``, which owns
the parameter count, KV bytes per token and weights bytes per precision) plus where it was read and what a GGUF
stores. A GGUF header also gives the stored parameter count, the sum of its tensors' elements, which wins over the
shape's count when present. Owns the reading (``from_config``, ``from_gguf``); no arithmetic of its own. Pure
Python: no torch, reads no file itself.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from engine.errors import CorruptModelError
from engine.quant.precision import GGUF_PROJECTIONS
from engine.shapes import config_check
from engine.shapes.gguf_header import ArrayInfo, GgufHeader
from engine.shapes.shape import (COUNTED_LAYOUT, EXTRA_LAYER_NORMS, LLAMA_LAYOUT, QK_NORM_TYPES, Shape,
                                 engine_precisions)

__all__ = ["Architecture", "COUNTED_LAYOUT", "EXTRA_LAYER_NORMS", "LLAMA_LAYOUT", "QK_NORM_TYPES", "engine_precisions",
           "from_config", "from_gguf"]

_ALIASES = {"num_hidden_layers": ("n_layer", "num_layers"), "hidden_size": ("n_embd", "d_model"),
            "num_attention_heads": ("n_head",), "max_position_embeddings": ("n_positions", "n_ctx"),
            "intermediate_size": ("n_inner",)}


@dataclass(frozen=True, kw_only=True)
class Architecture(Shape):
    """The numbers a fit estimate needs, from ``config.json`` or a GGUF header: the shape, and what the file stores."""

    source: str  # "config.json" | "GGUF header"
    stored_params: int | None = None  # GGUF: elements in the tensor table
    stored_bytes: int | None = None  # GGUF: bytes of the tensor data as quantized in the file
    file_quant: str | None = None  # GGUF: the type most elements are stored in
    # GGUF: the decoder projections' types (type → how many) and their biases' types, for the precision ``auto``
    # keeps (``engine.quant.precision.GGUFBlocks``, judged by choose_precision alone)
    projection_types: tuple[tuple[str, int], ...] = ()
    block_biases: tuple[str, ...] = ()

    @property
    def params(self) -> int:
        """Best count: stored (GGUF), else the shape's (exact for the Llama layout, else the seeds' estimate)."""
        return self.stored_params or super().params

    def params_formula(self) -> str:
        """How ``params`` was reached, with the numbers."""
        if self.stored_params:
            return f"sum of the {self.source}'s tensor elements = {self.stored_params:,}"
        return super().params_formula()


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
