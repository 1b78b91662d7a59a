"""engine/vision/turn.py (and plain_turn.py) on random-weight vision-language models of each family
(tests/helpers/vision_models.py; the weights are random): the language part's logits on the fast path, prefilled from
the family's own merged embeddings and decoded from ids, against transformers' own forward of the whole model on the
same image and prompt: equal at fp32, within bf16 rounding at bf16, at prefill and over DECODE_STEPS greedy steps. Then
a turn's events and figures, the follow-up that reuses the cached image, and Gemma 3's turn with its image blocks
(engine/vision/layouts.py; Qwen-VL's are in test_layouts.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import DynamicCache

from engine.events import Finished, ImagesEncoded, Message, PrefillProgress, Started, Token
from engine.executor.fastpath import FastRunner
from engine.inputs import LoadSpec, SamplingConfig
from engine.vision.layouts import layout_for
from engine.vision.turn import VisionChat, build_prompt, encode
from engine.vision.vlm import load_vision_model
from tests.helpers.reference_forward import check_bf16_rounding, check_fp32_equal, max_delta
from tests.helpers.vision_models import build_vision_family, random_image

DECODE_STEPS = 12
FAST = ("llava", "idefics3", "gemma3")
GREEDY = SamplingConfig(temperature=0, repetition_penalty=1.0, max_new_tokens=DECODE_STEPS)
QUESTION = [Message("user", "What is in this picture?")]


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("vision-families")
    return {name: build_vision_family(root / name, name) for name in FAST}


def _load(folder: Path, precision: str):
    return load_vision_model(LoadSpec(model=str(folder), precision=precision, device="cpu"))


@torch.inference_mode()
def _reference(vision, prompt, steps: int) -> tuple[list[torch.Tensor], list[int]]:
    """transformers' own forward of the whole model (vision tower, merge, language model) over its DynamicCache."""
    cache = DynamicCache(config=vision.model.config.get_text_config())
    logits = [vision.model(**prompt.inputs, cache=cache, use_cache=True).logits[0, -1]]
    tokens = []
    for _ in range(steps):
        tokens.append(int(logits[-1].argmax()))
        logits.append(vision.model(input_ids=torch.tensor([[tokens[-1]]]), cache=cache, use_cache=True).logits[0, -1])
    return logits, tokens


def _fast(vision, prompt, tokens: list[int], chunk: int, **options) -> list[torch.Tensor]:
    runner = FastRunner(vision.language, **options)
    embeds = encode(vision, prompt)
    layout = layout_for(vision, prompt.inputs)  # Gemma 3's image blocks (engine/vision/layouts.py)
    runner.rope_offset = 0 if layout is None else layout.delta
    got = [[logits for _, logits in runner.prefill(list(prompt.ids), chunk=chunk, embeds=embeds, layout=layout)][-1][0]]
    return got + [runner.decode(token)[0] for token in tokens]


@pytest.mark.parametrize("family", FAST)
def test_fp32_logits_equal_transformers_with_the_image(family_dirs, family):
    vision = _load(family_dirs[family], "fp32")
    prompt = build_prompt(vision, QUESTION, {0: [random_image()]})
    assert sum(prompt.image_tokens) == prompt.ids.count(vision.model.config.image_token_id) > 0
    ref, tokens = _reference(vision, prompt, DECODE_STEPS)
    got = _fast(vision, prompt, tokens, chunk=7)  # chunks that cut through the image's tokens
    check_fp32_equal(ref, got, 5e-5, family)
    prefill, decode = max_delta(ref, got)
    print(f"{family} fp32: image tokens {prompt.image_tokens}, prompt {len(prompt.ids)}, max |dlogit| prefill "
          f"{prefill:.2e}, decode {decode:.2e}")


@pytest.mark.parametrize("family", FAST)
def test_bf16_logits_stay_within_rounding_of_transformers(family_dirs, family):
    vision = _load(family_dirs[family], "bf16")
    prompt = build_prompt(vision, QUESTION, {0: [random_image(seed=1)]})
    ref, tokens = _reference(vision, prompt, DECODE_STEPS)
    print(check_bf16_rounding(ref, _fast(vision, prompt, tokens, chunk=256, upcast_prefill=False), family))


