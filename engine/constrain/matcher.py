"""One constrained reply's state: ``TokenConstraint`` masks each step's logits and follows the chosen tokens.

Built on the thread that owns the model, from a ``ConstraintSpec`` and the model's tokenizer (llguidance's view of
a tokenizer takes about a second to build, so it is made once per tokenizer and end-token set and kept). The end
tokens are the grammar's stop: llguidance allows them only where the grammar is complete, and once nothing else
can follow it allows only them.

Overlap with the forward pass: ``advance(token)`` hands the next step's mask to a worker thread (llguidance drops
the GIL while it computes) and returns at once, so the mask is built while the model computes the next logits;
``mask_`` then waits for it (usually it is ready) and applies it in place (``MIAOHUI_MASK_OVERLAP=0``: built in
``mask_`` instead, on the decode thread; the first mask of a reply always is). ``stats`` holds what that cost: the
compute time on the worker and the time the decode loop actually waited (the cost on the critical path).
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from engine.constrain.spec import ConstraintError, ConstraintSpec, check_spec

_TOKENIZERS: "weakref.WeakKeyDictionary[Any, dict[tuple[int, ...], Any]]" = weakref.WeakKeyDictionary()
_TOKENIZERS_LOCK = threading.Lock()
_POOL: ThreadPoolExecutor | None = None
# Build the next mask during the forward (default). MIAOHUI_MASK_OVERLAP=0 builds it on the decode thread instead: the
# bench compares both (docs/BENCHMARK.md, "Structured output"; on 2 idle cores 0.17 vs 0.29 ms per token).
OVERLAP = os.environ.get("MIAOHUI_MASK_OVERLAP", "1") != "0"
MASK_THREADS = 4  # masks built at once; a mask is ~1 ms of one core, so more would only queue on the cores


def _pool() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None:  # shared by the replies in flight (engine serve --parallel); each has one mask pending at most
        _POOL = ThreadPoolExecutor(max_workers=MASK_THREADS, thread_name_prefix="miaohui-mask")
    return _POOL


def ll_tokenizer(tokenizer: Any, eos_ids: Sequence[int]) -> Any:
    """llguidance's tokenizer for ``tokenizer`` (a fast HF tokenizer), cached per tokenizer and end tokens."""
    import llguidance.hf

    key = tuple(sorted(eos_ids))
    with _TOKENIZERS_LOCK:
        per = _TOKENIZERS.setdefault(tokenizer, {})
        if key not in per:
            try:
                per[key] = llguidance.hf.from_tokenizer(tokenizer, eos_token=list(key) or None)
            except ValueError as exc:  # a slow (Python) tokenizer: llguidance needs the Rust one
                raise ConstraintError(f"structured output needs a fast tokenizer: {exc}") from None
        return per[key]


@dataclass
class MaskStats:
    """What masking cost one reply (seconds, summed over its steps)."""

    steps: int = 0
    compute_s: float = 0.0  # llguidance building the masks (on the mask thread, overlapped with forwards)
    wait_s: float = 0.0  # the decode loop waiting for a mask and applying it: the cost per token it sees


class TokenConstraint:
    """Masks logits so only tokens that keep the reply inside ``spec`` can be chosen."""

    def __init__(self, spec: ConstraintSpec, tokenizer: Any, eos_ids: Sequence[int]) -> None:
        from llguidance import LLMatcher

        grammar = check_spec(spec)
        self._tok = ll_tokenizer(tokenizer, eos_ids)
        self._matcher = LLMatcher(self._tok, grammar, log_level=0)
        if self._matcher.is_error():
            raise ConstraintError(f"the {spec.kind.replace('_', ' ')} cannot be used: {self._matcher.get_error()}")
        self._words = (self._tok.vocab_size + 31) // 32
        self._bits = np.full(self._words, -1, dtype=np.int32)  # llguidance writes one bit per token here
        self._pending: Future | None = None
        self.stats = MaskStats()

    @property
    def finished(self) -> bool:
        """The grammar is complete and nothing may follow (only an end token is allowed now)."""
        return self._matcher.is_stopped()

    def _fill(self) -> float:
        t = time.perf_counter()
        self._matcher.unsafe_compute_mask_ptr(self._bits.ctypes.data, self._bits.nbytes)
        return time.perf_counter() - t

    def mask_(self, scores: torch.Tensor) -> None:
        """Set the disallowed entries of ``scores`` (1, vocab) to -inf, in place."""
        t = time.perf_counter()
        if self._pending is None:  # not started during the forward (see OVERLAP): build it now, on this thread
            self.stats.compute_s += self._fill()
        else:
            self.stats.compute_s += self._pending.result()
            self._pending = None
        allowed = np.unpackbits(self._bits.view(np.uint8), bitorder="little")  # (32 * words,) of 0/1
        vocab = scores.shape[-1]
        n = min(vocab, allowed.shape[0])
        banned = torch.from_numpy(allowed[:n] == 0).to(scores.device)  # (n,) bool
        scores[0, :n].masked_fill_(banned, float("-inf"))
        if vocab > n:  # the model's padded rows no tokenizer id reaches
            scores[0, n:] = float("-inf")
        self.stats.steps += 1
        self.stats.wait_s += time.perf_counter() - t

    def advance(self, token_id: int) -> None:
        """Follow the chosen token and start building the next mask (overlapped with the next forward)."""
        if not self._matcher.consume_token(token_id):
            raise ConstraintError(f"the constraint refused token {token_id}: {self._matcher.get_error()}")
        if OVERLAP and not self._matcher.is_stopped():
            self._pending = _pool().submit(self._fill)


def with_mask_cost(metrics: Any, constraint: "TokenConstraint | None") -> Any:
    """``metrics`` (an ``engine.events.Metrics``) carrying what ``constraint``'s masks cost so far (unchanged when
    there was none): the masked tokens, the decode loop's wait for them and their build time."""
    if constraint is None:
        return metrics
    stats = constraint.stats
    return dataclasses.replace(metrics, masked_tokens=stats.steps, mask_wait_s=stats.wait_s,
                               mask_build_s=stats.compute_s)
