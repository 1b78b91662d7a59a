"""One speculative decoding step, and what steers it: ``Speculator``.

A step starts from the token just chosen (not yet in the target's cache): the drafter proposes up to ``k`` more,
the target runs one forward over the chosen token and the drafts (``verify``: logits at every position),
``engine.speculate.accept`` keeps a prefix of the drafts and chooses one more token, and the target's cache is
cropped in place to what was kept (the drafter's own cache is cropped on its next call). A step with nothing
drafted is a plain one-token decode through plain decoding's own calls (``decode``, then the session's ``Sampler``),
so prompt lookup without a match costs only the lookup.

The draft length adapts (``engine.speculate.length``, timed here): for a drafter that runs a model, the length with
the most tokens per second given the measured draft and verify times and the recent acceptance; for prompt lookup,
doubling while whole drafts are accepted (within 1..``SpeculationConfig.draft_cap``). Whether to draft at all is
decided on the same measured costs against a plain step's, timed here on the runner actually decoding (its
``CostBook``, kept per runner across replies: int4's native step and bf16's cost differently): the first
``MIN_PLAIN`` steps on a runner decode plainly to time it; a lookup draft is verified only as far as its prefix
pays (``DraftLength.prefix``), and one of which nothing pays is not verified but compared with the tokens plain
decoding then gives (acceptance learnt for free), but for a probe now and then that re-times the verify
(``CostBook.probe_due``); a model drafter whose best length
does not pay pauses like the off-switch below and probes once after the pause. The off-switch: when the
drafts of the last ``WINDOW`` steps kept fewer than ``off_below`` of their tokens, drafting pauses for ``PAUSE``
steps, doubling (to ``MAX_PAUSE``) each time it pays no better once resumed. Counts for the metrics: drafts,
drafted and accepted tokens, target forwards. The kept drafts come back marked ``drafted`` (the window tints them).
Owns no model and no text; the session (``engine.generate.session``) emits what ``step`` returns.
"""

from __future__ import annotations

import dataclasses
import secrets
import time
import weakref
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

import torch

from engine.generate.sampling import Choice, Sampler
from engine.inputs import SamplingConfig, SpeculationConfig
from engine.speculate.accept import Shaper, accept
from engine.speculate.length import CostBook, DraftLength, StepTimes, told_costs

from engine.speculate.drafters import Draft

if TYPE_CHECKING:
    from engine.speculate.drafters import Drafter

WINDOW = 8  # draft steps the off-switch looks back over
PAUSE = 16  # target steps without drafting after the off-switch first trips
MAX_PAUSE = 256
# The target's measured times per runner (engine.speculate.length.CostBook): a session keeps its runner across replies,
# so the second reply starts from the first one's measurements; a runner gone takes its book with it.
_BOOKS: "weakref.WeakKeyDictionary[Any, CostBook]" = weakref.WeakKeyDictionary()


def book_for(runner: Any) -> CostBook:
    """``runner``'s ``CostBook`` (a fresh one for a runner that cannot be weakly referenced; the told one where
    ``engine.speculate.length.COSTS_ENV`` is set)."""
    told = told_costs()
    if told is not None:
        return CostBook(told)
    try:
        return _BOOKS.setdefault(runner, CostBook())
    except TypeError:
        return CostBook()


@dataclass(frozen=True)
class SpeculationCounts:
    """What speculation did in one reply (``engine.events.Metrics`` reports them)."""

    drafts: int = 0  # steps that verified at least one drafted token
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    target_steps: int = 0  # forward passes of the target model while decoding (verifies and plain decodes)
    paused: int = 0  # times the off-switch paused drafting


