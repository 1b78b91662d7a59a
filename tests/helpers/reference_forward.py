"""transformers' own forward as the reference the engine's runners are compared with (the fast-path tests).

``random_prompt(vocab, n, seed)`` is a reproducible list of token ids; ``reference_logits(model, prompt, steps)``
runs transformers' forward over its ``DynamicCache``: the logits after the prompt and after each greedy token,
and those tokens; ``runner_logits(runner, prompt, tokens)`` the same figures from one of the engine's runners fed
those tokens; ``max_delta`` and ``check_bf16_rounding`` compare the two (the families' exactness tests). Owns
nothing else.
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


def max_delta(ref: list[torch.Tensor], got: list[torch.Tensor]) -> tuple[float, float]:
    """(max |Δlogit| at prefill, over the decode steps)."""
    return ((ref[0].float() - got[0].float()).abs().max().item(),
            max((a.float() - b.float()).abs().max().item() for a, b in zip(ref[1:], got[1:])))


def check_bf16_rounding(ref: list[torch.Tensor], got: list[torch.Tensor], label: str, steps: float = 4) -> str:
    """Assert every step's logits agree within ``steps`` bf16 steps of that step's largest logit (two orders of
    summation in bf16 differ by a few roundings, not more); the line the tests print: the deltas and the greedy
    agreement."""
    for step, (a, b) in enumerate(zip(ref, got)):
        scale = a.float().abs().max().item()
        delta = (a.float() - b.float()).abs().max().item()
        assert delta <= steps * scale * 2 ** -8, f"{label} step {step}: {delta / (scale * 2 ** -8):.2f} bf16 steps"
    same = sum(int(a.argmax()) == int(b.argmax()) for a, b in zip(ref, got))
    prefill, decode = max_delta(ref, got)
    return f"{label} bf16: max |dlogit| prefill {prefill:.2e}, decode {decode:.2e}, greedy {same}/{len(ref)}"


def check_fp32_equal(ref: list[torch.Tensor], got: list[torch.Tensor], atol: float, label: str) -> None:
    """Assert every step's fp32 logits equal transformers' within ``atol`` and pick the same greedy token."""
    for step, (a, b) in enumerate(zip(ref, got)):
        torch.testing.assert_close(b, a, atol=atol, rtol=1e-5, msg=lambda m: f"{label} step {step}: {m}")
        assert int(a.argmax()) == int(b.argmax()), f"{label}: greedy token differs at step {step}"
