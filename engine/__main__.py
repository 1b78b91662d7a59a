"""Headless command line: ``python -m engine {chat,complete,info,fetch,bench,lab,models,serve,docs}``.

Each sub-command lives in its own module exposing ``add_arguments(parser)`` and ``run(args) -> int``;
this file only dispatches, so the commands stay independent. Exit status: 0 success, 2 bad input or
a model that cannot be loaded (one line on stderr, no traceback), 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import importlib
import sys

import engine  # noqa: F401  (offline switches)

COMMANDS = {
    "chat": ("engine.cli.chat", "stream a reply to one prompt"),
    "complete": ("engine.cli.complete", "continue a plain text (text completion, no chat template; any model)"),
    "info": ("engine.cli.info", "print the model card"),
    "fetch": ("engine.cli.fetch", "put the default model in place"),
    "bench": ("engine.cli.bench", "benchmark the engine against transformers generate()"),
    "lab": ("engine.cli.lab", "run the inference-lab experiments headless"),
    "serve": ("engine.cli.serve", "serve the model over an OpenAI-compatible HTTP API"),
    "models": ("engine.cli.models", "the model library: list, search, show, fit, pull, rm"),
    "docs": ("engine.cli.docs", "your own documents: add, list, remove, search (issue 43)"),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine", description="Miaohui inference engine")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module_name, help_text) in COMMANDS.items():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if not module_name.startswith(exc.name or "\0"):
                raise
            continue  # command not built into this installation
        add_arguments = getattr(module, "add_arguments", None)
        if add_arguments is None:
            continue
        cmd = sub.add_parser(name, help=help_text)
        cmd.set_defaults(_module=module_name)
        add_arguments(cmd)
    args = parser.parse_args(argv)
    module = sys.modules[args._module]
    runner = module.run
    try:
        return int(runner(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
