"""CLI sub-command ``python -m engine bench``: Miaohui's engine against transformers ``generate()``
(dispatched by ``engine/__main__.py``).

Owns the arguments, the progress lines on stderr and the printing of the result: the readable table, or
one JSON object with ``--json`` (shape in docs/BENCHMARK.md). The benchmark itself is
``engine.bench.run.bench``; its figures and their formatting live in ``engine/bench/``. ``--kv int8`` runs
``engine.bench.kv_cache`` instead (the 8-bit KV cache against the 16-bit one, its JSON); ``--speculation``
``engine.bench.speculate`` (plain against speculative decoding); ``--docs`` ``engine.bench.docs`` (indexing,
embedding, a follow-up on a whole document and a new conversation on it), ``--docs-quality``
``engine.bench.docs_quality`` (recall@5, MRR) and ``--vision [NAMES]`` ``engine.bench.vision`` (per vision-language
family: an image's TTFT split into encoder and prefill, int4 against bf16).
Exit status: 0
done, 2 bad input or a model that cannot be loaded (one ``error:`` line on stderr, after the progress).
"""

from __future__ import annotations

import argparse
import sys

from engine.bench import roofline_check
from engine.bench.report import format_table, to_json
from engine.bench.scenarios import SCENARIOS
from engine.cli import MODEL_HELP
from engine.errors import EngineError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    roofline_check.add_argument(parser)
    parser.add_argument("--model", default="default", help=MODEL_HELP)
    parser.add_argument("--precision", default="bf16", help="main precision: fp32 | bf16 | fp16 | auto")
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda")
    parser.add_argument("--tokens", type=int, default=None, help="new tokens per decode run (default 128)")
    parser.add_argument("--reps", type=int, default=None, help="timed repetitions (default 3; --roofline-check: 5)")
    parser.add_argument("--quick", action="store_true",
                        help="small sizes, one repetition, no other precisions (a smoke run)")
    parser.add_argument("--precisions", default=None,
                        help="other precisions to measure decode in, comma-separated (default int8,int4; "
                             "none with --quick); '' for none")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--compile", action="store_true", help="torch.compile the fast decode step")
    parser.add_argument("--no-peer", action="store_true",
                        help="leave out the llama.cpp column (it runs where llama-cpp-python is installed: "
                             "`make bench-peer`)")
    parser.add_argument("--families", nargs="?", const="all", default=None, metavar="NAMES",
                        help="instead: engine int4 vs llama.cpp on random-weight Q4_0 GGUFs of the named shapes "
                             "(comma-separated; default all: llama-3.2-1b, qwen2.5-0.5b, qwen2.5-1.5b, qwen3-0.6b, "
                             "gemma-3-1b), built with the gguf package and kept in the data folder's cache")
    parser.add_argument("--with-bf16", action="store_true",
                        help="with --families: the engine in bf16 too, for the long prompt's TTFT ratio")
    parser.add_argument("--kv", default="auto", metavar="auto|int8",
                        help="int8: instead, the 8-bit KV cache against the 16-bit one (KV bytes, top-1 agreement over "
                             "512 teacher-forced positions, decode tok/s at 2,000 positions: engine.bench.kv_cache)")
    parser.add_argument("--speculation", action="store_true",
                        help="instead: plain against speculative decoding in bf16 and int4 (engine.bench.speculate: "
                             "prompt lookup on a text to rewrite, a function to edit and a story, self-speculation; each "
                             "target met or missed; --reps rounds, --tokens new tokens, --quick the targets only)")
    parser.add_argument("--docs", action="store_true",
                        help="instead: documents (engine.bench.docs): indexing pages/s of a PDF and text pages, the "
                             "embedder against transformers' own forward, and TTFT of a follow-up question on a "
                             "whole document, and of a new conversation attaching it (its kept KV prefix from "
                             "memory and from disk), against the first (--reps rounds of embedding)")
    parser.add_argument("--docs-quality", action="store_true",
                        help="instead: retrieval quality (engine.bench.docs_quality): recall@5 and MRR of keyword, "
                             "dense and fused retrieval on Vim's tutor (English PDF, Chinese text)")
    parser.add_argument("--vision", nargs="?", const="all", default=None, metavar="NAMES",
                        help="instead: vision-language families (engine.bench.vision; comma-separated, default all: "
                             "gemma-3-4b, qwen2.5-vl-3b, qwen3-vl-2b, smolvlm-256m, llava-1.5-7b, "
                             "llava-onevision-0.5b; random weights, real vision towers, the larger language parts with "
                             "fewer layers): TTFT of one 1024x768 image split into vision encoder and prefill, and the "
                             "language part's decode tok/s, int4 against bf16 (--reps, --tokens)")
    parser.add_argument("--contexts", nargs="?", const="512,4096,16384", default=None, metavar="LENGTHS",
                        help="instead: the decode roofline at each context length (engine.bench.context_sweep; default "
                             "512,4096,16384): TTFT, decode tok/s, weight and KV bytes read per step, GB/s and the "
                             "verdict, at --precision and --precisions (default int4), llama.cpp beside a .gguf --model "
                             "(or a --families shape name, e.g. --model llama-3.2-1b)")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS),
                        help=f"comma-separated subset of {','.join(SCENARIOS)} (figures of the others are null)")


