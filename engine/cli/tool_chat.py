"""``python -m engine chat --mcp SPEC``: the chat command's MCP flags and its run with tools (``engine.tools``).

``--mcp 'stdio:CMD ARGS'`` or ``--mcp http://127.0.0.1:PORT/mcp`` (repeatable) connects those servers and only
those; the model may then call their tools in a loop of at most ``--max-tool-rounds`` rounds
(``engine.tools.loop``), and each call is printed on stderr as it is made: its name, arguments, result (one line)
and time. A server that cannot start, hangs or fails costs one line; the reply still comes. Works with a model
loaded here (a remote server has its own tools).

Approval: a tool that needs it (``engine.tools.approval.needs_approval``, the window's rule too) runs only after a
``y`` on the terminal (a y/N prompt on stderr, read from stdin when it is a terminal); without a terminal it is
refused unless ``--allow-tools`` says to run such tools unasked. A refusal is the result the model reads, so it
can go on.
"""

from __future__ import annotations

import argparse
import sys
import json
from typing import Any, Callable, Sequence, TextIO

from engine.errors import BadInputError
from engine.fmt import outside_text
from engine.tools.approval import REFUSED, needs_approval
from engine.tools.loop import DEFAULT_MAX_ROUNDS, CallRecord, ToolLoop, usable_tools
from engine.tools.mcp import McpHub, ToolOutcome, parse_server

_SHOWN_CHARS = 300  # a result printed on its line; the model reads it whole (bounded by engine.tools.mcp)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mcp", action="append", default=[], metavar="SPEC",
                        help="an MCP server whose tools the model may call: 'stdio:COMMAND ARGS' or "
                             "http://127.0.0.1:PORT/mcp (repeatable; nothing is started or contacted without it)")
    parser.add_argument("--tool-choice", default="auto",
                        help="with --mcp: auto, required (the first reply must call a tool) or a tool's name")
    parser.add_argument("--max-tool-rounds", type=int, default=DEFAULT_MAX_ROUNDS,
                        help="with --mcp: rounds of tool calls before the model must answer (default: %(default)s)")
    parser.add_argument("--allow-tools", action="store_true",
                        help="with --mcp: run tools that may change something without asking. Without it each such "
                             "call asks y/N on the terminal, and is refused when stdin is not a terminal")


def check(args: argparse.Namespace) -> None:
    """Refuse bad MCP flags before any model loads."""
    for spec in args.mcp:
        parse_server(spec)
    if args.mcp and args.base_url is not None:
        raise BadInputError("--mcp works with a model loaded here, not with --base-url")


def _say(line: str) -> None:
    print(outside_text(line, max_chars=1000), file=sys.stderr, flush=True)


def _show(record: CallRecord) -> None:
    result = record.result if len(record.result) <= _SHOWN_CHARS else record.result[:_SHOWN_CHARS] + "…"
    mark = "→" if record.ok else "✗"
    _say(f"tool: {record.name}({record.arguments}) {mark} {result} ({record.seconds:.2f} s)")


class TerminalGate:
    """What ``ToolLoop`` calls as its hub on the command line: asks on the terminal before a tool that needs it
    (``needs_approval``), then calls ``hub``. ``allow_all``: ``--allow-tools``; ``stdin``: where the answer is read."""

    def __init__(self, hub: McpHub, allow_all: bool, stdin: TextIO) -> None:
        self._hub, self._allow_all, self._stdin = hub, allow_all, stdin
        self._tools = {tool.name: tool for tool in hub.tools}

    def call(self, name: str, arguments: dict[str, Any]) -> ToolOutcome:
        if needs_approval(self._tools.get(name)) and not self._allowed(name, arguments):
            return ToolOutcome(REFUSED, False, 0.0)
        return self._hub.call(name, arguments)

    def _allowed(self, name: str, arguments: dict[str, Any]) -> bool:
        if self._allow_all:
            return True
        if not self._stdin.isatty():
            _say(f"tool {name} refused: it may change something and there is no terminal to ask "
                 "(--allow-tools runs such tools unasked)")
            return False
        shown = outside_text(f"{name}({json.dumps(arguments, ensure_ascii=False)})", max_chars=1000)
        print(f"Run tool {shown}? It may change something. [y/N] ", end="", file=sys.stderr, flush=True)
        answer = self._stdin.readline()  # "" at end of input: a no
        return answer.strip().lower() in ("y", "yes")


def run(session: Any, messages: Sequence[Any], config: Any, args: argparse.Namespace,
        print_reply: Callable[[Callable[[Any], Any]], int]) -> int:
    """Connect the servers, answer with their tools, close them; ``print_reply(start)`` prints the final reply."""
    with McpHub([parse_server(spec) for spec in args.mcp]) as hub:
        for problem in hub.problems:
            _say(problem)
        tools = usable_tools(hub.tools, _say)
        _say(f"tools: {', '.join(t.name for t in tools) or 'none'}")
        if not tools:
            return print_reply(lambda cancel: session.generate(list(messages), config, cancel))
        gate = TerminalGate(hub, args.allow_tools, sys.stdin)
        loop = ToolLoop(session, messages, config, gate, tools, tool_choice=args.tool_choice,
                        max_rounds=args.max_tool_rounds, on_call=_show)
        return print_reply(loop.events)
