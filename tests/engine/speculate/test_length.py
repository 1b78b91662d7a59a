"""The draft length: the most expected tokens per second from measured costs (model drafters), doubling runs
(prompt lookup), the lookup's matcher following a passage that keeps matching, and the cost model deciding whether
drafting pays at all against a plain step (exact decisions on given costs; no timing)."""

from __future__ import annotations

import pytest

from engine.inputs import MAX_DRAFT_TOKENS, MODEL_MAX_DRAFT, SpeculationConfig
from engine.speculate.drafters import PromptLookup
from engine.speculate.length import (MARGIN, MIN_OUTCOMES, MIN_PLAIN, PRIOR_PER_TOKEN, PROBE_AFTER, PROBE_CAP, RECENT,
                                     CostBook, Costs, DraftLength, StepTimes, best_length, choose, expected_tokens,
                                     worth)


def test_expected_tokens_counts_the_accepted_prefix_and_the_models_own():
    assert expected_tokens(1.0, 5) == 6.0
    assert expected_tokens(0.0, 5) == 1.0
    assert expected_tokens(0.5, 2) == pytest.approx(1 + 0.5 + 0.25)


def test_best_length_trades_acceptance_against_cost():
    # Free drafts and a cheap verify: the longer the better while drafts are accepted.
    assert best_length(1.0, 0.0, 1.0, 0.1, 12) == 12
    # Nothing accepted: the shortest draft (it costs the least).
    assert best_length(0.0, 0.2, 1.0, 0.2, 12) == 1
    # The default model's measured costs (a draft token ~0.2, a verified one ~0.25 of a plain step): 84% acceptance
    # pays best at a few tokens, 97% at longer drafts, and a dearer drafter shortens them.
    mid = best_length(0.84, 0.2, 1.0, 0.25, 12)
    assert 2 <= mid <= 6
    assert best_length(0.97, 0.2, 1.0, 0.25, 12) > mid
    assert best_length(0.84, 0.6, 1.0, 0.25, 12) < mid
    # The chosen length beats every other on expected tokens per unit of cost.
    def rate(k: int) -> float:
        return expected_tokens(0.84, k) / (k * 0.2 + 1.0 + k * 0.25)
    assert all(rate(mid) >= rate(k) for k in range(1, 13))


def test_model_drafter_length_follows_measured_costs():
    length = DraftLength(start=4, cap=12, free=False)
    assert length.k == 4
    # Whole drafts accepted, drafting cheap against verifying: it grows to the cap. (Each length's first verify is
    # left out of the book's line, CostBook.verified: so each length twice.)
    for k in (4, 4, 8, 8, 12, 12):
        length.learn(StepTimes(k, k, 0.01 * k, 1.0 + 0.05 * k))
    assert length.k == 12
    base, per_token = length.costs()[1:]
    assert base == pytest.approx(1.0) and per_token == pytest.approx(0.05)
    # Every draft now rejected at once: acceptance falls, the length with it.
    for _ in range(16):
        length.learn(StepTimes(length.k, 0, 0.01 * length.k, 1.0 + 0.05 * length.k))
    assert length.acceptance() == 0.0 and length.k == 1
    length.restart()
    assert length.k == 4


def test_one_measured_length_splits_the_verify_by_the_prior():
    length = DraftLength(start=4, cap=12, free=False)
    length.learn(StepTimes(4, 2, 0.4, 9.0))  # the length's first verify: its time left out of the book
    length.learn(StepTimes(4, 2, 0.4, 2.0))
    draft_s, base, per_token = length.costs()
    assert draft_s == pytest.approx(0.1)
    assert base + 4 * per_token == pytest.approx(2.0) and per_token < base


def test_free_drafter_doubles_while_whole_drafts_are_accepted():
    length = DraftLength(start=4, cap=32, free=True)
    seen = []
    for kept_all in (True, True, True, True, False, True):
        k = length.k
        seen.append(k)
        length.learn(StepTimes(k, k if kept_all else 1, 0.0, 1.0))
    assert seen == [4, 8, 16, 32, 32, 4]
    assert length.k == 8


def test_the_method_sets_the_default_bound():
    assert SpeculationConfig("prompt-lookup").draft_cap == MAX_DRAFT_TOKENS
    assert SpeculationConfig("self").draft_cap == MODEL_MAX_DRAFT
    assert SpeculationConfig("self", max_draft=6).draft_cap == 6


