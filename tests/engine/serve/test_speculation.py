"""``engine serve --speculative``'s server: prompt-lookup speculation on the tiny model answers the ``openai`` client
with the same greedy text as a server without it, serves one request at a time, and counts each request's drafts
under vLLM v1's spec-decode names on ``/metrics``."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from engine.events import Message
from engine.inputs import SamplingConfig, SpeculationConfig
from engine.serve.worker import Job, Reply
from tests.engine.serve.conftest import LIVENESS_S, start_server, wait_until

SPEC = ("vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_draft_tokens_total",
        "vllm:spec_decode_num_accepted_tokens_total")
# Repeat-heavy, as prompt lookup is meant for: the reply's n-grams are found in the prompt or in itself.
REPEATS = [{"role": "user", "content": "Repeat after me: one two three four five six, one two three four five six, "
                                       "one two three four five six, one two three four five six."}]


@pytest.fixture(scope="module")
def speculating(tiny_loaded):
    served, stop = start_server(tiny_loaded, parallel=4, speculation=SpeculationConfig("prompt-lookup"))
    yield served
    stop()


def _scrape(server) -> dict[str, float]:
    status, _, body = server.raw("GET", "/metrics", key=None)
    assert status == 200
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(body.decode("utf-8")):
        for sample in family.samples:
            if sample.name.startswith(("vllm:spec_decode", "miaohui:spec_decode")) and sample.name.endswith("_total"):
                assert family.type == "counter"
                assert sample.labels["model_name"] == server.worker.model_id
            samples[sample.name] = sample.value
    return samples


def test_greedy_replies_equal_those_of_a_server_without_speculation(speculating, server):
    for messages, max_tokens in ((REPEATS, 40), ([{"role": "user", "content": "Hi"}], 24)):
        replies = [s.client().chat.completions.create(model="default", messages=messages, max_tokens=max_tokens,
                                                      temperature=0) for s in (speculating, server)]
        assert replies[0].choices[0].message.content == replies[1].choices[0].message.content
        assert replies[0].usage.completion_tokens == replies[1].usage.completion_tokens
        streamed = "".join(chunk.choices[0].delta.content or "" for chunk in speculating.client().chat.completions
                           .create(model="default", messages=messages, max_tokens=max_tokens, temperature=0,
                                   stream=True) if chunk.choices)
        assert streamed == replies[1].choices[0].message.content


def test_speculation_serves_one_request_at_a_time(speculating):
    assert speculating.worker.parallel == 1
    assert "speculative" in speculating.worker.batching_refused
    assert _scrape(speculating)["miaohui:parallel_slots"] == 1


def test_metrics_count_each_requests_drafts_under_vllms_names(speculating):
    before = _scrape(speculating)
    replies: list[Reply] = []

    def emit(event: Any) -> None:
        if isinstance(event, Reply):
            replies.append(event)

    messages = tuple(Message(m["role"], m["content"]) for m in REPEATS)
    speculating.worker.submit(Job(messages, SamplingConfig(temperature=0.0, max_new_tokens=40), emit))
    wait_until(lambda: bool(replies), "the in-process request's reply", LIVENESS_S)
    m = replies[0].metrics
    assert m.speculation == "prompt-lookup" and m.drafts > 0 and m.draft_tokens >= m.drafts
    wait_until(lambda: _scrape(speculating)[SPEC[0]] > before[SPEC[0]], "the request's counts")
    after = _scrape(speculating)
    for name, value in zip(SPEC, (m.drafts, m.draft_tokens, m.accepted_tokens)):
        assert after[name] - before[name] == value
        mine = name.replace("vllm:", "miaohui:")
        assert after[mine] - before[mine] == value
    # An openai request counts too (its Metrics are not in the response, but they moved the counters).
    speculating.client().chat.completions.create(model="default", messages=REPEATS, max_tokens=40, temperature=0)
    wait_until(lambda: _scrape(speculating)[SPEC[1]] > after[SPEC[1]], "the openai request's counts")


def test_a_server_without_speculation_counts_no_drafts(server):
    server.client().chat.completions.create(model="default", messages=REPEATS, max_tokens=16, temperature=0)
    samples = _scrape(server)
    assert all(samples[name] == 0 for name in SPEC)
