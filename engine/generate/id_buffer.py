"""The token ids the repetition penalty reads, as one growing tensor: ``IdBuffer``.

Owns a (1, capacity) long tensor written in place and how many of its entries are valid: appending one id (a device
tensor too, so the sampler never syncs with the host to record its choice), extending by a list, truncating back to a
prefix, and growing by doubling (one copy per doubling, amortised; never the whole budget up front, since a model
that declares no context has a budget of 10**12). ``view`` is the valid ids, a view, not a copy. Used by
``engine.generate.sampling.Sampler`` (prompt + reply) and ``engine.speculate.accept.Shaper`` (a history rewound to
the prefix it shares with the last). Does not own which ids are recorded, nor the penalty itself.
"""

from __future__ import annotations

from typing import Sequence

import torch


class IdBuffer:
    """Token ids in a (1, capacity) long tensor on ``device``, its first ``len(self)`` entries valid."""

    def __init__(self, device: torch.device | str, capacity: int, limit: int | None = None) -> None:
        """``capacity``: entries allocated now (at least 1); ``limit``: the most ever kept (ids past it are dropped:
        a budget that ends there never reads them), None for no limit."""
        self._limit = limit
        first = max(1, capacity if limit is None else min(capacity, limit))
        self._ids = torch.empty((1, first), dtype=torch.long, device=device)  # (1, capacity)
        self._n = 0

    def __len__(self) -> int:
        return self._n

    @property
    def device(self) -> torch.device:
        return self._ids.device

    @property
    def capacity(self) -> int:
        return self._ids.shape[1]

    def view(self) -> torch.Tensor:
        """The valid ids, (1, len): a view of the buffer, valid until the next write that grows it."""
        return self._ids[:, : self._n]

    def append(self, token: torch.Tensor | int) -> None:
        """One id after the others; ``token`` may be a (1,) tensor on the buffer's device (written device to device,
        no host round trip)."""
        if self._limit is not None and self._n >= self._limit:
            return
        if self._n == self.capacity:
            self._reserve(self._n + 1)
        self._ids[:, self._n] = token
        self._n += 1

    def extend(self, ids: Sequence[int]) -> None:
        """``ids`` after the others (up to the limit), in one host-to-device copy."""
        room = len(ids) if self._limit is None else min(len(ids), self._limit - self._n)
        if room <= 0:
            return
        end = self._n + room
        self._reserve(end)
        self._ids[0, self._n:end] = torch.tensor(ids if room == len(ids) else ids[:room], dtype=torch.long)
        self._n = end

    def truncate(self, n: int) -> None:
        """Keep the first ``n`` ids (a rewind to a shared prefix): nothing is freed or copied."""
        self._n = max(0, min(n, self._n))

    def _reserve(self, n: int) -> None:
        """Room for ``n`` ids: the capacity doubled (at least to ``n``, at most to the limit), the valid ids copied."""
        if n <= self.capacity:
            return
        capacity = max(n, 2 * self.capacity)
        if self._limit is not None:
            capacity = min(capacity, self._limit)
        grown = torch.empty((1, capacity), dtype=torch.long, device=self._ids.device)  # (1, capacity)
        grown[:, : self._n] = self._ids[:, : self._n]
        self._ids = grown


__all__ = ["IdBuffer"]