def test_lookup_follows_a_passage_that_keeps_matching():
    """While the reply copies a passage, the draft goes on from that passage, not from wherever the last n-gram
    occurred latest."""
    passage = [10, 11, 12, 13, 14, 15, 16, 17, 18, 19]
    history = [1, *passage, 2, 11, 12, 99, 3, 50]
    lookup = PromptLookup()
    reply = [11, 12]
    assert lookup.draft(history + reply, 2, None).tokens == (99, 3)  # fresh: the latest 11 12 went on 99 3
    # The model wrote 13 14 instead: that run ended; the latest 12 13 14 is in the first passage.
    reply += [13, 14]
    assert lookup.draft(history + reply, 3, None).tokens == (15, 16, 17)
    # It copied 15 16 17 and chose 18 itself: the run goes on from the first passage.
    reply += [15, 16, 17, 18]
    assert lookup.draft(history + reply, 4, None).tokens == (19, 2, 11, 12)
    # Copied 19 2 11 12 and chose 13 (the passage had 99): a fresh lookup, 11 12 13 latest in the first passage.
    assert lookup.draft(history + reply + [19, 2, 11, 12, 13], 2, None).tokens == (14, 15)
    # The run broke and no n-gram repeats: nothing drafted.
    assert lookup.draft(history + reply + [77, 78], 4, None).tokens == ()


def test_lookup_run_prefers_the_passage_over_a_later_repeat():
    # "5 6 7" ends the text twice; the reply is copying the first block, whose continuation is 8 9.
    history = [5, 6, 7, 8, 9, 0, 4, 5, 6, 7, 1, 1, 5, 6]
    lookup = PromptLookup()
    assert lookup.draft(history, 2, None).tokens == (7, 1)  # the latest 5 6 went on 7 1
    history += [7, 2]  # 7 kept, then the model wrote 2: that passage ended, look afresh
    assert lookup.draft(history, 2, None).tokens == ()
    lookup2 = PromptLookup()
    start = [5, 6, 7, 8, 9, 0, 4, 3, 5, 6]
    assert lookup2.draft(start, 3, None).tokens == (7, 8, 9)
    # 7 8 9 kept and the model's own 0: the same passage, however the latest n-grams read.
    assert lookup2.draft(start + [7, 8, 9, 0], 3, None).tokens == (4, 3, 5)


# -- the cost model: whether drafting pays on the path running (issue 45) ------------------------------------------

def test_choose_drafts_only_where_a_length_beats_a_plain_step_by_the_margin():
    # One drafted token: (1 + a) tokens for a verify of 1.5 plain steps pays iff (1 + a) / 1.5 > 1.05, a > 0.575.
    costs = Costs(plain_s=1.0, verify_base_s=1.0, verify_token_s=0.5)
    assert choose(0.57, costs, 1) == 0 and choose(0.58, costs, 1) == 1
    # Every draft accepted: (k + 1) / (1 + k / 2) grows with k, so the cap.
    assert choose(1.0, costs, 8) == 8
    assert costs.rate(1.0, 8) == pytest.approx(9 / 5.0) and costs.rate(0.3, 0) == 1.0
    # A verify that costs a plain step per token it checks never pays, whatever is accepted (int4's native step
    # against a per-token verify: what issue 45 measured at 0.61-0.76x).
    dear = Costs(plain_s=1.0, verify_base_s=1.0, verify_token_s=1.0)
    assert all(choose(a, dear, 32) == 0 for a in (0.0, 0.5, 0.9, 0.99, 1.0))
    # The margin: 2 tokens for 1.90 plain steps is 5.3% faster and drafts; for 1.91, 4.7%, and it does not.
    assert choose(1.0, Costs(1.0, 1.0, 0.90), 1) == 1 and choose(1.0, Costs(1.0, 1.0, 0.91), 1) == 0
    assert MARGIN == 0.05
    # Drafting time counts: a drafter costing a plain step per token turns a paying length off.
    assert choose(0.9, Costs(1.0, 1.0, 0.1), 4) > 0 and choose(0.9, Costs(1.0, 1.0, 0.1, draft_s=1.0), 4) == 0


def test_worth_judges_a_draft_already_made():
    costs = Costs(plain_s=1.0, verify_base_s=1.0, verify_token_s=0.5)
    assert not worth(0.5, 0, costs)  # nothing drafted: nothing to verify
    assert worth(0.9, 4, costs) and not worth(0.2, 4, costs)


