"""``python -m engine bench --vision [NAMES]``: what an image costs and what int4 buys, per vision-language family
(issue 44).

Per family of ``engine.bench.vision_families.FAMILIES`` (Gemma 3 4B, Qwen2.5-VL 3B, Qwen3-VL 2B, SmolVLM-256M /
Idefics3, LLaVA-1.5 7B, LLaVA-OneVision 0.5B), one after the other so only one family's models are in memory: the
random-weight model built once from the family's real config class (its real vision tower; its language part at the
real widths, heads, KV heads and vocabulary, with fewer decoder layers where the full model would not fit: Gemma 3 8 of
34, Qwen2.5-VL 8 of 36, Qwen3-VL 8 of 28, LLaVA-1.5 4 of 32; the table says so). Random weights cost what trained ones
cost (every token reads every weight, every tile runs the whole tower); their text is noise and is not looked at.

Two variants, ``bf16`` (the CPU's float where it has no bf16) and ``int4`` (the language part quantized by the
engine's own path, the tower in bf16), measured with ``reps`` repetitions alternated by ``engine.bench.core.measure``:

- ``ttft``: one 1024×768 picture and a 16-token question: the family's image processor, the vision tower and projector
  (the family's own forward up to its language model, ``engine.vision.turn.encode_all``: ``vision_encoder_s``), then
  the language part's prefill on ``FastRunner`` with the family's layout (``engine.vision.layouts``: ``prefill_s``,
  image tokens included); ``ttft_s`` is all of it, to the first token's logits.
- ``decode``: ``tokens`` greedy steps of the language part continuing that prompt (``decode_tok_s``).

The int4 ÷ bf16 decode ratio is a per-layer property (both variants read the same head and the same layers), so it
holds for the full depth; prefill (and so TTFT) scales with the layers: read it with the layer count. The prompt is
shaped by hand around the processor's pixels (``engine.bench.vision_families``'s docstring says why), so a real turn's
chat template and tokenizer are not in TTFT (milliseconds). Never asserts a speed. Owns this measurement and its table.
"""

from __future__ import annotations

import gc
import time
from typing import Any, Callable, Sequence

import numpy as np
import torch

from engine.bench import core
from engine.bench import vision_families as vf

IMAGE_SIZE = (1024, 768)
FIGURES = {"vision_encoder_s": ("s", "lower"), "prefill_s": ("s", "lower"), "ttft_s": ("s", "lower"),
           "decode_tok_s": ("tok/s", "higher")}


def sample_picture(size: tuple[int, int] = IMAGE_SIZE) -> Any:
    """A screenshot-sized picture of random pixels (PIL RGB)."""
    from PIL import Image

    return Image.fromarray(np.random.default_rng(0).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8))


