"""Who proposes the tokens the model then checks: the ``Drafter`` interface and its three drafters.

- ``PromptLookup``: while the reply keeps copying a passage of the conversation (prompt or reply so far), that
  passage's next tokens; otherwise what followed the latest earlier occurrence of the conversation's last n-gram
  (longest first: code edits, summaries, quoting repeat what is already there). Costs no forward pass (``free``:
  ``engine.speculate.length`` lets a run that keeps matching draft longer).
- ``ModelDrafter``: a smaller model with the same tokenizer drafting greedily or by sampling from its own
  (equally processed) distribution over its own KV cache, which rolls back in place to what was accepted.
- the same ``ModelDrafter`` over the loaded model's int4 copy (``int4_copy``: self-speculation, the copy built by
  ``engine.quant.quant``), drafting for its bf16/fp16/fp32 or int8 weights.

``build_drafter`` makes the one a ``SpeculationConfig`` names and refuses, with a ``DraftModelError`` line, a draft
model whose vocabulary is not the target's. Owns drafting only: acceptance is ``engine.speculate.accept``'s, the
step's bookkeeping ``engine.speculate.loop``'s.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, Sequence

import torch

from engine.errors import BadInputError
from engine.generate.context import common_prefix
from engine.generate.sampling import argmax
from engine.executor.runners import make_runner
from engine.inputs import FLOATS, LoadSpec, SpeculationConfig
from engine.speculate.accept import Shaper

MAX_NGRAM = 3  # the longest suffix looked up: longer ones rarely match where a shorter one would not
MIN_NGRAM = 2  # single tokens match almost anywhere, and mostly draft what is then rejected


class DraftModelError(BadInputError):
    """A draft model that cannot draft for the loaded one (another vocabulary, another device, no int4 copy)."""


@dataclass(frozen=True)
class Draft:
    """Drafted ids, and the drafter's processed probabilities for each (k, vocab), None when deterministic."""

    tokens: tuple[int, ...] = ()
    q: torch.Tensor | None = None


class Drafter(Protocol):
    """Proposes up to ``k`` tokens to follow ``history`` (every id so far, prompt and reply), shaped by ``shaper``."""

    name: str

    def draft(self, history: Sequence[int], k: int, shaper: Shaper) -> Draft: ...

    def reset(self) -> None: ...


class PromptLookup:
    """n-gram lookup in the conversation's own tokens; an index of each n-gram's latest end, grown as it grows.

    A match is followed as a run: when every token since the last draft (kept drafts and the model's own) equals
    what came next in the passage drafted from, the next draft goes on from there rather than from the latest
    occurrence of the last n-gram, which in repetitive text (code: ``counts[customer]``) is often another place."""

    name = "prompt-lookup"
    free = True  # drafting costs no forward pass: engine.speculate.length doubles a run that keeps matching

    def __init__(self, max_ngram: int = MAX_NGRAM, min_ngram: int = MIN_NGRAM) -> None:
        self._sizes = tuple(range(max_ngram, min_ngram - 1, -1))
        self.reset()

    def reset(self) -> None:
        self._ids: list[int] = []
        self._ends: dict[tuple[int, ...], int] = {}  # n-gram -> the position right after its latest occurrence
        self._run: tuple[int, int] | None = None  # (history length, source position) of the last draft

    def _index(self, history: Sequence[int]) -> None:
        # Each step's history is the last one grown: a list comparison (in C) checks that, where a common_prefix
        # loop in Python cost tens of microseconds a step on long conversations (issue 45: a step that drafts
        # nothing must cost what a plain step costs).
        if len(history) < len(self._ids) or list(history[:len(self._ids)]) != self._ids:
            self.reset()  # another conversation, or an edited one: index it afresh
        start = len(self._ids)
        self._ids.extend(history[start:])
        ids = self._ids
        # An n-gram ending at ``end`` is indexed once a token follows it (end < len): the suffix never matches itself.
        for end in range(max(1, start), len(ids)):
            for n in self._sizes:
                if end >= n:
                    self._ends[tuple(ids[end - n:end])] = end

    def _continued(self) -> int | None:
        """Where the last draft's passage goes on, if everything since it followed that passage."""
        if self._run is None:
            return None
        at, source = self._run
        grown = len(self._ids) - at
        if grown <= 0 or source + grown >= len(self._ids):  # nothing new, or the passage has nothing after it
            return None
        if self._ids[at:] != self._ids[source:source + grown]:
            return None
        return source + grown

    def draft(self, history: Sequence[int], k: int, shaper: Shaper) -> Draft:
        self._index(history)
        ids = self._ids
        start = self._continued()
        if start is not None:
            self._run = (len(ids), start)
            return Draft(tuple(ids[start:start + k]))
        self._run = None
        for n in self._sizes:
            if len(ids) <= n:
                continue
            end = self._ends.get(tuple(ids[-n:]))
            if end is not None:
                self._run = (len(ids), end)
                return Draft(tuple(ids[end:end + k]))
        return Draft()


