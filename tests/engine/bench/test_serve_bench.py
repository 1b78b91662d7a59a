"""engine.bench.serve: the in-process / HTTP pair and the concurrent clients, run for real on the tiny model."""

from __future__ import annotations

import contextlib
import io
import json

from engine.bench.serve import main


def test_serve_bench_measures_both_sides_and_every_client(tiny_model_dir, home):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        # 12 tokens: the client times decode from the stream's chunks, and a 4-token reply of the tiny model reached
        # it as one chunk in 4 of 40 replies (measured against a served process), leaving no rate to measure.
        assert main(["--model", str(tiny_model_dir), "--precision", "fp32", "--tokens", "12", "--reps", "1",
                     "--clients", "3", "--parallel", "1"]) == 0
    result = json.loads(out.getvalue())
    pair = result["side_by_side"]
    for figure in ("ttft_s", "decode_tok_s"):
        assert set(pair[figure]["median"]) == {"in-process", "http"}
        assert pair[figure]["median"]["http"] > 0 and pair[figure]["median"]["in-process"] > 0
    crowd = result["concurrent"]
    assert crowd["completed"] == 3 and crowd["failed"] == []
    assert 0 < crowd["ttft_s"]["best"] <= crowd["ttft_s"]["worst"]
    assert result["http_ttft_overhead_s"] is not None and result["precision"] == "fp32"


def test_serve_bench_compares_parallel_values_on_the_same_prompts(tmp_path, home):
    from tests.helpers.tiny_model import build_tiny_model

    folder = build_tiny_model(tmp_path / "tiny-1024", max_position_embeddings=1024)  # room for ~100-word prompts
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["--model", str(folder), "--precision", "fp32", "--tokens", "6", "--reps", "1",
                     "--clients", "4", "--parallel", "1,4"]) == 0
    runs = json.loads(out.getvalue())["concurrent_by_parallel"]
    assert set(runs) == {"1", "4"}
    for value, run in runs.items():
        assert run["completed"] == 4 and run["failed"] == [] and run["parallel_granted"] == int(value)
        assert run["total_tok_s_per_parallel_1"] > 0 and run["prompt_tokens"] > 50
        assert run["replies_equal_parallel_1"] is True
        assert run["prefill_form"] is None  # an fp32 model's prompt products have one form
    assert runs["1"]["total_tok_s_per_parallel_1"] == 1.0


def test_serve_bench_refuses_bad_parallel_values_with_one_line(capsys):
    import pytest

    for bad in ("0", "x,4"):
        with pytest.raises(SystemExit) as exit_info:
            main(["--parallel", bad])
        assert exit_info.value.code == 2
        assert "--parallel" in capsys.readouterr().err.strip().splitlines()[-1]


def test_serve_bench_reopen_compares_a_full_prefill_with_the_saved_cache(tmp_path, home):
    from tests.helpers.tiny_model import build_tiny_model

    folder = build_tiny_model(tmp_path / "tiny-1024", max_position_embeddings=1024)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["--reopen", "--model", str(folder), "--precision", "fp32", "--tokens", "4", "--reps", "1",
                     "--context-tokens", "300", "--http-full"]) == 0
    result = json.loads(out.getvalue())
    assert result["context_tokens"] > 300 and 300 <= result["cached_tokens"] < result["context_tokens"]
    assert set(result["ttft_s"]["median"]) == {"full prefill", "reopen (file)", "http reopen (--kv-store)",
                                               "http full prefill"}
    assert all(v > 0 for v in result["ttft_s"]["median"].values())
    assert result["ttft_ratio_to_full_prefill"]["full prefill"] == 1.0 and result["file_bytes"] > 0
    assert result["replies_identical"] is True and result["machine"]
