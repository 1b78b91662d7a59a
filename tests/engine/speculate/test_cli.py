"""``python -m engine chat --speculative prompt-lookup|draft:MODEL|self --json``: the same greedy reply, and the
speculation figures in the JSON; bad values and a draft of another vocabulary exit 2 with one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.__main__ import main

REPO = Path(__file__).resolve().parents[3]
SPEC_KEYS = {"speculation", "drafts", "draft_tokens", "accepted_tokens", "target_steps", "acceptance_rate",
             "tokens_per_step"}


def chat_json(capsys, model: Path, *extra: str) -> dict:
    rc = main(["chat", "--prompt", "alpha beta gamma delta alpha beta gamma delta", "--model", str(model),
               "--precision", "fp32", "--device", "cpu", "--max-new-tokens", "30", "--temperature", "0", "--json",
               *extra])
    out, err = capsys.readouterr()
    assert rc == 0, err[-2000:]
    return json.loads(out)


@pytest.mark.parametrize("how", ["prompt-lookup", "self", "draft:{model}"])
def test_speculative_json_reports_the_figures_and_the_same_text(tiny_model_dir, capsys, how):
    plain = chat_json(capsys, tiny_model_dir)
    fast = chat_json(capsys, tiny_model_dir, "--speculative", how.format(model=tiny_model_dir))
    assert fast["text"] == plain["text"] and fast["generated_tokens"] == plain["generated_tokens"]
    assert SPEC_KEYS <= set(fast)
    assert fast["speculation"] == how.split(":")[0] + (":" + fast["speculation"].split(":", 1)[1]
                                                       if how.startswith("draft") else "")
    assert fast["drafts"] > 0 and fast["accepted_tokens"] <= fast["draft_tokens"]
    assert 0.0 <= fast["acceptance_rate"] <= 1.0 and fast["tokens_per_step"] >= 1.0
    assert plain["speculation"] == "" and plain["acceptance_rate"] is None


def _error_line(err: str) -> str:
    assert err.endswith("\n") and err.count("error: ") == 1 and "Traceback" not in err, err[-2000:]
    return err[:-1].split("\n")[-1].split("\r")[-1]


@pytest.mark.parametrize("value, start", [
    ("bogus", "error: unknown speculation 'bogus': choose prompt-lookup, draft:MODEL or self"),
    ("draft:", "error: draft speculation needs a model: draft:MODEL"),
])
def test_bad_speculative_values_exit_2_with_one_line(tiny_model_dir, value, start):
    proc = subprocess.run([sys.executable, "-m", "engine", "chat", "--model", str(tiny_model_dir), "--prompt", "hi",
                           "--precision", "fp32", "--device", "cpu", "--speculative", value],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and _error_line(proc.stderr).startswith(start), proc.stderr[-2000:]
    assert proc.stdout == ""


def test_a_draft_of_another_vocabulary_exits_2_in_a_real_process(tiny_model_dir, foreign_tiny_dir):
    proc = subprocess.run([sys.executable, "-m", "engine", "chat", "--model", str(tiny_model_dir), "--prompt", "hi",
                           "--precision", "fp32", "--device", "cpu", "--speculative", f"draft:{foreign_tiny_dir}"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "their vocabularies differ" in _error_line(proc.stderr)
