"""One decode step for several conversations at once: ``decode_batch(runners, token_ids)`` over their own caches.

Continuous batching (``engine.serve.batching``) keeps one ``engine.executor.fastpath.FastRunner`` per sequence:
each has its own static KV cache, its own length and its own ids, exactly as when it decodes alone. This step
runs the next token of every one of them in ONE forward, the decoder step itself (``engine.executor.step.forward_rows``:
n runners, one token each): the norms, fused q|k|v, o, gate|up and down projections and the LM head are single matrix
products over a (B, d) batch (on a CPU a decode step costs per operation far more than per row, so B rows cost little
more than one); RoPE is applied at each sequence's own position, and attention is per sequence over its own filled
cache prefix through the runner's own ``FastRunner.attend_position``, so sequences of different lengths need no
padding and never see each other. A batch of one is the runner's own ``decode``: bit for bit today's path.

Rows equal a sequence decoded alone, bit for bit, for dense weights: a matrix product's kernel may sum in another
order for B rows than for one (fp32 GEMM on x86 does; bf16 does for some shapes, e.g. the default model's MLP
down projection), and one rounding step is enough to turn a greedy reply elsewhere a few dozen tokens later. So
each dense projection is probed once per batch size (``rows_apart``: B rows at once against one at a time, on its
own weight); where they differ, that projection runs in the fastest form that gives each row its one-row bits,
chosen by ``probe`` among those probed exact and timed there: one ``torch.bmm`` of B one-row products (the weight
expanded to B: fp32's bmm reads it in place, bf16's copies it once per batch entry, which measured 7x slower than
row by row for the 576 x 1536 down projection), B one-row products through the weight packed once for oneDNN
(``engine.executor.row_products``: no per-call re-layout), or B plain one-row ``F.linear`` calls (always exact,
the fallback); the others stay one product, through the packed weight where ``probe`` found its B-row product
equal to the rows alone too (bf16 products measured ~1.7x faster packed; it costs a packed copy of every dense
weight the batch multiplies, about the model's dense size, while a server batches). ``BatchExact`` is that choice as
the step's ``engine.executor.step.Exactness``. Quantized weights are always one product: their kernels quantize and
multiply each row alone, so a row gets the native step's bits (tests/engine/executor/test_native_step.py). Where
every runner takes the native step, the whole batch is one native call instead (``miaohui::DecodeStep.batch``, each
row over its own cache): 8 sequences of the default model at int4 decoded 3.0× the tokens per second of the same 8 one
at a time, against 1.5× for the Python rows (2-core Xeon, one process alternated, load ~5, 2026-12-06).

Owns the batch's exactness (which form each projection takes for B rows); the step's operations are
``engine.executor.step``'s. Does not own scheduling (``engine.serve.batching``), sampling or text.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F

from engine.executor import native_step
from engine.executor.fastpath import FastRunner
from engine.executor.llama_fused import embed_row
from engine.executor.row_products import packed_rows
from engine.executor.step import forward_rows


def batchable(runner: Any) -> bool:
    """Whether ``runner`` can decode inside a batch: an eager ``FastRunner`` (a static or compiled one has its own
    captured step and runs alone)."""
    return isinstance(runner, FastRunner) and not runner._static and not runner._want_compile \
        and not runner._compiled


PROBE_ROWS = 64
HEAD_ROWS = 16
_ROWS_APART: dict[tuple[Any, ...], bool] = {}
# rows apart: the fastest exact form ("bmm", "packed" or "rows", see the module docstring)
_SPLIT_FORM: dict[tuple[Any, ...], str] = {}
TIMING_CALLS = 3  # calls of each exact form timed (their best) when choosing one
# rows together: whether the weight packed once for oneDNN gives F.linear's bits on B rows (then it runs packed)
_PACKED_SAME: dict[tuple[Any, ...], bool] = {}
_ROWS_LOCK = threading.Lock()


def rows_apart(weight: Any, batch: int, rows: int | None = None) -> bool:
    """Whether ``F.linear`` over ``batch`` rows gives other bits than one row at a time for ``weight`` (probed once per
    shape, layout, dtype and batch size, see ``probe``). False for a quantized module (never split)."""
    if not isinstance(weight, torch.Tensor) or batch < 2:
        return False
    with _ROWS_LOCK:
        known = _ROWS_APART.get(_key(weight, batch))
    if known is None:
        known = probe(weight, (batch,), rows or PROBE_ROWS)[batch]
    return known


def _key(weight: torch.Tensor, batch: int) -> tuple[Any, ...]:
    return tuple(weight.shape), weight.stride(), weight.dtype, weight.device.type, batch


def probe(weight: torch.Tensor, sizes: Sequence[int], rows: int | None = None) -> dict[int, bool]:
    """``rows_apart`` for each batch size in ``sizes``, from random rows each computed alone once and then in groups
    of every size. The kernel's summation order depends on the shapes, not the values, but a bf16 result hides most
    reorderings (the default model's down projection: about one row in ten differs), hence many rows."""
    rows = max(rows or PROBE_ROWS, *sizes)
    with torch.inference_mode():
        generator = torch.Generator(device=weight.device).manual_seed(rows)
        x = torch.randn(rows, weight.shape[1], generator=generator, device=weight.device).to(weight.dtype)
        alone = torch.cat([F.linear(x[i:i + 1], weight) for i in range(rows)])
        found, forms = {}, {}
        for batch in sizes:
            starts = range(0, rows - batch + 1, batch)
            found[batch] = any(not torch.equal(F.linear(x[i:i + batch], weight), alone[i:i + batch]) for i in starts)
            if found[batch]:
                forms[batch] = _fastest_exact(weight, x, alone, batch, starts)
        packed = packed_rows(weight, None)
        same = {batch: packed is not None and not found[batch]
                and all(torch.equal(packed(x[i:i + batch]), alone[i:i + batch]) for i in range(0, rows - batch + 1, batch))
                for batch in sizes}
    with _ROWS_LOCK:
        for batch, apart in found.items():
            _ROWS_APART[_key(weight, batch)] = apart
            _PACKED_SAME[_key(weight, batch)] = same[batch]
            if apart:
                _SPLIT_FORM[_key(weight, batch)] = forms[batch]
    return found


def _fastest_exact(weight: torch.Tensor, x: torch.Tensor, alone: torch.Tensor, batch: int, starts: range) -> str:
    """The quickest of ``_split``'s forms whose every group of ``batch`` rows of ``x`` equals ``alone`` bit for bit
    ("rows", plain one-row products, is exact by definition), each timed by its best of ``TIMING_CALLS`` calls."""
    best, best_s = "rows", float("inf")
    for form in ("bmm", "packed", "rows"):
        call = _split(form, weight, None)
        if call is None or (form != "rows" and not all(torch.equal(call(x[i:i + batch]), alone[i:i + batch])
                                                        for i in starts)):
            continue
        seconds = float("inf")
        for _ in range(TIMING_CALLS):
            t0 = time.perf_counter()
            call(x[:batch])
            seconds = min(seconds, time.perf_counter() - t0)
        if seconds < best_s:
            best, best_s = form, seconds
    return best


def _split(form: str, weight: torch.Tensor, bias: Any,
           call: Callable[[torch.Tensor], torch.Tensor] | None = None) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """x (B, in) -> (B, out), each row its one-row product, in ``form`` (None: that form is not available here).
    ``call``: the step plan's own projection, for "rows" (else ``F.linear``)."""
    if form == "bmm":
        return _bmm(weight) if bias is None else None
    if form == "packed":
        packed = packed_rows(weight, None) if bias is None else None
        return None if packed is None else lambda x: torch.cat([packed(x[i:i + 1]) for i in range(x.shape[0])])
    one = call or (lambda row: F.linear(row, weight, bias))
    return lambda x: torch.cat([one(x[i:i + 1]) for i in range(x.shape[0])])


def _bmm(weight: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    """x (B, in) -> (B, out) as B one-row products in one ``torch.bmm`` (the weight expanded, not copied)."""
    return lambda x: torch.bmm(x.unsqueeze(1), weight.t().unsqueeze(0).expand(x.shape[0], -1, -1)).squeeze(1)


def prepare(model: Any, largest: int) -> None:
    """Probe ``rows_apart`` for every dense projection shape of ``model`` and batch sizes 2..``largest`` now (a server
    starting), so no request's step pays for a probe."""
    from engine.executor.llama_fused import weights_for

    w = weights_for(model)
    sizes = list(range(2, largest + 1))
    if not sizes:
        return
    shapes: dict[tuple[Any, ...], torch.Tensor] = {}
    for layer in w.layers:
        for weight in (layer.qkv, layer.o, layer.gate_up, layer.down):
            if isinstance(weight, torch.Tensor):
                shapes.setdefault(_key(weight, 0), weight)
    for weight in shapes.values():
        probe(weight, sizes)
    if isinstance(w.lm_head, torch.Tensor):
        # The head's rounding reaches no cache (only this step's logits), and each of its rows is costly: fewer.
        probe(w.lm_head, sizes, HEAD_ROWS)
    # Pack now every weight a batch will multiply packed, so no request's step pays for the copies.
    heads = (w.lm_head,) if isinstance(w.lm_head, torch.Tensor) else ()
    for weight in [wt for layer in w.layers for wt in (layer.qkv, layer.o, layer.gate_up, layer.down)] + list(heads):
        if isinstance(weight, torch.Tensor) and any(
                _PACKED_SAME.get(_key(weight, b)) or _SPLIT_FORM.get(_key(weight, b)) == "packed" for b in sizes):
            packed_rows(weight, None)


def _exact(call: Callable[[torch.Tensor], torch.Tensor], weight: Any, batch: int,
           bias: Any = None) -> Callable[[torch.Tensor], torch.Tensor]:
    """``call`` (a projection of the step plan) as one product, or where ``rows_apart`` says so in the fastest form
    ``probe`` found exact (a form that needs no bias, on a projection with one: row by row through ``call``)."""
    if not isinstance(weight, torch.Tensor):  # a quantized module: one product, its rows independent
        return call
    if not rows_apart(weight, batch):
        packed = packed_rows(weight, None) if bias is None and _PACKED_SAME.get(_key(weight, batch)) else None
        return packed or call
    form = _SPLIT_FORM.get(_key(weight, batch), "rows")
    chosen = None if form == "rows" else _split(form, weight, bias)
    return chosen or _split("rows", weight, bias, call)  # type: ignore[return-value]


def same_model(a: FastRunner, b: FastRunner) -> bool:
    """Two runners over the same fused weights (one model): only those may share a step."""
    return a._w is b._w


def decode_batch(runners: Sequence[FastRunner], token_ids: Sequence[int]) -> torch.Tensor:
    """Append ``token_ids[i]`` to ``runners[i]`` (each at its own next position) in one forward: logits (B, vocab)."""
    if len(runners) != len(token_ids) or not runners:
        raise ValueError("decode_batch needs one token per runner, and at least one")
    if len(runners) == 1:
        return runners[0].decode(token_ids[0])
    first = runners[0]
    if any(not same_model(first, r) for r in runners[1:]):
        raise ValueError("a batch must be of one model")
    positions = []
    for runner in runners:
        pos = len(runner._ids)
        runner._ensure(pos + 1)
        positions.append(pos)
    with torch.inference_mode():
        logits = _native_batch(runners, token_ids, positions)
        if logits is None:
            logits = forward_rows(runners, token_ids, positions, BatchExact(len(runners)))
    for runner, token_id in zip(runners, token_ids):
        runner._ids.append(int(token_id))
    return logits


def _native_batch(runners: Sequence[FastRunner], token_ids: Sequence[int], positions: Sequence[int]
                  ) -> torch.Tensor | None:
    """The batch in one native call (``miaohui::DecodeStep.batch``: each row the bits of that runner's own native
    step, a shared prefix read in place; 8-bit caches: ``batch_q8``), or None where a runner cannot take its native step
    (none, or a RoPE offset), the caches are of both kinds or the rows need different RoPE tables (longrope's)."""
    if any(r._native is None or r.rope_offset or r._kv.base != r._kv.held_in_prefix for r in runners) \
            or len({r._kv8 is None for r in runners}) > 1:
        return None
    pools = {id(r._kv.prefix.pool) for r in runners if r._kv.base}
    if len(pools) > 1:  # prefixes from two pools (never, with one pool per model): the Python rows join them
        return None
    longs = {r._long(pos + 1) for r, pos in zip(runners, positions)}
    if len(longs) != 1:
        return None
    widest = max(runners, key=lambda r: r._capacity)  # its tables cover every row's position
    cos, sin = (widest._cos_long, widest._sin_long) if longs.pop() else (widest._cos, widest._sin)
    first = runners[0]
    x = torch.cat([embed_row(first._w.embed, int(t)) for t in token_ids])
    if first._kv8 is not None:
        return native_step.forward_batch_q8(first._native, first._w, x, positions, cos, sin, [r._kv for r in runners])
    return native_step.forward_batch(first._native, first._w, x, positions, cos, sin, [r._kv.k for r in runners],
                                     [r._kv.v for r in runners], FastRunner.native_prefix(runners))


class BatchExact:
    """``engine.executor.step.Exactness`` for a batch of ``batch`` rows: each dense projection as one product, or
    where ``rows_apart`` says so in the fastest exact form (``_exact``); norms over all rows at once (they reduce each
    row alone); quantized modules as one product (their rows are independent)."""

    def __init__(self, batch: int) -> None:
        self.batch = batch

    def project(self, kind: str, index: int, call: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor,
                weight: Any, bias: Any) -> torch.Tensor:
        if kind == "head":
            rows_apart(weight, self.batch, HEAD_ROWS)  # probed with fewer rows (see prepare), then known to _exact
        return _exact(call, weight, self.batch, bias)(x)

    def norm(self, kind: str, norm: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], x: torch.Tensor,
             weight: torch.Tensor) -> torch.Tensor:
        return norm(x, weight)
