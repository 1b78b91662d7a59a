"""The vision-language families ``python -m engine bench --vision`` measures, as random-weight models (issue 44).

Owns ``FAMILIES`` (one ``VisionShape`` per family the engine takes images for, named after the smallest real model of
it: its vision tower whole, its language part at the real widths, heads, KV heads and vocabulary but with
``layers`` decoder layers where the full model would not fit beside the other variant in the memory this bench may
use; ``full_layers`` says how many the real one has), ``build_folder`` (the model from the family's real transformers
config class, random weights, saved once under ``<data dir>/cache/bench-vision/``), ``load`` (a ``BenchVision`` in bf16,
or with the language part quantized to int4 by ``engine.quant.quantize_step.native`` as ``engine.vision.vlm`` does;
the tower stays bf16) and ``prompt_inputs`` (one picture and a short question as the family's forward takes them).

No processor or tokenizer is saved: LLaVA-OneVision's and Qwen-VL's processors hold a video processor that transformers
builds only with torchvision (not installable here). The pixels come from each family's own PIL image processor (its
resize, tiling, normalisation: what a real picture costs); the ids are shaped by hand around them as the processor
would give them (the image placeholder repeated once per image token, Gemma 3's and Qwen's image brackets, token
types), with random text ids for the question. ``tiny=True`` scales every family down (a two-layer tower on small
tiles, a two-layer language part) for the unit test. Does not measure (``engine.bench.vision``).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from engine.bench.core import choose_names

FORMAT = "vf-1"  # bump when a recipe changes: older folders are then rebuilt
_V = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4)  # the tiny tower
_T = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
          head_dim=16)  # the tiny language part


@dataclass(frozen=True)
class VisionShape:
    """One family as measured: ``name`` (the real model its numbers are from), ``model_type``, the language layers
    built and the real model's, and ``make(tiny)`` -> (config, image processor)."""

    name: str
    model_type: str
    layers: int
    full_layers: int
    make: Callable[[bool], tuple[Any, Any]]


def _text(tiny: bool, layers: int, real: dict[str, Any]) -> dict[str, Any]:
    keep = {k: v for k, v in real.items() if k not in _T}
    return dict(keep, **_T) if tiny else dict(real, num_hidden_layers=layers)


def _gemma3(tiny: bool) -> tuple[Any, Any]:
    from transformers import Gemma3Config, Gemma3TextConfig, SiglipVisionConfig
    from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil

    side = 56 if tiny else 896  # Gemma 3 4B: SigLIP-so400m at 896 px, 64x64 patches pooled to 16x16 = 256 tokens
    tower = dict(_V) if tiny else dict(hidden_size=1152, intermediate_size=4304, num_hidden_layers=27,
                                       num_attention_heads=16)
    layers = FAMILIES["gemma-3-4b"].layers
    kinds = ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(2 if tiny else layers)]
    text = _text(tiny, layers, dict(vocab_size=262_208, hidden_size=2560, intermediate_size=10_240,
                                    num_attention_heads=8, num_key_value_heads=4, head_dim=256,
                                    query_pre_attn_scalar=256, sliding_window=1024, rms_norm_eps=1e-6))
    if tiny:
        kinds, text["query_pre_attn_scalar"], text["sliding_window"] = ["sliding_attention", "full_attention"], 16, 8
    config = Gemma3Config(vision_config=SiglipVisionConfig(image_size=side, patch_size=14, **tower),
                          text_config=Gemma3TextConfig(**text, layer_types=kinds),
                          mm_tokens_per_image=4 if tiny else 256)
    return config, Gemma3ImageProcessorPil(size={"height": side, "width": side})


