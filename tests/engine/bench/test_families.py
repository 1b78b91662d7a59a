"""The family bench (engine/bench/families.py): its shapes, the random-weight Q4_0 GGUFs it writes (loaded by the
engine with their blocks kept 4-bit, on the fast path), one measured row, and the CLI's bad input."""

from __future__ import annotations

import contextlib
import dataclasses
import io

import pytest
import torch

from engine.__main__ import main
from engine.bench import families
from engine.bench.families import SHAPES, Shape, gguf_bytes_per_token, measure_family, params, parse_names, write_gguf
from engine.quant.quant import Int4Linear, Int8Linear
from tests.helpers.family_models import load_cpu
from tests.helpers.tiny_model import build_tiny_tokenizer

# Each family's switches, scaled down: 2 layers, d = 64, 4 heads sharing 2 KV heads (Gemma 3: one), MLP 128.
TINY = {
    "llama": Shape("tiny-llama", "llama", 2, 64, 4, 2, 16, 128, 0, 500000.0),
    "qwen2": Shape("tiny-qwen2", "qwen2", 2, 64, 4, 2, 16, 128, 0, 1000000.0, qkv_bias=True),
    # head_dim 128 as every Qwen3 has: transformers' GGUF reader takes Qwen3Config's default, not the file's.
    "qwen3": Shape("tiny-qwen3", "qwen3", 2, 64, 4, 2, 128, 128, 0, 1000000.0, qk_norm=True),
    "gemma3": Shape("tiny-gemma3", "gemma3", 2, 64, 4, 1, 32, 128, 0, 1000000.0, qk_norm=True, gemma=True,
                    sliding_window=8),
}


def test_the_shapes_have_their_models_parameter_counts():
    # Published sizes (embedding included, tied): Llama-3.2-1B 1.24 B, Qwen2.5-0.5B 0.49 B, Qwen2.5-1.5B 1.54 B,
    # Qwen3-0.6B 0.60 B (0.44 B without the embedding), Gemma-3-1B 1.00 B.
    expected = {"llama-3.2-1b": 1.236e9, "qwen2.5-0.5b": 0.494e9, "qwen2.5-1.5b": 1.543e9, "qwen3-0.6b": 0.596e9,
                "gemma-3-1b": 1.0e9}
    for name, count in expected.items():
        assert params(SHAPES[name]) == pytest.approx(count, rel=0.01), name


def test_names_parse_and_an_unknown_one_is_named():
    assert parse_names(None) == list(SHAPES) == parse_names("all")
    assert parse_names("qwen3-0.6b, gemma-3-1b") == ["qwen3-0.6b", "gemma-3-1b"]
    with pytest.raises(ValueError, match="unknown family llama-7b; known: llama-3.2-1b"):
        parse_names("llama-7b")


@pytest.mark.parametrize("arch", list(TINY))
def test_a_written_family_loads_with_its_q4_0_blocks_kept_on_the_fast_path(tmp_path, arch):
    tokenizer = build_tiny_tokenizer()
    shape = dataclasses.replace(TINY[arch], vocab=len(tokenizer) + 40)  # filler tokens past the real ones
    path = write_gguf(shape, tmp_path / f"{arch}.gguf", tokenizer)
    loaded = load_cpu(path, "int4")
    assert "14 Q4_0 kept 4-bit" in loaded.facts.load_note
    layer = loaded.model.model.layers[0]
    assert isinstance(layer.mlp.down_proj, Int4Linear)  # Int4SymLinear where the native kernel runs
    assert isinstance(loaded.model.lm_head, Int8Linear) and loaded.model.lm_head.out_features == shape.vocab
    # Every tensor's bytes: what llama.cpp reads per token, less than the file (its header, the vocabulary).
    assert 0 < gguf_bytes_per_token(path) < path.stat().st_size


def test_one_family_row_is_measured(tmp_path, monkeypatch):
    tokenizer = build_tiny_tokenizer()
    shape = dataclasses.replace(TINY["qwen3"], vocab=len(tokenizer) + 8)
    monkeypatch.setattr(families, "installed", lambda: False)  # the peer's absence is a note, not a failure
    row = measure_family(shape, tokenizer, tokens=4, reps=1, folder=tmp_path)
    assert (tmp_path / f"tiny-qwen3-{families.FORMAT}.gguf").is_file()
    assert row["fastpath"] == "FastRunner"
    assert row["decode_tok_s"]["median"]["int4"] > 0 and row["ttft_long_s"]["median"]["int4"] > 0
    assert row["gb_s"]["int4"] == pytest.approx(row["bytes_per_token"]["int4"] * row["decode_tok_s"]["median"]["int4"]
                                                / 1e9)
    assert row["int4_vs_peer"] is None and "make bench-peer" in row["peer_note"]
    table = families.format_families({"machine": {"cpu": "x", "cpu_capability": "y", "torch_threads": 1,
                                                  "load_average_1m": 1.0}, "load_average_1m_after": 1.0,
                                      "tokens": 4, "reps": 1, "families": [row]})
    assert "| tiny-qwen3 |" in table and "make bench-peer" in table


def test_an_unknown_family_is_one_line_and_status_2(capsys):
    assert main(["bench", "--families", "llama-7b"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: unknown family llama-7b; known: " + ", ".join(SHAPES)]


def test_the_cpu_threads_are_left_as_they_were():
    before = torch.get_num_threads()
    with contextlib.redirect_stderr(io.StringIO()):
        main(["bench", "--families", "nope"])
    assert torch.get_num_threads() == before
