"""CLI sub-command ``python -m engine lab --out DIR [--quick] [--model M] [--precision P] [--device D]``.

Loads the model once, runs the five experiments (``--precision-ab`` adds the precision A/B, which
loads further copies), and writes ``results.json``, one CSV per experiment and the PNG charts into
``--out``. Progress goes to stderr, a summary of the key figures to stdout. Owns argument parsing
and the printed summary; the experiments live in ``engine.lab.experiments``. Exit status: 0 done,
2 bad input or a model that cannot load (one line, no traceback), 130 on Ctrl-C.

``--base-url URL [--api-key K] --model NAME`` (as ``engine chat``) runs them on a model served by an
OpenAI-compatible server instead: only the experiments that need nothing but replies (greedy 20, TTFT
vs length, sampling; the default set there), each figure measured on this client; one that needs the
model's internals (``--only kv_cache``, ``attention``, ``--precision-ab``) is refused in one line before
connecting. A vision-language model folder runs "What an image costs" (``image_cost``), the lab's one experiment for
it; a text model asked for it, or a vision model for another, is refused in one line before loading.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

from engine.cli import MODEL_HELP, SERVED_MODEL_HELP, remote_args
from engine.errors import BadInputError, EngineError
from engine.inputs import DEVICES, PRECISIONS, LoadSpec
from engine.models.loader import load_model


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="folder for results.json, CSV and PNG files")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions, lengths and tokens (minutes on a CPU)")
    parser.add_argument("--model", default="default",
                        help=MODEL_HELP + SERVED_MODEL_HELP)
    remote_args.add_arguments(parser, "run timing and sampling (the experiments that need the model's internals "
                                      "are refused there) on")
    parser.add_argument("--precision", default="auto", choices=PRECISIONS)
    parser.add_argument("--device", default="auto", choices=DEVICES)
    parser.add_argument("--only", default="", help="comma-separated experiment keys (default: the five)")
    parser.add_argument("--layer", type=int, default=None, help="attention layer (default: the middle one)")
    parser.add_argument("--head", type=int, default=0, help="attention head (default: 0)")
    parser.add_argument("--precision-ab", action="store_true", help="also run the bf16/int8/int4 A/B (loads 3 copies)")
    parser.add_argument("--threads", type=int, default=None,
                        help="CPU threads for torch (default: torch's choice); 1 steadies timings on a busy machine")


def _progress_printer(start: float):
    def progress(fraction: float, message: str) -> None:
        print(f"[{time.perf_counter() - start:6.1f} s {fraction:6.1%}] {message}", file=sys.stderr, flush=True)

    return progress


def run(args: argparse.Namespace) -> int:
    # The experiments bring matplotlib (~1.7 s): imported here so `python -m engine --help` stays instant.
    from engine.lab.experiments import FIVE, REMOTE_CAPABLE, VISION, LabOptions, check_runnable, run_all

    cancel = threading.Event()
    remote = args.base_url is not None
    loaded = None
    try:
        vision = not remote and _is_vision_folder(args.model)
        asked = tuple(k.strip() for k in args.only.split(",") if k.strip())
        keys = asked or (VISION if vision else tuple(k for k in FIVE if k in REMOTE_CAPABLE) if remote else FIVE)
        if args.precision_ab and "precision_ab" not in keys:
            keys += ("precision_ab",)
        # a typo, internals asked of a server, the other kind of model: refused before minutes of loading
        check_runnable(keys, remote, vision)
        if remote and not asked:
            print(f"on a server: {', '.join(keys)} (the others need a model loaded on this computer)", file=sys.stderr)
        options = LabOptions(quick=args.quick, layer=args.layer, head=args.head)
        if args.threads is not None and args.threads < 1:
            raise BadInputError("--threads must be at least 1")
        t0 = time.perf_counter()
        if remote:
            from engine.remote import RemoteSpec, connect  # (the openai client loads on connect)

            loaded = connect(RemoteSpec(args.base_url, args.model, remote_args.key_of(args)),
                             cancel)
            print(f"connected to {loaded.facts.name} at {loaded.facts.source} in {time.perf_counter() - t0:.1f} s",
                  file=sys.stderr)
        else:
            if args.threads is not None:
                import torch  # the loader imports it anyway

                torch.set_num_threads(args.threads)
            spec = LoadSpec(model=args.model, precision=args.precision, device=args.device)
            if vision:
                from engine.vision.vlm import load_vision_model

                loaded = load_vision_model(spec, cancel=cancel)
            else:
                loaded = load_model(spec, cancel=cancel)
            facts = loaded.facts
            print(f"loaded {facts.name} ({facts.precision}, {facts.device}) in {time.perf_counter() - t0:.1f} s",
                  file=sys.stderr)
        document = run_all(loaded, Path(args.out), cancel, options, keys=keys, progress=_progress_printer(t0))
    except KeyboardInterrupt:
        cancel.set()
        raise
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        if remote and loaded is not None:
            loaded.close()  # the server's pooled connections
    _print_summary(document, Path(args.out))
    return 0


def _is_vision_folder(model: str) -> bool:
    """Whether ``--model`` is a vision-language folder here (it then runs ``image_cost``, the lab's one for it)."""
    from engine.models.loader import resolve_source
    from engine.vision.vlm import vision_family

    try:
        return vision_family(resolve_source(model).folder) is not None
    except EngineError:
        return False  # the load says what is wrong with it


def _print_summary(document: dict, out: Path) -> None:
    print(f"lab results in {out} ({document['elapsed_s']:.0f} s): {', '.join(document['files'])}, results.json")
    print(f"engine: {document['engine']['label']}")
    for key, result in document["experiments"].items():
        print(f"\n{result['title']}")
        for name, value in result["summary"].items():
            print(f"  {name}: {value}")
        for flag in result["flags"]:
            print(f"  ! {flag}")
