"""Does a model's config agree with its weights? Checked from config.json and the safetensors headers alone.

Owns two refusals, both before anything is allocated: a numeric config field the model is built from
(layers, hidden size, heads, KV heads, head dim, intermediate size, vocab, context) that is not a whole
number within sane bounds, and, for Llama-family folders, weights whose tensor names and shapes are
not what the config implies (layer indices 0..L-1 all present and none beyond, embedding V×d,
q/k/v/o and MLP shapes from heads, KV heads, head dim and intermediate size). Without these checks a
config saying 2 layers over 30 layers of weights loads silently and answers gibberish (transformers
only logs unused weights), and one saying 100000 layers allocates for minutes before running out of
memory. Architectures whose layout it does not know get the number checks only. Plain Python: reads
nothing itself (``engine.models.safety`` hands it the parsed config and the headers' shapes).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping

from engine.errors import CorruptModelError

# Field → largest sane value. Generous: the largest public models use ~130 layers, hidden 16-25k,
# 128 heads, head dim 256, intermediate ~54k, vocab ~260k, context 10M tokens; 4-10x beyond each
# still refuses a typo'd or hostile value before it sizes an allocation.
_BOUNDS = {
    "num_hidden_layers": 1024,
    "hidden_size": 1 << 17,
    "num_attention_heads": 4096,
    "num_key_value_heads": 4096,
    "head_dim": 4096,
    "intermediate_size": 1 << 20,
    "vocab_size": 1 << 24,
    "max_position_embeddings": 1 << 27,
}
# Older configs (GPT-2 style) name the same fields differently; transformers maps them (attribute_map).
_ALIASES = {"n_layer": "num_hidden_layers", "num_layers": "num_hidden_layers", "n_embd": "hidden_size",
            "d_model": "hidden_size", "n_head": "num_attention_heads", "n_inner": "intermediate_size",
            "n_positions": "max_position_embeddings", "n_ctx": "max_position_embeddings"}
# model_type values whose checkpoints use Llama's tensor names and shapes (the fast path's family plus
# the Qwen decoders, which only add q/k/v biases or q/k norms, neither checked here).
LLAMA_LAYOUT_TYPES = ("llama", "mistral", "qwen2", "qwen3")
_LAYER = re.compile(r"^(?:model\.)?layers\.(\d+)\.(.+)$")


def _refuse(where: Path, problem: str) -> CorruptModelError:
    # The same form as engine.models.safety.corrupt (which imports this module, so it is not imported here).
    return CorruptModelError(f"corrupt or incomplete: {where}: {problem}")


def _checked_numbers(config: Mapping[str, Any], where: Path) -> dict[str, int]:
    numbers: dict[str, int] = {}
    for key, value in config.items():
        field = _ALIASES.get(key, key)
        if field not in _BOUNDS or value is None:  # None: transformers derives it (head_dim = d / heads)
            continue
        bound = _BOUNDS[field]
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= bound:
            shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:40] + "…"
            raise _refuse(where, f"{key} is {shown}, not a whole number from 1 to {bound:,}: the config is damaged")
        numbers[field] = value
    return numbers


def check_config_values(config: Mapping[str, Any], where: Path) -> None:
    """Refuse a numeric field (of the config or its ``text_config``) that is not a whole number in bounds."""
    numbers = _checked_numbers(config, where)
    text = config.get("text_config")
    if isinstance(text, Mapping):
        _checked_numbers(text, where)
    heads, kv_heads = numbers.get("num_attention_heads"), numbers.get("num_key_value_heads")
    if heads and kv_heads and heads % kv_heads:
        raise _refuse(where, f"num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}")


def _expected_shapes(numbers: Mapping[str, int], where: Path) -> dict[str, tuple[int, ...]]:
    """Shape of each Llama tensor (top-level names and per-layer suffixes) the config fixes."""
    d, heads, vocab = numbers["hidden_size"], numbers["num_attention_heads"], numbers["vocab_size"]
    kv = numbers.get("num_key_value_heads", heads)
    head_dim = numbers.get("head_dim")
    if head_dim is None:
        if d % heads:
            raise _refuse(where, f"hidden_size {d} is not a multiple of num_attention_heads {heads}")
        head_dim = d // heads
    shapes = {
        "embed_tokens.weight": (vocab, d), "norm.weight": (d,), "lm_head.weight": (vocab, d),
        "input_layernorm.weight": (d,), "post_attention_layernorm.weight": (d,),
        # nn.Linear stores (out, in).
        "self_attn.q_proj.weight": (heads * head_dim, d), "self_attn.k_proj.weight": (kv * head_dim, d),
        "self_attn.v_proj.weight": (kv * head_dim, d), "self_attn.o_proj.weight": (d, heads * head_dim),
    }
    inner = numbers.get("intermediate_size")
    if inner is not None:  # absent: transformers' default applies, and its own shape check catches it
        shapes.update({"mlp.gate_proj.weight": (inner, d), "mlp.up_proj.weight": (inner, d),
                       "mlp.down_proj.weight": (d, inner)})
    return shapes


def check_weights_match(config: Mapping[str, Any], tensors: Mapping[str, tuple[int, ...]], where: Path) -> None:
    """Refuse Llama-layout weights whose layers or shapes disagree with ``config``; others pass unchecked.

    ``tensors`` maps every tensor name in the safetensors files (all shards) to its shape.
    """
    if config.get("model_type") not in LLAMA_LAYOUT_TYPES:
        return
    numbers = _checked_numbers(config, where)
    layers = numbers.get("num_hidden_layers")
    found = sorted({int(m.group(1)) for m in map(_LAYER.match, tensors) if m})
    if layers is not None and found != list(range(layers)):
        if not found:
            raise _refuse(where, f"num_hidden_layers is {layers} but the weights hold no layer (no model.layers.N tensors)")
        count = f"{len(found)} layer{'s' if len(found) != 1 else ''}"
        gaps = sorted(set(range(min(layers, found[-1] + 1))) - set(found))
        held = f"{count} ({found[0]}-{found[-1]}{f', no layer {gaps[0]}' if gaps else ''})"
        raise _refuse(where, f"num_hidden_layers is {layers} but the weights hold {held}: config and weights disagree")
    # Pre-quantized checkpoints (GPTQ, AWQ, bitsandbytes) store packed tensors of other shapes.
    if config.get("quantization_config") or not {"hidden_size", "num_attention_heads", "vocab_size"} <= set(numbers):
        return
    expected = _expected_shapes(numbers, where)
    for name, shape in tensors.items():
        match = _LAYER.match(name)
        key = match.group(2) if match else name.removeprefix("model.")
        want = expected.get(key)
        if want is not None and tuple(shape) != want:
            raise _refuse(where, f"tensor {name} has shape {list(shape)} but the config implies {list(want)}: "
                                 "config and weights disagree")
