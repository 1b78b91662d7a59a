"""Human names for the lab's raw result keys (``kv_on_early_ms`` → "KV cache on, early tokens (ms)").

The engine's experiments name their columns, summary figures and series with stable keys, which the CSV and JSON
exports keep (scripts read them). The window shows these names instead: ``human(key)`` for one key (the raw key
is the tooltip where the window shows one), ``humanize(result)`` for a result to draw. Composite keys are named
from their parts: a precision prefix (``int4_decode_tok_s``), a statistic suffix (``ttft_s_median``) or a
parenthesised case (``distinct_1 (greedy)``). A key listed nowhere still reads as words (underscores to spaces,
its unit in brackets), never as a raw key. Texts are marked for translation (context "LabNames").
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from PySide6.QtCore import QT_TRANSLATE_NOOP, QCoreApplication

CONTEXT = "LabNames"

NAMES: dict[str, str] = {
    "run": QT_TRANSLATE_NOOP("LabNames", "Run"),
    "runs": QT_TRANSLATE_NOOP("LabNames", "Runs"),
    "generated_tokens": QT_TRANSLATE_NOOP("LabNames", "Tokens generated"),
    "prompt_tokens": QT_TRANSLATE_NOOP("LabNames", "Prompt tokens"),
    "prefill_tokens": QT_TRANSLATE_NOOP("LabNames", "Tokens prefilled"),
    "reused_tokens": QT_TRANSLATE_NOOP("LabNames", "Tokens reused from the cache"),
    "new_tokens_requested": QT_TRANSLATE_NOOP("LabNames", "New tokens asked for"),
    "ttft_s": QT_TRANSLATE_NOOP("LabNames", "Time to first token (s)"),
    "total_s": QT_TRANSLATE_NOOP("LabNames", "Total time (s)"),
    "prefill_s": QT_TRANSLATE_NOOP("LabNames", "Prefill time (s)"),
    "prefill_tok_s": QT_TRANSLATE_NOOP("LabNames", "Prefill speed (tok/s)"),
    "avg_tok_s": QT_TRANSLATE_NOOP("LabNames", "Average speed, TTFT included (tok/s)"),
    "decode_tok_s": QT_TRANSLATE_NOOP("LabNames", "Decode speed (tok/s)"),
    "lang": QT_TRANSLATE_NOOP("LabNames", "Language"),
    "target_chars": QT_TRANSLATE_NOOP("LabNames", "Characters asked for"),
    "chars": QT_TRANSLATE_NOOP("LabNames", "Characters"),
    "position": QT_TRANSLATE_NOOP("LabNames", "Token position"),
    "kv_on_ms": QT_TRANSLATE_NOOP("LabNames", "KV cache on (ms per token)"),
    "kv_off_ms": QT_TRANSLATE_NOOP("LabNames", "KV cache off (ms per token)"),
    "ratio": QT_TRANSLATE_NOOP("LabNames", "Off ÷ on"),
    "kv_on_early_ms": QT_TRANSLATE_NOOP("LabNames", "KV cache on, early tokens (ms per token)"),
    "kv_on_late_ms": QT_TRANSLATE_NOOP("LabNames", "KV cache on, late tokens (ms per token)"),
    "kv_off_early_ms": QT_TRANSLATE_NOOP("LabNames", "KV cache off, early tokens (ms per token)"),
    "kv_off_late_ms": QT_TRANSLATE_NOOP("LabNames", "KV cache off, late tokens (ms per token)"),
    "kv_on_slope_ms_per_token": QT_TRANSLATE_NOOP("LabNames", "KV cache on, growth per token (ms)"),
    "kv_off_slope_ms_per_token": QT_TRANSLATE_NOOP("LabNames", "KV cache off, growth per token (ms)"),
    "ratio_off_on_late": QT_TRANSLATE_NOOP("LabNames", "Off ÷ on, late tokens"),
    "ratio_off_on_mean": QT_TRANSLATE_NOOP("LabNames", "Off ÷ on, on average"),
    "e2e_on_s": QT_TRANSLATE_NOOP("LabNames", "End to end, KV cache on (s)"),
    "e2e_off_s": QT_TRANSLATE_NOOP("LabNames", "End to end, KV cache off (s)"),
    "config": QT_TRANSLATE_NOOP("LabNames", "Settings"),
    "seed": QT_TRANSLATE_NOOP("LabNames", "Seed"),
    "tokens": QT_TRANSLATE_NOOP("LabNames", "Tokens"),
    "repetition_rate_3": QT_TRANSLATE_NOOP("LabNames", "Repeated 3-grams (share)"),
    "distinct_1": QT_TRANSLATE_NOOP("LabNames", "Distinct words (distinct-1)"),
    "distinct_2": QT_TRANSLATE_NOOP("LabNames", "Distinct word pairs (distinct-2)"),
    "text": QT_TRANSLATE_NOOP("LabNames", "Text"),
    "precision": QT_TRANSLATE_NOOP("LabNames", "Precision"),
    "weights_mb": QT_TRANSLATE_NOOP("LabNames", "Weights (MB)"),
    "load_s": QT_TRANSLATE_NOOP("LabNames", "Load time (s)"),
    "greedy_text": QT_TRANSLATE_NOOP("LabNames", "Greedy text"),
    "finish": QT_TRANSLATE_NOOP("LabNames", "Finish"),
    "verdict": QT_TRANSLATE_NOOP("LabNames", "Verdict"),
    "note": QT_TRANSLATE_NOOP("LabNames", "Note"),
    "sentence": QT_TRANSLATE_NOOP("LabNames", "Sentence"),
    "layer": QT_TRANSLATE_NOOP("LabNames", "Layer"),
    "head": QT_TRANSLATE_NOOP("LabNames", "Head"),
    "first_token_mass": QT_TRANSLATE_NOOP("LabNames", "Attention on the first token (share)"),
    "normalised_entropy": QT_TRANSLATE_NOOP("LabNames", "Attention spread (normalised entropy)"),
    "pronoun_to_antecedent": QT_TRANSLATE_NOOP("LabNames", "Pronoun → its noun (attention)"),
    "sink_threshold": QT_TRANSLATE_NOOP("LabNames", "Attention-sink threshold"),
    "attn_implementation_during_capture": QT_TRANSLATE_NOOP("LabNames", "Attention code while capturing"),
    "attn_implementation_after": QT_TRANSLATE_NOOP("LabNames", "Attention code afterwards"),
    "prompt": QT_TRANSLATE_NOOP("LabNames", "Prompt"),
    "speculation": QT_TRANSLATE_NOOP("LabNames", "Drafter"),
    "draft_length": QT_TRANSLATE_NOOP("LabNames", "Draft length (tokens)"),
    "speedup": QT_TRANSLATE_NOOP("LabNames", "Speed-up over plain (×)"),
    "acceptance_rate": QT_TRANSLATE_NOOP("LabNames", "Drafts accepted (share)"),
    "tokens_per_step": QT_TRANSLATE_NOOP("LabNames", "Tokens per target step"),
    "same_tokens": QT_TRANSLATE_NOOP("LabNames", "Same tokens as plain?"),
    "best_speedup": QT_TRANSLATE_NOOP("LabNames", "Best speed-up (×)"),
    "best_draft_length": QT_TRANSLATE_NOOP("LabNames", "Best draft length"),
}
STATISTICS = {"median": QT_TRANSLATE_NOOP("LabNames", "{name}, median"),
              "min": QT_TRANSLATE_NOOP("LabNames", "{name}, lowest"),
              "max": QT_TRANSLATE_NOOP("LabNames", "{name}, highest")}
UNITS = (("_ms_per_token", " (ms/token)"), ("_tok_s", " (tok/s)"), ("_ms", " (ms)"), ("_s", " (s)"),
         ("_mb", " (MB)"), ("_bytes", " (bytes)"))
PRECISION_PREFIX = re.compile(r"^(fp32|fp16|bf16|int8|int4|nf4|fp4|bnb-int8|auto)_(.+)$")
RAW_KEY = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)+$")  # what a key looks like; anything else is already words


def _tr(text: str) -> str:
    return QCoreApplication.translate(CONTEXT, text)


def human(key: str) -> str:
    """The name the window shows for ``key``, in the interface's language."""
    key = str(key)
    if key in NAMES:
        return _tr(NAMES[key])
    case = re.match(r"^(.+?) \((.+)\)$", key)
    if case and (case.group(1) in NAMES or RAW_KEY.match(case.group(1))):
        return f"{human(case.group(1))} ({case.group(2)})"
    precision = PRECISION_PREFIX.match(key)
    if precision:
        return f"{precision.group(1)}: {human(precision.group(2))}"
    base, _, statistic = key.rpartition("_")
    if statistic in STATISTICS and base:
        return _tr(STATISTICS[statistic]).format(name=human(base))
    if not RAW_KEY.match(key):
        return key
    for suffix, unit in UNITS:
        if key.endswith(suffix) and len(key) > len(suffix):
            return _words(key[: -len(suffix)]) + unit
    return _words(key)


def _words(key: str) -> str:
    text = key.replace("_", " ")
    return text[:1].upper() + text[1:]


def humanize(result: Any) -> Any:
    """``result`` with human names in what a chart draws (series' names and axes); the raw result is what exports."""
    series = tuple(dataclasses.replace(s, name=human(s.name), x_label=human(s.x_label), y_label=human(s.y_label))
                   for s in result.series)
    return dataclasses.replace(result, series=series, columns=tuple(human(c) for c in result.columns),
                               summary={human(k): v for k, v in result.summary.items()})