class ModelDrafter:
    """Drafts with ``loaded`` (an ``engine.models.model.LoadedModel``) over its own KV cache: each call crops it
    to the common prefix with ``history`` (O(1) on the fast path) and decodes ``k`` tokens from there."""

    def __init__(self, loaded: Any, name: str, target_vocab: int) -> None:
        self.loaded = loaded
        self.name = name
        self._runner = make_runner(loaded, True)
        self._vocab = target_vocab

    def reset(self) -> None:
        self._runner.reset()

    def _fit(self, probs: torch.Tensor) -> torch.Tensor:
        """``probs`` (vocab_draft,) on the target's vocabulary size (padded rows of an embedding differ)."""
        if probs.shape[-1] == self._vocab:
            return probs
        if probs.shape[-1] > self._vocab:
            return probs[:self._vocab]
        return torch.cat((probs, probs.new_zeros(self._vocab - probs.shape[-1])))

    @torch.inference_mode()
    def draft(self, history: Sequence[int], k: int, shaper: Shaper) -> Draft:
        runner = self._runner
        keep = min(common_prefix(runner.cached_ids, history), len(history) - 1)
        runner.crop(keep)
        logits = None
        for _, logits in runner.prefill(list(history[runner.cached_len:])):
            pass
        seen = list(history)
        tokens: list[int] = []
        rows: list[torch.Tensor] = []
        for i in range(k):
            scores = shaper.scores(logits, seen)[0, :self._vocab]
            if shaper.greedy:
                token = int(argmax(scores.unsqueeze(0)))
            else:
                probs = self._fit(torch.softmax(scores, dim=-1))
                token = int(torch.multinomial(probs, 1, generator=shaper.generator).item())
                rows.append(probs)
            tokens.append(token)
            seen.append(token)
            if i + 1 < k:  # the last draft is not fed: the next call's prefill feeds it if it was accepted
                logits = runner.decode(token)
        return Draft(tuple(tokens), torch.stack(rows) if rows else None)


def check_vocabularies(target: Any, draft: Any, draft_name: str) -> None:
    """Refuse a draft model whose tokenizer maps any text to other ids than the target's."""
    mine, theirs = target.tokenizer.get_vocab(), draft.tokenizer.get_vocab()
    if mine == theirs:
        return
    differing = len(set(mine.items()) ^ set(theirs.items()))
    raise DraftModelError(f"draft model {draft_name} cannot draft for {target.facts.name}: their vocabularies "
                          f"differ ({len(theirs)} vs {len(mine)} tokens, {differing} entries not shared); "
                          "use a model of the same family and tokenizer")


def int4_copy(loaded: Any) -> Any:
    """The loaded model's int4 twin for self-speculation, quantized by ``engine.quant.quant`` (through its cache)."""
    facts = loaded.facts
    if not str(facts.device).startswith("cpu"):
        raise DraftModelError("self-speculation drafts with int4, whose kernels are CPU-only: load with --device cpu")
    if facts.precision == "int4":
        raise DraftModelError("self-speculation needs bf16, fp16, fp32 or int8 weights: this model is int4 already")
    if facts.precision in FLOATS:
        from engine.quant.quant import quantize_model  # lazy: quantization is only needed here
        from engine.quant.quant_cache import quantize_cached

        model = copy.deepcopy(loaded.model).to(torch.bfloat16)  # int4's kernels take bf16 activations
        # The cache is keyed by the weight files: without any (a GGUF, a model built in memory) quantize directly.
        files = sorted(Path(facts.source).glob("*.safetensors")) if Path(facts.source).is_dir() else []
        try:
            if files:
                quantize_cached(model, "int4", files)
            else:
                quantize_model(model, "int4")
        except ValueError as exc:
            raise DraftModelError(f"self-speculation cannot make an int4 copy of {facts.name}: {exc}") from None
        return dataclasses.replace(loaded, model=model.eval(), facts=dataclasses.replace(facts, precision="int4"))
    if facts.precision != "int8":
        raise DraftModelError(f"self-speculation drafts for bf16/fp16/fp32/int8 weights, not {facts.precision}")
    from engine.models.loader import load_model  # int8 has no dense weights left: load the int4 copy afresh

    return load_model(LoadSpec(model=facts.source, precision="int4", device="cpu"))


def build_drafter(loaded: Any, spec: SpeculationConfig, load: Any = None) -> Drafter:
    """The drafter ``spec`` names for ``loaded``; ``load(LoadSpec)`` loads a draft model (default: the loader)."""
    vocab = int(loaded.model.config.vocab_size)
    if spec.method == "prompt-lookup":
        return PromptLookup()
    if spec.method == "self":
        return ModelDrafter(int4_copy(loaded), "self", vocab)
    if load is None:
        from engine.models.loader import load_model as load
    device = "cpu" if str(loaded.facts.device).startswith("cpu") else str(loaded.facts.device)
    draft = load(LoadSpec(model=spec.draft_model or "", precision="auto", device=device))
    check_vocabularies(loaded, draft, spec.draft_model or "")
    return ModelDrafter(draft, f"draft:{draft.facts.name}", vocab)
