"""Prefix sharing across sessions and KV persistence across restarts, through a real ``engine serve`` (the tiny
model, uvicorn on an ephemeral port) and the official ``openai`` client: ``usage.prompt_tokens_details.cached_tokens``
and vLLM's ``/metrics`` counters report the reuse; a reply built on shared, copied or reloaded rows equals one computed
from scratch."""

from __future__ import annotations

import re

import openai

import pytest

from engine.executor.kv_blocks import BLOCK
from engine.generate.kv_store import KVStore
from engine.generate.session import ChatSession
from engine.events import Finished, Message
from engine.inputs import SamplingConfig
from engine.serve.app import create_app
from engine.serve.server import BackgroundServer
from engine.serve.worker import Worker
from tests.engine.serve.conftest import KEY, Served

SYSTEM = ("You are Miaohui, a careful assistant. Answer briefly, in plain words, and say so when you do not know. "
          "The KV cache stores keys and values so decode does not recompute them.")
TOKENS = 8


def start(loaded, **options):
    worker = Worker(loaded, **options).start()
    http = BackgroundServer(create_app(worker, api_key=KEY)).start()
    served = Served(http.url, worker, http.port, KEY)

    def stop():
        http.stop()
        worker.close()

    return served, stop


def ask(served: Served, messages: list[dict]):
    response = served.client().chat.completions.create(model=served.worker.model_id, messages=messages, temperature=0,
                                                       max_tokens=TOKENS)
    return response.choices[0].message.content, response.usage.prompt_tokens_details.cached_tokens, response.usage


def from_scratch(loaded, messages: list[dict]) -> str:
    """The reply a fresh session computes for ``messages``, nothing reused."""
    config = SamplingConfig(temperature=0.0, max_new_tokens=TOKENS)
    events = list(ChatSession(loaded).generate([Message(m["role"], m["content"]) for m in messages], config))
    assert isinstance(events[-1], Finished)
    return events[-1].text


def n_tokens(loaded, messages: list[dict]) -> int:
    """Tokens of ``messages`` as the chat template renders them (no generation prompt)."""
    text = loaded.tokenizer.apply_chat_template(messages, tokenize=False)
    return len(loaded.tokenizer(text, add_special_tokens=False)["input_ids"])


def counter(served: Served, name: str) -> float:
    status, _, body = served.raw("GET", "/metrics", key=None)
    assert status == 200
    match = re.search(rf"^{re.escape(name)}\{{[^}}]*\}} ([0-9.e+]+)$", body.decode(), re.M)
    assert match, f"{name} missing from /metrics"
    return float(match.group(1))


@pytest.fixture
def served(tiny_loaded):
    served, stop = start(tiny_loaded, sessions=4)
    yield served
    stop()


def test_a_shared_system_prompt_is_read_in_place_from_the_block_pool_not_recomputed(served, tiny_loaded):
    first = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is a KV cache?"}]
    second = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Why is decode memory bound?"}]
    _, cached_first, usage_first = ask(served, first)
    assert cached_first == 0
    text, cached, usage = ask(served, second)
    system_tokens = n_tokens(tiny_loaded, [{"role": "system", "content": SYSTEM}])
    # the system turn's whole 16-token blocks, not the question
    assert cached % BLOCK == 0 and system_tokens - BLOCK - 2 < cached < usage.prompt_tokens
    assert text == from_scratch(tiny_loaded, second)
    assert counter(served, "vllm:prefix_cache_hits_total") == cached
    assert counter(served, "vllm:prefix_cache_queries_total") == usage_first.prompt_tokens + usage.prompt_tokens
    assert counter(served, "miaohui:prefix_cache_shared_tokens_total") == cached
    # copy-free: the second session reads the pool's rows in place, its own cache holds only what follows them
    (runner,) = [s.session.kv_runner() for s in served.worker._pool.slots if s.session.kv_runner()._kv.base]
    assert runner._kv.base == cached and runner.kv_bytes()[0] == runner._kv.bytes_per_position * (
        runner.cached_len - cached)
    pool = served.worker.prefix.blocks
    assert pool.referenced_blocks == cached // BLOCK  # held by that session while it keeps the conversation
    assert counter(served, "miaohui:kv_cache_blocks_used") == pool.used_blocks >= cached // BLOCK
    assert counter(served, "miaohui:kv_cache_blocks_free") == pool.capacity - pool.used_blocks
    status, _, body = served.raw("GET", "/metrics", key=None)
    assert f'block_size="{BLOCK}"' in body.decode() and f'num_gpu_blocks="{pool.capacity}"' in body.decode()


