"""A real MCP server for the tests, written with the official SDK and run over stdio: ``python mcp_server.py``.

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


if __name__ == "__main__":
    server.run("stdio")
