"""Continuous batching (``Worker(parallel=N)``, ``engine serve --parallel N``) through real servers and the official
``openai`` client: concurrent replies equal the same requests served one at a time, a client that leaves mid-batch
changes nobody else's reply, a long prompt's chunks run between the others' decode steps, a request runs while
another is held, /metrics has vLLM's names, and a model the batched step cannot run is served one at a time."""

from __future__ import annotations

import sys
import threading
from typing import Any

import pytest
import torch

from engine.events import Message
from engine.inputs import LoadSpec, SamplingConfig
from engine.models.loader import load_model
from engine.serve.worker import Job, Reply, Worker
from tests.engine.serve.conftest import LIVENESS_S, HeldJob, start_server, wait_until
from tests.helpers.concurrency import all_at_once
from tests.helpers.tiny_model import build_tiny_model


@pytest.fixture(scope="module")
def varied(tmp_path_factory):
    """The tiny model with larger random weights (its greedy replies differ from prompt to prompt) and room for a
    long prompt."""
    folder = build_tiny_model(tmp_path_factory.mktemp("tiny-varied"), initializer_range=0.3,
                              max_position_embeddings=1024)
    return load_model(LoadSpec(model=str(folder), precision="fp32", device="cpu"))


@pytest.fixture(scope="module")
def one_at_a_time(varied):
    served, stop = start_server(varied, key=None, parallel=1)
    yield served
    stop()


def _request(i: int, stop: list[str] | None = None) -> dict[str, Any]:
    """Eight different requests: prompts of different lengths, budgets, greedy or seeded sampling, streamed or not."""
    body: dict[str, Any] = {"messages": [{"role": "user", "content": f"request {i}: " + "the KV cache " * (1 + 3 * i)}],
                            "max_tokens": 12 + 5 * i, "temperature": 0.0, "stream": i % 2 == 1}
    if i == 5:
        body.update(temperature=1.0, seed=42)  # its own sampler: the same seed gives the same reply
    if stop:
        body["stop"] = stop
    return body


def _ask(served, body: dict[str, Any]) -> tuple[str, str, int | None]:
    """(text, finish reason, completion tokens) of one request through the openai client."""
    client = served.client()
    if not body.get("stream"):
        reply = client.chat.completions.create(model="default", **body)
        return reply.choices[0].message.content or "", reply.choices[0].finish_reason, reply.usage.completion_tokens
    text, reason, tokens = [], None, None
    for chunk in client.chat.completions.create(model="default", stream_options={"include_usage": True}, **body):
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
        for choice in chunk.choices:
            text.append(choice.delta.content or "")
            reason = choice.finish_reason or reason
    return "".join(text), reason, tokens


def _together(served, bodies: list[dict[str, Any]]) -> list[Any]:
    """Send every body at the same moment (one thread each) and collect the results in order."""
    return all_at_once(lambda i: _ask(served, bodies[i]), len(bodies), LIVENESS_S)


@pytest.mark.parametrize("parallel", [4, 8])
def test_eight_concurrent_requests_equal_the_same_requests_one_at_a_time(varied, one_at_a_time, parallel):
    plain = _ask(one_at_a_time, _request(7))[0]
    stop = [plain[6:9]]  # a stop string the greedy reply of request 7 reaches
    bodies = [_request(i, stop if i == 7 else None) for i in range(8)]
    alone = [_ask(one_at_a_time, body) for body in bodies]
    assert alone[7][1] == "stop" and alone[7][0] == plain[:plain.index(stop[0])]
    assert len({text for text, _, _ in alone}) == 8  # the replies differ: the comparison means something
    served, stop_server = start_server(varied, key=None, parallel=parallel)
    try:
        together = _together(served, bodies)
        assert together == alone
        engine = served.worker._engine
        assert engine is not None and engine.largest_batch >= 2  # they did share decode forwards
        assert engine.largest_batch <= parallel
    finally:
        stop_server()


