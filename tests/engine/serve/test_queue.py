"""One worker, one queue: arrival order, a full queue answered 429, a client that leaves mid-stream freeing the
worker. The worker is held deterministically by an in-process request whose consumer waits (``HeldJob``)."""

from __future__ import annotations

import json
import threading

import pytest

from engine.inputs import LoadSpec
from engine.models.loader import load_model
from tests.engine.serve.conftest import LIVENESS_S, HeldJob, start_server, wait_until
from tests.helpers.tiny_model import build_tiny_model

HELLO = [{"role": "user", "content": "Hello"}]


def _ask(client, i: int):
    return client.chat.completions.create(model="default", messages=[{"role": "user", "content": f"client {i}"}],
                                          temperature=1.0, seed=i, max_tokens=8)


@pytest.fixture(scope="module")
def long_loaded(tmp_path_factory):
    """The tiny model with 8,192 positions: greedy, it writes newlines without end, so a reply with no
    max_tokens runs for thousands of tokens - it is still generating when its client leaves."""
    folder = build_tiny_model(tmp_path_factory.mktemp("tiny-long"), max_position_embeddings=8192)
    return load_model(LoadSpec(model=str(folder), precision="fp32", device="cpu"))


def test_a_full_queue_gets_429_with_retry_after_then_serves_again(tiny_loaded):
    served, stop = start_server(tiny_loaded, max_queue=1)
    try:
        held = HeldJob(served.worker)  # running: the worker is inside its consumer
        results: dict[str, object] = {}

        def waiting_client() -> None:
            try:
                results["reply"] = served.client().chat.completions.create(model="default", messages=HELLO,
                                                                           max_tokens=3, temperature=0)
            except Exception as exc:  # noqa: BLE001  (reported by the assertion below)
                results["error"] = exc

        thread = threading.Thread(target=waiting_client)
        thread.start()
        wait_until(lambda: served.worker.waiting == 1, "the second request to be queued")
        status, headers, body = served.raw("POST", "/v1/chat/completions", {"messages": HELLO, "max_tokens": 3})
        assert status == 429, body
        assert int(headers["retry-after"]) >= 1
        error = json.loads(body)["error"]
        assert error["type"] == "rate_limit_error" and error["code"] == "queue_full"
        held.release()
        thread.join(LIVENESS_S)
        assert "error" not in results, results.get("error")
        assert results["reply"].choices[0].finish_reason in ("stop", "length")
        assert held.reply is not None and held.reply.finish_reason in ("stop", "length")
        status, _, body = served.raw("POST", "/v1/chat/completions", {"messages": HELLO, "max_tokens": 3})
        assert status == 200, body
    finally:
        stop()


def test_eight_clients_at_once_are_served_whole_in_arrival_order(tiny_loaded):
    served, stop = start_server(tiny_loaded, max_queue=8)
    try:
        held = HeldJob(served.worker)
        replies: dict[int, object] = {}
        threads = []
        for i in range(8):
            def call(i: int = i) -> None:
                try:
                    replies[i] = _ask(served.client(), i)
                except Exception as exc:  # noqa: BLE001
                    replies[i] = exc

            threads.append(threading.Thread(target=call))
            threads[-1].start()
            wait_until(lambda: served.worker.waiting == i + 1, f"client {i} to be queued")  # arrival order is known
        held.release()
        for thread in threads:
            thread.join(LIVENESS_S)
        assert all(not isinstance(replies[i], Exception) for i in range(8)), replies
        wait_until(lambda: served.worker.served == 9, "every request to be recorded")
        served_ids = [r.id for r in served.worker.recent][1:]  # after the held one
        assert served_ids == [replies[i].id for i in range(8)]  # first in, first served
        client = served.client()
        for i in range(8):  # each got its whole answer: the one it gets when asking alone
            alone = _ask(client, i)
            assert replies[i].choices[0].message.content == alone.choices[0].message.content
            assert replies[i].choices[0].finish_reason == alone.choices[0].finish_reason
    finally:
        stop()


def test_a_client_leaving_mid_stream_cancels_its_generation(long_loaded):
    served, stop = start_server(long_loaded)
    try:
        client = served.client()
        stream = client.chat.completions.create(model="default", messages=HELLO, temperature=0, stream=True)
        seen = []
        for chunk in stream:
            seen.append(chunk)
            if len(seen) == 2:
                break
        stream.close()  # the client goes away with thousands of tokens still to come
        after = client.chat.completions.create(model="default", messages=[{"role": "user", "content": "next"}],
                                               max_tokens=3, temperature=0)
        assert after.choices[0].finish_reason in ("stop", "length")
        records = {r.id: r for r in served.worker.recent}
        left = records[seen[0].id]
        assert left.finish_reason == "cancelled"
        assert left.completion_tokens < 8192 - left.prompt_tokens  # stopped long before its budget
        wait_until(lambda: not served.worker.running and served.worker.waiting == 0, "the worker to be idle")
    finally:
        stop()
