"""What ``python -m engine chat`` and ``python -m engine complete`` share: the model and sampling flags, the
``SamplingConfig`` they make, and printing a streamed reply with its exit status.

``print_reply`` streams the text to stdout as it is produced and prints a one-line summary (TTFT, tok/s, KV bytes)
to stderr; with ``--json`` one JSON object at the end instead (the benchmark, the lab and outside checks parse it,
so its keys are fixed, and are the same for both commands). The sampling defaults are the window's
(``SamplingConfig()``: the same prompt gets the same kind of answer) with a fixed seed (``CLI_DEFAULT_SEED``) unless
``--seed`` is given, so two runs print the same text; ``--temperature 0`` decodes greedily. Exit status: 0 done,
2 bad input or a model that cannot be loaded (``run_guarded``: one line, no traceback), 1 when generation itself failed (the error line is printed), 130 on Ctrl-C after printing
what was generated. What a server chose (its model's name, its error texts) is printed through
``engine.fmt.outside_text``: no terminal escape reaches the terminal. Imports no torch (``--help`` stays instant).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from typing import Any, Callable, Iterable, Mapping

from engine.cli.interrupt import first_ctrl_c_sets
from engine.cli.prefill_line import PrefillLine
from engine.errors import EngineError
from engine.events import Event, Finished, PrefillProgress, Token
from engine.fmt import format_bytes, outside_text, terminal_text
from engine.inputs import CLI_DEFAULT_SEED, DEVICES, PRECISIONS, SamplingConfig, check_kv_precision

DEFAULTS = SamplingConfig()  # THE defaults, the window's too (engine/inputs.py says why they are low)
MAX_ERROR_CHARS = 1000  # an error line may quote a server's text: escaped and bounded like every outside string


def add_generation_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags after ``--model``: precision and device, the sampling settings, ``--json``."""
    parser.add_argument("--precision", default="auto", choices=PRECISIONS)
    parser.add_argument("--device", default="auto", choices=DEVICES)
    parser.add_argument("--max-new-tokens", type=int, default=DEFAULTS.max_new_tokens, help="(default: %(default)s)")
    parser.add_argument("--temperature", type=float, default=DEFAULTS.temperature,
                        help="sampling temperature, 0 decodes greedily (default: %(default)s, as the window)")
    parser.add_argument("--top-p", type=float, default=DEFAULTS.top_p, help="(default: %(default)s)")
    parser.add_argument("--top-k", type=int, default=DEFAULTS.top_k, help="0 disables it (default: %(default)s)")
    parser.add_argument("--repetition-penalty", type=float, default=DEFAULTS.repetition_penalty,
                        help="1 disables it (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=CLI_DEFAULT_SEED,
                        help="random seed: the same seed prints the same text; -1 draws a fresh one "
                             "(default: %(default)s)")
    parser.add_argument("--no-kv-cache", action="store_true", help="recompute the whole sequence every step")
    parser.add_argument("--kv", default="auto", metavar="auto|int8",
                        help="the KV cache's precision: auto (the model's dtype) or int8 (about half the bytes, "
                             "fast runner only; default: %(default)s)")
    parser.add_argument("--allow-remote-code", action="store_true",
                        help="allow a model whose config needs its own Python code (auto_map); off by default")
    parser.add_argument("--json", action="store_true", help="print one JSON object at the end instead of streaming")


def sampling_config(args: argparse.Namespace) -> SamplingConfig:
    """The flags of ``add_generation_arguments`` as a config (``--seed -1``: a fresh seed, ``SamplingConfig``'s
    None; any other negative seed is refused there). A bad ``--kv`` is refused here too, before anything loads."""
    check_kv_precision(args.kv)
    return SamplingConfig(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
                          repetition_penalty=args.repetition_penalty, max_new_tokens=args.max_new_tokens,
                          seed=None if args.seed == -1 else args.seed, use_kv_cache=not args.no_kv_cache)


def _fmt(value: float | None, spec: str, unit: str) -> str:
    return "n/a" if value is None else f"{value:{spec}}{unit}"


def summary_line(finished: Any) -> str:
    """One line for stderr: TTFT, prefill and decode speeds, tokens, KV bytes measured and by formula
    ("n/a" and "—" for what the engine that answered cannot know)."""
    m = finished.metrics
    k = m.known
    prefill = "n/a" if k("prefill_tokens") is None else m.prefill_tokens
    thought = (f" (thought {_fmt(m.ttft_thought_s, '.3f', ' s')}, answer {_fmt(m.ttft_answer_s, '.3f', ' s')}, "
               f"{m.thinking_tokens} thinking tokens)" if m.thinking_tokens else "")
    return (f"[{finished.reason}] TTFT {_fmt(m.ttft_s, '.3f', ' s')}{thought} · prefill {prefill} tok "
            f"@ {_fmt(m.prefill_tok_s, '.0f', ' tok/s')} · decode {_fmt(m.decode_tok_s, '.1f', ' tok/s')} · "
            f"{m.generated_tokens} tokens · KV {format_bytes(k('kv_cache_bytes'))} "
            f"(formula {format_bytes(k('kv_cache_bytes_formula'))}, "
            f"no-GQA {format_bytes(k('kv_cache_bytes_formula_no_gqa'))}) · {outside_text(m.device)} "
            f"{outside_text(m.precision)}")  # a server's model name is its precision: whatever it chose


