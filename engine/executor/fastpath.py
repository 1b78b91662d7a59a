"""A faster runner for the Llama-shaped families (Gemma 2/3, Phi-3 too): a static KV cache and few operations per step.

Owns ``FastRunner`` (the ``engine.executor.runners.Runner`` interface, like ``engine.executor.runner.ModelRunner``:
chunked prefill, one-token decode, crop, measured KV bytes): its preallocated cache, RoPE tables and the
forward passes over them. The forward pass is a compact re-implementation of transformers' Llama decoder
(RMSNorm, RoPE from the model's own rotary embedding, grouped-query attention, SiLU MLP, tied or untied
lm_head) with what the families in ``engine.executor.families`` switch on (projection biases, per-head q/k
norms; Gemma 3's (1 + w) norms after attention and MLP too, scaled embeddings, tanh-GELU, and sliding-window
layers that attend to their last ``window`` positions with their own RoPE table; Gemma 2's soft-capped attention
and logits; Phi-3's partial rotary and longrope, whose short or long table each forward call picks by its last
position as transformers' does), reading the model's weights;
it never changes them. Sliding layers keep every position in the cache like global ones (simple, exact; the
memory a ring buffer would save is left for later).

Why it is faster at batch 1: decode is dominated by per-operation overhead (a small GEMV costs tens
of microseconds whatever its size), so each layer runs 4 matrix products instead of 7 (q|k|v and
gate|up fused, ``engine.executor.llama_fused``), the KV cache is allocated once and written in place (no
``torch.cat`` per token, crop is O(1)), RoPE tables are computed once, and attention reads the
filled cache prefix in place (GQA inside the kernel, no ``repeat_kv`` copies). On CUDA a static-shape
step (``static=True``) can be captured as a CUDA graph with ``torch.compile(mode="reduce-overhead")``.

Weight-only int8/int4 models (``engine/quant/quant.py``) run here too: the step calls the packed kernels
directly (where it can, the whole step is one native call, ``engine.executor.native_step``, with the same bits as
the Python step), and prefill runs on the kernel or dequantizes one projection at a time for its matrix product,
as measured per model (``engine.executor.prefill_forms``). A decode step's attention runs as fp32 products (``attend_one``) for quantized models and, past ``EXACT_ATTENTION_POSITIONS``, for dense
ones on a CPU: SDPA's CPU kernel costs ~2 ms per layer for one query over 4,096 positions.

``kv_precision="int8"`` keeps the cache as int8 with a scale per (layer, KV head, position), about half the bytes
(``engine.executor.kv_cache``; attention then always in fp32 products, no exactness promise; the native step takes
it). ``attend_position`` writes and attends one token's K and V for the one Python decoder step
(``engine.executor.step``: the eager decode, ``verify``'s k tokens and ``engine.executor.batched``'s n runners).
``attach(prefix)`` starts a dense eager runner's cache with a prefix shared copy-free from a pool
(``engine.executor.kv_blocks``): its own buffers then hold only the positions after it, every read joins the two
(bit for bit the same attention), and ``on_prefilled`` (if set) is called after each completed prefill (the server
publishes the prompt's blocks there). ``prefill(ids, embeds=...)`` reads given input embeddings instead of the ids'
rows (a vision model's prompt with its image features merged: ``engine.vision.turn``), and ``layout=`` (a vision
family's own positions and mask, ``engine.vision.layouts``) with ``rope_offset`` (decode's RoPE row: position + offset).

Does not own which models qualify, the fused weights or the per-operation math (``engine.executor.llama_fused``),
nor the choice between this runner and the plain one (``engine.executor.runners.make_runner``); does not know
text, templates, sampling or timing.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Iterator, Sequence

import torch
import torch.nn.functional as F

from engine.cpu import native_gemm
from engine.executor import native_step, prefill_forms
from engine.executor.families import refusal
from engine.executor.kv_cache import DenseKVCache, Int8KVCache
from engine.executor.llama_fused import (attend_one, capped_attention, embed, embed_row, project, rotate, step_plan,
                                        weights_for)
from engine.executor.prompt_attention import chunk_attention
from engine.executor.step import forward_rows
from engine.executor.rope_tables import context_rope, rope_tables
from engine.executor.static_step import decode_static, mark_static
from engine.executor.runner import ModelRunner, model_device

log = logging.getLogger(__name__)

# First cache allocation in positions; it doubles when full (rare, amortised), capped at the context.
INITIAL_CAPACITY = 1024
QUANTIZED_PREFILL_CHUNK = 1024  # smallest prefill chunk for int8/int4 weights (see FastRunner.prefill)
# Dense weights: below this many cached positions a decode step's attention is transformers' own SDPA call,
# so logits are bit-identical to transformers' and greedy text equals generate()'s (what the bench and the
# tests check); from here on it is ``attend_one`` (fp32 products, within bf16 rounding of SDPA), whose cost
# grows far more slowly with the context. Quantized weights have no exact reference: always ``attend_one``.
EXACT_ATTENTION_POSITIONS = 256


class FastRunner(ModelRunner):
    """Forward passes over a preallocated KV cache (layers, kv_heads, capacity, head_dim) for K and V.

    Same contract as ``ModelRunner``. Positions at or past ``cached_len`` may hold stale values: they
    are never read and are overwritten by the next write, so crop just forgets ids and an interrupted
    forward cannot corrupt the valid prefix.

    ``upcast_prefill`` (default: only on CPUs without a native bf16/fp16 kernel) runs prefill's matrix
    products in fp32 on exactly upcast bf16/fp16 operands.

    ``static=True`` uses a step whose tensor shapes never change (attention over the whole capacity with
    a mask, position given as a tensor): what CUDA graphs need. ``compile=True`` wraps the decode step
    in ``torch.compile`` (``mode="reduce-overhead"`` on CUDA), falling back to eager on any failure;
    ``compile_s`` then reports the time the first compiled step took.

    ``kv_precision``: ``"auto"`` (the cache in the model's dtype) or ``"int8"`` (``Int8KVCache``)."""

    def __init__(self, model: Any, *, max_positions: int | None = None, static: bool = False,
                 compile: bool = False, initial_capacity: int = INITIAL_CAPACITY,
                 upcast_prefill: bool | None = None, kv_precision: str = "auto") -> None:
        refused = refusal(model)
        if refused is not None:
            raise ValueError(f"fast path not available: {refused}")
        if kv_precision not in ("auto", "int8"):
            raise ValueError(f"unknown KV cache precision {kv_precision!r}: auto or int8")
        self._w = weights_for(model)
        self._dtype = self._w.embed.dtype
        device = model_device(model)
        self.kv_precision = kv_precision
        shape = (len(self._w.layers), self._w.kv_heads, self._w.head_dim, self._dtype, device)
        self._kv8 = Int8KVCache(*shape) if kv_precision == "int8" else None
        self._kv = self._kv8 or DenseKVCache(*shape)
        limit = max_positions or getattr(model.config, "max_position_embeddings", None) or 4096
        # dynamic RoPE: exact up to max_position_embeddings only; longrope: the length past which a forward call
        # reads the long tables (engine.executor.rope_tables)
        self._max_positions, self._long_after = context_rope(model.config, limit)
        self._static = static
        self._capacity = 0
        self._k = self._v = torch.empty(0)
        # RoPE tables (capacity, head_dim), one per FusedWeights.rope_kinds (Gemma 3: global and local bases)
        self._cos: tuple[torch.Tensor, ...] = ()
        self._sin: tuple[torch.Tensor, ...] = ()
        self._cos_long: tuple[torch.Tensor, ...] = ()  # longrope's long-frequency tables (else empty)
        self._sin_long: tuple[torch.Tensor, ...] = ()
        self._rotary = model.model.rotary_emb
        self._device = device
        self.on_prefilled: Callable[["FastRunner"], None] | None = None  # after a prefill's last chunk
        self.rope_offset = 0  # decode's RoPE row is position + offset (M-RoPE's text after images, engine.vision)
        self._grow(self._max_positions if static else min(initial_capacity, self._max_positions))
        self.compile_s: float | None = None
        self._step: Callable[..., torch.Tensor] = self._decode_static if static else self._decode_eager
        self._compiled = False
        self._want_compile = compile
        if upcast_prefill is None:  # auto: only where the low-precision kernel is the slow generic one
            upcast_prefill = device.type == "cpu" and not native_gemm(self._dtype)
        self._upcast_prefill = upcast_prefill
        self._quantized = not isinstance(self._w.layers[0].qkv, torch.Tensor) if self._w.layers else False
        self._cpu = device.type == "cpu"  # CUDA's SDPA kernels stay fast for one query: attend_one is for CPUs
        self._forms = prefill_forms.forms_for(model, self._w)  # int4 prompt chunks: kernel or dense, measured
        self._plan = step_plan(self._w, self._quantized)  # the eager decode step's weights as plain calls
        # the quantized step in one native call where it can run (engine.executor.native_step), else None and why
        self.native_step_reason = native_step.why_not(self._w, self._dtype, self._kv8 is None) \
            if self._plan.native and not static and not compile else "not a quantized eager CPU step"
        self._native = native_step.build(self._w) if self.native_step_reason is None else None
        super().__init__(model, use_kv_cache=True)
        if static:
            self._pos_t = torch.zeros(1, dtype=torch.long, device=device)  # (1,) position of the step
            self._positions = torch.arange(self._max_positions, device=device)  # (capacity,)
            if compile:
                self._mark_static()

    def _mark_static(self) -> None:
        mark_static(self)

    # -- cache -------------------------------------------------------------------------------------
    def _grow(self, capacity: int, own: int | None = None) -> None:
        """Grow the cache to ``own`` positions of its own (default ``capacity``; fewer after a shared prefix) and the
        RoPE tables to ``capacity`` positions, each only if larger, keeping what is cached."""
        w = self._w
        own = capacity if own is None else own
        if own > self._kv.capacity:
            self._kv.grow(own)
            if self._kv8 is None:  # the dense buffers and per-layer views, as batched steps and snapshots read them
                self._k, self._v, self._k_layers, self._v_layers = self._kv.k, self._kv.v, *self._kv.layers()
        if capacity <= self._capacity:
            return
        with torch.inference_mode():
            probe = torch.empty(1, dtype=self._dtype, device=self._device)
            (self._cos, self._sin), long = rope_tables(self._rotary, w.rope_kinds, capacity, self._long_after, probe)
            if long is not None:
                self._cos_long, self._sin_long = long
        self._capacity = capacity

    def _long(self, end: int) -> bool:
        """Whether a forward call whose last position is ``end - 1`` reads longrope's long tables."""
        return self._long_after is not None and end > self._long_after

    def _ensure(self, positions: int) -> None:
        if positions > self._max_positions:
            raise ValueError(f"{positions} positions exceed the model's context of {self._max_positions}")
        own = positions - self._kv.base  # positions after a shared prefix are the cache's own
        if positions > self._capacity or own > self._kv.capacity:
            capacity, own_capacity = self._capacity, max(1, self._kv.capacity)
            while capacity < positions:
                capacity *= 2
            while own_capacity < own:
                own_capacity *= 2
            self._grow(min(capacity, self._max_positions), min(own_capacity, self._max_positions))

    def reset(self) -> None:
        """Forget every cached position (the buffers stay allocated for reuse; a shared prefix is released)."""
        if self._kv.prefix is not None:
            self._kv.detach()
        self._ids = []
        self._dirty = False

    def crop(self, n: int) -> None:
        """Keep the first ``n`` positions: O(1), later positions are simply overwritten. Inside a shared prefix, only
        its whole blocks up to ``n`` stay (``cached_len`` says how many)."""
        del self._ids[self._kv.shorten(max(0, n)) if n < self._kv.base else max(0, n):]

    def attach(self, prefix: Any) -> None:
        """Hold ``prefix`` (an ``engine.executor.kv_blocks.SharedPrefix``) as the cached positions, read in place;
        what was cached is forgotten. ``ValueError`` for a static or 8-bit cache (they cannot read a pool)."""
        if self._static or self._kv8 is not None:
            raise ValueError("only a dense eager cache reads a shared prefix")
        self._kv.attach(prefix)
        self._ids, self._dirty = list(prefix.ids), False

    def kv_bytes(self) -> tuple[int, int]:
        """(filled, allocated) bytes of the key and value buffers (an int8 cache's scales included; a shared prefix
        is the pool's, not counted here)."""
        return self._kv.bytes_per_position * (len(self._ids) - self._kv.base), self._kv.nbytes

    def attend_position(self, index: int, pos: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                        window: int | None) -> torch.Tensor:
        """Write one token's key and value (KV, D) at ``pos`` of layer ``index``; return its query's (H, D) attention
        over what the layer sees (its last ``window`` when sliding), (1, H·D). Int8: ``Int8KVCache.attend_one``."""
        w = self._w
        first = 0 if window is None else max(0, pos + 1 - window)
        if self._kv8 is not None:
            self._kv8.write(index, pos, k[:, None], v[:, None])
            return self._kv8.attend_one(index, q, first, pos + 1, w.scaling, w.attn_softcap)
        own = pos - self._kv.base  # after a shared prefix, the cache's own index of pos
        self._k_layers[index].select(1, own).copy_(k)  # (KV, capacity, D) per layer
        self._v_layers[index].select(1, own).copy_(v)
        k_seen, v_seen = self._kv.read(index, first, pos + 1)  # views (a shared prefix: joined to them)
        if w.attn_softcap is not None and not self._plan.native:  # the native plan caps in attend_one, as its step
            return capped_attention(q[:, None], k_seen, v_seen, w.scaling, w.attn_softcap, None)
        if self._quantized or (pos >= EXACT_ATTENTION_POSITIONS and self._cpu):
            # fp32 products: faster than SDPA for one query, 1.2x a token at ~500 positions, 1.5-2.5x at ~2,000
            # (measured on the default model, bf16 and int4)
            return attend_one(q, k_seen, v_seen, w.scaling, w.attn_softcap)
        # the SDPA call transformers makes for one query (GQA in the kernel, no mask): its bf16 rounding is then
        # identical, so greedy text matches generate()'s
        return F.scaled_dot_product_attention(q.view(1, w.heads, 1, w.head_dim), k_seen[None], v_seen[None],
                                              scale=w.scaling, enable_gqa=True).view(1, w.heads * w.head_dim)

    # -- forward passes --------------------------------------------------------------------------
    @torch.inference_mode()
    def _forward_chunk(self, ids: torch.Tensor, start: int, every: bool = False,
                       long: bool | None = None, embeds: torch.Tensor | None = None,
                       layout: Any = None) -> torch.Tensor:
        """Logits (1, vocab) of the last of ``ids`` (n,) placed at positions start..start+n-1; with ``every``,
        (n, vocab) of all of them (``verify``). ``long``: longrope's long tables (None: as transformers chooses
        for this call alone, by its last position). ``embeds`` (n, d): the input embeddings to use instead of the
        ids' rows, as the model's own ``inputs_embeds`` (a vision model's image features merged in; not scaled again)."""
        w = self._w
        n = ids.shape[0]
        end = start + n
        heads, kvh, dim = w.heads, w.kv_heads, w.head_dim
        long = self._long(end) if long is None else long
        ropes = [(cos[start:end, None, :], sin[start:end, None, :])  # (n, 1, head_dim): broadcast over heads
                 for cos, sin in zip(*((self._cos_long, self._sin_long) if long else (self._cos, self._sin)))]
        extra = None if layout is None else layout.allowed(start, end, self._device)  # (n, end): seen beyond causal
        ropes = ropes if layout is None else layout.ropes(start, end, self._dtype) or ropes
        x = embed(w.embed, ids) if embeds is None else embeds.to(self._dtype)  # (n, d)
        if w.embed_scale is not None and embeds is None:
            x = x * w.embed_scale
        masks: dict[int | None, torch.Tensor | None] = {None: None}
        if start or extra is not None:  # query i (at start+i) sees keys 0..start+i, and those the layout adds
            causal = torch.ones(n, end, dtype=torch.bool, device=x.device).tril(diagonal=start)  # (n, end)
            masks[None] = causal if extra is None else causal | extra
        linear, norm = self._prefill_linear, w.norm
        for index, layer in enumerate(w.layers):
            if layer.window not in masks:  # a sliding layer: query i also sees only keys after start+i-window
                keys, queries = torch.arange(end, device=x.device), torch.arange(start, end, device=x.device)[:, None]
                masks[layer.window] = ((keys <= queries) if extra is None else (keys <= queries) | extra) \
                    & (keys > queries - layer.window)
            mask = masks[layer.window]
            cos, sin = ropes[layer.rope]
            h = norm(x, layer.attn_norm)
            qkv = linear(h, layer.qkv, layer.qkv_bias)  # (n, (H + 2KV) * D)
            qk = qkv[:, :(heads + kvh) * dim].view(n, heads + kvh, dim)
            if layer.qk_norm is not None:  # Qwen3, Gemma 3: each head normed before RoPE
                qk = norm(qk, layer.qk_norm)
            qk = rotate(qk, cos, sin)  # (n, H+KV, D)
            k_new = qk[:, heads:].transpose(0, 1)  # (KV, n, D)
            v_new = qkv[:, (heads + kvh) * dim:].view(n, kvh, dim).transpose(0, 1)
            self._kv.write(index, start, k_new, v_new)
            k_seen, v_seen = self._kv.read(index, 0, end)  # int8: the stored keys, this chunk's too
            q = qk[:, :heads].transpose(0, 1)  # (H, n, D)
            plain = self._quantized and extra is None and layer.window is None  # the native form may run
            attn = chunk_attention(q, k_seen, v_seen, start, w.scaling, mask, w.attn_softcap, plain)
            out = linear(attn, layer.o, layer.o_bias)
            x = x + (out if layer.post_attn_norm is None else norm(out, layer.post_attn_norm))
            h = norm(x, layer.mlp_norm)
            gate_up = linear(h, layer.gate_up, layer.gate_up_bias)  # (n, 2I)
            out = linear(w.act(gate_up[:, :w.intermediate]) * gate_up[:, w.intermediate:], layer.down, layer.down_bias)
            x = x + (out if layer.post_mlp_norm is None else norm(out, layer.post_mlp_norm))
            x = x if layout is None else layout.after_layer(index, start, x)  # Qwen3-VL's deepstack features
        h = norm(x if every else x[-1:], w.final_norm)
        return w.cap_logits(project(h, w.lm_head))  # (1 or n, vocab)

    def _prefill_linear(self, x: torch.Tensor, weight: torch.Tensor,
                        bias: torch.Tensor | None = None) -> torch.Tensor:
        """A prefill matrix product; on CPUs without a native bf16/fp16 kernel it runs in fp32 on exactly
        upcast operands and rounds the result once, which is what a bf16 GEMM with fp32 accumulation
        computes, only in another summation order (so logits may differ by a rounding step). Decode
        (one row) keeps the model's precision: there the upcast would cost more than it saves."""
        rows = x.shape[0]
        if not isinstance(weight, torch.Tensor):  # quantized: dense GEMM on a dequantized copy for many rows
            if self._forms.wants_probe(weight, rows):  # time both forms (engine/executor/prefill_forms.py)
                dense = lambda xs, module, b=None: self._prefill_linear(xs, module.dequantize(), b)  # noqa: E731
                if self._forms.choice is not None:  # a recheck: both forms of this product, the chosen one's result
                    return self._forms.probe(lambda: project(x, weight, bias), lambda: dense(x, weight, bias), rows)
                self._forms.settle(rows, x.dtype, dense)  # the first long chunk: choose on random rows, then compute
            if rows <= weight.kernel_rows or not weight.can_dequantize:
                return project(x, weight, bias)
            weight = weight.dequantize()
        if self._upcast_prefill and rows > 1:
            return F.linear(x.float(), weight.float(), None if bias is None else bias.float()).to(x.dtype)
        if bias is not None and bias.dtype != x.dtype:  # a quantized module's fp32 bias: added, rounded once
            return F.linear(x, weight).add_(bias)
        return F.linear(x, weight, bias)

    def _decode_eager(self, token_id: int, pos: int) -> torch.Tensor:
        """One token at ``pos``: logits (1, vocab). The native step where it runs (the whole step in one call,
        ``engine.executor.native_step``; it reads RoPE row = position, so not with an offset), else the one Python
        step (``engine.executor.step``) over one row."""
        if self._native is not None and not self.rope_offset and self._kv.base == self._kv.held_in_prefix:
            long = self._long(pos + 1)
            cos, sin = (self._cos_long, self._sin_long) if long else (self._cos, self._sin)
            x = embed_row(self._w.embed, token_id)
            if self._kv.base == 0:
                return native_step.forward(self._native, self._w, x, pos, cos, sin, self._kv)
            return native_step.forward_batch(self._native, self._w, x, [pos], cos, sin, [self._kv.k], [self._kv.v],
                                             self.native_prefix([self]))
        return forward_rows((self,), (token_id,), (pos,))

    @staticmethod
    def native_prefix(runners: Sequence["FastRunner"]) -> tuple[list[int], torch.Tensor, torch.Tensor, list[list[int]]]:
        """``DecodeStep.batch``'s prefix arguments for ``runners`` (of one model): each one's base, the pool its shared
        prefix reads (an empty tensor where none has one) and its runs of pool rows."""
        prefixes = [r._kv.prefix if r._kv.base else None for r in runners]
        pool = next((p.pool for p in prefixes if p is not None), None)
        empty = torch.empty(0)
        return ([r._kv.base for r in runners], empty if pool is None else pool.k, empty if pool is None else pool.v,
                [[] if p is None else p.row_runs for p in prefixes])

    def _decode_static(self, token: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        return decode_static(self, token, pos)

    def _maybe_compile(self) -> None:
        """Compile the step once, on first use; any failure leaves the eager step in place."""
        self._want_compile = False
        mode = "reduce-overhead" if self._device.type == "cuda" else None
        try:
            self._step = torch.compile(self._step, mode=mode, dynamic=not self._static)
            self._compiled = True
        except Exception as exc:  # noqa: BLE001  (compilation is an optimisation, never a failure)
            log.warning("torch.compile unavailable, decoding eagerly: %s", exc)

    # -- the ModelRunner interface ------------------------------------------------------------------
    def prefill(self, ids: Sequence[int], cancel: threading.Event | None = None, chunk: int = 256,
                embeds: torch.Tensor | None = None, layout: Any = None) -> Iterator[tuple[int, torch.Tensor | None]]:
        """Append ``ids`` ``chunk`` tokens per forward; yields ``(done, logits or None)`` like ModelRunner.
        ``embeds`` (len(ids), d): their input embeddings, given (``engine.vision.turn``: image features merged).
        ``layout`` (``engine.vision.layouts``): ``chunk_end(start, end)`` moves a chunk's end out of a block of
        positions that see each other both ways, ``ropes(start, end, dtype)`` gives the chunk's (cos, sin) per RoPE
        kind or None, ``allowed(start, end, device)`` the keys each query sees beyond causal ((n, end) bool) or None,
        ``after_layer(index, start, x)`` the chunk's hidden states after layer ``index``."""
        total = len(ids)
        if total == 0:
            raise ValueError("prefill needs at least one token")
        if self._quantized:
            # Each chunk dequantizes every projection once for its matrix products, so fewer, larger
            # chunks cost fewer dequantizations (measured: two 256-token chunks of int4 spent more time
            # dequantizing than multiplying). Stop is then checked every QUANTIZED_PREFILL_CHUNK tokens.
            chunk = max(chunk, QUANTIZED_PREFILL_CHUNK)
        self._ensure(len(self._ids) + total)
        ids_t = torch.tensor(list(ids), dtype=torch.long, device=self._device)  # (total,)
        done = 0
        while done < total:
            if cancel is not None and cancel.is_set():
                return
            end = min(total, done + chunk)
            if layout is not None:
                end = min(total, layout.chunk_end(len(self._ids), len(self._ids) + end - done) - len(self._ids) + done)
            # longrope: one set for the whole call, chosen by its last position as transformers' one forward would
            logits = self._forward_chunk(ids_t[done:end], len(self._ids), long=self._long(len(self._ids) + total - done),
                                         embeds=None if embeds is None else embeds[done:end], layout=layout)
            self._ids.extend(ids[done:end])
            done = end
            if done == total and self.on_prefilled is not None:
                self.on_prefilled(self)
            yield done, logits if done == total else None

    def verify(self, ids: Sequence[int]) -> torch.Tensor:
        """Append ``ids`` in one forward and return the logits after each of them (len(ids), vocab): how
        speculative decoding (``engine.speculate``) checks drafted tokens; ``crop`` then drops the rejected."""
        from engine.executor.verify import RowExact, native_rows, verify_rows  # lazy: only speculation

        self._ensure(len(self._ids) + len(ids))
        logits = native_rows(self, ids, len(self._ids))  # the native step's own verify, where it decodes natively
        if logits is None:
            if not hasattr(self, "_row_exact"):
                self._row_exact = RowExact()  # which projections batch rows exactly as one-row calls compute them
            logits = verify_rows(self, ids, len(self._ids), self._row_exact)  # exactly what len(ids) decodes give
        self._ids.extend(ids)
        return logits

    def score(self, ids: Sequence[int], chunk: int = 128) -> torch.Tensor:
        """Append ``ids`` ``chunk`` tokens per prefill forward and return the logits after each (len(ids), vocab):
        teacher-forced scoring, every query reading the cache as stored (``engine.bench.kv_cache``)."""
        self._ensure(len(self._ids) + len(ids))
        ids_t = torch.tensor(list(ids), dtype=torch.long, device=self._device)
        rows = []
        for start in range(0, len(ids), chunk):
            rows.append(self._forward_chunk(ids_t[start:start + chunk], len(self._ids), every=True))
            self._ids.extend(ids[start:start + chunk])
        return torch.cat(rows)

    def decode(self, token_id: int) -> torch.Tensor:
        """Append one token and return the next position's logits (1, vocab)."""
        pos = len(self._ids)
        self._ensure(pos + 1)
        if self._want_compile:
            self._maybe_compile()
        with torch.inference_mode():
            if self._static:
                self._step_input.fill_(token_id)
                self._pos_t.fill_(pos)
                args: tuple[Any, ...] = (self._step_input[0], self._pos_t)
            else:
                args = (token_id, pos)
            if self._compiled and self.compile_s is None:
                t0 = time.perf_counter()
                logits = self._run_step(args)
                self.sync()
                self.compile_s = time.perf_counter() - t0
            else:
                logits = self._run_step(args)
        self._ids.append(token_id)
        return logits

    def _run_step(self, args: tuple[Any, ...]) -> torch.Tensor:
        try:
            logits = self._step(*args)
        except Exception as exc:  # noqa: BLE001
            if not self._compiled:
                raise
            log.warning("compiled decode step failed, decoding eagerly from now on: %s", exc)
            self._compiled = False
            self._step = self._decode_static if self._static else self._decode_eager
            logits = self._step(*args)
        if self._compiled and self._device.type == "cuda":
            logits = logits.clone()  # a CUDA-graph output is overwritten by the next replay
        return logits
