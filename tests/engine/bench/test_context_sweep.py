"""``engine bench --contexts``: the sweep's rows on the tiny model (mechanism only: bytes, arithmetic, skips; no
speed is asserted) and its one-line refusals."""

from __future__ import annotations

import contextlib
import io

import pytest

from engine.__main__ import main
from engine.bench import context_sweep
from engine.inputs import LoadSpec
from engine.models.loader import load_model

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