def test_without_a_block_pool_the_prefix_is_copied_from_another_session(tiny_loaded):
    served, stop = start(tiny_loaded, sessions=4, prefix_cache_bytes=0)
    try:
        first = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is a KV cache?"}]
        second = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Why is decode memory bound?"}]
        ask(served, first)
        text, cached, usage = ask(served, second)
        system_tokens = n_tokens(tiny_loaded, [{"role": "system", "content": SYSTEM}])
        assert system_tokens - 2 <= cached < usage.prompt_tokens  # row copies: token for token
        assert text == from_scratch(tiny_loaded, second)
        assert served.worker.prefix.blocks is None
    finally:
        stop()


def test_prefix_cache_counters_use_vllms_names(served):
    ask(served, [{"role": "user", "content": "Hello there"}])
    ask(served, [{"role": "user", "content": "Hello there"}, {"role": "assistant", "content": "Hi"},
                 {"role": "user", "content": "Again"}])
    queries = counter(served, "vllm:prefix_cache_queries_total")
    hits = counter(served, "vllm:prefix_cache_hits_total")
    assert queries == counter(served, "miaohui:prefix_cache_queries_total") > hits > 0
    assert 0 < counter(served, "vllm:kv_cache_usage_perc") <= 1


def test_a_conversation_reopened_after_a_restart_reuses_its_saved_cache(tiny_loaded, tmp_path):
    store_dir = tmp_path / "kv"
    turn1 = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is a KV cache?"}]
    served, stop = start(tiny_loaded, kv_store=KVStore(store_dir))
    try:
        reply, _, _ = ask(served, turn1)
    finally:
        stop()  # closing the server saves what its sessions hold
    assert len(KVStore(store_dir).entries()) == 1
    turn2 = [*turn1, {"role": "assistant", "content": reply}, {"role": "user", "content": "And a prefill?"}]
    served, stop = start(tiny_loaded, kv_store=KVStore(store_dir))
    try:
        text, cached, usage = ask(served, turn2)
        assert counter(served, "miaohui:kv_store_loaded_tokens_total") >= cached
    finally:
        stop()
    assert cached > n_tokens(tiny_loaded, turn1) - 4
    assert text == from_scratch(tiny_loaded, turn2)


def test_a_damaged_saved_cache_is_discarded_and_the_reply_recomputed(tiny_loaded, tmp_path):
    store_dir = tmp_path / "kv"
    turn1 = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is a KV cache?"}]
    served, stop = start(tiny_loaded, kv_store=KVStore(store_dir))
    try:
        reply, _, _ = ask(served, turn1)
    finally:
        stop()
    (entry,) = KVStore(store_dir).entries()
    data = bytearray(entry.path.read_bytes())
    data[-100] ^= 0x40
    entry.path.write_bytes(bytes(data))
    turn2 = [*turn1, {"role": "assistant", "content": reply}, {"role": "user", "content": "And a prefill?"}]
    served, stop = start(tiny_loaded, kv_store=KVStore(store_dir))
    try:
        text, cached, _ = ask(served, turn2)
        assert counter(served, "miaohui:kv_store_discarded_total") == 1
    finally:
        stop()
    assert cached == 0
    assert text == from_scratch(tiny_loaded, turn2)
    assert all(e.path != entry.path or e.bytes != len(data) for e in KVStore(store_dir).entries())