@pytest.mark.parametrize("family", FAST)
def test_int4_language_part_equals_transformers_forward_over_the_same_modules(home, family_dirs, family):
    """No float reference exists for int4: the fast path must compute what transformers' forward computes over the
    same quantized modules (the text families' contract), on the same merged image embeddings."""
    vision = _load(family_dirs[family], "int4")
    prompt = build_prompt(vision, QUESTION, {0: [random_image(seed=2)]})
    ref, tokens = _reference(vision, prompt, DECODE_STEPS)
    got = _fast(vision, prompt, tokens, chunk=256)
    same = sum(int(a.argmax()) == int(b.argmax()) for a, b in zip(ref, got)) / len(ref)
    assert same >= 0.9, same
    prefill, decode = max_delta(ref, got)
    print(f"{family} int4: greedy {same:.2f}, max |dlogit| prefill {prefill:.2e}, decode {decode:.2e}")


def test_a_turn_streams_the_image_figures_and_transformers_greedy_text(family_dirs):
    vision = _load(family_dirs["llava"], "fp32")
    image = random_image(seed=3)
    events = list(VisionChat(vision).generate(QUESTION, {0: [image]}, GREEDY))
    kinds = [type(event) for event in events]
    assert kinds[:3] == [Started, ImagesEncoded, PrefillProgress] and kinds[-1] is Finished
    encoded, done = events[1], events[-1]
    assert done.reason == "length" and done.error is None
    assert encoded.image_tokens == done.metrics.image_tokens == (16,) and encoded.reused_images == 0
    assert encoded.encoder_s > 0 and done.metrics.vision_encoder_s == encoded.encoder_s
    assert done.metrics.prefill_s > 0 and done.metrics.prompt_tokens == events[0].prompt_tokens
    assert done.metrics.to_dict()["image_tokens"] == [16]
    # the KV cache holds the image's tokens like any other: measured = formula (fp32, no GQA savings hidden)
    assert done.metrics.kv_cache_bytes == done.metrics.kv_cache_bytes_formula > 0
    assert done.metrics.peak_memory_bytes > 0
    tokens = [event.token_id for event in events if isinstance(event, Token)]
    prompt = build_prompt(vision, QUESTION, {0: [image]})
    with torch.inference_mode():
        want = vision.model.generate(**prompt.inputs, max_new_tokens=DECODE_STEPS, do_sample=False)
    assert tokens == want[0, len(prompt.ids):].tolist()


def test_a_follow_up_reuses_the_cached_image_and_answers_as_a_fresh_turn(family_dirs):
    vision = _load(family_dirs["llava"], "fp32")
    image = random_image(seed=4)
    chat = VisionChat(vision)
    first = list(chat.generate(QUESTION, {0: [image]}, GREEDY))[-1]
    follow = [*QUESTION, Message("assistant", first.text), Message("user", "And the colours?")]
    events = list(chat.generate(follow, {0: [image]}, GREEDY))
    encoded, done = next(e for e in events if isinstance(e, ImagesEncoded)), events[-1]
    assert encoded.reused_images == 1 and done.metrics.vision_encoder_s is None  # not encoded again
    prompt = build_prompt(vision, follow, {0: [image]})
    assert done.metrics.reused_tokens > prompt.image_starts[0] + 16  # the image's tokens came from the cache
    fresh = list(VisionChat(vision).generate(follow, {0: [image]}, GREEDY))[-1]
    assert done.text == fresh.text
    # another picture at the same place: the cache is kept only up to where that image starts
    other = list(chat.generate(follow, {0: [random_image(seed=5)]}, GREEDY))
    again = next(e for e in other if isinstance(e, ImagesEncoded))
    assert again.reused_images == 0 and other[0].reused_tokens == prompt.image_starts[0]
    assert other[-1].metrics.vision_encoder_s is not None
    # a cache that ends inside the image (a prefill cut there) keeps those rows and encodes the image again
    chat._runner.crop(prompt.image_starts[0] + 5)
    cut = list(chat.generate(follow, {0: [random_image(seed=5)]}, GREEDY))
    assert cut[0].reused_tokens == prompt.image_starts[0] + 5 and cut[1].reused_images == 0
    assert cut[-1].text == other[-1].text


