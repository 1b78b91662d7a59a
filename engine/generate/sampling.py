"""How the next token is chosen: the ``Sampler`` that applies a ``SamplingConfig`` (``engine/inputs.py``) to logits.

The logits processors are transformers' own (repetition penalty, temperature, top-k, top-p), applied in
the order ``generate()`` applies them, so a seeded run here behaves like a seeded ``generate()``.
Randomness comes from a private seeded ``torch.Generator``: the same seed gives the same reply and no
global RNG is touched. The top-k report for the token inspector is one ``topk`` on the final
distribution, done only when asked for. This module owns token choice; it knows nothing of the model,
the KV cache or text.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

import torch
from transformers import (
    LogitsProcessorList,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from engine.generate.id_buffer import IdBuffer
from engine.inputs import SamplingConfig

# Reply positions the repetition penalty's id buffer holds at first; it doubles when full.
INITIAL_REPLY_IDS = 1024


@dataclass(frozen=True)
class Choice:
    """The chosen token, its probability and the best candidates (ids and probabilities)."""

    token_id: int
    prob: float | None  # None when top_logprobs == 0 (nothing extra computed)
    top_ids: tuple[int, ...] = ()
    top_probs: tuple[float, ...] = ()
    drafted: bool = False  # a speculative draft the model accepted (engine.speculate.loop sets it)


def build_processors(config: SamplingConfig) -> LogitsProcessorList:
    """transformers' LogitsProcessorList for ``config``, in ``generate()``'s order.

    Greedy keeps only the repetition penalty: temperature, top-k and top-p cannot change an argmax.
    As in ``generate()``, the penalty sees the prompt's tokens as well as the reply's.
    """
    processors = LogitsProcessorList()
    if config.repetition_penalty != 1.0:
        processors.append(RepetitionPenaltyLogitsProcessor(penalty=float(config.repetition_penalty)))
    if config.greedy:
        return processors
    if config.temperature != 1.0:
        processors.append(TemperatureLogitsWarper(float(config.temperature)))
    if config.top_k > 0:
        processors.append(TopKLogitsWarper(top_k=config.top_k))
    if config.top_p < 1.0:
        processors.append(TopPLogitsWarper(top_p=float(config.top_p)))
    return processors


def apply_processors(processors: LogitsProcessorList, ids: torch.Tensor | None, scores: torch.Tensor) -> torch.Tensor:
    """``processors(ids, scores)``: each processor in order, as ``LogitsProcessorList`` calls them, without its
    per-call inspection of every processor's signature (~50 of the ~300 µs a token spent being chosen on an AVX2 EPYC,
    where an int4 step of the default model takes ~5 ms)."""
    for processor in processors:
        scores = processor(ids, scores)
    return scores


def argmax(scores: torch.Tensor) -> torch.Tensor:
    """The index of the largest of ``scores`` (1, vocab), (1,) on its device: the first one where several tie, as
    ``torch.argmax``. On a CPU through numpy's argmax, ~5 µs over 49k fp32 logits where torch's took ~50 on one
    thread or two (torch 2.13, an AVX2 EPYC); elsewhere ``torch.argmax``."""
    if scores.device.type == "cpu" and scores.dtype == torch.float32 and scores.shape[0] == 1:
        return torch.tensor([int(scores[0].detach().numpy().argmax())])
    return torch.argmax(scores, dim=-1)


class Sampler:
    """Chooses each next token for one request; holds the processors, the generator and an id buffer."""

    def __init__(self, config: SamplingConfig, device: torch.device | str, prompt_ids: list[int],
                 constraint: Any = None) -> None:
        self.config = config
        # An ``engine.constrain.matcher.TokenConstraint``: masks the logits first, follows each chosen token.
        self.constraint = constraint
        self.processors = build_processors(config)
        self._needs_ids = config.repetition_penalty != 1.0
        self._generator: torch.Generator | None = None
        if not config.greedy:
            self._generator = torch.Generator(device=device)
            self._generator.manual_seed(config.seed if config.seed is not None else secrets.randbits(63))
        # One buffer for prompt + reply, written in place: the repetition penalty reads a view of it
        # every step instead of a freshly concatenated tensor.
        self._ids: IdBuffer | None = None
        if self._needs_ids:
            # Sized for the first reply tokens and doubled when full, never for the whole budget up front:
            # a budget of 10**12 (a model that declares no context) must not allocate terabytes.
            n = len(prompt_ids)
            self._ids = IdBuffer(device, n + min(config.max_new_tokens, INITIAL_REPLY_IDS),
                                 limit=n + config.max_new_tokens)  # positions the buffer may ever need
            self._ids.extend(prompt_ids)

    def choose(self, logits: torch.Tensor) -> Choice:
        """Pick the next token from ``logits`` (1, vocab) of the last position."""
        with torch.inference_mode():
            scores = logits.float()  # (1, vocab); float32 so bf16 logits sample like generate() does
            if self.constraint is not None:
                scores = scores.clone() if scores is logits else scores  # the mask writes in place
                self.constraint.mask_(scores)
            if self.processors:
                ids = self._ids.view() if self._ids is not None else None  # (1, seq)
                scores = apply_processors(self.processors, ids, scores)
            k = self.config.top_logprobs
            if self._generator is None:
                token = argmax(scores)  # (1,)
                probs = torch.softmax(scores, dim=-1) if k else None
            else:
                probs = torch.softmax(scores, dim=-1)  # (1, vocab); masked entries are exactly 0
                token = torch.multinomial(probs, num_samples=1, generator=self._generator)[:, 0]  # (1,)
            if self._ids is not None:
                self._ids.append(token)  # device to device: no host round trip
            token_id = int(token.item())  # the one host sync per step: the id is needed on the host anyway
            if self.constraint is not None:
                self.constraint.advance(token_id)
            if not k:
                return Choice(token_id, None)
            top_probs, top_ids = torch.topk(probs[0], min(k, probs.shape[-1]))
            return Choice(token_id, float(probs[0, token_id]), tuple(top_ids.tolist()), tuple(top_probs.tolist()))

    def extend(self, ids: list[int]) -> None:
        """Record tokens chosen elsewhere (speculation's verified drafts and corrections, ``engine.speculate.loop``),
        so the repetition penalty of the next ``choose`` sees them as plain decoding's own choices."""
        if self._ids is not None:
            self._ids.extend(ids)
        if self.constraint is not None:
            for token_id in ids:
                self.constraint.advance(token_id)
