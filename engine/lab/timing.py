"""Experiments 1-3: how long a reply takes, how prefill grows with the prompt, what the KV cache saves.

1. ``run_greedy20``: greedy decode of 20 tokens, repeated; total time, TTFT, average tok/s (median, spread).
2. ``run_ttft_vs_length``: TTFT and prefill tok/s for English and Chinese prompts from ~10 to ~500 characters.
3. ``run_kv_cache``: the same input with the KV cache on and off; per-token latency over the generated
   position, the ratio, and whether the greedy texts are identical.

Every figure comes from ``Metrics`` of real generations (``engine.lab.runs.generate_once``, a fresh
session per run so nothing is reused). A warm-up generation runs first and is excluded: the first
forward pays one-off costs (allocator, kernel selection) that are not what the experiment asks about.
This module owns the plans and the tables; it owns no timing formula (``Metrics`` defines them).
"""

from __future__ import annotations

import math
import secrets
import threading
import time
from collections.abc import Sequence

from engine.inputs import SamplingConfig
from engine.lab.results import ExperimentResult, Series, mean, median
from engine.lab.runs import Progress, RunRecord, generate_once, is_remote, model_label, no_progress

# Prompts written for the lab. The English one asks for a long, predictable continuation so greedy
# decoding rarely stops at an end token before the requested length.
GREEDY_PROMPT = "Explain in simple words how a kettle boils water, step by step."

PASSAGE_EN = (
    "The tea house at the corner of the old market opens before sunrise. Its owner boils water in a "
    "copper kettle, rinses the cups twice and sets out small plates of roasted seeds for the first "
    "customers, who are mostly porters and bus drivers starting an early shift. They talk about the "
    "weather, the price of rice and the football match from the night before. By seven the room is "
    "full and noisy; by nine it is quiet again, and the owner sits by the window with a newspaper, "
    "waiting for the students who come in the afternoon to study, argue and drink far too much tea."
)
PASSAGE_ZH = (
    "老城市场拐角的那家茶馆天不亮就开门。老板先用铜壶烧水，把杯子烫两遍，再摆上几碟炒瓜子，等第一批客人进门。"
    "来得最早的多半是搬运工和早班公交司机，他们聊天气，聊米价，也聊昨晚的球赛。到了七点，屋里坐满了人，热闹得"
    "听不清对面说话；到了九点，又一下子安静下来。老板坐到窗边，翻开报纸，一边喝茶一边等下午来的学生。学生们在这"
    "里看书、争论、一坐就是半天，茶续了一壶又一壶。有人说这家茶馆开了四十年，也有人说更久，可谁也说不清第一任"
    "老板姓什么。墙上挂着一张发黄的照片，照片里的门口和今天几乎一模一样，只是街上跑的还是自行车。每逢下雨，屋檐"
    "下会挤满躲雨的路人，老板从不赶人，反而会多烧一壶水。附近的孩子放学后常来写作业，写完了就帮忙擦桌子，换一"
    "碟点心。很多搬走多年的老街坊回到城里，第一件事就是来这里坐一坐，点一壶最便宜的茉莉花茶，听听熟悉的吵闹声。"
    "他们说，城市变了很多，只有这张桌子、这壶茶和这份热闹还留在原地，像是专门在等他们回来。"
    "去年冬天，老板的孙女从外地回来帮忙，她在门口添了一块小黑板，每天写一句天气预报和一句笑话。老主顾们起初"
    "不习惯，后来却养成了进门先看黑板的习惯，看完再找座位。有人把黑板上的笑话抄在本子上，说等攒够一百条就出一本书。"
)
KV_TASK = "\n\nAfter reading this, count from 1 to 100 in digits, separated by commas."

REMOTE_TIMING_NOTE = ("on a server: times are measured on this client from the stream (network and queueing "
                      "included); token counts are the server's (usage), a token's time is its chunk's arrival",)
TAG = "[{}] "  # the unique tag in front of each timed prompt sent to a server (see run_ttft_vs_length)
TAG_CHARS = len(TAG.format("0" * 8))

LENGTHS_FULL = (10, 50, 100, 200, 300, 400, 500)
LENGTHS_QUICK = (10, 100, 250, 500)


