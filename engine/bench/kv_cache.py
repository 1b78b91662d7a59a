"""``python -m engine.bench.kv_cache``: the 8-bit KV cache against the 16-bit one, side by side in one run.

On one loaded model (the default one, bf16 on the CPU unless told otherwise), two fast runners that differ only in
their cache (``FastRunner(kv_precision="auto")`` and ``"int8"``, ``engine.executor.kv_cache``) give:

- KV bytes: each runner's measured ``kv_bytes()`` after the same long prompt, and their ratio (the int8 elements
  are exactly half of 16-bit ones; the fp16 scales, one per layer, KV head and position, add 2 / (2 · head_dim));
- top-1 agreement over ``--positions`` teacher-forced positions of a real text (``engine.quant.quality``'s fixed
  prose), fed the true text, never the model's guesses, twice: every logit the decode step's own computation
  (``FastRunner.verify``, bit for bit what one-token decodes give: the figure chat sees), and every logit from
  prefill's forward over 128-token chunks (``FastRunner.score``: the cache read back as stored, fast enough for a
  test);
- decode tokens/s at a long context (``--context`` cached positions): each runner decodes ``--tokens`` tokens
  greedily from the same cached prompt, cropped back before every repetition; the two alternate within each
  repetition (so both see the same machine load) and the median of ``--reps`` is compared. Where the 8-bit runner
  takes the native decode step (engine/executor/native_step.py: int8/int4 weights), the same runner is timed a third
  time on the Python step (``"<kv> python step"``, its native step set aside for those runs), so the native step's
  gain over an 8-bit cache is measured on the very same cache; and a fourth time on the Python step with the 8-bit
  cache's torch operations (``"<kv> python step, torch attention"``, ``MIAOHUI_NATIVE_KV=0`` for those runs: the
  step as it was before the native ops, engine/executor/kv_cache.py).

``--positions 0`` skips the agreement (a long ``--context`` speed run); ``--also 2000`` times decode at those shorter
contexts too, on the same runners cropped back (``decode_tok_s_also``).

Prints one JSON object, the machine named (CPU, cores, load average: a shared machine's figures are noisy).
``python -m engine bench --kv int8`` adds the same figures to its own JSON under ``kv_cache``. Owns these
comparisons only; never asserts a speed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any, Callable, Sequence

import torch

from engine.inputs import KV_PRECISIONS, check_kv_precision

POSITIONS = 512  # teacher-forced positions (the target: top-1 agreement ≥ 99% over 512)
CONTEXT = 2000  # cached positions before the timed decode
TOKENS = 32
REPS = 3
VERIFY_CHUNK = 32  # tokens per verify call: the decode step's numbers, the weights read once per chunk


def teacher_forced_top1(runner: Any, ids: Sequence[int], chunk: int = VERIFY_CHUNK) -> list[int]:
    """The argmax after each of ``ids[:-1]``, every position's logits the decode step's (the first id prefilled, the
    rest checked ``chunk`` at a time by ``verify``, which computes exactly what one-token decodes compute)."""
    runner.reset()
    top1 = [int(list(runner.prefill(ids[:1]))[-1][1][0].argmax())]
    rest = list(ids[1:-1])
    for start in range(0, len(rest), chunk):
        top1.extend(int(i) for i in runner.verify(rest[start:start + chunk]).argmax(dim=-1))
    return top1


def scored_top1(runner: Any, ids: Sequence[int], chunk: int = 128) -> list[int]:
    """The argmax after each of ``ids[:-1]`` from prefill's forward, ``chunk`` tokens at a time (``FastRunner.score``)."""
    runner.reset()
    return [int(i) for i in runner.score(list(ids[:-1]), chunk).argmax(dim=-1)]


def agreement(a: Sequence[int], b: Sequence[int]) -> float:
    """Share of positions where both predict the same next token."""
    return sum(x == y for x, y in zip(a, b)) / max(1, min(len(a), len(b)))


def decode_rate_at(runner: Any, context: int, tokens: int) -> float:
    """Greedy decode tokens/s from ``context`` cached positions (cropped back to them first)."""
    runner.crop(context)
    logits = runner.decode(int(runner.cached_ids[-1]))  # the first step after the crop, not timed
    runner.sync()
    t0 = time.perf_counter()
    for _ in range(tokens):
        logits = runner.decode(int(logits[0].argmax()))
    runner.sync()
    return tokens / (time.perf_counter() - t0)


