"""``python -m engine bench``: Miaohui's engine against transformers ``generate()``, side by side.

Owns the benchmark: one process, one model, the same prompts and greedy settings for every variant,
variants alternated within each repetition (so drift and neighbours' load hit them alike), warm-up
excluded and reported apart, medians and ratios (variant ÷ baseline). Variants:

- ``baseline``: ``model.generate()`` with its default (dynamic) cache, timed through a streamer;
- ``engine``: ``ChatSession`` over the plain ``ModelRunner`` (transformers forward + DynamicCache);
- ``fastpath``: ``ChatSession`` over ``engine.generate.fastpath.FastRunner`` (falls back to the plain runner
  where the model is not supported, and says so).

Figures: decode tok/s, TTFT (short prompt, ~500-token prompt, follow-up turn in a ~1,500-token
conversation with cache reuse and with a full re-prefill), KV cache on vs off, achieved bandwidth vs
this machine's bandwidth measured in the same run (roofline share), other precisions' decode. The
JSON shape (``--json``) is documented in docs/BENCHMARK.md and is stable. Never asserts a speed.
Knows nothing of the GUI; knows the runners only through their factories.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import sys
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence
from engine.fmt import first_difference

if TYPE_CHECKING:  # engine.bench.quality imports torch; `python -m engine` loads this module for its help text
    from engine.bench.quality import Predictions

SCHEMA = "miaohui-bench/1"
VARIANTS = ("baseline", "engine", "fastpath")
# Metric name -> (unit, which direction is better). Every name is always present in the JSON.
METRICS = {
    "decode_tok_s": ("tok/s", "higher"),
    "ttft_short_s": ("s", "lower"),
    "ttft_long_s": ("s", "lower"),
    "followup_ttft_reuse_s": ("s", "lower"),
    "followup_ttft_full_s": ("s", "lower"),
    "decode_tok_s_no_kv": ("tok/s", "higher"),
}
SCENARIOS = ("decode", "long", "followup", "no_kv")
_SYSTEM = "You are a helpful assistant."
_SHORT = "Write a long story about a cat who learns to fly. Describe every day of its training."
_FILLER = ("The history of the printing press begins with movable type in East Asia and continues with "
           "Gutenberg's workshop in Mainz, where metal type, oil-based ink and a screw press made books "
           "cheap enough for merchants, students and churches across Europe. ")


@dataclass(frozen=True)
class Plan:
    """Sizes of one benchmark run (``--quick`` shrinks all of them)."""

    tokens: int  # new tokens per decode measurement
    reps: int
    long_prompt: int  # target tokens of the long prompt
    conversation: int  # target tokens of the follow-up turn's history
    no_kv_tokens: int  # new tokens with the cache off (quadratic: kept short)
    bandwidth_bytes: int | None  # buffer for the bandwidth measurement; None: membw's default


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument("--model", default="default", help="default | folder | .gguf | repo id (local cache)")
    parser.add_argument("--precision", default="bf16", help="main precision: fp32 | bf16 | fp16 | auto")
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda")
    parser.add_argument("--tokens", type=int, default=None, help="new tokens per decode run (default 128)")
    parser.add_argument("--reps", type=int, default=None, help="timed repetitions (default 3)")
    parser.add_argument("--quick", action="store_true",
                        help="small sizes, one repetition, no other precisions (a smoke run)")
    parser.add_argument("--precisions", default=None,
                        help="other precisions to measure decode in, comma-separated (default int8,int4; "
                             "none with --quick); '' for none")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--compile", action="store_true", help="torch.compile the fast decode step")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS),
                        help=f"comma-separated subset of {','.join(SCENARIOS)} (figures of the others are null)")


def _plan(args: argparse.Namespace) -> Plan:
    if args.quick:
        plan = Plan(tokens=16, reps=1, long_prompt=120, conversation=200, no_kv_tokens=6,
                    bandwidth_bytes=64 * 1024 * 1024)
    else:
        plan = Plan(tokens=128, reps=3, long_prompt=500, conversation=1500, no_kv_tokens=24, bandwidth_bytes=None)
    if args.tokens is not None:
        plan = dataclasses.replace(plan, tokens=max(2, args.tokens))
    if args.reps is not None:
        plan = dataclasses.replace(plan, reps=max(1, args.reps))
    return plan


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


def machine_description(device: str) -> dict[str, Any]:
    """What the figures were measured on: CPU, cores, memory, library versions, GPU."""
    import psutil
    import torch
    import transformers

    try:
        import bitsandbytes
        bnb_version: str | None = bitsandbytes.__version__
    except Exception:  # noqa: BLE001  (optional at run time; its absence is reported, not fatal)
        bnb_version = None
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
        "bitsandbytes": bnb_version,
        "device": device,
        "gpu": gpu,
        "os": platform.platform(),
    }


# ---------------------------------------------------------------------------------------- prompts


def _fit(tokenizer: Any, target: int) -> str:
    """Filler text of about ``target`` tokens."""
    per = max(1, len(tokenizer.encode(_FILLER, add_special_tokens=False)))
    return (_FILLER * (target // per + 1))[: max(1, len(_FILLER) * target // per)]


def build_prompts(tokenizer: Any, plan: Plan, context: int) -> dict[str, Any]:
    """The messages of every scenario, sized to ``plan`` and to the model's context."""
    from engine.events import Message

    room = max(32, context - plan.tokens - 64)  # what a prompt may use and still leave the reply room
    long_target = min(plan.long_prompt, room)
    conv_target = min(plan.conversation, room)
    history = [Message("system", _SYSTEM)]
    turn = max(20, conv_target // 6)
    while True:
        trial = history + [Message("user", "Tell me more. " + _fit(tokenizer, turn // 2)),
                           Message("assistant", "Certainly. " + _fit(tokenizer, turn // 2))]
        if _count(tokenizer, trial) > conv_target:
            break
        history = trial
        if len(history) > 200:
            break
    if len(history) == 1:  # context too small for a turn of the planned size: one short pair
        history += [Message("user", "Hi."), Message("assistant", "Hello.")]
    return {
        "short": [Message("system", _SYSTEM), Message("user", _SHORT)],
        "long": [Message("system", _SYSTEM), Message("user", "Summarise this: " + _fit(tokenizer, long_target))],
        "conversation": history,  # ends with an assistant message
        "followup": history + [Message("user", "So what changed for readers?")],
    }


def _count(tokenizer: Any, messages: Sequence[Any]) -> int:
    return len(_render(tokenizer, messages))


def _render(tokenizer: Any, messages: Sequence[Any]) -> list[int]:
    from engine.generate.context import render  # the engine's bounded rendering: a model's template is its code

    return render(tokenizer, messages)


# ---------------------------------------------------------------------------------------- variants


class _Clocked:
    """A transformers streamer that notes when each generated token id exists (device-synchronised)."""

    def __init__(self, device: Any) -> None:
        self.device = device
        self.times: list[float] = []
        self.ids: list[int] = []
        self._prompt_seen = False

    def put(self, value: Any) -> None:
        if not self._prompt_seen:  # generate() first streams the prompt
            self._prompt_seen = True
            return
        from engine.generate.runner import sync

        sync(self.device)
        self.times.append(time.perf_counter())
        self.ids.extend(int(i) for i in value.reshape(-1).tolist())

    def end(self) -> None:
        pass


@dataclass(frozen=True)
class Sample:
    """One timed run of one variant."""

    ttft_s: float | None
    decode_tok_s: float | None
    ids: tuple[int, ...]
    reused_tokens: int = 0


def _decode_rate(times: Sequence[float]) -> float | None:
    return (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 and times[-1] > times[0] else None


class Baseline:
    """transformers ``generate()`` with its default cache: the reference every ratio divides by."""

    name = "baseline"

    def __init__(self, loaded: Any) -> None:
        self.loaded = loaded

    def run(self, messages: Sequence[Any], tokens: int, use_kv_cache: bool = True, **_: Any) -> Sample:
        import torch

        from engine.generate.runner import model_device

        model, tokenizer = self.loaded.model, self.loaded.tokenizer
        device = model_device(model)
        streamer = _Clocked(device)
        t_submit = time.perf_counter()
        ids = torch.tensor([_render(tokenizer, messages)], dtype=torch.long, device=device)  # (1, seq)
        # min_new_tokens keeps every run at exactly ``tokens`` so the rates compare like for like.
        with torch.inference_mode():
            model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=tokens,
                           min_new_tokens=tokens, do_sample=False, temperature=None, top_p=None, top_k=None,
                           use_cache=use_kv_cache, streamer=streamer,
                           pad_token_id=self.loaded.eos_token_ids[0] if self.loaded.eos_token_ids else None)
        ttft = streamer.times[0] - t_submit if streamer.times else None
        return Sample(ttft, _decode_rate(streamer.times), tuple(streamer.ids))


class Engine:
    """Miaohui's ``ChatSession`` over a given runner factory."""

    def __init__(self, name: str, loaded: Any, factory: Callable[[Any, bool], Any]) -> None:
        self.name = name
        # No end tokens: every run produces exactly ``tokens`` tokens, like generate(min_new_tokens=...).
        self.loaded = dataclasses.replace(loaded, eos_token_ids=())
        self.factory = factory
        self.last_runner: Any = None

    def session(self) -> Any:
        from engine.generate.session import ChatSession

        def factory(loaded: Any, use_kv_cache: bool) -> Any:
            self.last_runner = self.factory(loaded, use_kv_cache)
            return self.last_runner

        return ChatSession(self.loaded, runner_factory=factory)

    def run(self, messages: Sequence[Any], tokens: int, use_kv_cache: bool = True,
            session: Any = None) -> Sample:
        from engine.events import Finished, Token
        from engine.inputs import SamplingConfig

        session = session or self.session()
        config = SamplingConfig(temperature=0.0, max_new_tokens=tokens, use_kv_cache=use_kv_cache)
        ids: list[int] = []
        finished = None
        for event in session.generate(messages, config, threading.Event()):
            if isinstance(event, Token):
                ids.append(event.token_id)
            elif isinstance(event, Finished):
                finished = event
        if finished is None or finished.reason == "error":
            raise RuntimeError(f"{self.name}: {finished.error if finished else 'no Finished event'}")
        m = finished.metrics
        return Sample(m.ttft_s, m.decode_tok_s, tuple(ids), m.reused_tokens)


# ---------------------------------------------------------------------------------------- scenarios


def _scenarios(prompts: dict[str, Any], plan: Plan) -> list[tuple[str, Callable[[Any], dict[str, Any]]]]:
    """(name, fn(variant) -> {metric: value, ...}) in the order they run inside each repetition."""

    def decode(v: Any) -> dict[str, Any]:
        s = v.run(prompts["short"], plan.tokens)
        return {"decode_tok_s": s.decode_tok_s, "ttft_short_s": s.ttft_s, "_ids": s.ids}

    def long_prompt(v: Any) -> dict[str, Any]:
        return {"ttft_long_s": v.run(prompts["long"], 1).ttft_s}

    def followup(v: Any) -> dict[str, Any]:
        full = v.run(prompts["followup"], 1).ttft_s
        if isinstance(v, Baseline):  # generate() keeps no cache between calls: every turn re-prefills
            return {"followup_ttft_full_s": full, "followup_ttft_reuse_s": None}
        session = v.session()
        v.run(prompts["conversation"][:-1], 1, session=session)  # the earlier turn, untimed: fills the cache
        reuse = v.run(prompts["followup"], 1, session=session)
        return {"followup_ttft_full_s": full, "followup_ttft_reuse_s": reuse.ttft_s,
                "_reused_tokens": reuse.reused_tokens}

    def no_kv(v: Any) -> dict[str, Any]:
        if v.name == "fastpath":  # the fast path needs a cache: without one it is the plain runner
            return {"decode_tok_s_no_kv": None}
        return {"decode_tok_s_no_kv": v.run(prompts["short"], plan.no_kv_tokens, use_kv_cache=False).decode_tok_s}

    return [("decode", decode), ("long", long_prompt), ("followup", followup), ("no_kv", no_kv)]


def _median(values: Sequence[float | None]) -> float | None:
    clean = [v for v in values if v is not None]
    return statistics.median(clean) if clean else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def measure(variants: Sequence[Any], scenarios: Sequence[tuple[str, Callable[[Any], dict[str, Any]]]],
            reps: int, names: Sequence[str], progress: Callable[[str], None]) -> dict[str, Any]:
    """Warm up each variant once, then ``reps`` repetitions, variants alternated (rotated per rep)."""
    runs: dict[str, dict[str, list[Any]]] = {v.name: {} for v in variants}
    warmup: dict[str, float] = {}
    for v in variants:
        progress(f"warm-up {v.name}")
        start = time.perf_counter()
        for _, fn in scenarios:
            fn(v)
        warmup[v.name] = time.perf_counter() - start
    for rep in range(reps):
        order = list(variants[rep % len(variants):]) + list(variants[:rep % len(variants)])
        for scenario, fn in scenarios:
            for v in order:
                progress(f"rep {rep + 1}/{reps} {scenario} {v.name}")
                for key, value in fn(v).items():
                    runs[v.name].setdefault(key, []).append(value)
    metrics: dict[str, Any] = {}
    for name in names:
        unit, better = METRICS.get(name, ("", ""))
        per = {v.name: [x for x in runs[v.name].get(name, []) if x is not None] for v in variants}
        med = {k: _median(vals) for k, vals in per.items()}
        metrics[name] = {"unit": unit, "better": better, "median": med, "runs": per,
                         "ratio": {k: _ratio(med[k], med.get("baseline")) for k in med if k != "baseline"}}
    return {"metrics": metrics, "warmup_s": warmup, "runs": runs}


# ---------------------------------------------------------------------------------------- the run


def _bytes_per_token(loaded: Any) -> int:
    """Weight bytes one decode step reads: everything but an untied input embedding (one row is read)."""
    model = loaded.model
    total = loaded.facts.weights_bytes
    embed = model.get_input_embeddings().weight
    head = model.get_output_embeddings()
    if head is not None and head.weight.data_ptr() != embed.data_ptr():
        total -= embed.nbytes
    return int(total)


def matmul_floor(model: Any, passes: int = 3) -> float | None:
    """Seconds per token spent in the fast path's matrix products alone (best of ``passes``): one pass
    over every fused weight with a one-token input. Decode cannot beat this without faster products."""
    import torch
    import torch.nn.functional as F

    from engine.generate.fastpath import _weights_for, unsupported_reason
    from engine.bench.membw import best_seconds
    from engine.generate.runner import model_device

    if unsupported_reason(model) is not None:
        return None
    w = _weights_for(model)
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

        return best_seconds(one_token, device, passes)


def _load(model: str, precision: str, device: str) -> Any:
    from engine.models.loader import load_model
    from engine.inputs import LoadSpec

    return load_model(LoadSpec(model=model, precision=precision, device=device))


def _fast_factory(compile_step: bool) -> Callable[[Any, bool], Any]:
    from engine.generate.fastpath import make_fast_runner

    def factory(loaded: Any, use_kv_cache: bool) -> Any:
        return make_fast_runner(loaded, use_kv_cache, compile=compile_step)

    return factory


def _plain_factory(loaded: Any, use_kv_cache: bool) -> Any:
    from engine.generate.runner import ModelRunner

    return ModelRunner(loaded.model, use_kv_cache=use_kv_cache)


def bench(args: argparse.Namespace, progress: Callable[[str], None] = lambda _m: None) -> dict[str, Any]:
    """Run the whole benchmark and return the JSON object (see docs/BENCHMARK.md)."""
    import torch

    from engine.errors import BadInputError
    from engine.generate.fastpath import unsupported_reason
    from engine.bench.membw import measure_bandwidth
    from engine.bench.quality import predict, quality_ids

    if args.threads:
        torch.set_num_threads(args.threads)
    plan = _plan(args)
    t_start = time.perf_counter()
    progress(f"loading {args.model} ({args.precision})")
    loaded = _load(args.model, args.precision, args.device)
    device = loaded.facts.device
    progress("measuring memory bandwidth")
    bandwidth_before = measure_bandwidth(device, plan.bandwidth_bytes)

    prompts = build_prompts(loaded.tokenizer, plan, loaded.facts.context_length or 4096)
    reason = unsupported_reason(loaded.model)
    fast = Engine("fastpath", loaded, _fast_factory(args.compile))
    variants = [Baseline(loaded), Engine("engine", loaded, _plain_factory), fast]
    wanted = getattr(args, "scenarios", None) or "decode"
    chosen = {name.strip() for name in wanted.split(",") if name.strip()} | {"decode"}  # decode is the base
    unknown = chosen - set(SCENARIOS)
    if unknown:
        raise BadInputError(f"unknown scenario {sorted(unknown)[0]}: choose from {', '.join(SCENARIOS)}")
    scenarios = [(name, fn) for name, fn in _scenarios(prompts, plan) if name in chosen]
    main = measure(variants, scenarios, plan.reps, list(METRICS), progress)

    baseline_ids = main["runs"]["baseline"]["_ids"][0]
    correctness = {}
    for name in ("engine", "fastpath"):
        ids = main["runs"][name]["_ids"][0]
        diff = first_difference(baseline_ids, ids)
        correctness[name] = {"equal": diff is None, "first_difference": diff, "compared_tokens": len(baseline_ids)}
    metrics = main["metrics"]
    derived = {
        "followup_reuse_share": {name: _ratio(metrics["followup_ttft_reuse_s"]["median"][name],
                                              metrics["followup_ttft_full_s"]["median"][name])
                                 for name in ("engine", "fastpath")},
        "followup_reused_tokens": {name: _median(main["runs"][name].get("_reused_tokens", []))
                                   for name in ("engine", "fastpath")},
        "kv_cache_speedup": {name: _ratio(metrics["decode_tok_s"]["median"][name],
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
    per_token = _bytes_per_token(loaded)
    roofline = {}
    for name, rate in metrics["decode_tok_s"]["median"].items():
        achieved = per_token * rate if rate else None
        roofline[name] = {"achieved_bytes_s": achieved,
                          "share": achieved / bandwidth.read_bytes_s if achieved else None}
    facts = loaded.facts
    runner = fast.last_runner
    return {
        "schema": SCHEMA,
        "machine": machine_description(device),
        "settings": {"model": args.model, "precision": facts.precision, "device": device,
                     "scenarios": [name for name, _ in scenarios],
                     "tokens": plan.tokens, "reps": plan.reps, "quick": bool(args.quick),
                     "no_kv_tokens": plan.no_kv_tokens, "greedy": True,
                     "prompt_tokens": {k: _count(loaded.tokenizer, v) for k, v in prompts.items()}},
        "model": {"name": facts.name, "architecture": facts.architecture, "params": facts.params,
                  "weights_bytes": facts.weights_bytes, "bytes_read_per_token": per_token,
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
        "quality": {"tokens": len(reference.top1) + 1, "perplexity": reference.perplexity},
        "elapsed_s": time.perf_counter() - t_start,
    }


def _other_precision(args: argparse.Namespace, precision: str, prompts: dict[str, Any], plan: Plan,
                     progress: Callable[[str], None], reference: Predictions) -> dict[str, Any]:
    """Decode tok/s and long-prompt TTFT of every variant in another precision (the model loaded again,
    then freed), and its teacher-forced agreement with the main precision and perplexity."""
    import gc

    from engine.errors import EngineError
    from engine.generate.fastpath import unsupported_reason
    from engine.bench.quality import agreement, predict, quality_ids

    progress(f"loading {args.model} ({precision})")
    try:
        loaded = _load(args.model, precision, args.device)
    except EngineError as exc:
        return {"error": str(exc)}
    reason = unsupported_reason(loaded.model)
    variants: list[Any] = [Baseline(loaded), Engine("engine", loaded, _plain_factory)]
    if reason is None:
        variants.append(Engine("fastpath", loaded, _fast_factory(args.compile)))

    def decode(v: Any) -> dict[str, Any]:
        sample = v.run(prompts["short"], plan.tokens)
        return {"decode_tok_s": sample.decode_tok_s, "ttft_short_s": sample.ttft_s}

    def long_prompt(v: Any) -> dict[str, Any]:
        return {"ttft_long_s": v.run(prompts["long"], 1).ttft_s}

    result = measure(variants, [("decode", decode), ("long", long_prompt)], plan.reps,
                     ["decode_tok_s", "ttft_short_s", "ttft_long_s"], lambda m: progress(f"{precision}: {m}"))
    progress(f"{precision}: teacher-forced quality")
    mine = predict(loaded.model, quality_ids(loaded.tokenizer))
    out = {"weights_bytes": loaded.facts.weights_bytes, "fastpath_active": reason is None,
           "fastpath_reason": reason, "decode_tok_s": result["metrics"]["decode_tok_s"],
           "ttft_short_s": result["metrics"]["ttft_short_s"], "ttft_long_s": result["metrics"]["ttft_long_s"],
           "top1_agreement": agreement(mine, reference), "perplexity": mine.perplexity,
           "warmup_s": result["warmup_s"]}
    del loaded, variants
    gc.collect()
    return out


# ---------------------------------------------------------------------------------------- output


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "s":
        return f"{value * 1000:.0f} ms"
    return f"{value:.1f}"


def format_table(result: dict[str, Any]) -> str:
    """The readable report: one row per figure, one column per variant, ratios to the baseline."""
    m = result["machine"]
    s = result["settings"]
    lines = [f"Miaohui bench: {result['model']['name']} {s['precision']} on {s['device']} "
             f"({m['cpu']}, {m['cpu_capability']}, {m['cores_logical']} cores, {m['torch_threads']} torch threads, "
             f"torch {m['torch']} / transformers {m['transformers']}"
             f"{', ' + m['gpu'] if m['gpu'] else ''})",
             f"{s['tokens']} new tokens, greedy, {s['reps']} reps, medians; ratio = variant ÷ baseline; "
             f"load average {m['load_average_1m']}", ""]
    header = f"{'figure':<26}{'baseline':>11}{'engine':>11}{'fastpath':>11}{'engine÷b':>10}{'fast÷b':>9}"
    lines += [header, "-" * len(header)]
    for name, metric in result["metrics"].items():
        med, ratio, unit = metric["median"], metric["ratio"], metric["unit"]
        label = f"{name} ({unit})"
        ratios = "".join(f"{('%.2f×' % ratio[k]) if ratio.get(k) else '-':>{w}}" for k, w in (("engine", 10),
                                                                                              ("fastpath", 9)))
        lines.append(f"{label:<26}" + "".join(f"{_fmt(med.get(v), unit):>11}" for v in VARIANTS) + ratios)
    d = result["derived"]
    bw = result["memory_bandwidth"]
    lines += ["", f"follow-up TTFT, reuse ÷ full re-prefill: engine {_pct(d['followup_reuse_share']['engine'])}, "
                  f"fastpath {_pct(d['followup_reuse_share']['fastpath'])} "
                  f"(reused {d['followup_reused_tokens']['engine']} of {s['prompt_tokens']['followup']} tokens)",
              f"KV cache on ÷ off (decode tok/s): baseline {_x(d['kv_cache_speedup']['baseline'])}, "
              f"engine {_x(d['kv_cache_speedup']['engine'])}",
              f"memory bandwidth (measured now): read {bw['read_bytes_s'] / 1e9:.1f} GB/s, copy "
              f"{bw['copy_bytes_s'] / 1e9:.1f} GB/s; weights read per token "
              f"{result['model']['bytes_read_per_token'] / 1e6:.0f} MB -> roofline {bw['roofline_tok_s']:.0f} tok/s",
              "roofline share (achieved ÷ measured read bandwidth): " + ", ".join(
                  f"{k} {_pct(v['share'])}" for k, v in result["roofline"].items())]
    fp = result["fastpath"]
    lines.append(f"fast path: {'active' if fp['active'] else 'not used (' + str(fp['reason']) + ')'}"
                 + (f", compiled in {fp['compile_s']:.1f} s" if fp.get("compile_s") else "")
                 + (f"; its matrix products alone take {fp['matmul_s_per_token'] * 1000:.1f} ms per token "
                    f"(ceiling {fp['matmul_ceiling_tok_s']:.0f} tok/s)" if fp.get("matmul_s_per_token") else ""))
    lines.append("greedy tokens equal to baseline: " + ", ".join(
        f"{k} {'yes' if c['equal'] else 'no, first difference at token ' + str(c['first_difference'])}"
        for k, c in result["correctness"].items()))
    lines.append("warm-up (excluded): " + ", ".join(f"{k} {v:.1f} s" for k, v in result["warmup_s"].items()))
    for name, p in result["precisions"].items():
        if "error" in p:
            lines.append(f"{name}: {p['error']}")
            continue
        med, ratio = p["decode_tok_s"]["median"], p["decode_tok_s"]["ratio"]
        lines.append(f"{name}: weights {p['weights_bytes'] / 1e6:.0f} MB, decode tok/s " + ", ".join(
            f"{k} {_fmt(v, 'tok/s')}" + (f" ({ratio[k]:.2f}×)" if ratio.get(k) else "") for k, v in med.items()))
        main_decode = result["metrics"]["decode_tok_s"]["median"]
        fast = med.get("fastpath")
        ttft = p["ttft_long_s"]["median"].get("fastpath")
        main_ttft = result["metrics"]["ttft_long_s"]["median"].get("fastpath")
        short = _ratio(p["ttft_short_s"]["median"].get("fastpath"),
                       result["metrics"]["ttft_short_s"]["median"].get("fastpath"))
        lines.append(f"  fastpath {name} ÷ generate() {s['precision']}: {_x(_ratio(fast, main_decode.get('baseline')))}, "
                     f"÷ fastpath {s['precision']}: {_x(_ratio(fast, main_decode.get('fastpath')))}; "
                     f"TTFT ÷ fastpath {s['precision']}: short prompt {_x(short)}, long prompt "
                     f"{_x(_ratio(ttft, main_ttft))}; weights ÷ "
                     f"{s['precision']}: {_ratio(p['weights_bytes'], result['model']['weights_bytes']):.2f}; "
                     f"top-1 agreement {_pct(p['top1_agreement'])}, perplexity {p['perplexity']:.2f} "
                     f"({s['precision']}: {result['quality']['perplexity']:.2f})")
    lines.append(f"total {result['elapsed_s']:.0f} s")
    return "\n".join(lines)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.0f}%"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}×"


def run(args: argparse.Namespace) -> int:
    from engine.errors import EngineError

    def progress(message: str) -> None:
        print(f"[bench] {message}", file=sys.stderr, flush=True)

    try:
        result = bench(args, progress)
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(format_table(result))
    return 0
