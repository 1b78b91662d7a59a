"""engine.bench.cuda: the GPU bench's own smoke run (``--tiny --device cpu``) prints its JSON shape; on a
machine without CUDA it refuses the CUDA device with one line and exit 2."""

from __future__ import annotations

import json

import pytest
import torch

from engine.bench.cuda import main


def test_tiny_cpu_smoke_run(capsys):
    assert main(["--tiny", "--device", "cpu", "--no-bnb", "--tokens", "4", "--reps", "2", "--prompt", "8"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["schema"] == "miaohui-bench-cuda/1" and r["device"] == "cpu"
    assert set(r["warmup_s"]) == {"baseline", "fastpath"}  # the CUDA-graph variant needs CUDA
    decode = r["decode_tok_s"]
    assert all(v > 0 for v in decode["median"].values())
    assert all(len(runs) == 2 for runs in decode["runs"].values())
    assert decode["ratio"]["fastpath"] == pytest.approx(decode["median"]["fastpath"] / decode["median"]["baseline"])
    assert r["greedy_equal_to_baseline"] == {"fastpath": True}
    assert r["model"]["fastpath_reason"] is None and r["compile_s"] is None
    assert all(v > 0 for v in r["mbu"].values())
    assert "bitsandbytes" not in r


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_no_cuda_is_one_line_exit_2(capsys):
    assert main(["--tiny"]) == 2
    assert capsys.readouterr().err.strip().startswith("error: no CUDA GPU here")
