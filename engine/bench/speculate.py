"""``python -m engine.bench.speculate``: speculative decoding against plain decoding, side by side in one run.

Comparisons on the default model (bf16 on the CPU, and int4 for the rows that say so), each run
alternating plain and speculative replies so the two see the same machine load, greedy so the texts must match
token for token (a mismatch is reported, never hidden):

- prompt lookup on repeat-heavy prompts (rewrite a given ~300-word text; edit a given function): decode tokens/s
  against plain (the issue's target: at least 1.8x, on the rewrite: see ``COMPARISONS`` for why not the edit);
- self-speculation, the model's int4 copy drafting for its bf16 weights, on an ordinary prompt (target 1.4x);
- prompt lookup on a prompt where nothing repeats: what the lookups and failed drafts cost (target: at most 3%);
- the prompt lookup rows again on the model's int4 weights (native decode step): at least 0.95x everywhere, 1.8x on
  the rewrite (issue 45).

Each row says whether its target was met and, for a miss, why: ``step_cost``, a speculative step's time over a plain
step's (the speed-up is tokens per target step ÷ this): few accepted drafts or a costly verify.

Prints one JSON object (every run's figures and the median ratios) and, with ``--markdown``, the table
``docs/BENCHMARK.md`` quotes. Owns these prompts and comparisons; the timing is the session's own metrics
(``decode_tok_s``: tokens after the first over the time between the first and the last).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
from dataclasses import dataclass
from typing import Any, Sequence

from engine.inputs import LoadSpec, SamplingConfig, SpeculationConfig

REWRITE_TEXT = (
    "The old lighthouse on the northern cape has guided ships for more than a century. It was built in 1894 by a "
    "small crew of masons who carried every stone up the cliff path by hand, because the road that now winds "
    "along the coast did not exist yet. The keeper lived in a narrow cottage beside the tower with his wife and "
    "three children, and each evening he climbed the hundred and twelve steps to light the lamp. On stormy "
    "nights he stayed awake until dawn, wiping salt from the glass and winding the clockwork that turned the "
    "great lens. Fishermen from the village below said they could set their watches by the beam, which swept "
    "across the water every twelve seconds without fail. In 1952 the lamp was replaced by an electric light, "
    "and the keeper's family moved into town, but the cottage was never torn down. Today it holds a small "
    "museum run by volunteers, who show visitors the brass tools, the logbooks and the faded photographs of the "
    "people who once lived there. The logbooks are the most interesting part of the collection. They record the "
    "weather, the ships that passed, the oil that was burned and, now and then, a short note about life on the "
    "cape: a wedding in the village, a whale seen close to the rocks, a winter so cold that the harbour froze. "
    "Reading them, one gets a sense of how lonely and how full the work must have been. The tower itself is "
    "still in use. Its light is automatic now and is checked once a month by an engineer who drives out from "
    "the city. Visitors may climb to the gallery on summer afternoons, and on a clear day they can see the "
    "islands far to the west, where the next lighthouse stands on a bare rock in the sea.")
EDIT_FUNCTION = '''def summarize_orders(orders, currency="EUR"):
    """Total, count and average of the paid orders, per customer."""
    totals = {}
    counts = {}
    for order in orders:
        if order["status"] != "paid":
            continue
        customer = order["customer"]
        amount = order["amount"]
        if order["currency"] != currency:
            amount = convert(amount, order["currency"], currency)
        totals[customer] = totals.get(customer, 0) + amount
        counts[customer] = counts.get(customer, 0) + 1
    result = []
    for customer in sorted(totals):
        average = totals[customer] / counts[customer]
        result.append({"customer": customer, "total": round(totals[customer], 2),
                       "count": counts[customer], "average": round(average, 2)})
    return result
'''
PROMPTS = {
    # A text to repeat, the instruction first. The earlier prompt (the text first, then "Copy the text above, but
    # write 'tower' instead of 'lighthouse'.") was copied by the bf16 model everywhere and by int4 on AVX-512 CPUs,
    # but int4 on an AVX2-only EPYC paraphrased it from the first sentence on (37% of lookup drafts accepted, 1.3
    # tokens a step): no drafter of the conversation gets past that, so the row measured the model, not speculation.
    # This one is copied at int4 (90%) and bf16 (88%) there; text-first "rewrite exactly, word for word" paraphrases.
    "rewrite": "Repeat the following text word for word:\n\n" + REWRITE_TEXT,
    "edit": ("Rename the variable `totals` to `sums` in this function and output the whole function:\n\n"
             "```python\n" + EDIT_FUNCTION + "```"),
    "ordinary": "Explain in a few paragraphs why the sky is blue and why sunsets are red.",
    "fresh": "Write a short story about a fox who learns to paint, with a surprising ending.",
}
# (name, prompt, target precision, speculation, the target for the ratio or None): the three targets, and
# the edit beside them. The edit is no test of lookup on the default model: asked to edit a function and return it
# (twelve phrasings tried, docs/BENCHMARK.md) the 135M model writes other code, of whose 160 tokens at most ~34
# continue an earlier n-gram, so no drafter of the conversation gets past ~1.27 tokens per step; a model that does
# the edit copies most of the function. The rewrite is the repeat-heavy target. Nothing repeats: a cost of at most 3%.
# At int4 (issue 45) the same prompt lookup rows: the int4 step is native and fast, so a verify must pay for itself
# against it (engine/speculate/length.py's cost model) — every mode at least 0.95x, the copied text at least 1.8x.
# Self-speculation has no int4 row: its drafter is the int4 copy of a model that is then int4 already.
COMPARISONS = (
    ("prompt lookup, rewrite a text", "rewrite", "bf16", "prompt-lookup", 1.8),
    ("self-speculation int4 -> bf16", "ordinary", "bf16", "self", 1.4),
    ("prompt lookup, nothing repeats", "fresh", "bf16", "prompt-lookup", 0.97),
    ("prompt lookup, edit a function", "edit", "bf16", "prompt-lookup", None),
    ("int4: prompt lookup, rewrite a text", "rewrite", "int4", "prompt-lookup", 1.8),
    ("int4: prompt lookup, nothing repeats", "fresh", "int4", "prompt-lookup", 0.95),
    ("int4: prompt lookup, edit a function", "edit", "int4", "prompt-lookup", 0.95),
)
WARM_UP_TOKENS = 8  # first-call allocations and the int4 copy's kernels: a short reply warms them as a long one


@dataclass(frozen=True)
class Run:
    decode_tok_s: float
    tokens: tuple[int, ...]
    metrics: dict[str, Any]


def reply(session: Any, prompt: str, config: SamplingConfig) -> Run:
    from engine.events import Finished, Message, Token

    ids: list[int] = []
    finished = None
    for event in session.generate([Message("user", prompt)], config):
        if isinstance(event, Token):
            ids.append(event.token_id)
        elif isinstance(event, Finished):
            finished = event
    if finished is None or finished.reason == "error" or finished.metrics.decode_tok_s is None:
        raise RuntimeError(f"the reply failed: {finished.error if finished else 'no result'}")
    session.reset()  # every run prefills the same prompt: no run reuses another's cache
    return Run(finished.metrics.decode_tok_s, tuple(ids), finished.metrics.to_dict())


def compare(loaded: Any, name: str, prompt: str, method: str, rounds: int, max_new_tokens: int) -> dict[str, Any]:
    """``rounds`` alternating plain / speculative replies; medians and their ratio."""
    from engine.generate.session import ChatSession

    config = SamplingConfig(temperature=0.0, max_new_tokens=max_new_tokens)
    plain_session = ChatSession(loaded)
    spec_session = ChatSession(loaded, speculation=SpeculationConfig(method))
    warm = SamplingConfig(temperature=0.0, max_new_tokens=WARM_UP_TOKENS)
    reply(plain_session, prompt, warm)  # warm both (see WARM_UP_TOKENS)
    reply(spec_session, prompt, warm)
    plain_runs, spec_runs = [], []
    for _ in range(rounds):
        plain_runs.append(reply(plain_session, prompt, config))
        spec_runs.append(reply(spec_session, prompt, config))
    plain_rate = statistics.median(r.decode_tok_s for r in plain_runs)
    spec_rate = statistics.median(r.decode_tok_s for r in spec_runs)
    last = spec_runs[-1].metrics
    per_step = last["tokens_per_step"]
    return {
        "comparison": name, "speculation": method, "tokens": len(plain_runs[0].tokens),
        "identical": all(r.tokens == plain_runs[0].tokens for r in plain_runs + spec_runs),
        "plain_tok_s": plain_rate, "speculative_tok_s": spec_rate, "speedup": spec_rate / plain_rate,
        "acceptance_rate": last["acceptance_rate"], "tokens_per_step": per_step,
        # The profile of a miss: a speculative step's time ÷ a plain step's (speed-up = tokens per step ÷ this), so
        # a low ratio is either few accepted drafts (tokens per step) or a costly verify (this).
        "step_cost": per_step * plain_rate / spec_rate if per_step else None,
        "drafts": last["drafts"], "draft_tokens": last["draft_tokens"], "accepted_tokens": last["accepted_tokens"],
        "plain_runs_tok_s": [r.decode_tok_s for r in plain_runs],
        "speculative_runs_tok_s": [r.decode_tok_s for r in spec_runs],
    }


def cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def markdown(result: dict[str, Any]) -> str:
    lines = [f"{result['model']} ({result['precision']}: each row's as it says) on {result['cpu']} "
             f"({result['threads']} threads), greedy, {result['max_new_tokens']} new tokens, median of "
             f"{result['rounds']} alternating runs each:", "",
             "| comparison | plain tok/s | speculative tok/s | ratio | target | acceptance | tokens / target step | "
             "step cost vs plain | same text |", "|---|---|---|---|---|---|---|---|---|"]
    for row in result["comparisons"]:
        acceptance = "—" if row["acceptance_rate"] is None else f"{row['acceptance_rate']:.0%}"
        per_step = "—" if row["tokens_per_step"] is None else f"{row['tokens_per_step']:.2f}"
        cost = "—" if row.get("step_cost") is None else f"{row['step_cost']:.2f}×"
        target = row.get("target")
        verdict = "—" if target is None else f"≥ {target:.2f}×: {'met' if row['speedup'] >= target else 'MISSED'}"
        lines.append(f"| {row['comparison']} | {row['plain_tok_s']:.1f} | {row['speculative_tok_s']:.1f} | "
                     f"{row['speedup']:.2f}× | {verdict} | {acceptance} | {per_step} | {cost} | "
                     f"{'yes' if row['identical'] else 'NO'} |")
    return "\n".join(lines)


def measure(model: str = "default", rounds: int = 3, max_new_tokens: int = 160, only: str | None = None,
            targets_only: bool = False) -> dict[str, Any]:
    """Every comparison (or those whose name contains ``only``; ``targets_only``: those with a target) on ``model``
    loaded on the CPU at each row's precision (bf16, int4), as one JSON-ready dict (``python -m engine.bench.speculate``
    and ``engine bench --speculation`` print it)."""
    import torch

    from engine.models.loader import load_model

    chosen = [row for row in COMPARISONS
              if (only is None or only in row[0]) and not (targets_only and row[4] is None)]
    loaded: dict[str, Any] = {}  # one load per precision, made when its first row runs
    rows = []
    for name, prompt, precision, method, target in chosen:
        if precision not in loaded:
            loaded[precision] = load_model(LoadSpec(model=model, precision=precision, device="cpu"))
        rows.append({**compare(loaded[precision], name, PROMPTS[prompt], method, rounds, max_new_tokens),
                     "precision": precision, "target": target})
    first = next(iter(loaded.values()), None)
    return {"model": first.facts.name if first else model, "precision": ", ".join(loaded), "cpu": cpu_name(),
            "threads": torch.get_num_threads(), "rounds": rounds, "max_new_tokens": max_new_tokens,
            "comparisons": rows}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.bench.speculate", description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="default")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=160)
    parser.add_argument("--only", default=None, help="run only the comparisons whose name contains this")
    parser.add_argument("--markdown", action="store_true", help="print the docs/BENCHMARK.md table too")
    parser.add_argument("--targets-only", action="store_true", help="only the rows with a target (no bf16 edit)")
    args = parser.parse_args(argv)
    result = measure(args.model, args.rounds, args.max_new_tokens, args.only, args.targets_only)
    print(json.dumps(result, ensure_ascii=False))
    if args.markdown:
        print(markdown(result), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
