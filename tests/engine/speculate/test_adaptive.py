"""The draft length adapts to what is accepted, and drafting pauses (for longer each time) when it does not pay."""

from __future__ import annotations

from engine.generate.runners import make_runner
from engine.inputs import SamplingConfig, SpeculationConfig
from engine.speculate.drafters import Draft, PromptLookup
from engine.speculate.loop import PAUSE, WINDOW, Speculator

GREEDY = SamplingConfig(temperature=0.0, repetition_penalty=1.0)
PROMPT = [1, 40, 41, 42, 43, 40, 41, 42]


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


def decode(loaded, drafter, steps: int, spec: SpeculationConfig = SpeculationConfig()) -> tuple[list[int], Speculator]:
    runner = make_runner(loaded)
    logits = None
    for _, logits in runner.prefill(PROMPT):
        pass
    speculator = Speculator(drafter, runner, GREEDY, spec, PROMPT)
    token = int(logits.argmax())
    out = [token]
    for _ in range(steps):
        choices = speculator.step(token, 10_000)
        out += [c.token_id for c in choices]
        token = out[-1]
    return out, speculator


def plain(loaded, n: int) -> list[int]:
    runner = make_runner(loaded)
    logits = None
    for _, logits in runner.prefill(PROMPT):
        pass
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
