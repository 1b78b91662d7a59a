"""How ``engine.tools.mcp.McpHub`` reaches a server, around the official SDK's own transports (issue 40):

- ``stdio_target``: the server's command, its environment marked with a token (``MIAOHUI_MCP_SERVER``) that every
  process it starts inherits, so ``reap`` can end the helpers a server left running when it stopped (the SDK stops
  the server's process group only when the server itself outlives its grace period).
- ``http_target``: streamable HTTP through an ``httpx2`` client that stops reading a response past
  ``MAX_RESPONSE_BYTES`` (the SDK reads a JSON response whole: a 200 MB result peaked near 1 GB before it was cut).
- ``repairing``: a message the SDK's parser refuses for its nesting (pydantic's JSON parser stops at 200 levels) is
  parsed again with ``json``, each tool whose schema nests deeper than ``MAX_SCHEMA_DEPTH`` dropped with one line,
  so one such tool costs that tool, not the whole server (which then looked "timed out" after 20 s).

Owns these wrappers; not the calls, the listing or the threading (``engine.tools.mcp``).
"""

from __future__ import annotations

import json
import logging
import os
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Callable

MARKER = "MIAOHUI_MCP_SERVER"
MAX_RESPONSE_BYTES = 16 * 1024 * 1024  # one HTTP answer; a result is cut to MAX_RESULT_CHARS anyway
MAX_SCHEMA_DEPTH = 64  # nested JSON containers in a tool's parameter schema (a real one nests a handful)
_HTTP_TIMEOUT_S, _HTTP_READ_TIMEOUT_S = 30.0, 300.0  # the SDK's own defaults (create_mcp_http_client)

# The SDK logs each line it cannot parse with its traceback; the hub reports what it costs in one line instead.
logging.getLogger("mcp").addHandler(logging.NullHandler())


def schema_depth(value: Any) -> int:
    """How many JSON containers nest in ``value`` (iterative: a hostile schema must not exhaust the stack)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def too_deep(name: str, server: str) -> str:
    return f"MCP tool {name!r} of {server} left out: its parameter schema nests deeper than {MAX_SCHEMA_DEPTH} levels"


def stdio_target(argv: tuple[str, ...], token: str) -> Any:
    from mcp import StdioServerParameters

    return StdioServerParameters(command=argv[0], args=list(argv[1:]), env={MARKER: token})


def reap(tokens: set[str]) -> None:
    """End every process of this user whose environment carries one of ``tokens`` (a server's leftovers)."""
    import psutil

    if not tokens:
        return
    found = []
    for process in psutil.process_iter(["uids"]):
        try:
            if process.pid == os.getpid() or (process.info["uids"] and process.info["uids"].real != os.getuid()):
                continue
            if process.environ().get(MARKER) in tokens:
                found.append(process)
        except (psutil.Error, OSError):
            continue  # gone, or not ours to read
    for process in found:
        try:
            process.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(found, timeout=5)


def http_target(url: str) -> Any:
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    class TooLarge(httpx2.StreamError):
        pass

    class Bounded(httpx2.AsyncByteStream):
        def __init__(self, inner: Any) -> None:
            self._inner = inner

        async def __aiter__(self) -> AsyncIterator[bytes]:
            read = 0
            async for chunk in self._inner:
                read += len(chunk)
                if read > MAX_RESPONSE_BYTES:
                    raise TooLarge(f"the server's answer is larger than {MAX_RESPONSE_BYTES // 2**20} MiB: "
                                   "not read further")
                yield chunk

        async def aclose(self) -> None:
            await self._inner.aclose()

    class BoundedTransport(httpx2.AsyncBaseTransport):
        def __init__(self) -> None:
            self._inner = httpx2.AsyncHTTPTransport()

        async def handle_async_request(self, request: Any) -> Any:
            response = await self._inner.handle_async_request(request)
            if request.method != "POST":  # the long-lived GET stream carries many small events, over hours
                return response
            return httpx2.Response(response.status_code, headers=response.headers, stream=Bounded(response.stream),
                                   extensions=response.extensions)

        async def aclose(self) -> None:
            await self._inner.aclose()

    client = httpx2.AsyncClient(transport=BoundedTransport(),
                                timeout=httpx2.Timeout(_HTTP_TIMEOUT_S, read=_HTTP_READ_TIMEOUT_S))

    @asynccontextmanager
    async def transport() -> AsyncIterator[Any]:
        async with client, streamable_http_client(url, http_client=client) as streams:
            yield streams

    return transport()


class _Repairing:
    """The SDK's read stream, with ``_repair`` applied to what it yields."""

    def __init__(self, inner: Any, dropped: Callable[[str], None]) -> None:
        self._inner, self._dropped = inner, dropped

    async def receive(self) -> Any:
        return _repair(await self._inner.receive(), self._dropped)

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> "_Repairing":
        return self

    async def __anext__(self) -> Any:
        return _repair(await self._inner.__anext__(), self._dropped)

    async def __aenter__(self) -> "_Repairing":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


@asynccontextmanager
async def repairing(inner: Any, dropped: Callable[[str], None]) -> AsyncIterator[Any]:
    """``inner`` (an SDK transport) whose too-deep tools are dropped, each named once through ``dropped``."""
    async with inner as (read, write):
        yield _Repairing(read, dropped), write


def _repair(item: Any, dropped: Callable[[str], None]) -> Any:
    from mcp.shared.message import SessionMessage
    from mcp_types import jsonrpc_message_adapter
    from pydantic import ValidationError

    if not isinstance(item, ValidationError):
        return item
    errors = item.errors()
    line = errors[0].get("input") if errors and errors[0].get("type") == "json_invalid" else None
    if not isinstance(line, str):
        return item
    try:
        message = json.loads(line)
    except (ValueError, RecursionError):
        return item
    tools = message.get("result", {}).get("tools") if isinstance(message, dict) else None
    if not isinstance(tools, list):
        return item
    kept = []
    for tool in tools:
        if isinstance(tool, dict) and schema_depth(tool.get("inputSchema")) > MAX_SCHEMA_DEPTH:
            dropped(str(tool.get("name")))
        else:
            kept.append(tool)
    message["result"]["tools"] = kept
    try:
        return SessionMessage(jsonrpc_message_adapter.validate_python(message, by_name=False))
    except (ValidationError, RecursionError):
        return item
