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
    r = roofline.roofline(90_000_000, Metrics(kv_cache_bytes=10_000_000, decode_tok_s=50.0, generated_tokens=1),
                          10e9, 0.0)
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


def test_the_kv_bytes_read_per_step_are_the_cache_at_the_replys_mean_length():
    # 100 prompt tokens, 51 generated: the cache holds 150 positions; the timed steps read 100 + 25.5 on average
    assert roofline.kv_read_per_token(Metrics(kv_cache_bytes=150_000, prompt_tokens=100, generated_tokens=51)) == 125_500
    # one token (no decode step timed) or no cache: the measured bytes as they are
    assert roofline.kv_read_per_token(Metrics(kv_cache_bytes=150_000, prompt_tokens=150, generated_tokens=1)) == 150_000
    assert roofline.kv_read_per_token(Metrics(prompt_tokens=10, generated_tokens=5)) == 0


DAY = 24 * 3600.0
NOW = 1_800_000_000.0


@pytest.mark.parametrize("entry, reason", [
    (None, "missing"),
    ({"read_bytes_s": 2e10, "measured_at": NOW - DAY}, "load unknown"),  # kept before the load was
    ({"read_bytes_s": 2e10, "measured_at": NOW - DAY, "others_cpu_share": None}, "load unknown"),
    ({"read_bytes_s": 2e10, "measured_at": NOW - DAY, "others_cpu_share": roofline.BUSY_SHARE}, "busy"),
    ({"read_bytes_s": 2e10, "measured_at": NOW - DAY, "others_cpu_share": 0.9}, "busy"),
    ({"read_bytes_s": 2e10, "measured_at": NOW - 31 * DAY, "others_cpu_share": 0.0}, "old"),
    ({"read_bytes_s": 2e10, "measured_at": NOW + DAY, "others_cpu_share": 0.0}, "old"),  # the clock moved back
    ({"read_bytes_s": 2e10, "others_cpu_share": 0.0}, "old"),  # no date
    ({"read_bytes_s": 2e10, "measured_at": NOW - 29 * DAY, "others_cpu_share": 0.1}, None),
    ({"read_bytes_s": 2e10, "measured_at": NOW, "others_cpu_share": 0.0}, None),
])
def test_when_a_stored_bandwidth_no_longer_stands(entry, reason):
    assert roofline.stale_reason(entry, NOW) == reason


def test_a_figure_taken_under_load_never_replaces_a_quiet_one():
    quiet_old = {"read_bytes_s": 3e10, "measured_at": NOW - 40 * DAY, "others_cpu_share": 0.05}
    busy_new = {"read_bytes_s": 1.8e10, "measured_at": NOW, "others_cpu_share": 0.6}
    quiet_new = {"read_bytes_s": 2.9e10, "measured_at": NOW, "others_cpu_share": 0.0}
    legacy = {"read_bytes_s": 1.8e10, "measured_at": NOW - DAY}
    assert roofline.better_of(quiet_old, busy_new) is quiet_old
    assert roofline.better_of(quiet_old, quiet_new) is quiet_new
    assert roofline.better_of(busy_new, quiet_new) is quiet_new
    assert roofline.better_of(legacy, busy_new) is busy_new  # neither quiet: the newer


def _store(home, entry):
    (home / roofline.BANDWIDTH_FILE).write_text(json.dumps({"cpu": entry}), encoding="utf-8")


def test_a_bandwidth_stored_under_load_is_measured_again_on_a_quiet_machine(home):
    busy = {"read_bytes_s": 1.0, "measured_at": time.time() - DAY, "others_cpu_share": 0.6}
    _store(home, busy)
    assert roofline.measure_and_store("cpu", others_now=0.9) == busy  # still busy: kept, and it says so
    fresh = roofline.measure_and_store("cpu", others_now=0.0)  # quiet now: measured again, stamped
    assert fresh["read_bytes_s"] > 1.0 and fresh["measured_at"] > busy["measured_at"]
    assert isinstance(fresh["others_cpu_share"], float) and roofline.stored_bandwidth("cpu") == fresh


def test_an_unstamped_bandwidth_is_measured_again_on_a_quiet_machine(home):
    legacy = {"read_bytes_s": 1.0, "measured_at": time.time() - DAY}  # kept before the load was kept with it
    _store(home, legacy)
    assert roofline.measure_and_store("cpu", others_now=0.9) == legacy
    again = roofline.measure_and_store("cpu", others_now=0.0)
    assert again["measured_at"] > legacy["measured_at"] and roofline.stored_bandwidth("cpu") == again


def test_an_old_bandwidth_is_measured_again_on_a_quiet_machine(home):
    old = {"read_bytes_s": 1.0, "measured_at": time.time() - 45 * DAY, "others_cpu_share": 0.0}
    _store(home, old)
    assert roofline.measure_and_store("cpu", others_now=0.9) == old
    again = roofline.measure_and_store("cpu", others_now=0.0)
    # measured again; kept unless the new figure itself was taken under load (better_of, above)
    assert roofline.stored_bandwidth("cpu") == again
    assert again == old or (again["measured_at"] > old["measured_at"] and again["read_bytes_s"] > 1.0)


def test_a_standing_bandwidth_is_not_measured_again(home):
    standing = {"read_bytes_s": 1.0, "measured_at": time.time() - DAY, "others_cpu_share": 0.0}
    _store(home, standing)
    assert roofline.measure_and_store("cpu", others_now=0.0) == standing
    forced = roofline.measure_and_store("cpu", force=True)  # "Measure again": whatever the load, stamped
    assert forced["read_bytes_s"] > 1.0 and "others_cpu_share" in forced


def test_the_bandwidth_is_measured_once_and_kept_in_the_data_folder(home):
    assert roofline.stored_bandwidth("cpu") is None
    first = roofline.measure_and_store("cpu")
    assert first["read_bytes_s"] > 0 and (home / roofline.BANDWIDTH_FILE).is_file()
    # not measured again (told the machine is busy now, so even a first figure taken under load stands)
    assert roofline.measure_and_store("cpu", others_now=1.0) == first == roofline.stored_bandwidth("cpu")
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
    # the cache at the reply's mean length: the prompt and half the reply, of the prompt + n − 1 positions it holds
    held, mean = data["prompt_tokens"] + data["generated_tokens"] - 1, data["prompt_tokens"] + data["generated_tokens"] / 2
    assert r["kv_bytes"] == round(data["kv_cache_bytes"] * mean / held) and 0 < r["kv_bytes"] < data["kv_cache_bytes"]
    assert 0 < r["weights_bytes"] <= data["weights_bytes"]
    assert r["bytes_per_token"] == r["weights_bytes"] + r["kv_bytes"]
    assert r["tok_s"] == data["decode_tok_s"] and r["achieved_bytes_s"] == pytest.approx(
        r["bytes_per_token"] * data["decode_tok_s"])
    stored = roofline.stored_bandwidth("cpu")
    assert r["bandwidth_bytes_s"] == stored["read_bytes_s"]  # measured once, kept
    # when and under what load it was measured travels with it
    assert r["bandwidth_measured_at"] == stored["measured_at"] and r["bandwidth_measured_utc"].endswith("Z")
    assert r["bandwidth_others_cpu_share"] == stored["others_cpu_share"]
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
