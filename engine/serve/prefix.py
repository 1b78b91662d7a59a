"""The server's prefix cache: a request's prompt starts from the longest token prefix any kept cache holds.

Before a session prefills a prompt (``PrefixCache.prepare``), the prompt's token ids are compared with what every
idle session of the ``SessionPool`` caches and, with ``engine serve --kv-store DIR``, with the snapshots saved in
that folder (``engine.generate.kv_store``). When another session or a file shares more leading tokens than the
routed session already holds (the same long system prompt in another conversation, a conversation reopened after a
restart), those rows are copied into the routed session (``ChatSession.restore``): its prefill then starts after
them, exactly as if it had computed them, and ``usage.prompt_tokens_details.cached_tokens`` and the vLLM counters
count them as hits. A file that is stale or damaged is deleted and recomputed (``miaohui:kv_store_discarded``).

Copies, not shared blocks: the fast runner's cache is one preallocated tensor per sequence, read in place by its
attention (``engine.generate.fastpath``), so sharing physical blocks between sequences would mean a block table
in every attention call - a rewrite of the runner and the batched step, not a change here. A copy of N rows costs
a memory copy of N x ``kv_bytes_per_token`` (a few ms for thousands of tokens on a CPU), against a prefill of N
tokens; the memory is each session's own, bounded by ``--sessions`` as before. The block design left for later:
fixed-size blocks (16 positions) in one pool with a free list, a block table per sequence, blocks keyed by the hash
of their tokens and everything before them, reference-counted and evicted LRU when free, attention reading through
the table (vLLM's paged attention).

Persistence: with a store, a session's cache is saved (key: a hash of its ids) when a request is about to
overwrite most of it (another conversation took its slot) and for every session when the server closes
(``save_all``); the store keeps its folder within its byte budget, least recently used first.

Runs on the thread that serves the request (it owns the routed session; a source session is borrowed, marked
busy, for the copy). Owns the choice of source and the counting; not the routing (``sessions``), the file format
or the folder (``engine.generate.kv_snapshot``, ``kv_store``).
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

from engine.generate.context import common_prefix
from engine.generate.kv_snapshot import KVIdentity, KVSnapshotError
from engine.generate.kv_store import KVStore, key_for_ids
from engine.serve.metrics import ServerMetrics
from engine.serve.sessions import SessionPool, Slot

log = logging.getLogger(__name__)

# Fewer shared tokens than this are recomputed, not copied: vLLM's default block size, the least its prefix cache
# reuses. Below it the common start is a chat template's role header, shared by every conversation.
MIN_SHARED_TOKENS = 16


class PrefixCache:
    """Shares prompt prefixes between the sessions of ``pool`` and, given a ``store``, across restarts."""

    def __init__(self, pool: SessionPool, metrics: ServerMetrics, store: KVStore | None = None) -> None:
        self._pool = pool
        self._metrics = metrics
        self.store = store
        self._identity: KVIdentity | None = None

    def _identity_of(self, session: Any) -> KVIdentity:
        if self._identity is None:
            self._identity = session.kv_identity()
        return self._identity

    def prepare(self, slot: Slot, ids: Sequence[int]) -> None:
        """Before ``slot``'s session prefills ``ids``: give it the longest kept prefix of them it lacks."""
        session = slot.session
        usable = len(ids) - 1  # the session computes the last prompt token anyway: its logits choose the reply
        held = session.cached_ids()
        best = common_prefix(held, ids)
        if best >= usable:
            return
        if self.store is not None and len(held) > 1 and best < len(held) // 2:
            self._save(session)  # another conversation is about to overwrite most of this one
        borrowed = self._pool.borrow(ids, slot)
        if borrowed is not None:
            source, shared = borrowed
            try:
                shared = min(shared, usable)
                if shared >= MIN_SHARED_TOKENS and shared > best:
                    session.restore(source.session.snapshot(shared))
                    best = shared
                    self._metrics.prefix_shared(shared)
            except KVSnapshotError as exc:  # a runner that cannot take rows (an 8-bit cache): recompute
                log.info("prefix not shared: %s", exc)
            finally:
                self._pool.release(source)
        if self.store is not None:
            self._from_store(session, ids, usable, best)

    def _from_store(self, session: Any, ids: Sequence[int], usable: int, best: int) -> None:
        identity = self._identity_of(session)
        key, stored = self.store.best(ids, identity)
        if min(stored, usable) <= max(best, MIN_SHARED_TOKENS - 1):
            return
        try:
            snapshot = self.store.load(key, identity)
            if snapshot is not None:
                session.restore(snapshot)
                self._metrics.store_loaded(min(stored, usable))
        except KVSnapshotError as exc:
            log.warning("discarded a saved KV cache: %s", exc)
            self._metrics.store_discarded()
        except OSError as exc:
            log.warning("cannot read the KV store: %s", exc)
        self._metrics.store_bytes(self.store.used_bytes())

    def _save(self, session: Any) -> None:
        snapshot = session.snapshot()
        if snapshot is None:
            return
        try:
            self.store.save(key_for_ids(snapshot.ids), snapshot, self._identity_of(session))
            self._metrics.store_bytes(self.store.used_bytes())
        except (OSError, ValueError) as exc:
            log.warning("cannot save a KV cache to %s: %s", self.store.folder, exc)

    def save_all(self) -> int:
        """Save every idle session's cache to the store (the server is closing); how many were saved."""
        if self.store is None:
            return 0
        saved = 0
        for slot in list(self._pool.slots):
            if not slot.busy and slot.session.cached_tokens > 1:
                self._save(slot.session)
                saved += 1
        return saved