class Speculator:
    """Drafts and verifies for one reply: ``step(token_id, room)`` returns the next tokens to emit (at least one).

    ``target`` is the session's runner (it must have ``verify``); ``history`` the prompt's ids (the chosen
    tokens are appended as steps go). Sampling uses a private generator seeded from ``config.seed``. ``clock``
    times drafting, verifying and plain steps for the draft length and the decision to draft (seconds; neither ever
    changes which tokens come out). ``book``: the target's measured times (default: the runner's, ``book_for``).
    ``sampler``: the session's ``Sampler``; given, a step without a draft is plain decoding's very calls
    (``target.decode`` then ``sampler.choose``, issue 45: the shaper's own path cost ~10% more per step at int4) and
    the verified tokens are added to its ids; without one (tests), the shaper picks.
    """

    def __init__(self, drafter: Drafter, target: Any, config: SamplingConfig, spec: SpeculationConfig,
                 history: Sequence[int], clock: Callable[[], float] = time.perf_counter,
                 book: CostBook | None = None, sampler: Sampler | None = None) -> None:
        generator = None
        if not config.greedy:
            generator = torch.Generator(device=target.device)
            # Not the sampler's seed itself: its stream chose the first token, and draws correlated with that
            # one would bend the distribution of the next. A fixed odd multiplier spreads seeds apart.
            seed = config.seed if config.seed is not None else secrets.randbits(63)
            generator.manual_seed((seed * 0x9E3779B97F4A7C15 + 1) % (1 << 63))
        self.shaper = Shaper(config, generator)
        self.sampler = sampler
        self.drafter = drafter
        self.target = target
        self.spec = spec
        self.history = list(history)
        self._clock = clock
        self._free = bool(getattr(drafter, "free", False))
        self._length = DraftLength(spec.start_draft, spec.draft_cap, self._free,
                                   book if book is not None else book_for(target))
        self._recent: deque[tuple[int, int]] = deque(maxlen=WINDOW)  # (drafted, accepted) per draft step
        self._pause_left = 0
        self._pause = PAUSE
        self._probe = False  # the step after a pause drafts whatever the costs say: acceptance may have changed
        self._shadow: tuple[int, ...] = ()  # a lookup draft not worth verifying, compared with what plain steps give
        self._shadow_at = 0  # how many of it plain decoding has confirmed so far
        self._drafts = self._drafted = self._accepted = self._steps = self._paused = 0

    @property
    def counts(self) -> SpeculationCounts:
        return SpeculationCounts(self._drafts, self._drafted, self._accepted, self._steps, self._paused)

    # Inference mode as ``Sampler.choose`` runs in: outside it each scoring op (float, the penalty's gather and
    # scatter, argmax) paid autograd's dispatch, measured ~1.3x the sampler's time for the same work (issue 45).
    @torch.inference_mode()
    def step(self, token_id: int, room: int) -> list[Choice]:
        """Feed ``token_id`` and return the tokens after it: kept drafts, then the target's own choice.

        ``room`` is how many more tokens the reply may have; no more than that are returned."""
        history = self.history
        history.append(token_id)
        self._compare(token_id)
        k = self._wanted(room)
        began = self._clock()
        draft = self.drafter.draft(history, k, self.shaper) if k > 0 else None
        self._steps += 1
        if draft is not None and draft.tokens and self._free:
            if self._probe:
                # Resuming after a pause: the probe verifies what a probe pays for, not a whole lookup draft of any
                # length (bf16 "edit", issue 45: a resumed 8-token draft of a never-verified length cost ~13 plain
                # steps at bf16 on an AVX2 EPYC, its first verify probing which products batch exactly).
                verified = self._length.probe_length(len(draft.tokens))
            else:
                verified = self._length.decision(len(draft.tokens))
                if self._length.book.probe_due(verified > 0):
                    # A verify timed in a busy minute would otherwise keep verifying off for good: no verify, no new
                    # time (bf16 rewrite, issue 45). The probe re-times it (``CostBook.probe_due``).
                    verified = self._length.probe_length(len(draft.tokens))
            if verified == 0:
                self._shadow, self._shadow_at = draft.tokens, 0  # not worth a verify: see whether it would have been
                draft = None
            elif verified < len(draft.tokens):  # only its first tokens pay for their rows in the verify
                draft = Draft(draft.tokens[:verified], None if draft.q is None else draft.q[:verified])
        if k > 0:
            self._probe = False  # the probe (if this was one) is spent
        if draft is None or not draft.tokens:
            if self.sampler is not None:  # plain decoding's own two calls: a step without a draft costs what it costs
                choice = self.sampler.choose(self.target.decode(token_id))
                self._length.book.plain(self._clock() - began)  # a lookup's cost included: what plain steps cost
                return [choice]
            logits = self.target.decode(token_id)
            scores = self.shaper.scores(logits, history)
            token = self.shaper.pick(scores)
            self._length.book.plain(self._clock() - began)
            probs = torch.softmax(scores[0], dim=-1) if self.shaper.config.top_logprobs else None
            return [self.shaper.choice(token, probs)]
        tokens = draft.tokens
        before = self.target.cached_len
        drafted_at = self._clock()
        logits = self.target.verify([token_id, *tokens])  # (k + 1, vocab)
        verdict = accept(self.shaper, logits, history, tokens, draft.q)
        kept = verdict.accepted
        self.target.crop(before + 1 + kept)  # the chosen token and the kept drafts stay
        history.extend(tokens[:kept])
        if self.sampler is not None:
            self.sampler.extend([c.token_id for c in verdict.choices])  # its penalty then sees what was emitted
        self._learn(StepTimes(len(tokens), kept, drafted_at - began, self._clock() - drafted_at))
        choices = verdict.choices
        return [dataclasses.replace(c, drafted=True) for c in choices[:kept]] + list(choices[kept:])

    def _wanted(self, room: int) -> int:
        """How many tokens to ask the drafter for this step: 0 during a pause, while the book has too few plain steps
        to compare with, while a lookup draft not verified is still being compared, or (a model drafter) when no
        length pays on the measured costs, which pauses drafting."""
        k = min(self._length.k, room - 1)
        if self._pause_left > 0:
            self._pause_left -= 1
            self._probe = self._pause_left == 0
            return 0
        if k <= 0 or self._shadow or not self._length.book.ready():
            return 0
        if not self._free and self._probe:
            # A probe drafts what a probe verifies (``DraftLength.probe_length``: a length verified before where there
            # is one), not the length a whole accepted draft made look best: self-speculation at bf16 on an AVX2 EPYC
            # probed 12 drafts after 4 of 4 were kept, a verify of a new length that took 24 plain steps (issue 45).
            return min(k, self._length.probe_length(k))
        if not self._free and self._length.decision() == 0:
            self._pause_left = self._pause - 1  # this step is the pause's first
            self._pause = min(MAX_PAUSE, self._pause * 2)
            self._paused += 1
            return 0
        return k

    def _compare(self, token_id: int) -> None:
        """The token plain decoding chose, against the lookup draft not verified: its outcome counts for the
        acceptance (and the lookup's run) once the draft is confirmed whole or contradicted."""
        if not self._shadow:
            return
        if token_id == self._shadow[self._shadow_at]:
            self._shadow_at += 1
            if self._shadow_at < len(self._shadow):
                return
        self._length.observe(len(self._shadow), self._shadow_at)
        self._shadow = ()

    def _learn(self, step: StepTimes) -> None:
        drafted, kept = step.drafted, step.kept
        self._drafts += 1
        self._drafted += drafted
        self._accepted += kept
        self._length.learn(step)
        self._recent.append((drafted, kept))
        if len(self._recent) == WINDOW:
            total = sum(d for d, _ in self._recent)
            if total and sum(a for _, a in self._recent) / total < self.spec.off_below:
                self._pause_left = self._pause
                self._pause = min(MAX_PAUSE, self._pause * 2)
                self._paused += 1
                self._recent.clear()
                self._length.restart()
            elif self._pause > PAUSE and sum(a for _, a in self._recent) / total >= 2 * self.spec.off_below:
                self._pause = PAUSE  # it pays again: a later trip pauses briefly


