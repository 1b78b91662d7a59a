"""The structured-output bench runs on the tiny model and reports every figure (no speed is asserted)."""

from __future__ import annotations

from engine.bench.structured import cpu_name, measure

SMALL = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 99},
                                          "ok": {"type": "boolean"}},
         "required": ["n", "ok"], "additionalProperties": False}


def test_the_bench_reports_both_speeds_and_the_mask_costs(tiny_model_dir):
    result = measure(str(tiny_model_dir), "fp32", reps=1, tokens=40, schema=SMALL)
    for key in ("unconstrained_tok_s", "constrained_tok_s", "ratio", "mask_wait_ms_per_token",
                "mask_build_ms_per_token", "mask_alone_ms_per_token"):
        assert result[key] is not None and result[key] > 0, key
    assert result["replayed_tokens"] > 0 and result["constrained_text"].startswith("{")
    assert result["cpu"] == cpu_name() and result["cpu"]
