"""Event and Metrics shapes: the contract the GUI, lab, bench and CLI code against."""

from __future__ import annotations

import dataclasses
import json

import pytest

from engine.events import Finished, Message, Metrics, Started, Token, TopCandidate

# docs/DESIGN.md § Engine API: the Metrics fields, which are also CLI --json keys.
DESIGN_METRICS = """prompt_tokens prefill_tokens reused_tokens generated_tokens ttft_s prefill_s prefill_tok_s
decode_tok_s itl_s tpot_s e2e_s ttft_thought_s ttft_answer_s thinking_tokens thinking_s kv_cache_bytes
kv_cache_bytes_allocated kv_cache_bytes_formula kv_cache_bytes_formula_no_gqa weights_bytes peak_memory_bytes
context_tokens context_max dropped_turns reuse_break device precision speculation drafts draft_tokens accepted_tokens
target_steps acceptance_rate tokens_per_step masked_tokens mask_wait_s mask_build_s image_tokens vision_encoder_s""".split()


def test_metrics_has_exactly_the_design_fields_and_serialises_to_json():
    metrics = Metrics(generated_tokens=3, itl_s=(0.01, 0.02), ttft_s=0.5, device="cpu", precision="fp32")
    data = metrics.to_dict()
    assert list(data) == DESIGN_METRICS
    assert data["itl_s"] == [0.01, 0.02]
    assert json.loads(json.dumps(data)) == data
    # Undefined measurements stay None rather than a made-up zero.
    assert Metrics().to_dict()["decode_tok_s"] is None


def test_events_are_frozen():
    token = Token(index=0, token_id=5, text="a", t=1.0, prob=0.5, top=(TopCandidate(5, "a", 0.5),))
    for event in (token, Message("user", "hi"), Started(3, 0, 0, 256, 0.0), Finished("eos", "x"), Metrics()):
        field = dataclasses.fields(event)[0].name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(event, field, None)
    assert Finished("error", "", error="boom").error == "boom"
