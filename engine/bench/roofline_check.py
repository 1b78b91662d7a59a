"""``engine bench --roofline-check`` (issue 30's done-when: "`engine chat --json` carries the bandwidth figures; on the
default model int4 they agree with `engine bench`'s roofline within 10% in the same run"): both on one loaded model,
back to back, in one command.

The bench's side is ``engine bench``'s arithmetic (``engine.bench.run``): the read bandwidth measured now
(``engine.bench.membw``), the median greedy decode rate over ``reps`` replies, × the weight bytes one step reads
(``weights_read_per_token``). The chat side is exactly what ``engine chat --json`` prints under ``roofline``
(``engine.cli.replies.result_json`` with ``local_roofline``: the bandwidth kept in the data folder, the weights and
the reply's measured KV bytes) for one more reply of the same prompt. Prints both, their achieved bandwidths' ratio
(chat ÷ bench) and whether it is within ``AGREE`` of 1. Owns the pairing only; every figure comes from the modules
named. A noisy machine moves both: the ratio, not either figure, is the check.
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any, Callable

from engine.events import Finished, Message
from engine.inputs import LoadSpec, SamplingConfig

AGREE = 0.10  # the "within 10%"
PROMPT = "Write a long story about a cat who learns to cook."


def _reply(session: Any, tokens: int) -> Finished:
    config = SamplingConfig(temperature=0.0, repetition_penalty=1.0, max_new_tokens=tokens)
    finished = [e for e in session.generate([Message("user", PROMPT)], config) if isinstance(e, Finished)][-1]
    if finished.reason == "error":
        raise RuntimeError(finished.error or "generation failed")
    return finished


def roofline_check(model: str, precision: str, device: str, tokens: int = 64, reps: int = 3,
                   progress: Callable[[str], None] = lambda _m: None) -> dict[str, Any]:
    """Both rooflines of ``model`` and their ratio, as one JSON-ready dict."""
    from engine.bench.membw import measure_bandwidth
    from engine.bench.roofline import weights_read_per_token
    from engine.cli.replies import local_roofline, result_json
    from engine.generate.session import ChatSession
    from engine.models.loader import load_model

    progress(f"loading {model} ({precision})")
    loaded = load_model(LoadSpec(model=model, precision=precision, device=device), chat=True)
    session = ChatSession(loaded)
    _reply(ChatSession(loaded), 4)  # warm-up: first-call allocations out of the timed replies
    progress("engine bench's roofline: bandwidth, then decode")
    bandwidth = measure_bandwidth(loaded.facts.device)
    per_token = weights_read_per_token(loaded)
    rates = [_reply(ChatSession(loaded), tokens).metrics.decode_tok_s or 0.0 for _ in range(max(1, reps))]
    rate = statistics.median(rates)
    bench = {"read_bytes_s": bandwidth.read_bytes_s, "bytes_read_per_token": per_token, "decode_tok_s": rate,
             "decode_tok_s_runs": rates, "achieved_bytes_s": per_token * rate if rate else None,
             "share": per_token * rate / bandwidth.read_bytes_s if rate and bandwidth.read_bytes_s else None}
    progress("engine chat --json's roofline")
    figures = local_roofline(loaded)
    chat = result_json(_reply(session, tokens), loaded.facts, figures)["roofline"]
    ratio = (chat["achieved_bytes_s"] / bench["achieved_bytes_s"]
             if chat.get("achieved_bytes_s") and bench["achieved_bytes_s"] else None)
    return {"model": loaded.facts.name, "precision": loaded.facts.precision, "device": loaded.facts.device,
            "tokens": tokens, "reps": reps, "bench": bench, "chat": chat,
            "chat_over_bench_achieved": ratio, "share_ratio": (chat["share"] / bench["share"]
                                                               if chat.get("share") and bench["share"] else None),
            "agree_within_10pct": ratio is not None and abs(ratio - 1.0) <= AGREE}


def format_check(result: dict[str, Any]) -> str:
    gb = lambda v: f"{v / 1e9:.2f} GB/s" if v else "—"  # noqa: E731
    b, c = result["bench"], result["chat"]
    ratio = result["chat_over_bench_achieved"]
    return "\n".join([
        f"{result['model']} ({result['precision']}, {result['device']}), {result['tokens']} tokens",
        f"engine bench  : {b['decode_tok_s']:.1f} tok/s × {b['bytes_read_per_token']:,} B = "
        f"{gb(b['achieved_bytes_s'])}"
        f" of {gb(b['read_bytes_s'])}",
        f"engine chat   : {c['tok_s'] or 0:.1f} tok/s × {c['bytes_per_token']:,} B = {gb(c['achieved_bytes_s'])}"
        f" of {gb(c['bandwidth_bytes_s'])} ({c['verdict'] or '—'})",
        f"chat ÷ bench  : {ratio:.3f}" if ratio else "chat ÷ bench  : —",
        "agree within 10%: " + ("yes" if result["agree_within_10pct"] else "no")])


def add_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--roofline-check", action="store_true",
                        help="engine bench's decode roofline and engine chat --json's on one loaded model, back to "
                             "back, and their ratio (the goal: within 10%%; try --precision int4)")
