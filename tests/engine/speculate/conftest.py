"""Models the speculation tests share. The tiny model with its default initialisation repeats one token forever
(every draft is accepted); "lively" ones, initialised wider, write varied token sequences (drafts get rejected).
Also one whose tokenizer has an extra token (refused as a draft)."""

from __future__ import annotations

import pytest

from engine.inputs import LoadSpec
from engine.models.loader import load_model


@pytest.fixture(scope="session")
def tiny_fp32(tiny_model_dir):
    return load_model(LoadSpec(model=str(tiny_model_dir), precision="fp32", device="cpu"))


LIVELY = 0.3  # initializer_range: wide enough that greedy decoding does not collapse onto one token


@pytest.fixture(scope="session")
def lively_dir(tmp_path_factory):
    from tests.helpers.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-lively"), seed=0, initializer_range=LIVELY)


@pytest.fixture(scope="session")
def lively(lively_dir):
    return load_model(LoadSpec(model=str(lively_dir), precision="fp32", device="cpu"))


@pytest.fixture(scope="session")
def other_lively_dir(tmp_path_factory):
    """Same tokenizer, other random weights: a draft that disagrees with ``lively`` often."""
    from tests.helpers.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-draft"), seed=1, initializer_range=LIVELY)


@pytest.fixture(scope="session")
def foreign_tiny_dir(tmp_path_factory):
    """A tiny model whose tokenizer knows one more token than the target's."""
    from transformers import AutoTokenizer

    from tests.helpers.tiny_model import build_tiny_model

    folder = build_tiny_model(tmp_path_factory.mktemp("tiny-foreign"), seed=2)
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    tokenizer.add_tokens(["<only-here>"])
    tokenizer.save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="session")
def near_lively_dir(lively_dir, tmp_path_factory):
    """``lively``'s weights plus a little fixed noise: a draft that agrees about half the time when sampled."""
    import torch

    folder = tmp_path_factory.mktemp("tiny-near")
    near = load_model(LoadSpec(model=str(lively_dir), precision="fp32", device="cpu"))
    generator = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for weight in near.model.parameters():
            weight.add_(torch.randn(weight.shape, generator=generator) * 0.02)
    near.model.save_pretrained(folder)
    near.tokenizer.save_pretrained(folder)
    return folder