def _warm_up(loaded, cancel: threading.Event) -> RunRecord:
    return generate_once(loaded, "Hi", SamplingConfig(temperature=0.0, repetition_penalty=1.0, max_new_tokens=4),
                         cancel)


def _spread(values: Sequence[float]) -> tuple[float, float, float]:
    """(median, min, max) of the defined values; NaN when none."""
    defined = [v for v in values if v is not None and math.isfinite(v)]
    if not defined:
        return math.nan, math.nan, math.nan
    return median(defined), min(defined), max(defined)


def _r(value: float | None, digits: int = 4) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, digits)


# ------------------------------------------------------------------ 1. greedy decode of 20 tokens


def run_greedy20(loaded, cancel: threading.Event, *, reps: int = 5, max_new_tokens: int = 20,
                 prompt: str = GREEDY_PROMPT, progress: Progress = no_progress) -> ExperimentResult:
    started = time.perf_counter()
    progress(0.0, "greedy 20: warm-up")
    _warm_up(loaded, cancel)
    config = SamplingConfig(temperature=0.0, repetition_penalty=1.0, max_new_tokens=max_new_tokens)
    rows = []
    ttfts, totals, avgs, decodes = [], [], [], []
    for rep in range(reps):
        progress(rep / reps, f"greedy 20: run {rep + 1} of {reps}")
        run = generate_once(loaded, prompt, config, cancel)
        m = run.metrics
        n = m.generated_tokens
        avg = n / m.e2e_s if m.e2e_s else math.nan  # "average tok/s": tokens over the total time, TTFT included
        ttfts.append(m.ttft_s)
        totals.append(m.e2e_s)
        avgs.append(avg)
        decodes.append(m.decode_tok_s if m.decode_tok_s is not None else math.nan)
        rows.append((rep + 1, n, m.known("prompt_tokens"), _r(m.ttft_s), _r(m.e2e_s), _r(avg, 2), _r(m.decode_tok_s, 2),
                     run.reason))
    progress(1.0, "greedy 20: done")
    summary: dict[str, float | int | None] = {"runs": reps, "new_tokens_requested": max_new_tokens}
    for name, values in (("ttft_s", ttfts), ("total_s", totals), ("avg_tok_s", avgs), ("decode_tok_s", decodes)):
        med, lo, hi = _spread(values)
        summary[f"{name}_median"] = _r(med)
        summary[f"{name}_min"] = _r(lo)
        summary[f"{name}_max"] = _r(hi)
    runs_x = tuple(float(i + 1) for i in range(reps))
    series = (Series("total time (s)", runs_x, tuple(totals), "run", "seconds", panel=0),
              Series("TTFT (s)", runs_x, tuple(ttfts), "run", "seconds", panel=0),
              Series("average tok/s", runs_x, tuple(avgs), "run", "tokens / s", panel=1),
              Series("decode tok/s", runs_x, tuple(decodes), "run", "tokens / s", panel=1))
    return ExperimentResult(
        key="greedy20", title=f"Greedy decode of {max_new_tokens} tokens, {reps} runs",
        columns=("run", "generated_tokens", "prompt_tokens", "ttft_s", "total_s", "avg_tok_s", "decode_tok_s",
                 "finish"),
        rows=tuple(rows), series=series, summary=summary,
        notes=(f"prompt: {prompt!r}; a warm-up run is excluded",
               "avg_tok_s = generated tokens / total time (TTFT included); decode_tok_s = (n-1) / (t_last - t_first)",
               "spread = min and max over the runs") + (REMOTE_TIMING_NOTE if is_remote(loaded) else ()),
        model=model_label(loaded), elapsed_s=time.perf_counter() - started)


# ------------------------------------------------------------------ 2. TTFT against prompt length


def _fit_prompt(tokenizer, passage: str, chars: int, budget: int) -> str:
    """The first ``chars`` characters of ``passage``, shortened until its tokens fit ``budget``."""
    text = passage[:chars]
    while len(text) > 1 and len(tokenizer(text, add_special_tokens=False).input_ids) > budget:
        text = text[: max(1, int(len(text) * 0.9))]
    return text


