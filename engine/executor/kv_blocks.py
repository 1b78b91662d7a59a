"""Prefixes shared copy-free: a pool of fixed-size KV blocks, keyed by their tokens, reference-counted, evicted LRU.

``BlockPool`` holds the keys and values of ``BLOCK`` (16) positions per block, all layers, in one arena laid out as
the fast runner's own dense cache is, (layers, kv_heads, positions, head_dim) for K and for V, sized once by a byte
budget (``engine serve --prefix-cache-mb``; allocated empty, so pages are committed only as blocks are written).
A block is keyed by a hash of its 16 token ids and of its parent's key, i.e. of every token before it, so one key
names one exact prefix. ``publish(runner)`` adds the full blocks of what a fast runner caches that the pool lacks
(one copy into the arena, once per distinct prefix); ``acquire(ids)`` finds the longest chain of blocks that
starts ``ids``, counts a reference on each, and returns a ``SharedPrefix``: per layer, views of the arena, one per
run of consecutive slots (usually one: a prefix published by one request). ``FastRunner.attach`` then reads those rows in place as its first positions; its own cache
holds only what follows (``engine.executor.fastpath``). ``release`` drops the references. Blocks nobody
references stay as a cache and are evicted least recently used first (a block's descendants with it: a child is
unreachable without its parent) when a publish needs room; a referenced block is never evicted, so a publish
that finds no room simply keeps fewer blocks.

How a sequence attends to its shared prefix: its keys and values are joined to the sequence's own rows
(``torch.cat``, one per layer and step; ``SharedPrefix.join``), and the runner's usual attention runs on the
result, so the logits are bit for bit those of the same rows in one contiguous cache. The other way, two
attention parts (prefix, own tail) merged exactly by their log-sum-exp, avoids the join but doubles the
operations; measured per layer on this project's 2-core AMD EPYC (default model: 9 heads, 3 KV heads, 64 dims,
bf16; one decode query; a shared machine, so ratios only): at 150 positions (128 shared) the join added ~0%
to the SDPA call and the two-part fp32 merge cost 1.6x the joined fp32 attention; at 1,000 positions they were
even; at 4,000 (2,048 shared) the merge was ~7x cheaper than joining then attending in fp32. Decode steps of
chat-sized prompts are the many short ones, and the join keeps greedy text identical to an unshared cache, so
the join it is; a merged path for very long prefixes is left for when one is needed.

Thread-safe (one lock for the table); the arena's rows of a referenced block are never rewritten, so a forward
may read them on another thread. Dense caches only (an 8-bit cache's scales would need an arena of their own):
``engine.serve.prefix`` copies rows for the rest. Owns the table, the arena and the counts; not when a server
shares or publishes (``engine.serve.prefix``) or how attention reads the rows (``fastpath``).
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import threading
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

BLOCK = 16  # positions per block: vLLM's default block size
DEFAULT_BUDGET_BYTES = 256 << 20  # 256 MiB: ~11,600 tokens of the default model's bf16 cache


@dataclass(eq=False)
class _Block:
    key: bytes
    slot: int
    parent: "_Block | None"
    depth: int
    refs: int = 0
    used: int = 0  # a tick of the pool's clock: when a lookup last found it
    children: set["_Block"] = field(default_factory=set)


def _key(parent: bytes, tokens: Sequence[int]) -> bytes:
    return hashlib.blake2b(parent + b"|" + ",".join(map(str, tokens)).encode(), digest_size=16).digest()


class SharedPrefix:
    """The first ``len(ids)`` positions of a sequence, read in place from the pool's blocks (hold it, then
    ``BlockPool.release`` it once: ``FastRunner`` does both)."""

    def __init__(self, pool: "BlockPool", ids: tuple[int, ...], blocks: list[_Block]) -> None:
        self.pool = pool
        self.ids = ids
        self.blocks = blocks
        runs: list[tuple[int, int]] = []  # (first slot, end slot) of each run of consecutive slots
        for block in blocks:
            if runs and runs[-1][1] == block.slot:
                runs[-1] = (runs[-1][0], block.slot + 1)
            else:
                runs.append((block.slot, block.slot + 1))
        # the runs as (first row, end row) of the pool's arena, flattened: what the native step reads in place
        self.row_runs = [edge * BLOCK for run in runs for edge in run]
        self.rows_held = sum(b - a for a, b in runs) * BLOCK  # positions its runs hold (its length, as built)
        # per layer, a view of the arena per run (usually one: a prefix published by one request): nothing copied
        self.k_layers = tuple(tuple(pool.k[layer, :, a * BLOCK:b * BLOCK] for a, b in runs)
                              for layer in range(pool.k.shape[0]))
        self.v_layers = tuple(tuple(pool.v[layer, :, a * BLOCK:b * BLOCK] for a, b in runs)
                              for layer in range(pool.v.shape[0]))
        self.released = False

    def __len__(self) -> int:
        return len(self.ids)

    def join(self, layer: int, k_own: torch.Tensor, v_own: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """This prefix's K and V of ``layer`` followed by a sequence's own rows (kv_heads, n, head_dim)."""
        return torch.cat((*self.k_layers[layer], k_own), dim=1), torch.cat((*self.v_layers[layer], v_own), dim=1)

    def rows(self) -> tuple[torch.Tensor, torch.Tensor]:
        """All layers' K and V (layers, kv_heads, n, head_dim), copied out (a snapshot, ``engine.executor.kv_rows``)."""
        return (torch.stack([torch.cat(runs, dim=1) for runs in self.k_layers]),
                torch.stack([torch.cat(runs, dim=1) for runs in self.v_layers]))

    def shorter(self, n_blocks: int) -> "SharedPrefix | None":
        """A handle on the first ``n_blocks`` blocks (references moved: this one is released)."""
        if n_blocks >= len(self.blocks):
            return self
        keep = self.blocks[:n_blocks]
        self.pool.release(self, keep_from=n_blocks)
        return SharedPrefix(self.pool, self.ids[:n_blocks * BLOCK], keep) if keep else None


