"""MCP over streamable HTTP through the official SDK: the real server of ``mcp_server.py``, served by uvicorn on
127.0.0.1 (a port bound to 0 by the server itself, so no race for it), is listed and called by the hub and by
``python -m engine chat --mcp http://127.0.0.1:PORT/mcp``; a server that stops mid-session costs one line."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.tools.mcp import McpHub, parse_server
from tests.engine.tools.test_mcp import TOOLS, _chat, long_tiny  # noqa: F401  (long_tiny: the fixture, reused)

SERVER_PY = Path(__file__).with_name("mcp_server.py")


def _start_server() -> tuple[subprocess.Popen, str]:
    """The HTTP server as a child process, once it answers HTTP; its URL."""
    proc = subprocess.Popen([sys.executable, str(SERVER_PY), "http"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    port = int(proc.stdout.readline())
    url = f"http://127.0.0.1:{port}/mcp"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return proc, url
        except urllib.error.HTTPError:  # any answer (a 4xx for a bare GET) means uvicorn is serving
            return proc, url
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                _stop(proc)
                pytest.fail("the MCP HTTP test server did not answer within 30 s")
            time.sleep(0.1)


def _stop(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait(10)
    proc.stdout.close()


@pytest.fixture
def server() -> Iterator[tuple[subprocess.Popen, str]]:
    proc, url = _start_server()
    yield proc, url
    _stop(proc)


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    proc, address = _start_server()
    yield address
    _stop(proc)


def test_the_hub_lists_and_calls_the_tools_of_an_http_server(url):
    with McpHub([parse_server(url)], timeout_s=3) as hub:
        assert hub.problems == []
        tools = {t.name: t for t in hub.tools}
        assert set(tools) == TOOLS and {t.server for t in hub.tools} == {url}
        assert tools["add"].parameters["properties"]["a"]["maximum"] == 99 and tools["add"].read_only
        assert tools["shout"].parameters["properties"]["text"]["maxLength"] == 12 and not tools["shout"].read_only
        added = hub.call("add", {"a": 2, "b": 40})
        assert (added.text, added.ok) == ("42", True) and added.seconds > 0
        assert hub.call("shout", {"text": "hi"}).text == "HI"
        hung = hub.call("hang", {})
        assert not hung.ok and "no answer within 3 s" in hung.text
        assert hub.call("add", {"a": 1, "b": 1}).text == "2"  # still usable after a timeout
        refused = hub.call("add", {"a": "x"})
        assert not refused.ok and "add" in refused.text  # the server's own error result, as the model reads it


def test_a_server_that_dies_mid_call_costs_one_line(server):
    _proc, address = server
    with McpHub([parse_server(address)], timeout_s=3) as hub:
        assert hub.problems == []
        crashed = hub.call("crash", {})
        assert not crashed.ok and "the server stopped" in crashed.text and "\n" not in crashed.text
        after = hub.call("add", {"a": 1, "b": 2})
        assert not after.ok and after.text and "\n" not in after.text  # gone: one line, no hang


def test_a_server_stopped_between_calls_costs_one_line(server):
    proc, address = server
    with McpHub([parse_server(address)], timeout_s=3) as hub:
        assert hub.call("add", {"a": 1, "b": 2}).text == "3"
        _stop(proc)
        after = hub.call("add", {"a": 1, "b": 2})
        assert not after.ok and "the server stopped" in after.text and "\n" not in after.text
        again = hub.call("shout", {"text": "x"})
        assert not again.ok and "\n" not in again.text


def test_nothing_listens_on_the_port_costs_one_line(server):
    proc, address = server
    _stop(proc)
    with McpHub([parse_server(address)], timeout_s=3, connect_timeout_s=10) as hub:
        assert hub.tools == [] and len(hub.problems) == 1 and "\n" not in hub.problems[0]
        assert address in hub.problems[0]


def test_the_cli_lists_and_calls_an_http_servers_tool(long_tiny, url):  # noqa: F811
    result = _chat(long_tiny, "--prompt", "Add two numbers", "--mcp", url, "--tool-choice", "add",
                   "--max-tool-rounds", "1")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "tools: add, shout, hang, crash, garbage" in result.stderr
    line = re.search(r"tool: add\((\{.*?\})\) → (\d+) \(\d+\.\d\d s\)", result.stderr)
    assert line, result.stderr[-2000:]
    arguments = json.loads(line.group(1))
    assert int(line.group(2)) == arguments["a"] + arguments["b"]


def test_the_cli_refuses_a_remote_url_in_one_line(tmp_path):
    result = _chat(tmp_path / "no-model", "--prompt", "hi", "--mcp", "http://192.168.1.5:8000/mcp", timeout=120)
    assert result.returncode == 2 and result.stderr.strip().count("\n") == 0
    assert "only MCP servers on this machine" in result.stderr
