"""Hostile MCP servers against the hub (issue 40, item 9), as real processes written with the official SDK
(``hostile_mcp_server.py``): a tool whose schema nests 120 deep costs that tool one line, not the server, and no
traceback; the helper process a server starts and leaves running is ended by ``McpHub.close``; a result of tens of
MB over HTTP is not read past the bound."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psutil

from engine.tools.mcp import McpHub, parse_server
from engine.tools.mcp_transport import MAX_RESPONSE_BYTES, too_deep

HOSTILE = Path(__file__).with_name("hostile_mcp_server.py")


def _stdio(*args: str) -> str:
    return f"stdio:{sys.executable} {HOSTILE} " + " ".join(args)


def test_a_schema_nested_120_deep_costs_that_tool_one_line_and_keeps_the_server(capfd):
    with McpHub([parse_server(_stdio("--deep", "120", "--tool", "ok"))], timeout_s=10) as hub:
        assert hub.problems == [too_deep("deep", "python")]
        assert [tool.name for tool in hub.tools] == ["ok"]
        assert hub.call("ok", {"text": "x"}).text == "hostile:ok"
    assert "Traceback" not in capfd.readouterr().err


def test_close_ends_the_process_a_server_started_and_left_running(tmp_path):
    pidfile = tmp_path / "child.pid"
    with McpHub([parse_server(_stdio("--tool", "ok", "--child", str(pidfile)))], timeout_s=10) as hub:
        assert hub.problems == []
        child = psutil.Process(int(pidfile.read_text()))
        assert child.is_running()
    try:
        child.wait(5)  # reaped by whoever adopted it once killed; gone for good
    except psutil.TimeoutExpired:
        child.kill()  # the test fails, but leaves nothing behind
        raise AssertionError("the server's child outlived McpHub.close()") from None


def _http_server(*args: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, str(HOSTILE), *args, "http"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    port = int(proc.stdout.readline())
    time.sleep(1.0)  # uvicorn accepts from the socket's backlog once it runs: an early connect waits, not fails
    return proc, f"http://127.0.0.1:{port}/mcp"


def test_an_http_result_larger_than_the_bound_is_not_read_whole():
    proc, url = _http_server("--big", str(2 * MAX_RESPONSE_BYTES // 1_000_000), "--json")
    try:
        with McpHub([parse_server(url)], timeout_s=60) as hub:
            assert hub.problems == [] and [tool.name for tool in hub.tools] == ["big"]
            outcome = hub.call("big", {})
            assert not outcome.ok and "larger than 16 MiB" in outcome.text and "\n" not in outcome.text
    finally:
        proc.kill()
        proc.wait(10)
        proc.stdout.close()
