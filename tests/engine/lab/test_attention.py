"""Attention capture and its health measures: exact values on constructed matrices, real capture on the tiny model."""

from __future__ import annotations

import math
import threading

import pytest
import torch

from engine.errors import BadInputError
from engine.inputs import LoadSpec, SamplingConfig
from engine.lab.attention import (CAPTURE_ATTENTION, COLLAPSE_THRESHOLD, SINK_THRESHOLD, capture_attention,
                                  first_token_mass, normalised_entropy, run_attention, verdict)
from engine.lab.runs import generate_once
from engine.models.loader import load_model


def causal_uniform(n: int) -> torch.Tensor:
    """Every query spreads its weight evenly over itself and the tokens before it."""
    return torch.tril(torch.ones(n, n)) / torch.arange(1, n + 1).unsqueeze(1)  # (seq, seq)


def all_on_first(n: int) -> torch.Tensor:
    weights = torch.zeros(n, n)
    weights[:, 0] = 1.0
    return weights


@pytest.fixture(scope="module")
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # shared CI cores: one thread avoids oversubscription stalls
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tiny(tiny_model_dir, one_thread):
    """The tiny model as ``auto`` loads it: bf16 or fp32 depending on the CPU (or MIAOHUI_CPU_BF16)."""
    return load_model(LoadSpec(model=str(tiny_model_dir)))


@pytest.fixture(scope="module", params=["fp32", "bf16"])
def tiny_in(request, tiny_model_dir, one_thread):
    """The tiny model in each float precision, whatever ``auto`` picks on this CPU."""
    return load_model(LoadSpec(model=str(tiny_model_dir), precision=request.param))


def test_uniform_attention_has_entropy_one():
    weights = causal_uniform(6)
    assert normalised_entropy(weights).item() == pytest.approx(1.0, abs=1e-6)
    # rows 1..5 put 1/2, 1/3, ..., 1/6 on token 0
    assert first_token_mass(weights).item() == pytest.approx(sum(1 / (i + 1) for i in range(1, 6)) / 5)
    assert verdict(first_token_mass(weights).item(), 1.0) == "collapse (near-uniform)"


def test_everything_on_the_first_token_is_a_sink():
    weights = all_on_first(5)
    assert first_token_mass(weights).item() == pytest.approx(1.0)
    assert normalised_entropy(weights).item() == pytest.approx(0.0, abs=1e-6)
    assert verdict(1.0, 0.0) == "attention sink"


def test_attending_to_itself_is_focused():
    weights = torch.eye(5)
    assert first_token_mass(weights).item() == 0.0
    assert normalised_entropy(weights).item() == pytest.approx(0.0, abs=1e-6)
    assert verdict(0.0, 0.0) == "focused"


def test_measures_are_per_head_and_match_a_hand_computed_row():
    weights = torch.stack([causal_uniform(3), all_on_first(3)])  # (heads=2, 3, 3)
    weights[0, 2] = torch.tensor([0.5, 0.25, 0.25])
    sinks, entropies = first_token_mass(weights), normalised_entropy(weights)
    assert sinks.shape == entropies.shape == (2,)
    row2 = -(0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25)) / math.log(3)
    assert entropies[0].item() == pytest.approx((1.0 + row2) / 2)  # row 1 is uniform over 2 -> 1.0
    assert sinks[0].item() == pytest.approx((0.5 + 0.5) / 2)
    assert sinks[1].item() == pytest.approx(1.0)


def test_thresholds_are_what_the_notes_say():
    assert verdict(SINK_THRESHOLD + 0.01, 0.5) == "attention sink"
    assert verdict(SINK_THRESHOLD, COLLAPSE_THRESHOLD) == "collapse (near-uniform)"
    assert verdict(SINK_THRESHOLD, COLLAPSE_THRESHOLD - 0.01) == "focused"


