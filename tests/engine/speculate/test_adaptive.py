"""The draft length adapts to what is accepted, and drafting pauses (for longer each time) when it does not pay."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from engine.executor.runners import make_runner
from engine.generate.sampling import Sampler
from engine.inputs import SamplingConfig, SpeculationConfig
from engine.speculate.drafters import Draft, PromptLookup
from engine.speculate.length import COSTS_ENV, MIN_PLAIN, CostBook, Costs, told_costs
from engine.speculate.loop import PAUSE, WINDOW, Speculator, book_for

GREEDY = SamplingConfig(temperature=0.0, repetition_penalty=1.0)
PROMPT = [1, 40, 41, 42, 43, 40, 41, 42]
# Target costs told to the controller (engine.speculate.length.CostBook), so what it decides does not hang on this
# machine's timings: a verify nearly free against a plain step (drafting always pays when anything is accepted), and
# one that costs a plain step per token it checks (nothing ever pays: a draft of k yields at most k + 1 tokens).
CHEAP_VERIFY = Costs(plain_s=1.0, verify_base_s=0.1, verify_token_s=0.01)
DEAR_VERIFY = Costs(plain_s=1.0, verify_base_s=1.0, verify_token_s=1.0)


class Recording:
    """A drafter that proposes ``token`` every time and records the lengths it was asked for."""

    name = "recording"

    def __init__(self, token: int) -> None:
        self.token = token
        self.asked: list[int] = []

    def draft(self, history, k, shaper) -> Draft:
        self.asked.append(k)
        return Draft((self.token,) * k)

    def reset(self) -> None:
        pass


class Oracle(Recording):
    """A drafter that knows the greedy reply ahead (``reference``, the tokens after ``PROMPT``)."""

    def __init__(self, reference: list[int]) -> None:
        super().__init__(-1)
        self.reference = reference

    def draft(self, history, k, shaper) -> Draft:
        self.asked.append(k)
        done = len(history) - len(PROMPT)
        return Draft(tuple(self.reference[done:done + k]))


def prefilled(loaded) -> tuple[Any, torch.Tensor]:
    """A fresh runner of ``loaded`` after ``PROMPT``, and the logits of the prompt's last position."""
    runner = make_runner(loaded)
    logits = None
    for _, logits in runner.prefill(PROMPT):
        pass
    return runner, logits


def decode(loaded, drafter, steps: int, spec: SpeculationConfig = SpeculationConfig(),
           book: CostBook | None = None, clock=None) -> tuple[list[int], Speculator]:
    """``steps`` speculative steps after ``PROMPT``; the target's costs told (``CHEAP_VERIFY``) unless ``book``."""
    runner, logits = prefilled(loaded)
    extra = {} if clock is None else {"clock": clock}
    speculator = Speculator(drafter, runner, GREEDY, spec, PROMPT, book=book or CostBook(CHEAP_VERIFY), **extra)
    token = int(logits.argmax())
    out = [token]
    for _ in range(steps):
        choices = speculator.step(token, 10_000)
        out += [c.token_id for c in choices]
        token = out[-1]
    return out, speculator


def plain(loaded, n: int) -> list[int]:
    runner, logits = prefilled(loaded)
    out = []
    for _ in range(n):
        out.append(int(logits.argmax()))
        logits = runner.decode(out[-1])
    return out


def test_rejected_drafts_shrink_the_length_and_trip_the_off_switch(tiny_fp32):
    wrong = Recording(token=5)
    assert 5 not in plain(tiny_fp32, 100)
    steps = WINDOW + PAUSE + WINDOW + 2 * PAUSE
    out, speculator = decode(tiny_fp32, wrong, steps)
    assert out == plain(tiny_fp32, len(out))  # every draft rejected, the reply unchanged
    assert wrong.asked[:3] == [4, 1, 1]  # nothing accepted: the shortest draft pays best (engine.speculate.length)
    # WINDOW rejected drafts, a pause of PAUSE plain steps, WINDOW more, then a pause twice as long.
    assert len(wrong.asked) == 2 * WINDOW
    counts = speculator.counts
    assert counts.paused == 2 and counts.drafts == 2 * WINDOW and counts.accepted_tokens == 0
    assert counts.target_steps == steps


def test_accepted_drafts_grow_the_length_to_the_cap(tiny_fp32):
    right = Oracle(plain(tiny_fp32, 80))
    out, speculator = decode(tiny_fp32, right, 6, SpeculationConfig(max_draft=9, start_draft=4))
    assert right.asked == [4, 9, 9, 9, 9, 9]  # every draft accepted: the longest pays best, whatever the costs
    assert out == plain(tiny_fp32, len(out))
    assert speculator.counts.accepted_tokens == speculator.counts.drafted_tokens == sum(right.asked)
    assert len(out) == 1 + sum(right.asked) + 6  # each step: the kept drafts and one token of the model's