def _qwen(tiny: bool, three: bool) -> tuple[Any, Any]:
    import transformers
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    patch = 16 if three else 14
    if three:  # Qwen3-VL-2B
        real = dict(vocab_size=151_936, hidden_size=2048, intermediate_size=6144, num_attention_heads=16,
                    num_key_value_heads=8, head_dim=128, rms_norm_eps=1e-6, tie_word_embeddings=True,
                    rope_parameters=dict(rope_type="default", rope_theta=5_000_000.0, mrope_section=[24, 20, 20],
                                         mrope_interleaved=True))
        tower = dict(depth=24, hidden_size=1024, intermediate_size=4096, num_heads=16, out_hidden_size=2048,
                     num_position_embeddings=2304, deepstack_visual_indexes=[5, 11, 17])
        small = dict(num_position_embeddings=16, deepstack_visual_indexes=[0, 1], mrope=[4, 2, 2])
    else:  # Qwen2.5-VL-3B
        real = dict(vocab_size=151_936, hidden_size=2048, intermediate_size=11_008, num_attention_heads=16,
                    num_key_value_heads=2, rms_norm_eps=1e-6, tie_word_embeddings=True,
                    rope_parameters=dict(rope_type="default", rope_theta=1_000_000.0, mrope_section=[16, 24, 24]))
        tower = dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, out_hidden_size=2048,
                     window_size=112, fullatt_block_indexes=[7, 15, 23, 31])
        small = dict(window_size=56, fullatt_block_indexes=[1], mrope=[2, 3, 3])
    name = "qwen3-vl-2b" if three else "qwen2.5-vl-3b"
    text = _text(tiny, FAMILIES[name].layers, real)
    if tiny:
        mrope = small.pop("mrope")
        text["rope_parameters"] = dict(real["rope_parameters"], mrope_section=mrope)
        tower = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=4, out_hidden_size=64, **small)
    config_class = transformers.Qwen3VLConfig if three else transformers.Qwen2_5_VLConfig
    config = config_class(text_config=text, vision_config=dict(tower, patch_size=patch, spatial_merge_size=2,
                                                                temporal_patch_size=2),
                          tie_word_embeddings=True)
    pixels = (patch * 2) ** 2  # one image token: merge 2x2 patches; the real max_pixels are 16,384 tokens' worth
    size = {"shortest_edge": 4 * pixels, "longest_edge": (16 if tiny else 16_384) * pixels}
    images = Qwen2VLImageProcessorPil(patch_size=patch, merge_size=2, temporal_patch_size=2, size=size)
    return config, images


def _smolvlm(tiny: bool) -> tuple[Any, Any]:
    from transformers import Idefics3Config, LlamaConfig
    from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

    # SmolVLM-256M-Instruct: SigLIP-B/16 (12 layers, width 768) on 512-px tiles, pixel shuffle 4: 64 tokens a tile
    tile = 64 if tiny else 512
    tower = dict(_V) if tiny else dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                                       num_attention_heads=12)
    text = _text(tiny, FAMILIES["smolvlm-256m"].layers, dict(
        vocab_size=49_280, hidden_size=576, intermediate_size=1536, num_attention_heads=9, num_key_value_heads=3,
        head_dim=64, rms_norm_eps=1e-5, rope_theta=100_000.0, tie_word_embeddings=True))
    config = Idefics3Config(vision_config=dict(tower, image_size=tile, patch_size=16), text_config=LlamaConfig(**text),
                            scale_factor=2 if tiny else 4, image_token_id=49_190, tie_word_embeddings=True)
    return config, Idefics3ImageProcessorPil(size={"longest_edge": 2 * tile if tiny else 4 * tile},
                                             max_image_size={"longest_edge": tile})


def _llava(tiny: bool) -> tuple[Any, Any]:
    from transformers import CLIPImageProcessorPil, CLIPVisionConfig, LlamaConfig, LlavaConfig

    side = 56 if tiny else 336  # LLaVA-1.5-7B: CLIP ViT-L/14 at 336 px, 576 tokens; Vicuna-7B (Llama 2's shape)
    tower = dict(_V) if tiny else dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24,
                                       num_attention_heads=16)
    text = _text(tiny, FAMILIES["llava-1.5-7b"].layers, dict(
        vocab_size=32_064, hidden_size=4096, intermediate_size=11_008, num_attention_heads=32, num_key_value_heads=32,
        head_dim=128, rms_norm_eps=1e-5, tie_word_embeddings=False))
    config = LlavaConfig(vision_config=CLIPVisionConfig(image_size=side, patch_size=14, **tower),
                         text_config=LlamaConfig(**text), image_token_id=32_000, vision_feature_layer=-2,
                         vision_feature_select_strategy="default", tie_word_embeddings=False)
    return config, CLIPImageProcessorPil(size={"shortest_edge": side}, crop_size={"height": side, "width": side})