def start(drafter: Drafter | None, runner: Any, config: SamplingConfig, spec: SpeculationConfig | None,
          history: Sequence[int], constraint: Any = None, sampler: Sampler | None = None) -> Speculator | None:
    """The reply's ``Speculator``, or None where speculation cannot apply: none asked for, a runner without
    ``verify`` or without a KV cache, or a constraint (it masks each step's logits as the text so far allows)."""
    if drafter is None or spec is None or constraint is not None:
        return None
    if not getattr(runner, "use_kv_cache", False) or not hasattr(runner, "verify"):
        return None
    return Speculator(drafter, runner, config, spec, history, sampler=sampler)


def speculation_metrics(speculator: Speculator | None, generated: int) -> dict[str, Any]:
    """The ``engine.events.Metrics`` fields of speculation for a reply of ``generated`` tokens (none: defaults).

    The first token comes from the prompt's forward, so tokens per target step counts the ``generated - 1`` after
    it over the decoding forwards."""
    if speculator is None:
        return {}
    c = speculator.counts
    return {"speculation": speculator.drafter.name, "drafts": c.drafts, "draft_tokens": c.drafted_tokens,
            "accepted_tokens": c.accepted_tokens, "target_steps": c.target_steps,
            "acceptance_rate": c.accepted_tokens / c.drafted_tokens if c.drafted_tokens else None,
            "tokens_per_step": (generated - 1) / c.target_steps if c.target_steps and generated > 1 else None}
