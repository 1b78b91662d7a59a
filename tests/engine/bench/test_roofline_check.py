"""engine bench --roofline-check's plumbing on the tiny model (not its timing): one command prints the bench's
roofline and engine chat --json's for the same loaded model, and their ratio, as JSON and as a table."""

from __future__ import annotations

import json
import subprocess
import sys


def _run(tiny_model_dir, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine", "bench", "--roofline-check", "--model", str(tiny_model_dir),
                           "--precision", "fp32", "--device", "cpu", "--tokens", "6", "--reps", "1", *extra],
                          capture_output=True, text=True, timeout=600, check=False)


def test_roofline_check_prints_both_rooflines_and_their_ratio(tiny_model_dir):
    done = _run(tiny_model_dir, "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    bench, chat = result["bench"], result["chat"]
    assert bench["read_bytes_s"] > 0 and bench["bytes_read_per_token"] > 0 and bench["decode_tok_s"] > 0
    assert bench["achieved_bytes_s"] == bench["bytes_read_per_token"] * bench["decode_tok_s"]
    # the chat side is engine chat --json's own roofline object, for the same model's weights
    assert chat["weights_bytes"] == bench["bytes_read_per_token"] and chat["kv_bytes"] > 0
    assert chat["bytes_per_token"] == chat["weights_bytes"] + chat["kv_bytes"] and chat["tok_s"] > 0
    assert result["chat_over_bench_achieved"] == chat["achieved_bytes_s"] / bench["achieved_bytes_s"]
    assert result["agree_within_10pct"] == (abs(result["chat_over_bench_achieved"] - 1) <= 0.10)
    assert "[bench] engine chat --json's roofline" in done.stderr


def test_the_table_names_both_and_the_ratio(tiny_model_dir):
    done = _run(tiny_model_dir)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1].startswith("engine bench  :") and lines[2].startswith("engine chat   :")
    assert lines[3].startswith("chat ÷ bench  : ") and lines[4].startswith("agree within 10%: ")


def test_a_missing_model_is_one_line(tmp_path):
    done = subprocess.run([sys.executable, "-m", "engine", "bench", "--roofline-check", "--model",
                           str(tmp_path / "nothing"), "--precision", "fp32"], capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 2 and done.stderr.strip().splitlines()[-1].startswith("error: ")
