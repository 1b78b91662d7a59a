"""``engine.speculate.drafters.PromptLookup``'s index across steps: grown with a history that grows, rebuilt for one
that was edited (its check that the history only grew is a list comparison since issue 45)."""

from __future__ import annotations

from engine.inputs import SamplingConfig
from engine.speculate.accept import Shaper
from engine.speculate.drafters import PromptLookup

SHAPER = Shaper(SamplingConfig(temperature=0.0), None)


def test_lookup_grows_its_index_and_rebuilds_it_for_an_edited_history() -> None:
    lookup = PromptLookup()
    history = [1, 2, 3, 4, 5, 9, 1, 2]
    assert lookup.draft(history, 3, SHAPER).tokens == (3, 4, 5)
    history = history + [3, 4, 5, 9, 7, 7]
    assert lookup.draft(history, 2, SHAPER).tokens == ()  # (7, 7) never came before; grown, not rebuilt
    edited = [8, 7, 7, 6, 1, 7, 7]  # not the last history grown: what it indexed before must not draft
    assert lookup.draft(edited, 2, SHAPER).tokens == (6, 1)
