"""The lab's catalogue of experiments, how to run one, and how to run and export them all.

The GUI lists ``EXPERIMENTS`` and runs ``run_experiment`` on the model's worker thread; the CLI calls
``run_all``. Importing this module loads no torch (the GUI imports it at start-up): the attention
experiment, which needs torch and transformers at import, and torch itself load when first used. Owns
the catalogue, the quick/full sizes of each experiment and the export layout (``<key>.csv``,
``<key>.png``, ``results.json``); the measuring lives in ``engine.lab.timing``, ``engine.lab.sampling_stats``,
``engine.lab.attention``, ``engine.lab.precision_ab``, ``engine.lab.speculation``, ``engine.lab.documents`` and
``engine.lab.image_cost`` (the one a vision-language model runs, and the only one: ``VISION``).

A model on a server (``engine.remote``) runs the experiments that need only replies, their times and
their tokens (``needs_local=False``: greedy 20, TTFT vs length, sampling); the ones that need the
model's internals (switching its KV cache off, its attention weights, loading it in other precisions)
are refused before anything runs (``NeedsLocalModelError``, one line), never run halfway.
"""

from __future__ import annotations

import platform
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from engine.errors import BadInputError
from engine.lab.charts import save_png
from engine.lab.documents import LENGTHS_FULL as DOC_LENGTHS_FULL
from engine.lab.documents import LENGTHS_QUICK as DOC_LENGTHS_QUICK
from engine.lab.documents import run_docs_vs_retrieval
from engine.lab.image_cost import SIZES_FULL as IMAGE_SIZES_FULL
from engine.lab.image_cost import SIZES_QUICK as IMAGE_SIZES_QUICK
from engine.lab.image_cost import run_image_cost
from engine.lab.precision_ab import precision_ab_task
from engine.lab.results import ExperimentResult, write_csv, write_json
from engine.lab.runs import Progress, is_remote, model_label, no_progress
from engine.lab.sampling_stats import run_sampling
from engine.lab.speculation import DRAFT_LENGTHS, run_speculation
from engine.lab.timing import LENGTHS_FULL, LENGTHS_QUICK, run_greedy20, run_kv_cache, run_ttft_vs_length


@dataclass(frozen=True)
class LabOptions:
    """How big each experiment is; ``quick`` trades precision of the figures for minutes of CPU."""

    quick: bool = False
    layer: int | None = None  # attention layer; None: the middle one
    head: int = 0  # attention head
    precisions: tuple[str, ...] = ("bf16", "int8", "int4")


@dataclass(frozen=True)
class ExperimentInfo:
    key: str
    title: str
    description: str
    loads_models: bool = False  # True: it loads other copies of the model while it runs
    needs_local: bool = False  # True: it needs the model's weights or cache here, so a server's model cannot run it
    needs_vision: bool = False  # True: it runs on a vision-language model (engine.vision.vlm.VisionModel) alone


class NeedsLocalModelError(BadInputError):
    """An experiment that needs the model's internals was asked of a model on a server."""


NEEDS_LOCAL_WHY = {
    "kv_cache": "it switches the model's KV cache off, which a server's API cannot do",
    "attention": "it reads the model's attention weights, which a server's API does not send",
    "precision_ab": "it loads the model's weights again in other precisions",
    "speculation": "it drafts and verifies tokens inside the model's own decoding, which a server's API cannot",
    "docs": "it counts the document's tokens with the model's tokenizer and reads the KV cache's bytes",
    "image_cost": "it times the model's vision encoder and reads the KV cache's bytes",
}