class _ServerFit:
    """Prompt lengths that fit a server's context without its tokenizer: the token counts the server reported
    for the shorter prompts already sent (``usage``) give tokens per character, and a longer prompt is cut to
    what that rate says fits, with a margin. A server that says neither its context nor its counts: no cut."""

    MARGIN = 0.85  # the rate of the first characters is a guess for the rest; stay well inside the budget

    def __init__(self, context_length: int, overhead: int | None) -> None:
        self.budget = context_length - 96 if context_length else None
        self.overhead = overhead  # tokens of the template around a message ("Hi" counted as one token)
        self.rate: dict[str, float] = {}  # language -> prompt tokens per character, from the longest sent yet

    def text(self, lang: str, passage: str, chars: int) -> str:
        text = passage[:chars]
        rate = self.rate.get(lang)
        if self.budget is None or self.overhead is None or rate is None or rate <= 0:
            return text
        allowed = int((self.budget - self.overhead) * self.MARGIN / rate) - TAG_CHARS
        return text[: max(1, min(len(text), allowed))]

    def measured(self, lang: str, chars: int, prompt_tokens: int | None) -> None:
        if prompt_tokens is not None and self.overhead is not None and chars > 0:
            self.rate[lang] = max(prompt_tokens - self.overhead, 1) / chars


def run_ttft_vs_length(loaded, cancel: threading.Event, *, lengths: Sequence[int] = LENGTHS_FULL, reps: int = 3,
                       progress: Progress = no_progress) -> ExperimentResult:
    started = time.perf_counter()
    remote = is_remote(loaded)
    progress(0.0, "TTFT vs length: warm-up")
    warm = _warm_up(loaded, cancel)
    # TTFT only: one token ends the run.
    config = SamplingConfig(temperature=0.0, repetition_penalty=1.0, max_new_tokens=1)
    if remote:
        hi = warm.metrics.known("prompt_tokens")
        server_fit = _ServerFit(loaded.facts.context_length, hi - 1 if hi else None)
    else:
        # Leave room for the chat template (system prompt, role markers) and the one new token.
        budget = max(8, loaded.facts.context_length - 96)
    passages = {"en": PASSAGE_EN, "zh": PASSAGE_ZH}
    plans = [(lang, chars) for lang in passages for chars in sorted(lengths)]
    rows = []
    points: dict[str, list[tuple[float, float, float]]] = {"en": [], "zh": []}
    for i, (lang, chars) in enumerate(plans):
        passage = passages[lang]
        text = (server_fit.text(lang, passage, chars) if remote
                else _fit_prompt(loaded.tokenizer, passage, chars, budget))
        progress(i / len(plans), f"TTFT vs length: {lang}, {len(text)} characters")
        ttfts, prefills, rates, prompts = [], [], [], []
        metrics = None
        for _ in range(reps):
            # A server's prefix cache (vLLM, llama-server) would serve a repeated prompt from its cache: a tag of
            # its own in front makes every request new to it, so each TTFT includes the prompt's whole prefill.
            sent = TAG.format(secrets.token_hex(4)) + text if remote else text
            metrics = generate_once(loaded, sent, config, cancel).metrics
            ttfts.append(metrics.ttft_s)
            prefills.append(metrics.known("prefill_s"))
            rates.append(metrics.known("prefill_tok_s"))
            prompts.append(metrics.known("prompt_tokens"))
        ttft, prefill, rate = median(ttfts), _median_known(prefills), _median_known(rates)
        prompt_tokens = _median_known(prompts)
        if remote:
            server_fit.measured(lang, len(text) + TAG_CHARS, None if prompt_tokens is None else int(prompt_tokens))
        rows.append((lang, chars, len(text), prompt_tokens if prompt_tokens is None else int(prompt_tokens),
                     metrics.known("prefill_tokens"), _r(ttft), _r(prefill), _r(rate, 1),
                     metrics.known("reused_tokens"),
                     "" if len(text) == min(chars, len(passage)) else "trimmed to fit the context"))
        if prompt_tokens is not None:
            points[lang].append((float(prompt_tokens), ttft * 1000.0, math.nan if rate is None else rate))
    progress(1.0, "TTFT vs length: done")
    series = []
    names = {"en": "English", "zh": "Chinese"}
    for lang, pts in points.items():
        pts.sort()  # trimmed prompts (a small context) can reorder lengths; a line must run left to right
        xs = tuple(p[0] for p in pts)
        series.append(Series(f"TTFT, {names[lang]}", xs, tuple(p[1] for p in pts), "prompt tokens", "TTFT (ms)",
                             panel=0))
        if not remote:  # a server does not say how long its prefill took: no panel of made-up rates
            series.append(Series(f"prefill tok/s, {names[lang]}", xs, tuple(p[2] for p in pts), "prompt tokens",
                                 "prefill tokens / s", panel=1))
    summary: dict[str, float | None] = {}
    for lang, pts in points.items():
        if pts:
            summary[f"ttft_ms_shortest_{lang}"] = _r(pts[0][1], 2)
            summary[f"ttft_ms_longest_{lang}"] = _r(pts[-1][1], 2)
            summary[f"prompt_tokens_longest_{lang}"] = pts[-1][0]
    flags = []
    if not any(points.values()):
        flags.append("the server reported no token counts (no usage in its stream): TTFT cannot be placed against "
                     "prompt tokens; the table lists it per prompt length in characters")
    notes = [f"median of {reps} runs per length, each on a fresh session (no cache reuse)",
             "prompt_tokens include the chat template; TTFT = submit -> first token (template and prefill)",
             "a warm-up run is excluded"]
    if remote:
        notes += ["on a server: TTFT is measured on this client, so it includes the network, the server's HTTP "
                  "path and any wait in its queue",
                  "each message starts with a random 8-hex tag (counted in prompt_tokens) so the server's prefix "
                  "cache can reuse at most the chat template's opening from an earlier run; reused_tokens is what "
                  "the server says it reused (null: not reported)",
                  "prefill_s and prefill_tok_s are not reported through the API (null); prompt lengths are fitted "
                  "to the server's context from the token counts it reported"]
    return ExperimentResult(
        key="ttft_length", title="TTFT against prompt length (prefill grows with the prompt)",
        columns=("lang", "target_chars", "chars", "prompt_tokens", "prefill_tokens", "ttft_s", "prefill_s",
                 "prefill_tok_s", "reused_tokens", "note"),
        rows=tuple(rows), series=tuple(series), summary=summary, flags=tuple(flags), notes=tuple(notes),
        model=model_label(loaded), elapsed_s=time.perf_counter() - started)


