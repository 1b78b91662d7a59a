"""The server's prefix cache: a request's prompt starts from the longest token prefix any kept cache holds.

Shared copy-free (issue 29): the fast runner's dense caches publish their full 16-token blocks into one
``engine.executor.kv_blocks.BlockPool`` per server (at the end of each prompt's prefill, through the runner's
``on_prefilled``, and when a request ends, its reply too), each block keyed by its tokens and all before it. Before a
session prefills a prompt (``PrefixCache.prepare``), the pool's longest chain of blocks that starts the prompt is
attached to the routed session's runner (``FastRunner.attach``) when it beats what that session already holds: the
runner reads those rows in place, its own buffers hold only what follows, and its prefill starts after them,
exactly as if it had computed them. The blocks are reference-counted while attached; unreferenced ones stay as a
cache and are evicted least recently used first when the pool's byte budget (``--prefix-cache-mb``) is full.
Shared tokens are whole blocks: a prompt shares ``16 * k`` tokens, as vLLM's prefix cache does.
``usage.prompt_tokens_details.cached_tokens``, the vLLM prefix-cache counters and
``miaohui:prefix_cache_shared_tokens_total`` count them; ``miaohui:kv_cache_blocks_used``/``_free`` report the pool.

Copied rows, where a pool cannot apply: the plain runner (transformers' own cache and attention, any family) and an
8-bit cache (its scales have no arena) still take a shared prefix by copying the rows of the idle session that
holds the most of it (``ChatSession.restore``), as before the pool; at least ``MIN_SHARED_TOKENS``.

Persistence: with ``engine serve --kv-store DIR`` the prompt's ids are also compared with the snapshots saved in that
folder (``engine.generate.kv_store``); a longer saved prefix is restored (a copy into the session: a file is read
anyway). A session's cache is saved (key: a hash of its ids) when a request is about to overwrite most of it
(another conversation took its slot) and for every session when the server closes (``save_all``); the store keeps
its folder within its byte budget, least recently used first. A file that is stale or damaged is deleted and
recomputed (``miaohui:kv_store_discarded``); a file the store's key does not verify (another machine's, a forgery, a
hostile header) is skipped, never restored, and fails no request (issue 40).

Scopes (issue 40): blocks are published and found under their request's scope (``Job.scope``: an API key, or a
connection on a key-less server; ``BlockPool``'s chain ``root``), rows are copied only between sessions of one scope
(``SessionPool.borrow_for``) and saved files carry and match their scope; a connection's scope ends with it, so its
sessions are not saved. No request reuses rows another scope computed: ``cached_tokens`` is no oracle across them.

Runs on the thread that serves the request (it owns the routed session; a source session is borrowed, marked
busy, for a copy); the publish at the end of a prefill runs where the forward ran (the batch engine's thread).
Owns the choice of source and the counting; not the routing (``sessions``), the blocks (``kv_blocks``), the file
format or the folder (``engine.generate.kv_snapshot``, ``kv_store``).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import threading
from typing import Any, Sequence

from engine.generate.context import common_prefix
from engine.executor.kv_blocks import DEFAULT_BUDGET_BYTES, BlockPool
from engine.generate.kv_snapshot import KVIdentity, KVSnapshotError
from engine.generate.kv_store import KVStore, key_for_ids
from engine.serve.metrics import ServerMetrics
from engine.core.sessions import SessionPool, Slot

log = logging.getLogger(__name__)

# Fewer shared tokens than this are recomputed, not copied: vLLM's default block size, the least its prefix cache
# reuses. Below it the common start is a chat template's role header, shared by every conversation.
MIN_SHARED_TOKENS = 16


def _root(scope: str) -> bytes:
    """The block chain's root for ``scope`` ("" - in-process callers - keeps the pool's plain root)."""
    return hashlib.blake2b(scope.encode("utf-8", "replace"), digest_size=16).digest() if scope else b""


def _persists(scope: str) -> bool:
    """Whether rows of ``scope`` are worth a file: a connection's scope is never seen again after a restart."""
    return not scope.startswith(("conn:", "peer:"))