def test_capture_returns_causal_rows_summing_to_one_and_restores_sdpa(tiny_in):
    """In fp32 and in bf16 alike: the probabilities are fp32, so rows sum to 1 within fp32 rounding."""
    model = tiny_in.model
    assert model.config._attn_implementation == "sdpa"  # normal chat loads with the fast kernel
    capture = capture_attention(tiny_in, "我昨天认识的那个人……他居然是我小学同学")
    layers, heads, seq = tiny_in.facts.layers, tiny_in.facts.heads, len(capture.pieces)
    assert capture.weights.shape == (layers, heads, seq, seq)
    assert capture.weights.dtype == torch.float32
    assert torch.allclose(capture.weights.sum(dim=-1), torch.ones(layers, heads, seq), atol=1e-4)
    assert torch.all(torch.triu(capture.weights, diagonal=1) == 0)  # causal: nothing from the future
    assert capture.attn_implementation_used == CAPTURE_ATTENTION
    assert capture.attn_implementation_restored == "sdpa" and model.config._attn_implementation == "sdpa"


def test_capture_attention_computes_what_eager_does(tiny_in):
    """Same layer outputs as transformers' eager attention, same probabilities up to eager's final cast."""
    model = tiny_in.model
    ids = torch.tensor([[5, 17, 42, 99, 7, 3]])
    outputs = {}
    try:
        for name in ("eager", CAPTURE_ATTENTION):
            model.set_attn_implementation(name)
            with torch.inference_mode():
                outputs[name] = model(input_ids=ids, output_attentions=True, use_cache=False)
    finally:
        model.set_attn_implementation("sdpa")
    eager, ours = outputs["eager"], outputs[CAPTURE_ATTENTION]
    assert torch.equal(eager.logits, ours.logits)
    for theirs, mine in zip(eager.attentions, ours.attentions):
        assert mine.dtype == torch.float32
        assert torch.equal(mine.to(theirs.dtype), theirs)


def test_chat_after_capture_stays_on_sdpa(tiny):
    capture_attention(tiny, "The man I met yesterday... he turned out to be my classmate.")
    run = generate_once(tiny, "Hi", SamplingConfig(temperature=0.0, max_new_tokens=4), threading.Event())
    assert run.token_ids and tiny.model.config._attn_implementation == "sdpa"
    assert all(layer.self_attn.config._attn_implementation == "sdpa" for layer in tiny.model.model.layers)


def test_capture_restores_sdpa_when_the_forward_fails(tiny, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(tiny.model, "forward", broken)
    with pytest.raises(RuntimeError):
        capture_attention(tiny, "hello")
    monkeypatch.undo()
    assert tiny.model.config._attn_implementation == "sdpa"


def test_attention_experiment_rows_heatmaps_and_flags(tiny):
    result = run_attention(tiny, threading.Event(), layer=1, head=2)
    layers, heads = tiny.facts.layers, tiny.facts.heads
    assert len(result.rows) == 2 * layers * heads  # two sentences, every head
    assert {row[0] for row in result.rows} == {"zh", "en"}
    assert len(result.heatmaps) == 2
    zh = result.heatmaps[0]
    assert len(zh.matrix) == len(zh.row_labels) == len(zh.col_labels) == result.summary["zh_tokens"]
    assert all(sum(row) == pytest.approx(1.0, abs=1e-3) for row in zh.matrix)
    assert "他" in zh.row_labels
    assert result.summary["attn_implementation_during_capture"] == CAPTURE_ATTENTION
    assert result.summary["attn_implementation_after"] == "sdpa"
    # A random-weight model attends almost uniformly: the collapse measure must say so.
    assert result.summary["zh_chosen_verdict"] == "collapse (near-uniform)"
    assert any("collapse" in flag for flag in result.flags)
    assert any(str(SINK_THRESHOLD) in note for note in result.notes)
    with pytest.raises(BadInputError):
        run_attention(tiny, threading.Event(), layer=layers, head=0)


@pytest.mark.default_model
def test_default_model_heads_include_sinks(default_model_dir):
    loaded = load_model(LoadSpec(model=str(default_model_dir)))
    capture = capture_attention(loaded, "我昨天认识的那个人……他居然是我小学同学")
    sinks = first_token_mass(capture.weights)  # (30, 9)
    assert sinks.shape == (30, 9)
    assert float(sinks.max()) > SINK_THRESHOLD  # trained models park weight on the first token somewhere
    assert loaded.model.config._attn_implementation == "sdpa"
