"""A document's KV prefix kept across conversations: a new conversation attaching the same file prefills only its
question (issue 43, "秒回 on a document").

A question grounded in whole documents is one user message: the instruction, the numbered sources, then the question
(``engine.docs.grounding``). Two first turns that attach the same files with the same system prompt and template
therefore render the same tokens up to the end of the sources block. ``document_prefix_ids`` finds that token
boundary by tokenizing: it renders the conversation again with the question replaced by probes that begin
differently (a letter, a digit, punctuation, a CJK character, a space) and keeps the tokens every rendering shares
with the real prompt, so no token that a tokenizer might merge across the boundary with the question's first
characters is ever part of the prefix. A Chinese question gets the Chinese instruction: it shares a prefix with
other Chinese questions only.

``DocumentPrefixes`` keeps those prefixes' KV rows: after a whole-document turn (``keep``) in memory, as CPU copies,
least recently used dropped first beyond ``memory_bytes``, and on disk in the conversations' KV folder through the
same ``engine.generate.kv_store.KVStore`` (HMAC-sealed files, checked model identity, precision and KV precision,
the folder's byte budget, least recently used deleted first; Settings' Clear clears them too). The key is a hash of
the exact prefix ids, the scope ``document`` and the model identity with its precision and KV precision.
``reopen(session, ids)`` makes a fresh session's next reply restore the kept prefix inside its timing
(``ChatSession.reopen_with``: the TTFT it reports includes the copy or the file read), so the session's own prefix
reuse takes those tokens as if it had computed them and prefills only the question and the template's tail.

Why copies through ``ChatSession.restore`` rather than the server's copy-free ``BlockPool``
(``engine.executor.kv_blocks``): the window runs one session per conversation, a restore copies ~46 MB for a
2,000-token document of the default model (milliseconds, against seconds of prefill), works for every runner and
the 8-bit cache (the pool takes dense fast caches only), and reuses exactly the tokens of the prefix rather than
whole 16-token blocks. Restoring is the mechanism the server's prefix cache already uses where its pool cannot
apply and for its ``--kv-store`` files; this module adds only the document boundary and the keeping policy.

A file that is stale, damaged or not sealed by the folder's key is refused with one log line (and listed in
``discarded``); the reply then computes its prompt as before. Runs on the thread that owns the sessions (the
window's worker); imports no Qt. Owns the boundary, the key and the two levels' policy; not the file format or the
folder (``kv_snapshot``, ``kv_store``) nor when a turn is grounded (``engine.docs.attach``).
"""

from __future__ import annotations

import collections
import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Literal, Mapping, Sequence

from engine.docs.grounding import documents_part, question_language, question_part
from engine.errors import EngineError
from engine.events import Message
from engine.fmt import one_line
from engine.generate.kv_store import KVStore, key_for_ids

if TYPE_CHECKING:  # torch is imported by the session that takes the rows, not by naming them
    from engine.generate.kv_snapshot import KVIdentity, KVSnapshot

log = logging.getLogger(__name__)

SCOPE = "document"  # the files' header scope: never chosen by a server's or a conversation's lookup
# 256 MiB: about five 2,000-token documents of the default model's bf16 cache (22.5 KiB per token), beside the
# sessions' own 1 GiB (engine.core.sessions.MAX_SESSION_KV_BYTES).
DEFAULT_MEMORY_BYTES = 256 << 20
# Questions that start differently from any real one in at least one way: a tokenizer that merges the sources'
# last characters with the question's first ones merges them differently for some probe, and that token is cut.
PROBES = ("A", "z", "0", "?", "(", "中", " x")
# A prefix shorter than this is a chat template's header and an instruction, not a document: not worth a file.
MIN_PREFIX_TOKENS = 32


@dataclass(frozen=True)
class PrefixHit:
    """A kept document prefix a reply started from: its tokens and where it was found."""

    tokens: int
    source: Literal["memory", "disk"]


class PendingPrefix:
    """What ``DocumentPrefixes.reopen`` arranged: ``hit`` is set once the reply's restore found the prefix."""

    def __init__(self, ids: tuple[int, ...]) -> None:
        self.ids = ids
        self.hit: PrefixHit | None = None


def document_prefix_ids(tokenizer: Any, messages: Sequence[Message], question: str,
                        template_kwargs: Mapping[str, Any] | None = None) -> tuple[int, ...] | None:
    """The rendered prompt's tokens up to the end of the last message's sources block (see the module docstring);
    None when the last message is not grounded in ``question`` or the prefix is too short to keep."""
    from engine.generate.context import common_prefix, render

    if not messages or messages[-1].role != "user":
        return None
    part = documents_part(messages[-1].content, question)
    if part is None:
        return None
    language = question_language(question)
    history = list(messages[:-1])
    ids = render(tokenizer, messages, template_kwargs=template_kwargs)
    boundary = len(ids) - 1  # the last prompt token is always computed: its logits choose the reply's first
    for probe in PROBES:
        probed = render(tokenizer, history + [Message("user", part + "\n\n" + question_part(probe, language))],
                        template_kwargs=template_kwargs)
        boundary = min(boundary, common_prefix(ids, probed))
    return tuple(ids[:boundary]) if boundary >= MIN_PREFIX_TOKENS else None


def prefix_key(ids: Sequence[int], identity: KVIdentity) -> str:
    """The memory and file key: the exact ids, the scope, the model and its precisions."""
    return key_for_ids(ids, f"{SCOPE}|{identity.model}|{identity.precision}|{identity.kv_precision}")