class PrefixCache:
    """Shares prompt prefixes between the sessions of ``pool`` (copy-free through a ``BlockPool`` of at most
    ``blocks_bytes``, where the runner allows) and, given a ``store``, across restarts."""

    def __init__(self, pool: SessionPool, metrics: ServerMetrics, store: KVStore | None = None,
                 blocks_bytes: int = DEFAULT_BUDGET_BYTES) -> None:
        self._pool = pool
        self._metrics = metrics
        self.store = store
        self._identity: KVIdentity | None = None
        self._blocks_bytes = blocks_bytes
        self.blocks: BlockPool | None = None  # made for the first dense fast runner
        self._lock = threading.Lock()

    def _identity_of(self, session: Any) -> KVIdentity:
        if self._identity is None:
            self._identity = session.kv_identity()
        return self._identity

    def _blocks_for(self, runner: Any) -> BlockPool | None:
        """The block pool ``runner`` (the fast runner inside a ``SlotRunner``) reads and publishes, or None."""
        if getattr(runner, "attach", None) is None or getattr(runner, "_kv8", True) is not None \
                or getattr(runner, "_static", True) or self._blocks_bytes <= 0:
            return None
        with self._lock:
            if self.blocks is None:
                self.blocks = BlockPool.for_runner(runner, self._blocks_bytes)
                self._metrics.blocks(self.blocks.used_blocks, self.blocks.free_blocks)
        return self.blocks if self.blocks.fits(runner) else None

    def prepare(self, slot: Slot, ids: Sequence[int]) -> None:
        """Before ``slot``'s session prefills ``ids``: give it the longest kept prefix of them it lacks."""
        session = slot.session
        scope = slot.scope
        usable = len(ids) - 1  # the session computes the last prompt token anyway: its logits choose the reply
        runner = session.kv_runner()
        inner = getattr(runner, "inner", runner)
        blocks = self._blocks_for(inner)
        if blocks is not None:
            inner.on_prefilled = functools.partial(self.publish, root=_root(scope))
        held = session.cached_ids()
        best = common_prefix(held, ids)
        if best >= usable:
            return
        if self.store is not None and len(held) > 1 and best < len(held) // 2:
            self._save(session, scope)  # another conversation is about to overwrite most of this one
        if blocks is not None:
            shared = blocks.acquire(ids, usable, root=_root(scope))
            if shared is not None and len(shared) > best:
                inner.attach(shared)  # read in place: nothing copied
                best = len(shared)
                self._metrics.prefix_shared(best)
            elif shared is not None:
                blocks.release(shared)
        else:
            best = self._copy_from_session(slot, ids, usable, best)
        if self.store is not None and _persists(scope):
            self._from_store(session, ids, usable, best, scope)

    def publish(self, runner: Any, root: bytes = b"") -> None:
        """Add the full blocks ``runner`` (a dense ``FastRunner``) caches to the pool (its prefill just ended, or its
        request did); on the thread that ran its forwards, or one it has finished with."""
        blocks = self.blocks
        if blocks is None or not blocks.fits(runner):
            return
        kv = runner._kv
        base = kv.base
        blocks.publish(runner.cached_ids, lambda first, end: (kv.k[:, :, first - base:end - base],
                                                              kv.v[:, :, first - base:end - base]), start=base,
                      root=root)
        self._metrics.blocks(blocks.used_blocks, blocks.free_blocks)

    def finished(self, slot: Slot) -> None:
        """``slot``'s request has ended (its session idle): publish the reply's blocks too, for the next turn of a
        conversation routed elsewhere."""
        if self.blocks is not None:
            runner = slot.session.kv_runner()
            self.publish(getattr(runner, "inner", runner), root=_root(slot.scope))

    def _copy_from_session(self, slot: Slot, ids: Sequence[int], usable: int, best: int) -> int:
        """The row-copy path (no pool for this runner): copy the longest prefix an idle session holds."""
        borrowed = self._pool.borrow_for(ids, slot, slot.scope)
        if borrowed is None:
            return best
        source, shared = borrowed
        try:
            shared = min(shared, usable)
            if shared >= MIN_SHARED_TOKENS and shared > best:
                slot.session.restore(source.session.snapshot(shared))
                best = shared
                self._metrics.prefix_shared(shared)
        except KVSnapshotError as exc:  # a runner that cannot take rows: recompute
            log.info("prefix not shared: %s", exc)
        finally:
            self._pool.release(source)
        return best

    def _from_store(self, session: Any, ids: Sequence[int], usable: int, best: int, scope: str) -> None:
        identity = self._identity_of(session)
        try:
            key, stored = self.store.best(ids, identity, scope)  # skips (and logs once) any file not the store's own
        except OSError as exc:
            log.warning("cannot read the KV store: %s", exc)
            return
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

    def _save(self, session: Any, scope: str) -> None:
        if not _persists(scope):
            return
        snapshot = session.snapshot()
        if snapshot is None:
            return
        try:
            self.store.save(key_for_ids(snapshot.ids, scope), snapshot, self._identity_of(session), scope)
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
                if _persists(slot.scope):
                    self._save(slot.session, slot.scope)
                    saved += 1
        return saved
