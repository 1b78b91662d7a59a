"""The window serves its loaded model over the OpenAI API (Chat → "Serve this model (OpenAI API)"): the real window
on the tiny model, uvicorn on an ephemeral port of 127.0.0.1, the official ``openai`` client. Off by default; the
status bar shows the address and the requests served; four requests decode together (Settings: 4 at once) on the
engine thread, as they reply one at a time; a chat turn sent while they run starts between two of their steps; no model, or a model on another server: 503; off or closed: the port
refuses connections; a port in use: one line, and the toggle stays off."""

from __future__ import annotations

import json
import socket
import threading
from typing import Any

import openai
import pytest

from engine.remote import RemoteSpec
from engine.serve.worker import Worker
from tests.app._gui_fixtures import (LOAD_TIMEOUT_MS, REPLY_TIMEOUT_MS, make_window, plan, send_and_wait,  # noqa: F401
                                     settings, store)
from tests.helpers.concurrency import all_at_once
from tests.helpers.openai_wire import WireServer

pytestmark = [pytest.mark.qt_log_ignore("propagateSizeHints"), pytest.mark.qt_log_level_fail("WARNING")]

LIVENESS_S = 60  # only a guard against a hung server, never a measurement
QUESTION = [{"role": "user", "content": "What is a KV cache?"}]


def serve(qtbot, window, *, loaded: bool = True) -> str:
    """Turn serving on, as a user does, on a port the system picks; returns the API's base URL."""
    api = window.api_serving
    window.settings.set_serve_port(0)
    if loaded:
        with qtbot.waitSignal(api.model_served, timeout=LOAD_TIMEOUT_MS, check_params_cb=bool):
            api.action.trigger()
    else:
        with qtbot.waitSignal(api.serving_changed, timeout=LOAD_TIMEOUT_MS):
            api.action.trigger()
    assert api.serving and api.action.isChecked()
    return api.url


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=LIVENESS_S)  # loopback: no key