def _serve_process(model_dir, store_dir, key=None):
    """``python -m engine serve --kv-store`` in a process of its own (with ``key`` as its API key); (process, URL)."""
    import os
    import queue
    import subprocess
    import sys
    import threading
    from pathlib import Path

    env = {k: v for k, v in os.environ.items() if k != "MIAOHUI_API_KEY"}
    if key is not None:
        env["MIAOHUI_API_KEY"] = key
    proc = subprocess.Popen([sys.executable, "-m", "engine", "serve", "--model", str(model_dir), "--precision", "fp32",
                             "--device", "cpu", "--port", "0", "--kv-store", str(store_dir)],
                            cwd=Path(__file__).resolve().parents[3], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stderr], daemon=True).start()
    while True:
        found = re.search(r"serving .* at (http://127\.0\.0\.1:\d+/v1)", lines.get(timeout=120))
        if found:
            return proc, found.group(1)


def _stop(proc) -> None:
    import signal

    proc.send_signal(signal.SIGINT)
    try:
        assert proc.wait(timeout=60) in (0, 130)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_engine_serve_kv_store_survives_a_real_restart(tiny_model_dir, tiny_loaded, tmp_path):
    """With an API key: the key is the cache's scope, and it outlives a restart (a key-less server's scope is a
    connection, which does not: issue 40, item 6)."""
    import openai

    store_dir = tmp_path / "kv"
    turn1 = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is a KV cache?"}]

    def chat(url, messages):
        client = openai.OpenAI(base_url=url, api_key=KEY, max_retries=0, timeout=60)
        response = client.chat.completions.create(model="default", messages=messages, temperature=0, max_tokens=TOKENS)
        return response.choices[0].message.content, response.usage.prompt_tokens_details.cached_tokens

    proc, url = _serve_process(tiny_model_dir, store_dir, KEY)
    try:
        reply, _ = chat(url, turn1)
    finally:
        _stop(proc)
    assert [e.path.suffix for e in KVStore(store_dir).entries()] == [".kv"]
    turn2 = [*turn1, {"role": "assistant", "content": reply}, {"role": "user", "content": "And a prefill?"}]
    proc, url = _serve_process(tiny_model_dir, store_dir, KEY)
    try:
        text, cached = chat(url, turn2)
    finally:
        _stop(proc)
    assert cached > n_tokens(tiny_loaded, turn1) - 4
    assert text == from_scratch(tiny_loaded, turn2)


def test_an_8_bit_kv_cache_is_shared_by_copy_and_kept_across_a_restart(tiny_model_dir, tmp_path):
    from engine.inputs import LoadSpec
    from engine.models.loader import load_model

    loaded = load_model(LoadSpec(model=str(tiny_model_dir), precision="fp32", device="cpu", kv_precision="int8"))
    store_dir = tmp_path / "kv8"
    first = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is a KV cache?"}]
    second = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Why is decode memory bound?"}]
    served, stop = start(loaded, sessions=4, kv_store=KVStore(store_dir))
    try:
        reply, _, _ = ask(served, first)
        text, cached, _ = ask(served, second)
        assert cached >= n_tokens(loaded, [{"role": "system", "content": SYSTEM}]) - 2  # rows copied, no pool
        assert served.worker.prefix.blocks is None and text == from_scratch(loaded, second)
    finally:
        stop()  # the 8-bit caches are saved as they are
    assert KVStore(store_dir).entries()
    turn2 = [*first, {"role": "assistant", "content": reply}, {"role": "user", "content": "And a prefill?"}]
    served, stop = start(loaded, kv_store=KVStore(store_dir))
    try:
        text, cached, _ = ask(served, turn2)
        assert counter(served, "miaohui:kv_store_loaded_tokens_total") >= cached > n_tokens(loaded, first) - 4
        assert counter(served, "miaohui:kv_store_discarded_total") == 0
    finally:
        stop()
    assert text == from_scratch(loaded, turn2)


