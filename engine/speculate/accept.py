"""Accepting drafted tokens: the sampling settings as a distribution, and the acceptance rule.

Owns ``Shaper`` (a ``SamplingConfig`` turned into scores over the vocabulary for a given history: the same
transformers processors ``engine.generate.sampling`` uses, in the same order, so the target's distribution ``p``
and the drafter's ``q`` are transformed alike) and ``accept``: greedy keeps drafted tokens while they equal the
target's argmax (so the output is the one plain decoding gives); sampled follows the speculative sampling papers
(Leviathan et al. 2023, Chen et al. 2023): accept draft ``d`` with probability ``min(1, p(d) / q(d))``, on a
rejection draw from ``norm(max(0, p - q))``, after a fully accepted draft draw a bonus token from ``p``. Every
token is then distributed as plain sampling would distribute it. Knows nothing of models or caches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from engine.generate.id_buffer import IdBuffer
from engine.generate.sampling import Choice, apply_processors, argmax, build_processors
from engine.inputs import SamplingConfig


@dataclass(frozen=True)
class Verdict:
    """What a verification decided: how many drafted tokens were kept, then the one token the target chose."""

    accepted: int
    choices: tuple[Choice, ...]  # the kept drafts, then the correction (or bonus) token


class Shaper:
    """``config`` as scores and probabilities over the next token, for any model's logits and a history of ids."""

    def __init__(self, config: SamplingConfig, generator: torch.Generator | None) -> None:
        self.config = config
        self.greedy = config.greedy
        self.generator = generator
        self._processors = build_processors(config)
        self._needs_ids = config.repetition_penalty != 1.0
        # The repetition penalty's ids as a tensor, kept for the last history seen and grown with it: histories
        # mostly grow by a token or a few a call, and rebuilding the whole (1, seq) tensor from a Python list every
        # step was a per-step cost plain decoding (``Sampler``'s buffer) does not pay.
        self._seen: list[int] = []  # the ids in the buffer, on the host: the shared prefix is found in C
        self._ids: IdBuffer | None = None

    def _ids_for(self, history: Sequence[int], device: torch.device) -> torch.Tensor:
        """``history`` as a (1, seq) long tensor: a view of the kept buffer, rewound to the prefix it shares with
        ``history`` (list comparisons, in C) and extended by the rest."""
        seen, n = self._seen, len(history)
        if self._ids is None or self._ids.device != device:
            seen.clear()
            self._ids = IdBuffer(device, max(64, 2 * n))  # doubled when full: amortised copies
        keep = min(len(seen), n)
        if list(history[:keep]) != seen[:keep]:
            keep = 0  # another history (a reset or an edit): rebuilt whole, as before
        del seen[keep:]
        self._ids.truncate(keep)
        if n > keep:
            new = list(history[keep:])
            self._ids.extend(new)
            seen.extend(new)
        return self._ids.view()

    def scores(self, logits: torch.Tensor, history: Sequence[int]) -> torch.Tensor:
        """Processed float32 scores (1, vocab) of ``logits`` (vocab,) or (1, vocab) after ``history``."""
        scores = logits.float().reshape(1, -1)
        if self._processors:
            ids = self._ids_for(history, scores.device) if self._needs_ids else None  # (1, seq)
            scores = apply_processors(self._processors, ids, scores)
        return scores

    def pick(self, scores: torch.Tensor) -> int:
        """A token from ``scores`` (1, vocab): the argmax when greedy, else a draw from their softmax."""
        if self.generator is None:
            return int(argmax(scores))
        probs = torch.softmax(scores, dim=-1)
        return int(torch.multinomial(probs, 1, generator=self.generator).item())

    def choice(self, token_id: int, probs: torch.Tensor | None) -> Choice:
        """The ``Choice`` the session emits, with the target's probabilities ``probs`` (vocab,) when asked for."""
        k = self.config.top_logprobs
        if not k or probs is None:
            return Choice(token_id, None)
        top_probs, top_ids = torch.topk(probs, min(k, probs.shape[-1]))
        return Choice(token_id, float(probs[token_id]), tuple(top_ids.tolist()), tuple(top_probs.tolist()))


def _draw(probs: torch.Tensor, generator: torch.Generator | None) -> int:
    return int(torch.multinomial(probs, 1, generator=generator).item())


def accept(shaper: Shaper, logits: torch.Tensor, history: Sequence[int], drafted: Sequence[int],
           q: torch.Tensor | None) -> Verdict:
    """Decide on ``drafted`` (k ids) from the target's ``logits`` (k + 1, vocab) after ``history`` + each prefix.

    ``q`` (k, vocab): the drafter's processed probabilities for each drafted token; None for a deterministic
    drafter (prompt lookup, any greedy drafter), whose ``q`` is a point mass on the drafted token.
    """
    seen = list(history)
    kept: list[Choice] = []
    want_probs = bool(shaper.config.top_logprobs)
    for i, token in enumerate(drafted):
        scores = shaper.scores(logits[i], seen)
        if shaper.greedy:
            best = int(argmax(scores))
            probs = torch.softmax(scores[0], dim=-1) if want_probs else None
            if best != token:
                return Verdict(i, tuple(kept) + (shaper.choice(best, probs),))
            kept.append(shaper.choice(token, probs))
            seen.append(token)
            continue
        probs = torch.softmax(scores[0], dim=-1)  # p: masked entries are exactly 0
        p_tok = float(probs[token])
        q_tok = 1.0 if q is None else float(q[i, token])
        u = float(torch.rand((), generator=shaper.generator))
        if q_tok > 0.0 and u < min(1.0, p_tok / q_tok):
            kept.append(shaper.choice(token, probs))
            seen.append(token)
            continue
        if q is None:
            residual = probs.clone()
            residual[token] = 0.0
        else:
            residual = torch.clamp(probs - q[i], min=0.0)
        if float(residual.sum()) <= 0.0:  # p == q up to rounding: the residual is empty, p is exact
            residual = probs
        token = _draw(residual / residual.sum(), shaper.generator)
        return Verdict(i, tuple(kept) + (shaper.choice(token, probs),))
    scores = shaper.scores(logits[len(drafted)], seen)
    probs = torch.softmax(scores[0], dim=-1) if (want_probs or not shaper.greedy) else None
    bonus = int(argmax(scores)) if shaper.greedy else _draw(probs, shaper.generator)
    return Verdict(len(drafted), tuple(kept) + (shaper.choice(bonus, probs),))
