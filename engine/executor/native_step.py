"""The int8/int4 decode step in one native call (``miaohui::DecodeStep``, engine/native/decode_step.cpp), and the row
operations the Python step shares with it so both compute the same bits.

Why by hand (issue 25): on a CPU an int4 decode step of a small model is bound by operations, not bytes. The default
model's step was ~600 torch operations per token (norms, RoPE, attention, casts, adds); their dispatch cost ~4.6 of
~10.5 ms a token, measured, and left it at 0.89x llama.cpp's speed on the same Q4_0 file. torch offers no fused CPU
decoder layer for int8-activation kernels, and ``torch.compile`` needs a compiler at run time and its cache inside a
packaged app. So the quantized step runs as one C++ call over the layers: the same int8-activation products
(q8act.cpp), and norms, RoPE, attention, SiLU and residual adds written as plain loops over one row.

Exactness: a quantized step has no exact reference (its products quantize activations), but speculation's verify and
the server's batched step promise the very bits of this step (``engine.executor.verify``,
``engine.executor.batched``). So the quantized plan's norm, q/k norm, MLP activation and attention are the same C++
functions the native step calls (``miaohui::rms_norm_rows``, ``silu_mul``, ``attend_one``), RoPE and the residual adds
repeat torch's rounding, and tests/engine/executor/test_native_step.py checks the native step against the Python
step bit for bit for every family it takes.

What it takes (``why_not``): tiled int4/int8 projections and head (``engine.quant.tiled``), a dense KV cache, one RoPE
table, no Gemma norms or soft-capping, bf16 or fp32. Anything else runs the Python step (``FastRunner._decode_eager``),
as does a step over a shared prefix. ``MIAOHUI_NATIVE_STEP=0`` turns it off (to compare). Owns the choice and the
building; the runner calls it.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import torch

from engine.native import library as native
from engine.quant.tiled import Int4Q8Linear, Int8Q8Linear

NATIVE_STEP_ENV = "MIAOHUI_NATIVE_STEP"


def plan_ops(eps: float, intermediate: int
             ) -> tuple[Callable[[torch.Tensor, torch.Tensor], torch.Tensor], Callable[[torch.Tensor], torch.Tensor]]:
    """(norm(x, weight), mlp(gate_up)) as the native step computes them: the quantized plan's, when ``native.decode_ops()``."""
    norm_op, silu_op = torch.ops.miaohui.rms_norm_rows.default, torch.ops.miaohui.silu_mul.default
    return (lambda x, weight: norm_op(x, weight, eps)), (lambda gate_up: silu_op(gate_up, intermediate))


def _bits(weight: Any) -> int | None:
    if isinstance(weight, Int4Q8Linear):
        return 4
    return 8 if isinstance(weight, Int8Q8Linear) else None


def why_not(w: Any, dtype: torch.dtype, kv_dense: bool) -> str | None:
    """Why fused weights ``w`` (``engine.executor.llama_fused.FusedWeights``) cannot take the native step, or None."""
    if os.environ.get(NATIVE_STEP_ENV, "1") == "0":
        return f"{NATIVE_STEP_ENV}=0"
    if not native.decode_ops():
        return "native library not built or this CPU lacks AVX2"
    if dtype not in (torch.bfloat16, torch.float32):
        return f"dtype {dtype}"
    if w.gemma or w.attn_softcap is not None or w.logit_softcap is not None:
        return "Gemma's norms or soft-capping"
    if len(w.rope_kinds) != 1:
        return "several RoPE tables"
    if not kv_dense:
        return "int8 KV cache"
    weights = [w.lm_head] + [p for layer in w.layers for p in (layer.qkv, layer.o, layer.gate_up, layer.down)]
    if any(_bits(p) is None for p in weights):
        return "projections not in the int8-activation kernels' tiles"
    return None


def build(w: Any) -> Any:
    """The ``miaohui::DecodeStep`` over ``w``'s weights (which ``why_not`` accepted); it holds references, no copies."""
    step = torch.classes.miaohui.DecodeStep(w.heads, w.kv_heads, w.head_dim, w.intermediate, w.eps, w.scaling)
    none = torch.empty(0)

    def add(weight: Any, bias: torch.Tensor | None) -> int:
        bits = _bits(weight)
        packed = weight.codes if bits == 4 else weight.tiles
        return step.add_projection(bits, packed, weight.scales, weight.out_features,
                                   none if bias is None else bias, weight.isa)

    for layer in w.layers:
        step.add_layer(layer.attn_norm, layer.mlp_norm, none if layer.qk_norm is None else layer.qk_norm,
                       add(layer.qkv, layer.qkv_bias), add(layer.o, layer.o_bias),
                       add(layer.gate_up, layer.gate_up_bias), add(layer.down, layer.down_bias), layer.window or 0)
    step.set_head(w.final_norm, add(w.lm_head, None))
    return step


__all__ = ["NATIVE_STEP_ENV", "build", "plan_ops", "why_not"]
