"""``engine bench --contexts``: the sweep's rows on the tiny model (mechanism only: bytes, arithmetic, skips; no
speed is asserted) and its one-line refusals."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from engine.__main__ import main
from engine.bench import context_sweep
from engine.bench.peer import PeerProcess
from engine.inputs import LoadSpec
from engine.models.loader import load_model
from tests.helpers.scripted_child import scripted_child

BANDWIDTH = {"read_bytes_s": 10e9}


def test_lengths_parse_with_k_suffixes_sorted_and_deduplicated():
    assert context_sweep.parse_contexts("4k, 512,4096,16K") == [512, 4096, 16384]


@pytest.mark.parametrize("text", ["", "abc", "0", "512,-4"])
def test_a_bad_length_is_refused_in_one_line(text):
    with pytest.raises(ValueError, match="--contexts") as caught:
        context_sweep.parse_contexts(text)
    assert "\n" not in str(caught.value)


def test_each_length_reads_the_weights_and_the_cache_it_holds(tiny_model_dir):
    loaded = {"fp32": load_model(LoadSpec(model=str(tiny_model_dir), precision="fp32", device="cpu"))}
    rows = context_sweep.sweep(loaded, [16, 64, 400], tokens=4, reps=2, bandwidth=BANDWIDTH)
    short, long, past = rows
    assert past == {"context": 400, "skipped": "past the model's context window (256 positions)"}
    assert short["engine"] == long["engine"] == "fp32" and len(short["runs"]) == 2
    assert short["weights_bytes"] == long["weights_bytes"] > 0  # a step reads every weight, whatever the length
    # The cache at the run's mean length (context + tokens/2), so it grows in proportion to the positions held.
    assert long["kv_bytes"] / short["kv_bytes"] == pytest.approx((64 + 2) / (16 + 2), rel=0.02)
    for row in (short, long):
        assert row["bytes_per_token"] == row["weights_bytes"] + row["kv_bytes"]
        assert row["achieved_bytes_s"] == pytest.approx(row["bytes_per_token"] * row["tok_s"])
        assert row["share"] == pytest.approx(row["achieved_bytes_s"] / BANDWIDTH["read_bytes_s"])
        assert row["verdict"] in ("bandwidth-bound", "overhead-bound", "machine busy") and row["ttft_s"] > 0


def test_the_command_refuses_a_bad_length_with_one_line_and_status_2(capsys):
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["bench", "--contexts", "4x"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --contexts:") and "\n" not in err


def test_llama_cpp_prefills_whole_for_its_ttft_then_decodes_in_turn_with_the_engine_from_its_kept_prompt(
        tiny_model_dir, tmp_path):
    # A child standing in for llama.cpp's (engine.bench.peer's protocol over a real pipe): it logs each request and
    # answers a whole prefill with first_s 5 and tokens 0.1 s apart, a prefix-reusing one with 0.01 and 0.05 s.
    log = tmp_path / "requests.jsonl"
    child = scripted_child(tmp_path, f"""
        import json, sys
        print(json.dumps({{"ready": True, "version": "test"}}), flush=True)
        for line in sys.stdin:
            request = json.loads(line)
            with open({str(log)!r}, "a") as out:
                out.write(json.dumps({{"n": len(request["ids"]), "tokens": request["tokens"],
                                      "reuse": request.get("reuse", False)}}) + "\\n")
            first, gap = (0.01, 0.05) if request.get("reuse") else (5.0, 0.1)
            times = [first + gap * i for i in range(request["tokens"])]
            print(json.dumps({{"first_s": first, "times": times, "ids": [1] * request["tokens"]}}), flush=True)
        """)
    process = PeerProcess(tmp_path / "m.gguf", 1, 64, python=child)
    loaded = {"fp32": load_model(LoadSpec(model=str(tiny_model_dir), precision="fp32", device="cpu"))}
    seen: list[str] = []
    try:
        rows = context_sweep.sweep(loaded, [48], tokens=4, reps=3, peer=process, bandwidth=BANDWIDTH,
                                   progress=seen.append)
    finally:
        process.close()
    engine, peer = rows
    requests = [json.loads(line) for line in log.read_text().splitlines()]
    # Three whole prefills (TTFT), then one prefix-reusing decode per repetition, each of the 48-token prompt.
    assert [r["reuse"] for r in requests] == [False] * 3 + [True] * 3
    assert {(r["n"], r["tokens"]) for r in requests} == {(48, 5)}
    assert peer == {"context": 48, "engine": "llama.cpp", "ttft_s": 5.0, "ttft_runs": [5.0] * 3,
                    "tok_s": pytest.approx(20.0), "runs": [pytest.approx(20.0)] * 3}
    assert engine["engine"] == "fp32" and len(engine["runs"]) == 3
    # The engine's TTFT as llama.cpp's: the median of a whole prefill per repetition, each on a fresh runner.
    assert len(engine["ttft_runs"]) == 3 and engine["ttft_s"] == sorted(engine["ttft_runs"])[1]
    # The decode repetitions come after llama.cpp's prefills, so every column's decode sees the same minutes.
    first_decode = next(i for i, m in enumerate(seen) if "decode, repetition 1" in m)
    assert all("prefill" in m for m in seen[first_decode - 3:first_decode])
    assert sum("prefilling at fp32" in m for m in seen) == 3
