"""The model's forward passes over a KV cache: chunked prefill, one-token decode, crop, measured bytes.

This is the only module that touches KV-cache internals (transformers' ``DynamicCache`` and its layers'
``keys``/``values``): that API moves between transformers releases (5.x renamed ``past_key_values``
to ``cache`` and made ``crop`` take a negative count), so it is kept in one place. ``ModelRunner``
knows the token ids whose keys and values the cache holds, so the session can reuse the common
prefix across turns. It does not own the ``Runner`` interface or the choice between this runner and the
fast one (``engine.executor.runners``), and knows nothing of text, chat templates, sampling or timing.
"""

from __future__ import annotations

import threading
from typing import Any, Iterator, Sequence

import torch
from transformers import DynamicCache


def model_device(model: Any) -> torch.device:
    """The device inputs must go to (the embedding's device when accelerate split the model)."""
    try:
        return model.get_input_embeddings().weight.device
    except (AttributeError, NotImplementedError):
        return torch.device(getattr(model, "device", "cpu"))


def sync(device: torch.device) -> None:
    """Wait for queued device work, so a clock read after it measures the work (no-op on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class ModelRunner:
    """Forward passes of one conversation over its own KV cache (or none: ``use_kv_cache=False``).

    ``cached_ids`` are the tokens whose keys and values are in the cache, in order. Without a cache
    the runner keeps the sequence and recomputes all of it for every new token (what
    ``engine/lab/timing.py``'s KV-cache experiment measures); its logits, hence its greedy output,
    equal the cached mode's. Implements ``engine.executor.runners.Runner``.
    """

    def __init__(self, model: Any, use_kv_cache: bool = True) -> None:
        self.model = model
        self.use_kv_cache = use_kv_cache
        self.device = model_device(model)
        self._ids: list[int] = []
        self._cache = None
        # Reused input for every decode step: filled in place rather than allocated per token.
        self._step_input = torch.zeros((1, 1), dtype=torch.long, device=self.device)  # (batch, seq)
        self._dirty = False  # a forward was interrupted: the cache may hold a partial update
        self.reset()

    # -- state ------------------------------------------------------------------------------
    @property
    def cached_ids(self) -> tuple[int, ...]:
        """Token ids whose keys/values the cache holds (empty without a cache)."""
        return tuple(self._ids) if self.use_kv_cache else ()

    @property
    def cached_len(self) -> int:
        """Number of positions in the cache."""
        return len(self._ids) if self.use_kv_cache else 0

    def reset(self) -> None:
        """Drop everything cached (after an error, or to start over)."""
        self._ids = []
        self._cache = DynamicCache(config=self.model.config) if self.use_kv_cache else None
        self._dirty = False

    def crop(self, n: int) -> None:
        """Keep only the first ``n`` cached positions (edit, regenerate: back to the common prefix)."""
        self._heal()
        n = max(0, min(n, len(self._ids)))
        if n == len(self._ids):
            return
        if not self.use_kv_cache:
            del self._ids[n:]
            return
        if n == 0:
            self.reset()
            return
        if not getattr(self._cache, "is_croppable", True):
            # Sliding-window or recurrent layers cannot be put back: recompute instead of corrupting.
            self.reset()
            return
        with torch.inference_mode():
            self._cache.crop(-(len(self._ids) - n))  # transformers 5: a negative count of tokens to remove
        del self._ids[n:]

    def _heal(self) -> None:
        if self._dirty:
            self.reset()

    # -- forward passes --------------------------------------------------------------------------
    @torch.inference_mode()
    def _forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Logits of the last position (1, vocab) for ``input_ids`` (1, seq) appended to the cache."""
        self._dirty = True
        if self.use_kv_cache:
            out = self.model(input_ids=input_ids, cache=self._cache, use_cache=True, logits_to_keep=1)
        else:
            out = self.model(input_ids=input_ids, use_cache=False, logits_to_keep=1)
        logits = out.logits[:, -1, :]  # (batch, vocab)
        self._dirty = False
        return logits

    def prefill(self, ids: Sequence[int], cancel: threading.Event | None = None,
                chunk: int = 256) -> Iterator[tuple[int, torch.Tensor | None]]:
        """Append ``ids`` to the cache ``chunk`` tokens per forward.

        Yields ``(done, logits)`` after each chunk: ``logits`` (1, vocab) of the last position once all
        ``ids`` are in, else ``None``. Stops early, with the cache valid up to ``done``, when ``cancel``
        is set between chunks. Without a cache there is one forward over the whole sequence at the end.
        """
        self._heal()
        total = len(ids)
        if total == 0:
            raise ValueError("prefill needs at least one token")
        ids_t = torch.tensor([list(ids)], dtype=torch.long, device=self.device)  # (1, total)
        done = 0
        while done < total:
            if cancel is not None and cancel.is_set():
                return
            end = min(total, done + chunk)
            if self.use_kv_cache:
                logits = self._forward(ids_t[:, done:end])
                self._ids.extend(ids[done:end])
            else:
                self._ids.extend(ids[done:end])
                logits = None
                if end == total:
                    logits = self._forward(torch.tensor([self._ids], dtype=torch.long, device=self.device))
            done = end
            yield done, logits if done == total else None

    def decode(self, token_id: int) -> torch.Tensor:
        """Append one token and return the next position's logits (1, vocab)."""
        self._heal()
        if self.use_kv_cache:
            self._step_input.fill_(token_id)
            logits = self._forward(self._step_input)
        else:
            logits = self._forward(torch.tensor([self._ids + [token_id]], dtype=torch.long, device=self.device))
        self._ids.append(token_id)
        return logits

    @torch.inference_mode()
    def verify(self, ids: Sequence[int]) -> torch.Tensor:
        """Append ``ids`` in one forward and return the logits after each of them (len(ids), vocab): how
        speculative decoding (``engine.speculate``) checks drafted tokens; ``crop`` then drops the rejected."""
        self._heal()
        if not self.use_kv_cache:
            raise ValueError("verify needs a KV cache")
        self._dirty = True
        ids_t = torch.tensor([list(ids)], dtype=torch.long, device=self.device)  # (1, n)
        out = self.model(input_ids=ids_t, cache=self._cache, use_cache=True, logits_to_keep=len(ids))
        self._dirty = False
        self._ids.extend(ids)
        return out.logits[0]  # (n, vocab)

    # -- measurement -------------------------------------------------------------------------
    def kv_bytes(self) -> tuple[int, int]:
        """Measured (filled, allocated) bytes of every key/value tensor in the cache.

        Filled is ``nbytes`` of the tensors as the cache exposes them; allocated is the storage behind
        them, larger after a crop (a view into the old buffer) or for a preallocated static cache.
        """
        if self._cache is None:
            return 0, 0
        filled = allocated = 0
        seen: set[int] = set()
        for layer in getattr(self._cache, "layers", ()):
            for tensor in (getattr(layer, "keys", None), getattr(layer, "values", None)):
                if not isinstance(tensor, torch.Tensor):
                    continue
                filled += tensor.nbytes
                storage = tensor.untyped_storage()
                if storage.data_ptr() not in seen:
                    seen.add(storage.data_ptr())
                    allocated += storage.nbytes()
        return filled, allocated

    # -- snapshots (engine.generate.kv_snapshot) ---------------------------------------------------
    def export_kv(self, n: int | None = None) -> dict[str, torch.Tensor]:
        """The cache's rows of the first ``n`` positions (default: all): "k.<layer>" and "v.<layer>", each
        (1, kv_heads, n, head_dim), views of the live cache (copy to keep). Empty when there is no cache or it
        cannot be put back exactly (sliding-window or recurrent layers)."""
        self._heal()
        if self._cache is None or not self._ids or not getattr(self._cache, "is_croppable", True):
            return {}
        n = len(self._ids) if n is None else max(0, min(n, len(self._ids)))
        rows: dict[str, torch.Tensor] = {}
        for index, layer in enumerate(getattr(self._cache, "layers", ())):
            keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
            if not isinstance(keys, torch.Tensor) or not isinstance(values, torch.Tensor) \
                    or keys.shape[-2] != len(self._ids):
                return {}
            rows[f"k.{index}"], rows[f"v.{index}"] = keys[:, :, :n], values[:, :, :n]
        return rows

    def import_kv(self, ids: Sequence[int], rows: dict[str, torch.Tensor]) -> None:
        """Hold ``ids`` with ``rows`` (``export_kv``'s names and shapes) in place of what is cached; ``ValueError``,
        nothing changed, when they do not fit (another layout, layer count, length or dtype)."""
        layers = len(rows) // 2
        names = {f"{kind}.{i}" for kind in "kv" for i in range(layers)}
        dtype = next((p.dtype for p in self.model.parameters() if p.is_floating_point()), None)
        if not self.use_kv_cache or not ids or set(rows) != names or layers != _layer_count(self.model) \
                or any(t.dim() != 4 or t.shape[-2] != len(ids) or t.dtype != dtype for t in rows.values()):
            raise ValueError("KV rows do not fit this cache")
        self.reset()
        if not getattr(self._cache, "is_croppable", True):
            raise ValueError("this model's cache cannot be restored exactly (sliding-window or recurrent layers)")
        with torch.inference_mode():
            for index in range(layers):
                self._cache.update(rows[f"k.{index}"].to(self.device), rows[f"v.{index}"].to(self.device), index)
        self._ids = [int(i) for i in ids]

    def sync(self) -> None:
        sync(self.device)


def _layer_count(model: Any) -> int:
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    return int(config.num_hidden_layers)