def _progress(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    # Lazy: engine.bench.run loads torch and transformers (seconds), which `python -m engine --help` and
    # every other sub-command would otherwise pay for.
    from engine.bench.run import bench

    if args.kv != "auto":  # a bad value is refused there, in one line
        return _kv_cache(args)
    if args.roofline_check:
        return _roofline_check(args)
    if args.families is not None:
        return _families(args)
    if args.contexts is not None:
        return _contexts(args)
    if args.speculation:
        return _speculation(args)
    if args.docs or args.docs_quality:
        return _docs(args)
    if args.vision is not None:
        return _vision(args)
    try:
        result = bench(args, _progress)
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(to_json(result) if args.json else format_table(result))
    return 0


def _speculation(args: argparse.Namespace) -> int:
    """``--speculation``: engine.bench.speculate's comparisons (its table, or ``--json``)."""
    import json

    from engine.bench import speculate

    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    _progress("plain and speculative replies alternated on one loaded model (minutes)")
    try:
        result = speculate.measure(args.model, args.reps or 3, args.tokens or 160, targets_only=args.quick)
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2, ensure_ascii=False) if args.json else speculate.markdown(result))
    return 0


def _docs(args: argparse.Namespace) -> int:
    """``--docs`` (engine.bench.docs) or ``--docs-quality`` (engine.bench.docs_quality): a table, or ``--json``."""
    import json

    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    try:
        if args.docs_quality:
            from engine.bench import docs_quality as module

            result = module.measure(_progress)
        else:
            from engine.bench import docs as module  # type: ignore[no-redef]

            result = module.measure(args.model, args.reps or 3, _progress)
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2, ensure_ascii=False) if args.json else module.table(result))
    return 0


def _vision(args: argparse.Namespace) -> int:
    """``--vision [NAMES]``: engine.bench.vision's int4 against bf16 per vision-language family (a table, or
    ``--json``); an unknown family name: one line, 2."""
    import json

    from engine.bench import vision
    from engine.bench.vision_families import parse_names

    try:
        names = parse_names(args.vision)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    try:
        result = vision.measure_families(names, args.tokens or 32, args.reps or 3, _progress)
    except (EngineError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2) if args.json else vision.table(result))
    return 0


def _roofline_check(args: argparse.Namespace) -> int:
    """``--roofline-check``: engine.bench.roofline_check's two rooflines and their ratio (table, or ``--json``)."""
    import json

    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    try:
        result = roofline_check.roofline_check(args.model, args.precision, args.device, args.tokens or 128,
                                               args.reps or roofline_check.REPS, _progress)
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2) if args.json else roofline_check.format_check(result))
    return 0


def _families(args: argparse.Namespace) -> int:
    import json

    import torch

    from engine.bench.families import format_families, parse_names, run_families

    try:
        names = parse_names(args.families)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        result = run_families(names, args.tokens or 64, args.reps or 3, args.with_bf16, _progress)
    except (EngineError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2) if args.json else format_families(result))
    return 0


def _contexts(args: argparse.Namespace) -> int:
    """``--contexts``: ``engine.bench.context_sweep``'s rows (its table, or ``--json``); bad input: one line, 2."""
    import json

    from engine.bench import context_sweep

    try:
        lengths = context_sweep.parse_contexts(args.contexts)
        others = [p for p in (args.precisions if args.precisions is not None else "int4").split(",") if p.strip()]
        precisions = list(dict.fromkeys([args.precision if args.precision != "auto" else "bf16", *others]))
        if args.threads:
            import torch

            torch.set_num_threads(args.threads)
        result = context_sweep.run(args.model, precisions, lengths, args.tokens or context_sweep.TOKENS,
                                   args.reps or context_sweep.REPS, not args.no_peer, _progress)
    except (EngineError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2) if args.json else context_sweep.format_sweep(result))
    return 0


def _kv_cache(args: argparse.Namespace) -> int:
    """``--kv int8``: ``engine.bench.kv_cache``'s comparison on ``--model`` (its JSON; a bad value: one line, 2)."""
    from engine.bench import kv_cache

    argv = ["--model", args.model, "--precision", "bf16" if args.precision == "auto" else args.precision,
            "--device", "cpu" if args.device == "auto" else args.device, "--kv", args.kv]
    argv += ["--tokens", str(args.tokens)] if args.tokens else []
    argv += ["--reps", str(args.reps)] if args.reps else []
    argv += ["--threads", str(args.threads)] if args.threads else []
    return kv_cache.main(argv)