def _onevision(tiny: bool) -> tuple[Any, Any]:
    from transformers import LlavaOnevisionConfig, Qwen2Config, SiglipVisionConfig
    from transformers.models.llava_onevision.image_processing_pil_llava_onevision import (
        LlavaOnevisionImageProcessorPil)

    side = 28 if tiny else 384  # LLaVA-OneVision-0.5B: SigLIP-so400m at 384 px, anyres tiles up to 6x6, Qwen2-0.5B
    grid = [[side * i, side * j] for i in range(1, 7) for j in range(1, 7)]
    tower = dict(_V) if tiny else dict(hidden_size=1152, intermediate_size=4304, num_hidden_layers=26,
                                       num_attention_heads=16)
    text = _text(tiny, FAMILIES["llava-onevision-0.5b"].layers, dict(
        vocab_size=151_647, hidden_size=896, intermediate_size=4864, num_attention_heads=14, num_key_value_heads=2,
        rms_norm_eps=1e-6, rope_theta=1_000_000.0, tie_word_embeddings=True))
    config = LlavaOnevisionConfig(vision_config=SiglipVisionConfig(image_size=side, patch_size=14, **tower),
                                  text_config=Qwen2Config(**text), image_token_id=151_646, vision_feature_layer=-1,
                                  vision_feature_select_strategy="full", image_grid_pinpoints=grid,
                                  tie_word_embeddings=True)
    return config, LlavaOnevisionImageProcessorPil(size={"height": side, "width": side}, image_grid_pinpoints=grid)


FAMILIES: dict[str, VisionShape] = {s.name: s for s in (
    VisionShape("gemma-3-4b", "gemma3", 8, 34, _gemma3),
    VisionShape("qwen2.5-vl-3b", "qwen2_5_vl", 8, 36, lambda tiny: _qwen(tiny, three=False)),
    VisionShape("qwen3-vl-2b", "qwen3_vl", 8, 28, lambda tiny: _qwen(tiny, three=True)),
    VisionShape("smolvlm-256m", "idefics3", 30, 30, _smolvlm),
    VisionShape("llava-1.5-7b", "llava", 4, 32, _llava),
    VisionShape("llava-onevision-0.5b", "llava_onevision", 24, 24, _onevision),
)}


def parse_names(text: str | None) -> list[str]:
    """``all`` (or empty) -> every family; else the comma-separated names, each one of ``FAMILIES``."""
    return choose_names(text, list(FAMILIES), "vision family")


def folder_for(name: str, tiny: bool = False) -> Path:
    from engine.paths import data_dir

    return data_dir() / "cache" / "bench-vision" / f"{name}-{FORMAT}{'-tiny' if tiny else ''}"


def build_folder(name: str, tiny: bool = False, seed: int = 0) -> Path:
    """The random-weight bf16 model of family ``name`` saved (config and weights only) unless it is there."""
    from transformers import AutoModelForImageTextToText

    dest = folder_for(name, tiny)
    if (dest / "config.json").is_file():
        return dest
    config, _ = FAMILIES[name].make(tiny)
    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_config(config, dtype=torch.bfloat16).eval()
    partial = dest.with_name(dest.name + ".partial")  # renamed when whole: a killed build is never taken as built
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(partial, safe_serialization=True)
    partial.rename(dest)
    return dest


@dataclass(frozen=True)
class BenchVision:
    """What ``engine.vision.turn.encode_all``, ``engine.vision.layouts.layout_for`` and ``FastRunner`` read of a
    loaded vision model, without its processor: the whole model, its ``LanguageView``, family and precision."""

    model: Any
    language: Any
    family: Any
    precision: str


