"""The prefill rate a forecast may use: ``RecentRates`` keeps the rates recent replies measured, per model,
precision and device, and ``RateEstimate`` is their median with the range they spread over (issue 41: a TTFT
forecast of 6.1 s for an actual 1.87 s, "~154 s before truncation" from one 1-token prefill at 2 tok/s).

One reply's rate is noise: a prefill of a few tokens (a short follow-up on a reused cache) measures the cost of a
call, not throughput, and a busy machine slows any one reply. So a prefill shorter than ``MIN_RATE_TOKENS`` is never
kept, a forecast says how many replies it rests on and the range they gave, and a rate measured on another model,
precision or device is never used. Plain data: no Qt, no inference.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass

MIN_RATE_TOKENS = 16  # a shorter prefill measures per-call overhead, not prefill throughput
KEPT = 8  # the last replies whose rates make the estimate: recent enough to follow the machine's load


@dataclass(frozen=True)
class RateEstimate:
    """The median of ``samples`` measured rates (tok/s) and the lowest and highest of them."""

    median: float
    low: float
    high: float
    samples: int

    def seconds(self, tokens: int) -> tuple[float, float, float]:
        """How long ``tokens`` take: (at the median, at the highest rate, at the lowest)."""
        return tokens / self.median, tokens / self.high, tokens / self.low


@dataclass(frozen=True)
class RateKey:
    """The conditions a rate was measured under; only a rate measured under the same ones is compared or used."""

    model: str
    precision: str
    device: str


def rate_key(facts: object) -> RateKey | None:
    """The key of the model ``facts`` describe (None: no model, or a server's, whose rate is not this machine's)."""
    if facts is None or getattr(facts, "remote", False):
        return None
    return RateKey(str(getattr(facts, "name", "")), str(getattr(facts, "precision", "")),
                   str(getattr(facts, "device", "")))


class RecentRates:
    """The last ``KEPT`` prefill rates per ``RateKey``, each from a prefill of at least ``MIN_RATE_TOKENS`` tokens."""

    def __init__(self) -> None:
        self._rates: dict[RateKey, deque[float]] = {}

    def add(self, key: RateKey | None, rate: float | None, tokens: int | None) -> bool:
        """Keep ``rate`` if it can be trusted (a real rate, from enough tokens, on a known key); whether it was."""
        if key is None or not rate or rate <= 0 or tokens is None or tokens < MIN_RATE_TOKENS:
            return False
        self._rates.setdefault(key, deque(maxlen=KEPT)).append(float(rate))
        return True

    def estimate(self, key: RateKey | None) -> RateEstimate | None:
        """The estimate for ``key``, or None while no reply under those conditions measured a usable rate."""
        rates = self._rates.get(key) if key is not None else None
        if not rates:
            return None
        return RateEstimate(statistics.median(rates), min(rates), max(rates), len(rates))
