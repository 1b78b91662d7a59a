"""The fast runner's static-shape decode step (``FastRunner(static=True)``): what CUDA graphs capture.

``decode_static(runner, token, pos)`` runs one token with every tensor shape fixed: ``token`` and ``pos`` are (1,)
tensors, the cache is written at ``pos`` by ``index_copy_`` and attention spans the whole capacity with later
positions (and, for a sliding layer, those before its window) masked. ``mark_static(runner)`` tells dynamo which
tensors live at fixed addresses.

Why it is not the one Python step (``engine.executor.step.forward_rows``): a CUDA graph replays the kernels it
captured, at the addresses and shapes it captured. The one step takes each row's position as a Python int, slices the
cache's filled prefix (a shape that grows every token), picks SDPA or ``attend_one`` and longrope's table set by that
int, and loops over rows in Python: each of these is fixed into a captured graph, or breaks it. Here the position is
a tensor the graph reads, the cache write is ``index_copy_`` at it, attention always spans the whole capacity under a
mask, and longrope's set is a ``torch.where``. Its logits are the same maths in another rounding (the masked
softmax over the capacity), so it promises no bit equality with the eager step (tests/engine/executor/test_fastpath.py
compares them within rounding). Kept apart from ``engine.executor.fastpath`` (the eager passes, which this reads:
weights, RoPE tables, cache) so that module stays within its size; a static runner never reads a shared prefix.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from engine.executor.llama_fused import embed, project, rotate

log = logging.getLogger(__name__)


def mark_static(runner: Any) -> None:
    """Tell dynamo the tensors the step reads live at fixed addresses (as transformers' StaticCache
    does): CUDA graphs then read them in place instead of copying weights and cache in per replay,
    and in-place cache writes do not disable the graph."""
    tensors = [*runner._kv.tensors(), *runner._cos, *runner._sin, *runner._cos_long, *runner._sin_long,
               runner._positions, runner._pos_t, runner._step_input,
               runner._w.embed, runner._w.final_norm, runner._w.lm_head, runner._w.embed_scale]
    for layer in runner._w.layers:
        tensors += [layer.attn_norm, layer.qkv, layer.o, layer.mlp_norm, layer.gate_up, layer.down, layer.qkv_bias,
                    layer.o_bias, layer.gate_up_bias, layer.down_bias, layer.qk_norm, layer.post_attn_norm,
                    layer.post_mlp_norm]
    tensors = [t for t in tensors if isinstance(t, torch.Tensor)]  # quantized modules hold their own
    try:
        for tensor in tensors:
            torch._dynamo.mark_static_address(tensor)
    except Exception as exc:  # noqa: BLE001  (only costs speed)
        log.warning("could not mark static addresses: %s", exc)


def decode_static(runner: Any, token: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """The decode step with fixed shapes: ``token`` and ``pos`` are (1,) tensors, attention spans
    the whole capacity with positions after ``pos`` (and, for a sliding layer, before its window)
    masked. Capturable as one CUDA graph."""
    w = runner._w
    heads, kvh, dim = w.heads, w.kv_heads, w.head_dim
    groups = heads // kvh
    ropes = [(cos.index_select(0, pos), sin.index_select(0, pos))  # (1, head_dim) each
             for cos, sin in zip(runner._cos, runner._sin)]
    if runner._long_after is not None:  # longrope: the long set once pos + 1 passes the original context
        long = pos + 1 > runner._long_after
        ropes = [(torch.where(long, cos_l.index_select(0, pos), cos), torch.where(long, sin_l.index_select(0, pos), sin))
                 for (cos, sin), cos_l, sin_l in zip(ropes, runner._cos_long, runner._sin_long)]
    visible = {None: runner._positions <= pos}  # (capacity,) per window
    x = embed(w.embed, token)  # (1, d)
    if w.embed_scale is not None:
        x = x * w.embed_scale
    norm = w.norm
    for index, layer in enumerate(w.layers):
        if layer.window not in visible:
            visible[layer.window] = visible[None] & (runner._positions > pos - layer.window)
        h = norm(x, layer.attn_norm)
        qkv = project(h, layer.qkv, layer.qkv_bias)
        qk = qkv[:, :(heads + kvh) * dim].view(heads + kvh, dim)
        if layer.qk_norm is not None:
            qk = norm(qk, layer.qk_norm)
        qk = rotate(qk, *ropes[layer.rope])  # (H+KV, D)
        runner._kv.write_at(index, pos, qk[heads:, None, :], qkv[:, (heads + kvh) * dim:].view(kvh, 1, dim))
        k_cache, v_cache = runner._kv.read(index, 0, runner._capacity)  # int8: the capacity dequantized
        scores = torch.matmul(qk[:heads].view(kvh, groups, dim), k_cache.transpose(1, 2)) * w.scaling
        if w.attn_softcap is not None:
            scores = torch.tanh(scores / w.attn_softcap) * w.attn_softcap
        scores = scores.masked_fill(~visible[layer.window], float("-inf"))  # (KV, G, capacity)
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(runner._dtype)
        attn = torch.matmul(probs, v_cache)  # (KV, G, D)
        out = project(attn.view(1, heads * dim), layer.o, layer.o_bias)
        x = x + (out if layer.post_attn_norm is None else norm(out, layer.post_attn_norm))
        h = norm(x, layer.mlp_norm)
        gate_up = project(h, layer.gate_up, layer.gate_up_bias)
        out = project(w.act(gate_up[:, :w.intermediate]) * gate_up[:, w.intermediate:], layer.down,
                      layer.down_bias)
        x = x + (out if layer.post_mlp_norm is None else norm(out, layer.post_mlp_norm))
    return w.cap_logits(project(norm(x, w.final_norm), w.lm_head))
