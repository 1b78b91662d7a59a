"""``engine serve`` runs through the engine core (issue 42): ``engine.serve.hosting.CoreHost`` on the tiny model, a real
HTTP server on an ephemeral port and the official ``openai`` client. The core's shelf holds the one model, each request
passes through the core's own queue (``engine.core.engine_thread``), an embedder that does not fit beside the
server's chat model is refused rather than unloading it, and a model that cannot load is one typed error."""

from __future__ import annotations

import http.client

import openai
import pytest

from engine.core.models import ModelBudgetError, ModelRecord
from engine.inputs import LoadSpec
from engine.serve.app import create_app
from engine.serve.hosting import CoreHost, LoadFailedError
from engine.serve.server import BackgroundServer
from tests.engine.serve.conftest import wait_until

LIVENESS_S = 60  # only a guard against a hung server, never a measurement


def _hosted(tiny_model_dir, **options):
    host = CoreHost(LoadSpec(model=str(tiny_model_dir), precision="fp32", device="cpu"), **options)
    assert host.worker is not None
    server = BackgroundServer(create_app(host.worker, api_key=None, embeddings=host.embeddings)).start()
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=LIVENESS_S)
    return host, server, client


@pytest.mark.parametrize("parallel", [1, 2])
def test_engine_serve_hosts_its_model_on_the_core_and_requests_pass_through_its_queue(tiny_model_dir, home, parallel):
    host, server, client = _hosted(tiny_model_dir, parallel=parallel)
    try:
        facts = host.core.loaded.facts
        assert host.core.models() == (ModelRecord(facts.name, "chat", facts.weights_bytes),)  # one model in memory
        assert host.worker.loaded is host.core.loaded  # the queue serves the core's model, not a copy
        before = host.thread.jobs_run
        reply = client.chat.completions.create(model="default", messages=[{"role": "user", "content": "Hi"}],
                                               max_tokens=3, temperature=0)
        assert reply.choices[0].finish_reason in ("stop", "length")
        # parallel 1: the whole request is one job on the core's thread; batched: each step is one. The reply can
        # reach the client before its job has returned and been counted (the count follows the job's end): wait.
        wait_until(lambda: host.thread.jobs_run > before, "the request's job counted on the core's thread")
        conn = http.client.HTTPConnection(server.host, server.port, timeout=LIVENESS_S)
        conn.request("GET", "/metrics")
        metrics = conn.getresponse().read().decode()
        conn.close()
        assert f'miaohui:model_memory_bytes{{kind="chat",model_name="{facts.name}"}} {float(facts.weights_bytes)}' \
            in metrics
    finally:
        server.stop()
        host.close()
    assert host.core.loaded is None and host.core.models() == ()


def test_an_embedder_past_the_budget_is_refused_and_the_servers_chat_model_stays(tiny_model_dir, home):
    host, server, client = _hosted(tiny_model_dir, parallel=1, budget_bytes=1 << 20)
    try:
        chat = host.core.loaded
        with pytest.raises(ModelBudgetError, match="does not fit beside the chat model"):
            host.thread.call(lambda: host.core.hold("embedding", "big", object(), 4 << 20))
        assert host.core.loaded is chat and [r.kind for r in host.core.models()] == ["chat"]
        reply = client.chat.completions.create(model="default", messages=[{"role": "user", "content": "Hi"}],
                                               max_tokens=2, temperature=0)
        assert reply.choices[0].finish_reason in ("stop", "length")
    finally:
        server.stop()
        host.close()


def test_a_model_that_cannot_load_is_one_typed_error(tmp_path, home):
    with pytest.raises(LoadFailedError) as caught:
        CoreHost(LoadSpec(model=str(tmp_path / "missing"), device="cpu"))
    assert "\n" not in str(caught.value) and str(caught.value)
