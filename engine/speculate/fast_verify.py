"""The fast runner's check of drafted tokens: one pass over several tokens whose logits and cache entries are, bit
for bit, what that many one-token decodes would give, so greedy speculation prints what plain decoding prints.

A batched forward (the prefill's) rounds differently from the decode step: a bf16 matrix product of several rows
may sum in another order than the one-row product (measured on this project's AVX-512 CPU: rows of the
576 x 1536 down projection differed, the 576-wide ones did not), and attention over a masked block differs from
one query's. So ``verify_rows`` follows ``FastRunner._decode_eager`` operation for operation, layer by layer over
all the tokens: every projection runs on all rows at once where that is exactly what it computes for each row
alone (``RowExact``, probed once per kind of projection and row count, every layer's having the same shape,
on random rows spread over many magnitudes: summation order does not depend on the values, but whether two orders
round alike does) and row by row otherwise; attention runs per token through the decode step's own
``FastRunner.attend_position``. Weights are still read from memory once per layer for all tokens: what makes
checking k tokens cheaper than decoding them.

Reads the runner's weights, plan and RoPE tables and writes its cache through ``attend_position``
(``engine.generate.fastpath``); never changes weights.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from engine.generate.llama_fused import embed_row, rotate

Projection = Callable[[torch.Tensor], torch.Tensor]
PROBE_TRIALS = 4  # random inputs a batched call must match row for row before it is trusted


class RowExact:
    """Whether a projection applied to n rows at once gives exactly its one-row results, per (projection, n)."""

    def __init__(self) -> None:
        self._known: dict[tuple[int, int], bool] = {}

    def __call__(self, project: Projection, x: torch.Tensor, name: Any = None) -> torch.Tensor:
        """``project(x)``, all rows at once where exact, else row by row; ``name`` keys a ``project`` made per call."""
        rows = x.shape[0]
        if rows == 1:
            return project(x)
        key = (id(project) if name is None else name, rows)
        exact = self._known.get(key)
        if exact is None:
            # Values spread over many binary orders of magnitude, several trials: two summation orders then
            # round differently somewhere almost surely (plain normal values often round alike by chance).
            generator = torch.Generator().manual_seed(rows)
            exact = True
            for _ in range(PROBE_TRIALS):
                spread = torch.exp2(torch.randint(-12, 13, x.shape, generator=generator).float())
                probe = (torch.randn(x.shape, generator=generator) * spread).to(x.dtype).to(x.device)
                together = project(probe)
                exact = exact and all(torch.equal(together[i:i + 1], project(probe[i:i + 1])) for i in range(rows))
            self._known[key] = exact
        if exact:
            return project(x)
        return torch.cat([project(x[i:i + 1]) for i in range(rows)])


@torch.inference_mode()
def verify_rows(runner: Any, ids: Sequence[int], start: int, exact: RowExact) -> torch.Tensor:
    """Logits (n, vocab) after each of ``ids`` placed at positions start..start+n-1, written into the cache as
    ``runner``'s decode step writes them (see the module docstring; each token's cache write and attention are the
    step's own, ``attend_position``, dense or int8). The caller grows the cache first."""
    w, plan = runner._w, runner._plan
    heads, kvh, dim, intermediate = w.heads, w.kv_heads, w.head_dim, w.intermediate
    norm, exact_norm, act = plan.norm, w.norm, w.act
    n = len(ids)
    positions = range(start, start + n)
    ropes = []
    for pos in positions:
        tables = (runner._cos_long, runner._sin_long) if runner._long(pos + 1) else (runner._cos, runner._sin)
        ropes.append([(cos[pos], sin[pos]) for cos, sin in zip(*tables)])
    x = torch.cat([embed_row(w.embed, token) for token in ids])  # (n, d)
    if w.embed_scale is not None:
        x = x * w.embed_scale
    def each(rows: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:  # a norm, as decode runs it on each row
        return exact(lambda t: norm(t, weight), rows, "norm")

    for index, (attn_norm, qkv_proj, o_proj, mlp_norm, gate_up_proj, down_proj, qk_norm, post_attn_norm,
                post_mlp_norm, window, rope) in enumerate(plan.layers):
        qkv_all = exact(qkv_proj, each(x, attn_norm), "qkv")  # (n, (H + 2KV) * D)
        outs = []
        for i, pos in enumerate(positions):  # token i writes its key and value, then sees exactly 0..pos
            qkv = qkv_all[i].view(heads + 2 * kvh, dim)
            qk = qkv[:heads + kvh] if qk_norm is None else exact_norm(qkv[:heads + kvh], qk_norm)
            qk = rotate(qk, *ropes[i][rope])
            # the decode step's own write and attention (dense or int8 cache): FastRunner.attend_position
            outs.append(runner.attend_position(index, pos, qk[:heads], qk[heads:], qkv[heads + kvh:], window))
        out = exact(o_proj, torch.cat(outs), "o")
        x = x + (out if post_attn_norm is None else each(out, post_attn_norm))  # elementwise: as per row
        gate_up = exact(gate_up_proj, each(x, mlp_norm), "gate_up")  # (n, 2I)
        out = exact(down_proj, act(gate_up[:, :intermediate]) * gate_up[:, intermediate:], "down")
        x = x + (out if post_mlp_norm is None else each(out, post_mlp_norm))
    return w.cap_logits(exact(plan.head, each(x, plan.final_norm)))  # (n, vocab)
