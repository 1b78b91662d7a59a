"""engine.bench.roofline: the decode roofline's arithmetic and verdicts, the bandwidth measured once per device and
kept in the data folder, the CPU watch seeing another process, and ``engine chat --json``'s ``roofline`` object."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import psutil
import pytest

from engine.__main__ import main
from engine.bench import roofline
from engine.events import Metrics


def test_the_figures_follow_from_bytes_rate_and_bandwidth():
    r = roofline.roofline(90_000_000, Metrics(kv_cache_bytes=10_000_000, decode_tok_s=50.0), 10e9, 0.0)
    assert r.bytes_per_token == 100_000_000 and r.achieved_bytes_s == pytest.approx(5e9)
    assert r.ceiling_tok_s == pytest.approx(100.0) and r.share == pytest.approx(0.5)
    assert r.verdict == "bandwidth-bound"
    data = r.to_dict()
    assert data["weights_bytes"] == 90_000_000 and data["kv_bytes"] == 10_000_000 and data["verdict"] == r.verdict


@pytest.mark.parametrize("rate, others, verdict", [(80.0, 0.0, "bandwidth-bound"), (10.0, 0.1, "overhead-bound"),
                                                   (10.0, 0.6, "machine busy"), (80.0, 0.5, "machine busy"),
                                                   (None, 0.0, None)])
def test_the_verdict(rate, others, verdict):
    assert roofline.roofline(100_000_000, Metrics(decode_tok_s=rate), 10e9, others).verdict == verdict


def test_no_bandwidth_no_ceiling_and_no_share():
    r = roofline.roofline(100, Metrics(decode_tok_s=5.0), None, None)
    assert r.ceiling_tok_s is None and r.share is None and r.verdict is None and r.achieved_bytes_s == 500


def test_the_bandwidth_is_measured_once_and_kept_in_the_data_folder(home):
    assert roofline.stored_bandwidth("cpu") is None
    first = roofline.measure_and_store("cpu")
    assert first["read_bytes_s"] > 0 and (home / roofline.BANDWIDTH_FILE).is_file()
    assert roofline.measure_and_store("cpu") == first == roofline.stored_bandwidth("cpu")  # not measured again
    again = roofline.measure_and_store("cpu", force=True)
    assert again["measured_at"] > first["measured_at"] and roofline.stored_bandwidth("cpu") == again


def test_a_damaged_bandwidth_file_is_measured_again(home):
    (home / roofline.BANDWIDTH_FILE).write_text("{not json", encoding="utf-8")
    assert roofline.stored_bandwidth("cpu") is None
    assert roofline.measure_and_store("cpu")["read_bytes_s"] > 0 and roofline.stored_bandwidth("cpu") is not None


def test_another_process_burning_a_core_reads_as_a_busy_machine():
    watch = roofline.CpuWatch()
    burner = subprocess.Popen([sys.executable, "-c", "import time\nend = time.time() + 1.5\nwhile time.time() < end: pass"])
    try:
        burner.wait(timeout=60)
    finally:
        burner.kill()
    time.sleep(0.05)
    share = watch.others_share()
    # One core of at least one burned for 1.5 s of ~1.6 s wall: at least a quarter of a machine of ≤ 2 cores'
    # worth of others' time, whatever else runs (never less than the burner's own).
    assert share is not None and share * (psutil.cpu_count() or 1) >= 0.5


def test_chat_json_carries_the_roofline(tiny_model_dir, home, capsys):
    rc = main(["chat", "--prompt", "Hello", "--model", str(tiny_model_dir), "--precision", "fp32",
               "--max-new-tokens", "6", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0
    r = data["roofline"]
    assert r["kv_bytes"] == data["kv_cache_bytes"] > 0 and 0 < r["weights_bytes"] <= data["weights_bytes"]
    assert r["bytes_per_token"] == r["weights_bytes"] + r["kv_bytes"]
    assert r["tok_s"] == data["decode_tok_s"] and r["achieved_bytes_s"] == pytest.approx(
        r["bytes_per_token"] * data["decode_tok_s"])
    assert r["bandwidth_bytes_s"] == roofline.stored_bandwidth("cpu")["read_bytes_s"]  # measured once, kept
    assert r["ceiling_tok_s"] == pytest.approx(r["bandwidth_bytes_s"] / r["bytes_per_token"])
    share = r["others_cpu_share"]  # unknown (None) only for a reply too short to watch (under 50 ms)
    assert r["verdict"] in roofline.VERDICTS and ((share is None and data["e2e_s"] < 0.05) or 0.0 <= share <= 1.0)


@pytest.mark.parametrize("precision", ["int8", "int4"])
def test_chat_json_carries_the_roofline_of_a_quantized_model(tiny_model_dir, precision, capsys):
    """int4 is what `auto` loads on a CPU: its embedding reads the head's int8 table (no ``weight`` of its own)."""
    rc = main(["chat", "--prompt", "Hello", "--model", str(tiny_model_dir), "--precision", precision,
               "--max-new-tokens", "4", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0 and data["precision"] == precision
    r = data["roofline"]
    assert 0 < r["weights_bytes"] <= data["weights_bytes"] and r["bytes_per_token"] == r["weights_bytes"] + r["kv_bytes"]
