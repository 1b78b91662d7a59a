"""``python -m engine bench --vision``: what an image costs and what int4 buys on a vision-language model (issue 44).

The model is random-weight, built here with transformers' own Idefics3 classes in SmolVLM-256M-Instruct's shape
(``SHAPE``: a SigLIP tower of 12 layers at width 768 over 512-pixel tiles of 16-pixel patches, pixel shuffle by 4 so a
tile is 64 tokens, and SmolLM2-135M as the language model: 30 layers, width 576, 9 heads sharing 3 KV heads), with the
default model's tokenizer (SmolLM2's, SmolVLM's own) and Idefics3's image tokens added, and kept in
``<data dir>/cache/bench-vision/``. Random weights cost what trained ones cost (every token reads every weight, every
tile runs the whole tower); their text is noise and is not looked at.

Two variants of the same folder, loaded by ``engine.vision.vlm.load_vision_model``: bf16 (the CPU's float where it
has no bf16) and int4 (the language part quantized, the tower in bf16). Per variant, ``reps`` repetitions alternated
by ``engine.bench.core.measure``: one turn with one 1024×768 image (``engine.vision.turn.VisionChat``, one new token):
its TTFT split into the vision encoder and the language prefill, and the image tokens; then decode tok/s of the
language part alone after that prompt (``tokens`` greedy steps on its ``FastRunner``). Reported: medians and int4 ÷
bf16. Never asserts a speed. Owns this measurement and the folder's making.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import torch

from engine.bench import core
from engine.events import Message
from engine.inputs import LoadSpec, SamplingConfig

FORMAT = "smolvlm-256m-1"  # bump when the recipe changes: an older folder is then rebuilt
IMAGE_SIZE = (1024, 768)
# SmolVLM-256M-Instruct's numbers (its config.json and processor config); the weights are random.
SHAPE = dict(vision=dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                         image_size=512, patch_size=16),
             text=dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                       num_key_value_heads=3, head_dim=64, max_position_embeddings=8192, rms_norm_eps=1e-5,
                       rope_theta=100_000.0, tie_word_embeddings=True),
             scale_factor=4, image_seq_len=64, longest_edge=2048, tile=512)
IMAGE_TOKENS = ["<fake_token_around_image>", "<image>", "<end_of_utterance>", "<global-img>",
                *(f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7))]
# ChatML over content lists, each image part Idefics3's placeholder (its processor expands it into tiles).
TEMPLATE = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n{% for part in message['content'] %}"
            "{% if part['type'] == 'image' %}<image>{% else %}{{ part['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
            "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
FIGURES = {"vision_encoder_s": ("s", "lower"), "prefill_s": ("s", "lower"), "ttft_s": ("s", "lower"),
           "decode_tok_s": ("tok/s", "higher")}


def bench_folder(name: str = FORMAT) -> Path:
    from engine.paths import data_dir

    return data_dir() / "cache" / "bench-vision" / name


def build_folder(dest: Path, shape: dict[str, Any] = SHAPE, tokenizer_folder: Path | None = None,
                 seed: int = 0) -> Path:
    """Write the random-weight folder of ``shape`` (SmolVLM-256M's by default; model, processor, tokenizer) to
    ``dest`` unless it is there; the tokenizer is ``tokenizer_folder``'s (default: the default model's)."""
    if (dest / "config.json").is_file():
        return dest
    from transformers import (AutoTokenizer, Idefics3Config, Idefics3ForConditionalGeneration, Idefics3Processor,
                              LlamaConfig)
    from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

    from engine.models.fetch import find_default_model

    source = tokenizer_folder or find_default_model()
    if source is None:
        raise FileNotFoundError("the vision bench borrows the default model's tokenizer: run `python -m engine fetch`")
    tok = AutoTokenizer.from_pretrained(source, local_files_only=True)
    tok.add_special_tokens({"additional_special_tokens": IMAGE_TOKENS})
    tok.chat_template = TEMPLATE
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    text = LlamaConfig(vocab_size=len(tok), bos_token_id=tok.bos_token_id, eos_token_id=eos, pad_token_id=eos,
                       **shape["text"])
    config = Idefics3Config(vision_config=shape["vision"], text_config=text, scale_factor=shape["scale_factor"],
                            image_token_id=tok.convert_tokens_to_ids("<image>"), tie_word_embeddings=True)
    torch.manual_seed(seed)
    model = Idefics3ForConditionalGeneration(config).to(torch.bfloat16).eval()
    images = Idefics3ImageProcessorPil(size={"longest_edge": shape["longest_edge"]},
                                       max_image_size={"longest_edge": shape["tile"]})
    processor = Idefics3Processor(image_processor=images, tokenizer=tok, image_seq_len=shape["image_seq_len"],
                                  chat_template=TEMPLATE)
    dest.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(dest, safe_serialization=True)
    processor.save_pretrained(dest)
    return dest


def sample_image(size: tuple[int, int] = IMAGE_SIZE) -> Any:
    """A screenshot-sized picture of random pixels, read as the user's would be."""
    import io

    import numpy as np
    from PIL import Image

    from engine.vision.image_input import read_image

    pixels = np.random.default_rng(0).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "PNG")
    return read_image(buffer.getvalue(), "bench.png")


