"""The question before a tool that may change something crosses threads without deadlock: the worker's side
waits on the request (polling its reply's cancel flag), the GUI's side answers it; both answers, a stop while
waiting, and a second answer (ignored) are checked with real threads. Two real MCP servers offering one tool name
(issue 40) go through the real gate."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest

from app.runtime.tool_host import ConfirmRequest, ToolHost, _Gate
from engine.tools.approval import REFUSED
from engine.tools.mcp import McpHub, parse_server

HOSTILE = Path(__file__).resolve().parents[2] / "engine" / "tools" / "hostile_mcp_server.py"


def _wait_in_thread(request: ConfirmRequest, cancel: threading.Event) -> tuple[threading.Thread, list]:
    got: list = []
    thread = threading.Thread(target=lambda: got.append(request.wait(cancel)))
    thread.start()
    return thread, got


@pytest.mark.parametrize("allowed", [True, False])
def test_the_answer_from_another_thread_reaches_the_waiting_worker(allowed):
    request, cancel = ConfirmRequest("shout", '{"text": "hi"}'), threading.Event()
    thread, got = _wait_in_thread(request, cancel)
    time.sleep(0.3)
    assert thread.is_alive()  # it waits for the user, however long
    request.answer(allowed)
    thread.join(5)
    assert got == [allowed]
    request.answer(not allowed)  # a second answer (the dialog closing after its button) changes nothing
    assert request.wait(cancel) is allowed


def test_a_stop_while_waiting_ends_the_wait_without_an_answer():
    request, cancel = ConfirmRequest("crash", "{}"), threading.Event()
    thread, got = _wait_in_thread(request, cancel)
    time.sleep(0.2)
    cancel.set()
    thread.join(5)
    assert got == [None] and not thread.is_alive()


def _hostile(*args: str) -> str:
    return f"stdio:{sys.executable} {HOSTILE} " + " ".join(args)


def test_two_servers_offering_one_name_the_tool_approved_is_the_tool_run(tmp_path):
    """Issue 40, 1: A's ``shout`` may change something, B's says it changes nothing. Each copy has its own name, its
    own hint decides, and the one asked about (and refused) is the one that would have run."""
    a = _hostile("--id", "A", "--tool", "shout", "--marker", str(tmp_path))
    b = _hostile("--id", "B", "--tool", "shout:ro", "--marker", str(tmp_path))
    with McpHub([parse_server(a), parse_server(b)], timeout_s=10) as hub:
        tools = {tool.name: tool for tool in hub.tools}
        assert len(tools) == 2 and {tool.server_name for tool in tools.values()} == {"shout"}
        asked: list[str] = []

        def ask(request: ConfirmRequest) -> None:
            asked.append(request.name)
            request.answer(False)

        gate = _Gate(ToolHost(report=lambda _event: None, ask=ask), hub, hub.tools, threading.Event())
        (safe,) = [name for name, tool in tools.items() if tool.read_only]
        (unsafe,) = [name for name, tool in tools.items() if not tool.read_only]
        assert gate.call(safe, {"text": "hi"}).text == "B:shout" and asked == []  # B's, run unasked
        refused = gate.call(unsafe, {"text": "hi"})
        assert asked == [unsafe] and refused.text == REFUSED and not refused.ok
        assert sorted(path.name for path in tmp_path.iterdir()) == ["B-shout"]  # A's never ran
