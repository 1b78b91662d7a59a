"""The models the engine core holds at once, under a memory budget: ``ModelShelf`` and its ``ModelRecord``s.

One model per kind (``chat``, ``embedding``; next ``vision``): a chat model and an embedding model live side by side,
and a new one of a kind replaces the old. Past ``budget_bytes`` the least recently used *other* models are unloaded
(dropped from the shelf, so their memory goes once nothing else holds them); the one just put is always kept, even
alone over the budget: it is the one asked for. ``records()`` says what is loaded (name, kind, bytes), for the
window's status label and the server's ``/metrics`` (``engine.serve.metrics``).

Used on the core's thread only (``engine.core.core``); ``records()`` returns a frozen tuple any thread may read.
Owns the keeping and the budget; not loading (``engine.models.loader``, ``engine.docs.embed``).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Any

KINDS = ("chat", "embedding", "vision")
# None: no budget beyond the machine's (the chat model alone is what a user chose to load; the budget is for what
# the core adds beside it).
DEFAULT_BUDGET_BYTES: int | None = None


@dataclass(frozen=True)
class ModelRecord:
    """One model in memory: its name, its kind (``KINDS``) and the bytes its weights take."""

    name: str
    kind: str
    bytes: int


class ModelShelf:
    """At most one model per kind, the least recently used first, within ``budget_bytes`` (None: no bound)."""

    def __init__(self, budget_bytes: int | None = DEFAULT_BUDGET_BYTES) -> None:
        if budget_bytes is not None and budget_bytes < 0:
            raise ValueError("a model budget cannot be negative")
        self.budget_bytes = budget_bytes
        self._held: collections.OrderedDict[str, tuple[Any, ModelRecord]] = collections.OrderedDict()

    def put(self, kind: str, name: str, model: Any, nbytes: int) -> tuple[ModelRecord, ...]:
        """Hold ``model`` as the ``kind`` one (replacing the previous), most recently used; returns the records of
        the models unloaded to respect the budget (the replaced one is not counted: it was asked to go)."""
        if kind not in KINDS:
            raise ValueError(f"unknown model kind {kind!r}: one of {', '.join(KINDS)}")
        self._held.pop(kind, None)
        self._held[kind] = (model, ModelRecord(name, kind, max(0, int(nbytes))))
        unloaded: list[ModelRecord] = []
        while (self.budget_bytes is not None and len(self._held) > 1
               and sum(r.bytes for _, r in self._held.values()) > self.budget_bytes):
            _, (_, record) = self._held.popitem(last=False)
            unloaded.append(record)
        return tuple(unloaded)

    def get(self, kind: str) -> Any:
        """The ``kind`` model (now the most recently used), or None."""
        held = self._held.get(kind)
        if held is None:
            return None
        self._held.move_to_end(kind)
        return held[0]

    def drop(self, kind: str) -> None:
        self._held.pop(kind, None)

    def clear(self) -> None:
        self._held.clear()

    def records(self) -> tuple[ModelRecord, ...]:
        """What is loaded, the least recently used first."""
        return tuple(record for _, record in self._held.values())

    def total_bytes(self) -> int:
        return sum(record.bytes for record in self.records())
