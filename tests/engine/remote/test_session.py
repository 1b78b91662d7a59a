"""``RemoteSession`` against a real ``engine serve`` (the tiny model): the same events as a local session, the figures
measured on the client or null, cancel, and every network failure as one line with the partial reply kept."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from engine.errors import ErrorKind
from engine.events import Finished, Message, Started, Stats, Token
from engine.inputs import SamplingConfig
from engine.remote import RemoteError, RemoteModel, RemoteSession, RemoteSpec, connect
from engine.remote.session import UNKNOWN_ALWAYS
from engine.remote.spec import ConnectCancelledError
from engine.serve.worker import Job
from tests.engine.serve.conftest import HeldJob, start_server, wait_until
from tests.helpers.openai_wire import MODEL, WORDS, SilentServer, WireServer

HELLO = [Message("user", "Hello there")]
GREEDY = SamplingConfig(temperature=0.0, top_p=1.0, top_k=0, max_new_tokens=12)


def run(session: RemoteSession, config: SamplingConfig = GREEDY, cancel: threading.Event | None = None,
        messages: list[Message] = HELLO) -> tuple[list[object], Finished]:
    events = list(session.generate(messages, config, cancel))
    finished = [e for e in events if isinstance(e, Finished)]
    assert len(finished) == 1 and events[-1] is finished[0], "exactly one Finished, last"
    return events, finished[0]


def one_line(text: str | None) -> bool:
    return bool(text) and "\n" not in text and "Traceback" not in text


def test_connect_lists_the_servers_model_and_its_context(server, spec):
    remote = connect(spec)
    assert remote.model_id == server.worker.model_id  # "default" took the server's only model
    facts = remote.facts
    assert facts.remote and facts.name == remote.model_id and facts.context_length == 256
    assert facts.device == f"remote: 127.0.0.1:{server.port}" and facts.precision == "remote"
    assert facts.params is None and facts.weights_bytes is None  # engine serve does not say: unknown, not 0
    with pytest.raises(RemoteError, match="does not serve 'nope'"):
        connect(RemoteSpec(server.url, "nope", server.key))


def test_a_greedy_stream_is_the_servers_non_stream_reply_with_the_events_of_a_local_session(server, spec):
    events, finished = run(RemoteSession(connect(spec)))
    reply = server.client().chat.completions.create(model="default", max_tokens=12, temperature=0.0, top_p=1.0,
                                                    messages=[{"role": "user", "content": "Hello there"}])
    assert isinstance(events[0], Started) and events[0].context_max == 256
    tokens = [e for e in events if isinstance(e, Token)]
    assert finished.reason == "length" and finished.error is None
    assert finished.text == reply.choices[0].message.content == "".join(t.text for t in tokens)
    assert [t.index for t in tokens] == list(range(len(tokens)))
    assert all(t.token_id == -1 for t in tokens)  # the API sends text, not ids
    assert any(isinstance(e, Stats) for e in events) or len(tokens) < 8


def test_figures_are_measured_on_the_client_or_null_never_invented(server, spec):
    # An earlier test's request may still be on its way to being recorded (its client finished first, see below):
    # counted here, both would land after the read and the count would pass served + 1 between two polls.
    wait_until(lambda: not server.worker.running and not server.worker.waiting, "earlier requests to be recorded")
    served = server.worker.served
    _, finished = run(RemoteSession(connect(spec)), SamplingConfig(temperature=0.0, max_new_tokens=10, top_logprobs=2))
    m = finished.metrics
    # The worker records a request just after its last byte is sent: the client can finish first.
    wait_until(lambda: server.worker.served == served + 1, "the request to be recorded")
    record = server.worker.recent[-1]
    assert m.generated_tokens == 10 == record.completion_tokens  # from usage
    assert m.prompt_tokens == record.prompt_tokens > 0 and m.reused_tokens == record.cached_tokens
    assert m.prefill_tokens == m.prompt_tokens - m.reused_tokens
    assert m.ttft_s is not None and 0 < m.ttft_s < m.e2e_s
    assert m.decode_tok_s is not None and m.decode_tok_s > 0 and m.tpot_s is not None
    assert len(m.itl_s) == 9 and all(gap >= 0 for gap in m.itl_s)  # logprobs: one token each, 10 arrivals
    assert m.context_tokens == m.prompt_tokens + 10 and m.context_max == 256
    data = m.to_dict()
    assert "unknown" not in data
    for name in UNKNOWN_ALWAYS:
        assert data[name] is None and m.known(name) is None, name
    assert data["ttft_s"] == m.ttft_s and data["device"].startswith("remote: ")


def test_logprobs_give_one_token_event_per_token_with_candidates(spec):
    events, finished = run(RemoteSession(connect(spec)), SamplingConfig(temperature=0.0, max_new_tokens=6,
                                                                        top_logprobs=3))
    tokens = [e for e in events if isinstance(e, Token)]
    assert len(tokens) == 6 and "".join(t.text for t in tokens) == finished.text
    for token in tokens:
        assert token.prob is not None and 0 < token.prob <= 1 and len(token.top) == 3
        assert token.top[0].prob >= token.top[-1].prob


def test_cancel_mid_stream_keeps_the_text_and_frees_the_server(server, spec):
    session, cancel = RemoteSession(connect(spec)), threading.Event()
    events = []
    for event in session.generate(HELLO, SamplingConfig(temperature=0.0, max_new_tokens=200), cancel):
        events.append(event)
        if isinstance(event, Token) and event.index == 2:
            cancel.set()
    finished = events[-1]
    assert isinstance(finished, Finished) and finished.reason == "cancelled" and finished.error is None
    assert finished.text == "".join(e.text for e in events if isinstance(e, Token))
    wait_until(lambda: server.worker.recent[-1].finish_reason == "cancelled" and not server.worker.running,
               "the server to see the client leave")
    assert server.worker.recent[-1].completion_tokens < 200
    _, again = run(session)  # the next request is served at once
    assert again.reason == "length"


def test_a_cancel_is_seen_while_the_request_waits_in_the_servers_queue(server, spec):
    held = HeldJob(server.worker)  # the server is busy: no byte of our reply comes
    try:
        cancel = threading.Event()
        threading.Timer(0.3, cancel.set).start()
        started = time.monotonic()
        _, finished = run(RemoteSession(connect(spec)), cancel=cancel)
        assert finished.reason == "cancelled" and finished.text == ""
        assert time.monotonic() - started < 10  # seen by polling, not after the held job
    finally:
        held.release()
    wait_until(lambda: not server.worker.running and server.worker.waiting == 0, "the queue to drain")


def test_a_server_that_is_down_is_one_line(tiny_loaded):
    served, stop = start_server(tiny_loaded, key=None)
    remote = connect(RemoteSpec(served.url, "default"))
    stop()
    _, finished = run(RemoteSession(remote))
    assert finished.reason == "error" and one_line(finished.error)
    assert "connection refused" in finished.error and "is the server running" in finished.error
    with pytest.raises(RemoteError, match="connection refused") as info:
        connect(RemoteSpec(served.url, "default"))
    assert one_line(str(info.value))


def test_a_wrong_key_is_one_line_that_never_shows_the_key(server):
    with pytest.raises(RemoteError) as info:
        connect(RemoteSpec(server.url, "default", "sk-wrong-key-123"))
    assert "401" in str(info.value) and "refused the API key" in str(info.value) and one_line(str(info.value))
    good = connect(RemoteSpec(server.url, "default", server.key))
    wrong = RemoteModel(RemoteSpec(server.url, good.model_id, "sk-wrong-key-123"), good.served, good.listed)
    _, finished = run(RemoteSession(wrong))
    assert finished.reason == "error" and "HTTP 401" in finished.error and one_line(finished.error)
    assert "sk-wrong-key-123" not in finished.error and "sk-wrong-key-123" not in repr(wrong.spec)


def test_a_full_queue_429_says_when_to_retry(tiny_loaded):
    served, stop = start_server(tiny_loaded, max_queue=1)
    try:
        remote = connect(RemoteSpec(served.url, "default", served.key))
        held = HeldJob(served.worker)  # running
        served.worker.submit(Job(tuple(HELLO), SamplingConfig(temperature=0.0, max_new_tokens=2), lambda _e: None))
        wait_until(lambda: served.worker.waiting == 1, "the queue to be full")  # the one slot is taken
        _, finished = run(RemoteSession(remote))
        assert finished.reason == "error" and "HTTP 429" in finished.error and "retry in" in finished.error
        assert one_line(finished.error)
        held.release()
    finally:
        stop()


def test_a_stream_cut_mid_reply_keeps_the_partial_text_and_says_so():
    with WireServer("cut") as wire:
        remote = connect(RemoteSpec(wire.url, MODEL))
        _, finished = run(RemoteSession(remote))
    assert finished.reason == "error" and one_line(finished.error)
    assert finished.text == "".join(WORDS[:2])  # what came before the cut is kept
    assert "cut" in finished.error or "ended the stream" in finished.error


def test_a_server_without_usage_leaves_the_prompt_unknown():
    with WireServer("no-usage") as wire:
        _, finished = run(RemoteSession(connect(RemoteSpec(wire.url, MODEL))))
        sent = wire.requests[-1]
    assert finished.reason == "eos" and finished.text == "".join(WORDS)
    data = finished.metrics.to_dict()
    assert data["prompt_tokens"] is None and data["context_tokens"] is None and data["reused_tokens"] is None
    assert data["generated_tokens"] == len(WORDS) + 1  # the words, and the end of the reply as its last token
    assert data["context_max"] is None  # /v1/models said nothing of the context
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    assert "top_k" not in sent  # greedy: nothing that only some servers accept


def test_tls_to_a_plain_http_server_and_a_silent_server_are_one_line(server):
    with pytest.raises(RemoteError, match="TLS with 127.0.0.1") as info:
        connect(RemoteSpec(server.url.replace("http://", "https://"), "default", server.key))
    assert one_line(str(info.value))
    silent = socket.socket()  # accepts connections (the backlog) and never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(4)
    try:
        spec = RemoteSpec(f"http://127.0.0.1:{silent.getsockname()[1]}", "m", answer_timeout_s=0.5)
        with pytest.raises(RemoteError, match="did not answer in time") as info:
            connect(spec)
        assert one_line(str(info.value))
    finally:
        silent.close()


@pytest.mark.timeout(120)  # a connect that ignored its cancel would wait its 600 s
def test_connecting_to_a_silent_server_is_cancelled_at_once_whatever_its_timeouts():
    with SilentServer() as silent:
        cancel = threading.Event()
        threading.Timer(0.5, cancel.set).start()
        with pytest.raises(ConnectCancelledError, match="connecting to 127.0.0.1:.* was cancelled") as info:
            connect(RemoteSpec(silent.url, "", connect_timeout_s=600, answer_timeout_s=600), cancel)
        assert info.value.kind is ErrorKind.CANCELLED and silent.accepted == 1


@pytest.mark.parametrize("url, words", [
    ("", "empty"), ("127.0.0.1:8000", "no scheme"), ("ftp://host/v1", "http:// or https://"),
    ("http://:8000", "no host"), ("http://host:99999", "not valid"), ("http://user:pw@host", "password"),
])
def test_a_bad_base_url_is_refused_with_one_line(url, words):
    with pytest.raises(RemoteError, match=words) as info:
        RemoteSpec(url)
    assert one_line(str(info.value))


def test_base_urls_are_canonical_and_the_key_never_shows():
    spec = RemoteSpec("HTTP://GPU-Box:8000/", "m", " sk-secret ")
    assert spec.base_url == "http://gpu-box:8000/v1" and spec.root == "http://gpu-box:8000"
    assert spec.api_key == "sk-secret" and "sk-secret" not in repr(spec) and spec.host == "gpu-box:8000"
    assert RemoteSpec("http://localhost:11434/v1").base_url == "http://localhost:11434/v1"
    assert RemoteSpec("https://proxy.example/openai/v1").root == "https://proxy.example/openai"


def test_a_servers_reasoning_content_arrives_as_the_thought(reasoning_model_dir):
    from engine.inputs import LoadSpec
    from engine.models.loader import load_model
    from tests.helpers.reasoning_model import expected_texts

    thought, answer = expected_texts(reasoning_model_dir)
    served, stop = start_server(load_model(LoadSpec(model=str(reasoning_model_dir), precision="fp32", device="cpu")))
    try:
        events, finished = run(RemoteSession(connect(RemoteSpec(served.url, "default", served.key))),
                               SamplingConfig(temperature=0.0, max_new_tokens=64))
    finally:
        stop()
    assert finished.reason == "eos" and finished.text == answer and finished.reasoning.strip() == thought
    tokens = [e for e in events if isinstance(e, Token)]
    parts = [t.part for t in tokens]
    assert parts == sorted(parts, reverse=True) and parts[0] == "reasoning" and "answer" in parts  # thought first
    assert "".join(t.reasoning for t in tokens).strip() == thought and "".join(t.text for t in tokens) == answer
    m = finished.metrics
    assert m.thinking_tokens == parts.count("reasoning") > 0
    assert m.ttft_thought_s is not None and m.ttft_answer_s is not None and m.ttft_thought_s <= m.ttft_answer_s
    assert m.ttft_s == m.ttft_thought_s  # the first token of anything, as a local reply counts it
