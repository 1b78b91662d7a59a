"""CLI sub-command ``python -m engine info``: the model card (dispatched by ``engine/__main__.py``).

Loads the model with ``engine.models.loader`` and prints its facts: shape (layers, hidden, heads, KV
heads and what GQA/MQA means for the cache), exact parameters beside the seeds' estimate
``V·d + 12·L·d²``, KV bytes per token in the GQA and no-GQA forms and at full context, and bytes of
weights as loaded plus an estimate for every other precision (``engine.shapes.shape.estimate_weights_bytes``), and the runner a chat gets (fast or plain, and
why plain: ``ModelFacts.runner``). Owns formatting and argument parsing
only; torch is imported lazily (through the loader) so ``python -m engine --help`` stays fast.
A failure is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from engine.cli import MODEL_HELP
from engine.errors import EngineError
from engine.fmt import format_bytes
from engine.inputs import DEVICES, PRECISIONS, LoadSpec
from engine.models.facts import quantizable_shapes
from engine.models.loader import load_model
from engine.shapes.shape import estimate_weights_bytes



def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="default", help=MODEL_HELP)
    parser.add_argument("--precision", default="auto", choices=PRECISIONS)
    parser.add_argument("--device", default="auto", choices=DEVICES)
    parser.add_argument("--allow-remote-code", action="store_true",
                        help="run the model folder's own Python code (only for models you trust)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def attention_note(heads: int, kv_heads: int) -> str:
    if kv_heads == 1:
        return f"MQA: all {heads} query heads share one key/value head, so the KV cache is {heads}x smaller than MHA"
    if kv_heads < heads:
        return (f"GQA: {heads} query heads share {kv_heads} key/value heads ({heads // kv_heads} per group), "
                f"so the KV cache is {heads / kv_heads:g}x smaller than with one K/V head per query head")
    return "MHA: every query head has its own key/value head (no KV cache saving)"


def model_card(loaded: Any) -> dict[str, Any]:
    """The card as plain data (the --json output)."""
    facts = loaded.facts
    card = facts.to_dict()
    card.update(
        attention_note=attention_note(facts.heads, facts.kv_heads),
        param_estimate_error=(facts.param_estimate - facts.params) / facts.params,
        kv_bytes_full_context=facts.kv_bytes_per_token * facts.context_length,
        kv_bytes_full_context_no_gqa=facts.kv_bytes_per_token_no_gqa * facts.context_length,
        weights_bytes_estimates=estimate_weights_bytes(facts.params, quantizable_shapes(loaded.model)),
        eos_token_ids=list(loaded.eos_token_ids),
    )
    return card


def format_card(card: dict[str, Any]) -> str:
    bpe = card["kv_dtype_bytes"]
    lines = [
        f"{card['name']}  ({card['architecture']}, {card['precision']} on {card['device']})",
        f"  source              {card['source']}",
        f"  layers (L)          {card['layers']}",
        f"  hidden size (d)     {card['hidden_size']}",
        f"  attention heads     {card['heads']}",
        f"  KV heads            {card['kv_heads']}   {card['attention_note']}",
        f"  head dim            {card['head_dim']}",
        f"  vocab (V)           {card['vocab_size']:,}",
        f"  context             {card['context_length']:,} tokens",
        f"  parameters          {card['params']:,} exact (tied weights once)",
        f"  seeds' estimate     {card['param_estimate']:,} = V*d + 12*L*d^2 ({card['param_estimate_error']:+.1%})",
        f"  KV bytes / token    {card['kv_bytes_per_token']:,} B = 2 x L x kv_heads x head_dim x {bpe} B"
        f"   (no GQA: {card['kv_bytes_per_token_no_gqa']:,} B = 2 x L x d x {bpe} B)",
        f"  KV at full context  {format_bytes(card['kv_bytes_full_context'])}   (no GQA: "
        f"{format_bytes(card['kv_bytes_full_context_no_gqa'])})",
        f"  weights as loaded   {card['weights_bytes']:,} B ({format_bytes(card['weights_bytes'])})",
        "  weights estimate    " + ", ".join(f"{name} {format_bytes(value)}"
                                             for name, value in card["weights_bytes_estimates"].items()),
    ]
    choice = card.get("auto_choice")
    if choice and choice.get("agreement") is not None:
        lines.insert(2, f"  auto chose          {choice['precision']}: agrees with {choice['reference']} on "
                        f"{choice['agreement']:.1%} of next tokens (bar {choice['bar']:.0%}; "
                        f"{'measured now' if choice['measured_now'] else 'measured at an earlier load'})")
    elif choice and choice.get("rejected"):
        lines.insert(2, f"  auto kept           {choice['precision']}: " + ", ".join(
            f"{name} agreed on {share:.1%}" for name, share in choice["rejected"]) + ", below the bar")
    if card.get("runner"):  # which forward pass a chat gets, and for the plain one why
        reason = card.get("runner_reason")
        lines.insert(2, f"  runner              {card['runner']}" + (f": {reason}" if reason else "")
                     + (f"; decode step {card['decode_step']}" if card.get("decode_step") else ""))
    if card.get("device_map"):
        places = sorted(set(card["device_map"].values()))
        lines.append("  offload split       " + ", ".join(
            f"{place}: {sum(1 for v in card['device_map'].values() if v == place)} modules" for place in places))
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    try:
        from transformers.utils import logging as hf_logging  # loads transformers: only once a model is loaded

        hf_logging.disable_progress_bar()  # the card is the output; a weights progress bar is noise here
        loaded = load_model(LoadSpec(model=args.model, precision=args.precision, device=args.device,
                                     allow_remote_code=args.allow_remote_code))
        card = model_card(loaded)
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(card) if args.json else format_card(card))
    return 0
