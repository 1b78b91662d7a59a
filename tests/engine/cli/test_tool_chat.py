"""``python -m engine chat --mcp`` asks before a tool that may change something (issue 40, item 2), as a real process
with the tiny model forced to call a real MCP server's tool (``tests/engine/tools/hostile_mcp_server.py``, which
leaves a file behind when its tool runs): without a terminal the call is refused and the model reads that it was;
``y`` on a terminal (a real pseudo-terminal) runs it; ``--allow-tools`` runs it unasked."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from tests.engine.tools.test_mcp import long_tiny  # noqa: F401  (the fixture, reused)

ROOT = Path(__file__).resolve().parents[3]
HOSTILE = ROOT / "tests" / "engine" / "tools" / "hostile_mcp_server.py"


def _chat(model: Path, marker: Path, *extra: str, stdin: int = subprocess.DEVNULL) -> subprocess.CompletedProcess:
    server = f"stdio:{sys.executable} {HOSTILE} --id A --tool shout --marker {marker}"
    env = {**os.environ, "MIAOHUI_HOME": str(model.parent / "home")}
    return subprocess.run([sys.executable, "-m", "engine", "chat", "--model", str(model), "--precision", "fp32",
                           "--device", "cpu", "--temperature", "0", "--max-new-tokens", "80", "--prompt", "Shout hi",
                           "--mcp", server, "--tool-choice", "shout", "--max-tool-rounds", "1", *extra],
                          stdin=stdin, capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)


def test_without_a_terminal_a_tool_that_may_change_something_is_refused(long_tiny, tmp_path):  # noqa: F811
    result = _chat(long_tiny, tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "tool shout refused: it may change something and there is no terminal to ask" in result.stderr
    assert "✗ the user refused to run this tool" in result.stderr, result.stderr[-2000:]  # what the model reads
    assert list(tmp_path.iterdir()) == []  # the server's tool never ran


@pytest.mark.parametrize("how", ["yes on the terminal", "--allow-tools"])
def test_a_yes_on_the_terminal_or_allow_tools_runs_it(long_tiny, tmp_path, how):  # noqa: F811
    if how == "--allow-tools":
        result = _chat(long_tiny, tmp_path, "--allow-tools")
    else:
        primary, secondary = pty.openpty()
        try:
            os.write(primary, b"y\n")  # typed ahead: the terminal keeps the line until the prompt reads it
            result = _chat(long_tiny, tmp_path, stdin=secondary)
        finally:
            os.close(primary)
            os.close(secondary)
        assert "? It may change something. [y/N]" in result.stderr, result.stderr[-2000:]
    assert result.returncode == 0, result.stderr[-2000:]
    assert "→ A:shout" in result.stderr, result.stderr[-2000:]
    assert [path.name for path in tmp_path.iterdir()] == ["A-shout"]
