"""The runner interface the session drives, and the one place that chooses which runner a model gets.

Owns ``Runner``, the protocol both ``engine.executor.runner.ModelRunner`` (transformers' forward over a
``DynamicCache``, any model) and ``engine.executor.fastpath.FastRunner`` (the families of
``engine.executor.families``, static cache) implement; ``choose_runner``, which says which one a model gets
and why (a ``RunnerChoice``: what ``engine info`` and ``engine chat --json`` report); and ``make_runner``, the
factory ``ChatSession`` uses by default, which builds that choice and records it on the runner as ``choice``
(a fast runner that fails to build leaves a plain one whose choice says why); without a KV cache it wraps that runner
in ``engine.executor.recompute.RecomputeRunner``. Implements no forward pass
itself; knows nothing of text, sampling or timing.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from typing import Any, Iterator, Literal, Protocol, Sequence, runtime_checkable

import torch

from engine.executor.families import Refusal, RefusalKind, refusal
from engine.executor.fastpath import FastRunner
from engine.executor.runner import ModelRunner

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


@dataclass(frozen=True)
class RunnerChoice:
    """Which runner a model gets: ``"fast"`` (``FastRunner``) or ``"plain"`` (``ModelRunner``), and for plain
    the ``Refusal`` saying why."""

    runner: Literal["fast", "plain"]
    reason: Refusal | None = None

    def to_dict(self) -> dict[str, str | None]:
        """``runner``, ``runner_reason`` (the one line, or None) and ``runner_reason_kind``: the JSON fields."""
        return {"runner": self.runner, "runner_reason": None if self.reason is None else self.reason.detail,
                "runner_reason_kind": None if self.reason is None else self.reason.kind.value}


FAST = RunnerChoice("fast")


def choose_runner(model: Any, use_kv_cache: bool = True) -> RunnerChoice:
    """The runner ``make_runner`` builds for a loaded transformers ``model``, and why (``ModelFacts.runner``).
    Without a KV cache it is the same runner, rebuilt every step (``engine.executor.recompute``)."""
    del use_kv_cache  # the same kernels either way: the cache changes the time, never the text
    if os.environ.get(FASTPATH_ENV, "1") == "0":
        return RunnerChoice("plain", Refusal(RefusalKind.DISABLED, f"{FASTPATH_ENV}=0 in the environment"))
    refused = refusal(model)
    return FAST if refused is None else RunnerChoice("plain", refused)


def make_runner(loaded: Any, use_kv_cache: bool = True, **options: Any) -> Runner:
    """The runner for ``loaded`` (an ``engine.models.model.LoadedModel``): a ``FastRunner`` (built with ``options``) when ``choose_runner`` says so, else
    the plain ``ModelRunner``; either carries the choice as its ``choice`` attribute. The fast runner's KV cache
    takes ``loaded.facts.kv_precision`` unless ``options`` name one (an int8 load never gets the plain runner: the
    loader refuses it, ``engine.models.facts.build_facts``)."""
    if not use_kv_cache:
        # the runner a cached reply gets, its cache rebuilt from the whole sequence at every step
        from engine.executor.recompute import recompute_runner

        return recompute_runner(lambda: make_runner(loaded, True, **options))  # type: ignore[return-value]
    model = loaded.model
    choice = choose_runner(model, use_kv_cache)
    runner: Any = None
    if choice is FAST:
        # the KV cache's precision the model was loaded with (engine.inputs.KV_PRECISIONS), unless options say
        options.setdefault("kv_precision", getattr(getattr(loaded, "facts", None), "kv_precision", "auto"))
        try:
            runner = FastRunner(model, **options)
        except torch.OutOfMemoryError:
            raise  # the session turns this into its out-of-memory advice
        except Exception as exc:  # noqa: BLE001  (an optimisation must never cost the user a reply)
            log.warning("fast path unavailable, using the plain runner: %s", exc)
            choice = RunnerChoice("plain", Refusal(RefusalKind.FAILED, f"the fast runner failed to build: {exc}"))
    if runner is None:
        runner = ModelRunner(model, use_kv_cache=use_kv_cache)
    runner.choice = choice
    return runner
