"""A reply that is not a tool call streams through the tool loop as it is generated (the window shows it growing),
while a forced call is held back and never shown; on a real session of the tiny model with the SDK server."""

from __future__ import annotations

import threading

import pytest

from engine.events import Finished, Message, Token
from engine.inputs import LoadSpec, SamplingConfig
from engine.models import loader
from engine.tools.loop import ToolLoop, usable_tools
from engine.tools.mcp import McpHub, parse_server
from tests.engine.tools.test_mcp import SERVER
from tests.helpers.tiny_model import build_tiny_model


class _Watched:
    """A real ChatSession whose streams note when their Finished went by (to see whether the loop waited for it)."""

    def __init__(self, session, log):
        self.session, self.log, self.loaded = session, log, session.loaded

    def generate(self, *args, **kwargs):
        for event in self.session.generate(*args, **kwargs):
            if isinstance(event, Finished):
                self.log.append("finished")
            yield event


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    from engine.generate.session import ChatSession

    folder = build_tiny_model(tmp_path_factory.mktemp("tiny-loop"), max_position_embeddings=4096)
    return ChatSession(loader.load_model(LoadSpec(model=str(folder), precision="fp32", device="cpu")))


def _events(session, choice, log):
    # Sampled at temperature 1: the tiny model's greedy text is only newlines, which could still precede a call.
    config = SamplingConfig(temperature=1.0, top_p=1.0, top_k=0, repetition_penalty=1.0, max_new_tokens=110, seed=0)
    with McpHub([parse_server(SERVER)], timeout_s=3) as hub:
        tools = usable_tools([t for t in hub.tools if t.name == "add"], lambda _line: None)
        loop = ToolLoop(_Watched(session, log), [Message("user", "Add 2 and 40")], config, hub, tools,
                        tool_choice=choice, max_rounds=1)
        seen = []
        for event in loop.events(threading.Event()):
            seen.append((type(event).__name__, len(log), getattr(event, "text", "")))
        return seen


def test_an_answer_streams_while_it_is_generated(session):
    log: list[str] = []
    seen = _events(session, "auto", log)
    first_token = next(i for i, (kind, _, text) in enumerate(seen) if kind == "Token")
    assert seen[first_token][1] == 0  # the first token came out before its reply had finished
    assert seen[-1][0] == "Finished" and len(log) == 1


def test_a_forced_call_is_held_back_and_only_the_answer_is_shown(session):
    log: list[str] = []
    seen = _events(session, "add", log)
    assert len(log) == 2  # the call's round, then the answer's
    assert not any(kind == "Token" and "<tool_call>" in text for kind, _, text in seen)
    assert all(count >= 1 for kind, count, _ in seen if kind == "Token")  # nothing of the call round was shown
