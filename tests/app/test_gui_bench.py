"""The GUI-vs-headless decode comparison runs both real paths end to end (tiny model, one run each)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from app.gui_bench import _last_json


def test_last_json_reads_the_report_after_other_output():
    assert _last_json('progress\n{"a": 1}\n') == {"a": 1}
    assert _last_json('{"x": 0}\nnoise\n{\n "b": [1,\n 2]\n}\n') == {"b": [1, 2]}


def test_compares_the_window_and_the_engine_on_the_same_reply(tiny_model_dir, home):
    done = subprocess.run([sys.executable, "-m", "app.gui_bench", "--model", str(tiny_model_dir), "--precision", "fp32",
                           "--device", "cpu", "--runs", "1", "--max-new-tokens", "8", "--prompt", "Hello",
                           "--timeout", "300"], capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert set(report["runs"]) == {"headless", "gui"}
    for runs in report["runs"].values():
        assert len(runs) == 1 and runs[0]["generated_tokens"] == 8 and runs[0]["decode_tok_s"] > 0
    assert report["same_length"] is True
    medians = report["median_decode_tok_s"]
    # The medians are rounded to 0.01 tok/s in the report: relative to a ratio far from 1 that rounding is not 0.01.
    assert report["gui_over_headless"] == pytest.approx(medians["gui"] / medians["headless"], rel=0.01, abs=0.01)
