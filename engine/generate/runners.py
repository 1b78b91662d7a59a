"""The runner interface the session drives, and the one place that chooses which runner a model gets.

Owns ``Runner``, the protocol both ``engine.generate.runner.ModelRunner`` (transformers' forward over a
``DynamicCache``, any model) and ``engine.generate.fastpath.FastRunner`` (Llama-family models, static
cache) implement, and ``make_runner``, the factory ``ChatSession`` uses by default: the fast runner where
the model qualifies (``engine.generate.llama_fused.unsupported_reason``) and a cache is wanted, else the
plain one. Implements no forward pass itself; knows nothing of text, sampling or timing.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any, Iterator, Protocol, Sequence, runtime_checkable

import torch

from engine.generate.fastpath import FastRunner
from engine.generate.llama_fused import unsupported_reason
from engine.generate.runner import ModelRunner

log = logging.getLogger(__name__)

# ``MIAOHUI_FASTPATH=0`` in the environment forces the plain runner (to compare, or to rule it out).
FASTPATH_ENV = "MIAOHUI_FASTPATH"


@runtime_checkable
class Runner(Protocol):
    """Forward passes of one conversation over its own KV cache: everything the session relies on.

    ``cached_ids`` are the token ids whose keys and values the cache holds, in order (empty without a
    cache), ``cached_len`` their number. ``prefill`` appends ids ``chunk`` tokens per forward and yields
    ``(done, logits | None)`` after each chunk, stopping early (the cache valid up to ``done``) when
    ``cancel`` is set; ``decode`` appends one token. Logits are (1, vocab) tensors of the last position.
    ``kv_bytes`` is the measured (filled, allocated) bytes of the cache; ``sync`` waits for queued device work.
    """

    device: torch.device
    use_kv_cache: bool

    @property
    def cached_ids(self) -> tuple[int, ...]: ...

    @property
    def cached_len(self) -> int: ...

    def reset(self) -> None: ...

    def crop(self, n: int) -> None: ...

    def prefill(self, ids: Sequence[int], cancel: threading.Event | None = None,
                chunk: int = 256) -> Iterator[tuple[int, torch.Tensor | None]]: ...

    def decode(self, token_id: int) -> torch.Tensor: ...

    def kv_bytes(self) -> tuple[int, int]: ...

    def sync(self) -> None: ...


def make_runner(loaded: Any, use_kv_cache: bool = True, **options: Any) -> Runner:
    """The runner for ``loaded`` (an ``engine.models.model.LoadedModel``): a ``FastRunner`` (built with
    ``options``) when the model supports it and a cache is wanted, else the plain ``ModelRunner``."""
    model = loaded.model
    wanted = use_kv_cache and os.environ.get(FASTPATH_ENV, "1") != "0"
    if wanted and unsupported_reason(model) is None:
        try:
            return FastRunner(model, **options)
        except torch.OutOfMemoryError:
            raise  # the session turns this into its out-of-memory advice
        except Exception as exc:  # noqa: BLE001  (an optimisation must never cost the user a reply)
            log.warning("fast path unavailable, using the plain runner: %s", exc)
    return ModelRunner(model, use_kv_cache=use_kv_cache)
