"""The core's chat sessions, routed two ways, so the next turn of a conversation reuses its KV cache:
``SessionCache`` by conversation id (the window: it knows which conversation a reply belongs to) and ``SessionPool``
by prompt prefix (the server: HTTP carries no conversation id).

``SessionCache``: one ``ChatSession`` per conversation id, a bounded few (``MAX_SESSIONS``, ``MAX_SESSION_KV_BYTES``),
the least recently used dropped first; a dropped session's cache goes to disk and a conversation reopened later
starts from it (``engine.core.kv_persist``). Used on the core's thread only.

``SessionPool``: HTTP is stateless: each request carries the whole conversation. A ``ChatSession`` keeps the KV cache of
the last prompt + reply it generated and reuses the common prefix with the next prompt (it compares token
ids and crops the rest), so turn N's TTFT stays flat when turn N goes to the session that served turn N-1.
``SessionPool.route(messages)`` picks that session: each slot remembers the conversation its cache holds
(the request's messages, plus the reply when it completed), and the slot whose conversation agrees with
the new one over the longest run of leading messages (one is a prefix of the other: a next turn, or a
regenerated last turn) wins. A conversation that continues none of them gets a fresh slot while there
are fewer than ``size``, else the slot sharing most with it (a common system prompt), least recently used
first among equals. Messages are compared, not tokens: cheap, and the session still reuses exactly the
tokens that match.

Thread-safe: with ``engine serve --parallel N`` up to N requests route at once, each from its own thread. A
slot is ``busy`` from ``route`` until ``release``: a session generates for one request at a time, so a busy
slot is never routed to (the pool holds at least N slots). Owns routing and the slots' KV byte counts; the
cache itself is the session's. ``borrow`` lends an idle slot whose cache shares the most leading tokens with a
prompt, for ``engine.serve.prefix`` to copy them.

Scopes (issue 40): each slot belongs to the scope of the request that last filled it (``Job.scope``: an API key, or
a connection). ``route`` matches a conversation only against slots of its own scope, and a slot taken over by
another scope has its cache dropped first; ``borrow`` lends only slots of the asking scope. So no request reuses
rows another scope computed, and its cached-token count says nothing about another client's prompts.

Why two classes and not one with two routing keys (issue 42 asked; judged and kept apart): what they share is the
idea "a session per conversation, the least recently used dropped", a few lines; what each adds is most of it and
contradicts the other. The cache's key is a fact the client states (a conversation id) and it keeps no busy slots: one
thread, one reply at a time, a fork takes over its parent's session, a dropped session is written to disk under that id
and reopened from it, and its bound is the KV bytes the replies measured. The pool's key is inferred (the longest run of
leading messages in common, within a scope), its slots are shared by up to N request threads at once (busy from route
to release, so it is locked), a slot is never dropped but refilled (its cache's blocks lent to another through
``borrow``), and persistence goes by token ids, not by id (``engine.serve.prefix``). One class with both keys would
hold two eviction rules, two persistence schemes and a lock one of its users never needs, behind a flag.
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

from engine.events import Message
from engine.generate.context import common_prefix

if TYPE_CHECKING:  # not imported here: it imports torch, and the window imports this module before any load
    from engine.core.kv_persist import KVPersistence
    from engine.generate.session import ChatSession

DEFAULT_SIZE = 4

Conversation = tuple[tuple[str, str], ...]


def conversation(messages: Sequence[Message]) -> Conversation:
    return tuple((m.role, m.content) for m in messages)


def _common(a: Conversation, b: Conversation) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


@dataclass(eq=False)
class Slot:
    """One session and what its KV cache holds."""

    session: Any  # engine.generate.session.ChatSession
    held: Conversation = ()  # the conversation the cache was last filled from; () while unknown
    kv_bytes: int = 0  # measured bytes of its filled cache, from the last Stats/Finished
    uses: int = 0  # requests it has served
    busy: bool = False  # a request is generating with it (from route to release)
    scope: str = ""  # whose rows the cache holds (``Job.scope``)


class SessionPool:
    """Up to ``size`` sessions, most recently used last."""

    def __init__(self, new_session: Callable[[], Any], size: int = DEFAULT_SIZE) -> None:
        if size < 1:
            raise ValueError("a session pool needs at least one slot")
        self._new_session = new_session
        self.size = size
        self.slots: list[Slot] = []
        self._lock = threading.Lock()

    def route(self, messages: Sequence[Message], scope: str = "") -> Slot:
        """The slot that should serve ``messages`` for ``scope`` (marked most recently used and busy, its conversation
        unknown); one that held another scope's rows is reset first (the caller's thread owns the sessions).

        ``RuntimeError`` when every slot is busy (the worker never runs more requests than slots)."""
        wanted = conversation(messages)
        with self._lock:
            idle = [slot for slot in self.slots if not slot.busy]
            own = [slot for slot in idle if slot.scope == scope]
            best: Slot | None = None
            best_len = 0
            for slot in reversed(own):  # most recent first: it wins ties
                common = _common(slot.held, wanted)
                agrees = common == min(len(slot.held), len(wanted))  # one is a prefix of the other
                if slot.held and agrees and common > best_len:
                    best, best_len = slot, common
            if best is None:
                if len(self.slots) < self.size:
                    best = Slot(self._new_session())
                elif idle:  # least recently used first among equals: max() keeps the first maximum
                    best = max(idle, key=lambda s: _common(s.held, wanted) if s.scope == scope else -1)
                else:
                    raise RuntimeError("every session is busy")
            if best in self.slots:
                self.slots.remove(best)
            self.slots.append(best)
            best.held = ()  # being rewritten: nobody may route to it on its old contents
            best.uses += 1
            best.busy = True
            stranger = best.scope != scope
            best.scope = scope
        if stranger:
            best.session.reset()  # another scope's rows: reusing them would tell this one what they held
        return best

    def borrow(self, ids: Sequence[int], exclude: Slot) -> tuple[Slot, int] | None:
        """As ``borrow_for`` for ``exclude``'s scope."""
        return self.borrow_for(ids, exclude, exclude.scope)

    def borrow_for(self, ids: Sequence[int], exclude: Slot, scope: str) -> tuple[Slot, int] | None:
        """The idle slot (not ``exclude``) whose session caches the longest token prefix of ``ids``, and that length;
        marked busy until ``release`` (its rows are being copied: ``engine.serve.prefix``). None when none shares any."""
        with self._lock:
            best: Slot | None = None
            best_len = 0
            for slot in self.slots:
                if slot is not exclude and not slot.busy and slot.scope == scope:
                    common = common_prefix(slot.session.cached_ids(), ids)
                    if common > best_len:
                        best, best_len = slot, common
            if best is None:
                return None
            best.busy = True
            return best, best_len

    def release(self, slot: Slot) -> None:
        """The request that routed to ``slot`` has ended without ``remember`` or ``forget`` (it could not start)."""
        with self._lock:
            slot.busy = False

    def remember(self, slot: Slot, messages: Sequence[Message], reply: str | None) -> None:
        """After a request: the cache now holds ``messages`` and, when it completed, ``reply``; the slot is free."""
        held = conversation(messages)
        with self._lock:
            slot.held = held + ((("assistant", reply),) if reply is not None else ())
            slot.busy = False

    def forget(self, slot: Slot) -> None:
        """The session's cache was dropped (an error): route nothing to it by content; the slot is free."""
        with self._lock:
            slot.held = ()
            slot.kv_bytes = 0
            slot.busy = False

    @property
    def kv_bytes(self) -> int:
        """Measured bytes of every slot's filled KV cache."""
        with self._lock:
            return sum(slot.kv_bytes for slot in self.slots)


