"""The tool loop in native mode: a model whose template supports tools (the tiny model with a template modeled on
Qwen2.5's, tests.helpers.tool_template) gets ``tools=``, its call as a structured assistant turn and the result as
a ``tool`` turn, through a real ChatSession and the SDK's MCP server."""

from __future__ import annotations

import json
import threading

from engine.events import Finished, Message
from engine.inputs import LoadSpec, SamplingConfig
from engine.models import loader
from engine.tools.loop import ToolLoop, usable_tools
from engine.tools.mcp import McpHub, parse_server
from tests.engine.tools.test_mcp import SERVER
from tests.helpers.tool_template import build_tool_model


class _Seen:
    """A real ChatSession that notes what each round was given."""

    def __init__(self, session):
        self.session, self.loaded, self.rounds = session, session.loaded, []

    def generate(self, messages, *args, **kwargs):
        self.rounds.append((list(messages), kwargs.get("tools")))
        return self.session.generate(messages, *args, **kwargs)


def test_a_forced_call_and_its_result_go_back_as_tool_turns(tmp_path):
    from engine.generate.session import ChatSession

    folder = build_tool_model(tmp_path / "tiny-tools", max_position_embeddings=4096)
    session = _Seen(ChatSession(loader.load_model(LoadSpec(model=str(folder), precision="fp32", device="cpu"))))
    config = SamplingConfig(temperature=1.0, top_p=1.0, top_k=0, repetition_penalty=1.0, max_new_tokens=200, seed=0)
    with McpHub([parse_server(SERVER)], timeout_s=3) as hub:
        tools = usable_tools([t for t in hub.tools if t.name == "add"], lambda _line: None)
        loop = ToolLoop(session, [Message("user", "Add 2 and 40")], config, hub, tools, tool_choice="add",
                        max_rounds=1, on_call=lambda record: None)
        events = list(loop.events(threading.Event()))
    assert loop.native and isinstance(events[-1], Finished)
    (first, tools_given), (second, _) = session.rounds
    assert [m.role for m in first] == ["user"]  # no system text of ours: the template describes the tools
    assert tools_given[0]["function"]["name"] == "add"
    assert [m.role for m in second] == ["user", "assistant", "tool"]
    call = second[1].tool_calls[0]
    assert call.name == "add" and isinstance(json.loads(call.arguments), dict)
    assert second[2].tool_call_id == call.id and second[2].content
