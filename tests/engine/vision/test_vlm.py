"""engine/vision/vlm.py on random-weight vision-language folders saved with their processors
(tests/helpers/vision_models.py): which folders are vision models, the load through the engine's loader, the language
part alone quantized, and the typed refusals (no vision, a precision this path does not take)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from engine.errors import BadInputError, ImageError
from engine.inputs import LoadSpec
from engine.quant.quant import QuantizedLinear
from engine.vision.vlm import VISION_FAMILIES, NoVisionError, load_vision_model, vision_family
from tests.helpers.vision_models import build_vision_family


@pytest.fixture(scope="module")
def llava_dir(tmp_path_factory) -> Path:
    return build_vision_family(tmp_path_factory.mktemp("vlm") / "llava", "llava")


def test_the_family_is_read_from_config_json(tmp_path, tiny_model_dir, llava_dir):
    assert vision_family(llava_dir).model_type == "llava"
    assert vision_family(tiny_model_dir) is None  # a text model
    assert vision_family(tmp_path) is None  # no config at all
    for model_type in ("llava_onevision", "idefics3", "smolvlm", "qwen2_5_vl", "qwen3_vl", "gemma3"):
        (tmp_path / "config.json").write_text(json.dumps({"model_type": model_type}))
        assert vision_family(tmp_path) is VISION_FAMILIES[model_type]
    # the families whose language part is not on the fast path say why, as a typed reason
    # every family's language part is on the fast path; those whose prefill is not plain causal 1-D name their layout
    assert all(family.refusal is None for family in VISION_FAMILIES.values())
    assert {name: family.layout for name, family in VISION_FAMILIES.items() if family.layout} == \
        {"gemma3": "blocks", "qwen2_5_vl": "mrope", "qwen3_vl": "mrope"}  # engine/vision/layouts.py


def test_a_text_model_says_it_has_no_vision(tiny_model_dir):
    with pytest.raises(NoVisionError) as caught:
        load_vision_model(LoadSpec(model=str(tiny_model_dir), precision="fp32", device="cpu"))
    assert isinstance(caught.value, ImageError) and "this model has no vision" in str(caught.value)
    assert "\n" not in str(caught.value)


def test_bf16_load_runs_the_language_part_on_the_fast_path(llava_dir):
    vision = load_vision_model(LoadSpec(model=str(llava_dir), precision="bf16", device="cpu"))
    facts = vision.loaded.facts
    assert (facts.architecture, facts.precision, facts.runner, facts.runner_reason) == \
        ("LlavaForConditionalGeneration", "bf16", "fast", None)
    assert type(vision.processor).__name__ == "LlavaProcessor"
    assert vision.language.model is vision.model.model.language_model
    assert {p.dtype for p in vision.model.parameters()} == {torch.bfloat16}
    # the whole model's parameters, vision tower included
    assert facts.params == sum(p.numel() for p in vision.model.parameters())


@pytest.mark.parametrize("precision", ["int8", "int4"])
def test_int8_int4_quantize_the_language_part_only(home, llava_dir, precision):
    vision = load_vision_model(LoadSpec(model=str(llava_dir), precision=precision, device="cpu"))
    assert vision.precision == vision.loaded.facts.precision == precision
    assert vision.loaded.facts.runner == "fast" and vision.loaded.facts.decode_step is not None
    layer = vision.language.model.layers[0]
    assert isinstance(layer.mlp.down_proj, QuantizedLinear)
    assert vision.model.lm_head is vision.language.lm_head and isinstance(vision.model.lm_head, QuantizedLinear)
    tower = vision.model.model.vision_tower.encoder.layers[0].mlp.fc1
    assert type(tower) is torch.nn.Linear and tower.weight.dtype == torch.bfloat16  # the vision tower stays float
    assert type(vision.model.model.multi_modal_projector.linear_1) is torch.nn.Linear


def test_precisions_this_path_does_not_take_are_refused_before_loading(tmp_path, llava_dir):
    with pytest.raises(BadInputError, match="nf4 is not available for vision models"):
        load_vision_model(LoadSpec(model=str(llava_dir), precision="nf4", device="cpu"))
