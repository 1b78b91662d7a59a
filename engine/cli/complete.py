"""CLI sub-command ``python -m engine complete`` (dispatched by ``engine/__main__.py``): continue a plain text.

Text completion: the prompt is given to the model as it is, with no chat template (``ChatSession.complete``), so
every local model works, a base model without a template included. The text comes from ``--prompt TEXT`` or
``--prompt-file PATH`` (``-``: standard input), read as UTF-8. Its output, flags and exit status are chat's
(``engine.cli.replies``): the continuation streamed to stdout and a summary line to stderr, or with ``--json`` one
object with the same keys as ``engine chat --json``; sampled as ``engine chat`` (the window's defaults, a fixed
seed); 0 done, 2 bad input or a model that cannot be loaded (one line), 1 when generation failed, 130 on Ctrl-C after printing what was
generated. A prompt longer than the context is refused, never cut; the continuation's budget shrinks to the room
left (``engine.generate.context.build_text_prompt``). Owns reading the prompt and its arguments only; the session
(torch) is imported in ``_run`` so ``--help`` stays instant.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from engine.cli import MODEL_HELP, replies
from engine.errors import BadInputError
from engine.generate.context import check_text
from engine.inputs import LoadSpec
from engine.models.loader import load_model

# A prompt file past this is refused before it is read whole: no model's context holds this much text.
MAX_PROMPT_BYTES = 64 * 1024 * 1024


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--prompt", help="the text to continue")
    source.add_argument("--prompt-file", metavar="PATH", help="read the text to continue from PATH ('-': stdin)")
    parser.add_argument("--model", default="default", help=MODEL_HELP)
    replies.add_generation_arguments(parser)


def run(args: argparse.Namespace) -> int:
    return replies.run_guarded(_run, args)


def read_prompt(args: argparse.Namespace) -> str:
    """The text to continue, from ``--prompt`` or ``--prompt-file``; ``BadInputError`` (one line) if unreadable."""
    if args.prompt is not None:
        return args.prompt
    name = args.prompt_file
    try:
        if name == "-":
            data = sys.stdin.buffer.read(MAX_PROMPT_BYTES + 1)
        else:
            path = Path(name).expanduser()
            if not path.exists():
                raise BadInputError(f"no prompt file at {name}")
            if path.is_dir():
                raise BadInputError(f"the prompt file {name} is a folder")
            # A pipe is fine (a shell's <(…)): the read below is bounded, so even a device ends.
            with path.open("rb") as handle:
                data = handle.read(MAX_PROMPT_BYTES + 1)
    except OSError as exc:
        raise BadInputError(f"cannot read the prompt file {name}: {exc.strerror or exc}") from None
    where = "standard input" if name == "-" else name
    if len(data) > MAX_PROMPT_BYTES:
        raise BadInputError(f"the prompt in {where} is over {MAX_PROMPT_BYTES >> 20} MiB: no model's context holds it")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInputError(f"the prompt in {where} is not UTF-8 text (byte {exc.start})") from None


def _run(args: argparse.Namespace) -> int:
    config = replies.sampling_config(args)
    text = read_prompt(args)
    check_text(text)  # bad input fails before the model loads
    loaded = load_model(LoadSpec(model=args.model, precision=args.precision, device=args.device,
                                 allow_remote_code=args.allow_remote_code, kv_precision=args.kv))
    from engine.generate.session import ChatSession  # torch: after the load, as chat (see the docstring)
    session = ChatSession(loaded)
    facts = replies.reply_facts(loaded, config)  # --no-kv-cache: the same runner, rebuilt every step
    return replies.print_reply(lambda cancel: session.complete(text, config, cancel), facts, args.json,
                               replies.local_roofline(loaded) if args.json else None)
