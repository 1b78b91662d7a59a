"""KV cache off: every step recomputes the whole sequence, through the same runner and kernels the cache would use.

Owns ``RecomputeRunner``, the ``engine.executor.runners.Runner`` a reply without a KV cache gets (``--no-kv-cache``,
the Lab's KV experiment, ``use_kv_cache: false`` on the API). It keeps no keys or values between steps: before
each step it drops the inner runner's cache and rebuilds it from every token so far, then reads the next logits.
It does not choose the inner runner (``engine.executor.runners.make_runner`` does) and computes nothing itself.

Why not one plain forward over the whole sequence (the textbook no-cache step, what this mode ran before): on a
quantized model the cached path decodes on int8 activations (``engine.quant``'s row kernels, the native step) while
a many-row forward runs prefill's dequantized products, so the two rounded differently and a greedy reply could
change its text when the cache was turned off (issue 39: "What is the capital of France?" at int4). The seeds'
experiment is meant to show that the cache changes the time, not the answer. So the rebuild replays exactly what
the cached path computed: the prompt's prefill calls with their own chunks, then the generated tokens one ``decode``
each. (``FastRunner.verify`` gives the same bits in one pass, but at int4 its per-token Python attention made a
48-token reply 2.3x slower than the native step's one-token decodes, measured side by side on an Intel Xeon with
AMX; and it holds a packed copy of the dense weights.) The cost keeps the shape the Lab measures: step i recomputes
the prompt and i tokens.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import torch


@dataclass
class _Segment:
    """Tokens appended by one ``prefill`` call (with its chunk size) or by consecutive ``decode`` calls."""

    kind: str  # "prefill" or "decode"
    ids: list[int] = field(default_factory=list)
    chunk: int = 256


class RecomputeRunner:
    """A ``Runner`` that keeps no KV cache: each step rebuilds ``inner``'s cache from all tokens, then resets it.

    ``inner`` is the runner the cached mode would use.
    """

    use_kv_cache = False

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.device: torch.device = inner.device
        self._segments: list[_Segment] = []

    # -- state: the tokens, none of them cached ---------------------------------------------------------
    @property
    def cached_ids(self) -> tuple[int, ...]:
        return ()

    @property
    def cached_len(self) -> int:
        return 0

    @property
    def ids(self) -> tuple[int, ...]:
        """Every token of the sequence so far (what the next step recomputes)."""
        return tuple(token for segment in self._segments for token in segment.ids)

    def reset(self) -> None:
        self._segments = []
        self.inner.reset()

    def crop(self, n: int) -> None:
        """Keep the first ``n`` tokens of the sequence."""
        kept, left = [], max(0, n)
        for segment in self._segments:
            if left <= 0:
                break
            kept.append(_Segment(segment.kind, segment.ids[:left], segment.chunk))
            left -= len(kept[-1].ids)
        self._segments = kept

    # -- steps -----------------------------------------------------------------------------------------
    def prefill(self, ids: Sequence[int], cancel: threading.Event | None = None,
                chunk: int = 256) -> Iterator[tuple[int, torch.Tensor | None]]:
        """Recompute the earlier tokens, then append ``ids`` through the inner prefill (its chunks, its progress)."""
        if not ids:
            raise ValueError("prefill needs at least one token")
        earlier = list(self._segments)
        self.inner.reset()
        logits = self._replay(earlier, cancel)
        if logits is None and earlier:
            return  # cancelled while recomputing: nothing appended
        segment = _Segment("prefill", [], chunk)
        self._segments.append(segment)
        for done, logits in self.inner.prefill(list(ids), cancel, chunk):
            segment.ids = list(ids[:done])
            yield done, logits
        self.inner.reset()  # nothing kept between steps

    def decode(self, token_id: int) -> torch.Tensor:
        """Append one token: rebuild the whole sequence, the new token computed as the cached path decodes it."""
        if self._segments and self._segments[-1].kind == "decode":
            self._segments[-1].ids.append(int(token_id))
        else:
            self._segments.append(_Segment("decode", [int(token_id)]))
        self.inner.reset()
        try:
            logits = self._replay(self._segments, None)
        finally:
            self.inner.reset()
        assert logits is not None  # a replay without cancel always runs to the end
        return logits

    def _replay(self, segments: list[_Segment], cancel: threading.Event | None) -> torch.Tensor | None:
        """Run ``segments`` through the inner runner as the cached path ran them; the last position's logits."""
        logits: torch.Tensor | None = None
        for segment in segments:
            if segment.kind == "prefill":
                logits = None
                for _done, out in self.inner.prefill(segment.ids, cancel, segment.chunk):
                    logits = out
                if logits is None:
                    return None  # cancelled between chunks
            else:
                for token in segment.ids:
                    logits = self.inner.decode(token)
        return logits

    # -- measurement -----------------------------------------------------------------------------------
    def kv_bytes(self) -> tuple[int, int]:
        """Nothing is kept between steps (the rebuilt cache is dropped after every step)."""
        return 0, 0

    def sync(self) -> None:
        self.inner.sync()


def recompute_runner(make_cached: Callable[[], Any]) -> RecomputeRunner:
    """A ``RecomputeRunner`` over the runner ``make_cached()`` builds (the one a cached reply gets)."""
    inner = make_cached()
    runner = RecomputeRunner(inner)
    runner.choice = getattr(inner, "choice", None)  # type: ignore[attr-defined]
    return runner
