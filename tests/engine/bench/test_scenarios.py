"""engine.bench.scenarios: the plan's sizes, the choice of scenarios, prompts sized to the plan and the context."""

from __future__ import annotations

import pytest

from engine.bench.scenarios import (SCENARIOS, build_prompts, chosen_scenarios, count_tokens, make_plan,
                                    scenarios)
from engine.errors import BadInputError
from engine.inputs import LoadSpec
from engine.models.loader import load_model


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return load_model(LoadSpec(model=str(tiny_model_dir), precision="fp32", device="cpu")).tokenizer


def test_plan_sizes_and_overrides():
    full, quick = make_plan(False), make_plan(True)
    assert (full.tokens, full.reps, full.bandwidth_bytes) == (128, 3, None)
    assert (quick.tokens, quick.reps, quick.no_kv_tokens) == (16, 1, 6)
    assert make_plan(True, tokens=1, reps=0) == make_plan(True, tokens=2, reps=1)  # floors: 2 tokens, 1 rep


def test_chosen_scenarios_always_decode_in_running_order():
    assert chosen_scenarios(None) == ["decode"]
    assert chosen_scenarios(" no_kv, long ") == ["decode", "long", "no_kv"]
    assert chosen_scenarios(",".join(SCENARIOS)) == list(SCENARIOS)
    with pytest.raises(BadInputError, match="unknown scenario bogus"):
        chosen_scenarios("long,bogus")


def test_prompts_fit_the_plan_and_the_context(tokenizer):
    plan = make_plan(True)
    prompts = build_prompts(tokenizer, plan, context=256)
    assert set(prompts) == {"short", "long", "conversation", "followup"}
    room = 256 - plan.tokens - 64
    for name, messages in prompts.items():
        assert count_tokens(tokenizer, messages) <= room + 40, name  # templates and the question on top
    assert prompts["conversation"][-1].role == "assistant"
    assert prompts["followup"][:-1] == prompts["conversation"] and prompts["followup"][-1].role == "user"
    assert count_tokens(tokenizer, prompts["long"]) > count_tokens(tokenizer, prompts["short"])


def test_scenarios_run_in_the_documented_order(tokenizer):
    names = [name for name, _ in scenarios(build_prompts(tokenizer, make_plan(True), 256), make_plan(True))]
    assert tuple(names) == SCENARIOS
