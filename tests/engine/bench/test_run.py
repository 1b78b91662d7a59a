"""engine.bench.run: a quick run on the tiny model returns the documented JSON shape (never a speed check),
and its greedy outputs agree with the baseline's."""

from __future__ import annotations

from engine.bench.report import METRICS, PEER, SCHEMA, VARIANTS


def _positive(value) -> bool:
    return isinstance(value, (int, float)) and value > 0


def test_quick_json_has_the_documented_shape(quick_json):
    r = quick_json
    assert r["schema"] == SCHEMA
    for key in ("machine", "settings", "model", "memory_bandwidth", "fastpath", "warmup_s", "metrics", "derived",
                "roofline", "correctness", "precisions", "peer", "elapsed_s"):
        assert key in r, key
    for key in ("cpu", "cores_logical", "torch", "transformers", "device", "torch_threads"):
        assert r["machine"][key] not in (None, ""), key
    assert r["settings"]["tokens"] == 4 and r["settings"]["quick"] is True
    assert set(r["metrics"]) == set(METRICS)
    for name, metric in r["metrics"].items():
        assert set(metric) == {"unit", "better", "median", "runs", "ratio"}, name
        assert set(metric["median"]) == set(VARIANTS) | {PEER}  # the peer's key is kept, null where it did not run
        assert set(metric["ratio"]) == (set(VARIANTS) | {PEER}) - {"baseline"}
    # Figures every variant produces are positive numbers; a ratio exists wherever both sides do.
    for name in ("decode_tok_s", "ttft_short_s", "ttft_long_s", "decode_tok_s_long", "followup_ttft_full_s"):
        for variant in VARIANTS:
            assert _positive(r["metrics"][name]["median"][variant]), (name, variant)
        assert all(_positive(r["metrics"][name]["ratio"][v]) for v in VARIANTS if v != "baseline"), name
    for variant in ("engine", "fastpath"):
        assert _positive(r["metrics"]["followup_ttft_reuse_s"]["median"][variant])
        assert _positive(r["derived"]["followup_reuse_share"][variant])
        assert r["derived"]["followup_reused_tokens"][variant] > 0
    assert r["metrics"]["followup_ttft_reuse_s"]["median"]["baseline"] is None  # generate() keeps no cache
    for variant in ("baseline", "engine"):
        assert _positive(r["metrics"]["decode_tok_s_no_kv"]["median"][variant])
    bw = r["memory_bandwidth"]
    assert _positive(bw["read_bytes_s"]) and _positive(bw["copy_bytes_s"]) and _positive(bw["roofline_tok_s"])
    assert all(_positive(r["roofline"][v]["share"]) and _positive(r["roofline"][v]["achieved_bytes_s"])
               for v in VARIANTS)
    assert r["fastpath"]["active"] is True and r["fastpath"]["reason"] is None
    assert _positive(r["fastpath"]["matmul_s_per_token"]) and _positive(r["fastpath"]["matmul_ceiling_tok_s"])
    assert all(_positive(v) for v in r["warmup_s"].values())
    assert r["precisions"] == {}  # --quick measures the main precision only


def test_greedy_outputs_agree_with_the_baseline(quick_json):
    for variant in ("engine", "fastpath"):
        check = quick_json["correctness"][variant]
        assert check["equal"] is True and check["first_difference"] is None and check["compared_tokens"] == 4
