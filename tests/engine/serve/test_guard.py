"""A web page cannot use the key-less local API: a ``Host`` naming another site (DNS rebinding) gets 421, a body
that is not declared JSON (a "simple" cross-site POST needing no preflight) gets 415; the loopback names, IP
addresses and the names the user allows are served, and so is the official ``openai`` client."""

from __future__ import annotations

import json

import pytest

from engine.serve.app import create_app
from engine.serve.server import BackgroundServer
from tests.engine.serve.conftest import Served

GOOD = {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 2, "temperature": 0}


@pytest.fixture(scope="module")
def open_server(tiny_loaded):
    """No API key, as the window and a default ``engine serve`` run: only these checks stand in the way."""
    from engine.serve.worker import Worker

    worker = Worker(tiny_loaded).start()
    http_server = BackgroundServer(create_app(worker), allowed_hosts=("miaohui.lan",)).start()
    yield Served(http_server.url, worker, http_server.port, key=None)
    http_server.stop()
    worker.close()


def _error(status: int, body: bytes, expected: int) -> dict:
    assert status == expected, body
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"} and "\n" not in error["message"]
    return error


@pytest.mark.parametrize("host", ["attacker.example", "attacker.example:{port}", "127.0.0.1.attacker.example",
                                  "localhost.attacker.example:{port}", "miaohui.lan.attacker.example"])
@pytest.mark.parametrize("route", [("POST", "/v1/chat/completions"), ("GET", "/v1/models"), ("GET", "/metrics")])
def test_a_host_naming_another_site_is_refused(open_server, host, route):
    method, path = route
    status, _, body = open_server.raw(method, path, GOOD if method == "POST" else None,
                                      headers={"Host": host.format(port=open_server.port)})
    error = _error(status, body, 421)
    assert error["code"] == "host_not_allowed" and "--allowed-host" in error["message"]
    assert "choices" not in json.loads(body) and b"miaohui:" not in body  # nothing of the answer leaks


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "LOCALHOST", "[::1]:{port}", "127.0.0.1",
                                  "192.168.1.10:{port}", "miaohui.lan:{port}", "Miaohui.LAN"])
def test_loopback_names_ip_addresses_and_allowed_names_are_served(open_server, host):
    status, _, body = open_server.raw("POST", "/v1/chat/completions", GOOD,
                                      headers={"Host": host.format(port=open_server.port)})
    assert status == 200, body


@pytest.mark.parametrize("content_type", [None, "text/plain", "text/plain;charset=UTF-8",
                                          "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
                                          "application/jsonp"])
def test_a_post_not_declared_json_is_refused(open_server, content_type):
    headers = {"Content-Type": content_type} if content_type else {}
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", open_server.port, timeout=60)
    try:
        # http.client sends no Content-Type unless told: the raw helper's JSON default is left out on purpose.
        conn.putrequest("POST", "/v1/chat/completions")
        data = json.dumps(GOOD).encode()
        for name, value in {**headers, "Content-Length": str(len(data))}.items():
            conn.putheader(name, value)
        conn.endheaders(data)
        response = conn.getresponse()
        status, body = response.status, response.read()
    finally:
        conn.close()
    error = _error(status, body, 415)
    assert error["code"] == "unsupported_media_type" and "application/json" in error["message"]
    status, _, body = open_server.raw("POST", "/v1/chat/completions", GOOD)  # and it keeps serving
    assert status == 200, body


@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=utf-8", "Application/JSON"])
def test_json_bodies_are_served(open_server, content_type):
    status, _, body = open_server.raw("POST", "/v1/chat/completions", GOOD, headers={"Content-Type": content_type})
    assert status == 200, body


def test_the_official_client_is_served(open_server):
    client = open_server.client()
    reply = client.chat.completions.create(model="default", messages=GOOD["messages"], max_tokens=2, temperature=0)
    assert reply.choices[0].finish_reason in ("stop", "length")
    streamed = list(client.chat.completions.create(model="default", messages=GOOD["messages"], max_tokens=2,
                                                   stream=True))
    assert streamed and [m.id for m in client.models.list().data]
