"""Tools and structured output for a reply, on the worker thread: ``ToolHost`` runs a reply through
``engine.tools.loop.ToolLoop`` with the MCP tools its conversation enabled, or constrains it to a JSON schema
(``engine.constrain``), and reports each call as it happens (``ToolCallEvent``) through the worker's event buffer.

The MCP hub (``engine.tools.mcp.McpHub``) lives here, beside the worker's model: connected on the first reply that
enables a tool (never before: nothing is started or contacted until the user added a server and enabled one of its
tools), kept for the next replies, connected again when the list of servers changes or one of them failed.

A tool that needs the user's approval (``engine.tools.approval.needs_approval``, the rule the command line uses
too: its own server does not say it is read-only) runs only once the user allowed it: the
worker posts a ``ConfirmRequest`` (the window shows the question) and waits on its ``threading.Event``, polling the
reply's cancel flag, so Stop or closing the window ends the wait; the GUI thread never waits on the worker. A
refusal is the one-line result the model reads (``REFUSED``).

Owns the hub's lifetime, the gate before each call and the events; not the loop (``engine.tools.loop``), not the
dialogs or views (``app.widgets``), not what the history keeps (``app.history.tool_record``).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from app.history.tool_record import ToolCallRecord
from engine.errors import BadInputError
from engine.events import Event, Finished, Stats
from engine.fmt import one_line
from engine.remote import RemoteSession
from engine.tools.approval import REFUSED, needs_approval
from engine.tools.loop import ToolLoop, usable_tools
from engine.tools.mcp import DEFAULT_TIMEOUT_S, McpHub, McpServerSpec, McpTool, ToolOutcome, parse_server

_POLL_S = 0.1  # how often a wait for the user's answer looks at the reply's cancel flag


@dataclass(frozen=True)
class ReplyTools:
    """What a reply may use: the servers the user added, the tools enabled for its conversation (by name), whether
    its first round must call one (``choice`` auto | required) and a JSON schema its answer must match ("" none)."""

    servers: tuple[str, ...] = ()
    enabled: tuple[str, ...] = ()
    choice: str = "auto"
    json_schema: str = ""

    @property
    def uses_tools(self) -> bool:
        return bool(self.servers and self.enabled)


@dataclass(frozen=True)
class ToolCallEvent:
    """A call of the reply being written: ``state`` asking (waiting for the user's yes), running, done (``record``
    holds its outcome) or problem (a server or tool that could not be used: ``record.result`` is the one line); or,
    before any call, connecting (the servers, named in ``arguments``, are being started and asked for their tools:
    seconds, a Python server importing its SDK, during which the reply has nothing else to show)."""

    index: int
    name: str
    arguments: str
    state: str
    record: ToolCallRecord | None = None


class ConfirmRequest:
    """A question to the user, made on the worker thread and answered on the GUI thread (``answer``)."""

    def __init__(self, name: str, arguments: str) -> None:
        self.name, self.arguments = name, arguments
        self._answered = threading.Event()
        self._allowed = False

    def answer(self, allowed: bool) -> None:
        """The user's answer; only the first one counts."""
        if not self._answered.is_set():
            self._allowed = bool(allowed)
            self._answered.set()

    def wait(self, cancel: threading.Event) -> bool | None:
        """The answer; None when ``cancel`` was set first (the reply stopped)."""
        while not self._answered.wait(_POLL_S):
            if cancel.is_set():
                return None
        return self._allowed


class _Gate:
    """What ``ToolLoop`` calls as its hub: asks first where needed, then calls, reporting each step."""

    def __init__(self, host: "ToolHost", hub: McpHub, tools: list[McpTool], cancel: threading.Event) -> None:
        self._host, self._hub, self._cancel = host, hub, cancel
        self._tools = {tool.name: tool for tool in tools}  # names are unique across the hub (McpHub)
        self._count = 0

    def call(self, name: str, arguments: dict[str, Any]) -> ToolOutcome:
        index, self._count = self._count, self._count + 1
        text = json.dumps(arguments, ensure_ascii=False)
        if needs_approval(self._tools.get(name)):
            self._host.report(ToolCallEvent(index, name, text, "asking"))
            request = ConfirmRequest(name, text)
            self._host.ask(request)
            allowed = request.wait(self._cancel)
            if not allowed:
                outcome = ToolOutcome(REFUSED if allowed is False else "the reply was stopped", False, 0.0)
                self._host.report(ToolCallEvent(index, name, text, "done", ToolCallRecord(
                    name, text, outcome.text, False, 0.0, refused=allowed is False)))
                return outcome
        self._host.report(ToolCallEvent(index, name, text, "running"))
        outcome = self._hub.call(name, arguments)
        self._host.failed |= not outcome.ok
        self._host.report(ToolCallEvent(index, name, text, "done", ToolCallRecord(
            name, text, outcome.text if outcome.ok else one_line(outcome.text), outcome.ok, outcome.seconds)))
        return outcome