def test_a_lookup_run_that_keeps_matching_doubles_its_drafts(tiny_fp32):
    """The tiny model repeats one token: prompt lookup drafts it, every draft is accepted, drafts double to the
    bound (lookup's default: MAX_DRAFT_TOKENS) and the reply is the plain one."""
    lookup = PromptLookup()
    asked: list[int] = []
    real = lookup.draft

    def recording(history, k, shaper):
        asked.append(k)
        return real(history, k, shaper)

    lookup.draft = recording
    out, speculator = decode(tiny_fp32, lookup, 7, SpeculationConfig("prompt-lookup"))
    assert out == plain(tiny_fp32, len(out))
    # The first lookup finds nothing yet (no length learnt); from then on it copies the reply, every draft whole.
    assert asked == [4, 4, 8, 16, 32, 32, 32]
    assert speculator.counts.accepted_tokens == speculator.counts.drafted_tokens > 0


def test_prompt_lookup_drafts_the_continuation_of_the_latest_match():
    lookup = PromptLookup()
    history = [9, 1, 2, 3, 4, 5, 1, 2, 3, 7, 8, 6, 1, 2, 3]
    assert lookup.draft(history, 3, None).tokens == (7, 8, 6)  # the latest 1 2 3 went on 7 8 6
    assert lookup.draft(history + [7], 5, None).tokens == (8, 6, 1, 2, 3)
    assert lookup.draft([10, 11, 12], 3, None).tokens == ()  # another conversation: nothing repeats


