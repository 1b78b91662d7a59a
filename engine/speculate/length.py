"""How many tokens to draft next, and whether to draft at all: the draft length from what drafting, checking and a
plain step measurably cost on the path the target runs (issue 45: int4's native step made verifies lose).

A step that drafts ``k`` tokens costs the drafter's time for ``k`` tokens plus one target forward over ``k + 1``
(``verify``), and yields the accepted drafts plus the target's own token: with a per-token acceptance ``a``,
``(1 - a^(k+1)) / (1 - a)`` tokens on average (a lookup's, once it has recent outcomes, from those outcomes position
by position instead: ``DraftLength.expected``). A plain step costs ``plain_s`` and yields one. ``Costs`` holds the four
measured times; ``choose`` is the exact decision: the ``k`` in 1..cap with the most expected tokens per second
(``best_length``), or 0 (decode plainly) when even that ``k`` does not beat a plain step by ``MARGIN`` (within noise
speculation would only add risk). ``worth`` is the same test for a draft already made (prompt lookup: its drafts cost
nothing, so the question is only whether verifying them pays); ``DraftLength.prefix`` cuts such a draft to the
prefix that pays best when the whole one does not (a verify's rows are not free: ~0.3 of a plain step each on
int4's native step).

``CostBook`` measures the target's side on the path actually running (per runner: its precision, native or eager
step): the median of recent plain steps, and the verify's time as a straight line in ``k`` (least squares over recent
verifies, the first of each length left out as it may include one-time work, each scaled to the plain steps' median
now from theirs when it ran, so that the load moving on a shared machine does not make verifies look cheap or dear;
one length seen: the excess over a plain step per token, never less than zero's worth: the prior share then). Before
``MIN_PLAIN`` plain steps are timed there is no decision (``costs`` is None) and the caller decodes plainly to
measure, which costs nothing over plain decoding.
``DraftLength`` adds the drafter's side (seconds per drafted token) and the acceptance over recent drafts, checked or
only compared afterwards (``observe``); a drafter whose drafts cost no forward pass (``free``: prompt lookup) is
steered by its own run instead: drafts double while they are accepted whole (a copied passage keeps matching), and
restart at ``start`` after a rejection.

Owns the choice of length and the off decision; the pauses and counts are ``engine.speculate.loop``'s, and times come
from the caller (``engine.speculate.loop.Speculator`` reads ``time.perf_counter``; tests pass their own).
"""

from __future__ import annotations

import dataclasses
import os
import statistics
from collections import deque
from dataclasses import dataclass
from typing import Callable

RECENT = 16  # draft steps (and plain steps, verifies) the estimates look back over
# Before the verify has been timed, each token it checks is taken to cost this share of a plain step (its first row a
# whole plain step). Measured on the default model: ~0.1-0.15 at bf16, ~0.3 on int4's native step (5 rows ~1.95 plain
# steps, docs/BENCHMARK.md). The dearer path's share: a first draft is then verified only where the acceptance would
# pay for it there too (issue 45: int4's first verifies lost), and bf16 still tries one at the prior acceptance.
PRIOR_PER_TOKEN = 0.3
PRIOR_ACCEPTANCE = 0.7  # before any draft was checked
MIN_PLAIN = 2  # plain steps timed before any decision (the median of two already skips one slow outlier's worst)
MIN_OUTCOMES = 4  # a free drafter's recent drafts whose outcomes then give its tokens (``DraftLength.expected``)
# Drafting must promise this much more than plain decoding: the estimates are noisy on a loaded machine, and a gain
# within the noise is not worth a verify that may lose (the target: never slower than plain decode within noise).
MARGIN = 0.05
# A verify is probed after this many drafts in a row judged not worth one (``CostBook.probe_due``), then after twice as
# many each time, to this many at most: a probe that loses costs ~1 plain step (int4), so at most ~1/8 then ~1/256.
PROBE_AFTER = 8
PROBE_CAP = 256
# Target costs told instead of measured: "plain,verify_base,verify_token" seconds (``told_costs``). The tests set it
# (tests/conftest.py) so that what they check (exact text, counts) never hangs on the machine's timings.
COSTS_ENV = "MIAOHUI_SPECULATION_COSTS"


