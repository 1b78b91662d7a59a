"""transformers' own forward as the reference the engine's runners are compared with (the fast-path tests).

``random_prompt(vocab, n, seed)`` is a reproducible list of token ids; ``reference_logits(model, prompt, steps)``
runs transformers' forward over its ``DynamicCache``: the logits after the prompt and after each greedy token,
and those tokens; ``runner_logits(runner, prompt, tokens)`` the same figures from one of the engine's runners fed
those tokens. Owns nothing else.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache


def random_prompt(vocab: int, n: int = 29, seed: int = 1) -> list[int]:
    return torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


@torch.inference_mode()
def reference_logits(model, prompt: list[int], steps: int) -> tuple[list[torch.Tensor], list[int]]:
    """transformers' own forward over its DynamicCache: logits after the prompt and after each greedy token."""
    cache = DynamicCache(config=model.config)
    logits = [model(input_ids=torch.tensor([prompt]), cache=cache, use_cache=True).logits[0, -1]]
    tokens = []
    for _ in range(steps):
        tokens.append(int(logits[-1].argmax()))
        logits.append(model(input_ids=torch.tensor([[tokens[-1]]]), cache=cache, use_cache=True).logits[0, -1])
    return logits, tokens


def runner_logits(runner, prompt: list[int], tokens: list[int], chunk: int = 256) -> list[torch.Tensor]:
    """A runner's logits after ``prompt`` (prefilled in ``chunk``s) and after each of ``tokens``."""
    got = [[logits for _, logits in runner.prefill(prompt, chunk=chunk)][-1][0]]
    for token in tokens:
        got.append(runner.decode(token)[0])
    return got
