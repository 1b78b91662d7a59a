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


BREAK = {"position": 12, "cached_tokens": 40, "recomputed_tokens": 31, "message_index": 0, "role": "system",
         "before": "Today is 2026-12-0", "now": "3. Be brief.", "was": "2. Be brief.", "changed_value": "2026-12-03",
         "was_value": "2026-12-02"}


def test_where_the_cache_stopped_matching_is_kept_in_the_record_and_read_back():
    import json

    from engine.events import ReuseBreak

    perf = PerfRecord.from_metrics({**METRICS, "reuse_break": BREAK}, "m")
    assert perf.reuse_break == ReuseBreak(**BREAK)
    assert PerfRecord.from_dict(json.loads(perf.to_json())) == perf  # the stored JSON reads back the same
    assert PerfRecord.from_metrics(METRICS, "m").reuse_break is None  # a record saved before it was kept


def test_a_damaged_stored_break_is_dropped_not_shown():
    for damaged in ({**BREAK, "position": "12"}, {**BREAK, "recomputed_tokens": -1}, "token 12", [BREAK]):
        assert PerfRecord.from_dict({"model": "m", "reuse_break": damaged}).reuse_break is None
    odd = PerfRecord.from_dict({"model": "m", "reuse_break": {**BREAK, "message_index": "0", "now": 3}})
    assert odd.reuse_break.message_index is None and odd.reuse_break.now == ""  # wrong types: the neutral value


def test_the_roofline_verdict_said_live_is_kept_with_its_cpu_share_and_read_back():
    import json

    perf = PerfRecord.from_metrics({**METRICS, "roofline_verdict": "machine busy", "others_cpu_share": 0.62}, "m")
    assert (perf.roofline_verdict, perf.others_cpu_share) == ("machine busy", 0.62)
    assert PerfRecord.from_dict(json.loads(perf.to_json())) == perf  # the stored JSON reads back the same
    old = PerfRecord.from_metrics(METRICS, "m")  # a record saved before it was kept: no verdict to show again
    assert old.roofline_verdict is None and old.others_cpu_share is None
    for damaged in ("busy", 3, ["machine busy"]):  # only one of the three verdicts the roofline gives
        assert PerfRecord.from_dict({"model": "m", "roofline_verdict": damaged}).roofline_verdict is None


def test_a_vision_turns_image_tokens_and_encoder_time_are_kept_and_read_back():
    import json

    perf = PerfRecord.from_metrics({**METRICS, "image_tokens": [64, 17], "vision_encoder_s": 0.042}, "m")
    assert (perf.image_tokens, perf.vision_encoder_s) == ((64, 17), 0.042)
    assert PerfRecord.from_dict(json.loads(perf.to_json())) == perf  # the stored JSON reads back the same
    old = PerfRecord.from_metrics(METRICS, "m")  # a text reply, or a record saved before they were kept
    assert old.image_tokens == () and old.vision_encoder_s is None
    for damaged in ("64", [64, -1], [True], [1.5], {"a": 1}):  # whole, non-negative counts only
        assert PerfRecord.from_dict({"model": "m", "image_tokens": damaged}).image_tokens == ()
