"""Precision A/B: the same prompt on bf16, int8 and int4 copies of one model, loaded one after another.

For each precision: load (``engine.models.loader.load_model``), one warm-up reply (excluded), then one
greedy reply whose ``Metrics`` give TTFT and decode tok/s; the loaded facts give the weights' bytes;
the greedy text is compared with the first precision's. Each copy is released before the next loads,
so at most one extra copy is in memory next to the model the user already has. A precision that
cannot load here (bitsandbytes missing, out of memory) becomes a row with its one-line reason, not a
failed experiment. Owns the A/B plan and its table; owns no loading or generation code.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable, Sequence

from engine.errors import CancelledError, EngineError
from engine.fmt import first_difference
from engine.inputs import LoadSpec, SamplingConfig
from engine.lab.results import ExperimentResult, Series
from engine.lab.runs import Progress, check_cancel, generate_once, no_progress
from engine.models.loader import load_model

PRECISIONS = ("bf16", "int8", "int4")
PROMPT = "Give three tips for learning a new language."


def run_precision_ab(model: str, cancel: threading.Event, *, precisions: Sequence[str] = PRECISIONS,
                     device: str = "auto", prompt: str = PROMPT, max_new_tokens: int = 48,
                     progress: Progress = no_progress, loader: Callable | None = None) -> ExperimentResult:
    """Load ``model`` in each precision in turn and compare speed, size and the greedy text."""
    load = loader or load_model
    started = time.perf_counter()
    config = SamplingConfig(temperature=0.0, repetition_penalty=1.0, max_new_tokens=max_new_tokens)
    rows, flags = [], []
    reference: tuple[str, str] | None = None  # (precision, text) every other text is compared with
    measured: list[tuple[str, float, float, float]] = []  # (precision, decode tok/s, TTFT ms, weights MB)
    for i, precision in enumerate(precisions):
        check_cancel(cancel, "precision A/B")
        progress(i / len(precisions), f"precision A/B: loading {precision}")
        t0 = time.perf_counter()
        try:
            loaded = load(LoadSpec(model=model, precision=precision, device=device), cancel=cancel)
        except CancelledError:
            raise
        except EngineError as exc:
            rows.append((precision, None, None, None, None, None, None, f"not loaded: {exc}"))
            flags.append(f"{precision} could not be loaded here: {exc}")
            continue
        load_s = time.perf_counter() - t0
        try:
            progress((i + 0.5) / len(precisions), f"precision A/B: generating on {precision}")
            warm_up = SamplingConfig(temperature=0.0, repetition_penalty=1.0, max_new_tokens=4)
            generate_once(loaded, "Hi", warm_up, cancel)
            run = generate_once(loaded, prompt, config, cancel)
            facts = loaded.facts
        finally:
            del loaded  # release this copy before the next one loads
            gc.collect()
        m = run.metrics
        if reference is None:
            reference = (precision, run.text)
            same = "reference"
        else:
            diff = first_difference(reference[1], run.text)
            same = "identical" if diff is None else f"differs from character {diff}"
            if diff is not None:
                flags.append(f"greedy text on {precision} differs from {reference[0]} (from character {diff})")
        rows.append((facts.precision, round(facts.weights_bytes / 1e6, 3), round(load_s, 2),
                     None if m.ttft_s is None else round(m.ttft_s, 4),
                     None if m.decode_tok_s is None else round(m.decode_tok_s, 2), m.generated_tokens, same, run.text))
        measured.append((facts.precision, m.decode_tok_s or 0.0, (m.ttft_s or 0.0) * 1000.0,
                         facts.weights_bytes / 1e6))
    progress(1.0, "precision A/B: done")
    names = tuple(p for p, *_ in measured)
    xs = tuple(float(k) for k in range(len(measured)))
    series = (Series("decode tok/s", xs, tuple(v[1] for v in measured), "precision", "value", x_ticks=names),
              Series("TTFT (ms)", xs, tuple(v[2] for v in measured), "precision", "value", x_ticks=names),
              Series("weights (MB)", xs, tuple(v[3] for v in measured), "precision", "value", x_ticks=names))
    summary = {f"{p}_{name}": round(v, 2) for p, *vals in measured
               for name, v in zip(("decode_tok_s", "ttft_ms", "weights_mb"), vals)}
    return ExperimentResult(
        key="precision_ab", title="Precision A/B: " + " vs ".join(precisions),
        columns=("precision", "weights_mb", "load_s", "ttft_s", "decode_tok_s", "generated_tokens", "greedy_text",
                 "text"),
        rows=tuple(rows), series=series, summary=summary, flags=tuple(flags),
        notes=(f"prompt: {prompt!r}; greedy, {max_new_tokens} new tokens; a warm-up reply per precision is excluded",
               "each precision is loaded, measured and released before the next one loads",
               "int8/int4 read fewer bytes per weight, so each decoded token is faster (engine/quant/quant.py); "
               "bitsandbytes' bnb-int8/nf4 save memory but decode slower on a CPU"),
        model=model, elapsed_s=time.perf_counter() - started)


def precision_ab_task(loaded, cancel: threading.Event, *, precisions: Sequence[str] = PRECISIONS,
                      max_new_tokens: int = 48, progress: Progress = no_progress) -> ExperimentResult:
    """``submit_task``-shaped: A/B of the model the user has loaded, on the same device."""
    device = loaded.facts.device.split(":")[0]
    return run_precision_ab(loaded.facts.source, cancel, precisions=precisions, device=device,
                            max_new_tokens=max_new_tokens, progress=progress)
