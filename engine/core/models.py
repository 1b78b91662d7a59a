"""The models the engine core holds at once, under a memory budget: ``ModelShelf`` and its ``ModelRecord``s.

One model per kind (``chat``, ``embedding``; next ``vision``): a chat model and an embedding model live side by side,
and a new one of a kind replaces the old. Past ``budget_bytes`` the least recently used *other* models are unloaded
(dropped from the shelf, so their memory goes once nothing else holds them); the one just put is always kept, even
alone over the budget: it is the one asked for. ``pinned`` kinds are never unloaded by the budget (``engine serve``
pins its chat model: unloading it would stop the server; a model that does not fit beside it is refused instead,
``ModelBudgetError``). ``records()`` says what is loaded (name, kind, bytes), for the window's status label and the
server's ``/metrics`` (``engine.serve.metrics``).

The budget's default is the machine's (``machine_budget_bytes``): a fraction of the RAM for a model on the CPU, of the
GPU's memory for one on CUDA (torch is asked only when the process has already imported it).

Used on the core's thread only (``engine.core.core``); ``records()`` returns a frozen tuple any thread may read.
Owns the keeping and the budget; not loading (``engine.models.loader``, ``engine.docs.embed``).
"""

from __future__ import annotations

import collections
import sys
from dataclasses import dataclass
from typing import Any

import psutil

from engine.errors import EngineError, ErrorKind

KINDS = ("chat", "embedding", "vision")
# None: no bound (a shelf made alone, in tests); the engine core sets the machine's (``machine_budget_bytes``).
DEFAULT_BUDGET_BYTES: int | None = None
# Why these fractions: on the CPU the KV caches, the window and the operating system share the RAM with the weights;
# on a GPU the weights are most of what is there, and the KV caches' own budgets bound the rest.
RAM_FRACTION = 0.6
VRAM_FRACTION = 0.9


class ModelBudgetError(EngineError):
    """A model does not fit beside the pinned ones within the memory budget (raise it: ``--memory-budget``)."""

    kind = ErrorKind.OUT_OF_MEMORY


def machine_budget_bytes(device: str = "cpu") -> int:
    """The models' memory budget this machine suggests for a model on ``device`` ("cpu", "cuda", "cuda:1"...):
    ``VRAM_FRACTION`` of that GPU's memory when torch is already imported and sees it, else ``RAM_FRACTION`` of the
    RAM."""
    torch = sys.modules.get("torch")  # never imported here: a process with a model on CUDA has it already
    if device.startswith("cuda") and torch is not None:
        try:
            if torch.cuda.is_available():
                index = int(device.split(":")[1]) if ":" in device else torch.cuda.current_device()
                return int(torch.cuda.get_device_properties(index).total_memory * VRAM_FRACTION)
        except (RuntimeError, ValueError, AssertionError):  # a driver that answers badly: judge by the RAM
            pass
    return int(psutil.virtual_memory().total * RAM_FRACTION)


@dataclass(frozen=True)
class ModelRecord:
    """One model in memory: its name, its kind (``KINDS``) and the bytes its weights take."""

    name: str
    kind: str
    bytes: int


class ModelShelf:
    """At most one model per kind, the least recently used first, within ``budget_bytes`` (None: no bound)."""

    def __init__(self, budget_bytes: int | None = DEFAULT_BUDGET_BYTES, pinned: frozenset[str] = frozenset()) -> None:
        if budget_bytes is not None and budget_bytes < 0:
            raise ValueError("a model budget cannot be negative")
        self.budget_bytes = budget_bytes
        self.pinned = pinned  # kinds the budget never unloads
        self._held: collections.OrderedDict[str, tuple[Any, ModelRecord]] = collections.OrderedDict()

    def put(self, kind: str, name: str, model: Any, nbytes: int) -> tuple[ModelRecord, ...]:
        """Hold ``model`` as the ``kind`` one (replacing the previous), most recently used; returns the records of
        the models unloaded to respect the budget (the replaced one is not counted: it was asked to go)."""
        if kind not in KINDS:
            raise ValueError(f"unknown model kind {kind!r}: one of {', '.join(KINDS)}")
        self._held.pop(kind, None)
        self._held[kind] = (model, ModelRecord(name, kind, max(0, int(nbytes))))
        unloaded: list[ModelRecord] = []
        while self.budget_bytes is not None and self.total_bytes() > self.budget_bytes:
            others = [k for k in self._held if k != kind and k not in self.pinned]
            if not others:
                break
            unloaded.append(self._held.pop(others[0])[1])  # the least recently used first
        return tuple(unloaded)

    def fits_beside_pinned(self, kind: str, nbytes: int) -> bool:
        """Whether ``nbytes`` more of ``kind`` fit within the budget beside the pinned models (other than ``kind``)."""
        if self.budget_bytes is None:
            return True
        pinned = sum(r.bytes for k, (_, r) in self._held.items() if k in self.pinned and k != kind)
        return pinned + nbytes <= self.budget_bytes

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