def test_a_hostile_saved_cache_never_fails_a_request(tiny_loaded, tmp_path):
    """Issue 40, item 4: a ``.kv`` whose header nests JSON 100,000 deep made every request a 500."""
    from tests.engine.generate.test_kv_store import hostile_file

    store_dir = tmp_path / "kv"
    hostile_file(store_dir)
    served, stop = start(tiny_loaded, kv_store=KVStore(store_dir))
    try:
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is a KV cache?"}]
        for _ in range(2):
            text, _, _ = ask(served, messages)
            assert text == from_scratch(tiny_loaded, messages)
    finally:
        stop()


def _ask_as(client, model: str, messages: list[dict]) -> int:
    response = client.chat.completions.create(model=model, messages=messages, temperature=0, max_tokens=TOKENS)
    return response.usage.prompt_tokens_details.cached_tokens


@pytest.mark.parametrize("sessions", [4, 1], ids=["a-slot-each", "one-shared-slot"])
def test_cached_tokens_tell_a_client_nothing_about_another_clients_prompt(tiny_loaded, sessions):
    """Issue 40, item 6: on a key-less server (the window's), client B learned from ``cached_tokens`` whether its guess
    of client A's prompt was right. Now each connection reuses only its own rows."""
    worker = Worker(tiny_loaded, sessions=sessions).start()
    http = BackgroundServer(create_app(worker)).start()  # no API key
    served = Served(http.url, worker, http.port, None)
    try:
        secret = [{"role": "system", "content": SYSTEM},
                  {"role": "user", "content": "My bank PIN is 4921 and my mother's maiden name is Okafor."}]
        wrong = [secret[0], {"role": "user", "content": "My bank PIN is 1111 and my mother's maiden name is Smith."}]
        alice, bob, carol = served.client(), served.client(), served.client()  # three clients: a connection each
        model = worker.model_id
        _ask_as(alice, model, secret)
        hers = _ask_as(alice, model, secret)
        assert hers > BLOCK  # her own repeat is cached: the cache still works for her
        assert _ask_as(bob, model, secret) == 0  # a right guess finds nothing of hers
        assert _ask_as(carol, model, wrong) == 0
        assert _ask_as(carol, model, secret) < hers  # only what her own wrong guess shares with it
    finally:
        http.stop()
        worker.close()


def test_a_prompt_cache_key_keeps_a_clients_reuse_across_connections_and_private(tiny_loaded):
    """On a key-less server a client's reuse used to end with its connection (uvicorn closes an idle one after 5 s, so
    a person's next turn came in cold). OpenAI's ``prompt_cache_key``, a client's own secret, is its scope instead:
    a new connection with the same key reuses its rows, and a client without it still finds nothing."""
    worker = Worker(tiny_loaded, sessions=2).start()
    http = BackgroundServer(create_app(worker)).start()  # no API key
    served = Served(http.url, worker, http.port, None)
    try:
        secret = [{"role": "system", "content": SYSTEM},
                  {"role": "user", "content": "My bank PIN is 4921 and my mother's maiden name is Okafor."}]
        key = {"prompt_cache_key": "a7Kq0v1s9-mine-and-nobody-elses"}
        model = worker.model_id

        def ask(client, extra):
            response = client.chat.completions.create(model=model, messages=secret, temperature=0, max_tokens=TOKENS,
                                                      extra_body=extra)
            return response.usage.prompt_tokens_details.cached_tokens

        assert ask(served.client(), key) == 0
        assert ask(served.client(), key) > BLOCK  # another connection, the same key: reused
        assert ask(served.client(), {}) == 0  # no key: this connection's own scope, nothing of the keyed client's
        assert ask(served.client(), {"prompt_cache_key": "a-different-sixteen+"}) == 0
        with pytest.raises(openai.BadRequestError, match="prompt_cache_key"):
            ask(served.client(), {"prompt_cache_key": "1234"})  # guessable: refused
    finally:
        http.stop()
        worker.close()
