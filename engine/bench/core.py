"""The measuring core shared by the benchmarks of ``engine/bench/``: warm-up, alternated repetitions,
medians and ratios, best-of timing, and a per-token clock for ``generate()``.

Owns how a figure is measured, never which: ``measure`` warms every variant up once (every scenario,
timed and reported apart), then runs ``reps`` repetitions in which each scenario runs every variant,
their order rotated from one repetition to the next so drift and neighbours' load hit them alike;
``summarise`` turns the runs into medians and ratios to the baseline; ``best_seconds`` is the best of
a few timed passes (noise only ever slows a pass down); ``TokenClock`` is a transformers streamer that
notes when each generated token exists. Used by ``engine.bench.run`` (the benchmark), ``engine.bench.cuda``
(the GPU bench) and ``engine.bench.membw`` (the bandwidth probe).

Knows no torch, model, prompt or report: device synchronisation is passed in as a callable, the
variants and scenarios are the caller's, and so are the names and units of the figures.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence, TypeVar

T = TypeVar("T")
# (name, fn(variant) -> {figure: value, ...}): one scenario, run on each variant in turn.
Scenario = tuple[str, Callable[[Any], Mapping[str, Any]]]


def no_sync() -> None:
    """The synchronisation of a device whose work is done when the call returns (the CPU)."""


def median(values: Sequence[float | None]) -> float | None:
    """Median of the values that exist; None when none does."""
    clean = [v for v in values if v is not None]
    return statistics.median(clean) if clean else None


def ratio(a: float | None, b: float | None) -> float | None:
    """``a ÷ b``, or None when either side is missing (or ``b`` is zero)."""
    return a / b if a is not None and b else None


def rotated(items: Sequence[T], rep: int) -> list[T]:
    """``items`` starting at position ``rep`` (cyclically): repetition ``rep``'s order of the variants."""
    k = rep % len(items)
    return list(items[k:]) + list(items[:k])


def choose_names(text: str | None, known: Sequence[str], kind: str) -> list[str]:
    """A ``--families`` / ``--vision`` list: ``all`` (or empty) → every known name; else the comma-separated names,
    each one of ``known`` (``ValueError``, one line naming the unknown ``kind``s and the known ones)."""
    if not text or text == "all":
        return list(known)
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown:
        kinds = kind if len(unknown) == 1 else kind.removesuffix("y") + "ies"
        raise ValueError(f"unknown {kinds} {', '.join(unknown)}; known: {', '.join(known)}")
    return names


def decode_rate(times: Sequence[float]) -> float | None:
    """Tokens per second between the first and the last token time (the first token's wait excluded)."""
    return (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 and times[-1] > times[0] else None


@dataclass(frozen=True)
class Measured:
    """What ``measure`` saw: the warm-ups and every timed value, as the scenarios returned them."""

    warmup_s: dict[str, float]  # variant -> seconds of its warm-up (every scenario once; excluded)
    runs: dict[str, dict[str, list[Any]]]  # variant -> figure -> one value per repetition


def measure(variants: Mapping[str, Any], scenarios: Sequence[Scenario], reps: int,
            progress: Callable[[str], None] = lambda _m: None) -> Measured:
    """Warm up each variant once, then ``reps`` repetitions, variants alternated (rotated per repetition)."""
    runs: dict[str, dict[str, list[Any]]] = {name: {} for name in variants}
    warmup: dict[str, float] = {}
    for name, variant in variants.items():
        progress(f"warm-up {name}")
        start = time.perf_counter()
        for _, fn in scenarios:
            fn(variant)
        warmup[name] = time.perf_counter() - start
    names = list(variants)
    for rep in range(reps):
        order = rotated(names, rep)
        for scenario, fn in scenarios:
            for name in order:
                progress(f"rep {rep + 1}/{reps} {scenario} {name}")
                for key, value in fn(variants[name]).items():
                    runs[name].setdefault(key, []).append(value)
    return Measured(warmup, runs)


def summarise(runs: Mapping[str, Mapping[str, Sequence[Any]]], figures: Mapping[str, tuple[str, str]],
              baseline: str = "baseline") -> dict[str, Any]:
    """Per figure (name -> (unit, which direction is better)): its unit, direction, per-variant runs (the
    values that exist), medians and ratios of each other variant's median to the baseline's."""
    out: dict[str, Any] = {}
    for name, (unit, better) in figures.items():
        per = {variant: [x for x in values.get(name, []) if x is not None] for variant, values in runs.items()}
        med = {variant: median(values) for variant, values in per.items()}
        out[name] = {"unit": unit, "better": better, "median": med, "runs": per,
                     "ratio": {k: ratio(med[k], med.get(baseline)) for k in med if k != baseline}}
    return out


def best_seconds(fn: Callable[[], Any], passes: int, sync: Callable[[], None] = no_sync, rank: int = 0) -> float:
    """Best wall time of ``passes`` calls of ``fn`` after one untimed call (first touch: page faults and
    allocator growth are not what is measured), ``sync()`` (the device's) waited for around each. ``rank`` 1: the
    second best, for a figure one freak pass must not set (``engine.bench.membw``)."""
    fn()
    sync()
    times = []
    for _ in range(passes):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return sorted(times)[min(rank, len(times) - 1)]


class TokenClock:
    """A transformers streamer that notes when each generated token id exists: ``sync()`` (the device's)
    runs before each clock read, so a time covers the work that made its token."""

    def __init__(self, sync: Callable[[], None] = no_sync) -> None:
        self.sync = sync
        self.times: list[float] = []
        self.ids: list[int] = []
        self._prompt_seen = False

    def put(self, value: Any) -> None:
        if not self._prompt_seen:  # generate() first streams the prompt
            self._prompt_seen = True
            return
        self.sync()
        self.times.append(time.perf_counter())
        self.ids.extend(int(i) for i in value.reshape(-1).tolist())

    def end(self) -> None:
        pass

    @property
    def decode_tok_s(self) -> float | None:
        return decode_rate(self.times)
