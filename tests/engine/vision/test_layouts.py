"""engine/vision/layouts.py: Gemma 3's image blocks (the mask they add, chunk ends moved out of them), and Qwen2.5-VL's
and Qwen3-VL's M-RoPE (Qwen3-VL's deepstack features too) on the fast path against transformers' own forward of
random-weight models (the families' real config classes, scaled down; the weights are random). Their processors need
torchvision, which is not a dependency, so the inputs are shaped by hand from the config (pixel_values,
image_grid_thw, mm_token_type_ids), as the processor would give them. Prefill logits and DECODE_STEPS greedy steps:
equal at fp32, within bf16 rounding at bf16; int4 the same greedy tokens as transformers' forward over the same int4
modules. (Gemma 3's whole turn is in test_turn.py, its processor needing no torchvision.)"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from transformers import DynamicCache

from engine.executor.fastpath import FastRunner
from engine.vision.layouts import ImageBlocks, image_blocks, layout_for
from engine.vision.turn import encode, encode_all
from engine.vision.vlm import VISION_FAMILIES, LanguageView
from tests.helpers.reference_forward import check_bf16_rounding, check_fp32_equal, max_delta

DECODE_STEPS = 12
IMAGE, START, END = 120, 121, 122  # the tiny vocabulary's image placeholder and its brackets
GRIDS = ((1, 4, 6), (1, 2, 2))  # two images: (time, height, width) in patches, merged 2x2 into 6 and 1 tokens


def test_image_blocks_are_the_runs_of_image_tokens():
    blocks = image_blocks(torch.tensor([0, 1, 1, 0, 0, 1, 1, 1, 0]))
    assert blocks == ImageBlocks(((1, 3), (5, 8)))
    assert blocks.chunk_end(0, 2) == 3 and blocks.chunk_end(0, 3) == 3 and blocks.chunk_end(3, 6) == 8
    extra = blocks.allowed(2, 7, torch.device("cpu"))  # rows 2..6, keys 0..6
    assert extra.shape == (5, 7) and extra[0, 1] and extra[0, 2] and not extra[0, 3]  # row 2: its block, both ways
    assert extra[3, 5] and extra[3, 6] and not extra[1].any()  # row 5 sees 6 (later in its block); row 3 no block
    assert image_blocks(torch.zeros(4)) is None


QWEN = ("qwen2_5_vl", "qwen3_vl")
TEXT = dict(vocab_size=128, bos_token_id=1, eos_token_id=2, pad_token_id=2, hidden_size=64, intermediate_size=128,
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
            rms_norm_eps=1e-5)
VISION = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=4, out_hidden_size=64, patch_size=14,
              spatial_merge_size=2, temporal_patch_size=2)


def _qwen(family: str, dtype: torch.dtype, seed: int = 0):
    """A random-weight Qwen2.5-VL or Qwen3-VL from its real config classes, scaled down (Qwen3-VL: deepstack features
    from both tower layers, added after the first two language layers)."""
    import transformers

    names = {"qwen2_5_vl": ("Qwen2_5_VLConfig", "Qwen2_5_VLForConditionalGeneration"),
             "qwen3_vl": ("Qwen3VLConfig", "Qwen3VLForConditionalGeneration")}[family]
    if not all(hasattr(transformers, name) for name in names):
        pytest.skip(f"this transformers has no {family}")
    config_class, model_class = (getattr(transformers, name) for name in names)
    if family == "qwen2_5_vl":
        text = dict(TEXT, rope_parameters=dict(rope_type="default", rope_theta=10000.0, mrope_section=[2, 3, 3]))
        vision = dict(VISION, window_size=56, fullatt_block_indexes=[1])
    else:  # interleaved sections (t h w t h w ...), q/k norms, a learned position table in the tower
        text = dict(TEXT, head_dim=16, rope_parameters=dict(rope_type="default", rope_theta=10000.0,
                                                             mrope_section=[4, 2, 2]))
        vision = dict(VISION, num_position_embeddings=16, deepstack_visual_indexes=[0, 1])
    config = config_class(text_config=text, vision_config=vision, image_token_id=IMAGE, vision_start_token_id=START,
                          vision_end_token_id=END, tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = model_class(config).eval()
    with torch.no_grad():  # norms and biases randomised too: their defaults would hide a step that skipped them
        for key, param in model.named_parameters():
            if key.endswith("bias") or "norm" in key:
                param.add_(torch.randn_like(param) * 0.5)
    return model.to(dtype)


def _inputs(model, seed: int = 0) -> dict[str, torch.Tensor]:
    """Text, an image, text, a second image, text: ids, token types and pixels as Qwen2.5-VL's processor shapes them
    (one row of C·T·P·P values per patch; merge² patches per image token)."""
    generator = torch.Generator().manual_seed(seed)
    merge = model.config.vision_config.spatial_merge_size
    ids: list[int] = torch.randint(0, 100, (9,), generator=generator).tolist()
    for t, h, w in GRIDS:
        text = torch.randint(0, 100, (5,), generator=generator).tolist()
        ids += [START, *[IMAGE] * (t * h * w // merge ** 2), END, *text]
    vision = model.config.vision_config
    patches = sum(t * h * w for t, h, w in GRIDS)
    width = vision.in_channels * vision.temporal_patch_size * vision.patch_size ** 2
    return dict(input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                mm_token_type_ids=(torch.tensor([ids]) == IMAGE).int(),
                pixel_values=torch.randn(patches, width, generator=generator).to(model.dtype),
                image_grid_thw=torch.tensor(GRIDS))


@torch.inference_mode()
def _reference(model, inputs, steps: int) -> tuple[list[torch.Tensor], list[int]]:
    cache = DynamicCache(config=model.config.get_text_config())
    model.model.rope_deltas = None
    logits = [model(**inputs, cache=cache, use_cache=True).logits[0, -1]]
    tokens = []
    for _ in range(steps):
        tokens.append(int(logits[-1].argmax()))
        logits.append(model(input_ids=torch.tensor([[tokens[-1]]]), cache=cache, use_cache=True).logits[0, -1])
    return logits, tokens


def _vision(model, family: str) -> SimpleNamespace:
    """What engine/vision/layouts.py and turn.py's encode read of a VisionModel (no processor: no torchvision)."""
    kind = VISION_FAMILIES[family]
    return SimpleNamespace(model=model, language=LanguageView(model, kind), family=kind)