def _median_known(values: Sequence[float | None]) -> float | None:
    """Median of the values that are known; None when none is (a figure the engine cannot report)."""
    defined = [v for v in values if v is not None]
    return median(defined) if defined else None


# ------------------------------------------------------------------ 3. KV cache on vs off


def slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares slope of ys against xs (NaN with fewer than two points)."""
    if len(xs) < 2:
        return math.nan
    mx, my = mean(xs), mean(ys)
    var = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var if var else math.nan


def first_divergence(a: Sequence[int], b: Sequence[int]) -> int | None:
    """Index of the first differing token, or None when the sequences are identical."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def run_kv_cache(loaded, cancel: threading.Event, *, max_new_tokens: int = 128, passage_chars: int = len(PASSAGE_EN),
                 prompt: str | None = None, progress: Progress = no_progress) -> ExperimentResult:
    """Without the cache step i recomputes prompt + i tokens, so the run costs ~n·P + n²/2 token-forwards:
    a shorter prompt makes the rise with position steeper (relative to the start) and the run cheaper."""
    started = time.perf_counter()
    if prompt is None:
        budget = max(8, loaded.facts.context_length - max_new_tokens - 96)
        prompt = _fit_prompt(loaded.tokenizer, PASSAGE_EN, passage_chars, budget) + KV_TASK
    progress(0.0, "KV cache: warm-up")
    _warm_up(loaded, cancel)
    runs = {}
    # Without the cache each step recomputes the whole prefix, so that run takes most of the time: it gets most
    # of the bar, and both report each token, so a minutes-long step moves and names where it is.
    for use_cache, start, span in ((True, 0.05, 0.15), (False, 0.2, 0.8)):
        label = f"KV cache {'on' if use_cache else 'off'}"
        progress(start, f"{label}: generating {max_new_tokens} tokens")

        def step(n: int, _label: str = label, _start: float = start, _span: float = span) -> None:
            progress(_start + _span * min(n, max_new_tokens) / max_new_tokens,
                     f"{_label}: token {n} of {max_new_tokens}")

        config = SamplingConfig(temperature=0.0, repetition_penalty=1.0, max_new_tokens=max_new_tokens,
                                use_kv_cache=use_cache)
        runs[use_cache] = generate_once(loaded, prompt, config, cancel, on_token=step)
    progress(1.0, "KV cache: done")

    on, off = runs[True], runs[False]
    itl_on = [x * 1000.0 for x in on.metrics.itl_s]  # ms; gap i is the cost of generated position i+1
    itl_off = [x * 1000.0 for x in off.metrics.itl_s]
    n = min(len(itl_on), len(itl_off))
    rows = []
    for i in range(n):
        ratio = itl_off[i] / itl_on[i] if itl_on[i] else math.nan
        rows.append((i + 1, _r(itl_on[i], 3), _r(itl_off[i], 3), _r(ratio, 2)))
    quarter = max(1, n // 4)
    early_on, late_on = mean(itl_on[:quarter]), mean(itl_on[n - quarter:n])
    early_off, late_off = mean(itl_off[:quarter]), mean(itl_off[n - quarter:n])
    xs = [float(i + 1) for i in range(n)]
    divergence = first_divergence(on.token_ids, off.token_ids)
    identical = on.text == off.text and divergence is None
    flags = []
    if not identical:
        flags.append(f"greedy text differs with the KV cache off (first different token at position {divergence}):"
                     " both runs compute every step with the same kernels (engine/executor/recompute.py), so this is a"
                     " defect: please report it")
    if n < 8:
        flags.append(f"only {n + 1} tokens were generated (the model stopped early): too few to see a trend")
    summary = {
        "prompt_tokens": on.metrics.prompt_tokens, "generated_tokens_on": len(on.token_ids),
        "generated_tokens_off": len(off.token_ids),
        "kv_on_early_ms": _r(early_on, 3), "kv_on_late_ms": _r(late_on, 3),
        "kv_off_early_ms": _r(early_off, 3), "kv_off_late_ms": _r(late_off, 3),
        "kv_on_slope_ms_per_token": _r(slope(xs, itl_on[:n]), 4),
        "kv_off_slope_ms_per_token": _r(slope(xs, itl_off[:n]), 4),
        "ratio_off_on_mean": _r(mean(itl_off[:n]) / mean(itl_on[:n]) if n else math.nan, 2),
        "ratio_off_on_late": _r(late_off / late_on if late_on else math.nan, 2),
        "e2e_on_s": _r(on.metrics.e2e_s), "e2e_off_s": _r(off.metrics.e2e_s),
        "texts_identical": identical, "first_divergence": divergence,
    }
    series = [Series("KV cache on", tuple(xs), tuple(itl_on[:n]), "generated position", "latency per token (ms)"),
              Series("KV cache off", tuple(xs), tuple(itl_off[:n]), "generated position", "latency per token (ms)")]
    # A straight-line fit per series: on a busy machine single gaps spike, the trend is what matters.
    for name, ys in (("KV cache on", itl_on[:n]), ("KV cache off", itl_off[:n])):
        k = slope(xs, ys)
        if math.isfinite(k):
            b = mean(ys) - k * mean(xs)
            series.append(Series(f"{name}, least-squares fit", tuple(xs), tuple(b + k * x for x in xs),
                                 "generated position", "latency per token (ms)"))
    rows.append(("text, KV on", on.text, "", ""))
    rows.append(("text, KV off", off.text, "", ""))
    return ExperimentResult(
        key="kv_cache", title="KV cache on vs off: latency per generated token",
        columns=("position", "kv_on_ms", "kv_off_ms", "ratio"), rows=tuple(rows), series=tuple(series),
        summary=summary, flags=tuple(flags),
        notes=("latency at position i = gap between tokens i-1 and i (ITL); the first token (TTFT) is excluded",
               f"early/late = mean of the first/last {quarter} positions; slope by least squares",
               "without the cache every step recomputes the whole sequence, so its cost grows with the position"),
        model=model_label(loaded), elapsed_s=time.perf_counter() - started)
