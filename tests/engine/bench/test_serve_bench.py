"""engine.bench.serve: the in-process / HTTP pair and the concurrent clients, run for real on the tiny model."""

from __future__ import annotations

import contextlib
import io
import json

from engine.bench.serve import main


def test_serve_bench_measures_both_sides_and_every_client(tiny_model_dir, home):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["--model", str(tiny_model_dir), "--precision", "fp32", "--tokens", "4", "--reps", "1",
                     "--clients", "3"]) == 0
    result = json.loads(out.getvalue())
    pair = result["side_by_side"]
    for figure in ("ttft_s", "decode_tok_s"):
        assert set(pair[figure]["median"]) == {"in-process", "http"}
        assert pair[figure]["median"]["http"] > 0 and pair[figure]["median"]["in-process"] > 0
    crowd = result["concurrent"]
    assert crowd["completed"] == 3 and crowd["failed"] == []
    assert 0 < crowd["ttft_s"]["best"] <= crowd["ttft_s"]["worst"]
    assert result["http_ttft_overhead_s"] is not None and result["precision"] == "fp32"