def test_a_client_that_leaves_mid_batch_changes_no_other_reply(varied, one_at_a_time):
    bodies = [_request(i) for i in (1, 2, 3)]
    alone = [_ask(one_at_a_time, body) for body in bodies]
    served, stop_server = start_server(varied, key=None, parallel=4)
    try:
        left = threading.Event()

        def leaver() -> None:
            stream = served.client().chat.completions.create(
                model="default", stream=True, max_tokens=600, temperature=0.0,
                messages=[{"role": "user", "content": "I will leave soon"}])
            for n, _ in enumerate(stream):
                if n == 3:
                    break
            stream.close()  # the connection goes: the server cancels the request
            left.set()

        thread = threading.Thread(target=leaver)
        thread.start()
        together = _together(served, bodies)
        thread.join(LIVENESS_S)
        assert left.is_set()
        assert together == alone
        wait_until(lambda: any(r.finish_reason == "cancelled" for r in served.worker.recent), "the cancel")
        wait_until(lambda: not served.worker.running, "the leaver's place to be freed")
        assert served.worker._engine.running == 0
        assert _ask(served, _request(0)) == _ask(one_at_a_time, _request(0))  # and the server goes on
    finally:
        stop_server()


@pytest.mark.parametrize("prefill_first_s", [0.0, 60.0])
def test_a_long_prompt_is_prefilled_in_chunks_between_the_running_decodes(varied, one_at_a_time, prefill_first_s):
    """With no bound on prompts first, every chunk runs beside the running decode; with a bound longer than the prompt
    takes, its chunks run alone first (the decode waits, then goes on): the replies are the same either way."""
    long_body = {"messages": [{"role": "user", "content": "the KV cache " * 150}], "max_tokens": 4,
                 "temperature": 0.0}
    running_body = _request(6)
    running_body.update(max_tokens=200, stream=True)
    alone = [_ask(one_at_a_time, body) for body in (running_body, long_body)]
    served, stop_server = start_server(varied, key=None, parallel=4)
    try:
        first_token = threading.Event()
        result: dict[str, Any] = {}

        def running() -> None:
            text, reason, tokens = [], None, None
            for chunk in served.client().chat.completions.create(model="default", stream_options={"include_usage": True},
                                                                 **running_body):
                first_token.set()
                if chunk.usage is not None:
                    tokens = chunk.usage.completion_tokens
                for choice in chunk.choices:
                    text.append(choice.delta.content or "")
                    reason = choice.finish_reason or reason
            result["running"] = ("".join(text), reason, tokens)

        thread = threading.Thread(target=running)
        thread.start()
        assert first_token.wait(LIVENESS_S)
        engine = served.worker._engine
        engine.prefill_first_s = prefill_first_s
        before = len(engine.trace)
        long_reply = _ask(served, long_body)
        steps = list(engine.trace)[before:]
        thread.join(LIVENESS_S)
        assert [result["running"], long_reply] == alone
        # ~600 prompt tokens in chunks of 256: each chunk ran in a step with the other request's decode, or alone
        if prefill_first_s:
            assert sum(1 for decodes, chunk in steps if chunk and not decodes) >= 2, steps
            assert not any(chunk and decodes for decodes, chunk in steps), steps
        else:
            assert sum(1 for decodes, chunk in steps if chunk and decodes) >= 2, steps
    finally:
        stop_server()


def test_a_request_is_served_while_another_is_held_and_metrics_count_both(varied):
    served, stop_server = start_server(varied, key=None, parallel=4)
    try:
        held = HeldJob(served.worker)  # its consumer blocks on its first token: one slot is busy
        assert _ask(served, _request(0))[1] == "length"  # served beside it, not behind it
        status, _, body = served.raw("GET", "/metrics")
        text = body.decode()
        assert status == 200
        for name in ("vllm:num_requests_running", "miaohui:num_requests_running"):
            assert f'{name}{{model_name="{served.worker.model_id}"}} 1.0' in text, text
        assert f'vllm:num_requests_waiting{{model_name="{served.worker.model_id}"}} 0.0' in text
        assert f'miaohui:parallel_slots{{model_name="{served.worker.model_id}"}} 4.0' in text
        held.release()
        wait_until(lambda: held.reply is not None, "the held job to finish")
        wait_until(lambda: not served.worker.running, "no request running")
        text = served.raw("GET", "/metrics")[2].decode()
        assert f'vllm:num_requests_running{{model_name="{served.worker.model_id}"}} 0.0' in text
    finally:
        stop_server()


