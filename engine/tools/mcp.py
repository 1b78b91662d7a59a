"""MCP servers the user configured, with the official ``mcp`` SDK: ``McpHub`` connects them, lists their tools and
calls them, each failure costing one line (``ToolOutcome(ok=False)``), never the caller.

``parse_server(text)``: ``stdio:CMD ARGS`` (a command the user gave, split like a shell would, started as a child
process) or an ``http://`` URL of a streamable-HTTP server on loopback (127.0.0.1, ::1, localhost; anything else is
refused: a tool server elsewhere is not this flag's job). Nothing is started or contacted before ``McpHub.connect``.

Threading: the SDK is asyncio/anyio and its clients must be entered and left in one task, so the hub runs one
event loop on its own thread with one task per server, which owns that server's client and serves the calls sent
to it in turn. The caller's thread waits on each call for at most ``timeout_s`` (plus a margin): a server that
hangs is a timeout line, one that crashes or writes garbage an error line, and the others keep working. A tool
whose schema nests too deep is one line and left out, the server kept; ``close`` also ends the processes a stdio
server started and left running; an HTTP answer is read up to a bound (``engine.tools.mcp_transport``).

Identity: a tool's ``name`` is unique across the hub (``McpTool.name``; what the model calls, the window enables and
the approval reads). Two servers may offer the same name, and one of them may call its copy read-only: each such
copy is renamed ``NAME_<server's position>`` (``remote_name`` keeps the server's own), so the tool approved is the
tool run and its own read-only hint decides (issue 40).
"""

from __future__ import annotations

import asyncio
import ipaddress
import shlex
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

from engine.errors import BadInputError
from engine.fmt import one_line
from engine.tools.mcp_transport import (MAX_SCHEMA_DEPTH, http_target, reap, repairing, schema_depth, stdio_target,
                                        too_deep)

DEFAULT_TIMEOUT_S = 20.0  # one call may take this long
CONNECT_TIMEOUT_S = 60.0  # starting a server and listing its tools (a Python server imports its SDK: seconds)
_MARGIN_S = 5.0  # the caller's own wait beyond the timeout the server task enforces
MAX_RESULT_CHARS = 8000  # a tool's result as the model reads it: bounded, a tool may return megabytes


@dataclass(frozen=True)
class McpServerSpec:
    """One server: ``kind`` "stdio" (``argv``) or "http" (``url``)."""

    kind: str
    argv: tuple[str, ...] = ()
    url: str = ""

    @property
    def label(self) -> str:
        return self.argv[0].rsplit("/", 1)[-1] if self.kind == "stdio" else self.url


def parse_server(text: str) -> McpServerSpec:
    """``stdio:CMD ARGS`` or a loopback ``http://`` URL; ``BadInputError`` (one line) for anything else."""
    if text.startswith("stdio:"):
        try:
            argv = tuple(shlex.split(text[len("stdio:"):]))
        except ValueError as exc:
            raise BadInputError(f"--mcp {text!r}: {exc}") from None
        if not argv:
            raise BadInputError("--mcp stdio: needs a command, e.g. 'stdio:python my_server.py'")
        return McpServerSpec("stdio", argv=argv)
    parts = urlsplit(text)
    if parts.scheme in ("http", "https") and parts.hostname:
        host = parts.hostname
        loopback = host == "localhost"
        try:
            loopback = loopback or ipaddress.ip_address(host).is_loopback
        except ValueError:
            pass
        if not loopback:
            raise BadInputError(f"--mcp {text!r}: only MCP servers on this machine (127.0.0.1, ::1, localhost) "
                                "may be used over HTTP")
        return McpServerSpec("http", url=text)
    raise BadInputError(f"--mcp {text!r}: write 'stdio:COMMAND ARGS' or http://127.0.0.1:PORT/mcp")


@dataclass(frozen=True)
class McpTool:
    server: str
    name: str
    description: str
    parameters: dict[str, Any]
    read_only: bool = False  # the server says it changes nothing (ToolAnnotations.readOnlyHint)
    remote_name: str = ""  # the server's own name for it when ``name`` had to be made unique; "" the same

    @property
    def server_name(self) -> str:
        """The name sent to the server in a call."""
        return self.remote_name or self.name


