"""engine.executor.runners: both runners implement ``Runner``, and ``make_runner`` picks the fast one only where it
applies, stepping aside to the plain runner for models the fast path does not support."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from engine.executor.families import Refusal, RefusalKind, refusal
from engine.executor.fastpath import FastRunner
from engine.executor.llama_fused import unsupported_reason
from engine.executor.recompute import RecomputeRunner
from engine.executor.runner import ModelRunner
from engine.executor.runners import FASTPATH_ENV, Runner, RunnerChoice, choose_runner, make_runner
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
    assert isinstance(make_runner(tiny_fp32, False), Runner)


def test_unsupported_models_fall_back_to_the_plain_runner(tmp_path, tiny_fp32):
    folder = build_tiny_model(tmp_path / "gelu", hidden_act="gelu")
    other = load_model(LoadSpec(model=str(folder), precision="fp32", device="cpu"))
    assert unsupported_reason(other.model) == "activation gelu"
    with pytest.raises(ValueError, match="fast path not available"):
        FastRunner(other.model)
    runner = make_runner(other, True)
    assert type(runner) is ModelRunner
    assert runner.choice == RunnerChoice("plain", Refusal(RefusalKind.FEATURE, "activation gelu"))
    no_cache = make_runner(tiny_fp32, False)  # the runner a cached reply gets, rebuilt every step
    assert type(no_cache) is RecomputeRunner and type(no_cache.inner) is FastRunner
    assert make_runner(other, False).inner.choice == runner.choice
    fast = make_runner(tiny_fp32, True)
    assert type(fast) is FastRunner and fast.choice.to_dict() == {
        "runner": "fast", "runner_reason": None, "runner_reason_kind": None}


def test_a_family_not_on_the_fast_path_says_so_by_name(tiny_fp32, monkeypatch):
    """The reason names the model_type and what the step lacks for it: what engine info and chat --json show."""
    monkeypatch.setattr(tiny_fp32.model.config, "model_type", "qwen2_moe")
    choice = choose_runner(tiny_fp32.model, True)
    assert choice.runner == "plain" and choice.reason.kind is RefusalKind.FAMILY
    assert str(choice.reason) == "model_type qwen2_moe not on the fast path yet: mixture-of-experts layers"
    monkeypatch.setattr(tiny_fp32.model.config, "model_type", "made_up")
    assert refusal(tiny_fp32.model) == Refusal(RefusalKind.FAMILY, "model_type made_up not on the fast path yet")


def test_a_fast_runner_that_fails_to_build_leaves_a_plain_one_saying_why(tiny_fp32, monkeypatch):
    from engine.executor import runners

    def broken(*_a, **_k):
        raise RuntimeError("no room for the cache")

    monkeypatch.setattr(runners, "FastRunner", broken)
    runner = make_runner(tiny_fp32, True)
    assert type(runner) is ModelRunner
    assert runner.choice.reason == Refusal(RefusalKind.FAILED, "the fast runner failed to build: no room for the cache")


def test_the_environment_can_force_the_plain_runner(tiny_fp32, monkeypatch):
    monkeypatch.setenv(FASTPATH_ENV, "0")
    runner = make_runner(tiny_fp32, True)
    assert type(runner) is ModelRunner and runner.choice.reason.kind is RefusalKind.DISABLED
    assert runner.choice.to_dict()["runner_reason"] == "MIAOHUI_FASTPATH=0 in the environment"


def test_the_plain_runner_does_not_import_the_fast_path():
    # The choice lives in runners.py alone: runner.py (which fastpath.py builds on) never reaches back.
    code = "import sys, engine.executor.runner\nprint('engine.executor.fastpath' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 0 and result.stdout == "False\n", result.stderr[-2000:]