def test_the_cost_book_measures_plain_steps_and_the_verify_line():
    book = CostBook()
    assert book.costs() is None and book.verify_line(None) is None
    for seconds in [0.010] * (MIN_PLAIN - 1):
        book.plain(seconds)
    assert book.costs() is None and not book.ready()  # too few plain steps to compare with: the caller decodes plainly
    book.plain(0.030)  # one slow step: the median of 0.010, 0.030 and later ones
    book.plain(0.010)
    assert book.ready() and book.costs().plain_s == pytest.approx(0.010)
    # The first verify of a length is left out (it may include one-time work: a kernel made for a new row count).
    book.verified(4, 0.5)
    assert book.verify_line(0.010) is None
    # One verify length: its first row taken as a plain step, the rest spread over its drafts.
    book.verified(4, 0.022)
    costs = book.costs(draft_s=0.001)
    assert (costs.verify_base_s, costs.verify_token_s, costs.draft_s) == pytest.approx((0.010, 0.003, 0.001))
    # Two lengths: the least-squares line through them (again without the new length's first verify).
    book.verified(8, 0.9)
    book.verified(8, 0.042)
    base, per_token = book.verify_line(0.010)
    assert (base, per_token) == pytest.approx((0.002, 0.005))
    # Told costs replace the measured ones (the drafter's time is still its own).
    told = Costs(1.0, 2.0, 3.0)
    assert CostBook(told).ready() and CostBook(told).costs(0.5) == Costs(1.0, 2.0, 3.0, 0.5)


def test_draft_length_decides_on_the_books_costs_and_learns_from_drafts_only_compared():
    dear = DraftLength(start=4, cap=32, free=True, book=CostBook(Costs(1.0, 1.0, 1.0)))
    assert dear.decision(8) == 0 and dear.decision() == 0
    cheap = DraftLength(start=4, cap=32, free=True, book=CostBook(Costs(1.0, 1.0, 0.1)))
    assert cheap.decision(8) == 8
    for _ in range(RECENT):  # lookups compared with plain decoding and rejected at once: acceptance 0
        cheap.observe(4, 0)
    assert cheap.acceptance() == 0.0 and cheap.decision(8) == 0 and cheap.k == 4
    cheap.observe(4, 4)  # a whole draft confirmed by plain decoding: the run doubles as if it had been verified
    assert cheap.k == 8
    # No plain step timed yet: no decision, the caller measures first.
    assert DraftLength(start=4, cap=32, free=True).decision(6) == 6


# int4's native verify against plain native steps on the default model (docs/BENCHMARK.md): a line through the
# measured 1.14, 1.53, 1.72, 1.95, 2.96 plain steps for 1, 2, 3, 4, 7 drafts.
INT4_NATIVE = Costs(plain_s=1.0, verify_base_s=0.85, verify_token_s=0.3)


def test_a_lookup_draft_is_cut_to_the_prefix_that_pays():
    length = DraftLength(start=4, cap=32, free=True, book=CostBook(INT4_NATIVE))
    # Before any outcome, the prior acceptance (0.7): four drafts pay on int4's costs, the whole draft is verified.
    assert worth(0.7, 4, INT4_NATIVE) and length.decision(4) == 4
    length.observe(4, 1)  # one kept, then a rejection: acceptance 1 / 2
    assert length.acceptance() == 0.5
    # At 50%: four drafts (1.94 tokens for 2.05 plain steps) lose; one (1.5 tokens for 1.15) pays best.
    assert not worth(0.5, 4, INT4_NATIVE) and worth(0.5, 1, INT4_NATIVE)
    assert best_length(0.5, 0.0, 0.85, 0.3, 3) == 1 and length.decision(4) == 1
    assert length.decision(1) == 1
    for _ in range(RECENT):  # rejected at once, always: no prefix pays, nothing is verified
        length.observe(4, 0)
    assert length.decision(4) == 0 and length.decision(1) == 0
    for _ in range(RECENT):  # a copied passage: accepted whole, the whole run is verified however long
        length.observe(8, 8)
    assert length.decision(32) == 32


def test_a_lookups_expected_tokens_come_from_its_drafts_outcomes_position_by_position():
    """Lookup drafts come in runs: once ``MIN_OUTCOMES`` drafts were judged, their outcomes give the tokens a verify
    yields, not a per-token rate (on int4's "edit" reply that rate stayed ~0.7 while drafts of 4 kept nothing)."""
    length = DraftLength(start=4, cap=32, free=True, book=CostBook(INT4_NATIVE))
    length.observe(8, 8)
    for _ in range(MIN_OUTCOMES - 2):
        length.observe(4, 0)
    assert length.expected(4) == pytest.approx(expected_tokens(length.acceptance(), 4))  # too few: geometric
    for _ in range(3):
        length.observe(4, 0)
    # 8 of 8 kept once, then 5 drafts of 4 rejected at once: 1/6 of the drafts pass position 1 and none of those
    # fails later, so 1 + 4/6 tokens for a verify of 4 (2.05 plain steps) and 1 + 1/6 for one (1.15): neither pays,
    # where the per-token rate (8 of 13) would verify all four.
    assert length.expected(4) == pytest.approx(1 + 4 / 6) and length.expected(1) == pytest.approx(1 + 1 / 6)
    assert worth(length.acceptance(), 4, INT4_NATIVE) and length.decision(4) == 0
    copying = DraftLength(start=1, cap=32, free=True, book=CostBook(INT4_NATIVE))
    for run in (1, 2, 4, 8):  # a copied passage, its run doubling: each draft accepted whole
        copying.observe(run, run)
    # A whole draft says nothing past its own length: there the rate (1.0 here) stands, so 16 drafts pay.
    assert copying.expected(16) == pytest.approx(17.0) and copying.decision(16) == 16
    copying.observe(16, 10)  # the run ends inside the draft: position 11 failed for the one draft that reached it
    assert copying.expected(16) == pytest.approx(11.0)


