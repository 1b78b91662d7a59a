"""Decode speed through the window vs the headless engine, side by side in one run.

``python -m app.gui_bench`` runs, alternately, ``python -m engine chat --json`` (the engine alone) and
``python -m app --self-test`` (the real window, bridge and worker thread, offscreen) with the same model,
precision, device, prompt, system prompt and greedy settings, several times each, and prints one JSON
object: every run's decode tok/s, the medians, and their ratio (the GUI path's share of the engine's
speed; the goal is >= 0.95). Alternating the two and taking medians keeps a noisy shared machine's drift
from favouring either side. Each run is its own process, so neither inherits the other's warm caches.

Owns only the orchestration and the arithmetic; imports no torch (the engine runs in its subprocess).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from typing import Any

from app.state.settings import ChatSettings

# A prompt the default model answers at length, so both paths run to --max-new-tokens: one thread's and two
# threads' float sums differ in the last bits, and a reply that stops at its end token could then stop at a
# different length on each side and compare different amounts of work.
PROMPT = "Write a long story about a cat who learns to cook."


def _last_json(stdout: str) -> dict[str, Any]:
    """The JSON object a command printed last (self-test prints it indented, chat on one line)."""
    start = stdout.rfind("\n{")
    text = stdout[start + 1:] if start >= 0 else stdout[stdout.find("{"):]
    return json.loads(text)


def _run(command: list[str], timeout_s: float) -> dict[str, Any]:
    env = dict(os.environ, QT_QPA_PLATFORM=os.environ.get("QT_QPA_PLATFORM", "offscreen"))
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=env, check=False)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise SystemExit(f"gui_bench: {' '.join(command[:4])} … failed (exit {done.returncode}): {tail[0]}")
    return _last_json(done.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.gui_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="default")
    parser.add_argument("--precision", default="auto")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--prompt", default=PROMPT)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--runs", type=int, default=3, help="runs of each path (alternated)")
    parser.add_argument("--timeout", type=float, default=600.0, help="per run, seconds")
    args = parser.parse_args(argv)
    system = ChatSettings().system_prompt  # what a fresh window (and so the self-test) sends
    common = ["--model", args.model, "--precision", args.precision, "--device", args.device,
              "--prompt", args.prompt, "--max-new-tokens", str(args.max_new_tokens)]
    # The self-test decodes greedily with the window's other defaults; the CLI samples unless told otherwise.
    headless_cmd = [sys.executable, "-m", "engine", "chat", *common, "--system", system, "--temperature", "0", "--json"]
    gui_cmd = [sys.executable, "-m", "app", "--self-test", *common, "--timeout", str(args.timeout)]
    runs: dict[str, list[dict[str, Any]]] = {"headless": [], "gui": []}
    for _ in range(args.runs):
        for name, command in (("headless", headless_cmd), ("gui", gui_cmd)):
            result = _run(command, args.timeout + 60)
            runs[name].append({"decode_tok_s": result.get("decode_tok_s"), "ttft_s": result.get("ttft_s"),
                               "generated_tokens": result.get("generated_tokens"),
                               "text": result.get("text", result.get("reply", ""))[:80]})
            print(f"{name:8s} {result.get('decode_tok_s') or 0:7.2f} tok/s  "
                  f"{result.get('generated_tokens')} tokens", file=sys.stderr)
    medians = {name: statistics.median(r["decode_tok_s"] for r in rs if r["decode_tok_s"]) for name, rs in runs.items()}
    report = {"model": args.model, "precision": args.precision, "device": args.device,
              "max_new_tokens": args.max_new_tokens, "runs": runs,
              "median_decode_tok_s": {k: round(v, 2) for k, v in medians.items()},
              "gui_over_headless": round(medians["gui"] / medians["headless"], 3),
              "same_length": {r["generated_tokens"] for rs in runs.values() for r in rs} == {args.max_new_tokens}}
    print(json.dumps(report, ensure_ascii=False, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
