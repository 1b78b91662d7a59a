"""Experiment 4: sampling (temperature 0.9 + top-p 0.9) against greedy, and the text measures it uses.

Owns the measures of a generated sequence: repetition rate (share of n-grams that repeat an earlier
one) and distinct-n (unique n-grams over all n-grams, Li et al. 2016), and the experiment that
applies them to greedy and sampled replies over several seeds. The measures work on any sequence of
hashable items; the experiment feeds them the model's token ids so English and Chinese are treated
alike (no word splitter needed). A server's API sends no token ids: there the experiment asks for one
logprob per token, which makes the stream carry each token's text on its own, and measures over those
texts; a server that sends no logprobs leaves the measures unknown (None), never computed over chunks
that may hold several tokens. Owns no sampling itself: ``engine.generate.sampling``, the session or
the server do that.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Hashable, Sequence

from engine.inputs import SamplingConfig
from engine.lab.results import ExperimentResult, Series, mean
from engine.lab.runs import Progress, RunRecord, generate_once, is_remote, model_label, no_progress

REPETITION_N = 3  # repeated 3-grams catch phrase loops ("the cat the cat the cat") without flagging common bigrams
SAMPLED_TEMPERATURE = 0.9  # the setting the catalogue names (engine/lab/experiments.py)
SAMPLED_TOP_P = 0.9

PROMPT = "Write a short story about a cat who learns to play the piano."


def ngrams(seq: Sequence[Hashable], n: int) -> list[tuple[Hashable, ...]]:
    if n < 1:
        raise ValueError("n must be at least 1")
    return [tuple(seq[i:i + n]) for i in range(len(seq) - n + 1)]


def distinct_n(seq: Sequence[Hashable], n: int) -> float:
    """Unique n-grams ÷ all n-grams (1.0 = no n-gram repeats; 0.0 for a sequence too short to have any)."""
    grams = ngrams(seq, n)
    return len(set(grams)) / len(grams) if grams else 0.0


def repetition_rate(seq: Sequence[Hashable], n: int = REPETITION_N) -> float:
    """Share of n-grams that already occurred earlier in the sequence (0.0 = none repeat).

    At the same n this equals ``1 - distinct_n``; the lab reports it at n=3 (loops of phrases) next
    to distinct-1 and distinct-2 (variety of vocabulary), which answer different questions.
    """
    grams = ngrams(seq, n)
    if not grams:
        return 0.0
    seen: set[tuple[Hashable, ...]] = set()
    repeats = 0
    for gram in grams:
        if gram in seen:
            repeats += 1
        seen.add(gram)
    return repeats / len(grams)


def text_measures(token_ids: Sequence[int]) -> dict[str, float]:
    return {"repetition_rate_3": repetition_rate(token_ids, REPETITION_N),
            "distinct_1": distinct_n(token_ids, 1), "distinct_2": distinct_n(token_ids, 2)}


def _tokens(run: RunRecord, remote: bool) -> Sequence[Hashable] | None:
    """What the measures count: token ids here; on a server each token's text (None: the stream's pieces are not
    single tokens, because the server sent no per-token logprobs)."""
    if not remote:
        return run.token_ids
    return run.token_texts if run.one_token_each else None


def run_sampling(loaded, cancel: threading.Event, *, seeds: Sequence[int] = (0, 1, 2),
                 max_new_tokens: int = 64, prompt: str = PROMPT,
                 progress: Progress = no_progress) -> ExperimentResult:
    """Greedy once (it is deterministic) and temperature 0.9 + top-p 0.9 once per seed, same prompt."""
    started = time.perf_counter()
    remote = is_remote(loaded)
    logprobs = 1 if remote else 0  # on a server: one logprob entry per token splits the stream into tokens
    plans = [("greedy", None, SamplingConfig(temperature=0.0, repetition_penalty=1.0, max_new_tokens=max_new_tokens,
                                             top_logprobs=logprobs))]
    # No repetition penalty on either side: the experiment measures what sampling alone does to repetition.
    plans += [(f"T={SAMPLED_TEMPERATURE} top-p={SAMPLED_TOP_P}", seed,
               SamplingConfig(temperature=SAMPLED_TEMPERATURE, top_p=SAMPLED_TOP_P, max_new_tokens=max_new_tokens,
                              repetition_penalty=1.0, seed=seed, top_logprobs=logprobs))
              for seed in seeds]
    rows = []
    per_config: dict[str, list[dict[str, float]]] = {}
    unmeasured = 0
    for i, (name, seed, config) in enumerate(plans):
        progress(i / len(plans), f"sampling: {name}" + ("" if seed is None else f", seed {seed}"))
        run = generate_once(loaded, prompt, config, cancel)
        tokens = _tokens(run, remote)
        per_config.setdefault(name, [])
        if tokens is None:
            unmeasured += 1
            rows.append((name, seed, run.metrics.known("generated_tokens"), None, None, None, run.text))
            continue
        measures = text_measures(tokens)
        per_config[name].append(measures)
        rows.append((name, seed, len(tokens), round(measures["repetition_rate_3"], 4),
                     round(measures["distinct_1"], 4), round(measures["distinct_2"], 4), run.text))
    progress(1.0, "sampling: done")

    summary: dict[str, float | str | None] = {}
    series = []
    names = list(per_config)
    for metric in ("repetition_rate_3", "distinct_1", "distinct_2"):
        values = tuple(mean([m[metric] for m in per_config[name]]) for name in names)  # NaN: none measured
        for name, value in zip(names, values):
            summary[f"{metric} ({name})"] = round(value, 4) if math.isfinite(value) else None
        series.append(Series(name=metric, x=tuple(float(i) for i in range(len(names))), y=values,
                             x_label="configuration", y_label="mean over seeds", x_ticks=tuple(names)))
    flags = []
    if unmeasured:
        flags.append(f"the server sent no per-token logprobs for {unmeasured} of {len(plans)} replies: their stream "
                     "pieces may hold several tokens each, so their measures are not reported")
    notes = [f"prompt: {prompt!r}; measures over the generated token ids",
             "repetition_rate_3 = share of token 3-grams that already occurred earlier in the reply",
             "distinct-n = unique token n-grams / all token n-grams (higher = more varied)"]
    if remote:
        notes[0] = (f"prompt: {prompt!r}; on a server: measures over the generated tokens' texts (the API sends no "
                    "ids; each token's text comes with its logprob entry), the end token not included")
        notes.append("the seed is sent as the API's seed: whether the server's sampling follows it is the server's")
    return ExperimentResult(
        key="sampling", title="Sampling (T 0.9, top-p 0.9) vs greedy: repetition and distinct-n",
        columns=("config", "seed", "tokens", "repetition_rate_3", "distinct_1", "distinct_2", "text"),
        rows=tuple(rows), series=tuple(series), summary=summary, flags=tuple(flags), notes=tuple(notes),
        model=model_label(loaded), elapsed_s=time.perf_counter() - started)
