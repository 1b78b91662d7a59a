"""Which runner a model gets, and why, as ``engine info`` (text and --json) and ``engine chat --json`` report it
(``ModelFacts.runner`` / ``runner_reason``, from engine/executor/runners.py's ``choose_runner``): fast for the
families of engine/executor/families.py, plain with a named reason for a family the fast step does not know,
here a random-weight Gemma (1) model built from transformers' own config class (Gemma 2 and 3 are on the
fast path now)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.__main__ import main
from tests.helpers.tiny_model import build_tiny_tokenizer


@pytest.fixture(scope="module")
def gemma_dir(tmp_path_factory) -> Path:
    import torch
    from transformers import GemmaConfig, GemmaForCausalLM, GenerationConfig

    folder = tmp_path_factory.mktemp("gemma")
    tokenizer = build_tiny_tokenizer()
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    config = GemmaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=1, head_dim=16, max_position_embeddings=256,
                         bos_token_id=tokenizer.convert_tokens_to_ids("<|im_start|>"),
                          eos_token_id=eos, pad_token_id=eos)
    torch.manual_seed(0)
    model = GemmaForCausalLM(config).eval()
    model.generation_config = GenerationConfig(bos_token_id=config.bos_token_id, eos_token_id=eos, pad_token_id=eos)
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return folder


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_info_says_the_fast_runner_for_a_fast_path_family(tiny_model_dir, capsys):
    code, out, _ = _run(capsys, "info", "--model", str(tiny_model_dir), "--precision", "fp32", "--json")
    card = json.loads(out)
    assert code == 0 and card["runner"] == "fast" and card["runner_reason"] is None
    code, out, _ = _run(capsys, "info", "--model", str(tiny_model_dir), "--precision", "fp32")
    assert code == 0 and "\n  runner              fast\n" in out


def test_info_and_chat_json_say_plain_and_why_for_gemma(gemma_dir, capsys):
    code, out, err = _run(capsys, "info", "--model", str(gemma_dir), "--precision", "fp32", "--json")
    assert code == 0, err
    card = json.loads(out)
    assert card["runner"] == "plain"
    assert card["runner_reason"] == ("model_type gemma not on the fast path yet: not wired to the Gemma 3 step (no post "
                                     "norms, no q/k norms)")
    code, out, _ = _run(capsys, "info", "--model", str(gemma_dir), "--precision", "fp32")
    assert "  runner              plain: model_type gemma not on the fast path yet" in out
    code, out, err = _run(capsys, "chat", "--model", str(gemma_dir), "--precision", "fp32", "--prompt", "Hello",
                          "--max-new-tokens", "3", "--json")
    assert code == 0, err
    reply = json.loads(out)
    assert reply["model"]["runner"] == "plain" and "gemma" in reply["model"]["runner_reason"]


def test_chat_json_says_fast_for_a_fast_path_family(tiny_model_dir, capsys):
    code, out, err = _run(capsys, "chat", "--model", str(tiny_model_dir), "--precision", "fp32", "--prompt", "Hi",
                          "--max-new-tokens", "3", "--json")
    assert code == 0, err
    assert json.loads(out)["model"]["runner"] == "fast"


def test_a_gemma3_text_model_reports_the_fast_runner(tmp_path, capsys):
    """Gemma 3 text models are on the fast path (tests/engine/executor/test_families.py checks their numbers)."""
    from tests.engine.executor.test_families import _build

    folder = _build(tmp_path / "gemma3", "gemma3")
    code, out, err = _run(capsys, "info", "--model", str(folder), "--precision", "fp32", "--json")
    assert code == 0, err
    assert (json.loads(out)["runner"], json.loads(out)["runner_reason"]) == ("fast", None)


@pytest.mark.parametrize("command", ["chat", "complete"])
def test_json_says_the_runner_and_that_every_step_recomputes_when_no_kv_cache_is_asked_for(tiny_model_dir, capsys,
                                                                                          command):
    """--no-kv-cache rebuilds the whole sequence every step on the runner a cached reply gets
    (engine.executor.recompute): `model.runner` names it and `runner_reason` says the sequence is recomputed."""
    code, out, err = _run(capsys, command, "--model", str(tiny_model_dir), "--precision", "fp32", "--prompt", "Hi",
                          "--max-new-tokens", "3", "--no-kv-cache", "--json")
    assert code == 0, err
    model = json.loads(out)["model"]
    assert model["runner"] == "fast"
    assert model["runner_reason"].startswith("no KV cache: every step recomputes the whole sequence")
