"""engine.generate.runners: both runners implement ``Runner``, and ``make_runner`` picks the fast one only where it
applies, stepping aside to the plain runner for models the fast path does not support."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from engine.generate.fastpath import FastRunner
from engine.generate.llama_fused import unsupported_reason
from engine.generate.runner import ModelRunner
from engine.generate.runners import FASTPATH_ENV, Runner, make_runner
from engine.inputs import LoadSpec
from engine.models.loader import load_model
from tests.helpers.tiny_model import build_tiny_model

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def tiny_fp32(tiny_model_dir):
    return load_model(LoadSpec(model=str(tiny_model_dir), precision="fp32", device="cpu"))


def test_both_runners_implement_the_runner_protocol(tiny_fp32):
    assert isinstance(ModelRunner(tiny_fp32.model), Runner)
    assert isinstance(ModelRunner(tiny_fp32.model, use_kv_cache=False), Runner)
    assert isinstance(FastRunner(tiny_fp32.model), Runner)


def test_unsupported_models_fall_back_to_the_plain_runner(tmp_path, tiny_fp32):
    folder = build_tiny_model(tmp_path / "biased", attention_bias=True)
    biased = load_model(LoadSpec(model=str(folder), precision="fp32", device="cpu"))
    assert unsupported_reason(biased.model) == "projection biases"
    with pytest.raises(ValueError, match="fast path not available"):
        FastRunner(biased.model)
    assert type(make_runner(biased, True)) is ModelRunner
    assert type(make_runner(tiny_fp32, False)) is ModelRunner  # no cache: nothing to be fast about
    assert type(make_runner(tiny_fp32, True)) is FastRunner


def test_the_environment_can_force_the_plain_runner(tiny_fp32, monkeypatch):
    monkeypatch.setenv(FASTPATH_ENV, "0")
    assert type(make_runner(tiny_fp32, True)) is ModelRunner


def test_the_plain_runner_does_not_import_the_fast_path():
    # The choice lives in runners.py alone: runner.py (which fastpath.py builds on) never reaches back.
    code = "import sys, engine.generate.runner\nprint('engine.generate.fastpath' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 0 and result.stdout == "False\n", result.stderr[-2000:]
