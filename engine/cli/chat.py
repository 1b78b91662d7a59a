"""CLI sub-command ``python -m engine chat`` (dispatched by ``engine/__main__.py``): one prompt, one reply.

Streams the reply to stdout as it is produced and prints a one-line summary (TTFT, tok/s, KV bytes) to
stderr; with ``--json`` prints one JSON object at the end instead (the benchmark, the lab and outside
checks parse it, so its keys are fixed). With ``--base-url`` the reply comes from an OpenAI-compatible server
(``engine.remote``: vLLM, llama-server, Ollama, ``engine serve``) instead of a model loaded here: the same output
and keys, a figure the server cannot give (KV bytes, prefill time) null, never invented. Sampling is greedy
unless ``--temperature`` is given, so two runs print the same text. Exit status: 0 done, 2 bad input or a model
that cannot be loaded (one line, no traceback; for a server: a bad URL, one that cannot be reached, a refused
key, an unknown model), 1 when generation itself failed (the error line is printed), 130 on Ctrl-C after printing
what was generated. What a server chose (its model's name, its error texts) is printed through
``engine.fmt.outside_text``: no terminal escape reaches the terminal. Owns argument parsing and output only.
``engine/__main__.py`` imports every sub-command to build its parser, so the session (which loads torch, ~1.5 s)
is imported in ``_run``: ``--help`` stays instant.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from typing import Any

from engine.cli import MODEL_HELP, SERVED_MODEL_HELP, remote_args
from engine.cli.interrupt import first_ctrl_c_sets
from engine.errors import EngineError
from engine.events import Finished, Message, Token
from engine.fmt import format_bytes, outside_text
from engine.generate.context import check_messages
from engine.inputs import DEVICES, PRECISIONS, LoadSpec, SamplingConfig
from engine.models.loader import load_model

DEFAULT_MAX_NEW_TOKENS = 256
MAX_ERROR_CHARS = 1000  # an error line may quote a server's text: escaped and bounded like every outside string


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prompt", required=True, help="the user message")
    parser.add_argument("--system", default=None, help="system prompt")
    parser.add_argument("--model", default="default",
                        help=MODEL_HELP + SERVED_MODEL_HELP)
    remote_args.add_arguments(parser, "answer with")
    parser.add_argument("--precision", default="auto", choices=PRECISIONS)
    parser.add_argument("--device", default="auto", choices=DEVICES)
    parser.add_argument("--max-new-tokens", type=int, default=DEFAULT_MAX_NEW_TOKENS)
    parser.add_argument("--temperature", type=float, default=None, help="sample at this temperature (default: greedy)")
    parser.add_argument("--top-p", type=float, default=0.9)
    parser.add_argument("--top-k", type=int, default=50)
    parser.add_argument("--repetition-penalty", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--no-kv-cache", action="store_true", help="recompute the whole sequence every step")
    parser.add_argument("--allow-remote-code", action="store_true",
                        help="allow a model whose config needs its own Python code (auto_map); off by default")
    parser.add_argument("--json", action="store_true", help="print one JSON object at the end instead of streaming")


def _fmt(value: float | None, spec: str, unit: str) -> str:
    return "n/a" if value is None else f"{value:{spec}}{unit}"


def summary_line(finished: Any) -> str:
    """One line for stderr: TTFT, prefill and decode speeds, tokens, KV bytes measured and by formula
    ("n/a" and "—" for what the engine that answered cannot know)."""
    m = finished.metrics
    k = m.known
    prefill = "n/a" if k("prefill_tokens") is None else m.prefill_tokens
    return (f"[{finished.reason}] TTFT {_fmt(m.ttft_s, '.3f', ' s')} · prefill {prefill} tok "
            f"@ {_fmt(m.prefill_tok_s, '.0f', ' tok/s')} · decode {_fmt(m.decode_tok_s, '.1f', ' tok/s')} · "
            f"{m.generated_tokens} tokens · KV {format_bytes(k('kv_cache_bytes'))} "
            f"(formula {format_bytes(k('kv_cache_bytes_formula'))}, "
            f"no-GQA {format_bytes(k('kv_cache_bytes_formula_no_gqa'))}) · {outside_text(m.device)} "
            f"{outside_text(m.precision)}")  # a server's model name is its precision: whatever it chose


def result_json(finished: Any, facts: Any) -> dict[str, Any]:
    """The ``--json`` object: the reply, its finish reason, every metric, and the model's name + facts."""
    data: dict[str, Any] = {"text": finished.text, "finish_reason": finished.reason}
    if finished.error:
        data["error"] = finished.error
    data.update(finished.metrics.to_dict())
    data["model"] = facts.to_dict()
    return data


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except EngineError as exc:
        print(f"error: {outside_text(exc, max_chars=MAX_ERROR_CHARS)}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    greedy = args.temperature is None
    config = SamplingConfig(temperature=0.0 if greedy else args.temperature, top_p=args.top_p, top_k=args.top_k,
                            repetition_penalty=args.repetition_penalty, max_new_tokens=args.max_new_tokens,
                            seed=args.seed, use_kv_cache=not args.no_kv_cache)
    messages = ([Message("system", args.system)] if args.system else []) + [Message("user", args.prompt)]
    check_messages(messages)  # bad input fails before the model loads

    if args.base_url is not None:
        from engine.remote import RemoteSession, RemoteSpec, connect  # (the openai client loads on connect)

        remote = connect(RemoteSpec(args.base_url, args.model, remote_args.key_of(args)))
        session: Any = RemoteSession(remote)
        facts: Any = remote.facts
    else:
        from engine.generate.session import ChatSession  # loads torch: here, not at the top (see the docstring)

        loaded = load_model(LoadSpec(model=args.model, precision=args.precision, device=args.device,
                                     allow_remote_code=args.allow_remote_code))
        session, facts = ChatSession(loaded), loaded.facts
    cancel = threading.Event()
    finished = None
    streamed: list[str] = []
    # First Ctrl-C: stop cleanly within one token and still print what was generated.
    with first_ctrl_c_sets(cancel) as interrupt:
        for event in session.generate(messages, config, cancel):
            if isinstance(event, Token) and not args.json and event.text:
                streamed.append(event.text)
                sys.stdout.write(event.text)
                sys.stdout.flush()
            elif isinstance(event, Finished):
                finished = event
    if finished is None:  # cannot happen by the session's contract; say so rather than crash
        print("error: generation ended without a result", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result_json(finished, facts), ensure_ascii=False))
    else:
        # The stream may lack bytes held back at the very end (an incomplete character): print them.
        shown = "".join(streamed)
        tail = finished.text[len(shown):] if finished.text.startswith(shown) else ""
        sys.stdout.write(tail + "\n")
        sys.stdout.flush()
        print(summary_line(finished), file=sys.stderr)
    if finished.reason == "error":
        if not args.json:
            print(f"error: {outside_text(finished.error, max_chars=MAX_ERROR_CHARS)}", file=sys.stderr)
        return 1
    return 130 if interrupt.pressed else 0
