"""CLI sub-command ``python -m engine bench``: Miaohui's engine against transformers ``generate()``
(dispatched by ``engine/__main__.py``).

Owns the arguments, the progress lines on stderr and the printing of the result: the readable table, or
one JSON object with ``--json`` (shape in docs/BENCHMARK.md). The benchmark itself is
``engine.bench.run.bench``; its figures and their formatting live in ``engine/bench/``. Exit status: 0
done, 2 bad input or a model that cannot be loaded (one ``error:`` line on stderr, after the progress).
"""

from __future__ import annotations

import argparse
import sys

from engine.bench.report import format_table, to_json
from engine.bench.scenarios import SCENARIOS
from engine.cli import MODEL_HELP
from engine.errors import EngineError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument("--model", default="default", help=MODEL_HELP)
    parser.add_argument("--precision", default="bf16", help="main precision: fp32 | bf16 | fp16 | auto")
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda")
    parser.add_argument("--tokens", type=int, default=None, help="new tokens per decode run (default 128)")
    parser.add_argument("--reps", type=int, default=None, help="timed repetitions (default 3)")
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
    parser.add_argument("--scenarios", default=",".join(SCENARIOS),
                        help=f"comma-separated subset of {','.join(SCENARIOS)} (figures of the others are null)")


def _progress(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    # Lazy: engine.bench.run loads torch and transformers (seconds), which `python -m engine --help` and
    # every other sub-command would otherwise pay for.
    from engine.bench.run import bench

    try:
        result = bench(args, _progress)
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(to_json(result) if args.json else format_table(result))
    return 0
