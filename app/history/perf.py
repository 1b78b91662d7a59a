"""Performance records: how one assistant reply was produced (speeds, token counts, memory, device, precision).

Owns ``PerfRecord``: building it from the engine's metrics dict or a stored dict (unknown keys and wrong
types dropped), its JSON text (the ``record`` column of the ``perf`` table, whose DDL is in
``app.history.schema``) and the one-line footer shown under a reply. It touches no file: the store saves
and loads the records (``app.history.store``), the CSV export lays them out (``app.history.export``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from typing import Any

from app.history.repair import as_number
from engine.bench.roofline import VERDICTS
from engine.events import ReuseBreak
from engine.fmt import format_bytes

_BREAK_NUMBERS = ("position", "cached_tokens", "recomputed_tokens")
_BREAK_TEXTS = ("role", "before", "now", "was", "changed_value", "was_value")


def _reuse_break(raw: Any) -> ReuseBreak | None:
    """A stored break (a dict, or the engine's ``ReuseBreak``) checked field by field; None when it is not one."""
    if isinstance(raw, ReuseBreak):
        return raw
    if not isinstance(raw, dict):
        return None
    numbers = {name: raw.get(name) for name in _BREAK_NUMBERS}
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in numbers.values()):
        return None
    index = raw.get("message_index")
    texts = {name: raw.get(name) if isinstance(raw.get(name), str) else "" for name in _BREAK_TEXTS}
    return ReuseBreak(message_index=index if isinstance(index, int) and not isinstance(index, bool) and index >= 0
                      else None, **numbers, **texts)


def _counts(raw: Any) -> tuple[int, ...]:
    """A stored list of whole, non-negative counts (image tokens per picture); () when it is not one."""
    if not isinstance(raw, (list, tuple)):
        return ()
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in raw):
        return ()
    return tuple(raw)


@dataclass(frozen=True)
class PerfRecord:
    """How one assistant reply was produced; the keys are the engine's ``Metrics.to_dict()`` keys."""

    model: str
    ttft_s: float | None = None
    prefill_tok_s: float | None = None
    decode_tok_s: float | None = None
    prompt_tokens: int | None = None
    generated_tokens: int | None = None
    kv_cache_bytes: int | None = None
    weights_bytes: int | None = None
    peak_memory_bytes: int | None = None
    device: str | None = None
    precision: str | None = None
    # A reasoning model's reply (engine.generate.reasoning): its thought's tokens and seconds, and TTFT split.
    thinking_tokens: int | None = None
    thinking_s: float | None = None
    ttft_thought_s: float | None = None
    ttft_answer_s: float | None = None
    # The rest of the performance panel's figures, so a reopened conversation shows them instead of "—" (issue 30);
    # a record saved before they were kept reads them as None.
    prefill_tokens: int | None = None
    reused_tokens: int | None = None
    prefill_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None
    kv_cache_bytes_formula: int | None = None
    kv_cache_bytes_formula_no_gqa: int | None = None
    context_tokens: int | None = None
    context_max: int | None = None
    # Where the prompt parted from the KV cache (the "Why this TTFT" marker and hint), kept in the same JSON.
    reuse_break: ReuseBreak | None = None
    # The roofline verdict said while the reply decoded and the other processes' CPU share it rested on
    # (``engine.bench.roofline``): that share is measured live only, so a reply paged back or reopened shows the
    # verdict it was given instead of one worked out without it (issue 41). Kept in the same JSON: no schema change.
    roofline_verdict: str | None = None
    others_cpu_share: float | None = None
    # A vision turn's pictures (issue 44): the tokens each became, in order, and the vision encoder's time (None: no
    # picture encoded, every one was in the cache), so a reopened reply's "Why this TTFT" shows its image rows again.
    # Kept in the same JSON: no schema change; a record saved before reads them as () and None.
    image_tokens: tuple[int, ...] = ()
    vision_encoder_s: float | None = None

    @classmethod
    def from_metrics(cls, metrics_dict: dict, model: str) -> PerfRecord:
        """Keep the fields a footer and the CSV need; unknown keys and wrong types are dropped."""
        return cls.from_dict({**metrics_dict, "model": model})

    @classmethod
    def from_dict(cls, data: dict) -> PerfRecord:
        values: dict[str, Any] = {"model": str(data.get("model") or "")}
        for f in fields(cls):
            if f.name == "model":
                continue
            raw = data.get(f.name)
            if f.name in ("device", "precision"):
                values[f.name] = raw if isinstance(raw, str) else None
            elif f.name == "roofline_verdict":
                values[f.name] = raw if raw in VERDICTS else None
            elif f.name == "reuse_break":
                values[f.name] = _reuse_break(raw)
            elif f.name == "image_tokens":
                values[f.name] = _counts(raw)
            else:
                num = as_number(raw)
                is_count = str(f.type).startswith("int")  # tokens, bytes, positions: whole numbers
                values[f.name] = None if num is None else (int(num) if is_count else num)
        return cls(**values)

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)

    def footer(self) -> str:
        """One line under a reply, e.g. ``41.8 tok/s · TTFT 86 ms · 128 tokens · KV 2.9 MiB``."""
        parts = []
        if self.decode_tok_s is not None:
            parts.append(f"{self.decode_tok_s:.1f} tok/s")
        if self.ttft_s is not None:
            parts.append(f"TTFT {self.ttft_s * 1000:.0f} ms" if self.ttft_s < 10 else f"TTFT {self.ttft_s:.1f} s")
        if self.generated_tokens is not None:
            parts.append(f"{self.generated_tokens} token{'' if self.generated_tokens == 1 else 's'}")
        if self.kv_cache_bytes is not None:
            parts.append(f"KV {format_bytes(self.kv_cache_bytes)}")
        return " · ".join(parts)
