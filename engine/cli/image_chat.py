"""``python -m engine chat --image PATH`` (repeatable): one question about images, to a vision-language model loaded
here (issue 44).

Owns this flag: the images read before any model loads (a bad one is one line and exit status 2, as every bad input;
``engine.vision.image_input`` says why), the flags it cannot go with, and the reply through ``engine.vision.turn``:
printed as ``chat`` prints any reply (``engine.cli.replies``), the summary line then naming the image tokens and the
vision encoder's time, and ``--json`` with the metrics' ``image_tokens`` (per image) and ``vision_encoder_s`` plus
``images`` (each image's name, size, tokens and conversion note). A text model says it has no vision, before its
weights load; a vision model asked without an image answers through the same turn. With ``--base-url`` the images go
to the server's model as OpenAI ``image_url`` parts (``engine.remote.images``). Does not own loading
(``engine.vision.vlm``) or the turn.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Sequence

from engine.errors import BadInputError
from engine.events import Message


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--image", action="append", default=[], type=Path, metavar="PATH",
                        help="ask about this image (repeatable; PNG, JPEG, GIF, WebP, BMP): needs a vision-language "
                             "model (LLaVA, SmolVLM/Idefics3, Qwen2.5-VL, Qwen3-VL, Gemma 3)")


def read(args: argparse.Namespace) -> list[Any]:
    """The ``--image`` files read (``ImageInput``s), or ``ImageError`` for the first bad one; refuses the flags an image
    turn does not take. Runs before any model loads."""
    if not args.image:
        return []
    _refuse_flags(args, "--image")
    from engine.vision.image_input import read_image_file

    return [read_image_file(path) for path in args.image]


def _refuse_flags(args: argparse.Namespace, what: str) -> None:
    for flag, given in (("--mcp", bool(getattr(args, "mcp", None))),
                        ("--doc/--collection", bool(args.doc or args.collection)),
                        ("--speculative", args.speculative is not None), ("--no-kv-cache", args.no_kv_cache)):
        if given:
            raise BadInputError(f"{what} does not go with {flag} yet")


def is_vision_model(args: argparse.Namespace) -> bool:
    """Whether ``--model`` names a vision-language folder here (then even a question without images goes through
    ``engine.vision.turn``: the text loader's Auto class does not take these configs)."""
    if args.base_url is not None:
        return False
    from engine.errors import EngineError
    from engine.models.loader import resolve_source
    from engine.vision.vlm import vision_family

    try:
        return vision_family(resolve_source(args.model).folder) is not None
    except EngineError:
        return False  # the text path says what is wrong with it


def run(args: argparse.Namespace, messages: Sequence[Message], images: Sequence[Any], config: Any) -> int:
    """Load the vision model, ask, print; the exit status (``engine.cli.replies.print_reply``'s)."""
    from engine.cli import replies
    from engine.inputs import LoadSpec
    from engine.vision.vlm import load_vision_model

    _refuse_flags(args, "--image" if images else "a vision-language model")
    if args.base_url is not None:
        return _run_remote(args, messages, images, config)
    vision = load_vision_model(LoadSpec(model=args.model, precision=args.precision, device=args.device,
                                        allow_remote_code=args.allow_remote_code, kv_precision=args.kv))
    from engine.vision.turn import VisionChat  # torch: after the load, as chat's session

    chat = VisionChat(vision)
    user = len(messages) - 1  # the images go with the question, before its text
    shown: list[dict[str, Any]] = []

    def start(cancel: Any) -> Any:
        for event in chat.generate(messages, {user: list(images)}, config, cancel):
            if type(event).__name__ == "ImagesEncoded":
                shown[:] = [{"name": path.name, "width": image.width, "height": image.height, "tokens": tokens,
                             "note": image.note} for path, image, tokens in zip(args.image, images, event.image_tokens)]
                if not args.json:
                    print(image_line(event), file=sys.stderr)
            yield event

    # ``shown`` is filled in place when the images are encoded, before print_reply reads ``extra`` at the end
    return replies.print_reply(start, vision.loaded.facts, args.json, extra={"images": shown} if args.json else None)


def _run_remote(args: argparse.Namespace, messages: Sequence[Message], images: Sequence[Any], config: Any) -> int:
    """The question and its images sent to a server (``--base-url``: vLLM, llama-server, Ollama, ``engine serve``)
    as OpenAI ``image_url`` parts (``engine.remote.images``); the server's vision model answers, or its refusal is
    the one line. The image tokens are the server's to count: ``--json``'s ``images`` has no ``tokens``."""
    from engine.cli import remote_args, replies
    from engine.remote import RemoteSession, RemoteSpec, connect

    if args.kv != "auto":
        raise BadInputError("--kv applies to a model loaded here, not to a server (--base-url)")
    remote = connect(RemoteSpec(args.base_url, args.model, remote_args.key_of(args)))
    session = RemoteSession(remote)
    shown = [{"name": path.name, "width": image.width, "height": image.height, "note": image.note}
             for path, image in zip(args.image, images)]
    user = len(messages) - 1
    return replies.print_reply(lambda cancel: session.generate(messages, config, cancel, images={user: list(images)}),
                               remote.facts, args.json, extra={"images": shown} if args.json else None)


def image_line(event: Any) -> str:
    """stderr's line before the reply: the tokens each image became and the vision encoder's time."""
    tokens = " + ".join(str(n) for n in event.image_tokens)
    return f"[images] {tokens} image tokens · vision encoder {event.encoder_s:.3f} s"


__all__ = ["add_arguments", "read", "is_vision_model", "run", "image_line"]
