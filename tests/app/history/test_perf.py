"""PerfRecord: built from the engine's metrics (unknown keys dropped), and the footer line under a reply."""

from __future__ import annotations

from app.history.perf import PerfRecord

# The shape of the engine's Metrics.to_dict(), including keys a PerfRecord does not keep.
METRICS = {"ttft_s": 0.0862, "prefill_tok_s": 1600.4, "decode_tok_s": 41.83, "prompt_tokens": 40,
           "generated_tokens": 128, "kv_cache_bytes": 3_040_000, "weights_bytes": 269_060_000,
           "peak_memory_bytes": None, "device": "cpu", "precision": "bf16", "itl_s": [0.02, 0.03],
           "reused_tokens": 0}


def test_from_metrics_keeps_the_known_fields_and_the_footer_says_them():
    perf = PerfRecord.from_metrics(METRICS, "SmolLM2-135M-Instruct")
    assert perf.weights_bytes == 269_060_000 and perf.peak_memory_bytes is None and perf.precision == "bf16"
    assert perf.footer() == "41.8 tok/s · TTFT 86 ms · 128 tokens · KV 2.9 MiB"
    assert PerfRecord(model="m").footer() == ""