EXPERIMENTS: tuple[ExperimentInfo, ...] = (
    ExperimentInfo("greedy20", "1 · Greedy decode, 20 tokens",
                   "Greedy decode of 20 tokens, repeated: total time, TTFT and average tok/s (median and spread)."),
    ExperimentInfo("ttft_length", "2 · TTFT vs prompt length",
                   "English and Chinese prompts from ~10 to ~500 characters: TTFT and prefill tok/s."),
    ExperimentInfo("kv_cache", "3 · KV cache on vs off",
                   "The same input with the KV cache on and off: latency per generated token, ratio, same text?",
                   needs_local=True),
    ExperimentInfo("sampling", "4 · Sampling vs greedy",
                   "Temperature 0.9 + top-p 0.9 against greedy over several seeds: repetition rate, distinct-1/2."),
    ExperimentInfo("attention", "5 · Attention heatmap",
                   "Attention weights of one layer and head over a sentence with a pronoun; sink/collapse flags.",
                   needs_local=True),
    ExperimentInfo("precision_ab", "Precision A/B (bf16 / int8 / int4)",
                   "Loads the model again in bf16, int8 and int4, one after another (temporarily uses extra "
                   "memory): decode tok/s, TTFT, weights size, identical greedy text?", loads_models=True,
                   needs_local=True),
    ExperimentInfo("speculation", "Speculative decoding",
                   "Plain and prompt-lookup decoding at draft lengths 1-8 on a repeat-heavy prompt and a fresh one: "
                   "speed-up against draft length and acceptance, tokens per step, identical greedy text?",
                   needs_local=True),
    ExperimentInfo("docs", "Whole text vs retrieval",
                   "A real document (Vim's tutor, English and Chinese) cut to several lengths, put whole into the "
                   "prompt or as retrieved passages: TTFT, prefill tokens and KV cache bytes against its length.",
                   needs_local=True),
    ExperimentInfo("image_cost", "What an image costs",
                   "One picture at sizes from 224×224 to 2048×1536 on a vision-language model: TTFT split into the "
                   "vision encoder and the prefill, image tokens and KV cache bytes against its resolution.",
                   needs_local=True, needs_vision=True),
)
FIVE = ("greedy20", "ttft_length", "kv_cache", "sampling", "attention")
VISION = tuple(e.key for e in EXPERIMENTS if e.needs_vision)  # what a vision-language model runs (the default set there)
REMOTE_CAPABLE = tuple(e.key for e in EXPERIMENTS if not e.needs_local)


def info(key: str) -> ExperimentInfo:
    for item in EXPERIMENTS:
        if item.key == key:
            return item
    raise BadInputError(f"unknown experiment {key!r}: choose one of {', '.join(e.key for e in EXPERIMENTS)}")


def check_runnable(keys: Sequence[str], remote: bool, vision: bool = False) -> None:
    """Refuse, in one line and before anything runs, an unknown key, one that a server's model cannot run, and one
    of the other kind of model (``vision``: the model is a vision-language model, which runs ``VISION`` alone)."""
    for key in keys:
        item = info(key)
        if remote and item.needs_local:
            raise NeedsLocalModelError(f"the experiment {key!r} needs a model loaded on this computer: "
                                       f"{NEEDS_LOCAL_WHY[key]} (on a server: {', '.join(REMOTE_CAPABLE)})")
        if item.needs_vision and not vision:
            raise BadInputError(f"the experiment {key!r} needs a vision-language model (LLaVA, LLaVA-OneVision, "
                                "SmolVLM/Idefics3, Qwen2.5-VL, Qwen3-VL, Gemma 3): this model has no vision")
        if vision and not item.needs_vision:
            raise BadInputError(f"the experiment {key!r} runs on a text model; on a vision-language model the lab "
                                f"runs {', '.join(VISION)}")


def is_vision(loaded) -> bool:
    """Whether ``loaded`` is a vision-language model (``engine.vision.vlm.VisionModel``)."""
    from engine.vision.vlm import VisionModel  # no torch: the family table and the loader's entry only

    return isinstance(loaded, VisionModel)


def engine_description(loaded) -> dict:
    """Which engine produced the figures, for results.json: a server's URL and model, or the local model's place."""
    facts = loaded.facts
    if is_remote(loaded):
        return {"kind": "remote", "base_url": facts.source, "model": facts.name, "label": model_label(loaded)}
    return {"kind": "local", "model": facts.name, "precision": facts.precision, "device": facts.device,
            "label": model_label(loaded)}