def _fast(model, family: str, inputs, tokens: list[int], chunk: int, **options) -> list[torch.Tensor]:
    vision = _vision(model, family)
    runner = FastRunner(vision.language, **options)
    taken = encode_all(vision, SimpleNamespace(inputs=inputs))
    layout = layout_for(vision, inputs, taken)
    assert layout is not None and layout.delta < 0  # the images take fewer positions than tokens
    assert len(layout.deepstack) == (2 if family == "qwen3_vl" else 0)
    runner.rope_offset = layout.delta
    ids = inputs["input_ids"][0].tolist()
    got = [[logits for _, logits in runner.prefill(ids, chunk=chunk, embeds=taken["embeds"][0],
                                                    layout=layout)][-1][0]]
    return got + [runner.decode(token)[0] for token in tokens]


@pytest.mark.parametrize("family", QWEN)
def test_fp32_logits_equal_transformers_with_two_images(family):
    model = _qwen(family, torch.float32)
    inputs = _inputs(model)
    ref, tokens = _reference(model, inputs, DECODE_STEPS)
    got = _fast(model, family, inputs, tokens, chunk=5)  # chunks that cut through the images' tokens
    check_fp32_equal(ref, got, 5e-5, family)
    prefill, decode = max_delta(ref, got)
    print(f"{family} fp32: prompt {inputs['input_ids'].shape[1]}, max |dlogit| prefill {prefill:.2e}, "
          f"decode {decode:.2e}")


@pytest.mark.parametrize("family", QWEN)
def test_without_the_layout_the_logits_would_differ(family):
    """The 3-D positions (and Qwen3-VL's deepstack) matter here: without them the same embeddings give other logits."""
    model = _qwen(family, torch.float32)
    inputs = _inputs(model)
    ref, _ = _reference(model, inputs, 0)
    vision = _vision(model, family)
    runner = FastRunner(vision.language)
    ids = inputs["input_ids"][0].tolist()
    plain = [logits for _, logits in runner.prefill(ids, embeds=encode(vision, SimpleNamespace(inputs=inputs)))][-1][0]
    assert (plain - ref[0]).abs().max() > 1e-3


@pytest.mark.parametrize("family", QWEN)
def test_bf16_logits_stay_within_rounding_of_transformers(family):
    model = _qwen(family, torch.bfloat16)
    inputs = _inputs(model, seed=1)
    ref, tokens = _reference(model, inputs, DECODE_STEPS)
    print(check_bf16_rounding(ref, _fast(model, family, inputs, tokens, chunk=256, upcast_prefill=False), family))


@pytest.mark.parametrize("family", QWEN)
def test_int4_language_part_equals_transformers_forward_over_the_same_modules(family):
    from engine.quant.quant import quantize_model

    model = _qwen(family, torch.float32)
    quantize_model(LanguageView(model, VISION_FAMILIES[family]), "int4")
    inputs = _inputs(model, seed=2)
    ref, tokens = _reference(model, inputs, DECODE_STEPS)
    got = _fast(model, family, inputs, tokens, chunk=256)
    same = sum(int(a.argmax()) == int(b.argmax()) for a, b in zip(ref, got)) / len(ref)
    assert same >= 0.9, same
    prefill, decode = max_delta(ref, got)
    print(f"{family} int4: greedy {same:.2f}, max |dlogit| prefill {prefill:.2e}, decode {decode:.2e}")