def measure(tokens: int = 64, reps: int = 3, progress: Callable[[str], None] = lambda _m: None,
            shape: dict[str, Any] = SHAPE, name: str = FORMAT, tokenizer_folder: Path | None = None) -> dict[str, Any]:
    """Build or reuse the folder of ``shape`` (kept under ``name``), load both variants, measure (see the module
    docstring): a JSON-ready dict."""
    from engine.executor.fastpath import FastRunner
    from engine.vision.turn import VisionChat, build_prompt, encode
    from engine.vision.vlm import load_vision_model

    progress("building the random-weight SmolVLM-256M-shaped model (once)")
    folder = build_folder(bench_folder(name), shape, tokenizer_folder)
    image = sample_image()
    question = [Message("user", "What does this screenshot show?")]
    variants: dict[str, Any] = {}
    for name in ("bf16", "int4"):
        progress(f"loading {name}")
        variants[name] = load_vision_model(LoadSpec(model=str(folder), precision=name, device="cpu"))
    one = SamplingConfig(temperature=0, repetition_penalty=1.0, max_new_tokens=1)

    def ttft(vision: Any) -> dict[str, Any]:
        done = list(VisionChat(vision).generate(question, {0: [image]}, one))[-1]
        if done.error:
            raise RuntimeError(done.error)
        m = done.metrics
        return {"vision_encoder_s": m.vision_encoder_s, "prefill_s": m.prefill_s, "ttft_s": m.ttft_s,
                "image_tokens": sum(m.image_tokens), "prompt_tokens": m.prompt_tokens}

    prompts = {name: build_prompt(vision, question, {0: [image]}) for name, vision in variants.items()}
    embeds = {name: encode(vision, prompts[name]) for name, vision in variants.items()}

    def decode(vision: Any) -> dict[str, Any]:
        name = vision.precision
        runner = FastRunner(vision.language)
        logits = [out for _, out in runner.prefill(list(prompts[name].ids), embeds=embeds[name])][-1]
        times = []
        for _ in range(tokens):
            logits = runner.decode(int(logits.argmax()))
            times.append(time.perf_counter())
        return {"decode_tok_s": core.decode_rate(times)}

    runs = core.measure({name: variants[name] for name in variants}, [("ttft", ttft), ("decode", decode)], reps,
                        progress)
    facts = variants["int4"].loaded.facts
    model = "random-weight SmolVLM-256M-Instruct shape" if shape is SHAPE else f"random-weight {name}"
    return {"model": f"{model} (Idefics3 classes)", "image": list(IMAGE_SIZE),
            "image_tokens": runs.runs["bf16"]["image_tokens"][0], "prompt_tokens": runs.runs["bf16"]["prompt_tokens"][0],
            "tokens": tokens, "reps": reps, "threads": torch.get_num_threads(), "decode_step_int4": facts.decode_step,
            "figures": core.summarise(runs.runs, FIGURES, baseline="bf16")}


def table(result: dict[str, Any]) -> str:
    """The result as a Markdown table: each figure's bf16 and int4 medians and int4 ÷ bf16."""
    lines = [f"{result['model']}; one {result['image'][0]}×{result['image'][1]} image = {result['image_tokens']} "
             f"image tokens of a {result['prompt_tokens']}-token prompt; {result['reps']} reps, "
             f"{result['threads']} threads; int4 decode step: {result['decode_step_int4']}",
             "", "| figure | bf16 | int4 | int4 ÷ bf16 |", "|---|---|---|---|"]
    for name, figure in result["figures"].items():
        med, unit = figure["median"], figure["unit"]
        cells = [f"{med[v]:.3f} {unit}" if med.get(v) is not None else "n/a" for v in ("bf16", "int4")]
        quotient = figure["ratio"].get("int4")
        lines.append(f"| {name} | {cells[0]} | {cells[1]} | {'n/a' if quotient is None else f'{quotient:.2f}'} |")
    return "\n".join(lines)


__all__ = ["measure", "table", "build_folder", "bench_folder", "sample_image", "SHAPE"]
