"""``auto`` on a CPU takes the fastest of int4/int8 that meets the quality bar, measured once per model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from engine.generate.session import ChatSession
from engine.events import Finished, Message
from engine.inputs import LoadSpec, SamplingConfig
from engine.quant import precision
from engine.models.loader import _default_model_loader, load_model
from engine.quant.quant_cache import cache_folder


def _verdicts() -> list[Path]:
    return sorted(cache_folder().glob("*.quality.json"))


def test_default_model_auto_on_cpu_follows_its_measured_agreement_and_remembers_it(default_model_dir, home):
    """The mechanism, not today's outcome: ``auto`` keeps int4 when int4's measured agreement reaches its bar, else it
    names int4 among the rejected with the figure that missed and moves on (int4 on the CPUs measured so far: an AMD
    EPYC and an Intel Xeon with AMX; a CPU whose kernels round differently may land on the other side)."""
    first = load_model(LoadSpec(model=str(default_model_dir), precision="auto", device="cpu"))
    choice = first.facts.auto_choice
    assert choice is not None and first.facts.precision == choice.precision
    assert choice.reference in ("bf16", "fp32") and choice.measured_now and 0.0 <= choice.agreement <= 1.0
    rejected = dict(choice.rejected)
    if choice.precision == "int4":
        assert choice.bar == precision.QUALITY_BARS["int4"] <= choice.agreement and not rejected
    else:
        assert rejected["int4"] < precision.QUALITY_BARS["int4"]
    verdicts = [json.loads(path.read_text())["agreement"] for path in _verdicts()]  # one per measured candidate
    assert len(verdicts) == 1 + len(rejected) and choice.agreement in verdicts
    events = list(ChatSession(first).generate([Message("user", "What is the capital of France?")],
                                              SamplingConfig(temperature=0.0, max_new_tokens=16)))
    assert isinstance(events[-1], Finished) and "Paris" in events[-1].text
    del first

    again = load_model(LoadSpec(model=str(default_model_dir), precision="auto", device="cpu"))
    assert again.facts.precision == choice.precision and again.facts.auto_choice is not None
    assert not again.facts.auto_choice.measured_now  # remembered, not measured again
    assert again.facts.auto_choice.agreement == choice.agreement
    assert again.facts.to_dict()["auto_choice"]["precision"] == choice.precision  # what `engine info --json` prints


@pytest.fixture
def tiny_counts(monkeypatch):
    """The tiny model is below MIN_PARAMS (its weights fit in the CPU's caches): let the bar apply to it."""
    monkeypatch.setattr(precision, "MIN_PARAMS", 0)


def test_a_candidate_missing_its_bar_is_rejected_and_the_next_one_starts_from_float_weights(
        tiny_model_dir, home, tiny_counts, monkeypatch):
    monkeypatch.setattr(precision, "QUALITY_BARS", {"int4": 1.01, "int8": 0.0})  # int4 cannot reach 101%
    loaded = load_model(LoadSpec(model=str(tiny_model_dir), precision="auto", device="cpu"))
    choice = loaded.facts.auto_choice
    assert loaded.facts.precision == "int8" and choice.precision == "int8" and choice.measured_now
    assert [name for name, _ in choice.rejected] == ["int4"]
    # int8's agreement is measured against the float model, not against the int4 one it replaced.
    assert 0.0 <= choice.agreement <= 1.0 and len(_verdicts()) == 2


def test_every_candidate_missing_keeps_the_float_type(tiny_model_dir, home, tiny_counts, monkeypatch):
    monkeypatch.setattr(precision, "QUALITY_BARS", {"int4": 1.01, "int8": 1.01})
    loaded = load_model(LoadSpec(model=str(tiny_model_dir), precision="auto", device="cpu"))
    assert loaded.facts.precision in ("bf16", "fp32")
    assert loaded.facts.auto_choice.precision == loaded.facts.precision
    assert [name for name, _ in loaded.facts.auto_choice.rejected] == ["int4", "int8"]
    assert not any("Int" in type(m).__name__ for m in loaded.model.modules())  # float weights, reloaded
    # Remembered: the next load rejects both without measuring, and stays float.
    again = load_model(LoadSpec(model=str(tiny_model_dir), precision="auto", device="cpu"))
    assert again.facts.precision == loaded.facts.precision and not again.facts.auto_choice.measured_now


@pytest.mark.parametrize("native_bf16", ["0", "1"])
def test_a_quantized_pick_is_the_explicit_precisions_model_and_a_remembered_one_reads_weights_once(
        tiny_model_dir, home, tiny_counts, monkeypatch, native_bf16):
    """Whatever float type the verdict is measured in (fp32 where bf16 is not native), the int4 ``auto`` keeps
    computes in bf16 with the same weights as an explicit int4 (engine/models/loader.py says why); a later load
    reads no float weights, only the chosen precision's."""
    monkeypatch.setenv("MIAOHUI_CPU_BF16", native_bf16)
    monkeypatch.setattr(precision, "QUALITY_BARS", {"int4": 0.0, "int8": 0.0})
    reads: list[torch.dtype] = []

    def counting(folder, **kwargs):
        reads.append(kwargs["dtype"])
        return _default_model_loader(folder, **kwargs)

    spec = LoadSpec(model=str(tiny_model_dir), precision="auto", device="cpu")
    first = load_model(spec, from_pretrained=counting)
    assert first.facts.precision == "int4" and first.facts.auto_choice.measured_now
    assert first.facts.auto_choice.reference == ("bf16" if native_bf16 == "1" else "fp32")
    assert reads == ([torch.bfloat16] if native_bf16 == "1" else [torch.float32, torch.bfloat16])
    assert first.model.dtype == torch.bfloat16 and first.facts.kv_dtype_bytes == 2
    # one quantized-weight file, the bf16 model's: the fp32 one measured on is read by no load, so never written
    assert len(list(cache_folder().glob("*.safetensors"))) == 1
    explicit = load_model(LoadSpec(model=str(tiny_model_dir), precision="int4", device="cpu"))
    ids = torch.arange(3, 40)[None]
    with torch.no_grad():
        assert torch.equal(first.model(ids).logits, explicit.model(ids).logits)

    reads.clear()
    again = load_model(spec, from_pretrained=counting)
    assert reads == [torch.bfloat16] and again.facts.precision == "int4"
    assert not again.facts.auto_choice.measured_now and again.model.dtype == torch.bfloat16
    assert again.facts.auto_choice.agreement == first.facts.auto_choice.agreement


def test_a_damaged_verdict_is_measured_again_never_trusted(tiny_model_dir, home, tiny_counts):
    load_model(LoadSpec(model=str(tiny_model_dir), precision="auto", device="cpu"))
    for path in _verdicts():
        path.write_text('{"format": 1, "tokens": 256, "agreement": 7}')  # out of range
    loaded = load_model(LoadSpec(model=str(tiny_model_dir), precision="auto", device="cpu"))
    assert loaded.facts.auto_choice.measured_now
    assert all(0.0 <= json.loads(p.read_text())["agreement"] <= 1.0 for p in _verdicts())


def test_explicit_precisions_and_small_models_skip_the_bar(tiny_model_dir, home):
    assert load_model(LoadSpec(model=str(tiny_model_dir), precision="auto", device="cpu")).facts.auto_choice is None
    explicit = load_model(LoadSpec(model=str(tiny_model_dir), precision="fp32", device="cpu"))
    assert explicit.facts.auto_choice is None and explicit.facts.precision == "fp32"
    assert _verdicts() == []
