"""The fast runner's check of drafted tokens: one pass over several tokens whose logits and cache entries are, bit
for bit, what that many one-token decodes would give, so greedy speculation prints what plain decoding prints.

A batched forward (the prefill's) rounds differently from the decode step: a bf16 matrix product of several rows
may sum in another order than the one-row product (measured on this project's AVX-512 CPU: rows of the
576 x 1536 down projection differed, the 576-wide ones did not), and attention over a masked block differs from
one query's. So ``verify_rows`` is the decoder step itself (``engine.executor.step.forward_rows``: one runner, k
tokens at consecutive positions), its products kept row-exact by ``RowExact``: every projection and norm runs on all
rows at once where that is exactly what it computes for each row alone (probed once per kind of projection and row
count, every layer's having the same shape, on random rows spread over many magnitudes: summation order does not
depend on the values, but whether two orders round alike does) and row by row otherwise; attention runs per token
through the decode step's own ``FastRunner.attend_position``. Weights are still read from memory once per layer for
all tokens: what makes checking k tokens cheaper than decoding them.

Every dense CPU projection, rows together or one by one, is multiplied through its copy packed once for oneDNN
(``engine.executor.row_products.packed_rows``) where a probe finds the same bits as ``F.linear`` on that many rows
(the same kernel, without re-laying the weight out on every call). The packed copies, about the size of the dense
weights (resident memory grew ~300 MB on the default model in bf16; shared with a batched step's), are the memory
speculation costs on top of its drafter; speculation is off unless the user turns it on.

Where the runner's decode step is the native one (int8/int4, ``engine.executor.native_step``), the check is one
native call instead (``native_rows``: ``miaohui::DecodeStep.verify``, the step's own code over n rows, its products on
all rows at once, each token's attention in C++): the per-token Python attention above made checking 48 tokens cost
more than decoding them natively (issue 45). tests/engine/executor/test_native_step.py checks its bits against the
native step's and the Python step's.

Reads the runner's weights, plan and RoPE tables and writes its cache through ``attend_position`` or the native step
(``engine.executor.fastpath``); never changes weights.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from engine.executor import native_step
from engine.executor.llama_fused import embed_row
from engine.executor.row_products import Projection, packed_rows
from engine.executor.step import Norm, forward_rows

PROBE_TRIALS = 4  # random inputs a batched call must match row for row before it is trusted
_UNSET = object()


def _probes(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, seed: int) -> list[torch.Tensor]:
    """Inputs spread over many binary orders of magnitude: two summation orders then round differently somewhere
    almost surely (plain normal values often round alike by chance)."""
    generator = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(PROBE_TRIALS):
        spread = torch.exp2(torch.randint(-12, 13, shape, generator=generator).float())
        out.append((torch.randn(shape, generator=generator) * spread).to(dtype).to(device))
    return out


class RowExact:
    """Whether a projection applied to n rows at once gives exactly its one-row results, per (projection, n); and,
    for those that must go row by row, whether a packed weight (``packed_rows``) gives the one-row results too."""

    def __init__(self) -> None:
        self._known: dict[tuple[Any, Any], bool] = {}
        self._packed: dict[Any, Projection | None] = {}

    def __call__(self, project: Projection, x: torch.Tensor, name: Any = None,
                 weight: tuple[Any, Any, torch.Tensor | None] | None = None) -> torch.Tensor:
        """``project(x)``, all rows at once where exact, else row by row; ``name`` keys a ``project`` made per call.
        ``weight``: (a key of this very weight, the dense weight, its bias) behind ``project``, to pack for rows."""
        rows = x.shape[0]
        if rows == 1:
            return project(x)
        key = (id(project) if name is None else name, rows)
        exact = self._known.get(key)
        if exact is None:
            exact = True
            for probe in _probes(tuple(x.shape), x.dtype, x.device, rows):
                together = project(probe)
                exact = exact and all(torch.equal(together[i:i + 1], project(probe[i:i + 1])) for i in range(rows))
            self._known[key] = exact
        if exact:
            return self._packed_form(project, x, key[0], weight)(x)
        row = self._packed_form(project, x[:1], key[0], weight)
        return torch.cat([row(x[i:i + 1]) for i in range(rows)])

    def _packed_form(self, project: Projection, x: torch.Tensor, kind: Any, weight: Any) -> Projection:
        """``project``, or its packed weight's product where a probe on ``x``'s shape finds the same bits (the
        same oneDNN kernel without the per-call re-layout: one-row calls where rows must go singly, and the rows
        that batch exactly, whose bf16 products measured ~1.7x faster packed on the default model)."""
        if weight is None:
            return project
        packed = self._packed.get(weight[0], _UNSET)
        if packed is _UNSET:
            packed = self._packed[weight[0]] = packed_rows(weight[1], weight[2])
        if packed is None:
            return project
        key = (kind, "packed", x.shape[0])
        exact = self._known.get(key)
        if exact is None:
            exact = all(torch.equal(packed(p), project(p)) for p in _probes(tuple(x.shape), x.dtype, x.device, 1))
            self._known[key] = exact
        return packed if exact else project

    def project(self, kind: str, index: int, call: Projection, x: torch.Tensor, weight: Any,
                bias: Any) -> torch.Tensor:
        """``engine.executor.step.Exactness``: probed per kind of projection (every layer's has the same shape), its
        dense weight packed per layer."""
        return self(call, x, kind, ((kind, index), weight, bias))

    def norm(self, kind: str, norm: Norm, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """``engine.executor.step.Exactness``: a norm probed like a projection (all norms of a kind share a shape)."""
        return self(lambda t: norm(t, weight), x, kind)


def has_native_verify(step: Any) -> bool:
    """Whether a built ``miaohui::DecodeStep`` has ``verify`` (a library built before it had none)."""
    try:
        return bool(step._has_method("verify"))
    except (AttributeError, RuntimeError):
        return False


@torch.inference_mode()
def native_rows(runner: Any, ids: Sequence[int], start: int) -> torch.Tensor | None:
    """Logits (n, vocab) after each of ``ids`` at positions start..start+n-1 from the native step's ``verify`` (the
    cache written as n steps write it), or None where the runner's decode does not take the native step: none built,
    a shared prefix (the Python step runs then), longrope's tables switching inside these positions (each step picks
    its own), or a library without ``verify``. The caller grows the cache first."""
    step = runner._native
    end = start + len(ids)
    if step is None or runner._kv.base != 0 or runner._long(start + 1) != runner._long(end) \
            or not has_native_verify(step):
        return None
    cos, sin = (runner._cos_long, runner._sin_long) if runner._long(end) else (runner._cos, runner._sin)
    x = torch.cat([embed_row(runner._w.embed, token) for token in ids])  # (n, d): as each step embeds its token
    return native_step.forward(step, runner._w, x, start, cos, sin, runner._kv, verify=True)


@torch.inference_mode()
def verify_rows(runner: Any, ids: Sequence[int], start: int, exact: RowExact) -> torch.Tensor:
    """Logits (n, vocab) after each of ``ids`` placed at positions start..start+n-1, written into the cache as
    ``runner``'s decode step writes them: the one Python step (``engine.executor.step.forward_rows``) over one runner
    and n tokens, ``exact`` keeping each row's one-row bits. The caller grows the cache first."""
    return forward_rows([runner] * len(ids), ids, range(start, start + len(ids)), exact)
