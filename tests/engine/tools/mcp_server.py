"""A real MCP server for the tests, written with the official SDK: over stdio (``python mcp_server.py``) or over
streamable HTTP on 127.0.0.1 (``python mcp_server.py http``: the SDK's ASGI app served by uvicorn on a socket bound
to port 0 before the server starts, so no other process can take the port; its number is the first stdout line).

Tools: ``add`` (two integers), ``shout`` (text in capitals), ``hang`` (never answers), ``crash`` (the process
exits mid-call) and ``garbage`` (writes a line that is not JSON-RPC onto the protocol channel, then answers).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Annotated

from pydantic import Field

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

server = MCPServer("miaohui-test-tools")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def add(a: Annotated[int, Field(ge=0, le=99)], b: Annotated[int, Field(ge=0, le=99)]) -> str:
    """Add two whole numbers."""
    return str(a + b)


@server.tool()
def shout(text: Annotated[str, Field(max_length=12)]) -> str:
    """The text in capitals."""
    return text.upper()


@server.tool()
def hang() -> str:
    """Never answers."""
    time.sleep(3600)
    return "late"


@server.tool()
def crash() -> str:
    """Exits the server process."""
    os._exit(3)


@server.tool()
def garbage() -> str:
    """Writes a non-protocol line onto stdout, then answers."""
    sys.stdout.write("this is not JSON-RPC\n")
    sys.stdout.flush()
    return "after garbage"


def serve_http() -> None:
    import socket

    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)  # a client that connects before uvicorn accepts waits in the backlog, it is not refused
    print(sock.getsockname()[1], flush=True)
    config = uvicorn.Config(server.streamable_http_app(host="127.0.0.1"), log_level="warning")
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    if sys.argv[1:] == ["http"]:
        serve_http()
    else:
        server.run("stdio")
