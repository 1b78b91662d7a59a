"""A conversation beyond the model's context (issue 31, defect 5) through the official ``openai`` client: refused
at once with OpenAI's ``context_length_exceeded`` however long the history, and the server keeps serving."""

from __future__ import annotations

import openai
import pytest

from tests.engine.serve.conftest import start_server


@pytest.fixture(scope="module")
def roomy_server(tiny_loaded):
    served, stop = start_server(tiny_loaded)  # the default 4 MiB body cap: a long history fits in one request
    yield served
    stop()


def _history(turns: int, last: str = "and the newest question?") -> list[dict[str, str]]:
    messages = [{"role": "system", "content": "You are Miaohui."}]
    for i in range(turns):
        messages += [{"role": "user", "content": f"question {i}: what is the capital of France?"},
                     {"role": "assistant", "content": f"answer {i}: the capital of France is Paris."}]
    return messages + [{"role": "user", "content": last}]


def _refused(client: openai.OpenAI, messages: list[dict[str, str]]) -> openai.BadRequestError:
    with pytest.raises(openai.BadRequestError) as info:
        # The messages go as extra_body: the client's own validation of 24,000 typed messages takes ~10 s, and
        # what is under test is the server's answer, which the client then raises as its typed error.
        client.chat.completions.create(model="default", messages=[], max_tokens=4, temperature=0,
                                       extra_body={"messages": messages})
    return info.value


@pytest.mark.parametrize("turns", [2_000, 20_000])
def test_a_history_far_beyond_the_context_is_refused_with_its_code(roomy_server, turns):
    # 20,000 turns (about 1,000 times the tiny model's 256 positions) were rendered whole before any trimming:
    # the template's time budget ran out and the refusal carried no code.
    client = roomy_server.client()
    error = _refused(client, _history(turns))
    assert error.code == "context_length_exceeded" and error.body["type"] == "invalid_request_error"
    assert error.body["param"] == "messages" and "256" in error.body["message"]
    # The last message alone cannot fit either: the same code, with a message that says so.
    error = _refused(client, _history(turns, last="Paris " * 400))
    assert error.code == "context_length_exceeded" and "your message is" in error.body["message"]
    reply = client.chat.completions.create(model="default", messages=_history(0), max_tokens=2, temperature=0)
    assert reply.choices[0].message.content is not None
