"""What structured output costs per token: ``python -m engine.bench.structured [--model M] [--reps N] [--json]``.

In one run, on one loaded model, alternately: an unconstrained greedy reply and a reply constrained to a JSON
schema (``engine.constrain``), the same prompt and budget, ``reps`` times each. Reported: decode tok/s of each
(the medians) and their ratio; the mask's cost per token on the decode loop's critical path (``MaskStats.wait_s``:
waiting for the mask built during the forward, and applying it) and its build time (``compute_s``, overlapped);
and the mask alone, un-overlapped: the constrained reply's tokens replayed through a fresh constraint with no
model (build + apply + advance per token). The figures are in docs/BENCHMARK.md, "Structured output".
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import time
from typing import Any

SCHEMA = {"type": "object", "properties": {
    "city": {"type": "string", "maxLength": 40}, "country": {"type": "string", "maxLength": 40},
    "population_millions": {"type": "number"}, "landmarks": {"type": "array", "items": {"type": "string",
                                                                                         "maxLength": 40},
                                                              "maxItems": 4}},
    "required": ["city", "country", "population_millions", "landmarks"], "additionalProperties": False}
PROMPT = "Describe Paris as a JSON object: its country, population and famous landmarks."


def cpu_name() -> str:
    """The CPU's model name as ``lscpu`` gives it (the platform's processor string elsewhere)."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return platform.processor() or "unknown"


def _reply(session: Any, config: Any, constraint: Any) -> Any:
    from engine.events import Finished, Message

    events = list(session.generate([Message("user", PROMPT)], config, constraint=constraint))
    finished = events[-1]
    assert isinstance(finished, Finished)
    return finished


def measure(model: str = "default", precision: str = "bf16", reps: int = 3, tokens: int = 96,
            schema: dict[str, Any] | None = None) -> dict[str, Any]:
    """The figures of one run (see the module's docstring); ``schema`` replaces ``SCHEMA``."""
    from engine.constrain.matcher import TokenConstraint
    from engine.constrain.spec import ConstraintSpec
    from engine.generate.session import ChatSession
    from engine.inputs import LoadSpec, SamplingConfig
    from engine.models.loader import load_model
    import torch

    loaded = load_model(LoadSpec(model=model, precision=precision, device="cpu"))
    spec = ConstraintSpec.json_schema(schema or SCHEMA)
    config = SamplingConfig(temperature=0, repetition_penalty=1.0, max_new_tokens=tokens)
    session = ChatSession(loaded)
    free, bound, wait, build = [], [], [], []
    ids: list[int] = []
    _reply(session, config, None)  # warm-up: first-call allocations stay out of the figures
    for _ in range(reps):
        free.append(_reply(session, config, None).metrics.decode_tok_s)
        constraint = TokenConstraint(spec, loaded.tokenizer, loaded.eos_token_ids)
        finished = _reply(session, config, constraint)
        bound.append(finished.metrics.decode_tok_s)
        wait.append(constraint.stats.wait_s / constraint.stats.steps)
        build.append(constraint.stats.compute_s / constraint.stats.steps)
        ids = list(loaded.tokenizer.encode(finished.text, add_special_tokens=False))
    json.loads(finished.text)  # the constrained reply is JSON (the bench measures a working constraint)
    vocab = loaded.model.get_output_embeddings().weight.shape[0]
    replay = TokenConstraint(spec, loaded.tokenizer, loaded.eos_token_ids)
    scores = torch.zeros(1, vocab)
    t = time.perf_counter()
    for token in ids:
        replay.mask_(scores)
        replay.advance(token)
    alone = (time.perf_counter() - t) / max(1, len(ids))
    med = statistics.median
    return {"model": loaded.facts.name, "precision": loaded.facts.precision, "cpu": cpu_name(),
            "cores": os.cpu_count(), "load_average_1m": os.getloadavg()[0], "reps": reps, "tokens": tokens,
            "unconstrained_tok_s": med(free), "constrained_tok_s": med(bound),
            "ratio": med(bound) / med(free), "mask_wait_ms_per_token": 1000 * med(wait),
            "mask_build_ms_per_token": 1000 * med(build), "mask_alone_ms_per_token": 1000 * alone,
            "replayed_tokens": len(ids), "constrained_text": finished.text}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="default")
    parser.add_argument("--precision", default="bf16")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = measure(args.model, args.precision, args.reps, args.tokens)
    if args.json:
        print(json.dumps(result, ensure_ascii=False))
        return
    print(f"{result['model']} {result['precision']} on {result['cpu']} ({result['cores']} cores, load "
          f"{result['load_average_1m']:.1f}): decode {result['unconstrained_tok_s']:.1f} tok/s free, "
          f"{result['constrained_tok_s']:.1f} tok/s constrained (x{result['ratio']:.2f}); mask per token "
          f"{result['mask_wait_ms_per_token']:.3f} ms on the critical path, {result['mask_build_ms_per_token']:.3f} "
          f"ms to build (overlapped), {result['mask_alone_ms_per_token']:.3f} ms alone")


if __name__ == "__main__":
    main()