def measure(loaded: Any, kv: str = "int8", positions: int = POSITIONS, context: int = CONTEXT,
            tokens: int = TOKENS, reps: int = REPS,
            progress: Callable[[str], None] = lambda _m: None, also: Sequence[int] = ()) -> dict[str, Any]:
    """The comparison on ``loaded`` (a fast-path model): bytes, agreement and decode rates, 16-bit vs ``kv``."""
    from engine.executor.fastpath import FastRunner
    from engine.native.library import NATIVE_KV_ENV
    from engine.quant.quality import quality_ids

    check_kv_precision(kv)
    model, tokenizer = loaded.model, loaded.tokenizer
    limit = loaded.facts.context_length or context + tokens + 2
    context = min(context, limit - tokens - 2)
    room = max(context + tokens + 2, positions + 1)
    runners = {"16-bit": FastRunner(model, max_positions=room),
               kv: FastRunner(model, max_positions=room, kv_precision=kv)}
    top1: dict[str, list[int]] = {name: [] for name in runners}
    scored: dict[str, list[int]] = {name: [] for name in runners}
    if positions > 0:
        progress(f"teacher-forced top-1 over {positions} positions")
        text = quality_ids(tokenizer, positions + 1)
        top1 = {name: teacher_forced_top1(runner, text) for name, runner in runners.items()}
        scored = {name: scored_top1(runner, text) for name, runner in runners.items()}
    progress(f"prefilling {context} positions")
    prompt = quality_ids(tokenizer, context)
    for runner in runners.values():
        runner.reset()
        list(runner.prefill(prompt))
    kv_bytes = {name: runner.kv_bytes()[0] for name, runner in runners.items()}
    # (name, runner, its decode step): the 8-bit runner's native step and, where it has one, its Python step
    timed = [(name, runner, runner._native) for name, runner in runners.items()]
    if runners[kv]._native is not None:
        timed.append((f"{kv} python step", runners[kv], None))
        timed.append((f"{kv} python step, torch attention", runners[kv], None))
    def rates_at(at: int) -> dict[str, list[float]]:
        rates: dict[str, list[float]] = {name: [] for name, _, _ in timed}
        for rep in range(reps):
            progress(f"decode at {at} positions, repetition {rep + 1}/{reps}")
            for name, runner, step in timed if rep % 2 == 0 else reversed(timed):  # alternated: the same load
                saved, runner._native = runner._native, step
                if name.endswith("torch attention"):
                    os.environ[NATIVE_KV_ENV] = "0"
                try:
                    rates[name].append(decode_rate_at(runner, at, tokens))
                finally:
                    runner._native = saved
                    os.environ.pop(NATIVE_KV_ENV, None)
        return rates

    def summary(at: int, rates: dict[str, list[float]]) -> dict[str, Any]:
        medians = {name: statistics.median(values) for name, values in rates.items()}
        return {"context": at, "tokens": tokens, "reps": reps, "runs": rates, "median": medians,
                "ratio": medians[kv] / medians["16-bit"],
                "steps": {name: "python" if step is None else "native" for name, _, step in timed}}

    shorter = [summary(at, rates_at(at)) for at in sorted(a for a in also if 0 < a < context)]
    main_rates = rates_at(context)
    facts = loaded.facts
    dense = runners["16-bit"]
    return {
        "kv_precision": kv,
        "reference": f"{str(dense._dtype).removeprefix('torch.')} cache",
        "kv_bytes": {"context": context, "16-bit": kv_bytes["16-bit"], kv: kv_bytes[kv],
                     "ratio": kv_bytes[kv] / kv_bytes["16-bit"],
                     "elements_ratio": (kv_bytes[kv] - 2 * facts.layers * facts.kv_heads * 2 * context)
                     / kv_bytes["16-bit"],
                     "scale_bytes_per_head_position": 2},
        "top1_agreement": {"positions": len(top1[kv]), "agreement": agreement(top1[kv], top1["16-bit"]),
                           "prefill_agreement": agreement(scored[kv], scored["16-bit"]),
                           "text": "engine.quant.quality fixed prose (teacher-forced; decode-step and prefill logits)"},
        "decode_tok_s": summary(context, main_rates),
        **({"decode_tok_s_also": shorter} if shorter else {}),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.bench.kv_cache", description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="default")
    parser.add_argument("--precision", default="bf16", help="the weights' precision (default bf16)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--kv", default="int8", help=f"the cache compared with the 16-bit one: {KV_PRECISIONS[-1]}")
    parser.add_argument("--positions", type=int, default=POSITIONS)
    parser.add_argument("--context", type=int, default=CONTEXT)
    parser.add_argument("--tokens", type=int, default=TOKENS)
    parser.add_argument("--reps", type=int, default=REPS)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--also", default="", help="shorter contexts timed too, comma-separated (e.g. 2000)")
    args = parser.parse_args(argv)
    from engine.errors import EngineError

    try:
        check_kv_precision(args.kv)
        if args.kv == "auto":
            raise ValueError("--kv auto is the reference itself: compare int8")
        from engine.bench.run import machine_description
        from engine.inputs import LoadSpec
        from engine.models.loader import load_model

        if args.threads:
            torch.set_num_threads(args.threads)
        loaded = load_model(LoadSpec(model=args.model, precision=args.precision, device=args.device))
        if loaded.facts.runner != "fast":
            raise ValueError(f"the int8 KV cache needs the fast runner: {loaded.facts.runner_reason}")
        figures = measure(loaded, args.kv, args.positions, args.context, args.tokens, args.reps,
                          lambda m: print(f"[kv] {m}", file=sys.stderr, flush=True),
                          [int(a) for a in args.also.split(",") if a.strip()])
    except (EngineError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    result = {"machine": machine_description(loaded.facts.device),
              "settings": {"model": args.model, "precision": loaded.facts.precision, "device": loaded.facts.device},
              **figures}
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