class ToolHost:
    """The worker's tools: ``report(event)`` puts an event in the worker's buffer, ``ask(request)`` posts a question
    to the window. ``timeout_s``: how long one call may take (a hung server is then one line)."""

    def __init__(self, report: Callable[[object], None], ask: Callable[[ConfirmRequest], None],
                 timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.report, self.ask, self.timeout_s = report, ask, timeout_s
        self._hub: McpHub | None = None
        self._servers: tuple[str, ...] = ()
        self.failed = False  # a call or a server failed: connect again before the next reply

    def events(self, session: Any, messages: Any, config: Any, request: ReplyTools, cancel: threading.Event,
               **extra: Any) -> Iterator[Event]:
        """The events of a reply with ``request``'s tools or schema (``extra``: ``ChatSession.generate``'s)."""
        if isinstance(session, RemoteSession):
            raise BadInputError("tools and JSON answers need a model loaded here, not a server's")
        if request.uses_tools:
            if request.json_schema:
                self._problem("the JSON schema is not applied to a reply that may call tools")
            return self._with_tools(session, messages, config, request, cancel)
        return self._constrained(session, messages, config, request.json_schema, cancel, extra)

    def close(self) -> None:
        if self._hub is not None:
            self._hub.close()
            self._hub = None

    # -- internals ------------------------------------------------------------------------------------------
    def _problem(self, line: str) -> None:
        self.report(ToolCallEvent(-1, "", "", "problem", ToolCallRecord("", "", one_line(line), False, 0.0)))

    def _connect(self, servers: tuple[str, ...]) -> McpHub:
        if self._hub is not None and servers == self._servers and not self.failed:
            return self._hub
        self.close()
        specs: list[McpServerSpec] = []
        for text in servers:
            try:
                specs.append(parse_server(text))
            except BadInputError as exc:
                self._problem(str(exc))
        if specs:  # say what the reply waits for: starting a server and listing its tools can take seconds
            self.report(ToolCallEvent(-1, "", ", ".join(spec.label for spec in specs), "connecting"))
        self._hub, self._servers, self.failed = McpHub(specs, timeout_s=self.timeout_s), servers, False
        self._hub.connect()
        self.failed = bool(self._hub.problems)
        for line in self._hub.problems:
            self._problem(line)
        return self._hub

    def _with_tools(self, session: Any, messages: Any, config: Any, request: ReplyTools,
                    cancel: threading.Event) -> Iterator[Event]:
        hub = self._connect(request.servers)
        offered = {tool.name: tool for tool in hub.tools}
        for name in request.enabled:
            if name not in offered:
                self._problem(f"tool {name!r} is not offered by any connected MCP server")
        chosen = [offered[name] for name in request.enabled if name in offered]
        tools = usable_tools(chosen, self._problem)
        if not tools:
            yield from session.generate(list(messages), config, cancel)
            return
        loop = ToolLoop(session, messages, config, _Gate(self, hub, chosen, cancel), tools,
                        tool_choice=request.choice if request.choice in ("auto", "required") else "auto")
        yield from loop.events(cancel)

    def _constrained(self, session: Any, messages: Any, config: Any, schema: str, cancel: threading.Event,
                     extra: dict[str, Any]) -> Iterator[Event]:
        from engine.constrain import ConstraintSpec
        from engine.constrain.matcher import TokenConstraint, with_mask_cost  # torch: loaded with the model

        loaded = session.loaded
        constraint = TokenConstraint(ConstraintSpec("json_schema", schema), loaded.tokenizer, loaded.eos_token_ids)
        for event in session.generate(messages, config, cancel=cancel, constraint=constraint, **extra):
            if isinstance(event, Stats):
                event = Stats(with_mask_cost(event.metrics, constraint))
            elif isinstance(event, Finished):
                event = Finished(event.reason, event.text, with_mask_cost(event.metrics, constraint), event.error,
                                 event.reasoning)
            yield event