# A kept session holds its conversation's KV cache in memory until the conversation replies again. Four
# covers the chats a user goes back and forth between; an older one prefills again on its next reply (a
# second or two for a small model). 1 GiB bounds what the kept caches hold together beside the weights: four
# full 8k-token chats of the default model (22.5 KiB per token in bf16) fit, one of an 8B model (128 KiB) does.
MAX_SESSIONS = 4
MAX_SESSION_KV_BYTES = 1 << 30


class SessionCache:
    """The worker's sessions by conversation id, the least recently used first, bounded by ``MAX_SESSIONS``
    and by the KV bytes their last replies measured (``MAX_SESSION_KV_BYTES``). The session in use is never
    evicted, even alone over the byte bound: its conversation is the one most likely to go on."""

    def __init__(self, persistence: KVPersistence | None = None) -> None:
        self._kept: collections.OrderedDict[int, tuple[ChatSession, int]] = collections.OrderedDict()
        self._evicted: set[int] = set()  # conversations whose session was dropped to respect the bounds
        self.persistence = persistence  # a dropped session's cache goes to disk, a new one reopens from there

    def take(self, conversation_id: int, make: Callable[[], ChatSession],
             prefix_from: int | None = None) -> tuple[ChatSession, bool]:
        """The conversation's session (made if it has none, now the most recent) and whether it had one
        that was evicted. A conversation with none takes over ``prefix_from``'s (a fork's first turn: the
        cache holds their shared history), and that one's next reply prefills again, said as an eviction."""
        session, kv_bytes = self._kept.pop(conversation_id, (None, 0))
        evicted = session is None and conversation_id in self._evicted
        if session is None and prefix_from is not None and prefix_from in self._kept:
            session, kv_bytes = self._kept.pop(prefix_from)
            self._evicted.add(prefix_from)
            evicted = False
        if session is None:
            session = make()
            self._evicted.discard(conversation_id)
            if self.persistence is not None and self.persistence.reopen(conversation_id, session):
                evicted = False  # its cache comes back from disk at the next reply: not computed again
        self._kept[conversation_id] = (session, kv_bytes)
        self._evict()
        return session, evicted

    def persist(self, conversation_id: int) -> bool:
        """Write the conversation's kept cache to disk now (``KVPersistence.save``: not again when the file holds the
        same ids); False when there is none or it was not written."""
        kept = self._kept.get(conversation_id)
        return kept is not None and self.persistence is not None and self.persistence.save(conversation_id, kept[0])

    def forget(self, conversation_id: int) -> None:
        """The conversation was deleted: its session and its saved cache go."""
        self._kept.pop(conversation_id, None)
        self._evicted.discard(conversation_id)
        if self.persistence is not None:
            self.persistence.forget(conversation_id)

    def measured(self, conversation_id: int, kv_bytes: int) -> None:
        """The conversation's reply ended holding ``kv_bytes`` of KV cache."""
        if conversation_id in self._kept:
            self._kept[conversation_id] = (self._kept[conversation_id][0], kv_bytes)
            self._evict()

    def cached_ids(self, conversation_id: int, prefix_from: int | None, use_kv_cache: bool) -> tuple[int, ...]:
        """The ids the conversation's next reply would find in its KV cache (see ``take``); no change of order."""
        kept = self._kept.get(conversation_id) or (self._kept.get(prefix_from) if prefix_from is not None else None)
        return kept[0].cached_ids(use_kv_cache) if kept is not None else ()

    def kept(self) -> list[int]:
        """Conversation ids with a session, the least recently used first."""
        return list(self._kept)

    def clear(self) -> None:
        """Forget every session (a new model, the window closing: nothing was evicted, everything starts over),
        each one's cache saved first."""
        if self.persistence is not None:
            for conversation_id, (session, _) in self._kept.items():
                self.persistence.save(conversation_id, session)
        self._kept.clear()
        self._evicted.clear()

    def _evict(self) -> None:
        while len(self._kept) > 1 and (len(self._kept) > MAX_SESSIONS or
                                       sum(kv for _, kv in self._kept.values()) > MAX_SESSION_KV_BYTES):
            oldest, (session, _) = self._kept.popitem(last=False)
            self._evicted.add(oldest)
            if self.persistence is not None:
                self.persistence.save(oldest, session)