@dataclass(frozen=True)
class ToolOutcome:
    """A call's result as text (or its one-line failure), and how long it took."""

    text: str
    ok: bool
    seconds: float


@dataclass
class _Server:
    spec: McpServerSpec
    requests: "asyncio.Queue[Any]" = field(default_factory=asyncio.Queue)
    tools: list[McpTool] = field(default_factory=list)
    error: str | None = None
    task: "asyncio.Task[None] | None" = None
    token: str = field(default_factory=lambda: uuid.uuid4().hex)  # marks the processes it starts (reap)
    dropped: list[str] = field(default_factory=list)  # tools left out for a schema nested too deep


def _result_text(result: Any) -> str:
    parts = []
    for block in getattr(result, "content", None) or []:
        text = getattr(block, "text", None)
        parts.append(text if isinstance(text, str) else f"[{getattr(block, 'type', 'content')}]")
    if not parts and getattr(result, "structured_content", None) is not None:
        import json
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    text = "\n".join(parts)
    return text if len(text) <= MAX_RESULT_CHARS else text[:MAX_RESULT_CHARS] + " …(cut)"


class McpHub:
    """The configured servers, connected on ``connect()``; ``tools`` lists what they offer, ``call`` runs one."""

    def __init__(self, specs: list[McpServerSpec], timeout_s: float = DEFAULT_TIMEOUT_S,
                 connect_timeout_s: float = CONNECT_TIMEOUT_S) -> None:
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self._servers: list[_Server] = []
        self._specs = specs
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.problems: list[str] = []  # one line per server that could not be used

    # -- the caller's thread ----------------------------------------------------------------------
    def connect(self) -> list[McpTool]:
        """Start the servers and list their tools; a server that fails is a line in ``problems``."""
        ready = threading.Event()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self._loop)
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="miaohui-mcp", daemon=True)
        self._thread.start()
        ready.wait()
        self._servers = self._submit(self._start_all(), self.connect_timeout_s + _MARGIN_S, [])
        _unique_names(self._servers)
        for server in self._servers:
            if server.error:
                self.problems.append(f"MCP server {server.spec.label}: {server.error}")
            self.problems.extend(too_deep(name, server.spec.label) for name in server.dropped)
        return self.tools

    @property
    def tools(self) -> list[McpTool]:
        return [tool for server in self._servers if not server.error for tool in server.tools]

    def call(self, name: str, arguments: dict[str, Any]) -> ToolOutcome:
        t = time.perf_counter()
        found = next(((s, x) for s in self._servers if not s.error for x in s.tools if x.name == name), None)
        if found is None:
            return ToolOutcome(f"no connected MCP server has a tool named {name!r}", False, 0.0)
        server, tool = found
        try:
            outcome = self._submit(self._ask(server, tool.server_name, arguments), self.timeout_s + _MARGIN_S, None)
        except Exception as exc:  # noqa: BLE001  (the caller gets one line whatever went wrong)
            return ToolOutcome(one_line(exc, name_type=True), False, time.perf_counter() - t)
        if outcome is None:
            return ToolOutcome(f"{name}: no answer within {self.timeout_s:g} s", False, time.perf_counter() - t)
        return outcome

    def close(self) -> None:
        """Stop every server (bounded) and the loop, then every process a stdio server started and left behind."""
        if self._loop is None:
            return
        self._submit(self._stop_all(), self.timeout_s, None)
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(self.timeout_s)
        self._loop = None
        reap({server.token for server in self._servers if server.spec.kind == "stdio"})

    def __enter__(self) -> "McpHub":
        self.connect()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _submit(self, coro: Any, wait_s: float, default: Any) -> Any:
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(wait_s)
        except TimeoutError:
            future.cancel()
            return default

    # -- the hub's loop -------------------------------------------------------------------------
    async def _start_all(self) -> list[_Server]:
        servers = [_Server(spec) for spec in self._specs]
        started = []
        for server in servers:
            connected: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            server.task = asyncio.create_task(self._own(server, connected))
            started.append(connected)
        done, _ = await asyncio.wait(started, timeout=self.connect_timeout_s)
        for server, connected in zip(servers, started):
            if connected not in done:
                server.error = f"did not start and list its tools within {self.connect_timeout_s:g} s"
                server.task.cancel()
        return servers

    async def _own(self, server: _Server, connected: "asyncio.Future[None]") -> None:
        """The one task that holds ``server``'s client: connect, list, then serve calls until told to stop."""
        from mcp import Client
        from mcp.client.stdio import stdio_client

        spec = server.spec
        # errlog now, not the SDK's default (sys.stderr when it was imported, which may be closed since).
        inner = (stdio_client(stdio_target(spec.argv, server.token), errlog=sys.stderr) if spec.kind == "stdio"
                 else http_target(spec.url))
        try:
            async with Client(repairing(inner, server.dropped.append), read_timeout_seconds=self.timeout_s) as client:
                listing = await client.list_tools()
                for tool in listing.tools:
                    if schema_depth(tool.input_schema) > MAX_SCHEMA_DEPTH:
                        server.dropped.append(tool.name)
                        continue
                    hints = getattr(tool, "annotations", None)
                    server.tools.append(McpTool(spec.label, tool.name, tool.description or "",
                                                dict(tool.input_schema or {"type": "object"}),
                                                bool(getattr(hints, "read_only_hint", False))))
                connected.set_result(None)
                while True:
                    request = await server.requests.get()
                    if request is None:
                        return
                    name, arguments, reply = request
                    t = time.perf_counter()
                    try:
                        result = await asyncio.wait_for(client.call_tool(name, arguments), self.timeout_s)
                        outcome = ToolOutcome(_result_text(result), not getattr(result, "is_error", False),
                                              time.perf_counter() - t)
                    except asyncio.TimeoutError:
                        outcome = ToolOutcome(f"{name}: no answer within {self.timeout_s:g} s", False,
                                              time.perf_counter() - t)
                    except Exception as exc:  # noqa: BLE001  (a broken server: one line, the others go on)
                        outcome = ToolOutcome(f"{name} failed: {one_line(exc, name_type=True)}", False,
                                              time.perf_counter() - t)
                    if not reply.done():
                        reply.set_result(outcome)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001  (an ExceptionGroup from anyio, a crashed child)
            message = one_line(_innermost(exc), name_type=True)
            server.error = server.error or message
            if not connected.done():
                connected.set_result(None)
            while not server.requests.empty():  # whoever waits hears why
                request = server.requests.get_nowait()
                if request is not None and not request[2].done():
                    request[2].set_result(ToolOutcome(f"{request[0]} failed: the server stopped ({message})",
                                                      False, 0.0))

    async def _ask(self, server: _Server, name: str, arguments: dict[str, Any]) -> ToolOutcome:
        if server.task is None or server.task.done():
            return ToolOutcome(f"{name} failed: the server stopped ({server.error or 'it exited'})", False, 0.0)
        reply: asyncio.Future[ToolOutcome] = asyncio.get_running_loop().create_future()
        await server.requests.put((name, arguments, reply))
        done, _ = await asyncio.wait([reply, server.task], timeout=self.timeout_s + 1,
                                     return_when=asyncio.FIRST_COMPLETED)
        if reply in done:
            return reply.result()
        if server.task in done:
            return ToolOutcome(f"{name} failed: the server stopped ({server.error or 'it exited'})", False, 0.0)
        return ToolOutcome(f"{name}: no answer within {self.timeout_s:g} s", False, 0.0)

    async def _stop_all(self) -> None:
        tasks = []
        for server in self._servers:
            if server.task is not None and not server.task.done():
                await server.requests.put(None)
                tasks.append(server.task)
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=self.timeout_s)
            for task in pending:
                task.cancel()


def _unique_names(servers: list[_Server]) -> None:
    """Rename each tool whose name another tool of the hub also has (``McpTool`` ``name``/``remote_name``)."""
    counts = Counter(tool.name for server in servers if not server.error for tool in server.tools)
    taken = set(counts)
    for position, server in enumerate(servers, 1):
        renamed = []
        for tool in server.tools:
            if counts[tool.name] > 1:
                name = f"{tool.name}_{position}"
                while name in taken:  # a server may already offer NAME_2, or list NAME twice
                    name += "_"
                taken.add(name)
                tool = replace(tool, name=name, remote_name=tool.name)
            renamed.append(tool)
        server.tools = renamed


def _innermost(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc
