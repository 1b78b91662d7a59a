"""The lab's "Speculative decoding" experiment: speed-up against draft length and acceptance, on the loaded model.

Two prompts: a repeat-heavy one (copy a given ~300-word text with one word changed: the default model's reply
copies most of it; a model with a short context gets a short function to edit) and a fresh one (a story: nothing
to copy). For each, one plain greedy reply is the reference, then one reply with prompt lookup drafting at a fixed
length k for each k in ``DRAFT_LENGTHS`` (``SpeculationConfig`` with ``start_draft = max_draft = k``:
lookup's length then stays k, ``engine.speculate.length``). The table gives each reply's decode rate, speed-up
over the plain one, acceptance rate, tokens per forward of the model and whether its tokens equal the plain
reply's (greedy: they must). Prompt lookup
is the drafter because it needs no other weights in memory; ``python -m engine.bench.speculate`` compares
self-speculation too. One run each, on a machine that may be busy: the speed-ups are indicative, the acceptance and
tokens per step are exact counts.

Owns the plan and its table; the decoding is ``engine.generate.session``'s and ``engine.speculate``'s.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from engine.bench.speculate import PROMPTS
from engine.inputs import SamplingConfig, SpeculationConfig
from engine.lab.results import ExperimentResult, Series
from engine.lab.runs import Progress, check_cancel, generate_once, no_progress

DRAFT_LENGTHS = (1, 2, 4, 6, 8)
CASES = (("repeat-heavy", PROMPTS["rewrite"]), ("fresh", PROMPTS["fresh"]))
# For a model whose context cannot hold the function and a reply (a test model's 256 positions): a short edit.
SHORT_EDIT = ("Rename `n` to `count` in this function and output the whole function:\n\n```python\n"
              "def mean(values):\n    n = len(values)\n    return sum(values) / n\n```")
SMALL_CONTEXT = 2048


def run_speculation(loaded, cancel: threading.Event, *, draft_lengths: Sequence[int] = DRAFT_LENGTHS,
                    max_new_tokens: int = 96, progress: Progress = no_progress) -> ExperimentResult:
    """Plain vs prompt-lookup decoding at each draft length, on both prompts (see the module docstring)."""
    from engine.generate.session import ChatSession  # lazy: it imports torch (the catalogue must not)

    started = time.perf_counter()
    config = SamplingConfig(temperature=0.0, repetition_penalty=1.0, max_new_tokens=max_new_tokens)
    rows, series, flags = [], [], []
    summary: dict[str, float] = {}
    steps = 2 * (2 + len(draft_lengths))
    done = 0
    cases = CASES
    if 0 < loaded.facts.context_length < SMALL_CONTEXT:
        cases = (("repeat-heavy", SHORT_EDIT), ("fresh", PROMPTS["fresh"]))
        max_new_tokens = min(max_new_tokens, loaded.facts.context_length // 4)
        config = SamplingConfig(temperature=0.0, repetition_penalty=1.0, max_new_tokens=max_new_tokens)
    for case, prompt in cases:
        check_cancel(cancel, "speculative decoding")
        progress(done / steps, f"speculative decoding: {case}, warm-up")
        generate_once(loaded, prompt, SamplingConfig(temperature=0.0, max_new_tokens=4), cancel)  # first-call costs
        done += 1
        progress(done / steps, f"speculative decoding: {case}, plain")
        plain = generate_once(loaded, prompt, config, cancel)
        done += 1
        plain_rate = plain.metrics.decode_tok_s
        rows.append((case, "plain", 0, _round(plain_rate, 2), 1.0, None, 1.0, plain.metrics.generated_tokens, True))
        speedups, acceptances = [], []
        for k in draft_lengths:
            check_cancel(cancel, "speculative decoding")
            progress(done / steps, f"speculative decoding: {case}, draft length {k}")
            spec = SpeculationConfig("prompt-lookup", max_draft=k, start_draft=k)
            run = generate_once(loaded, prompt, config, cancel, session=ChatSession(loaded, speculation=spec))
            done += 1
            m = run.metrics
            speedup = m.decode_tok_s / plain_rate if m.decode_tok_s and plain_rate else None
            same = run.token_ids == plain.token_ids
            if not same:
                flags.append(f"{case}, draft length {k}: the reply differs from plain greedy decoding")
            rows.append((case, "prompt-lookup", k, _round(m.decode_tok_s, 2), _round(speedup, 3),
                         _round(m.acceptance_rate, 3), _round(m.tokens_per_step, 3), m.generated_tokens, same))
            speedups.append(speedup or 0.0)
            acceptances.append(m.acceptance_rate or 0.0)
        xs = tuple(float(k) for k in draft_lengths)
        series.append(Series(f"speedup ({case})", xs, tuple(speedups), "draft_length", "speedup", panel=0))
        order = sorted(range(len(acceptances)), key=lambda i: acceptances[i])
        series.append(Series(f"speedup ({case})", tuple(acceptances[i] for i in order),
                             tuple(speedups[i] for i in order), "acceptance_rate", "speedup", panel=1))
        if speedups:
            best = max(range(len(speedups)), key=lambda i: speedups[i])
            summary[f"best_speedup ({case})"] = round(speedups[best], 3)
            summary[f"best_draft_length ({case})"] = draft_lengths[best]
    progress(1.0, "speculative decoding: done")
    return ExperimentResult(
        key="speculation", title="Speculative decoding: speed-up vs draft length and acceptance",
        columns=("prompt", "speculation", "draft_length", "decode_tok_s", "speedup", "acceptance_rate",
                 "tokens_per_step", "generated_tokens", "same_tokens"),
        rows=tuple(rows), series=tuple(series), summary=summary, flags=tuple(flags),
        notes=(f"greedy, {max_new_tokens} new tokens, one reply each after a warm-up; prompt lookup at a fixed "
               "draft length",
               "speed-up: decode tok/s ÷ the plain reply's on the same prompt; tokens per target step is its "
               "ceiling (checking drafts costs a little more than one plain step)",
               "repeat-heavy: " + PROMPTS["rewrite"].splitlines()[0] + " (a ~300-word text)",
               "fresh: " + PROMPTS["fresh"]),
        model=loaded.facts.name, elapsed_s=time.perf_counter() - started)


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)