def test_a_turn_without_images_reads_the_token_rows(family_dirs):
    """No image: nothing is encoded, the prompt's own embedding rows are prefilled, and the reply is generate()'s."""
    vision = _load(family_dirs["idefics3"], "fp32")
    events = list(VisionChat(vision).generate(QUESTION, None, GREEDY))
    encoded, done = next(e for e in events if isinstance(e, ImagesEncoded)), events[-1]
    assert encoded.image_tokens == () and done.metrics.vision_encoder_s is None and done.error is None
    prompt = build_prompt(vision, QUESTION, {})
    with torch.inference_mode():
        want = vision.model.generate(**prompt.inputs, max_new_tokens=DECODE_STEPS, do_sample=False)
    assert [e.token_id for e in events if isinstance(e, Token)] == want[0, len(prompt.ids):].tolist()


def test_several_images_are_counted_one_by_one(family_dirs):
    vision = _load(family_dirs["idefics3"], "fp32")
    wide, small = random_image(80, 40, seed=6), random_image(20, 20, seed=7)
    prompt = build_prompt(vision, QUESTION, {0: [wide, small]})
    alone = [build_prompt(vision, QUESTION, {0: [image]}).image_tokens[0] for image in (wide, small)]
    assert list(prompt.image_tokens) == alone and sum(alone) == prompt.ids.count(vision.model.config.image_token_id)
    assert prompt.image_starts[0] < prompt.image_starts[1]


def test_an_image_on_an_assistant_message_is_one_line(family_dirs):
    vision = _load(family_dirs["llava"], "fp32")
    messages = [*QUESTION, Message("assistant", "a cat"), Message("user", "sure?")]
    done = list(VisionChat(vision).generate(messages, {1: [random_image()]}, GREEDY))[-1]
    assert done.reason == "error" and "images go with the user's messages" in done.error and "\n" not in done.error


def test_gemma3_turn_runs_on_the_fast_path_with_its_image_blocks(family_dirs):
    """Gemma 3 attends both ways among an image's tokens in prefill (engine/vision/layouts.py ImageBlocks): the turn
    runs on the fast path, its greedy text generate()'s, and a prefill chunk never ends inside the image."""
    vision = _load(family_dirs["gemma3"], "fp32")
    assert vision.loaded.facts.runner == "fast"
    image = random_image(seed=8)
    chat = VisionChat(vision)
    events = list(chat.generate(QUESTION, {0: [image]}, GREEDY))
    done = events[-1]
    assert done.reason == "length" and done.metrics.image_tokens == (4,) and done.metrics.vision_encoder_s > 0
    prompt = build_prompt(vision, QUESTION, {0: [image]})
    with torch.inference_mode():
        want = vision.model.generate(**prompt.inputs, max_new_tokens=DECODE_STEPS, do_sample=False)
    assert [e.token_id for e in events if isinstance(e, Token)] == want[0, len(prompt.ids):].tolist()
    # a cache cut inside the image is cut back to its start: its first rows were computed seeing its last
    chat._runner.crop(prompt.image_starts[0] + 2)
    again = list(chat.generate(QUESTION, {0: [image]}, GREEDY))
    assert again[0].reused_tokens == prompt.image_starts[0] and again[-1].text == done.text


def test_a_language_part_off_the_fast_path_runs_transformers_forward(family_dirs):
    """plain_turn.py: where the fast step refuses the language model (facts.runner "plain"), the turn is transformers'
    own forward over its cache: greedy text generate()'s, with the same figures."""
    import dataclasses

    vision = _load(family_dirs["llava"], "fp32")
    facts = dataclasses.replace(vision.loaded.facts, runner="plain", runner_reason="refused for this test")
    vision = dataclasses.replace(vision, loaded=dataclasses.replace(vision.loaded, facts=facts))
    image = random_image(seed=9)
    events = list(VisionChat(vision).generate(QUESTION, {0: [image]}, GREEDY))
    done = events[-1]
    assert done.reason == "length" and done.metrics.image_tokens == (16,) and done.metrics.vision_encoder_s > 0
    assert done.metrics.kv_cache_bytes > 0 and done.metrics.prefill_s > 0
    prompt = build_prompt(vision, QUESTION, {0: [image]})
    with torch.inference_mode():
        want = vision.model.generate(**prompt.inputs, max_new_tokens=DECODE_STEPS, do_sample=False)
    assert [e.token_id for e in events if isinstance(e, Token)] == want[0, len(prompt.ids):].tolist()
