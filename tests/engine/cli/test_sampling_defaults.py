"""Issue 26: one set of sampling defaults and ranges (``engine.inputs``) for the command lines and the window.

The CLI used to decode greedily by default while the window sampled at T=0.2 with a repetition penalty: the same
prompt got different answers. Now both take ``SamplingConfig()``'s defaults, and the CLI keeps a fixed seed so two
runs still print the same text.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from app.state.settings import RANGES, ChatSettings
from engine.cli import replies
from engine.errors import BadInputError
from engine.inputs import CLI_DEFAULT_SEED, SAMPLING_LIMITS, SAMPLING_RANGES, SamplingConfig

REPO = Path(__file__).resolve().parents[3]
SAMPLED = ("temperature", "top_p", "top_k", "repetition_penalty", "max_new_tokens", "use_kv_cache")


def _cli_config(*argv: str) -> SamplingConfig:
    parser = argparse.ArgumentParser()
    replies.add_generation_arguments(parser)
    return replies.sampling_config(parser.parse_args(list(argv)))


def test_the_cli_defaults_are_sampling_configs_with_a_fixed_seed():
    assert _cli_config() == dataclasses.replace(SamplingConfig(), seed=CLI_DEFAULT_SEED)
    assert not SamplingConfig().greedy  # the default samples; --temperature 0 is how to ask for greedy
    assert _cli_config("--temperature", "0").greedy
    assert _cli_config("--seed", "-1").seed is None  # -1: a fresh seed, as in the window


def test_the_windows_defaults_map_to_the_same_sampling_config():
    window = ChatSettings().sampling_config()
    default = SamplingConfig()
    assert {name: getattr(window, name) for name in SAMPLED} == {name: getattr(default, name) for name in SAMPLED}
    assert window.seed is None and ChatSettings().seed == -1  # the window draws a fresh seed per reply


def test_the_windows_ranges_are_the_engines_and_lie_inside_what_it_accepts():
    assert RANGES is SAMPLING_RANGES
    for name, (low, high) in SAMPLING_RANGES.items():
        if name == "seed":
            continue
        for value in (low, high):
            SamplingConfig(**{name: value})  # every value a spin box can show is accepted
        limit_low, limit_high = SAMPLING_LIMITS[name]
        assert limit_low <= low and (limit_high is None or high <= limit_high), name


def test_the_engine_still_accepts_what_the_openai_api_allows():
    # The server builds SamplingConfig from requests: the window's tighter bounds must not refuse these.
    SamplingConfig(temperature=2.0, top_p=0.001, top_k=1_000_000, repetition_penalty=0.1, max_new_tokens=10**6)
    with pytest.raises(BadInputError, match="top_p must be greater than 0 and at most 1"):
        SamplingConfig(top_p=0.0)
    with pytest.raises(BadInputError, match="temperature must be between 0 and 10"):
        SamplingConfig(temperature=10.5)


def test_two_default_runs_print_the_same_sampled_text(tiny_model_dir):
    def run(*extra: str) -> str:
        proc = subprocess.run([sys.executable, "-m", "engine", "chat", "--prompt", "Hello 秒回", "--model",
                               str(tiny_model_dir), "--precision", "fp32", "--device", "cpu", "--max-new-tokens",
                               "12", "--json", *extra], cwd=REPO, capture_output=True, text=True, timeout=180)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return json.loads(proc.stdout)["text"]

    first = run()
    assert first and run() == first
    assert run("--seed", str(CLI_DEFAULT_SEED)) == first  # the default is that seed, not an unseeded greedy run


def test_help_names_the_defaults(capsys):
    parser = argparse.ArgumentParser()
    replies.add_generation_arguments(parser)
    text = " ".join(parser.format_help().split())  # argparse wraps lines
    assert f"(default: {SamplingConfig().temperature}" in text and f"(default: {CLI_DEFAULT_SEED})" in text
