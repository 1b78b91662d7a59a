"""The arithmetic of the forecast shown while typing: what sending the message will cost.

``forecast`` turns the counts the engine measured for the turn being written (``engine.generate.measure``:
the message's tokens, the whole prompt's, the prefix its KV cache already holds, the messages trimming
leaves out, the reply budget left) and the prefill rate measured on this machine into the figures the
composer shows: the context used, the tokens prefill must compute, the time to first token that takes,
and the warning to give before sending. Pure: counts and rates in, numbers out; the wording is the
window's (``app.window.prompt_meter``), so it can be translated.

The TTFT forecast is prefill only: (prompt tokens the KV cache does not hold) ÷ (the median prefill rate of recent
replies of the same model, precision and device, ``app.state.rate_estimate``), with the range the fastest and the
slowest of them give. Rendering the template and the first sampling step add a few milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.state.rate_estimate import RateEstimate

LEFT_OUT = "left_out"  # the send leaves out the oldest messages to fit the context
REPLY_CUT = "reply_cut"  # the context has less room for the reply than the max new tokens setting


@dataclass(frozen=True)
class Forecast:
    """What sending the message being written will use and cost."""

    text_tokens: int  # the message alone
    context_tokens: int  # the prompt the turn computes over: system + kept history + the message
    context_max: int  # the model's context length (0: unknown)
    reused_tokens: int  # of the prompt, already in the KV cache
    new_tokens: int  # of the prompt, prefill must compute
    ttft_s: float | None  # forecast time to first token; None until a reply measured the prefill rate
    left_out: int  # oldest messages the send leaves out
    reply_budget: int  # max new tokens the reply keeps
    reply_cut: bool  # the reply budget was lowered to the room left in the context
    ttft_low_s: float | None = None  # the forecast at the fastest recent rate
    ttft_high_s: float | None = None  # at the slowest
    rate_samples: int = 0  # how many replies' rates the forecast rests on
    # The attached pictures (issue 44): the tokens each becomes on the loaded vision model (its processor's count),
    # all of them computed by the prefill (a new picture is never in the cache), and the KV bytes they add
    # (tokens × the model's KV bytes per token; None: the model does not say). Included in the counts above.
    image_tokens: tuple[int, ...] = ()
    image_kv_bytes: int | None = None

    @property
    def context_fraction(self) -> float | None:
        """Share of the context the prompt uses, or None when the model does not say its context length."""
        return self.context_tokens / self.context_max if self.context_max > 0 else None

    @property
    def warning(self) -> tuple[str, int] | None:
        """What to warn about before sending: (``LEFT_OUT``, messages left out), else (``REPLY_CUT``, the reply's
        room in tokens), else None."""
        if self.left_out > 0:
            return LEFT_OUT, self.left_out
        if self.reply_cut:
            return REPLY_CUT, self.reply_budget
        return None


def forecast(text_tokens: int, prompt_tokens: int, cached_tokens: int, context_max: int,
             prefill_tok_s: RateEstimate | float | None, dropped_turns: int = 0, reply_budget: int = 0,
             asked_budget: int = 0, image_tokens: tuple[int, ...] = (),
             kv_bytes_per_token: int | None = None) -> Forecast:
    """The figures for a turn whose rendered, trimmed prompt is ``prompt_tokens`` long, of which the KV cache
    holds the first ``cached_tokens``, on a machine whose recent replies prefilled at ``prefill_tok_s`` (an
    estimate, or one rate; None or not positive: not measured yet). ``dropped_turns`` and ``reply_budget`` are what
    trimming decided; ``asked_budget`` the max new tokens setting (the reply is cut when the budget left is lower).
    ``image_tokens``: the attached pictures' (per picture), added to the prompt's text tokens and all computed."""
    pictures = sum(image_tokens)
    prompt_tokens = max(0, prompt_tokens) + pictures
    # The last prompt token is always computed (its logits choose the first reply token), as ChatSession does.
    reused = max(0, min(cached_tokens, prompt_tokens - pictures - 1))
    new = prompt_tokens - reused
    rates = prefill_tok_s
    if isinstance(rates, (int, float)):
        rates = RateEstimate(float(rates), float(rates), float(rates), 1) if rates > 0 else None
    ttft, fast, slow = rates.seconds(new) if rates is not None else (None, None, None)
    return Forecast(text_tokens=max(0, text_tokens), context_tokens=prompt_tokens, context_max=max(0, context_max),
                    reused_tokens=reused, new_tokens=new, ttft_s=ttft,
                    left_out=max(0, dropped_turns), reply_budget=max(0, reply_budget),
                    reply_cut=0 <= reply_budget < asked_budget, ttft_low_s=fast, ttft_high_s=slow,
                    rate_samples=rates.samples if rates is not None else 0, image_tokens=tuple(image_tokens),
                    image_kv_bytes=pictures * kv_bytes_per_token if kv_bytes_per_token and pictures else None)