def expected_tokens(acceptance: float, k: int) -> float:
    """Tokens a step that drafts ``k`` yields on average, when each draft is accepted with ``acceptance`` given
    the ones before it were: the accepted prefix plus the target's own token."""
    if acceptance >= 1.0:
        return k + 1.0
    return (1.0 - acceptance ** (k + 1)) / (1.0 - acceptance)


def best_of(rate: Callable[[int], float], cap: int) -> int:
    """The ``k`` in 1..``cap`` with the highest ``rate(k)``; ties go to the shorter draft."""
    best, best_rate = 1, -1.0
    for k in range(1, max(1, cap) + 1):
        value = rate(k)
        if value > best_rate * (1.0 + 1e-9):
            best, best_rate = k, value
    return best


def best_length(acceptance: float, draft_s: float, verify_base_s: float, verify_token_s: float, cap: int) -> int:
    """The ``k`` in 1..``cap`` with the most expected tokens per second, a step costing
    ``k * draft_s + verify_base_s + k * verify_token_s``; ties go to the shorter draft."""
    def rate(k: int) -> float:
        cost = k * draft_s + verify_base_s + k * verify_token_s
        return expected_tokens(acceptance, k) / cost if cost > 0 else float(k)

    return best_of(rate, cap)


@dataclass(frozen=True)
class Costs:
    """Seconds on the running path: one plain step, a verify of ``k`` drafts (``verify_base_s + k * verify_token_s``:
    the chosen token's row and each draft's), and drafting one token (0 for prompt lookup)."""

    plain_s: float
    verify_base_s: float
    verify_token_s: float
    draft_s: float = 0.0

    def step_s(self, k: int) -> float:
        """Seconds of a step that drafts ``k`` tokens and verifies them."""
        return k * self.draft_s + self.verify_base_s + k * self.verify_token_s

    def rate(self, acceptance: float, k: int) -> float:
        """Expected tokens per second of a step that drafts ``k`` (0: a plain step)."""
        if k <= 0:
            return 1.0 / self.plain_s
        cost = self.step_s(k)
        return expected_tokens(acceptance, k) / cost if cost > 0 else float("inf")


def choose(acceptance: float, costs: Costs, cap: int, margin: float = MARGIN) -> int:
    """The draft length with the most expected tokens per second (``best_length`` within 1..``cap``), or 0 when it
    does not beat a plain step by ``margin``: drafting is off."""
    k = best_length(acceptance, costs.draft_s, costs.verify_base_s, costs.verify_token_s, cap)
    return k if worth(acceptance, k, costs, margin) else 0


def worth(acceptance: float, k: int, costs: Costs, margin: float = MARGIN) -> bool:
    """Whether verifying a draft of ``k`` tokens beats a plain step by ``margin`` in expected tokens per second."""
    return k > 0 and costs.rate(acceptance, k) > (1.0 + margin) * costs.rate(acceptance, 0)


def told_costs() -> Costs | None:
    """The target costs ``COSTS_ENV`` tells, or None (measure them); a malformed value is ignored."""
    value = os.environ.get(COSTS_ENV)
    if not value:
        return None
    try:
        plain_s, base, per_token = (float(part) for part in value.split(","))
    except ValueError:
        return None
    return Costs(plain_s, base, per_token) if plain_s > 0 and base >= 0 and per_token >= 0 else None


