"""Random-weight vision-language models of each family, saved with a processor, for the exactness tests
(tests/engine/vision/): the families' real transformers config and processor classes, scaled down (a vision tower of
two layers at 28-56 pixels, a language model of two layers), with the tiny tokenizer and the family's image tokens
added. ``build_vision_family(folder, name)`` writes an ordinary Hugging Face folder the engine loads like any model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from transformers import GenerationConfig

from tests.helpers.tiny_model import build_tiny_tokenizer

# A ChatML template over content lists, the image placeholder where the message has an image part.
TEMPLATE = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
            "{{ message['content'] }}{% else %}{% for part in message['content'] %}{% if part['type'] == 'image' %}"
            "<image>{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
            "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")

TEXT = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            head_dim=16, max_position_embeddings=1024, rms_norm_eps=1e-5)
VISION = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4)
# LLaVA-OneVision, SmolVLM and Qwen2.5-VL / Qwen3-VL are left out: their processors hold a video processor, which
# transformers builds only with torchvision (not a dependency).
FAMILIES = ("llava", "idefics3", "gemma3")
GEMMA3_TOKENS = {"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>", "image_token": "<image_soft_token>"}
IDEFICS3_TOKENS = ["<fake_token_around_image>", "<image>", "<end_of_utterance>", "<global-img>",
                   *(f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7))]


def _tokenizer(extra: list[str], named: dict[str, str] | None = None) -> Any:
    from transformers import PreTrainedTokenizerFast

    tok = build_tiny_tokenizer()
    tok.add_special_tokens({"additional_special_tokens": extra})
    if named:  # Gemma 3's processor reads its image tokens by name (tokenizer.boi_token ...)
        tok = PreTrainedTokenizerFast(tokenizer_object=tok.backend_tokenizer, bos_token="<|im_start|>",
                                      eos_token="<|im_end|>", unk_token="<|endoftext|>", pad_token="<|im_end|>",
                                      extra_special_tokens=named)
    tok.chat_template = TEMPLATE
    return tok


def _llava(tok: Any, text: Any) -> tuple[Any, Any]:
    from transformers import (CLIPImageProcessorPil, CLIPVisionConfig, LlavaConfig, LlavaForConditionalGeneration,
                              LlavaProcessor)

    config = LlavaConfig(vision_config=CLIPVisionConfig(image_size=56, patch_size=14, **VISION), text_config=text,
                         image_token_id=tok.convert_tokens_to_ids("<image>"), vision_feature_layer=-2,
                         vision_feature_select_strategy="default")
    images = CLIPImageProcessorPil(size={"shortest_edge": 56}, crop_size={"height": 56, "width": 56})
    return LlavaForConditionalGeneration(config), LlavaProcessor(
        image_processor=images, tokenizer=tok, patch_size=14, vision_feature_select_strategy="default",
        num_additional_image_tokens=1, image_token="<image>", chat_template=TEMPLATE)  # CLIP's class token


def _llava_onevision(tok: Any, text: Any) -> tuple[Any, Any]:
    from transformers import (LlavaOnevisionConfig, LlavaOnevisionForConditionalGeneration, LlavaOnevisionProcessor,
                              SiglipVisionConfig)
    from transformers.models.llava_onevision.image_processing_pil_llava_onevision import (
        LlavaOnevisionImageProcessorPil)

    grid = [[28, 28], [28, 56], [56, 28], [56, 56]]
    config = LlavaOnevisionConfig(vision_config=SiglipVisionConfig(image_size=28, patch_size=14, **VISION),
                                  text_config=text, image_token_id=tok.convert_tokens_to_ids("<image>"),
                                  vision_feature_layer=-1, vision_feature_select_strategy="full",
                                  image_grid_pinpoints=grid)
    images = LlavaOnevisionImageProcessorPil(size={"height": 28, "width": 28}, image_grid_pinpoints=grid)
    return LlavaOnevisionForConditionalGeneration(config), LlavaOnevisionProcessor(
        image_processor=images, tokenizer=tok, num_image_tokens=4, vision_feature_select_strategy="full",
        image_token="<image>", chat_template=TEMPLATE)


def _idefics3(tok: Any, text: Any) -> tuple[Any, Any]:
    from transformers import Idefics3Config, Idefics3ForConditionalGeneration, Idefics3Processor
    from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

    config = Idefics3Config(vision_config=dict(image_size=28, patch_size=14, **VISION), text_config=text,
                            image_token_id=tok.convert_tokens_to_ids("<image>"), scale_factor=2)
    images = Idefics3ImageProcessorPil(size={"longest_edge": 56}, max_image_size={"longest_edge": 28})
    return Idefics3ForConditionalGeneration(config), Idefics3Processor(
        image_processor=images, tokenizer=tok, image_seq_len=1, chat_template=TEMPLATE)


def _gemma3(tok: Any, text: Any) -> tuple[Any, Any]:
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration, Gemma3Processor, SiglipVisionConfig
    from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil

    config = Gemma3Config(vision_config=SiglipVisionConfig(image_size=56, patch_size=14, **VISION), text_config=text,
                          mm_tokens_per_image=4, boi_token_index=tok.boi_token_id, eoi_token_index=tok.eoi_token_id,
                          image_token_index=tok.image_token_id)
    template = TEMPLATE.replace("<image>", "<start_of_image>")
    tok.chat_template = template
    images = Gemma3ImageProcessorPil(size={"height": 56, "width": 56})
    return Gemma3ForConditionalGeneration(config), Gemma3Processor(
        image_processor=images, tokenizer=tok, image_seq_length=4, chat_template=template)


def build_vision_family(folder: Path, name: str, seed: int = 0) -> Path:
    """Save a random-weight ``name`` model (one of ``FAMILIES``) and its processor in ``folder``; norm weights and
    biases randomised too (their defaults would hide a step that skipped them)."""
    from transformers import Gemma3TextConfig, LlamaConfig, Qwen2Config

    folder.mkdir(parents=True, exist_ok=True)
    tok = _tokenizer(IDEFICS3_TOKENS if name == "idefics3" else list(GEMMA3_TOKENS.values()) if name == "gemma3"
                     else ["<image>"], GEMMA3_TOKENS if name == "gemma3" else None)
    bos, eos = tok.convert_tokens_to_ids("<|im_start|>"), tok.convert_tokens_to_ids("<|im_end|>")
    special = dict(vocab_size=len(tok), bos_token_id=bos, eos_token_id=eos, pad_token_id=eos)
    if name == "gemma3":
        # one sliding and one global layer: the global one lets the image reach the prompt's last token
        text = Gemma3TextConfig(**special, **TEXT, sliding_window=8, query_pre_attn_scalar=16,
                                layer_types=["sliding_attention", "full_attention"])
    else:
        text = (Qwen2Config if name == "llava_onevision" else LlamaConfig)(**special, **TEXT)
    torch.manual_seed(seed)
    model, processor = {"llava": _llava, "llava_onevision": _llava_onevision, "idefics3": _idefics3,
                        "gemma3": _gemma3}[name](tok, text)
    model = model.eval()
    with torch.no_grad():
        for key, param in model.named_parameters():
            if key.endswith("bias") or "norm" in key:
                param.add_(torch.randn_like(param) * 0.5)
    model.generation_config = GenerationConfig(bos_token_id=bos, eos_token_id=eos, pad_token_id=eos)
    model.save_pretrained(folder, safe_serialization=True)
    processor.save_pretrained(folder)
    return folder


def random_image(width: int = 80, height: int = 60, seed: int = 0) -> Any:
    """A PNG of random pixels read as the user's image would be (``engine.vision.image_input.read_image``)."""
    import io

    import numpy as np
    from PIL import Image

    from engine.vision.image_input import read_image

    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "PNG")
    return read_image(buffer.getvalue(), f"random-{seed}.png")