def test_the_book_scales_each_verify_to_the_plain_steps_of_its_moment():
    book = CostBook()
    book.plain(0.010)
    book.plain(0.010)
    book.verified(4, 0.5)  # the length's first verify: left out
    book.verified(4, 0.022)  # 2.2 plain steps of its moment
    assert book.verify_line(0.010) == pytest.approx((0.010, 0.003))
    for _ in range(RECENT):  # the machine five times busier: the plain steps now take 50 ms
        book.plain(0.050)
    costs = book.costs()
    assert costs.plain_s == pytest.approx(0.050)
    # The verify counts as 2.2 of today's plain steps, not as 22 ms against 50 ms ones (which would make it free).
    assert (costs.verify_base_s, costs.verify_token_s) == pytest.approx((0.050, 0.015))


def test_noise_never_makes_a_verify_free_and_the_prior_is_int4s_share():
    book = CostBook()
    book.plain(0.010)
    book.plain(0.010)
    # No verify timed yet: its first row a plain step, each draft the prior share of one.
    costs = book.costs()
    assert (costs.verify_base_s, costs.verify_token_s) == pytest.approx((0.010, 0.010 * PRIOR_PER_TOKEN))
    assert PRIOR_PER_TOKEN == pytest.approx(INT4_NATIVE.verify_token_s)
    book.verified(4, 0.5)  # the length's first verify: left out
    book.verified(4, 0.008)  # faster than a plain step: noise (a verify of 5 rows is never cheaper than one)
    costs = book.costs()
    assert (costs.verify_base_s, costs.verify_token_s) == pytest.approx((0.010, 0.010 * PRIOR_PER_TOKEN))
    assert not worth(0.3, 4, costs)  # so a poor acceptance still does not pay for four drafts


def test_a_verify_judged_not_worth_it_is_probed_after_fewer_and_fewer_drafts():
    book = CostBook()
    due = [book.probe_due(False) for _ in range(PROBE_AFTER + 1 + 2 * PROBE_AFTER + 1)]
    # PROBE_AFTER drafts only compared, the next verified (to re-time it); then twice as many before the next probe.
    assert [i for i, d in enumerate(due) if d] == [PROBE_AFTER, PROBE_AFTER + 1 + 2 * PROBE_AFTER]
    assert not book.probe_due(True)  # a draft that pays by itself: the count starts afresh
    assert [book.probe_due(False) for _ in range(PROBE_AFTER + 1)][-1]
    told = CostBook(Costs(1.0, 1.0, 1.0))  # told costs are not re-timed
    assert not any(told.probe_due(False) for _ in range(4 * PROBE_CAP))
    length = DraftLength(start=4, cap=32, free=True, book=CostBook(INT4_NATIVE))
    length.observe(4, 0)
    assert length.decision(4) == 0 and length.probe_length(4) == 1  # a probe verifies the best prefix all the same


def test_a_probe_verifies_a_length_verified_before_where_there_is_one():
    """A length's first verify may do work once per row count (bf16's row-exactness probes: ~2.5x its later
    verifies on an AVX2 EPYC), so a probe takes the best prefix, or the best of the shorter lengths verified before."""
    book = CostBook(Costs(plain_s=0.01, verify_base_s=0.01, verify_token_s=0.001))
    length = DraftLength(start=4, cap=32, free=True, book=book)
    assert length.probe_length(8) == 4  # none verified yet: the best prefix (prior acceptance 0.7)
    book.verified(3, 0.05)  # first verifies of 3 and 6 drafts: seen, not timed
    book.verified(6, 0.08)
    assert book.seen(3) and book.seen(6) and not book.seen(4)
    assert length.probe_length(8) == 3  # 3 was verified before; 6, though verified, is longer than the best
    assert length.probe_length(2) == 2  # no verified length up to the best prefix of a draft of 2