class Ticks:
    """A clock that advances one second per reading: every timed stretch (a plain step, drafting, a verify) lasts 1."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def test_a_verify_that_cannot_pay_is_only_probed_after_pauses(tiny_fp32):
    """Drafts all accepted, but verifying costs a plain step per token checked: drafting pauses at once and each
    probe after a pause pauses again, twice as long; the reply is the plain one."""
    right = Oracle(plain(tiny_fp32, 120))
    steps = PAUSE + 1 + 2 * PAUSE + 1
    out, speculator = decode(tiny_fp32, right, steps, book=CostBook(DEAR_VERIFY))
    assert out == plain(tiny_fp32, len(out))
    # step 1 trips (the pause's first of PAUSE), step PAUSE + 1 probes, the next trips for 2 * PAUSE, the last probes
    # again; each probe at the length that pays best (``probe_length``: the shortest, the cheapest probe), not at the
    # start length (4)
    assert right.asked == [1, 1] and speculator.counts.drafts == 2 and speculator.counts.paused == 2
    assert speculator.counts.target_steps == steps and speculator.counts.accepted_tokens == 2


def test_lookup_drafts_not_worth_a_verify_are_compared_with_plain_decoding(tiny_fp32):
    """Prompt lookup copies the tiny model's repeated token, but no verify pays: nothing is verified, and the drafts
    only compared with what plain decoding gives still count as accepted (the lookup's run doubles on them)."""
    lookup = PromptLookup()
    out, speculator = decode(tiny_fp32, lookup, 40, SpeculationConfig("prompt-lookup"), book=CostBook(DEAR_VERIFY))
    assert out == plain(tiny_fp32, len(out)) and len(out) == 41
    assert speculator.counts.drafts == 0 and speculator.counts.target_steps == 40
    length = speculator._length
    assert length.acceptance() == 1.0 and length.k > length.start


@pytest.mark.measured_costs
def test_the_first_steps_on_a_runner_time_plain_decoding_and_its_book_is_kept(tiny_fp32):
    right = Oracle(plain(tiny_fp32, 80))
    book = CostBook()
    out, speculator = decode(tiny_fp32, right, 6, book=book, clock=Ticks())
    assert out == plain(tiny_fp32, len(out))
    # MIN_PLAIN plain steps first (the drafter not asked), then drafting, compared on the measured (ticked) costs
    assert len(right.asked) == 6 - MIN_PLAIN and book.costs().plain_s == 1.0
    runner = make_runner(tiny_fp32)
    first = Speculator(right, runner, GREEDY, SpeculationConfig(), PROMPT)
    assert first._length.book is book_for(runner)  # the runner's, shared by its next reply
    assert Speculator(right, runner, GREEDY, SpeculationConfig(), PROMPT)._length.book is first._length.book
    assert book_for(make_runner(tiny_fp32)) is not book_for(runner)


def test_told_costs_come_from_the_environment(monkeypatch):
    monkeypatch.setenv(COSTS_ENV, "0.02,0.03,0.004")
    assert told_costs() == Costs(0.02, 0.03, 0.004) and book_for(object()).told == Costs(0.02, 0.03, 0.004)
    monkeypatch.setenv(COSTS_ENV, "fast")
    assert told_costs() is None


def test_a_step_without_a_draft_is_plain_decodings_own_calls_and_the_sampler_sees_every_token(tiny_fp32):
    """Given the session's ``Sampler``, a step that drafts nothing is one ``decode`` and one ``Sampler.choose`` (the
    plain path itself, issue 45), and the tokens a verify chose are added to the sampler's ids for its penalty."""
    config = SamplingConfig(temperature=0.0, repetition_penalty=1.3)
    runner, logits = prefilled(tiny_fp32)
    sampler = Sampler(config, runner.device, PROMPT)
    calls: list[str] = []
    choose, verify = sampler.choose, runner.verify
    sampler.choose = lambda scores: calls.append("choose") or choose(scores)
    runner.verify = lambda ids: calls.append("verify") or verify(ids)
    speculator = Speculator(Recording(7), runner, config, SpeculationConfig(), PROMPT, book=CostBook(CHEAP_VERIFY),
                            sampler=sampler)
    out = [sampler.choose(logits).token_id]
    speculator._pause_left = 1  # this step drafts nothing
    out += [c.token_id for c in speculator.step(out[-1], 10_000)]
    assert calls == ["choose", "choose"]  # the prefill's token, then the plain step's: no verify, no shaper pick
    out += [c.token_id for c in speculator.step(out[-1], 10_000)]
    assert calls[-1] == "verify"
    assert sampler._ids.view()[0].tolist() == PROMPT + out  # the verified tokens too, in order


class FreeRecording(Recording):
    """``Recording`` whose drafts cost no forward pass, as prompt lookup's (the loop's ``free`` drafters)."""

    free = True


def test_a_lookup_draft_after_a_pause_verifies_a_probes_prefix_not_the_whole_draft(tiny_fp32):
    """The step after a pause verifies what a probe would (``DraftLength.probe_length``): a whole 8-token draft of a
    length never verified cost ~13 plain steps at bf16 on an AVX2 EPYC, with nothing kept (issue 45)."""
    runner, logits = prefilled(tiny_fp32)
    checked: list[int] = []
    verify = runner.verify
    runner.verify = lambda ids: checked.append(len(ids) - 1) or verify(ids)
    drafter = FreeRecording(token=5)
    speculator = Speculator(drafter, runner, GREEDY, SpeculationConfig(max_draft=8, start_draft=8), PROMPT,
                            book=CostBook(DEAR_VERIFY))
    speculator._probe = True  # as on the step a pause ends with
    speculator.step(int(logits.argmax()), 10_000)
    assert drafter.asked == [8] and checked == [1]  # drafted 8, verified the probe's best prefix: one


def test_a_model_drafters_probe_drafts_a_length_verified_before(tiny_fp32):
    """After a pause a model drafter's probe drafts what a probe verifies (``DraftLength.probe_length``), a length
    verified before, not the longest the costs favour: a new length's first verify may do work once per row count
    (self-speculation at bf16 on an AVX2 EPYC: 12 drafts probed after 4 of 4 kept, 24 plain steps, issue 45)."""
    right = Oracle(plain(tiny_fp32, 40))
    book = CostBook(CHEAP_VERIFY)
    book.verified(2, 0.1)  # a verify of 2 drafts has run on this runner
    runner, logits = prefilled(tiny_fp32)
    speculator = Speculator(right, runner, GREEDY, SpeculationConfig(max_draft=8, start_draft=8), PROMPT, book=book)
    speculator._probe = True  # as on the step a pause ends with
    out = [int(logits.argmax())]
    out += [c.token_id for c in speculator.step(out[-1], 10_000)]
    assert right.asked == [2]  # not 8, the longest and (on these cheap costs) the best length
    out += [c.token_id for c in speculator.step(out[-1], 10_000)]
    assert right.asked == [2, 8]  # the probe spent, drafting goes on at the length that pays best
    assert out == plain(tiny_fp32, len(out))


class HalfRight(Oracle):
    """A drafter whose drafts cost nothing (as prompt lookup's) and whose first token is right, the rest wrong."""

    free = True

    def draft(self, history, k, shaper) -> Draft:
        self.asked.append(k)
        done = len(history) - len(PROMPT)
        return Draft((self.reference[done],) + (5,) * (k - 1))


def test_a_free_draft_is_verified_only_as_far_as_it_pays(tiny_fp32):
    """On int4-like costs (tests/engine/speculate/test_length.py's ``INT4_NATIVE``) a free draft of which only the
    first token is ever right: the first, at the prior acceptance, is verified whole (4); at 1/2 then only its first
    token pays (1: accepted whole, so the run doubles to 8); at 2/3 two of the eight pay best (2). Each verify checks
    just that prefix, and the reply is the plain one."""
    reference = plain(tiny_fp32, 80)
    assert 5 not in reference
    drafter = HalfRight(reference)
    rows: list[int] = []
    runner, logits = prefilled(tiny_fp32)
    verify = runner.verify
    runner.verify = lambda ids: rows.append(len(ids)) or verify(ids)
    book = CostBook(Costs(plain_s=1.0, verify_base_s=0.85, verify_token_s=0.3))
    speculator = Speculator(drafter, runner, GREEDY, SpeculationConfig("prompt-lookup"), PROMPT, book=book)
    out = [int(logits.argmax())]
    for _ in range(3):
        out += [c.token_id for c in speculator.step(out[-1], 10_000)]
    assert drafter.asked == [4, 4, 8]
    assert rows == [1 + 4, 1 + 1, 1 + 2]  # the chosen token and the drafts that pay
    assert speculator.counts.drafted_tokens == 7 and speculator.counts.accepted_tokens == 3
    assert out == plain(tiny_fp32, len(out))