def post(port: int, path: str, body: Any) -> tuple[int, dict[str, Any]]:
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=LIVENESS_S)
    try:
        conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def running(port: int) -> float:
    """``vllm:num_requests_running`` as the server's /metrics says it."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=LIVENESS_S)
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    (line,) = [line for line in text.splitlines() if line.startswith("vllm:num_requests_running{")]
    return float(line.rsplit(" ", 1)[1])


def refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except ConnectionRefusedError:
        return True
    return False


def test_the_openai_client_streams_from_the_window_and_the_status_bar_counts_it(qtbot, make_window, settings):
    window = make_window()
    api = window.api_serving
    assert not api.action.isChecked() and not api.serving and api.label.isHidden()  # off by default
    assert not settings.serve_enabled()
    url = serve(qtbot, window)
    port = api.port
    assert url == f"http://127.0.0.1:{port}/v1" and settings.serve_enabled()
    assert api.label.isVisible() and api.label.text() == f"API {url} · 0 requests served"

    chunks = list(client(url).chat.completions.create(model="default", messages=QUESTION, stream=True, max_tokens=6,
                                                      temperature=0))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert chunks[-1].choices[0].finish_reason == "length"
    qtbot.waitUntil(lambda: api.label.text() == f"API {url} · 1 request served", timeout=REPLY_TIMEOUT_MS)
    assert [m.id for m in client(url).models.list().data] == [window.controller.facts.name]
    whole = client(url).chat.completions.create(model=window.controller.facts.name, messages=QUESTION, max_tokens=6,
                                                temperature=0)
    assert whole.choices[0].message.content == streamed and whole.usage.completion_tokens == 6
    qtbot.waitUntil(lambda: api.label.text() == f"API {url} · 2 requests served", timeout=REPLY_TIMEOUT_MS)

    api.action.trigger()  # off
    assert not api.serving and not api.action.isChecked() and api.label.isHidden() and not settings.serve_enabled()
    assert refused(port)
    assert send_and_wait(qtbot, window, "Still here?") == "length"  # the chat goes on as before


@pytest.fixture
def forward_threads(monkeypatch) -> list[str]:
    """The names of the threads that made the server's forward passes: each batched step's, or each whole request's
    model work when one at a time."""
    from engine.serve.batching import BatchEngine

    names: list[str] = []
    real_step, real_serve = BatchEngine._step, Worker._serve

    def step(self: BatchEngine, *args: Any) -> None:
        names.append(threading.current_thread().name)
        real_step(self, *args)

    def serve(self: Worker, job: Any) -> Any:
        if self._engine is None:
            names.append(threading.current_thread().name)
        return real_serve(self, job)

    monkeypatch.setattr(BatchEngine, "_step", step)
    monkeypatch.setattr(Worker, "_serve", serve)
    return names


@pytest.mark.parametrize("parallel", [4, 1])
def test_a_raw_text_completion_is_served_on_the_windows_engine_thread(qtbot, make_window, settings, forward_threads,
                                                                       parallel):
    settings.set_serve_parallel(parallel)
    window = make_window()
    url = serve(qtbot, window)
    assert window.api_serving._current[1].parallel == parallel
    raw = client(url).completions.with_raw_response.create(model="default", prompt="Once upon a time", max_tokens=4,
                                                           temperature=0, echo=True)
    assert raw.headers["x-miaohui-completion-mode"] == "raw"
    whole = raw.parse().choices[0].text
    chunks = list(client(url).completions.create(model="default", prompt="Once upon a time", max_tokens=4,
                                                 temperature=0, stream=True))
    assert whole == "Once upon a time" + "".join(c.choices[0].text for c in chunks if c.choices)
    assert forward_threads and set(forward_threads) == {"miaohui-engine"}  # the thread that owns the model


def _together(url: str, bodies: list[dict[str, Any]]) -> list[Any]:
    """Each body sent by a thread of its own at the same moment; (text, finish reason) or the exception, in order."""
    def one(i: int) -> Any:
        reply = client(url).chat.completions.create(model="default", temperature=0, **bodies[i])
        return reply.choices[0].message.content, reply.choices[0].finish_reason

    return all_at_once(one, len(bodies), LIVENESS_S)


BODIES = [{"messages": [{"role": "user", "content": f"Question {i}: " + "what is a KV cache? " * (1 + 2 * i)}],
           "max_tokens": 24 + 4 * i} for i in range(4)]


def test_four_requests_decode_together_and_reply_as_one_at_a_time(qtbot, make_window, forward_threads):
    window = make_window()
    url = serve(qtbot, window)
    worker = window.api_serving._current[1]
    assert worker.parallel == 4 and worker.batching_refused is None  # Settings' default, as engine serve's
    alone = [_together(url, [body])[0] for body in BODIES]
    together = _together(url, BODIES)
    assert together == alone and all(reason == "length" for _, reason in alone)
    assert worker._engine.largest_batch >= 2  # they shared decode forwards
    assert set(forward_threads) == {"miaohui-engine"}  # every one of them on the thread that owns the model
    qtbot.waitUntil(lambda: window.api_serving.label.text().endswith("· 8 requests served"), timeout=REPLY_TIMEOUT_MS)


def test_a_chat_turn_sent_while_the_server_is_busy_runs_between_its_steps(qtbot, make_window, store,
                                                                           forward_threads):
    window = make_window(max_new_tokens=8)
    url = serve(qtbot, window)
    alone = [_together(url, [body])[0] for body in BODIES]
    assert send_and_wait(qtbot, window, "Tell me more") == "length"
    chat_alone = window.chat.messages()[-1].text
    window.on_new_chat_triggered()

    # The engine thread is held by a task, so the four requests and the chat turn arrive while it is busy.
    gate = threading.Event()
    window.bridge.submit_task(lambda _loaded, _cancel: gate.wait(LIVENESS_S))
    results: list[Any] = []
    thread = threading.Thread(target=lambda: results.extend(_together(url, BODIES)))
    thread.start()
    worker = window.api_serving._current[1]
    qtbot.waitUntil(lambda: running(window.api_serving.port) == 4, timeout=REPLY_TIMEOUT_MS)  # all four in flight
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS) as done:
        assert window.send("Tell me more")  # accepted at once: the server's requests are no reply of the window's
        gate.set()
    assert done.args == ["length"]
    thread.join(LIVENESS_S)
    assert results == alone  # the server went on after the chat's reply, its replies unchanged
    rows = store.messages(window.current_conversation())
    assert [r.role for r in rows] == ["user", "assistant"] and rows[1].text == chat_alone
    assert set(forward_threads) == {"miaohui-engine"}


def test_no_model_is_a_503_until_one_is_loaded_then_it_is_served(qtbot, make_window, tiny_model_dir):
    window = make_window(loaded=False)
    api = window.api_serving
    url = serve(qtbot, window, loaded=False)
    status, body = post(api.port, "/v1/chat/completions", {"messages": QUESTION, "max_tokens": 3})
    assert status == 503
    assert body["error"]["type"] == "server_error" and "no model is loaded" in body["error"]["message"]
    with pytest.raises(openai.InternalServerError) as error:
        client(url).models.list()
    assert error.value.status_code == 503
    # Issue 41 point 9: the status bar advertised the API while it answered model_not_available.
    assert api.label.text() == f"API {url} · waiting for a model loaded on this computer"

    with qtbot.waitSignal(api.model_served, timeout=LOAD_TIMEOUT_MS, check_params_cb=bool) as served:
        window.load_model(str(tiny_model_dir), "fp32", "cpu")
    assert served.args == [window.controller.facts.name]
    assert api.label.text() == f"API {url} · 0 requests served"
    reply = client(url).chat.completions.create(model="default", messages=QUESTION, max_tokens=3, temperature=0)
    assert reply.choices[0].finish_reason == "length" and reply.model == window.controller.facts.name


def test_a_model_on_another_server_is_not_served_again(qtbot, make_window):
    window = make_window()
    api = window.api_serving
    serve(qtbot, window)
    with WireServer("ok") as wire:
        with qtbot.waitSignal(window.model_ready, timeout=LOAD_TIMEOUT_MS):
            window.controller.load(RemoteSpec(wire.url))
        qtbot.waitUntil(lambda: "another server" in window.messages.label.text(), timeout=REPLY_TIMEOUT_MS)
        status, body = post(api.port, "/v1/chat/completions", {"messages": QUESTION, "max_tokens": 3})
        assert status == 503 and "runs on another server" in body["error"]["message"]
        assert wire.requests == []  # nothing was relayed to it


def test_a_port_in_use_is_one_line_and_the_toggle_stays_off(qtbot, make_window, settings):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        port = taken.getsockname()[1]
        window = make_window(loaded=False)
        settings.set_serve_port(port)
        window.api_serving.action.trigger()
        assert not window.api_serving.serving and not window.api_serving.action.isChecked()
        assert not settings.serve_enabled() and window.api_serving.label.isHidden()
        shown = window.messages.label.text()
        assert window.messages.level == "error" and f"127.0.0.1:{port}" in shown and "\n" not in shown
    finally:
        taken.close()


def test_closing_the_window_stops_serving_and_the_next_start_does_not_serve(qtbot, make_window, settings):
    window = make_window()
    serve(qtbot, window)
    port = window.api_serving.port
    window.close()
    assert refused(port) and not window.api_serving.serving
    # Issue 41 point 9: a server must not turn on by itself at the next start (it did, silently).
    again = make_window(loaded=False)
    assert not again.api_serving.serving and not again.api_serving.action.isChecked() and refused(port)
    assert again.api_serving.label.isHidden() and not settings.serve_enabled()


def test_turning_it_off_mid_stream_cancels_the_request_and_frees_the_window(qtbot, make_window, plan, monkeypatch):
    import engine.generate.session
    import engine.serve.worker

    # The server's sessions go through the plan too: its reply holds after two tokens until it is cancelled.
    monkeypatch.setattr(engine.serve.worker, "ChatSession", engine.generate.session.ChatSession)
    window = make_window(max_new_tokens=4)
    window.settings.set_serve_parallel(1)  # the plan's held runner is a plain one: served one at a time
    url = serve(qtbot, window)
    port = window.api_serving.port
    plan.hold_decode_after = 2
    stream = client(url).chat.completions.create(model="default", messages=QUESTION, stream=True, max_tokens=100,
                                                 temperature=0)
    chunks = [next(iter(stream))]  # the role chunk: the request runs on the engine thread, held mid-reply
    queue_worker = window.api_serving._current[1]
    window.api_serving.action.trigger()  # off: its cancel ends the held reply
    try:
        chunks += list(stream)
    except openai.APIError:
        pass  # the connection may close before the stream's end: either way it ends, cut short
    assert queue_worker.recent[-1].finish_reason == "cancelled" and refused(port)
    assert queue_worker.recent[-1].completion_tokens < 100
    assert window.api_serving.label.isHidden()
    plan.hold_decode_after = 0
    assert send_and_wait(qtbot, window, "Still here?") == "length"  # the engine thread is free


def test_the_serve_settings_default_to_off_on_8000_and_refuse_bad_values(tmp_path):
    from app.state.settings import Settings

    stored = Settings.in_file(tmp_path / "s.ini")
    assert stored.serve_enabled() is False and stored.serve_port() == 8000 and stored.serve_parallel() == 4
    stored.set_serve_parallel(2)
    assert Settings.in_file(tmp_path / "s.ini").serve_parallel() == 2
    for bad in ("0", "17", "four"):
        stored._q.setValue("serve/parallel", bad)
        assert stored.serve_parallel() == 4
    with pytest.raises(ValueError):
        stored.set_serve_parallel(0)
    stored.set_serve_port(8080)
    stored.set_serve_enabled(True)
    again = Settings.in_file(tmp_path / "s.ini")
    assert again.serve_enabled() is True and again.serve_port() == 8080
    for bad in ("99999", "-1", "eighty", "80.5"):
        again._q.setValue("serve/port", bad)
        assert again.serve_port() == 8000
    with pytest.raises(ValueError):
        again.set_serve_port(70000)


def _raw_post(port: int, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=LIVENESS_S)
    try:
        conn.putrequest("POST", "/v1/chat/completions", skip_host="Host" in headers)
        for name, value in {**headers, "Content-Length": str(len(body))}.items():
            conn.putheader(name, value)
        conn.endheaders(body)
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


@pytest.mark.parametrize("loaded", [True, False])
def test_a_web_page_cannot_use_the_windows_server(qtbot, make_window, loaded):
    window = make_window(loaded=loaded)
    url = serve(qtbot, window, loaded=loaded)
    port = window.api_serving.port
    body = json.dumps({"messages": QUESTION, "max_tokens": 2}).encode()
    # DNS rebinding: a page on attacker.example re-resolved to 127.0.0.1 sends its own name as the Host.
    status, answer = _raw_post(port, body, {"Host": f"attacker.example:{port}", "Content-Type": "application/json"})
    assert status == 421 and answer["error"]["code"] == "host_not_allowed"
    # A text/plain body: a cross-site POST a page may send without a preflight.
    status, answer = _raw_post(port, body, {"Content-Type": "text/plain;charset=UTF-8"})
    assert status == 415 and answer["error"]["code"] == "unsupported_media_type"
    if loaded:
        assert window.api_serving.label.text().endswith("· 0 requests served")  # neither reached the model
        reply = client(url).chat.completions.create(model="default", messages=QUESTION, max_tokens=2, temperature=0)
        assert reply.choices[0].finish_reason == "length"
    else:
        status, answer = _raw_post(port, body, {"Content-Type": "application/json"})
        assert status == 503 and answer["error"]["code"] == "model_not_available"


def test_a_chat_turn_and_an_api_request_share_one_core_and_one_model_in_memory(qtbot, make_window):
    """Issue 42's "done when": the window's chat and the window's server are clients of one engine core; the same
    ``LoadedModel`` object answers both, and the core, the window and /metrics say one model is in memory."""
    import http.client

    from prometheus_client.parser import text_string_to_metric_families

    window = make_window(max_new_tokens=6)
    url = serve(qtbot, window)
    core, engine = window.bridge._worker.core, window.bridge._engine
    assert engine.core is core  # the window's engine thread is the core's EngineThread, as engine serve's is
    before = engine.jobs_run
    assert send_and_wait(qtbot, window, "What is a KV cache?") == "length"  # a window chat turn
    qtbot.waitUntil(lambda: engine.jobs_run > before, timeout=LOAD_TIMEOUT_MS)  # counted once the job returned
    after_chat = engine.jobs_run
    reply = client(url).chat.completions.create(model="default", messages=QUESTION, max_tokens=6, temperature=0)
    assert reply.choices[0].finish_reason == "length" and reply.usage.completion_tokens == 6  # an API request
    qtbot.waitUntil(lambda: engine.jobs_run > after_chat, timeout=LOAD_TIMEOUT_MS)  # both went through the one queue
    served = window.api_serving._current[1]
    assert served.loaded is core.loaded and core.held("chat") is core.loaded  # one LoadedModel serves both
    (record,) = core.models()
    assert (record.name, record.kind, record.bytes) == (window.controller.facts.name, "chat",
                                                        core.loaded.facts.weights_bytes)
    assert window.bridge.loaded_models() == (record,)  # the window is told (Bridge.models_changed)
    conn = http.client.HTTPConnection("127.0.0.1", window.api_serving.port, timeout=LIVENESS_S)
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    (family,) = [f for f in text_string_to_metric_families(text) if f.name == "miaohui:model_memory_bytes"]
    assert [(s.labels, s.value) for s in family.samples] == [({"model_name": record.name, "kind": "chat"},
                                                              float(record.bytes))]
