"""The command-line options that point a sub-command at an OpenAI-compatible server, in one place.

``add_arguments(parser, what)`` adds ``--base-url`` (its help says ``what`` the sub-command does there) and
``--api-key``; ``key_of(args)`` is the key to send: ``--api-key``, else ``$MIAOHUI_API_KEY`` (``ENV_KEY``), which
keeps a key out of the process list. ``engine serve`` reads the same variable for the key it asks for. Owns the
options and the variable's name; connecting is ``engine.remote``'s.
"""

from __future__ import annotations

import argparse
import os

ENV_KEY = "MIAOHUI_API_KEY"


def add_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--base-url", default=None,
                        help=f"{what} an OpenAI-compatible server's model instead, e.g. http://127.0.0.1:8000/v1 "
                             "(vLLM, llama-server, Ollama's /v1, LM Studio, python -m engine serve)")
    parser.add_argument("--api-key", default=None,
                        help=f"the server's API key (default: ${ENV_KEY}, which keeps it out of the process list)")


def key_of(args: argparse.Namespace) -> str | None:
    """The key a client sends: ``--api-key``, else the environment's."""
    return args.api_key or os.environ.get(ENV_KEY)


__all__ = ["ENV_KEY", "add_arguments", "key_of"]
