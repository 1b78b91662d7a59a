"""The int8/int4 weight cache (engine/quant/quant_cache.py): a second load reads it, and a stale or damaged
file is rebuilt, never trusted."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from engine.quant import quant_cache
from engine.models.loader import load_model
from engine.inputs import LoadSpec
from engine.quant.quant import Int8Linear
from engine.quant.quant_cache import cache_folder, cache_key

HIT = "quantized weights from the cache"


def _load(folder: Path, precision: str):
    stages: list[str] = []
    loaded = load_model(LoadSpec(model=str(folder), precision=precision), progress=lambda p: stages.append(p.stage))
    return loaded, HIT in stages


def _logits(loaded) -> torch.Tensor:
    with torch.inference_mode():
        return loaded.model(input_ids=torch.tensor([[5, 17, 42, 99, 7]])).logits


@pytest.mark.parametrize("precision", ["int8", "int4"])
def test_a_second_load_reads_the_cache_and_computes_the_same(home, tiny_model_dir, precision):
    first, hit = _load(tiny_model_dir, precision)
    assert not hit and len(list(cache_folder().glob("*.safetensors"))) == 1
    second, hit = _load(tiny_model_dir, precision)
    assert hit
    assert torch.equal(_logits(first), _logits(second))
    assert second.facts.weights_bytes == first.facts.weights_bytes


def _same_tensors(path: Path, expected: dict[str, torch.Tensor]) -> bool:
    found = load_file(str(path))
    return found.keys() == expected.keys() and all(torch.equal(found[k], expected[k]) for k in expected)


def _only_cache_file() -> Path:
    files = list(cache_folder().glob("*.safetensors"))
    assert len(files) == 1
    return files[0]


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty"])
def test_a_damaged_cache_is_rebuilt_not_trusted(home, tiny_model_dir, damage):
    reference, _ = _load(tiny_model_dir, "int4")
    path = _only_cache_file()
    # Cloned: load_file's tensors map the file, which the test is about to overwrite.
    good, expected = path.read_bytes(), {k: v.clone() for k, v in load_file(str(path)).items()}
    path.write_bytes({"garbage": os.urandom(4096), "truncated": good[: len(good) // 2], "empty": b""}[damage])
    loaded, hit = _load(tiny_model_dir, "int4")
    assert not hit and torch.equal(_logits(loaded), _logits(reference))
    assert _same_tensors(path, expected)  # rewritten whole
    assert _load(tiny_model_dir, "int4")[1]


def test_a_cache_of_other_shapes_is_ignored_and_rewritten(home, tiny_model_dir, tmp_path):
    reference, _ = _load(tiny_model_dir, "int8")
    path = _only_cache_file()
    expected = {k: v.clone() for k, v in load_file(str(path)).items()}  # the file is about to be rewritten
    # The file of another model under this model's key: same names, wrong shapes.
    with safe_open(str(path), framework="pt") as handle:
        metadata = handle.metadata()
    tensors = {k: v.clone() for k, v in load_file(str(path)).items()}
    name = next(k for k in tensors if k.startswith("layers.0.qkv.") and tensors[k].dtype == torch.int8)  # either layout
    tensors[name] = tensors[name][:tensors[name].shape[0] // 2].contiguous()
    save_file(tensors, str(path), metadata=metadata)
    loaded, hit = _load(tiny_model_dir, "int8")
    assert not hit and torch.equal(_logits(loaded), _logits(reference))
    assert _same_tensors(path, expected)


def test_the_key_changes_with_the_weights_the_precision_the_group_and_the_kernel_build(tiny_model_dir, monkeypatch,
                                                                                        tmp_path):
    weights = tmp_path / "model.safetensors"
    weights.write_bytes((tiny_model_dir / "model.safetensors").read_bytes())
    key = cache_key([weights], "int4")
    assert key == cache_key([weights], "int4")
    assert key != cache_key([weights], "int8") and key != cache_key([weights], "int4", group=64)
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 1_000_000_000))
    touched = cache_key([weights], "int4")
    assert touched != key
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2-test")
    assert cache_key([weights], "int4") != touched
    monkeypatch.setattr(quant_cache.tiled, "int4_enabled", lambda dtype: 2)  # the tiles of engine/quant/tiled.py
    tiles = cache_key([weights], "int4")
    monkeypatch.setattr(quant_cache.tiled, "int4_enabled", lambda dtype: None)  # aten's layout
    assert cache_key([weights], "int4") != tiles
    # bf16 computed natively or not (the modules' dtype follows it): a data folder moved between CPUs, or CI's
    # second pass with MIAOHUI_CPU_BF16 flipped, must not read the other's file
    monkeypatch.setenv("MIAOHUI_CPU_BF16", "1")
    native = cache_key([weights], "int4")
    monkeypatch.setenv("MIAOHUI_CPU_BF16", "0")
    assert cache_key([weights], "int4") != native


def test_without_a_usable_data_folder_it_quantizes_without_a_cache(tmp_path, monkeypatch, tiny_model_dir):
    not_a_folder = tmp_path / "home-file"
    not_a_folder.write_text("x")
    monkeypatch.setenv("MIAOHUI_HOME", str(not_a_folder))
    loaded = load_model(LoadSpec(model=str(tiny_model_dir), precision="bf16"))
    assert quant_cache.quantize_cached(loaded.model, "int4", [tiny_model_dir / "model.safetensors"]) is False
    assert isinstance(loaded.model.lm_head, Int8Linear)
