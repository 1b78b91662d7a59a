"""Bad requests get OpenAI-shaped errors with the right status, and the server keeps serving after each."""

from __future__ import annotations

import http.client
import json

import openai
import pytest

from tests.engine.serve.conftest import LIVENESS_S, start_server

GOOD = {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 2, "temperature": 0}
LONG = " ".join(["capital"] * 2000)  # far beyond the tiny model's 256 positions


def _with(**changes):
    return {**GOOD, **changes}


BAD_BODIES = {
    "malformed JSON": (b'{"messages": [', 400),
    "not an object": (b"[1, 2]", 400),
    "nested too deeply": (b"[" * 30000 + b"]" * 30000, 400),
    "not UTF-8": (b'{"messages": "\xff"}', 400),
    "temperature of the wrong type": (_with(temperature="hot"), 400),
    "a number as a string": (_with(max_tokens="5"), 400),
    "messages missing": ({"max_tokens": 2}, 400),
    "n > 1": (_with(n=2), 400),
    "empty messages": (_with(messages=[]), 400),
    "last message not the user's": (_with(messages=[{"role": "assistant", "content": "hi"}]), 400),
    "unknown role": (_with(messages=[{"role": "wizard", "content": "hi"}]), 400),
    "image content": (_with(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]), 400),
    "prompt beyond the context": (_with(messages=[{"role": "user", "content": LONG}]), 400),
    "temperature out of range": (_with(temperature=50), 400),
    "top_p of 0": (_with(top_p=0), 400),
    "max_tokens of 0": (_with(max_tokens=0), 400),
    "negative seed": (_with(seed=-1), 400),
    "too many top_logprobs": (_with(logprobs=True, top_logprobs=99), 400),
    "an invalid tool": (_with(tools=[{"type": "function", "function": {"name": "two words"}}]), 400),
    "legacy functions": (_with(functions=[{"name": "f"}]), 400),
    "presence penalty": (_with(presence_penalty=0.5), 400),
    "unknown model": (_with(model="gpt-9"), 404),
}


def _assert_openai_error(status: int, body: bytes, expected: int) -> dict:
    assert status == expected, body
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and error["message"] and "\n" not in error["message"]
    return error


def _still_serves(server) -> None:
    status, _, body = server.raw("POST", "/v1/chat/completions", GOOD)
    assert status == 200, body
    assert json.loads(body)["choices"][0]["message"]["content"] is not None


@pytest.mark.parametrize("name", list(BAD_BODIES))
def test_bad_request_gets_its_status_and_the_server_keeps_serving(server, name):
    body, expected = BAD_BODIES[name]
    status, _, reply = server.raw("POST", "/v1/chat/completions", body)
    _assert_openai_error(status, reply, expected)
    _still_serves(server)


def test_context_overflow_names_its_code(server):
    status, _, reply = server.raw("POST", "/v1/chat/completions", BAD_BODIES["prompt beyond the context"][0])
    assert _assert_openai_error(status, reply, 400)["code"] == "context_length_exceeded"
    status, _, reply = server.raw("POST", "/v1/chat/completions", _with(temperature=50))
    assert _assert_openai_error(status, reply, 400)["param"] == "temperature"
    status, _, reply = server.raw("POST", "/v1/chat/completions", _with(max_tokens=0))
    error = _assert_openai_error(status, reply, 400)
    assert error["param"] == "max_tokens" and error["message"].startswith("max_tokens")


@pytest.mark.parametrize("key", [None, "wrong-key", ""])
def test_a_missing_or_wrong_key_is_401(server, key):
    status, _, reply = server.raw("POST", "/v1/chat/completions", GOOD, key=key)
    assert _assert_openai_error(status, reply, 401)["type"] == "authentication_error"
    status, _, reply = server.raw("GET", "/v1/models", key=key)
    _assert_openai_error(status, reply, 401)
    _still_serves(server)


def test_health_and_metrics_need_no_key(server):
    assert server.raw("GET", "/health", key=None)[0] == 200
    assert server.raw("GET", "/metrics", key=None)[0] == 200


def test_unknown_route_is_an_openai_404(server):
    status, _, reply = server.raw("GET", "/v1/engines", key=None)
    assert status in (401, 404)  # /v1 wants the key first
    status, _, reply = server.raw("GET", "/v2/anything")
    _assert_openai_error(status, reply, 404)


def test_a_body_over_the_cap_is_413_declared_or_not(server):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=LIVENESS_S)
    try:  # the declared length alone is refused: the body is never read
        conn.putrequest("POST", "/v1/chat/completions")
        for name, value in (("Authorization", f"Bearer {server.key}"), ("Content-Type", "application/json"),
                            ("Content-Length", str(10 << 20))):
            conn.putheader(name, value)
        conn.endheaders()
        response = conn.getresponse()
        error = _assert_openai_error(response.status, response.read(), 413)
        assert error["code"] == "request_too_large"
    finally:
        conn.close()
    padding = "x" * (70 * 1024)  # over the fixture's 64 KiB cap, sent chunked: no length declared
    chunks = iter([json.dumps(_with(user=padding)).encode()])
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=LIVENESS_S)
    try:
        conn.request("POST", "/v1/chat/completions", body=chunks, encode_chunked=True,
                     headers={"Authorization": f"Bearer {server.key}", "Content-Type": "application/json",
                              "Transfer-Encoding": "chunked"})
        response = conn.getresponse()
        _assert_openai_error(response.status, response.read(), 413)
    finally:
        conn.close()
    _still_serves(server)


def test_the_openai_client_raises_its_own_typed_errors(server):
    client = server.client()
    with pytest.raises(openai.BadRequestError, match="n must be 1"):
        client.chat.completions.create(model="default", messages=GOOD["messages"], n=2)
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="nope", messages=GOOD["messages"])
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=server.url + "/v1", api_key="wrong", max_retries=0).models.list()
    with pytest.raises(openai.BadRequestError, match="suffix"):
        client.completions.create(model="default", prompt="hi", suffix="!")
    assert client.chat.completions.create(model="default", **GOOD).choices[0].finish_reason in ("stop", "length")


def test_no_cors_unless_an_origin_is_named(server, tiny_loaded):
    origin = {"Origin": "http://page.example"}
    _, headers, _ = server.raw("GET", "/v1/models", headers=origin)
    assert not any(name.startswith("access-control-") for name in headers)
    served, stop = start_server(tiny_loaded, cors_origins=["http://page.example"])
    try:
        _, headers, _ = served.raw("GET", "/v1/models", headers=origin)
        assert headers["access-control-allow-origin"] == "http://page.example"
        _, headers, _ = served.raw("GET", "/v1/models", headers={"Origin": "http://elsewhere.example"})
        assert "access-control-allow-origin" not in headers
    finally:
        stop()
