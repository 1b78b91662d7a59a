"""How many tokens to draft next: the draft length, from what drafting and checking measurably cost.

A step that drafts ``k`` tokens costs the drafter's time for ``k`` tokens plus one target forward over ``k + 1``
(``verify``), and yields the accepted drafts plus the target's own token: with a per-token acceptance ``a``,
``(1 - a^(k+1)) / (1 - a)`` tokens on average. ``DraftLength`` measures both sides as the reply goes (the drafter's
seconds per drafted token, the verify's seconds as a line in ``k``, the acceptance over recent drafts) and picks the
``k`` that gives the most tokens per second (``best_length``). A drafter whose drafts cost no forward pass
(``free``: prompt lookup) is steered by its own run instead: drafts double while they are accepted whole (a copied
passage keeps matching, so a run that matched 8 tokens drafts 16, then 32), and restart at ``start`` after a
rejection.

Owns the choice of length only: the off-switch and the counts are ``engine.speculate.loop``'s; times come from the
caller (``engine.speculate.loop.Speculator`` reads ``time.perf_counter``; tests pass their own).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

RECENT = 16  # draft steps the estimates look back over
# Before the verify has been timed at two lengths, each token it checks is taken to cost this share of its base
# (one row's) time: measured on the default model, bf16 on a 2-core AVX-512 CPU, ~0.2-0.3 (docs/BENCHMARK.md).
PRIOR_PER_TOKEN = 0.25
PRIOR_ACCEPTANCE = 0.7  # before any draft was checked


def expected_tokens(acceptance: float, k: int) -> float:
    """Tokens a step that drafts ``k`` yields on average, when each draft is accepted with ``acceptance`` given
    the ones before it were: the accepted prefix plus the target's own token."""
    if acceptance >= 1.0:
        return k + 1.0
    return (1.0 - acceptance ** (k + 1)) / (1.0 - acceptance)


def best_length(acceptance: float, draft_s: float, verify_base_s: float, verify_token_s: float, cap: int) -> int:
    """The ``k`` in 1..``cap`` with the most expected tokens per second, a step costing
    ``k * draft_s + verify_base_s + k * verify_token_s``; ties go to the shorter draft."""
    best, best_rate = 1, -1.0
    for k in range(1, max(1, cap) + 1):
        cost = k * draft_s + verify_base_s + k * verify_token_s
        rate = expected_tokens(acceptance, k) / cost if cost > 0 else float(k)
        if rate > best_rate * (1.0 + 1e-9):
            best, best_rate = k, rate
    return best


@dataclass(frozen=True)
class StepTimes:
    """One draft step as measured: tokens drafted and kept, and the seconds drafting and verifying took."""

    drafted: int
    kept: int
    draft_s: float
    verify_s: float


class DraftLength:
    """The next draft length for one reply, from ``start`` within 1..``cap``; ``free`` drafters grow by runs."""

    def __init__(self, start: int, cap: int, free: bool) -> None:
        self.cap = max(1, cap)
        self.start = max(1, min(start, self.cap))
        self.free = free
        self.k = self.start
        self._recent: deque[StepTimes] = deque(maxlen=RECENT)

    def restart(self) -> None:
        """Back to the starting length and no history (the off-switch resumes drafting afresh)."""
        self.k = self.start
        self._recent.clear()

    def learn(self, step: StepTimes) -> int:
        """Record one checked draft; returns the next length."""
        if self.free:
            # Doubling while whole drafts are accepted; after a rejection the next match starts a new run. (Restarting
            # at one past the kept count instead drafted less in vain on replies that barely repeat, but cost the
            # copied text's runs more than that saved: simulated on the default model's replies, docs/BENCHMARK.md.)
            self.k = min(self.cap, 2 * self.k) if step.kept == step.drafted else self.start
            return self.k
        self._recent.append(step)
        self.k = best_length(self.acceptance(), *self.costs(), self.cap)
        return self.k

    def acceptance(self) -> float:
        """Per-token acceptance over the recent drafts: accepted ÷ (accepted + rejections), each draft that was
        cut short having tried one token more than it kept (a geometric model's estimate)."""
        kept = sum(s.kept for s in self._recent)
        tried = kept + sum(1 for s in self._recent if s.kept < s.drafted)
        return PRIOR_ACCEPTANCE if tried == 0 else kept / tried

    def costs(self) -> tuple[float, float, float]:
        """(draft seconds per token, verify seconds for one row, verify seconds per extra drafted token)."""
        steps = list(self._recent)
        drafted = sum(s.drafted for s in steps)
        draft_s = sum(s.draft_s for s in steps) / drafted if drafted else 0.0
        # The verify's time as a straight line in k, least squares over the recent steps.
        n = len(steps)
        mean_k = sum(s.drafted for s in steps) / n
        mean_t = sum(s.verify_s for s in steps) / n
        spread = sum((s.drafted - mean_k) ** 2 for s in steps)
        if spread > 0:
            slope = sum((s.drafted - mean_k) * (s.verify_s - mean_t) for s in steps) / spread
            base = mean_t - slope * mean_k
            if slope > 0 and base > 0:
                return draft_s, base, slope
        # One length seen so far (or noise bent the line): split its time by the prior share per token.
        base = mean_t / (1.0 + PRIOR_PER_TOKEN * mean_k)
        return draft_s, base, base * PRIOR_PER_TOKEN
