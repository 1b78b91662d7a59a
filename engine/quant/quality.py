"""What a precision costs in quality: teacher-forced top-1 agreement with a reference and perplexity.

On one fixed text of ``QUALITY_TOKENS`` tokens, every position's next-token prediction is taken from a
single forward pass (teacher forcing: the model always sees the true text, so one early difference
cannot snowball as it would in free generation). Agreement is the share of positions whose argmax
equals the reference precision's; perplexity is exp(mean negative log-likelihood of the true next
token). Weights held for the int8-activation kernels (engine/quant/tiled.py) compute every position on
those kernels, as decode does, not through prefill's dequantized GEMM. Used by ``python -m engine bench``
and by ``auto``'s quality bar (``engine/quant/auto_quant.py``); owns neither loading nor reporting.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from engine.quant.tiled import decode_products

QUALITY_TOKENS = 512
# Plain prose of several registers, repeated to length: no chat template, the same ids for every precision.
_TEXT = ("Decoding one token reads every weight of the model once, so on a small machine its speed is set by "
         "memory bandwidth, not arithmetic. The printing press spread through Europe within fifty years of "
         "Gutenberg's first Bible; merchants, students and churches bought books that had cost a year's wages. "
         "A cat sat by the window and watched the rain fall on the garden, counting the drops that slid down "
         "the glass. 秒回的意思是立刻回复：模型读取权重越少，每个词元就生成得越快。Water boils at one hundred "
         "degrees Celsius at sea level, and at lower temperatures on a mountain, where the air pressure is less. ")


@dataclass(frozen=True)
class Predictions:
    """One precision's teacher-forced predictions over the fixed text."""

    top1: torch.Tensor  # (n-1,) argmax at each position
    nll: float  # mean negative log-likelihood of the true next token

    @property
    def perplexity(self) -> float:
        return math.exp(self.nll)


def quality_ids(tokenizer: Any, tokens: int = QUALITY_TOKENS) -> list[int]:
    """The fixed text's first ``tokens`` ids."""
    per = max(1, len(tokenizer.encode(_TEXT, add_special_tokens=False)))
    ids = tokenizer.encode(_TEXT * (tokens // per + 1), add_special_tokens=False)
    return ids[:tokens]


@torch.inference_mode()
def predict(model: Any, ids: list[int]) -> Predictions:
    """One forward over ``ids`` with the model's own modules (so any precision's weights are used)."""
    device = next(iter(model.buffers()), None)
    device = device.device if device is not None else next(model.parameters()).device
    input_ids = torch.tensor([ids], device=device)  # (1, n)
    with decode_products(model):  # int8-activation weights compute every position as decode would
        logits = model(input_ids=input_ids, use_cache=False).logits[0, :-1].float()  # (n-1, vocab)
    target = input_ids[0, 1:]
    nll = F.cross_entropy(logits, target).item()
    return Predictions(top1=logits.argmax(dim=-1).cpu(), nll=nll)


def agreement(candidate: Predictions, reference: Predictions) -> float:
    """Share of positions where both precisions predict the same next token."""
    return float((candidate.top1 == reference.top1).float().mean())


__all__ = ["QUALITY_TOKENS", "Predictions", "quality_ids", "predict", "agreement"]
