"""The model card's runner row (``ModelFacts.runner``): fast, or plain with the engine's reason; none when unknown."""

from __future__ import annotations

from dataclasses import replace

from app.widgets.model_card import card_rows
from tests.app.widgets.test_model_card import SMOLLM2


def test_the_card_says_which_runner_and_why_not_the_fast_one():
    assert dict(card_rows(replace(SMOLLM2, runner="fast")))["Runner"] == "fast path"
    plain = replace(SMOLLM2, runner="plain", runner_reason="model_type gemma3_text not on the fast path yet: "
                                                           "sliding-window layers\x1b[2J")
    assert dict(card_rows(plain))["Runner"] == ("plain (transformers' forward): model_type gemma3_text not on the "
                                                "fast path yet: sliding-window layers\\x1b[2J")
    assert "Runner" not in dict(card_rows(SMOLLM2))  # facts that do not say (older callers): no row
