"""``python -m engine.bench.gguf``: the default model's GGUF kept 4-bit, against its safetensors copy.

One process (or one per ``--stage``), the fast path for every variant, the same prompt and greedy settings:

- ``gguf-int4``: the kept GGUF (``engine.models.fetch.default_gguf``) loaded with ``auto``, its Q4_1 blocks
  taken as int4 as they are (``engine/quant/gguf_quant.py``);
- ``st-int4``: the safetensors copy (the same GGUF dequantized to bf16 at fetch) quantized to int4;
- ``bf16``: the safetensors copy in bf16, the baseline of every ratio.

Load times are each load's wall time: bf16 and gguf-int4 best of ``--loads``; st-int4 cold (its
quantized-weight cache emptied first) and warm (a cache hit). A ``gguf-bf16`` load (transformers
dequantizing the GGUF, nothing more) says how much of gguf-int4's load is transformers' own GGUF reading.
Decode tok/s and the ~500-token prompt's TTFT are medians over ``--reps`` repetitions, variants rotated
(``engine.bench.core``), and the best of them (a shared machine's noise only slows a run down); quality is teacher-forced top-1 agreement with bf16 and perplexity on the
fixed text (``engine.quant.quality``). Prints one JSON object; docs/BENCHMARK.md ("GGUF weights kept 4-bit")
quotes a run. Never asserts a speed. Owns this comparison only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

from engine.bench import core
from engine.quant.quality import agreement, predict, quality_ids
from engine.bench.run import machine_description
from engine.bench.scenarios import build_prompts, make_plan, precision_scenarios
from engine.bench.variants import Engine, fast_factory
from engine.inputs import LoadSpec
from engine.quant import quant_cache
from engine.models.fetch import default_gguf, find_default_model
from engine.models.loader import load_model


def _timed_load(model: Path, precision: str) -> tuple[Any, float]:
    start = time.perf_counter()
    loaded = load_model(LoadSpec(model=str(model), precision=precision, device="cpu"))
    return loaded, time.perf_counter() - start


def _load_all(folder: Path, gguf: Path) -> dict[str, Any]:
    return {"bf16": _timed_load(folder, "bf16")[0], "gguf-int4": _timed_load(gguf, "auto")[0],
            "st-int4": _timed_load(folder, "int4")[0]}


def loads(folder: Path, gguf: Path, rounds: int, progress=lambda _m: None) -> dict[str, Any]:
    """Each load's wall time: st-int4 cold (its cache emptied) then warm; the others best of ``rounds``."""
    cache = quant_cache.cache_folder() / \
        f"{quant_cache.cache_key(sorted(folder.glob('*.safetensors')), 'int4')}.safetensors"
    cache.unlink(missing_ok=True)
    progress("loading st-int4 (cold: quantizing)")
    cold = _timed_load(folder, "int4")[1]
    progress("loading st-int4 (warm: from the cache)")
    warm = _timed_load(folder, "int4")[1]
    runs: dict[str, list[float]] = {"bf16": [], "gguf-int4": [], "gguf-bf16": []}
    notes: dict[str, str] = {}
    for rep in range(rounds):
        for name, (model, precision) in core.rotated(
                [("bf16", (folder, "bf16")), ("gguf-int4", (gguf, "auto")), ("gguf-bf16", (gguf, "bf16"))], rep):
            progress(f"loading {name} ({rep + 1}/{rounds})")
            one, seconds = _timed_load(model, precision)
            runs[name].append(seconds)
            notes[name] = one.facts.load_note
            del one
    return {"bf16": min(runs["bf16"]), "gguf-int4": min(runs["gguf-int4"]),
            "gguf-bf16 (transformers alone)": min(runs["gguf-bf16"]),
            "st-int4 cold (quantizing)": cold, "st-int4 warm (cache)": warm, "runs": runs, "notes": notes}


def speed(folder: Path, gguf: Path, tokens: int, reps: int, progress=lambda _m: None) -> dict[str, Any]:
    """Decode tok/s and the ~500-token prompt's TTFT of the three, fast path, variants rotated."""
    plan = make_plan(False, tokens, reps)
    loaded = _load_all(folder, gguf)
    prompts = build_prompts(loaded["bf16"].tokenizer, plan, loaded["bf16"].facts.context_length)
    variants = {name: Engine(name, one, fast_factory(False)) for name, one in loaded.items()}
    measured = core.measure(variants, precision_scenarios(prompts, plan), plan.reps, progress)
    figures = core.summarise(measured.runs, {"decode_tok_s": ("tok/s", "higher"), "ttft_long_s": ("s", "lower")},
                             baseline="bf16")
    # Best of the repetitions beside the medians: on a shared machine noise only ever slows a run down.
    best = {"decode_tok_s": {n: max(v, default=None) for n, v in figures["decode_tok_s"]["runs"].items()},
            "ttft_long_s": {n: min(v, default=None) for n, v in figures["ttft_long_s"]["runs"].items()}}
    return {"tokens": plan.tokens, "reps": plan.reps, "decode_tok_s": figures["decode_tok_s"],
            "ttft_long_s": figures["ttft_long_s"], "warmup_s": measured.warmup_s, "best": best,
            "best_ratio": {figure: {n: core.ratio(v, values["bf16"]) for n, v in values.items() if n != "bf16"}
                           for figure, values in best.items()},
            "weights_bytes": {name: one.facts.weights_bytes for name, one in loaded.items()},
            "load_notes": {name: one.facts.load_note for name, one in loaded.items()}}


def quality(folder: Path, gguf: Path, progress=lambda _m: None) -> dict[str, Any]:
    """Teacher-forced top-1 agreement with bf16 and perplexity on the fixed text."""
    loaded = _load_all(folder, gguf)
    progress("teacher-forced quality")
    ids = quality_ids(loaded["bf16"].tokenizer)
    if quality_ids(loaded["gguf-int4"].tokenizer) != ids:
        raise RuntimeError("the GGUF's tokenizer encodes the quality text differently")
    reference = predict(loaded["bf16"].model, ids)
    out: dict[str, Any] = {"tokens": len(ids), "bf16": {"perplexity": reference.perplexity}}
    for name in ("gguf-int4", "st-int4"):
        mine = predict(loaded[name].model, ids)
        out[name] = {"top1_agreement_with_bf16": agreement(mine, reference), "perplexity": mine.perplexity}
    return out


STAGES = ("loads", "speed", "quality")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.bench.gguf", description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=128, help="new tokens per decode measurement")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--loads", type=int, default=2, help="timed loads of bf16, gguf-int4 and gguf-bf16 each")
    parser.add_argument("--stage", choices=STAGES + ("all",), default="all",
                        help="one part only (each loads what it needs: a shared machine may not allow one long run)")
    args = parser.parse_args(argv)
    folder = find_default_model()
    gguf = default_gguf(folder) if folder else None
    if gguf is None:
        print("no default model with its GGUF kept: `python -m engine fetch` into a new data folder", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    verbose = bool(os.environ.get("BENCH_VERBOSE"))
    progress = (lambda m: print(m, file=sys.stderr, flush=True)) if verbose else (lambda _m: None)
    result: dict[str, Any] = {"machine": machine_description("cpu"),
                              "model": {"folder": str(folder), "gguf": str(gguf)}}
    if args.stage in ("loads", "all"):
        result["load_s"] = loads(folder, gguf, args.loads, progress)
    if args.stage in ("speed", "all"):
        result["speed"] = speed(folder, gguf, args.tokens, args.reps, progress)
    if args.stage in ("quality", "all"):
        result["quality"] = quality(folder, gguf, progress)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