def test_a_model_the_batched_step_cannot_run_is_served_one_at_a_time(varied, monkeypatch):
    monkeypatch.setenv("MIAOHUI_FASTPATH", "0")  # the plain runner: no batched step
    worker = Worker(varied, parallel=4).start()
    try:
        assert worker.parallel == 1 and "fast path" in worker.batching_refused
        assert b'miaohui:parallel_slots{model_name="' + worker.model_id.encode() + b'"} 1.0' in worker.metrics.render()
        done = threading.Event()
        replies: list[Reply] = []

        def emit(event: Any) -> None:
            if isinstance(event, Reply):
                replies.append(event)
                done.set()

        worker.submit(Job((Message("user", "hi"),), SamplingConfig(temperature=0.0, max_new_tokens=3), emit))
        assert done.wait(LIVENESS_S) and replies[0].finish_reason == "length"
    finally:
        worker.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="torch's OpenMP runtime found in /proc/self/maps")
def test_each_requests_own_thread_runs_torch_on_one_core_beside_the_step(varied):
    """A request's thread only samples beside the step thread (engine/executor/omp_team.py): its torch operations
    run on one core, while the step thread and the caller keep torch's count."""
    if torch.get_num_threads() < 2:
        pytest.skip("torch runs on one thread here: nothing to take away")
    before = torch.get_num_threads()
    worker = Worker(varied, parallel=2).start()
    seen: list[tuple[str, int]] = []
    steps: set[int] = set()
    real_step = worker._engine._step

    def step(*args: Any) -> None:
        steps.add(torch.get_num_threads())
        real_step(*args)

    worker._engine._step = step
    try:
        done = threading.Event()

        def emit(event: Any) -> None:  # called on the request's thread
            seen.append((threading.current_thread().name, torch.get_num_threads()))
            if isinstance(event, Reply):
                done.set()

        worker.submit(Job((Message("user", "hi"),), SamplingConfig(temperature=0.0, max_new_tokens=3), emit))
        assert done.wait(LIVENESS_S)
    finally:
        worker.close()
    assert seen and {s for s in seen} == {("miaohui-serve-request", 1)}
    assert steps == {before} and torch.get_num_threads() == before


def test_with_an_executor_its_thread_makes_every_batched_forward(varied, one_at_a_time, monkeypatch):
    """The window's hand-over (``engine.core.handoff``): one thread owns the model and makes each step's
    forwards; the requests still decode together and reply as they do one at a time."""
    from concurrent.futures import ThreadPoolExecutor

    from engine.serve.batching import BatchEngine

    owner = ThreadPoolExecutor(1, thread_name_prefix="model-owner")
    forwards: set[str] = set()
    real_step = BatchEngine._step

    def step(self: BatchEngine, *args: Any) -> None:
        forwards.add(threading.current_thread().name)
        real_step(self, *args)

    monkeypatch.setattr(BatchEngine, "_step", step)
    bodies = [_request(i) for i in (0, 2, 4, 6)]
    alone = [_ask(one_at_a_time, body) for body in bodies]
    forwards.clear()
    served, stop_server = start_server(varied, key=None, parallel=4,
                                       executor=lambda fn: owner.submit(fn).result(LIVENESS_S))
    try:
        assert served.worker.parallel == 4 and served.worker.batching_refused is None
        assert _together(served, bodies) == alone
        assert served.worker._engine.largest_batch >= 2  # they shared decode forwards
        assert forwards == {"model-owner_0"}  # every forward on the owner's thread, none on the step thread
    finally:
        stop_server()
        owner.shutdown()


def test_the_next_turn_reuses_its_slots_cache_and_reports_cached_tokens(varied, one_at_a_time):
    served, stop_server = start_server(varied, key=None, parallel=4)
    try:
        client = served.client()
        first = [{"role": "system", "content": "You answer about caches. " * 20},
                 {"role": "user", "content": "What is a KV cache?"}]
        reply = client.chat.completions.create(model="default", messages=first, max_tokens=8, temperature=0.0)
        assert reply.usage.prompt_tokens_details.cached_tokens == 0
        second = first + [{"role": "assistant", "content": reply.choices[0].message.content},
                          {"role": "user", "content": "And why does it help?"}]
        again = client.chat.completions.create(model="default", messages=second, max_tokens=8, temperature=0.0)
        # The first turn's whole prompt is in the slot's cache (its random-weight reply may tokenise otherwise).
        assert again.usage.prompt_tokens_details.cached_tokens >= reply.usage.prompt_tokens
        assert again.choices[0].message.content == one_at_a_time.client().chat.completions.create(
            model="default", messages=second, max_tokens=8, temperature=0.0).choices[0].message.content
    finally:
        stop_server()
