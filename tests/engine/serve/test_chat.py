"""The OpenAI API of ``python -m engine serve`` through the official ``openai`` client: models, chat completions
(whole and streamed), usage with cached tokens, logprobs, stop strings, legacy completions, SSE framing."""

from __future__ import annotations

import json

import pytest

SYSTEM = {"role": "system", "content": "You are Miaohui."}
ASK = [SYSTEM, {"role": "user", "content": "What is the capital of France?"}]
SAMPLED = dict(temperature=1.0, seed=7, max_tokens=24)  # seeded: the same reply every time, and not all newlines


def _chat(client, messages=ASK, **kwargs):
    return client.chat.completions.create(model="default", messages=messages, **kwargs)


def _streamed(client, messages=ASK, **kwargs):
    chunks = list(_chat(client, messages, stream=True, **kwargs))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    return chunks, text


def test_lists_the_served_model_and_answers_to_its_id_and_default(server):
    client = server.client()
    assert [m.id for m in client.models.list().data] == [server.worker.model_id]
    assert client.models.retrieve("default").id == server.worker.model_id
    reply = client.chat.completions.create(model=server.worker.model_id, messages=ASK, max_tokens=2)
    assert reply.model == server.worker.model_id


def test_greedy_reply_is_deterministic_and_reports_usage(server):
    client = server.client()
    first = _chat(client, temperature=0, seed=1, max_tokens=12)
    second = _chat(client, temperature=0, seed=1, max_tokens=12)
    assert first.choices[0].message.content == second.choices[0].message.content
    assert first.choices[0].message.role == "assistant"
    assert first.choices[0].finish_reason in ("stop", "length")
    assert first.object == "chat.completion" and first.id.startswith("chatcmpl-") and first.id != second.id
    usage = first.usage
    assert usage.prompt_tokens > 0 and 1 <= usage.completion_tokens <= 12
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert second.usage.prompt_tokens_details.cached_tokens > 0  # the same prompt again: served from the cache


def test_stream_assembles_to_the_non_stream_reply(server):
    client = server.client()
    whole = _chat(client, **SAMPLED)
    chunks, text = _streamed(client, **SAMPLED)
    assert text == whole.choices[0].message.content and text.strip()
    assert chunks[0].choices[0].delta.role == "assistant"
    assert {c.id for c in chunks} == {chunks[0].id} and chunks[0].object == "chat.completion.chunk"
    finishing = [c.choices[0].finish_reason for c in chunks if c.choices[0].finish_reason]
    assert finishing == [whole.choices[0].finish_reason]
    assert all(c.usage is None for c in chunks)  # no include_usage: no usage anywhere


def test_include_usage_adds_a_last_chunk_with_the_usage(server):
    client = server.client()
    whole = _chat(client, **SAMPLED)
    chunks, _ = _streamed(client, stream_options={"include_usage": True}, **SAMPLED)
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert all(c.usage is None for c in chunks[:-1])
    assert last.usage.completion_tokens == whole.usage.completion_tokens
    assert last.usage.prompt_tokens == whole.usage.prompt_tokens
    assert last.usage.total_tokens == last.usage.prompt_tokens + last.usage.completion_tokens


def test_logprobs_have_the_asked_number_of_candidates(server):
    client = server.client()
    reply = _chat(client, temperature=0, max_tokens=6, logprobs=True, top_logprobs=3)
    content = reply.choices[0].logprobs.content
    assert 1 <= len(content) <= reply.usage.completion_tokens
    for entry in content:
        assert entry.logprob <= 0 and isinstance(entry.bytes, list) and len(entry.top_logprobs) == 3
        assert entry.top_logprobs[0].token == entry.token  # greedy: the chosen token is the most likely
        assert entry.top_logprobs[0].logprob == pytest.approx(entry.logprob)
        assert [t.logprob for t in entry.top_logprobs] == sorted((t.logprob for t in entry.top_logprobs), reverse=True)
    plain = _chat(client, temperature=0, max_tokens=6, logprobs=True)
    assert all(entry.top_logprobs == [] for entry in plain.choices[0].logprobs.content)
    assert _chat(client, temperature=0, max_tokens=6).choices[0].logprobs is None
    chunks, _ = _streamed(client, temperature=0, max_tokens=6, logprobs=True, top_logprobs=2)
    streamed = [e for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert [e.token for e in streamed] == [e.token for e in content]


def test_stop_strings_end_the_reply_before_them(server):
    client = server.client()
    text = _chat(client, **SAMPLED).choices[0].message.content
    assert len(text) >= 4
    stop = text[len(text) // 2:len(text) // 2 + 2]
    expected = text[:text.find(stop)]
    for form in (stop, [stop, "never appears ☃"]):
        reply = _chat(client, stop=form, **SAMPLED)
        assert reply.choices[0].message.content == expected
        assert reply.choices[0].finish_reason == "stop"
        assert reply.usage.completion_tokens <= _chat(client, **SAMPLED).usage.completion_tokens
    chunks, streamed = _streamed(client, stop=[stop], **SAMPLED)
    assert streamed == expected
    assert [c.choices[0].finish_reason for c in chunks if c.choices[0].finish_reason] == ["stop"]


def test_second_turn_of_a_conversation_reuses_the_kv_cache(server):
    client = server.client()
    turn = [{"role": "system", "content": "A conversation of its own."}, {"role": "user", "content": "Hello!"}]
    first = _chat(client, turn, **SAMPLED)
    assert first.usage.prompt_tokens_details.cached_tokens == 0  # nothing of it was ever computed
    turn += [{"role": "assistant", "content": first.choices[0].message.content},
             {"role": "user", "content": "And then?"}]
    second = _chat(client, turn, **SAMPLED)
    assert second.usage.prompt_tokens > first.usage.prompt_tokens
    assert second.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens


def test_completions_continue_the_prompt_raw_on_a_model_with_a_chat_template_too(server):
    client = server.client()
    raw = client.completions.with_raw_response.create(model="default", prompt="The capital of France is",
                                                      max_tokens=5, temperature=0, logprobs=2)
    assert raw.headers["x-miaohui-completion-mode"] == "raw"
    reply = raw.parse()
    choice = reply.choices[0]
    # The prompt's own tokens only: no chat template wrapped around it (that would add its role markers).
    assert reply.usage.prompt_tokens == len(server.worker.loaded.tokenizer.encode("The capital of France is"))
    assert reply.object == "text_completion" and isinstance(choice.text, str)
    assert choice.finish_reason in ("stop", "length") and 1 <= reply.usage.completion_tokens <= 5
    assert len(choice.logprobs.tokens) == len(choice.logprobs.token_logprobs) == len(choice.logprobs.top_logprobs)
    assert all(len(top) <= 2 for top in choice.logprobs.top_logprobs)
    streamed = client.completions.create(model="default", prompt="The capital of France is", max_tokens=5,
                                         temperature=0, stream=True)
    assert "".join(c.choices[0].text for c in streamed if c.choices) == choice.text


def test_sse_framing_on_the_wire(server):
    status, headers, body = server.raw("POST", "/v1/chat/completions",
                                       {"messages": ASK, "max_tokens": 5, "temperature": 0, "stream": True})
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    text = body.decode("utf-8")
    assert text.endswith("\n\n")
    events = text[:-2].split("\n\n")
    assert all(e.startswith("data: ") and "\n" not in e for e in events)
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(e[len("data: "):]) for e in events[:-1]]
    assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")


def test_health_and_the_model_routes_outside_v1(server):
    status, _, body = server.raw("GET", "/health", key=None)
    assert status == 200 and json.loads(body)["status"] == "ok"
