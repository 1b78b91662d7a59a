"""``python -m engine bench``'s run: Miaohui's engine against transformers ``generate()``, side by side.

Owns the run of the benchmark: one process, one model, the same prompts and greedy settings for every
variant (``engine.bench.variants``: ``baseline`` = ``generate()``, ``engine`` = the plain runner,
``fastpath`` = the fast path, which falls back to the plain runner where the model is not supported and
says so; ``llama.cpp`` = the peer on the same GGUF, when llama-cpp-python is installed: ``open_peer``), the
scenarios of ``engine.bench.scenarios`` measured by ``engine.bench.core`` (warm-up excluded and reported
apart, variants alternated within each repetition, medians and ratios variant ÷ baseline), and the figures
derived from them: greedy tokens equal to the baseline's, follow-up reuse share, KV cache on vs off,
achieved bandwidth vs this machine's bandwidth measured in the same run (``engine.bench.membw``, the roofline
share), the matrix products' own time per token, other precisions' decode and their teacher-forced quality
(``engine.quant.quality``), and what the machine is. Returns the JSON object whose shape
``engine.bench.report`` names and docs/BENCHMARK.md documents. Never asserts a speed.

Does not parse arguments or print (``engine.cli.bench``), does not format (``engine.bench.report``);
knows nothing of the GUI and knows the runners only through their factories.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import time
from importlib import metadata
from typing import Any, Callable

import psutil
import torch
import torch.nn.functional as F
import transformers

from engine.bench import core
from engine.bench.membw import measure_bandwidth
from engine.bench.roofline import Roofline, weights_read_per_token
from engine.bench.peer import INSTALL_HINT, NAME as PEER_NAME, PeerError, PeerProcess, gguf_for, installed
from engine.quant.quality import Predictions, agreement, predict, quality_ids
from engine.bench.report import METRICS, SCHEMA
from engine.bench.scenarios import (Plan, build_prompts, chosen_scenarios, count_tokens, make_plan,
                                    precision_scenarios, scenarios)
from engine.bench.variants import LlamaCpp, variants_for
from engine.errors import EngineError
from engine.fmt import first_difference
from engine.executor.llama_fused import unsupported_reason, weights_for as _weights_for
from engine.executor.runner import model_device, sync
from engine.inputs import LoadSpec
from engine.models.fetch import default_gguf
from engine.models.loader import load_model

# ---------------------------------------------------------------------------------------- machine


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(distribution: str) -> str | None:
    """An installed distribution's version, None when it is not installed (optional at run time)."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def machine_description(device: str) -> dict[str, Any]:
    """What the figures were measured on: CPU, cores, memory, library versions, GPU."""
    gpu = torch.cuda.get_device_name(0) if device.startswith("cuda") and torch.cuda.is_available() else None
    return {
        "cpu": _cpu_model(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cores_logical": psutil.cpu_count(logical=True),
        "cores_physical": psutil.cpu_count(logical=False),
        "torch_threads": torch.get_num_threads(),
        "load_average_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "memory_bytes": psutil.virtual_memory().total,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "bitsandbytes": _version("bitsandbytes"),
        "device": device,
        "gpu": gpu,
        "os": platform.platform(),
    }


# ---------------------------------------------------------------------------------------- figures


def measure(variants: list[Any], scenario_list: list[tuple[str, Callable[[Any], dict[str, Any]]]], reps: int,
            names: list[str], progress: Callable[[str], None], absent: tuple[str, ...] = ()) -> dict[str, Any]:
    """The core's measurement of ``variants`` over ``scenario_list``, the metrics ``names`` summarised;
    ``absent`` variants (not run) still get their keys, with null figures."""
    measured = core.measure({v.name: v for v in variants}, scenario_list, reps, progress)
    metrics = core.summarise({**measured.runs, **{name: {} for name in absent}},
                             {name: METRICS[name] for name in names})
    return {"metrics": metrics, "warmup_s": measured.warmup_s, "runs": measured.runs}


def matmul_floor(model: Any, passes: int = 3) -> float | None:
    """Seconds per token spent in the fast path's matrix products alone (best of ``passes``): one pass
    over every fused weight with a one-token input. Decode cannot beat this without faster products."""
    if unsupported_reason(model) is not None:
        return None
    w = _weights_for(model)
    if not isinstance(w.embed, torch.Tensor):  # int8/int4 weights are modules (their own kernels), not F.linear's
        return None
    device = model_device(model)
    with torch.inference_mode():
        x = torch.randn(1, w.embed.shape[1], dtype=w.embed.dtype, device=device)  # (1, d)
        y = torch.randn(1, w.intermediate, dtype=w.embed.dtype, device=device)  # (1, I)
        a = torch.randn(1, w.heads * w.head_dim, dtype=w.embed.dtype, device=device)  # (1, H*D)

        def one_token() -> None:
            for layer in w.layers:
                F.linear(x, layer.qkv)
                F.linear(a, layer.o)
                F.linear(x, layer.gate_up)
                F.linear(y, layer.down)
            F.linear(x, w.lm_head)

        return core.best_seconds(one_token, passes, lambda: sync(device))


def _load(model: str, precision: str, device: str) -> Any:
    return load_model(LoadSpec(model=model, precision=precision, device=device))


def open_peer(args: argparse.Namespace, device: str, tokenizer: Any,
              n_ctx: int) -> tuple[LlamaCpp | None, dict[str, Any]]:
    """The llama.cpp peer on the GGUF of ``--model`` (its child started, the model loaded), or None, and the
    ``peer`` object of the JSON (``note``: the one line that says why there is no column)."""
    gguf = gguf_for(args.model, default_gguf() if args.model == "default" else None)
    info: dict[str, Any] = {"ran": False, "note": None, "gguf": str(gguf) if gguf else None,
                            "gguf_bytes": gguf.stat().st_size if gguf else None, "version": None,
                            "threads": torch.get_num_threads(), "n_ctx": n_ctx, "first_difference_vs_baseline": None}
    if getattr(args, "no_peer", False):
        info["note"] = "llama.cpp column: not run (--no-peer)"
    elif not device.startswith("cpu"):
        info["note"] = f"llama.cpp column: CPU runs only (this run is on {device})"
    elif not installed():
        info["note"] = INSTALL_HINT
    elif gguf is None:
        info["note"] = "llama.cpp column: this model has no GGUF (the default model's kept one, or --model FILE.gguf)"
    if info["note"]:
        return None, info
    try:
        # Same threads as torch: a peer given more cores than the engine would not be a like-for-like column.
        process = PeerProcess(gguf, info["threads"], n_ctx)
    except PeerError as exc:
        info["note"] = str(exc)
        return None, info
    info["version"] = process.version
    return LlamaCpp(process, tokenizer), info


# ---------------------------------------------------------------------------------------- the run


def bench(args: argparse.Namespace, progress: Callable[[str], None] = lambda _m: None) -> dict[str, Any]:
    """Run the whole benchmark and return the JSON object (see docs/BENCHMARK.md). ``args``: the
    options of ``python -m engine bench`` (``engine.cli.bench.add_arguments``)."""
    if args.threads:
        torch.set_num_threads(args.threads)
    plan = make_plan(args.quick, args.tokens, args.reps)
    t_start = time.perf_counter()
    progress(f"loading {args.model} ({args.precision})")
    loaded = _load(args.model, args.precision, args.device)
    device = loaded.facts.device
    progress("measuring memory bandwidth")
    bandwidth_before = measure_bandwidth(device, plan.bandwidth_bytes)

    prompts = build_prompts(loaded.tokenizer, plan, loaded.facts.context_length or 4096)
    reason = unsupported_reason(loaded.model)
    variants = variants_for(loaded, args.compile)
    fast = variants[-1]
    chosen = chosen_scenarios(getattr(args, "scenarios", None))
    scenario_list = [(name, fn) for name, fn in scenarios(prompts, plan) if name in chosen]
    prompt_tokens = {k: count_tokens(loaded.tokenizer, v) for k, v in prompts.items()}
    progress("starting the llama.cpp peer")
    peer, peer_info = open_peer(args, device, loaded.tokenizer, max(prompt_tokens.values()) + plan.tokens + 16)
    try:
        main = measure(variants + ([peer] if peer else []), scenario_list, plan.reps, list(METRICS), progress,
                       absent=() if peer else (PEER_NAME,))
    finally:
        if peer:
            peer.process.close()
    if peer:
        peer_info["note"] = peer.note  # a child that died mid-run: its one line, and null figures
        peer_info["ran"] = peer.note is None
        if peer.note is None:  # its weights are the GGUF's 4-bit blocks: tokens may part from bf16's, and say where
            peer_info["first_difference_vs_baseline"] = first_difference(main["runs"]["baseline"]["_ids"][0],
                                                                         main["runs"][PEER_NAME]["_ids"][0])

    baseline_ids = main["runs"]["baseline"]["_ids"][0]
    correctness = {}
    for name in ("engine", "fastpath"):
        ids = main["runs"][name]["_ids"][0]
        diff = first_difference(baseline_ids, ids)
        correctness[name] = {"equal": diff is None, "first_difference": diff, "compared_tokens": len(baseline_ids)}
    metrics = main["metrics"]
    derived = {
        "followup_reuse_share": {name: core.ratio(metrics["followup_ttft_reuse_s"]["median"][name],
                                                  metrics["followup_ttft_full_s"]["median"][name])
                                 for name in ("engine", "fastpath")},
        "followup_reused_tokens": {name: core.median(main["runs"][name].get("_reused_tokens", []))
                                   for name in ("engine", "fastpath")},
        "kv_cache_speedup": {name: core.ratio(metrics["decode_tok_s"]["median"][name],
                                              metrics["decode_tok_s_no_kv"]["median"][name])
                             for name in ("baseline", "engine")},
    }
    precisions = {}
    others = args.precisions if args.precisions is not None else ("" if args.quick else "int8,int4")
    progress("teacher-forced quality reference")
    reference = predict(loaded.model, quality_ids(loaded.tokenizer))
    for other in [p.strip() for p in others.split(",") if p.strip() and p.strip() != args.precision]:
        precisions[other] = _other_precision(args, other, prompts, plan, progress, reference)
    progress("timing the matrix products alone")
    floor = matmul_floor(loaded.model)
    progress("measuring memory bandwidth again")
    bandwidth_after = measure_bandwidth(device, plan.bandwidth_bytes)
    bandwidth = max(bandwidth_before, bandwidth_after, key=lambda b: b.read_bytes_s)
    weights = weights_read_per_token(loaded)
    # KV bytes a decode step read: the engine's measured cache at the reply's mean length (engine.bench.roofline,
    # as engine chat --json counts it); generate()'s and the peer's caches hold the same positions.
    kv = int(core.median([core.median(main["runs"][name].get("_kv_read_bytes", []))
                          for name in ("fastpath", "engine")]) or 0)
    per_token = weights + kv
    roofline = {}
    for name, rate in metrics["decode_tok_s"]["median"].items():
        # the peer reads its GGUF's weights, not the loaded model's: the file's size stands for them
        figures = Roofline(peer_info["gguf_bytes"] if name == PEER_NAME else weights, kv, rate,
                           bandwidth.read_bytes_s, None)
        roofline[name] = {"achieved_bytes_s": figures.achieved_bytes_s, "share": figures.share}
    facts = loaded.facts
    runner = fast.last_runner
    return {
        "schema": SCHEMA,
        "machine": machine_description(device),
        "settings": {"model": args.model, "precision": facts.precision, "device": device,
                     "scenarios": [name for name, _ in scenario_list],
                     "tokens": plan.tokens, "reps": plan.reps, "quick": bool(args.quick),
                     "no_kv_tokens": plan.no_kv_tokens, "greedy": True,
                     "prompt_tokens": prompt_tokens},
        "model": {"name": facts.name, "architecture": facts.architecture, "params": facts.params,
                  "weights_bytes": facts.weights_bytes, "bytes_read_per_token": per_token,
                  "weights_read_per_token": weights, "kv_read_per_token": kv,
                  "layers": facts.layers, "hidden_size": facts.hidden_size, "heads": facts.heads,
                  "kv_heads": facts.kv_heads, "context_length": facts.context_length},
        "memory_bandwidth": {"read_bytes_s": bandwidth.read_bytes_s, "copy_bytes_s": bandwidth.copy_bytes_s,
                             "buffer_bytes": bandwidth.buffer_bytes,
                             "read_bytes_s_before": bandwidth_before.read_bytes_s,
                             "read_bytes_s_after": bandwidth_after.read_bytes_s,
                             "roofline_tok_s": bandwidth.read_bytes_s / per_token},
        "fastpath": {"active": reason is None, "reason": reason, "compile": bool(args.compile),
                     "compile_s": getattr(runner, "compile_s", None),
                     # what bounds the rest: the per-token time of the matrix products alone
                     "matmul_s_per_token": floor, "matmul_ceiling_tok_s": 1 / floor if floor else None},
        "warmup_s": main["warmup_s"],
        "metrics": metrics,
        "derived": derived,
        "roofline": roofline,
        "correctness": correctness,
        "precisions": precisions,
        "peer": peer_info,
        "quality": {"tokens": len(reference.top1) + 1, "perplexity": reference.perplexity},
        "elapsed_s": time.perf_counter() - t_start,
    }


def _other_precision(args: argparse.Namespace, precision: str, prompts: dict[str, Any], plan: Plan,
                     progress: Callable[[str], None], reference: Predictions) -> dict[str, Any]:
    """Decode tok/s and long-prompt TTFT of every variant in another precision (the model loaded again,
    then freed), and its teacher-forced agreement with the main precision and perplexity."""
    progress(f"loading {args.model} ({precision})")
    try:
        loaded = _load(args.model, precision, args.device)
    except EngineError as exc:
        return {"error": str(exc)}
    reason = unsupported_reason(loaded.model)
    variants = variants_for(loaded, args.compile, fast=reason is None)
    result = measure(variants, precision_scenarios(prompts, plan), plan.reps,
                     ["decode_tok_s", "ttft_short_s", "ttft_long_s", "decode_tok_s_long"],
                     lambda m: progress(f"{precision}: {m}"))
    progress(f"{precision}: teacher-forced quality")
    mine = predict(loaded.model, quality_ids(loaded.tokenizer))
    out = {"weights_bytes": loaded.facts.weights_bytes, "fastpath_active": reason is None,
           "fastpath_reason": reason, "decode_tok_s": result["metrics"]["decode_tok_s"],
           "ttft_short_s": result["metrics"]["ttft_short_s"], "ttft_long_s": result["metrics"]["ttft_long_s"],
           "decode_tok_s_long": result["metrics"]["decode_tok_s_long"],
           "top1_agreement": agreement(mine, reference), "perplexity": mine.perplexity,
           "warmup_s": result["warmup_s"]}
    del loaded, variants
    gc.collect()
    return out