def load(folder: Path, model_type: str, precision: str) -> BenchVision:
    """``folder``'s model in the CPU's float type (bf16 where native); ``int4``: its language part quantized."""
    from transformers import AutoModelForImageTextToText

    from engine.quant.precision import device_float_name
    from engine.vision.vlm import VISION_FAMILIES, LanguageView

    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[device_float_name("cpu")]
    model = AutoModelForImageTextToText.from_pretrained(folder, dtype=dtype).eval()
    family = VISION_FAMILIES[model_type]
    language = LanguageView(model, family)
    if precision == "int4":
        from engine.quant import quantize_step

        quantize_step.native(language, "int4", "cpu", folder, None)
        model.config.tie_word_embeddings = False  # the head is now the quantized one: not to be tied back
        model._tied_weights_keys = None
    return BenchVision(model, language, family, precision)


def prompt_inputs(vision: BenchVision, images: Any, picture: Any, question: int = 16) -> dict[str, Any]:
    """``picture`` (PIL RGB) and ``question`` random text ids as the family's forward takes them (see the module
    docstring): the image processor runs here, each call, as it would in a turn."""
    config = vision.model.config
    kind = vision.family.model_type
    pixels = dict(images(images=[picture], return_tensors="pt"))
    generator = torch.Generator().manual_seed(0)
    before, after = (torch.randint(10, 1000, (n,), generator=generator).tolist() for n in (5, question))
    image = int(getattr(config, "image_token_id", None) or config.image_token_index)
    if kind in ("qwen2_5_vl", "qwen3_vl"):
        count = int(pixels["image_grid_thw"].prod()) // config.vision_config.spatial_merge_size ** 2
        block = [config.vision_start_token_id, *[image] * count, config.vision_end_token_id]
    elif kind == "gemma3":
        block = [config.boi_token_index, *[image] * config.mm_tokens_per_image, config.eoi_token_index]
    elif kind == "idefics3":
        side = config.vision_config.image_size // config.vision_config.patch_size // config.scale_factor
        block = [image] * (pixels["pixel_values"].shape[1] * side * side)
    elif kind == "llava":
        block = [image] * (config.vision_config.image_size // config.vision_config.patch_size) ** 2
    else:  # llava_onevision: anyres tiles, unpadded, a newline per row: counted by its own tower once
        block = [image] * _onevision_tokens(vision, pixels)
    ids = torch.tensor([before + block + after])
    inputs = dict(pixels, input_ids=ids, attention_mask=torch.ones_like(ids))
    if kind == "gemma3":
        inputs["token_type_ids"] = (ids == image).long()
    if kind in ("qwen2_5_vl", "qwen3_vl"):
        inputs["mm_token_type_ids"] = (ids == image).int()
    if "pixel_values" in inputs:
        inputs["pixel_values"] = inputs["pixel_values"].to(vision.model.dtype)
    return inputs


_COUNTS: dict[tuple[str, tuple[int, ...]], int] = {}


def _onevision_tokens(vision: BenchVision, pixels: dict[str, Any]) -> int:
    key = (str(vision.model.config.vision_config.image_size), tuple(pixels["image_sizes"][0].tolist()))
    if key not in _COUNTS:
        with torch.inference_mode():
            out = vision.model.model.get_image_features(pixel_values=pixels["pixel_values"].to(vision.model.dtype),
                                                        image_sizes=pixels["image_sizes"], return_dict=True)
        _COUNTS[key] = sum(int(f.shape[0]) for f in out.pooler_output)
    return _COUNTS[key]


def describe(name: str) -> dict[str, Any]:
    shape = FAMILIES[name]
    return {"family": name, "model_type": shape.model_type, "layers": shape.layers, "full_layers": shape.full_layers}


__all__ = ["FAMILIES", "VisionShape", "BenchVision", "parse_names", "folder_for", "build_folder", "load",
           "prompt_inputs", "describe", "FORMAT"]