class CostBook:
    """The target's measured times on one runner (its path: precision, native or eager step), kept across replies:
    the last ``RECENT`` plain steps and verifies. ``costs`` is None until ``MIN_PLAIN`` plain steps were timed.
    ``told``: fixed target costs instead of measured ones (what the decision does with given costs, exactly: tests,
    or a caller that measured them elsewhere); its ``draft_s`` is replaced by the drafter's measured one."""

    def __init__(self, told: Costs | None = None) -> None:
        self.told = told
        self._plain: deque[float] = deque(maxlen=RECENT)
        # (drafted, seconds, the plain median then or None): a verify is compared with the plain steps of its time
        self._verify: deque[tuple[int, float, float | None]] = deque(maxlen=RECENT)
        self._unverified = 0  # drafts in a row (across replies) judged not worth a verify
        self._probe_every = PROBE_AFTER
        self._lengths_seen: set[int] = set()  # verify lengths whose first (unrecorded) verify has run

    def probe_due(self, verifying: bool) -> bool:
        """Whether a draft judged not worth a verify (``verifying`` False) is verified anyway to time the verify again:
        with no verify there is no new time, and one timed in a busy minute would keep verifying off for good. Due
        after ``PROBE_AFTER`` such drafts in a row, then twice as many after each (to ``PROBE_CAP``); a draft that
        pays by itself starts the count afresh. Told costs never need a probe."""
        if verifying or self.told is not None:
            self._unverified, self._probe_every = 0, PROBE_AFTER
            return False
        self._unverified += 1
        if self._unverified <= self._probe_every:
            return False
        self._unverified, self._probe_every = 0, min(PROBE_CAP, 2 * self._probe_every)
        return True

    def plain(self, seconds: float) -> None:
        self._plain.append(seconds)

    def seen(self, drafted: int) -> bool:
        """Whether a verify of ``drafted`` drafts has run on this runner (its first, whose time is not recorded)."""
        return drafted in self._lengths_seen

    def verified(self, drafted: int, seconds: float) -> None:
        """Record a verify of ``drafted`` drafts. Kept with the plain steps' median of the moment: on a shared machine
        the load moves both several-fold within a reply (issue 45: int4 decodes 7 to 55 ms apart), so a verify timed
        in a quiet minute must not look cheap against plain steps timed in a busy one, nor the other way round.

        The first verify of each length is not recorded: it may include work done once per row count (at bf16 the
        eager step's first product of ``drafted + 1`` rows took 5-11 plain steps on an AMD EPYC, later ones 1.2-2.4,
        docs/BENCHMARK.md), and the line through such times turned drafting off for the rest of the replies."""
        if drafted not in self._lengths_seen:
            self._lengths_seen.add(drafted)
            return
        plain_then = statistics.median(self._plain) if len(self._plain) >= MIN_PLAIN else None
        self._verify.append((drafted, seconds, plain_then))

    def ready(self) -> bool:
        """Whether ``costs`` has costs to give (told, or ``MIN_PLAIN`` plain steps timed): the per-step check, without
        the medians and the line ``costs`` works out."""
        return self.told is not None or len(self._plain) >= MIN_PLAIN

    def verify_line(self, plain_s: float | None) -> tuple[float, float] | None:
        """(base, per drafted token) seconds of a verify, or None before any was timed. Least squares over the recent
        verifies where they span two lengths and the line is sensible; otherwise each verify's excess over a plain
        step (``plain_s``) spread over its drafts, or (no plain step timed) the prior share per token."""
        if not self._verify:
            return None
        # Each verify scaled to the plain steps now (see ``verified``): its time in plain steps of its moment.
        samples = [(k, t if plain_s is None or then is None else t * plain_s / then) for k, t, then in self._verify]
        n = len(samples)
        mean_k = sum(k for k, _ in samples) / n
        mean_t = sum(t for _, t in samples) / n
        spread = sum((k - mean_k) ** 2 for k, _ in samples)
        if spread > 0:
            slope = sum((k - mean_k) * (t - mean_t) for k, t in samples) / spread
            base = mean_t - slope * mean_k
            if slope > 0 and base > 0:
                return base, slope
        if plain_s is not None:
            # one length seen (or noise bent the line): a verify's first row as a plain step, the rest per draft
            # Noise that made a verify look as cheap as a plain step does not make its drafts free (the slope it had
            # answered before, 0, made every draft pay on a loaded machine): the prior share of a plain step then.
            per_token = statistics.median((t - plain_s) / k for k, t in samples)
            return (plain_s, per_token) if per_token > 0 else (plain_s, plain_s * PRIOR_PER_TOKEN)
        base = mean_t / (1.0 + PRIOR_PER_TOKEN * mean_k)
        return base, base * PRIOR_PER_TOKEN

    def costs(self, draft_s: float = 0.0) -> Costs | None:
        """The measured ``Costs`` (drafting at ``draft_s`` per token), or None before ``MIN_PLAIN`` plain steps."""
        if self.told is not None:
            return dataclasses.replace(self.told, draft_s=draft_s)
        if len(self._plain) < MIN_PLAIN:
            return None
        plain_s = statistics.median(self._plain)
        line = self.verify_line(plain_s)
        base, per_token = line if line is not None else (plain_s, plain_s * PRIOR_PER_TOKEN)
        return Costs(plain_s, base, per_token, draft_s)


