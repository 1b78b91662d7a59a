"""MCP servers through the official SDK: a real stdio server written in these tests (``mcp_server.py``) is listed
and called by the hub and by ``python -m engine chat --mcp``; one that hangs, crashes, writes garbage or cannot
start costs one line, never the caller."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from engine.errors import BadInputError
from engine.tools.mcp import McpHub, parse_server
from tests.helpers.tiny_model import build_tiny_model

ROOT = Path(__file__).resolve().parents[3]
SERVER = f"stdio:{sys.executable} {Path(__file__).with_name('mcp_server.py')}"
TOOLS = {"add", "shout", "hang", "crash", "garbage"}


@pytest.fixture(scope="module")
def hub():
    with McpHub([parse_server(SERVER)], timeout_s=3) as connected:
        yield connected


def test_tools_are_listed_with_their_schemas(hub):
    assert hub.problems == []
    tools = {t.name: t for t in hub.tools}
    assert set(tools) == TOOLS
    assert tools["add"].parameters["properties"]["a"]["maximum"] == 99 and tools["add"].read_only
    assert not tools["shout"].read_only


def test_calls_answer_and_failures_cost_one_line(hub):
    assert (hub.call("add", {"a": 2, "b": 40}).text, hub.call("shout", {"text": "hi"}).text) == ("42", "HI")
    assert hub.call("garbage", {}).text == "after garbage"  # a stray line on the channel: the call still answers
    hung = hub.call("hang", {})
    assert not hung.ok and "no answer within 3 s" in hung.text
    assert hub.call("add", {"a": 1, "b": 1}).text == "2"  # the server is still usable after a timeout
    refused = hub.call("add", {"a": "x"})
    assert not refused.ok and refused.text
    unknown = hub.call("rm", {})
    assert not unknown.ok and "no connected MCP server" in unknown.text


def test_a_crashing_server_and_one_that_cannot_start_cost_a_line_each():
    with McpHub([parse_server(SERVER), parse_server("stdio:/nonexistent/mcp-server --x")], timeout_s=3) as hub:
        assert len(hub.problems) == 1 and "/nonexistent/mcp-server" in hub.problems[0]
        crashed = hub.call("crash", {})
        assert not crashed.ok and "\n" not in crashed.text
        after = hub.call("add", {"a": 1, "b": 2})
        assert not after.ok and after.text and "\n" not in after.text  # the server is gone: one line, no hang


@pytest.mark.parametrize("text", ["http://example.com/mcp", "http://10.0.0.1:8000/mcp", "ftp://127.0.0.1/x", "stdio:",
                                  "stdio:'unclosed"])
def test_only_loopback_http_and_a_stdio_command_are_accepted(text):
    with pytest.raises(BadInputError):
        parse_server(text)


def test_loopback_and_stdio_specs_parse():
    assert parse_server("http://127.0.0.1:9000/mcp").kind == "http"
    assert parse_server("http://localhost:9000/mcp").url == "http://localhost:9000/mcp"
    assert parse_server("stdio:python -m srv --flag 'a b'").argv == ("python", "-m", "srv", "--flag", "a b")


@pytest.fixture(scope="module")
def long_tiny(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny-tools"), max_position_embeddings=4096)


def _chat(model: Path, *extra: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "MIAOHUI_HOME": str(model.parent / "home")}
    return subprocess.run([sys.executable, "-m", "engine", "chat", "--model", str(model), "--precision", "fp32",
                           "--device", "cpu", "--temperature", "0", "--max-new-tokens", "150", *extra],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=timeout)


def test_the_cli_lists_and_calls_a_tool_the_model_is_forced_to_call(long_tiny):
    result = _chat(long_tiny, "--prompt", "Add two numbers", "--mcp", SERVER, "--tool-choice", "add",
                   "--max-tool-rounds", "1")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "tools: add, shout, hang, crash, garbage" in result.stderr
    line = re.search(r"tool: add\((\{.*?\})\) → (\d+) \(\d+\.\d\d s\)", result.stderr)
    assert line, result.stderr[-2000:]
    arguments = json.loads(line.group(1))
    assert int(line.group(2)) == arguments["a"] + arguments["b"]


def test_the_cli_survives_a_hanging_tool_and_a_missing_server(long_tiny):
    result = _chat(long_tiny, "--prompt", "Wait", "--mcp", SERVER, "--mcp", "stdio:/nonexistent/mcp-server",
                   "--tool-choice", "hang", "--max-tool-rounds", "1",
                   "--allow-tools")  # no terminal to ask here: a tool that may change something runs only so
    assert result.returncode == 0, result.stderr[-2000:]
    assert "MCP server mcp-server:" in result.stderr
    assert re.search(r"tool: hang\(\{\}\) ✗ hang: no answer within", result.stderr), result.stderr[-2000:]


def test_bad_mcp_flags_are_one_line_before_any_model_loads(tmp_path):
    result = _chat(tmp_path / "no-model", "--prompt", "hi", "--mcp", "http://example.com/mcp", timeout=120)
    assert result.returncode == 2 and result.stderr.strip().count("\n") == 0
    assert "only MCP servers on this machine" in result.stderr
