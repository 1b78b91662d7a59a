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
functions the native step calls (``miaohui::rms_norm_rows``, ``silu_mul`` or ``gelu_tanh_mul``, ``attend_one`` with
its soft cap), RoPE and the residual adds repeat torch's rounding, and tests/engine/executor/test_native_step.py
checks the native step against the Python step bit for bit for every family it takes, Gemma 2 and 3 included.

Gemma: its (1 + w) norm weights stay fp32 and the norm rounds once after them (the C++ norm takes an fp32 weight),
the post-attention and post-MLP norms run before each residual add, the MLP is GeGLU (``gelu_tanh_mul``), Gemma 2's
attention scores are soft-capped inside ``attend_one``, and Gemma 3's sliding and global layers each read their own
RoPE table (a per-layer index into the tables the step is given). What stays in Python, around the one call
(``forward``), is one torch operation there anyway: the embedding's scale by sqrt(d) and Gemma 2's final logit soft
cap, so both steps compute them with the same torch operations.

What it takes (``why_not``): tiled int4/int8 projections and head (``engine.quant.tiled``), bf16 or fp32, a dense KV
cache or an 8-bit one (``engine.executor.kv_cache.Int8KVCache``: ``DecodeStep.step_q8``/``verify_q8`` quantize each
token's key and value and attend over the int8 rows with the ops the Python step calls over that cache, so the two
give the same bits there too; continuous batching's one call over 8-bit caches is ``DecodeStep.batch_q8``). Anything
else runs the Python step (``FastRunner._decode_eager``), as does a step with a RoPE offset (Qwen-VL's text after
images). A shared prefix (engine/executor/kv_blocks.py) is read in place from its pool through
``forward_batch``, and continuous batching's B sequences are one ``forward_batch`` call (engine/executor/batched.py).
``MIAOHUI_NATIVE_STEP=0`` turns it off (to compare). Owns the choice, the building and the call; the runner calls it.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Sequence

import torch

from engine.native import library as native
from engine.quant.tiled import Int4Q8Linear, Int8Q8Linear

NATIVE_STEP_ENV = "MIAOHUI_NATIVE_STEP"


SILU, GELU_TANH = 0, 1  # DecodeStep's activation argument (row_ops.h's Activation)


def plan_ops(eps: float, intermediate: int, gelu: bool = False
             ) -> tuple[Callable[[torch.Tensor, torch.Tensor], torch.Tensor], Callable[[torch.Tensor], torch.Tensor]]:
    """(norm(x, weight), mlp(gate_up)) as the native step computes them: the quantized plan's, when
    ``native.decode_ops()``. ``gelu``: Gemma's GeGLU (tanh-GELU) instead of SiLU; the norm takes a weight in x's
    dtype or Gemma's fp32 1 + w."""
    norm_op = torch.ops.miaohui.rms_norm_rows.default
    act_op = torch.ops.miaohui.gelu_tanh_mul.default if gelu else torch.ops.miaohui.silu_mul.default
    return (lambda x, weight: norm_op(x, weight, eps)), (lambda gate_up: act_op(gate_up, intermediate))


def has_gemma_ops() -> bool:
    """Whether the loaded library is built from these sources: ``gelu_tanh_mul`` came with the fp32-weight norm, the
    soft cap and DecodeStep's Gemma arguments and RoPE tables, so a library built before has none of them (its
    DecodeStep would refuse this module's calls)."""
    return hasattr(torch.ops.miaohui, "gelu_tanh_mul")


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
    if not has_gemma_ops():
        return "native library built from older sources: `make install` rebuilds it"
    if dtype not in (torch.bfloat16, torch.float32):
        return f"dtype {dtype}"
    if not kv_dense and os.environ.get(native.NATIVE_KV_ENV, "1") == "0":  # the Python step's torch int8 path
        return f"int8 KV cache with {native.NATIVE_KV_ENV}=0"
    if not kv_dense and not native.int8_kv_ops():
        return "int8 KV cache: native library built from older sources (`make install` rebuilds it)"
    weights = [w.lm_head] + [p for layer in w.layers for p in (layer.qkv, layer.o, layer.gate_up, layer.down)]
    if any(_bits(p) is None for p in weights):
        return "projections not in the int8-activation kernels' tiles"
    return None


def build(w: Any) -> Any:
    """The ``miaohui::DecodeStep`` over ``w``'s weights (which ``why_not`` accepted); it holds references, no copies."""
    step = torch.classes.miaohui.DecodeStep(w.heads, w.kv_heads, w.head_dim, w.intermediate, w.eps, w.scaling,
                                            GELU_TANH if w.gemma else SILU, w.attn_softcap or 0.0)
    none = torch.empty(0)

    def optional(weight: torch.Tensor | None) -> torch.Tensor:
        return none if weight is None else weight

    def add(weight: Any, bias: torch.Tensor | None) -> int:
        bits = _bits(weight)
        packed, scales = (weight.codes, weight.scales) if bits == 4 else (weight.tiles, weight.kernel_scales)
        return step.add_projection(bits, packed, scales, weight.out_features,
                                   none if bias is None else bias, weight.isa)

    for layer in w.layers:
        step.add_layer(layer.attn_norm, layer.mlp_norm, optional(layer.qk_norm), optional(layer.post_attn_norm),
                       optional(layer.post_mlp_norm), add(layer.qkv, layer.qkv_bias), add(layer.o, layer.o_bias),
                       add(layer.gate_up, layer.gate_up_bias), add(layer.down, layer.down_bias), layer.window or 0,
                       layer.rope)
    step.set_head(w.final_norm, add(w.lm_head, None))
    return step


def forward(step: Any, w: Any, x: torch.Tensor, pos: int, cos: Sequence[torch.Tensor], sin: Sequence[torch.Tensor],
            kv: Any, verify: bool = False) -> torch.Tensor:
    """Logits (n, vocab) of the embeddings ``x`` (n, d) at positions pos..pos+n-1 through the built ``step`` over
    ``w`` and the runner's cache ``kv`` (``DenseKVCache``, or ``Int8KVCache``: the ``_q8`` methods): ``step.step`` for
    one token, ``step.verify`` for speculation's n (``verify``). ``cos`` and ``sin``: the runner's tables, one per RoPE
    kind (``w.rope_kinds``). Gemma's embedding scale and final soft cap are the Python step's own torch operations,
    here around the call, so they round alike (engine/executor/step.py's forward_rows)."""
    if w.embed_scale is not None:
        x = x * w.embed_scale
    buffers = kv.step_args()
    if len(buffers) == 2:
        call = step.verify if verify else step.step
    else:  # an 8-bit cache: K, V and their scales
        call = step.verify_q8 if verify else step.step_q8
    return w.cap_logits(call(x, pos, list(cos), list(sin), *buffers))


def forward_batch(step: Any, w: Any, x: torch.Tensor, positions: Sequence[int], cos: Sequence[torch.Tensor],
                  sin: Sequence[torch.Tensor], ks: Sequence[torch.Tensor], vs: Sequence[torch.Tensor],
                  prefix: tuple[list[int], torch.Tensor, torch.Tensor, list[list[int]]]) -> torch.Tensor:
    """``step.batch``: row i of ``x`` the next token of a sequence at ``positions[i]`` over its own cache ``ks[i]``,
    ``vs[i]``; ``prefix``: ``FastRunner.native_prefix``'s (bases, pool keys, pool values, runs of pool rows). Gemma's
    scale and cap around the call, as ``forward``."""
    if w.embed_scale is not None:
        x = x * w.embed_scale
    return w.cap_logits(step.batch(x, list(positions), list(cos), list(sin), list(ks), list(vs), *prefix))


def forward_batch_q8(step: Any, w: Any, x: torch.Tensor, positions: Sequence[int], cos: Sequence[torch.Tensor],
                     sin: Sequence[torch.Tensor], caches: Sequence[Any]) -> torch.Tensor:
    """``forward_batch`` over the runners' 8-bit caches (``Int8KVCache``, never with a shared prefix):
    ``step.batch_q8``, each row the bits of that runner's own ``step_q8``."""
    if w.embed_scale is not None:
        x = x * w.embed_scale
    buffers = [cache.step_args() for cache in caches]
    return w.cap_logits(step.batch_q8(x, list(positions), list(cos), list(sin), *[[b[i] for b in buffers]
                                                                                  for i in range(4)]))


__all__ = ["GELU_TANH", "NATIVE_STEP_ENV", "SILU", "build", "forward", "forward_batch", "forward_batch_q8",
           "has_gemma_ops", "plan_ops", "why_not"]
