"""``auto`` on a CPU: the fastest precision that keeps the model's answers, decided once per model.

Decoding one token reads every weight once, so fewer bytes per weight decode faster: int4 holds ~0.35× and
int8 ~0.5× bf16's bytes and decode ~2.3× and ~1.5× faster on the fast path (docs/BENCHMARK.md). Rounding can
hurt a model, though, so ``auto`` takes a candidate only when its teacher-forced top-1 agreement with the float
model on a fixed text (engine/quant/quality.py, ``PROBE_TOKENS`` tokens) meets its bar
(engine/quant/precision.py's ``QUALITY_BARS``: int4 ≥ 90%, int8 ≥ 98%), trying the faster one first, and keeps
the float type when neither does.

The verdict is measured at a model's first ``auto`` load (one float forward pass, one quantization, which
engine/quant/quant_cache.py keeps, and one quantized pass) and remembered in a small JSON file beside that
cache, named by the same key (source files, precision, group, torch, CPU kernels): later loads ask ``remembered``
before reading any float weight and go straight to the chosen precision's cached weights. A damaged or foreign
verdict file is measured again, never trusted.

When the bar applies at all (a CPU, plain safetensors, at least ``MIN_PARAMS`` parameters, the int4 kernel)
is engine/quant/precision.py's policy, which calls ``choose`` through the loader. Owns the measurement and the
verdict file; quantizing is engine/quant/quant_cache.py's, loading engine/models/loader.py's.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Callable, Sequence

from engine.paths import replace_text
from engine.quant import precision as policy
from engine.quant.precision import AutoChoice
from engine.quant.quality import Predictions, agreement, predict, quality_ids
from engine.quant.quant_cache import cache_folder, cache_key, quantize_cached

log = logging.getLogger(__name__)

PROBE_TOKENS = 256  # enough positions for a stable share (±2% at 256), cheap next to the load itself
_VERDICT_FORMAT = 1


def choose(model: Any, tokenizer: Any, weight_files: Sequence[Path], reference: str,
           reload: Callable[[], Any], measuring: Callable[[], None] = lambda: None,
           cache: bool = True) -> tuple[Any, AutoChoice]:
    """Quantize ``model`` (loaded in the float type ``reference``) to the fastest precision meeting its bar.

    Returns the model to use (``reload()``'s when a candidate missed its bar after replacing the float
    weights) and why. A layout quant.py cannot quantize keeps the float model, with no candidate tried.
    ``measuring`` is called once before a verdict is measured (a progress stage: it takes a few seconds).
    ``cache``: whether the candidates' quantized weights go to the cache (engine/quant/quant_cache.py): not where
    quantized loads compute in another float type than ``reference``, since no load would read them.
    """
    ids: list[int] | None = None
    base: Predictions | None = None
    rejected: list[tuple[str, float]] = []
    for precision, bar in policy.QUALITY_BARS.items():
        remembered = _read_verdict(weight_files, precision)
        if remembered is not None and remembered < bar:
            rejected.append((precision, remembered))
            continue
        if remembered is None and base is None:
            measuring()
            ids = quality_ids(tokenizer, PROBE_TOKENS)
            base = predict(model, ids)  # before any weight is replaced
        try:
            quantize_cached(model, precision, weight_files, write=cache)
        except ValueError as exc:  # shapes the int kernels cannot take: stay float, say why in the log
            log.info("auto keeps %s: %s", reference, exc)
            return model, AutoChoice(reference, reference, None, None)
        if remembered is not None:
            return model, AutoChoice(precision, reference, remembered, bar, tuple(rejected))
        assert ids is not None and base is not None
        measured = agreement(predict(model, ids), base)
        _write_verdict(weight_files, precision, measured)
        if measured >= bar:
            return model, AutoChoice(precision, reference, measured, bar, tuple(rejected), measured_now=True)
        rejected.append((precision, measured))
        model = reload()  # the float weights are gone: the next candidate starts from them again
    return model, AutoChoice(reference, reference, None, None, tuple(rejected), measured_now=base is not None)


def remembered(weight_files: Sequence[Path], reference: str) -> AutoChoice | None:
    """``choose``'s answer when the verdict files already decide it, without the float weights: the first candidate
    remembered at or above its bar (candidates remembered below theirs rejected on the way), or ``reference`` when
    every candidate is remembered below its bar. None when a candidate must be measured first.

    A verdict is written only after its candidate quantized, so a remembered pass also means the layout quantizes.
    """
    rejected: list[tuple[str, float]] = []
    for precision, bar in policy.QUALITY_BARS.items():
        value = _read_verdict(weight_files, precision)
        if value is None:
            return None
        if value >= bar:
            return AutoChoice(precision, reference, value, bar, tuple(rejected))
        rejected.append((precision, value))
    return AutoChoice(reference, reference, None, None, tuple(rejected))


def _verdict_path(weight_files: Sequence[Path], precision: str) -> Path:
    return cache_folder() / f"{cache_key(weight_files, precision)}.quality.json"


def _read_verdict(weight_files: Sequence[Path], precision: str) -> float | None:
    try:
        data = json.loads(_verdict_path(weight_files, precision).read_text(encoding="utf-8"))
    except Exception as exc:  # noqa: BLE001 (absent, unreadable, no data folder: measure it)
        if not isinstance(exc, FileNotFoundError):
            log.info("quality verdict unreadable (%s): measuring again", exc)
        return None
    value = data.get("agreement") if isinstance(data, dict) else None
    if (not isinstance(data, dict) or data.get("format") != _VERDICT_FORMAT or data.get("tokens") != PROBE_TOKENS
            or isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0):
        return None
    return float(value)


def _write_verdict(weight_files: Sequence[Path], precision: str, value: float) -> None:
    try:
        path = _verdict_path(weight_files, precision)
        path.parent.mkdir(parents=True, exist_ok=True)
        replace_text(path, json.dumps({"format": _VERDICT_FORMAT, "precision": precision, "tokens": PROBE_TOKENS,
                                       "agreement": value}))
    except Exception as exc:  # noqa: BLE001 (a read-only or full disk costs the next load a measurement)
        log.warning("could not remember the %s quality verdict: %s", precision, exc)


__all__ = ["PROBE_TOKENS", "choose", "remembered"]
