"""A local model calling MCP tools in a loop: ``ToolLoop.events(cancel)`` gives the events of the final reply, after
as many rounds of calls (at most ``max_rounds``) as the model makes.

Each round renders the conversation and generates, in the server's tool mode for this model
(``engine.tools.calls.native_tools``): prompted, the tools are described in the system prompt and each result goes
back in a user turn; native, the template gets ``tools=``, the call as a structured assistant turn and each result
as a ``tool`` turn. A reply that is tool calls is not shown: each call goes to its server
(``engine.tools.mcp.McpHub``), is reported through ``on_call`` (name, arguments, result, time), its result goes back
to the model, and the next round starts. ``tool_choice`` ``required`` or a tool's name forces the first round to call (a grammar,
so the arguments follow the tool's schema); later rounds may answer or call again, and the last one cannot call, so
the loop always ends with an answer. A tool that fails is a one-line result the model reads, like any other.

A round that is not forced streams as soon as its text stops looking like the start of a call (``<tool_call>``):
the answer reaches the caller as it is generated; a call's round is held back and never shown.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Protocol, Sequence

from engine.constrain import ConstraintError, ConstraintSpec, check_spec
from engine.errors import BadInputError
from engine.events import Event, Finished, Message, Token, ToolCall
from engine.fmt import one_line
from engine.inputs import SamplingConfig
from engine.tools.calls import TOOL_OPEN, Tool, ToolPlan, native_tools, tool_response
from engine.tools.mcp import McpTool, ToolOutcome

DEFAULT_MAX_ROUNDS = 4


class ToolCaller(Protocol):
    """What the loop calls each tool through: a gate that asks first where ``engine.tools.approval`` says so (the
    window's ``app.runtime.tool_host``, the command line's ``engine.cli.tool_chat.TerminalGate``) before ``McpHub``."""

    def call(self, name: str, arguments: dict[str, Any]) -> ToolOutcome: ...


@dataclass(frozen=True)
class CallRecord:
    """One call made during the loop, for the caller to show."""

    name: str
    arguments: str  # JSON text
    result: str
    ok: bool
    seconds: float


def usable_tools(tools: Sequence[McpTool], report: Callable[[str], None]) -> list[Tool]:
    """The tools whose parameter schema can constrain a call; each other one costs a line through ``report``."""
    usable, seen = [], set()
    for tool in tools:
        if tool.name in seen:
            report(f"MCP tool {tool.name!r} of {tool.server} left out: another server has a tool of that name")
            continue
        try:
            check_spec(ConstraintSpec.json_schema(tool.parameters))
        except ConstraintError as exc:
            report(f"MCP tool {tool.name!r} of {tool.server} left out: {exc}")
            continue
        seen.add(tool.name)
        usable.append(Tool(tool.name, tool.description, tool.parameters))
    return usable


class ToolLoop:
    """One user turn answered with tools: ``session`` a ``ChatSession``, ``hub`` the gate before a connected ``McpHub``."""

    def __init__(self, session: Any, messages: Sequence[Message], config: SamplingConfig, hub: ToolCaller,
                 tools: Sequence[Tool], *, tool_choice: str = "auto", max_rounds: int = DEFAULT_MAX_ROUNDS,
                 on_call: Callable[[CallRecord], None] = lambda _record: None) -> None:
        names = {t.name for t in tools}
        if tool_choice not in ("auto", "required") and tool_choice not in names:
            raise BadInputError(f"--tool-choice {tool_choice!r}: write auto, required or one of the tools' names "
                                f"({', '.join(sorted(names)) or 'none connected'})")
        if max_rounds < 1:
            raise BadInputError("--max-tool-rounds must be at least 1")
        self.session, self.config, self.hub, self.on_call = session, config, hub, on_call
        self.max_rounds = max_rounds
        forced = tool_choice if tool_choice in names else None
        # One call per round: the next round sees its result before deciding on another (and a forced reply
        # cannot repeat a call until its budget runs out).
        self._first = ToolPlan(tuple(tools), "forced" if forced else tool_choice, forced, parallel=False)
        self._auto = ToolPlan(tuple(tools), "auto", parallel=False)
        # A server's model (engine.remote) has no tokenizer here: prompted, its text goes through the server's template.
        self.native = native_tools(getattr(session.loaded, "tokenizer", None))
        self._tools = self._first.template_tools() if self.native else None
        self.messages = list(messages) if self.native else _with_system(list(messages), self._first.system_text())

    def events(self, cancel: threading.Event) -> Iterator[Event]:
        from engine.constrain.matcher import TokenConstraint  # torch: loaded with the model, not with --help

        loaded = self.session.loaded
        for round_ in range(self.max_rounds + 1):
            plan = self._first if round_ == 0 else self._auto
            last = round_ == self.max_rounds  # no calls any more: this round answers
            spec = None if last else plan.constraint()
            constraint = TokenConstraint(spec, loaded.tokenizer, loaded.eos_token_ids) if spec else None
            events: list[Event] = []
            text, streaming = "", False
            for event in self.session.generate(self.messages, self.config, cancel, constraint=constraint,
                                               **({"tools": self._tools} if self.native else {})):
                if streaming:
                    yield event
                    continue
                events.append(event)
                text += event.text if isinstance(event, Token) else ""
                head = text.lstrip()
                if spec is None and head and not (head.startswith(TOOL_OPEN) or TOOL_OPEN.startswith(head)):
                    streaming = True  # not a call: this round is the answer, shown as it comes
                    yield from events
            if streaming:
                return
            finished = events[-1]
            calls = None if last or not isinstance(finished, Finished) or finished.reason != "eos" \
                else plan.parse(finished.text)
            if not calls or cancel.is_set():
                yield from events
                return
            made = tuple(ToolCall(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in calls)
            self.messages.append(Message("assistant", "", tool_calls=made) if self.native
                                 else Message("assistant", finished.text.strip()))
            results: list[tuple[ToolCall, str]] = []
            for call in made:
                outcome = self.hub.call(call.name, json.loads(call.arguments))
                self.on_call(CallRecord(call.name, call.arguments, outcome.text, outcome.ok, outcome.seconds))
                results.append((call, outcome.text if outcome.ok else f"error: {one_line(outcome.text)}"))
            if self.native:  # each result a tool turn, for the template to write
                self.messages.extend(Message("tool", text, tool_call_id=call.id) for call, text in results)
            else:
                self.messages.append(Message("user", "\n".join(tool_response(c.name, text) for c, text in results)))


def _with_system(messages: list[Message], text: str) -> list[Message]:
    if messages and messages[0].role == "system":
        return [Message("system", messages[0].content + "\n\n" + text)] + messages[1:]
    return [Message("system", text)] + messages
