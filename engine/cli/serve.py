"""CLI sub-command ``python -m engine serve`` (dispatched by ``engine/__main__.py``): the OpenAI-compatible server.

Checks the arguments, binds the socket, loads the model, starts the worker thread and runs uvicorn in the
foreground until Ctrl-C (open streams get a few seconds to finish, then exit status 130 like the other
commands, and one line saying so). Safe by default: it listens on 127.0.0.1; any other address needs an API key
(``--api-key`` or the ``MIAOHUI_API_KEY`` environment variable, which keeps the key out of the process list);
requests naming another site in their ``Host`` are refused unless ``--allowed-host`` names it
(``engine.serve.guard``). Bad input (an API key that is not printable ASCII: no HTTP client could send it), a
port that cannot be bound, a model, ``--speculative`` or ``--kv`` value that cannot serve: one line on stderr, exit
status 2. ``--kv int8`` gives every conversation an 8-bit KV cache (as ``engine chat --kv``).
The model is loaded and hosted by the engine core on its own thread (``engine.serve.hosting.CoreHost``), as the
window's is; ``--memory-budget`` bounds what its models take together (the chat model and the embedding model of
``/v1/embeddings``; default: the machine's, ``engine.core.models.machine_budget_bytes``).
``--speculative prompt-lookup|draft:MODEL|self`` is parsed as ``engine chat`` parses it (``SpeculationConfig.parse``)
and serves one request at a time (drafts verify one sequence per forward): one line says so rather than refusing
the default ``--parallel``. ``--prefix-cache-mb`` bounds the blocks shared between conversations (``engine.generate.
kv_blocks``). ``--kv-store DIR`` keeps the conversations' KV caches across restarts
(``engine.serve.prefix``; ``--kv-store-mb`` bounds the folder). A vision-language model folder
(``engine.vision.vlm.VISION_FAMILIES``) is served by ``engine.serve.vision_worker``, one request at a time; its
chats may carry images (``--allow-downloads``: web image URLs are fetched too). Owns argument parsing only; the server is ``engine.serve``, imported when the command
runs so ``python -m engine --help`` stays fast. docs/SERVE.md is the guide.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from engine.cli import MODEL_HELP
from engine.cli.remote_args import ENV_KEY
from engine.errors import BadInputError, EngineError, printable
from engine.inputs import DEVICES, PRECISIONS, SpeculationConfig, check_kv_precision

DEFAULT_PORT = 8000
DEFAULT_MAX_QUEUE = 32  # engine.serve.worker.DEFAULT_MAX_QUEUE
DEFAULT_MAX_BODY_BYTES = 4 << 20  # engine.serve.app.DEFAULT_MAX_BODY_BYTES
DEFAULT_SESSIONS = 4  # engine.core.sessions.DEFAULT_SIZE
DEFAULT_PARALLEL = 4  # engine.serve.batching.DEFAULT_PARALLEL
MAX_PARALLEL = 64  # engine.serve.batching.MAX_PARALLEL
DEFAULT_KV_STORE_MB = 2048  # engine.generate.kv_store.DEFAULT_BUDGET_BYTES
DEFAULT_PREFIX_CACHE_MB = 256  # engine.executor.kv_blocks.DEFAULT_BUDGET_BYTES
SERVER_PACKAGES = ("fastapi", "starlette", "uvicorn", "prometheus_client", "pydantic")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="default", help=MODEL_HELP)
    parser.add_argument("--precision", default="auto", choices=PRECISIONS)
    parser.add_argument("--device", default="auto", choices=DEVICES)
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1; any other needs an API key)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"TCP port (default {DEFAULT_PORT}; 0: any free one)")
    parser.add_argument("--api-key", default=None,
                        help=f"require 'Authorization: Bearer KEY' on /v1 (default: ${ENV_KEY} if set, else none)")
    parser.add_argument("--max-queue", type=int, default=DEFAULT_MAX_QUEUE,
                        help=f"requests that may wait behind the running one; more get 429 (default {DEFAULT_MAX_QUEUE})")
    parser.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY_BYTES,
                        help=f"largest request body accepted; larger get 413 (default {DEFAULT_MAX_BODY_BYTES})")
    parser.add_argument("--sessions", type=int, default=DEFAULT_SESSIONS,
                        help=f"conversations whose KV cache is kept for their next turn (default {DEFAULT_SESSIONS})")
    parser.add_argument("--parallel", type=int, default=DEFAULT_PARALLEL,
                        help=f"requests generated at once, their decode steps batched in one forward "
                             f"(default {DEFAULT_PARALLEL}; 1: one at a time)")
    parser.add_argument("--cors-origin", action="append", default=[], metavar="ORIGIN",
                        help="let a web page from ORIGIN call the API (repeatable; default: no CORS)")
    parser.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                        help="also answer requests addressed to the host name NAME (repeatable; loopback names and IP "
                             "addresses always are; others are refused, against DNS rebinding)")
    parser.add_argument("--speculative", default=None, metavar="prompt-lookup|draft:MODEL|self",
                        help="speculative decoding, as engine chat's (greedy: same text); serves one request at a time")
    parser.add_argument("--kv-store", default=None, metavar="DIR",
                        help="save the conversations' KV caches in DIR when the server stops (and when another "
                             "conversation takes their place) and reuse them after a restart; default: none")
    parser.add_argument("--kv-store-mb", type=int, default=DEFAULT_KV_STORE_MB,
                        help=f"most MiB --kv-store keeps, least recently used deleted first (default {DEFAULT_KV_STORE_MB})")
    parser.add_argument("--prefix-cache-mb", type=int, default=DEFAULT_PREFIX_CACHE_MB,
                        help="most MiB of KV blocks shared between conversations that start alike (a system prompt), "
                             f"least recently used evicted first; 0: no sharing (default {DEFAULT_PREFIX_CACHE_MB})")
    parser.add_argument("--kv", default="auto", metavar="auto|int8",
                        help="the KV cache's precision, as engine chat's: int8 holds about half the bytes per "
                             "conversation (fast runner only; default: %(default)s)")
    parser.add_argument("--allow-downloads", action="store_true",
                        help="fetch a chat's image_url parts that are http(s) URLs (bounded in size); off by default: "
                             "images then come as data: URLs")
    parser.add_argument("--memory-budget", default="auto", metavar="auto|MiB|NG",
                        help="most memory the models in this process may take (the chat model and the embedding model "
                             "beside it): MiB, or with a G or M suffix; auto: 60%% of the RAM, 90%% of the GPU's memory "
                             "for a model on CUDA (default: %(default)s)")
    parser.add_argument("--allow-remote-code", action="store_true",
                        help="allow a model whose config needs its own Python code (auto_map); off by default")


def check(args: argparse.Namespace, api_key: str | None) -> str | None:
    """The one-line reason the arguments cannot be served, or None."""
    from engine.serve.server import is_loopback

    if not 0 <= args.port <= 65535:
        return f"--port must be between 0 and 65535 (got {args.port})"
    if args.max_queue < 1:
        return f"--max-queue must be at least 1 (got {args.max_queue})"
    if args.max_body_bytes < 1:
        return f"--max-body-bytes must be at least 1 (got {args.max_body_bytes})"
    if args.sessions < 1:
        return f"--sessions must be at least 1 (got {args.sessions})"
    if not 1 <= args.parallel <= MAX_PARALLEL:
        return f"--parallel must be between 1 and {MAX_PARALLEL} (got {args.parallel})"
    if args.prefix_cache_mb < 0:
        return f"--prefix-cache-mb must be at least 0 (got {args.prefix_cache_mb})"
    if args.kv_store_mb < 1:
        return f"--kv-store-mb must be at least 1 (got {args.kv_store_mb})"
    if args.kv_store is not None and (not args.kv_store.strip() or os.path.exists(args.kv_store)
                                      and not os.path.isdir(args.kv_store)):
        return f"--kv-store takes a folder (got {printable(args.kv_store)!r}, which is not one)"
    try:
        speculation(args)
    except BadInputError as exc:
        return f"--speculative: {exc}"
    try:
        memory_budget(args.memory_budget)
    except BadInputError as exc:
        return f"--memory-budget: {exc}"
    try:
        check_kv_precision(args.kv)
    except BadInputError as exc:
        return f"--kv: {exc}"
    if api_key is not None and not api_key.strip():
        return "the API key is empty"
    if api_key is not None and not _sendable(api_key):
        return ("the API key must be printable ASCII (letters, digits, punctuation) with no spaces around it: "
                "HTTP clients cannot send other characters in the Authorization header")
    for name in args.allowed_host:
        if not _sendable(name) or not name.strip() or any(c in name for c in " /@"):
            return f"--allowed-host takes a host name such as mybox.lan (got {printable(name)!r})"
    if not is_loopback(args.host) and api_key is None:
        return (f"refusing to listen on {printable(args.host)} without an API key: anyone who can reach it could use "
                f"the model; pass --api-key (or set {ENV_KEY}), or keep the default --host 127.0.0.1")
    return None


def speculation(args: argparse.Namespace) -> SpeculationConfig | None:
    """The ``--speculative`` asked for (``BadInputError`` for a value ``engine chat`` would refuse too)."""
    return SpeculationConfig.parse(args.speculative) if args.speculative is not None else None


def memory_budget(text: str) -> int | None:
    """``--memory-budget`` in bytes (None: auto, the machine's); ``BadInputError`` for anything else than auto, a
    positive number of MiB, or one with a G or M suffix (8G, 512M)."""
    value = text.strip().lower()
    if value == "auto":
        return None
    scale = 1 << 20
    if value[-1:] in ("g", "m"):
        scale, value = (1 << 30) if value[-1] == "g" else (1 << 20), value[:-1]
    try:
        amount = float(value)
    except ValueError:
        amount = -1.0
    if not amount > 0 or amount != amount or amount == float("inf"):
        raise BadInputError(f"expected auto, a number of MiB or one with a G or M suffix (got {printable(text)!r})")
    return int(amount * scale)


def _sendable(text: str) -> bool:
    """True for text an HTTP header carries as it is: visible ASCII, inner spaces, nothing around it."""
    return text == text.strip() and all(" " <= c <= "~" for c in text)


def run(args: argparse.Namespace) -> int:
    api_key = args.api_key if args.api_key is not None else os.environ.get(ENV_KEY)
    try:
        problem = check(args, api_key)  # before the model (and torch) load: a refusal is instant
        if problem is None:
            import engine.serve.app  # noqa: F401  (fastapi, prometheus_client)
    except ModuleNotFoundError as exc:
        if exc.name not in SERVER_PACKAGES:
            raise
        print(f"error: python -m engine serve needs {exc.name}: pip install fastapi uvicorn prometheus-client",
              file=sys.stderr)
        return 2
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        return _serve(args, api_key)
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _serve(args: argparse.Namespace, api_key: str | None) -> int:
    from engine.inputs import LoadSpec
    from engine.models.loader import resolve_source
    from engine.serve.app import create_app
    from engine.serve.hosting import CoreHost
    from engine.serve.server import GRACEFUL_SHUTDOWN_S, bind_socket, make_server
    from engine.vision.vlm import vision_family

    spec = LoadSpec(model=args.model, precision=args.precision, device=args.device,
                    allow_remote_code=args.allow_remote_code, kv_precision=args.kv)
    try:
        sock = bind_socket(args.host, args.port)
    except OSError as exc:
        print(f"error: cannot listen on {printable(args.host)}:{args.port}: {printable(exc.strerror or exc)}",
              file=sys.stderr)
        return 2
    hosted = None
    worker = None
    try:
        if vision_family(resolve_source(spec.model).folder) is not None:  # images in the conversation (issue 44)
            from engine.serve.vision_worker import VisionWorker
            from engine.vision.vlm import load_vision_model

            # A vision model is served one request at a time by its own worker, not yet by the engine core.
            worker = VisionWorker(load_vision_model(spec), max_queue=args.max_queue).start()
            embeddings = None
        else:
            store = None
            if args.kv_store is not None:
                from engine.generate.kv_store import KVStore

                store = KVStore(Path(args.kv_store).expanduser(), args.kv_store_mb << 20)
            # The engine core loads and owns the model on its own thread; the server's queue hands its work to it.
            hosted = CoreHost(spec, budget_bytes=memory_budget(args.memory_budget), max_queue=args.max_queue,
                              sessions=args.sessions, parallel=args.parallel, speculation=speculation(args),
                              kv_store=store, prefix_cache_bytes=args.prefix_cache_mb << 20)
            worker = hosted.worker
            assert worker is not None  # CoreHost raised otherwise
            embeddings = hosted.embeddings
        if worker.batching_refused:
            print(f"serving one request at a time: {worker.batching_refused}", file=sys.stderr, flush=True)
        app = create_app(worker, api_key=api_key, max_body_bytes=args.max_body_bytes, cors_origins=args.cors_origin,
                         allow_downloads=args.allow_downloads, embeddings=embeddings)
        # uvicorn's start and stop messages stay quiet: the two lines below say it; a line per request remains.
        server = make_server(app, sock, log_level="warning", access_log=True,
                             allowed_hosts=(args.host, *args.allowed_host))
        host, port = sock.getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        print(f"serving {printable(worker.model_id)} at http://{shown}:{port}/v1 "
              f"({'API key required' if api_key else 'no API key'}; Ctrl-C stops)", file=sys.stderr, flush=True)
        try:
            server.run(sockets=[sock])  # uvicorn raises Ctrl-C again once it has shut down
        except KeyboardInterrupt:
            cut = server.cut_off
            print("stopped (Ctrl-C)" + (f": {cut} open request{'s' if cut != 1 else ''} cut off after "
                                         f"{GRACEFUL_SHUTDOWN_S} s" if cut else ""), file=sys.stderr, flush=True)
            return 130
    finally:
        if hosted is not None:
            hosted.close()  # the core's worker and thread with it
        elif worker is not None:
            worker.close()
        sock.close()
    return 0
