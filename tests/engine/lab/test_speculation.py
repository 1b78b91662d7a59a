"""The lab's "Speculative decoding" experiment on the tiny model: its rows (plain, then each draft length, for the
repeat-heavy and the fresh prompt), identical greedy tokens, counts that fit, both charts, and a server refused."""

from __future__ import annotations

import threading

import pytest

from engine.inputs import LoadSpec
from engine.lab.experiments import LabOptions, NeedsLocalModelError, check_runnable, export, run_experiment
from engine.models.loader import load_model


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    return load_model(LoadSpec(model=str(tiny_model_dir), precision="fp32", device="cpu"))


def test_speculation_experiment_rows(tiny, tmp_path):
    result = run_experiment("speculation", tiny, threading.Event(), LabOptions(quick=True))
    rows = [dict(zip(result.columns, row)) for row in result.rows]
    lengths = (1, 2, 4, 8)
    for case in ("repeat-heavy", "fresh"):
        mine = [r for r in rows if r["prompt"] == case]
        assert [r["draft_length"] for r in mine] == [0, *lengths]
        assert mine[0]["speculation"] == "plain" and mine[0]["speedup"] == 1.0
        assert all(r["same_tokens"] is True for r in mine)  # greedy: speculation never changes the reply
        for r in mine[1:]:
            assert r["decode_tok_s"] > 0 and r["speedup"] > 0
            assert 1.0 <= r["tokens_per_step"] <= r["draft_length"] + 1
    # The tiny model repeats one token: lookup drafts it, and the model accepts it.
    assert any(r["acceptance_rate"] and r["acceptance_rate"] > 0.5 for r in rows if r["prompt"] == "repeat-heavy")
    assert {s.panel for s in result.series} == {0, 1}
    assert {s.x_label for s in result.series} == {"draft_length", "acceptance_rate"}
    assert not result.flags
    csv_path, png_path = export(result, tmp_path)
    assert csv_path.stat().st_size > 0 and png_path.stat().st_size > 0


def test_a_servers_model_cannot_run_it():
    with pytest.raises(NeedsLocalModelError, match="speculation"):
        check_runnable(("speculation",), remote=True)
