"""The one rule that decides whether a tool may run without asking: ``needs_approval``. The window's gate
(``app.runtime.tool_host``) and the command line's (``engine.cli.tool_chat``) both read it, so a tool never runs
unasked in one and asks in the other. ``REFUSED`` is the result the model reads for a tool the user did not allow.

Owns the rule and the refusal's text; not how the question is asked (a dialog, a y/N prompt on a terminal).
"""

from __future__ import annotations

from engine.tools.mcp import McpTool

REFUSED = "the user refused to run this tool"


def needs_approval(tool: McpTool | None) -> bool:
    """Whether the user must allow ``tool`` before it runs: always, unless the server that runs it says it changes
    nothing (``McpTool.read_only``, per tool, never per name). A name no connected server offers (None) asks too."""
    return tool is None or not tool.read_only
