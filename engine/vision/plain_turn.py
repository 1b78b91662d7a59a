"""A turn with images for a vision model whose language part is not on the fast path (a ``VisionFamily.refusal``, or a
language model the fast step refuses, ``facts.runner_reason``): the whole model's own forward over transformers'
``DynamicCache``, so positions, masks and the merge of image features are transformers' exactly, with the same events
and metrics as the fast turn.

Owns that loop and its clock: the vision encoder's time is the time until the family's forward calls its language
model (a hook there), prefill's the rest of the first forward; each decode step is one forward of one token. Nothing
is reused across turns.

Does not own the prompt (``engine.vision.turn.build_prompt``), the fast turn or sampling.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Iterator

import torch

from engine.events import Event, ImagesEncoded, PrefillProgress, Started, Token
from engine.generate.context import IncrementalDecoder
from engine.generate.sampling import Sampler
from engine.inputs import SamplingConfig


def plain_turn(vision: Any, prompt: Any, config: SamplingConfig, cancel: threading.Event, clock: Any,
               decoder: IncrementalDecoder, text: list[str], finished: Callable[..., Any]) -> Iterator[Event]:
    """Stream one reply through transformers' forward (see the module docstring); ``clock``, ``decoder``, ``text``
    and ``finished`` are ``engine.vision.turn.VisionChat``'s, so the metrics are computed alike."""
    from transformers import DynamicCache

    model = vision.model
    ids = list(prompt.ids)
    context_max = vision.loaded.facts.context_length
    clock.prompt_tokens, clock.image_tokens = len(ids), prompt.image_tokens
    yield Started(len(ids), 0, 0, context_max, clock.t_submit)
    marks: list[float] = []
    handle = vision.language.model.register_forward_pre_hook(lambda *_: marks.append(time.perf_counter()))
    device = vision.language.device
    inputs = {name: value.to(device) if torch.is_tensor(value) else value for name, value in prompt.inputs.items()}
    cache = DynamicCache(config=model.config.get_text_config())
    try:
        with torch.inference_mode():
            t0 = time.perf_counter()
            out = model(**inputs, cache=cache, use_cache=True, logits_to_keep=1)
            logits = out.logits[:, -1]
            clock.t_prefilled = time.perf_counter()
    finally:
        handle.remove()
    clock.t_prefill = marks[0] if marks else t0
    clock.encoder_s = clock.t_prefill - t0 if prompt.image_keys else None
    yield ImagesEncoded(prompt.image_tokens, clock.encoder_s or 0.0, 0)
    yield PrefillProgress(len(ids), len(ids))
    def step(token: int) -> Any:
        with torch.inference_mode():  # no mask (one sequence, no padding): positions follow the cache's length
            out = model(input_ids=torch.tensor([[token]], device=device), cache=cache, use_cache=True)
        return out.logits[:, -1]

    reason = yield from decode_tokens(Sampler(config, device, ids), logits, step, set(vision.loaded.eos_token_ids),
                                      config.max_new_tokens, cancel, clock.tokens, decoder, text)
    clock.kv_bytes = sum(t.nbytes for layer in cache.layers for t in (layer.keys, layer.values) if torch.is_tensor(t))
    yield finished(reason)


def decode_tokens(sampler: Sampler, logits: Any, step: Callable[[int], Any], eos: set[int] | frozenset[int],
                  max_new_tokens: int, cancel: threading.Event, times: list[float], decoder: IncrementalDecoder,
                  text: list[str]) -> Iterator[Event]:
    """The decode loop both paths share (the fast path's runner, turn.py, and transformers' forward, here): sample
    from ``logits``, stream the token, stop on an end token, a cancel or the budget, else ``step(token)`` gives the
    next logits. Returns the finish reason ("eos", "cancelled" or "length")."""
    for index in range(max_new_tokens):
        choice = sampler.choose(logits)
        times.append(time.perf_counter())
        piece = decoder.push(choice.token_id)
        text.append(piece)
        yield Token(index, choice.token_id, piece, times[-1], choice.prob)
        if choice.token_id in eos:
            return "eos"
        if cancel.is_set():
            return "cancelled"
        if index + 1 < max_new_tokens:
            logits = step(choice.token_id)
    return "length"


__all__ = ["decode_tokens", "plain_turn"]