class DocumentPrefixes:
    """Kept document prefixes: at most ``memory_bytes`` in memory, and in ``store()``'s folder (None: memory only)."""

    def __init__(self, store: Callable[[], KVStore] | None = None, memory_bytes: int = DEFAULT_MEMORY_BYTES) -> None:
        self._store = store
        self.memory_bytes = max(0, int(memory_bytes))
        self._memory: collections.OrderedDict[str, tuple[KVIdentity, KVSnapshot]] = collections.OrderedDict()
        self.discarded: list[str] = []  # one line per file refused as stale, damaged or foreign

    @property
    def held_bytes(self) -> int:
        return sum(snapshot.nbytes for _, snapshot in self._memory.values())

    def held(self) -> list[tuple[int, ...]]:
        """The ids of the prefixes in memory, the least recently used first."""
        return [snapshot.ids for _, snapshot in self._memory.values()]

    def clear(self) -> None:
        """Forget the prefixes in memory (a new model: its identity differs anyway); the files stay."""
        self._memory.clear()

    def keep(self, session: Any, ids: Sequence[int]) -> bool:
        """Keep the first ``len(ids)`` rows of ``session``'s cache as the prefix ``ids`` (after the reply that
        computed them); False when the cache does not hold exactly those ids (a cancelled prefill, a cropped cache)."""
        ids = tuple(int(i) for i in ids)
        identity = session.kv_identity()
        key = prefix_key(ids, identity)
        held = self._memory.get(key)
        if held is not None and held[0] == identity:
            self._memory.move_to_end(key)
            snapshot = held[1]
        else:
            from engine.generate.kv_snapshot import KVSnapshot

            try:
                live = session.snapshot(len(ids))
                if live is None or live.ids != ids:
                    return False
                # Copies: the live rows are views the session's next reply overwrites.
                rows = {name: t.detach().to("cpu", copy=True) for name, t in live.tensors.items()}
            except (RuntimeError, ValueError) as exc:  # out of memory for the copy: the reply is already out
                log.warning("could not keep a document's KV prefix: %s", one_line(exc))
                return False
            snapshot = KVSnapshot(ids, rows, live.runner, live.kv_precision)
            self._memory[key] = (identity, snapshot)
            self._evict()
        self._save(key, snapshot, identity)
        return True

    def find(self, ids: Sequence[int], identity: KVIdentity) -> tuple[KVSnapshot, Literal["memory", "disk"]] | None:
        """The kept prefix of exactly ``ids`` for ``identity``'s model, from memory or else from disk (then held in
        memory too); None when neither has it or its file was refused."""
        ids = tuple(int(i) for i in ids)
        key = prefix_key(ids, identity)
        held = self._memory.get(key)
        if held is not None and held[0] == identity and held[1].ids == ids:
            self._memory.move_to_end(key)
            return held[1], "memory"
        store = self._store() if self._store is not None else None
        if store is None:
            return None
        try:
            snapshot = store.load(key, identity)
        except EngineError as exc:  # stale or damaged (deleted by the store), or not the store's (left alone)
            log.warning("a kept document prefix was refused: %s", one_line(exc))
            self.discarded.append(one_line(exc))
            return None
        except OSError as exc:
            log.warning("could not read a kept document prefix: %s", one_line(exc))
            return None
        if snapshot is None or snapshot.ids != ids:
            return None
        self._memory[key] = (identity, snapshot)
        self._evict()
        return snapshot, "disk"

    def prepare(self, session: Any, messages: Sequence[Message], question: str,
                template_kwargs: Mapping[str, Any] | None = None) -> PendingPrefix | None:
        """Before a conversation's first turn (nothing but a system prompt before it) whose last message grounds
        ``question`` in whole documents: its document prefix (to ``keep`` after the reply), and in a fresh session
        (nothing cached) the kept one restored by that reply (``reopen``). None for a later turn (its prefix holds
        the conversation, which no other one shares: its own session's cache serves its follow-ups) or when there
        is no such prefix."""
        if any(message.role != "system" for message in messages[:-1]):
            return None
        ids = document_prefix_ids(session.loaded.tokenizer, messages, question, template_kwargs)
        if ids is None:
            return None
        return PendingPrefix(ids) if session.cached_ids() else self.reopen(session, ids)

    def reopen(self, session: Any, ids: Sequence[int]) -> PendingPrefix:
        """Make ``session``'s next reply start from the kept prefix ``ids`` if there is one (restored inside that
        reply's timing, only if its cache is empty by then); the returned record says whether it was."""
        pending = PendingPrefix(tuple(int(i) for i in ids))

        def load() -> Any:
            found = self.find(pending.ids, session.kv_identity())
            if found is None:
                return None
            snapshot, source = found
            pending.hit = PrefixHit(len(snapshot.ids), source)
            return snapshot

        session.reopen_with(load)
        return pending

    def _evict(self) -> None:
        while self._memory and self.held_bytes > self.memory_bytes:
            self._memory.popitem(last=False)

    def _save(self, key: str, snapshot: KVSnapshot, identity: KVIdentity) -> None:
        """On disk too, unless its file already holds it (then only marked used: the folder evicts by last use)."""
        from engine.generate.kv_snapshot import asdict_identity

        store = self._store() if self._store is not None else None
        if store is None:
            return
        try:
            header = store.header(key)
            if header is not None and header.get("ids") == list(snapshot.ids) \
                    and header.get("identity") == asdict_identity(identity):
                os.utime(store.path_for(key))
                return
            store.save(key, snapshot, identity, scope=SCOPE)
        except (OSError, ValueError, EngineError) as exc:
            log.warning("could not save a document's KV prefix: %s", one_line(exc))
