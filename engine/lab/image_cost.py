"""The lab's "What an image costs" experiment (issue 44): the time to first token, split into the vision encoder and
the language prefill, and the KV cache's bytes, against the image's resolution, on a vision-language model.

One question ("Describe this picture.") with one picture of random pixels at each size in ``SIZES_FULL`` (or
``SIZES_QUICK``), a turn of ``engine.vision.turn.VisionChat`` with one greedy token, its cache emptied before each so
nothing is reused. How many tokens an image becomes is the processor's choice: a fixed count for LLaVA-1.5 (one
resized square); tiles plus a global view for Idefics3 / SmolVLM, after the longer side is resized to the processor's
``longest_edge`` up or down (so the count follows the aspect ratio); a grid among pinpoints for LLaVA-OneVision, and
one that grows with the pixels for Qwen-VL. The table gives, per size, the image tokens and the medians over ``reps`` turns of the encoder
time, the prefill time, the TTFT, and the KV cache's bytes after the turn (the fast runner's measured rows, or
transformers' cache). One warm-up turn first (first-call costs). Times are indicative on a busy machine; the token
counts and bytes are exact.

Owns the plan and its table; the turn is ``engine.vision.turn``'s, the chart ``engine.lab.charts``'.
"""

from __future__ import annotations

import io
import statistics
import threading
import time
from collections.abc import Sequence
from typing import Any

from engine.events import Finished, Message
from engine.inputs import SamplingConfig
from engine.lab.results import ExperimentResult, Series
from engine.lab.runs import Progress, check_cancel, no_progress

SIZES_QUICK = ((320, 240), (800, 600), (1600, 1200))
SIZES_FULL = ((224, 224), (320, 240), (640, 480), (1024, 768), (1600, 1200), (2048, 1536))
QUESTION = "Describe this picture."
COLUMNS = ("image", "pixels", "image tokens", "prompt tokens", "encoder ms", "prefill ms", "TTFT ms", "KV MiB")


def picture(width: int, height: int, seed: int = 0) -> Any:
    """A PNG of random pixels at ``width`` × ``height``, read as the user's image would be."""
    import numpy as np
    from PIL import Image

    from engine.vision.image_input import read_image

    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "PNG")
    return read_image(buffer.getvalue(), f"{width}x{height}.png")


def _turn(chat: Any, image: Any, cancel: threading.Event) -> Finished:
    chat.reset()  # nothing reused: every turn encodes and prefills its image
    config = SamplingConfig(temperature=0.0, repetition_penalty=1.0, max_new_tokens=1)
    finished = list(chat.generate([Message("user", QUESTION)], {0: [image]}, config, cancel))[-1]
    if finished.reason == "error":
        from engine.errors import BadInputError

        raise BadInputError(f"what an image costs: {finished.error}")
    return finished


def run_image_cost(vision: Any, cancel: threading.Event, *, sizes: Sequence[tuple[int, int]] = SIZES_FULL,
                   reps: int = 3, progress: Progress = no_progress) -> ExperimentResult:
    """TTFT (encoder, prefill) and KV bytes against resolution on ``vision`` (an ``engine.vision.vlm.VisionModel``)."""
    from engine.vision.turn import VisionChat  # lazy: torch (the catalogue must not import it)

    started = time.perf_counter()
    chat = VisionChat(vision)
    steps = 1 + len(sizes) * reps
    progress(0.0, "what an image costs: warm-up")
    _turn(chat, picture(*sizes[0]), cancel)
    rows, measured = [], []
    for i, (width, height) in enumerate(sizes):
        image = picture(width, height, seed=i)
        turns = []
        for r in range(reps):
            check_cancel(cancel, "what an image costs")
            progress((1 + i * reps + r) / steps, f"what an image costs: {width}×{height}, turn {r + 1}/{reps}")
            turns.append(_turn(chat, image, cancel).metrics)
        m = turns[-1]
        encoder = statistics.median(t.vision_encoder_s or 0.0 for t in turns)
        prefill = statistics.median(t.prefill_s or 0.0 for t in turns)
        ttft = statistics.median(t.ttft_s or 0.0 for t in turns)
        kv = m.kv_cache_bytes or 0
        tokens = sum(m.image_tokens)
        measured.append((width * height, tokens, encoder, prefill, ttft, kv))
        rows.append((f"{width}×{height}", width * height, tokens, m.prompt_tokens, round(encoder * 1e3, 2),
                     round(prefill * 1e3, 2), round(ttft * 1e3, 2), round(kv / 2**20, 3)))
    megapixels = tuple(p / 1e6 for p, *_ in measured)
    series = (
        Series("vision encoder", megapixels, tuple(v[2] for v in measured), "megapixels", "TTFT (s)", panel=0),
        Series("language prefill", megapixels, tuple(v[3] for v in measured), "megapixels", "TTFT (s)", panel=0),
        Series("TTFT", megapixels, tuple(v[4] for v in measured), "megapixels", "TTFT (s)", panel=0),
        Series("image tokens", megapixels, tuple(float(v[1]) for v in measured), "megapixels", "image tokens",
               panel=1),
        Series("KV cache", megapixels, tuple(v[5] / 2**20 for v in measured), "megapixels", "KV cache (MiB)",
               panel=2),
    )
    largest = measured[-1]
    summary: dict[str, Any] = {
        "image tokens, smallest → largest": f"{measured[0][1]} → {largest[1]}",
        "TTFT ms, smallest → largest": f"{measured[0][4] * 1e3:.1f} → {largest[4] * 1e3:.1f}",
        "encoder share of TTFT, largest": round(largest[2] / largest[4], 3) if largest[4] else None,
        "KV bytes per image token": round(largest[5] / max(1, rows[-1][3])) if largest[5] else None,
    }
    facts = vision.loaded.facts
    notes = (f"{reps} turns per size (median), one greedy token, the cache emptied before each; random pixels: the "
             "processor's tiling depends on the size only",
             "KV bytes per image token: the whole prompt's KV bytes over its tokens (images and text alike)")
    return ExperimentResult("image_cost", "What an image costs", COLUMNS, tuple(rows), series=series, summary=summary,
                            notes=notes, model=f"{facts.name} ({facts.precision}, {facts.device})",
                            elapsed_s=time.perf_counter() - started)


__all__ = ["run_image_cost", "picture", "SIZES_QUICK", "SIZES_FULL"]
