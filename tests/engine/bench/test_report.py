"""engine.bench.report: the readable table names every figure; the JSON text is the result, unchanged."""

from __future__ import annotations

import copy
import json

from engine.bench.report import METRICS, format_table, to_json


def test_table_names_every_figure(quick_json):
    table = format_table(quick_json)
    for name in METRICS:
        assert name in table
    for text in ("baseline", "fastpath", "roofline", "KV cache on", "follow-up TTFT", "greedy tokens equal"):
        assert text in table


def test_json_text_round_trips(quick_json):
    assert json.loads(to_json(quick_json)) == quick_json



def test_precisions_sit_side_by_side_with_the_main_one(quick_json):
    assert "fast path by precision" not in format_table(quick_json)  # --quick measures no other precision
    result = copy.deepcopy(quick_json)
    main = result["metrics"]
    decode, ttft = main["decode_tok_s"]["median"]["fastpath"], main["ttft_long_s"]["median"]["fastpath"]
    result["precisions"] = {  # the shape run.py writes for --precisions int4 (figures chosen to check the ratios)
        "int4": {"weights_bytes": result["model"]["weights_bytes"] // 4, "top1_agreement": 0.9876,
                 "perplexity": 3.5, "decode_tok_s": {"median": {"fastpath": decode * 2}, "ratio": {}},
                 "ttft_long_s": {"median": {"fastpath": ttft * 1.5}, "ratio": {}},
                 "ttft_short_s": {"median": {"fastpath": ttft}, "ratio": {}},
                 "decode_tok_s_long": {"median": {"fastpath": 43.21}, "ratio": {}}},
        "int8": {"error": "int8 could not load"}}
    lines = format_table(result).splitlines()
    header = next(line for line in lines if line.startswith("fast path by precision"))
    assert header.split()[4:] == ["fp32", "int4"]  # a precision that failed has no column

    def row(label: str) -> list[str]:
        return next(line for line in lines if line.startswith(label))[26:].split()

    assert row("decode ÷ fp32") == ["1.00×", "2.00×"]
    assert row("TTFT ÷ fp32") == ["1.00×", "1.50×"]
    assert row("decode after long prompt")[1] == "43.2"
    assert row("weights ÷ fp32") == ["1.00×", "0.25×"]
    assert row("top-1 agree w/ fp32") == ["100.0%", "98.8%"]
    assert row("perplexity")[1] == "3.500"
