"""engine.bench.report: the readable table names every figure; the JSON text is the result, unchanged."""

from __future__ import annotations

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
