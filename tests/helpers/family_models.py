"""Random-weight models of the fast path's families, saved with the tiny tokenizer, for the exactness tests
(tests/engine/generate/test_families*.py): the families' real transformers config classes, scaled down."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import torch
from transformers import GenerationConfig

from tests.helpers.tiny_model import build_tiny_tokenizer


def build_family(folder: Path, make: Callable[[int, int, int], Any], seed: int = 0) -> Path:
    """Save ``make(vocab_size, bos_id, eos_id)``'s model in ``folder`` with random biases and norm weights: their
    defaults (zeros, ones, Gemma's zero offsets) would hide a step that skipped them."""
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tiny_tokenizer()
    bos, eos = tokenizer.convert_tokens_to_ids("<|im_start|>"), tokenizer.convert_tokens_to_ids("<|im_end|>")
    torch.manual_seed(seed)
    model = make(len(tokenizer), bos, eos).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                param.add_(torch.randn_like(param) * 0.5)
    model.generation_config = GenerationConfig(bos_token_id=bos, eos_token_id=eos, pad_token_id=eos)
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return folder


def build_families(root: Path, families: dict[str, Callable[[int, int, int], Any]]) -> dict[str, Path]:
    """``build_family`` for each named family, in a folder of its name under ``root``."""
    return {name: build_family(root / name, make) for name, make in families.items()}


def load_cpu(folder: Path, precision: str) -> Any:
    """The saved model loaded by the engine on the CPU in ``precision``."""
    from engine.inputs import LoadSpec
    from engine.models.loader import load_model

    return load_model(LoadSpec(model=str(folder), precision=precision, device="cpu"))