class BlockPool:
    """Blocks of ``BLOCK`` positions of one model's dense KV cache, at most ``budget_bytes`` of them."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int, dtype: torch.dtype, device: Any,
                 budget_bytes: int = DEFAULT_BUDGET_BYTES) -> None:
        self.geometry = (layers, kv_heads, head_dim, dtype)
        self.block_bytes = 2 * layers * kv_heads * BLOCK * head_dim * torch.empty(0, dtype=dtype).element_size()
        self.capacity = max(0, int(budget_bytes) // self.block_bytes)  # blocks
        self.budget_bytes = self.capacity * self.block_bytes
        # empty, not zeros: the OS commits a page when a block is first written into it
        self.k = torch.empty((layers, kv_heads, self.capacity * BLOCK, head_dim), dtype=dtype, device=device)
        self.v = torch.empty_like(self.k)
        self._free = list(range(self.capacity))  # a heap: the lowest slots first, so a prefix's blocks sit together
        self._blocks: dict[bytes, _Block] = {}
        self._lock = threading.Lock()
        self._clock = itertools.count(1)
        self.queries = 0  # tokens looked up (acquire), and found in blocks
        self.hits = 0

    @classmethod
    def for_runner(cls, runner: Any, budget_bytes: int = DEFAULT_BUDGET_BYTES) -> "BlockPool":
        """A pool for ``runner``'s model and dense cache (``FastRunner``)."""
        w = runner._w
        return cls(len(w.layers), w.kv_heads, w.head_dim, runner._k.dtype, runner._k.device, budget_bytes)

    def fits(self, runner: Any) -> bool:
        """Whether ``runner`` can read and publish this pool's blocks: a dense fast runner of the same geometry."""
        w = getattr(runner, "_w", None)
        return (w is not None and getattr(runner, "_kv8", True) is None and not getattr(runner, "_static", True)
                and (len(w.layers), w.kv_heads, w.head_dim, runner._k.dtype) == self.geometry)

    # -- counts (the server's /metrics) ---------------------------------------------------------------------
    @property
    def used_blocks(self) -> int:
        with self._lock:
            return len(self._blocks)

    @property
    def free_blocks(self) -> int:
        with self._lock:
            return self.capacity - len(self._blocks)

    @property
    def referenced_blocks(self) -> int:
        with self._lock:
            return sum(1 for b in self._blocks.values() if b.refs)

    # -- lookups --------------------------------------------------------------------------------------------
    def _chain(self, ids: Sequence[int], limit: int, root: bytes) -> list[_Block]:
        chain: list[_Block] = []
        parent = root
        for start in range(0, (min(limit, len(ids)) // BLOCK) * BLOCK, BLOCK):
            block = self._blocks.get(_key(parent, ids[start:start + BLOCK]))
            if block is None:
                break
            chain.append(block)
            parent = block.key
        return chain

    def acquire(self, ids: Sequence[int], limit: int | None = None, root: bytes = b"") -> SharedPrefix | None:
        """The longest chain of blocks that starts ``ids`` (at most ``limit`` tokens), referenced until released;
        None when not even one block matches. Counts ``queries`` and ``hits`` in tokens. ``root`` starts the chain's
        keys: blocks published under another root are never found (one root per cache scope)."""
        limit = len(ids) if limit is None else limit
        with self._lock:
            chain = self._chain(ids, limit, root)
            self.queries += max(0, min(limit, len(ids)))
            self.hits += len(chain) * BLOCK
            if not chain:
                return None
            tick = next(self._clock)
            for block in chain:
                block.refs += 1
                block.used = tick
            return SharedPrefix(self, tuple(int(i) for i in ids[:len(chain) * BLOCK]), chain)

    def release(self, prefix: SharedPrefix, keep_from: int = 0) -> None:
        """Drop ``prefix``'s references (from its block ``keep_from`` on: ``SharedPrefix.shorter``). Once only."""
        with self._lock:
            if prefix.released:
                return
            prefix.released = True
            for block in prefix.blocks[keep_from:]:
                block.refs -= 1

    # -- publishing -----------------------------------------------------------------------------------------
    def publish(self, ids: Sequence[int], read: Any, start: int = 0, root: bytes = b"") -> int:
        """Add the full blocks of ``ids`` the pool lacks, their rows from ``read(first, end)`` -> (K, V) each
        (layers, kv_heads, end - first, head_dim) for positions first..end-1 (only positions >= ``start`` are asked
        for: those before are the caller's own shared prefix, already here). Evicts unreferenced blocks least
        recently used first for room; stops when there is none. Blocks added."""
        added = 0
        with self._lock:
            parent: _Block | None = None
            tick = next(self._clock)
            for begin in range(0, (len(ids) // BLOCK) * BLOCK, BLOCK):
                key = _key(parent.key if parent else root, ids[begin:begin + BLOCK])
                block = self._blocks.get(key)
                if block is None:
                    if begin < start:
                        break  # the caller's shared prefix was evicted under it: nothing sound to chain onto
                    slot = self._take_slot(protect=parent)
                    if slot is None:
                        break
                    k, v = read(begin, begin + BLOCK)
                    where = slice(slot * BLOCK, (slot + 1) * BLOCK)
                    self.k[:, :, where].copy_(k)
                    self.v[:, :, where].copy_(v)
                    block = _Block(key, slot, parent, begin // BLOCK)
                    self._blocks[key] = block
                    if parent is not None:
                        parent.children.add(block)
                    added += 1
                block.used = max(block.used, tick)
                parent = block
        return added

    def _take_slot(self, protect: _Block | None) -> int | None:
        if not self._free:
            self._evict_one(protect)
        return heapq.heappop(self._free) if self._free else None

    def _evict_one(self, protect: _Block | None) -> None:
        """Evict the least recently used unreferenced block (deepest first among equals) and its descendants;
        never ``protect`` or its ancestors (a publish is chaining onto them)."""
        keep = set()
        while protect is not None:
            keep.add(protect)
            protect = protect.parent
        victims = [b for b in self._blocks.values() if not b.refs and b not in keep]
        if not victims:
            return
        victim = min(victims, key=lambda b: (b.used, -b.depth))
        stack = [victim]
        while stack:
            block = stack.pop()
            stack.extend(block.children)
            del self._blocks[block.key]
            heapq.heappush(self._free, block.slot)
        if victim.parent is not None:
            victim.parent.children.discard(victim)

    def clear(self) -> None:
        """Forget every unreferenced block."""
        with self._lock:
            while any(not b.refs for b in self._blocks.values()):
                before = len(self._blocks)
                self._evict_one(None)
                if len(self._blocks) == before:
                    break