@dataclass(frozen=True)
class StepTimes:
    """One draft step as measured: tokens drafted and kept, and the seconds drafting and verifying took."""

    drafted: int
    kept: int
    draft_s: float
    verify_s: float


class DraftLength:
    """The next draft length for one reply, from ``start`` within 1..``cap``; ``free`` drafters grow by runs.
    ``book``: the target's measured times (``CostBook``, shared across replies on one runner; default a fresh one)."""

    def __init__(self, start: int, cap: int, free: bool, book: CostBook | None = None) -> None:
        self.cap = max(1, cap)
        self.start = max(1, min(start, self.cap))
        self.free = free
        self.book = book if book is not None else CostBook()
        self.k = self.start
        self._recent: deque[StepTimes] = deque(maxlen=RECENT)  # checked drafts: their drafting time, acceptance
        self._tried: deque[tuple[int, int]] = deque(maxlen=RECENT)  # (drafted, kept), checked or only compared

    def restart(self) -> None:
        """Back to the starting length and no history of this reply (the off-switch resumes drafting afresh); the
        book's times stay, they belong to the runner."""
        self.k = self.start
        self._recent.clear()
        self._tried.clear()

    def learn(self, step: StepTimes) -> int:
        """Record one checked draft (its verify goes into the book); returns the next length (≥ 1: whether to draft
        at all is ``decision``'s)."""
        self.book.verified(step.drafted, step.verify_s)
        self._recent.append(step)
        return self.observe(step.drafted, step.kept)

    def observe(self, drafted: int, kept: int) -> int:
        """Record a draft's outcome: ``kept`` of ``drafted`` tokens agreed (after a verify, or compared with the plain
        steps that followed a draft not worth verifying, which cost nothing); returns the next length."""
        self._tried.append((drafted, kept))
        if self.free:
            # Doubling while whole drafts are accepted; after a rejection the next match starts a new run. (Restarting
            # at one past the kept count instead drafted less in vain on replies that barely repeat, but cost the
            # copied text's runs more than that saved: simulated on the default model's replies, docs/BENCHMARK.md.)
            self.k = min(self.cap, 2 * self.k) if kept == drafted else self.start
            return self.k
        self.k = best_length(self.acceptance(), *self.costs(), self.cap)
        return self.k

    def acceptance(self) -> float:
        """Per-token acceptance over the recent drafts: accepted ÷ (accepted + rejections), each draft that was
        cut short having tried one token more than it kept (a geometric model's estimate)."""
        kept = sum(k for _, k in self._tried)
        tried = kept + sum(1 for d, k in self._tried if k < d)
        return PRIOR_ACCEPTANCE if tried == 0 else kept / tried

    def draft_s(self) -> float:
        """The drafter's measured seconds per drafted token over the recent checked drafts (0 before any)."""
        drafted = sum(s.drafted for s in self._recent)
        return sum(s.draft_s for s in self._recent) / drafted if drafted else 0.0

    def costs(self) -> tuple[float, float, float]:
        """(draft seconds per token, verify seconds for one row, verify seconds per extra drafted token)."""
        measured = self.book.costs(self.draft_s())
        if measured is not None:
            return measured.draft_s, measured.verify_base_s, measured.verify_token_s
        line = self.book.verify_line(None)
        return (self.draft_s(), *line) if line is not None else (self.draft_s(), 1.0, PRIOR_PER_TOKEN)

    def expected(self, k: int) -> float:
        """Tokens a step verifying ``k`` drafts yields on average: the geometric model's (``expected_tokens`` at
        ``acceptance``) until a free drafter has ``MIN_OUTCOMES`` recent outcomes, then what those outcomes give:
        1 + Σ_{j≤k} S(j), S(j) the share of drafts still accepted at position j, estimated position by position from
        the drafts that reached it (a draft accepted whole says nothing past its length: there the geometric rate).
        Lookup drafts come in runs (a copied passage matches whole, the rest fails at once), which a per-token rate
        smears: on the int4 "edit" reply, after 8 of 8 kept once, drafts of 4 kept nothing six times in a row while the
        rate stayed ~0.7 and each was verified (~2 plain steps each, issue 45)."""
        acceptance = self.acceptance()
        if not self.free or len(self._tried) < MIN_OUTCOMES:
            return expected_tokens(acceptance, k)
        tokens, surviving = 1.0, 1.0
        for j in range(1, k + 1):
            reached = [kept for drafted, kept in self._tried if drafted >= j and kept >= j - 1]
            failed = sum(1 for kept in reached if kept == j - 1)
            surviving *= 1.0 - (failed / len(reached) if reached else 1.0 - acceptance)
            tokens += surviving
        return tokens

    def _rate(self, k: int, costs: Costs) -> float:
        """Expected tokens per second of verifying ``k`` drafts (``expected``), as ``Costs.rate``."""
        cost = costs.step_s(k)
        return self.expected(k) / cost if cost > 0 else float("inf")

    def _best(self, costs: Costs, cap: int) -> int:
        """The ``k`` in 1..``cap`` with the most expected tokens per second (``expected``); ties to the shorter, and
        where every length is free the longest, as ``best_length``."""
        return best_of(lambda k: self._rate(k, costs) if costs.step_s(k) > 0 else float(k), cap)

    def _worth(self, k: int, costs: Costs) -> bool:
        """``worth`` on ``expected``: verifying ``k`` drafts beats a plain step by ``MARGIN``."""
        return k > 0 and self._rate(k, costs) > (1.0 + MARGIN) / costs.plain_s

    def prefix(self, drafted: int, costs: Costs) -> int:
        """How many of a draft of ``drafted`` tokens already made to verify: all of them where that pays (a copied
        passage's run keeps its length: the geometric model undercounts runs accepted whole), else the best paying
        shorter prefix (a verify's rows cost, ~0.3 of a plain step each on int4's native step: at ~50% acceptance
        one or two drafts pay where four do not, issue 45), else 0; on ``expected``'s tokens."""
        if self._worth(drafted, costs):
            return drafted
        shorter = self._best(costs, drafted - 1)
        return shorter if drafted > 1 and self._worth(shorter, costs) else 0

    def probe_length(self, drafted: int) -> int:
        """The prefix of a draft of ``drafted`` tokens with the most expected tokens per second, paying or not: what a
        probe verifies to time the verify again (``engine.speculate.loop``); or the best of the shorter lengths the
        book has verified before, where there are any: a length's first verify may do work once per row count
        (``CostBook.verified``), which a probe of a draft judged not worth verifying should not pay on top."""
        costs = self.book.costs(self.draft_s())
        if costs is None:
            return drafted
        best = self._best(costs, drafted)
        seen = [k for k in range(1, best + 1) if self.book.seen(k)]
        return max(seen, key=lambda k: (self._rate(k, costs), -k)) if seen else best  # ties: the shorter

    def decision(self, drafted: int | None = None) -> int:
        """How many tokens to verify: ``k`` when that beats a plain step by ``MARGIN`` on the measured costs (given a
        draft already made, of ``drafted`` tokens: ``prefix``), else 0; ``k`` while the book has no plain steps yet for a
        drafter that would otherwise never be compared (the caller times plain steps first: ``Speculator``)."""
        costs = self.book.costs(self.draft_s())
        if costs is None:
            return self.k if drafted is None else drafted
        if drafted is not None:
            return self.prefix(drafted, costs)
        if self.free:
            return self.k if self._worth(self.k, costs) else 0
        return choose(self.acceptance(), costs, self.cap)