def result_json(finished: Any, facts: Any, roofline: Callable[[Any], Any] | None = None) -> dict[str, Any]:
    """The ``--json`` object: the reply, its finish reason, every metric, and the model's name + facts; with
    ``roofline`` (a local model: ``engine.bench.roofline``) its figures for the final metrics under ``roofline``."""
    data: dict[str, Any] = {"text": finished.text, "reasoning": finished.reasoning, "finish_reason": finished.reason}
    if finished.error:
        data["error"] = finished.error
    data.update(finished.metrics.to_dict())
    data["model"] = facts.to_dict()
    # Always the key, so a local and a remote run have the same shape: null where the memory is not this machine's.
    data["roofline"] = roofline(finished.metrics).to_dict() if roofline is not None else None
    return data


def local_roofline(loaded: Any) -> Callable[[Any], Any]:
    """``result_json``'s ``roofline`` for a reply of ``loaded`` (chat and complete): the device's bandwidth kept in
    the data folder (``engine.bench.roofline.measure_and_store``: measured again when it was taken under load or is
    old and the machine is quiet now; the JSON says when it was measured), the other processes' CPU time watched
    from now."""
    from engine.bench import roofline  # torch: only once a model is loaded

    bandwidth = roofline.measure_and_store(loaded.facts.device)
    weights, watch = roofline.weights_read_per_token(loaded), roofline.CpuWatch()
    return lambda metrics: roofline.roofline(weights, metrics, bandwidth, watch.others_share())


def reply_facts(loaded: Any, config: SamplingConfig) -> Any:
    """``loaded.facts`` as a reply with ``config`` runs: without a KV cache (``--no-kv-cache``) every step rebuilds
    the whole sequence on the same runner and decode step (``engine.executor.recompute``), so ``runner_reason``
    says so."""
    if config.use_kv_cache:
        return loaded.facts
    import dataclasses

    return dataclasses.replace(loaded.facts, runner_reason="no KV cache: every step recomputes the whole sequence "
                               "on this runner (the same kernels, so the same text, more time)")


def run_guarded(run: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """``run(args)``, with an ``EngineError`` (bad input, a model that cannot load) as one line and status 2."""
    try:
        return run(args)
    except EngineError as exc:
        print(f"error: {outside_text(exc, max_chars=MAX_ERROR_CHARS)}", file=sys.stderr)
        return 2


def print_reply(start: Callable[[threading.Event], Iterable[Event]], facts: Any, as_json: bool,
                roofline: Callable[[Any], Any] | None = None, extra: Mapping[str, Any] | None = None,
                after: str | None = None) -> int:
    """Stream the events ``start(cancel)`` gives and print the result; returns the exit status.

    ``extra``: more keys for the ``--json`` object; ``after``: lines the text output prints after the reply (both
    the sources of ``chat --doc``).

    ``start`` is called inside the Ctrl-C guard: the first Ctrl-C sets ``cancel`` (the reply stops within one
    token and what was generated is still printed), a second one interrupts.
    """
    cancel = threading.Event()
    finished = None
    streamed: list[str] = []
    prefill = PrefillLine() if not as_json else None  # a long prompt's progress on a terminal's stderr
    with first_ctrl_c_sets(cancel) as interrupt:
        for event in start(cancel):
            if isinstance(event, PrefillProgress) and prefill is not None:
                prefill.show(event)
            if isinstance(event, Token) and not as_json and event.reasoning:
                sys.stderr.write(terminal_text(event.reasoning))  # a thought goes beside the answer, not into it
                sys.stderr.flush()
            if isinstance(event, Token) and not as_json and event.text:
                streamed.append(event.text)
                sys.stdout.write(terminal_text(event.text))  # a reply's ESC/BEL are shown, never obeyed
                sys.stdout.flush()
            elif isinstance(event, Finished):
                finished = event
    if finished is None:  # cannot happen by the session's contract; say so rather than crash
        print("error: generation ended without a result", file=sys.stderr)
        return 1
    if as_json:
        print(json.dumps({**result_json(finished, facts, roofline), **(extra or {})}, ensure_ascii=False))
    else:
        # The stream may lack bytes held back at the very end (an incomplete character): print them.
        shown = "".join(streamed)
        tail = finished.text[len(shown):] if finished.text.startswith(shown) else ""
        sys.stdout.write(terminal_text(tail) + "\n")
        if after:
            sys.stdout.write("\n" + after + "\n")
        sys.stdout.flush()
        print(summary_line(finished), file=sys.stderr)
    if finished.reason == "error":
        if not as_json:
            print(f"error: {outside_text(finished.error, max_chars=MAX_ERROR_CHARS)}", file=sys.stderr)
        return 1
    return 130 if interrupt.pressed else 0