def run_experiment(key: str, loaded, cancel: threading.Event, options: LabOptions = LabOptions(),
                   progress: Progress = no_progress) -> ExperimentResult:
    """Run one experiment on ``loaded`` (on the thread that owns it) and return its result."""
    check_runnable((key,), is_remote(loaded), is_vision(loaded))
    q = options.quick
    if key == "image_cost":
        return run_image_cost(loaded, cancel, sizes=IMAGE_SIZES_QUICK if q else IMAGE_SIZES_FULL, reps=2 if q else 3,
                              progress=progress)
    if key == "greedy20":
        return run_greedy20(loaded, cancel, reps=3 if q else 5, progress=progress)
    if key == "ttft_length":
        return run_ttft_vs_length(loaded, cancel, lengths=LENGTHS_QUICK if q else LENGTHS_FULL, reps=2 if q else 3,
                                  progress=progress)
    if key == "kv_cache":
        # Without the cache step i recomputes P + i tokens, so latency rises by (P + n) / P over the run
        # while the run costs ~n·P + n²/2 token-forwards: a short prompt and many tokens make the rise
        # steep (×2.4 in quick mode: the first sentence, ~67 tokens with the template) for the cost a
        # long prompt would spend on a flat start.
        return run_kv_cache(loaded, cancel, max_new_tokens=96 if q else 160, passage_chars=68 if q else 250,
                            progress=progress)
    if key == "sampling":
        return run_sampling(loaded, cancel, seeds=(0, 1, 2) if q else (0, 1, 2, 3, 4),
                            max_new_tokens=48 if q else 96, progress=progress)
    if key == "attention":
        from engine.lab.attention import run_attention  # lazy: it imports torch and transformers (see the docstring)
        return run_attention(loaded, cancel, layer=options.layer, head=options.head, progress=progress)
    if key == "speculation":
        return run_speculation(loaded, cancel, draft_lengths=(1, 2, 4, 8) if q else DRAFT_LENGTHS,
                               max_new_tokens=64 if q else 128, progress=progress)
    if key == "docs":
        from engine.docs.embed import default_embedder  # lazy: the embedder imports torch and transformers

        return run_docs_vs_retrieval(loaded, cancel, lengths=DOC_LENGTHS_QUICK if q else DOC_LENGTHS_FULL,
                                     embedder=default_embedder(), progress=progress)
    return precision_ab_task(loaded, cancel, precisions=options.precisions, max_new_tokens=24 if q else 48,
                             progress=progress)


def export(result: ExperimentResult, out_dir: Path) -> tuple[Path, Path]:
    """Write ``<key>.csv`` and ``<key>.png`` into ``out_dir``."""
    out_dir = Path(out_dir)
    return write_csv(result, out_dir / f"{result.key}.csv"), save_png(result, out_dir / f"{result.key}.png")


def run_all(loaded, out_dir: Path, cancel: threading.Event, options: LabOptions = LabOptions(),
            keys: Sequence[str] = FIVE, progress: Progress = no_progress) -> dict:
    """Run ``keys`` in order, export each as soon as it is done, and write ``results.json``."""
    remote = is_remote(loaded)
    check_runnable(keys, remote, is_vision(loaded))  # all refused up front: never half a run
    machine = {"platform": platform.platform(), "processor": platform.processor(),
               "python": platform.python_version()}
    if not remote:  # a server's model runs on the server's machine: this one's torch says nothing about it
        import torch  # lazy: only for the machine's description; importing this module must load no torch

        from engine.lab.threads import thread_counts

        counts = thread_counts()
        machine.update(torch=torch.__version__, torch_threads=counts["intra_op"],
                       torch_interop_threads=counts["inter_op"])
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    document: dict = {"engine": engine_description(loaded), "model": loaded.facts.to_dict(),
                      "options": asdict(options), "machine": machine, "experiments": {}, "files": []}
    for i, key in enumerate(keys):
        def sub(fraction: float, message: str, _i: int = i) -> None:
            progress((_i + fraction) / len(keys), message)

        result = run_experiment(key, loaded, cancel, options, sub)
        csv_path, png_path = export(result, out_dir)
        document["experiments"][key] = result.to_dict()
        document["files"] += [csv_path.name, png_path.name]
        # Rewritten after every experiment so an interrupted run still leaves what it measured.
        document["elapsed_s"] = round(time.perf_counter() - started, 2)
        write_json(document, out_dir / "results.json")
    return document
