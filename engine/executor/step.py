"""The fast runner's one Python decoder step: a forward over rows of tokens, each row over its own runner's cache.

``forward_rows(runners, token_ids, positions, exact)`` runs token ``token_ids[i]`` of ``runners[i]`` at
``positions[i]``: every norm, projection and the LM head once over all the rows, RoPE at each row's own position, and
each row's key, value and attention through its runner's ``FastRunner.attend_position`` (the cache write and the
attention the runner's decode takes: SDPA, ``attend_one``, Gemma 2's capped attention, a sliding window, an int8
cache's own), in list order, so a runner given several tokens at consecutive positions writes each before the next
one reads it. Every Python form of the decoder step is this one function:

- the eager decode (``FastRunner._decode_eager``): one row, one token;
- the speculative verify (``engine.executor.verify.verify_rows``): one runner, k tokens;
- the batched step (``engine.executor.batched.decode_batch``): n runners, one token each.

The static-shape step for CUDA graphs (``engine.executor.static_step``) must differ and says why; the native
int8/int4 step (``engine.executor.native_step``) is the same step in C++, checked bit for bit against this one by
tests/engine/executor/test_native_step.py.

Why one step can promise each form's bits: every operation but the matrix products (and, on some kernels, the norms)
computes each row alone whatever the rows beside it (embedding rows, elementwise RoPE and adds, per-row attention).
Where a kernel may sum in another order for n rows than for one, ``exact`` (an ``Exactness``) decides how the rows
are multiplied so that each keeps its one-row bits: ``RowExact`` (``engine.executor.verify``: probed per projection
and row count) for verify, ``BatchExact`` (``engine.executor.batched``: the fastest exact form probed per weight and
batch size) for the batched step; one row needs neither (``ONE_ROW``).

Reads the runners' weights, step plan and RoPE tables (``_w``, ``_plan``, ``_cos``...), writes their caches through
``attend_position``; does not grow caches, append ids, choose the native step or the exactness form (its callers do).
"""

from __future__ import annotations

from typing import Any, Callable, Protocol, Sequence

import torch

from engine.executor.llama_fused import embed_row, rotate

Call = Callable[[torch.Tensor], torch.Tensor]
Norm = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


class Exactness(Protocol):
    """How several rows go through a projection or a norm so that each gives its one-row bits."""

    def project(self, kind: str, index: int, call: Call, x: torch.Tensor, weight: Any, bias: Any) -> torch.Tensor:
        """``call(x)`` (the step plan's projection ``kind`` of layer ``index``, -1 for the head; ``weight`` and
        ``bias`` the fused tensors or module behind it) with each row's one-row bits."""
        ...

    def norm(self, kind: str, norm: Norm, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """``norm(x, weight)`` with each row's one-row bits (``kind``: "norm" or "qk_norm")."""
        ...


class _OneRow:
    """One row: the plan's calls as they are (nothing to keep apart)."""

    def project(self, kind: str, index: int, call: Call, x: torch.Tensor, weight: Any, bias: Any) -> torch.Tensor:
        return call(x)

    def norm(self, kind: str, norm: Norm, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return norm(x, weight)


ONE_ROW: Exactness = _OneRow()


def rope_rows(runner: Any, pos: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``runner``'s (cos, sin) rows (rotary,) at ``pos``, one pair per RoPE kind; longrope's long set once a step at
    ``pos`` reads it (each step picks its own set, as the decode does). The row is ``pos + runner.rope_offset``: M-RoPE's
    text after images continues at its position plus the model's delta (engine/vision/turn.py sets it)."""
    tables = (runner._cos_long, runner._sin_long) if runner._long(pos + 1) else (runner._cos, runner._sin)
    row = pos + runner.rope_offset
    return [(cos[row], sin[row]) for cos, sin in zip(*tables)]


def forward_rows(runners: Sequence[Any], token_ids: Sequence[int], positions: Sequence[int],
                 exact: Exactness = ONE_ROW) -> torch.Tensor:
    """Logits (rows, vocab) after token ``token_ids[i]`` of ``runners[i]`` (``FastRunner``s of one model) at
    ``positions[i]``; each row's cache entry written as its decode writes it. The caller grows the caches, runs under
    ``torch.inference_mode`` and passes an ``exact`` fit for more than one row."""
    first = runners[0]
    w, plan = first._w, first._plan
    heads, kvh, dim = w.heads, w.kv_heads, w.head_dim
    norm, qk_norm_of, mlp = plan.norm, plan.qk_norm, plan.mlp
    n = len(token_ids)
    if n == 1:
        ropes = rope_rows(first, positions[0])  # (rotary,) each: broadcast over the heads
        x = embed_row(w.embed, int(token_ids[0]))  # (1, d)
    else:  # each row's RoPE at its own position, stacked per kind: (n, 1, rotary)
        per_row = [rope_rows(runner, pos) for runner, pos in zip(runners, positions)]
        ropes = [(torch.stack([row[kind][0] for row in per_row])[:, None],
                  torch.stack([row[kind][1] for row in per_row])[:, None]) for kind in range(len(per_row[0]))]
        x = torch.cat([embed_row(w.embed, int(token)) for token in token_ids])  # (n, d): as each decode embeds
    if w.embed_scale is not None:
        x = x * w.embed_scale
    for index, ((attn_norm, qkv_proj, o_proj, mlp_norm, gate_up_proj, down_proj, qk_norm, post_attn_norm,
                 post_mlp_norm, window, rope), layer) in enumerate(zip(plan.layers, w.layers)):
        h = exact.norm("norm", norm, x, attn_norm)
        qkv = exact.project("qkv", index, qkv_proj, h, layer.qkv, layer.qkv_bias).view(n, heads + 2 * kvh, dim)
        qk = qkv[:, :heads + kvh]  # rows q | k | v per token
        if qk_norm is not None:  # Qwen3, Gemma 3: each head normed before RoPE
            qk = exact.norm("qk_norm", qk_norm_of, qk, qk_norm)
        qk = rotate(qk, *ropes[rope])  # (n, H+KV, D)
        if n == 1:
            attn = first.attend_position(index, positions[0], qk[0, :heads], qk[0, heads:], qkv[0, heads + kvh:],
                                         window)  # (1, H·D)
        else:  # in list order: a runner's earlier token is in its cache before its next one attends
            attn = torch.cat([runner.attend_position(index, pos, qk[i, :heads], qk[i, heads:], qkv[i, heads + kvh:],
                                                     window) for i, (runner, pos) in enumerate(zip(runners, positions))])
        out = exact.project("o", index, o_proj, attn, layer.o, layer.o_bias)
        x = x + (out if post_attn_norm is None else exact.norm("norm", norm, out, post_attn_norm))
        h = exact.norm("norm", norm, x, mlp_norm)
        gate_up = exact.project("gate_up", index, gate_up_proj, h, layer.gate_up, layer.gate_up_bias)  # (n, 2I)
        out = exact.project("down", index, down_proj, mlp(gate_up), layer.down, layer.down_bias)
        x = x + (out if post_mlp_norm is None else exact.norm("norm", norm, out, post_mlp_norm))
    h = exact.norm("norm", norm, x, plan.final_norm)
    return w.cap_logits(exact.project("head", -1, plan.head, h, w.lm_head, None))  # (n, vocab)


__all__ = ["ONE_ROW", "Exactness", "forward_rows", "rope_rows"]