def measure(name: str, tokens: int = 32, reps: int = 3, progress: Callable[[str], None] = lambda _m: None,
            tiny: bool = False, size: tuple[int, int] = IMAGE_SIZE) -> dict[str, Any]:
    """One family (see the module docstring): a JSON-ready dict. ``tiny``: the scaled-down build (the unit test)."""
    from engine.executor.fastpath import FastRunner
    from engine.vision.layouts import layout_for
    from engine.vision.turn import encode_all

    shape = vf.FAMILIES[name]
    progress(f"{name}: building the random-weight model (once)")
    folder = vf.build_folder(name, tiny)
    _, images = shape.make(tiny)
    picture = sample_picture(size)
    variants: dict[str, vf.BenchVision] = {}
    for precision in ("bf16", "int4"):
        progress(f"{name}: loading {precision}")
        variants[precision] = vf.load(folder, shape.model_type, precision)
    prefilled: dict[str, tuple[Any, torch.Tensor]] = {}  # variant -> its runner after the ttft scenario, last logits
    steps: dict[str, str] = {}  # variant -> the decode step its runner took

    def ttft(vision: vf.BenchVision) -> dict[str, Any]:
        start = time.perf_counter()
        inputs = vf.prompt_inputs(vision, images, picture)
        encoding = time.perf_counter()
        taken = encode_all(vision, _Prompt(inputs))  # type: ignore[arg-type]
        encoded = time.perf_counter()
        layout = layout_for(vision, inputs, taken)
        runner = FastRunner(vision.language)
        runner.rope_offset = 0 if layout is None else layout.delta
        ids = inputs["input_ids"][0].tolist()
        logits = [out for _, out in runner.prefill(ids, embeds=taken["embeds"][0], layout=layout)][-1]
        done = time.perf_counter()
        prefilled[vision.precision] = (runner, logits)
        image = int(getattr(vision.model.config, "image_token_id", None) or vision.model.config.image_token_index)
        return {"vision_encoder_s": encoded - encoding, "prefill_s": done - encoded, "ttft_s": done - start,
                "image_tokens": ids.count(image), "prompt_tokens": len(ids)}

    def decode(vision: vf.BenchVision) -> dict[str, Any]:
        runner, logits = prefilled.pop(vision.precision)
        # the native step reads RoPE row = position: with M-RoPE's offset the Python step runs (FastRunner)
        why = runner.native_step_reason or ("RoPE offset (M-RoPE)" if runner.rope_offset else None)
        steps[vision.precision] = "native" if why is None else f"python: {why}"
        times = []
        for _ in range(tokens):
            logits = runner.decode(int(logits.reshape(-1, logits.shape[-1])[-1].argmax()))
            times.append(time.perf_counter())
        return {"decode_tok_s": core.decode_rate(times)}

    runs = core.measure(variants, [("ttft", ttft), ("decode", decode)], reps, progress)
    result = dict(vf.describe(name), image=list(size), image_tokens=runs.runs["bf16"]["image_tokens"][0],
                  prompt_tokens=runs.runs["bf16"]["prompt_tokens"][0], tokens=tokens, reps=reps,
                  threads=torch.get_num_threads(), decode_step_int4=steps["int4"],
                  figures=core.summarise(runs.runs, FIGURES, baseline="bf16"))
    del variants, prefilled
    gc.collect()  # the next family's models take this one's memory
    return result


class _Prompt:
    """What ``encode_all`` reads of a ``VisionPrompt``: its inputs."""

    def __init__(self, inputs: dict[str, Any]) -> None:
        self.inputs = inputs


def measure_families(names: Sequence[str], tokens: int = 32, reps: int = 3,
                     progress: Callable[[str], None] = lambda _m: None, tiny: bool = False) -> dict[str, Any]:
    """Every family of ``names`` in turn: ``{"families": [measure(...), ...]}``."""
    return {"model": "random weights", "families": [measure(n, tokens, reps, progress, tiny) for n in names]}


def _fmt(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def table(result: dict[str, Any]) -> str:
    """One Markdown row per family: layers built, image tokens, bf16 and int4 medians, int4 ÷ bf16 decode, the step."""
    first = result["families"][0] if result["families"] else {}
    lines = [f"Random weights; one {first.get('image', IMAGE_SIZE)[0]}×{first.get('image', IMAGE_SIZE)[1]} image and "
             f"a 16-token question; {first.get('reps')} reps alternated, {first.get('tokens')} decode tokens, "
             f"{first.get('threads')} threads; language layers: built of the real model's",
             "", "| family | layers | image tokens | encoder s (bf16 / int4) | prefill s (bf16 / int4) | "
             "TTFT s (bf16 / int4) | decode tok/s bf16 | decode tok/s int4 | int4 ÷ bf16 decode | int4 decode step |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for row in result["families"]:
        f = row["figures"]

        def pair(key: str) -> str:
            med = f[key]["median"]
            return f"{_fmt(med.get('bf16'))} / {_fmt(med.get('int4'))}"

        decode = f["decode_tok_s"]
        lines.append(f"| {row['family']} | {row['layers']} of {row['full_layers']} | {row['image_tokens']} | "
                     f"{pair('vision_encoder_s')} | {pair('prefill_s')} | {pair('ttft_s')} | "
                     f"{_fmt(decode['median'].get('bf16'))} | {_fmt(decode['median'].get('int4'))} | "
                     f"{_fmt(decode['ratio'].get('int4'))} | {row['decode_step_int4']} |")
    return "\n".join(lines)


__all__ = ["measure", "measure_families", "table", "sample_picture", "FIGURES", "IMAGE_SIZE"]
