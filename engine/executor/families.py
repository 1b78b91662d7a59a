"""Which model families the fast decoder step knows, and why a model is refused: ``refusal(model)``.

Owns ``FAMILIES`` (the transformers ``model_type`` values the step in ``engine.executor.llama_fused`` and
``engine.executor.fastpath`` computes exactly, with the switches each one turns on), ``NOT_YET`` (families a
user is likely to load that still run on the plain runner, with what the step lacks for them), and the typed
answer to "why not the fast path": ``Refusal`` (a ``RefusalKind`` and one line for people). Every family
shares one decoder step: pre-norm RMSNorm, RoPE, grouped-query attention, a gated MLP, tied or untied
head; what differs is switched on by the checkpoint itself (q/k/v biases, Qwen2; any projection biases,
Llama's ``attention_bias``/``mlp_bias``; partial rotary and longrope's short/long frequencies, Phi-3/4) or by
the family (per-head q/k RMSNorm before RoPE, Qwen3 and Gemma 3; Gemma 2/3's norms, scaled embeddings, GeGLU
and sliding-window layers; Gemma 2's soft-capping; Phi-3's fused qkv_proj / gate_up_proj checkpoints; one window on
every layer, Phi-3 and Mistral).

Does not own the fused weights or the maths (``engine.executor.llama_fused``), the runner
(``engine.executor.fastpath``) or the choice between runners (``engine.executor.runners``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from engine.executor.refusal import Refusal, RefusalKind
from engine.quant.quant import QuantizedLinear


@dataclass(frozen=True)
class Family:
    """What one family switches on in the shared decoder step."""

    model_type: str
    qk_norm: bool = False  # per-head RMSNorm of q and k (weights (head_dim,)) before RoPE: Qwen3, Gemma 3
    # Gemma 3: (1 + w) RMSNorm computed in fp32 and rounded once, embeddings scaled by sqrt(d), norms after
    # attention and after the MLP too, GeGLU with tanh-GELU, scores scaled by query_pre_attn_scalar, and
    # sliding-window layers (with their own RoPE base) interleaved with global ones.
    gemma: bool = False
    # Gemma 3: one RoPE table per layer type (``rotary_emb(x, positions, layer_type)``); Gemma 2 has one.
    layer_ropes: bool = False
    # Gemma 2: tanh soft-capping of attention scores (attn_logit_softcapping) and of the final logits.
    softcap: bool = False
    # Phi-3: the checkpoint stores q|k|v as one ``qkv_proj`` and gate|up as one ``gate_up_proj``.
    fused_checkpoint: bool = False
    # Phi-3, Mistral: a config's ``sliding_window`` slides every layer (transformers' mask for them does).
    window_every_layer: bool = False


FAMILIES: dict[str, Family] = {family.model_type: family for family in (
    Family("llama"), Family("mistral", window_every_layer=True), Family("qwen2"), Family("qwen3", qk_norm=True),
    # Qwen2.5-VL's and Qwen3-VL's language parts: Qwen2's and Qwen3's layers; their image positions (and Qwen3-VL's
    # deepstack features) come from outside (engine.vision.layouts)
    Family("qwen2_5_vl_text"), Family("qwen3_vl_text", qk_norm=True),
    Family("gemma3_text", qk_norm=True, gemma=True, layer_ropes=True),
    Family("gemma2", gemma=True, softcap=True),
    Family("phi3", fused_checkpoint=True, window_every_layer=True))}

# Families people run that the step does not compute yet, and the first thing it lacks for each.
NOT_YET: dict[str, str] = {
    "gemma3": "the multimodal wrapper (its text model, gemma3_text, is on the fast path)",
    "gemma": "not wired to the Gemma 3 step (no post norms, no q/k norms)",
    "phi": "parallel attention and MLP with LayerNorm",
    "qwen2_moe": "mixture-of-experts layers",
    "qwen3_moe": "mixture-of-experts layers",
}

# RoPE variants whose cos/sin depend on the position only, so a table computed once is exact. Two more depend
# on the sequence length and are computed too: "longrope" (Phi-3.5/4: two tables, short and long frequencies,
# chosen per forward call by its last position as transformers does, ``engine.executor.fastpath``) and
# "dynamic" (NTK scaling that changes nothing up to max_position_embeddings, so the runner stops there).
STATIC_ROPE_TYPES = ("default", "linear", "llama3", "yarn")
ROPE_TYPES = (*STATIC_ROPE_TYPES, "longrope", "dynamic")


def family_of(model: Any) -> Family | None:
    config = getattr(model, "config", None)
    return FAMILIES.get(getattr(config, "model_type", None))  # type: ignore[arg-type]


def refusal(model: Any) -> Refusal | None:
    """Why ``model`` cannot run on the fast path, or None when it can."""
    config = getattr(model, "config", None)
    if config is None:
        return Refusal(RefusalKind.LAYOUT, "no config")
    model_type = getattr(config, "model_type", None)
    family = FAMILIES.get(model_type)  # type: ignore[arg-type]
    if family is None:
        lacks = NOT_YET.get(model_type)  # type: ignore[arg-type]
        return Refusal(RefusalKind.FAMILY, f"model_type {model_type or '?'} not on the fast path yet"
                       + (f": {lacks}" if lacks else ""))
    problem = _gemma_problem(config, family) if family.gemma else _feature_problem(config, family)
    if problem is not None:
        return Refusal(RefusalKind.FEATURE, problem)
    problem = _layout_problem(model, family)
    if problem is not None:
        return Refusal(RefusalKind.LAYOUT, problem)
    problem = _placement_problem(model)
    return Refusal(RefusalKind.PLACEMENT, problem) if problem is not None else None


def unsupported_reason(model: Any) -> str | None:
    """``refusal(model)`` as its one line (what JSON reports and logs carry), or None when the model qualifies."""
    found = refusal(model)
    return None if found is None else found.detail


def _feature_problem(config: Any, family: Family) -> str | None:
    if family.window_every_layer:
        # Phi-3 and Mistral slide every layer by one window when their config has one (transformers' mask then
        # slides all)
        if getattr(config, "layer_types", None) and set(config.layer_types) != {"full_attention"}:
            return f"layer types {sorted(set(config.layer_types))}"
    # Qwen2/3 configs keep a sliding_window size with use_sliding_window false (then it is None here);
    # layer_types says which layers actually slide.
    elif getattr(config, "sliding_window", None) or "sliding_attention" in (getattr(config, "layer_types", None) or ()):
        return "sliding-window attention"
    if getattr(config, "hidden_act", "silu") != "silu":
        return f"activation {config.hidden_act}"
    return _known_rope(getattr(config, "rope_parameters", None) or {})


def _known_rope(rope: Any, types: tuple[str, ...] = ROPE_TYPES) -> str | None:
    rope_type = rope.get("rope_type", "default") if isinstance(rope, dict) else "default"
    return None if rope_type in types else f"rope type {rope_type}"


def _gemma_problem(config: Any, family: Family) -> str | None:
    """Gemma 2/3's switches the step does not compute: soft-capping (Gemma 3), bidirectional attention,
    another activation, unknown layer types, a RoPE that depends on the length."""
    if not family.softcap and (getattr(config, "final_logit_softcapping", None)
                               or getattr(config, "attn_logit_softcapping", None)):
        return "logit soft-capping"
    if getattr(config, "use_bidirectional_attention", False):
        return "bidirectional attention"
    if getattr(config, "hidden_activation", None) != "gelu_pytorch_tanh":
        return f"activation {getattr(config, 'hidden_activation', None)}"
    kinds = set(getattr(config, "layer_types", None) or ())
    if not kinds <= {"sliding_attention", "full_attention"}:
        return f"layer types {sorted(kinds)}"
    if "sliding_attention" in kinds and not getattr(config, "sliding_window", None):
        return "sliding layers without a window"
    ropes = getattr(config, "rope_parameters", None) or {}
    if not family.layer_ropes:
        return _known_rope(ropes, STATIC_ROPE_TYPES)
    for kind in kinds:
        problem = _known_rope(ropes.get(kind) if isinstance(ropes, dict) else None, STATIC_ROPE_TYPES)
        if problem is not None:
            return problem
    return None


def _layout_problem(model: Any, family: Family) -> str | None:
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if layers is None or not hasattr(inner, "rotary_emb") or not hasattr(model, "lm_head"):
        return "unexpected module layout"
    if getattr(model.lm_head, "bias", None) is not None:
        return "an output head with a bias"
    for layer in layers:
        attn = layer.self_attn
        if family.gemma and not all(isinstance(getattr(getattr(layer, name, None), "weight", None), torch.Tensor)
                                    for name in ("pre_feedforward_layernorm", "post_feedforward_layernorm")):
            return "feed-forward norms missing"
        if family.qk_norm and not all(isinstance(getattr(getattr(attn, name, None), "weight", None), torch.Tensor)
                                      for name in ("q_norm", "k_norm")):
            return "q/k norms missing"
        for linear in projections(layer, family):
            # bitsandbytes' Linear8bitLt / Linear4bit subclass nn.Linear: only the plain class qualifies.
            if not isinstance(linear, QuantizedLinear) and type(linear) is not torch.nn.Linear:
                return f"quantized or custom layer {type(linear).__name__}"
    if not isinstance(model.lm_head, QuantizedLinear) and type(model.lm_head) is not torch.nn.Linear:
        return f"quantized or custom layer {type(model.lm_head).__name__}"
    return None


def projections(layer: Any, family: Family) -> tuple[Any, ...]:
    """A decoder layer's linear projections as this family's checkpoints lay them out (None for a missing one)."""
    attn, mlp = layer.self_attn, layer.mlp
    names = (("qkv_proj", "o_proj"), ("gate_up_proj", "down_proj")) if family.fused_checkpoint else \
        (("q_proj", "k_proj", "v_proj", "o_proj"), ("gate_proj", "up_proj", "down_proj"))
    return (*(getattr(attn, name, None) for name in names[0]), *(getattr(mlp, name, None) for name in names[1]))


def _placement_problem(model: Any) -> str | None:
    if getattr(model, "hf_device_map", None) and len(set(map(str, model.hf_device_map.values()))) > 1:
        return "model split across devices"
    devices = {p.device for p in model.parameters()}
    dtypes = {p.dtype for p in model.parameters()}
    if len(devices) != 1 or next(iter(devices)).type not in ("cpu", "cuda"):
        return "parameters on several devices or on meta"
    if not dtypes <= {torch.float32, torch.bfloat16, torch.float16} or len(dtypes) != 1:
        return f"parameter dtypes {sorted(map(str, dtypes))}"
    return None


__all__ = ["FAMILIES", "NOT_YET", "Family", "Refusal", "RefusalKind", "family_of", "projections", "refusal",
           "unsupported_reason"]
