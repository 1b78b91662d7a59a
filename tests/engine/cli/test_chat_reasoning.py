"""``python -m engine chat`` with a reasoning model: --json has the thought and the split TTFT; streamed, the
thought goes to stderr and stdout is the answer alone."""

from __future__ import annotations

import json

from engine.__main__ import main
from tests.helpers.reasoning_model import expected_texts


def test_json_reports_the_thought_and_the_split_ttft(reasoning_model_dir, capsys):
    rc = main(["chat", "--prompt", "Capital of France?", "--model", str(reasoning_model_dir), "--precision", "fp32",
               "--temperature", "0", "--json"])
    data = json.loads(capsys.readouterr().out)
    thought, answer = expected_texts(reasoning_model_dir)
    assert rc == 0 and data["finish_reason"] == "eos"
    assert (data["reasoning"], data["text"]) == (thought, answer)
    assert data["thinking_tokens"] > 0 and data["thinking_s"] >= 0
    assert data["ttft_thought_s"] == data["ttft_s"] < data["ttft_answer_s"]


def test_streamed_the_thought_is_beside_the_answer(reasoning_model_dir, capsys):
    rc = main(["chat", "--prompt", "Capital of France?", "--model", str(reasoning_model_dir), "--precision", "fp32",
               "--temperature", "0"])
    out, err = capsys.readouterr()
    thought, answer = expected_texts(reasoning_model_dir)
    assert rc == 0 and out == answer + "\n"
    assert thought in err and "<think>" not in out + err
    assert "thinking tokens" in err.strip().splitlines()[-1]
