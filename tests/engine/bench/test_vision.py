"""engine/bench/vision.py (``python -m engine bench --vision``) on every family's tiny build
(engine/bench/vision_families.py, ``tiny=True``: the families' real config classes and image processors, a two-layer
tower and language part): the folder is built once and reused, both variants are measured end to end, and the table
has a row per family with int4 ÷ bf16. Speeds are never asserted, only that each figure exists."""

from __future__ import annotations

import pytest

from engine.bench import vision
from engine.bench import vision_families as vf

SIZE = (128, 96)  # the 1024x768 picture's shape, scaled to the tiny towers' tiles


@pytest.mark.parametrize("name", list(vf.FAMILIES))
def test_the_vision_bench_measures_both_variants_of_each_family(home, name):
    result = vision.measure(name, tokens=3, reps=1, tiny=True, size=SIZE)
    assert (vf.folder_for(name, tiny=True) / "config.json").is_file()
    assert result["family"] == name and result["layers"] <= result["full_layers"]
    assert 0 < result["image_tokens"] < result["prompt_tokens"]
    figures = result["figures"]
    assert set(figures) == set(vision.FIGURES)
    for figure in figures.values():
        assert all(figure["median"][variant] > 0 for variant in ("bf16", "int4")) and figure["ratio"]["int4"] > 0
    assert result["decode_step_int4"] is not None
    table = vision.table({"families": [result]})
    assert f"| {name} | {result['layers']} of {result['full_layers']} | {result['image_tokens']} |" in table
    assert "int4 ÷ bf16 decode" in table


def test_family_names_are_checked():
    assert vf.parse_names(None) == vf.parse_names("all") == list(vf.FAMILIES)
    assert vf.parse_names("gemma-3-4b, qwen3-vl-2b") == ["gemma-3-4b", "qwen3-vl-2b"]
    with pytest.raises(ValueError, match="unknown vision family llava-9"):
        vf.parse_names("llava-9")
