"""engine bench --roofline-check's plumbing on the tiny model (not its timing): one command runs engine bench's decode
scenario and engine chat --json's reply on the same loaded model and messages, alternated, and prints both rooflines
(counted the one way engine.bench.roofline counts bytes) and their ratios, as JSON and as a table."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def _run(tiny_model_dir, home, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine", "bench", "--roofline-check", "--model", str(tiny_model_dir),
                           "--precision", "fp32", "--device", "cpu", "--tokens", "6", "--reps", "2", *extra],
                          capture_output=True, text=True, timeout=600, check=False)


def test_roofline_check_prints_both_rooflines_and_their_ratio(tiny_model_dir, home):
    done = _run(tiny_model_dir, home, "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    bench, chat = result["bench"], result["chat"]
    assert result["tokens"] == 6 and result["reps"] == 2 and len(bench["decode_tok_s_runs"]) == len(chat["tok_s_runs"]) == 2
    # the same bytes, counted one way: the same weights, the KV cache of the same prompt at the same mean length
    assert bench["weights_bytes"] == chat["weights_bytes"] > 0 and bench["kv_bytes"] > 0
    if chat["generated_tokens_runs"] == [6, 6]:  # (a random-weight model may end early on an end token)
        assert chat["kv_bytes"] == bench["kv_bytes"]
    assert bench["bytes_per_token"] == bench["weights_bytes"] + bench["kv_bytes"]
    assert bench["achieved_bytes_s"] == pytest.approx(bench["bytes_per_token"] * bench["tok_s"])
    assert bench["bandwidth_bytes_s"] > 0 and chat["bandwidth_bytes_s"] > 0 and chat["bandwidth_measured_utc"]
    assert result["chat_over_bench_achieved"] == pytest.approx(chat["achieved_bytes_s"] / bench["achieved_bytes_s"])
    assert result["share_ratio"] == pytest.approx(chat["share"] / bench["share"])
    assert result["agree_within_10pct"] == (abs(result["chat_over_bench_achieved"] - 1) <= 0.10
                                            and abs(result["share_ratio"] - 1) <= 0.10)
    assert "[bench] rep 2/2 engine chat --json" in done.stderr and "[bench] rep 2/2 engine bench decode" in done.stderr


def test_the_table_names_both_and_the_ratio(tiny_model_dir, home):
    done = _run(tiny_model_dir, home)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1].startswith("engine bench  :") and "measured now" in lines[1]
    assert lines[2].startswith("engine chat   :") and " stored " in lines[2]
    assert lines[3].startswith("chat ÷ bench  : achieved ") and lines[4].startswith("agree within 10%: ")


def test_a_missing_model_is_one_line(tmp_path):
    done = subprocess.run([sys.executable, "-m", "engine", "bench", "--roofline-check", "--model",
                           str(tmp_path / "nothing"), "--precision", "fp32"], capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 2 and done.stderr.strip().splitlines()[-1].startswith("error: ")


def test_the_stored_bandwidth_is_measured_again_first(tiny_model_dir, home):
    """A kept figure (here an absurd 1 GB/s, quiet and new, which chat alone would keep) is measured again at the start,
    as the window's Measure again does, and the one it replaced is reported."""
    import time

    from engine.bench import roofline

    path = roofline._bandwidth_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"cpu": {"read_bytes_s": 1e9, "measured_at": time.time(), "others_cpu_share": 0.0}}))
    done = _run(tiny_model_dir, home, "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["stored_before"]["read_bytes_s"] == 1e9
    assert result["chat"]["bandwidth_bytes_s"] != 1e9
