"""``GET /metrics``: Prometheus text with vLLM's metric names under ``miaohui:``, moving with each request."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from tests.engine.serve.conftest import wait_until

HISTOGRAMS = ("time_to_first_token_seconds", "inter_token_latency_seconds", "e2e_request_latency_seconds",
              "request_queue_time_seconds")
COUNTERS = ("prompt_tokens", "generation_tokens", "prefix_cache_queries", "prefix_cache_hits", "request_success")
GAUGES = ("kv_cache_usage_perc", "kv_cache_bytes", "num_requests_running", "num_requests_waiting")


def _scrape(server) -> dict[str, float]:
    """Every sample as ``name{labels}`` -> value, with the types checked."""
    status, headers, body = server.raw("GET", "/metrics", key=None)
    assert status == 200 and headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(body.decode("utf-8"))}
    for name in HISTOGRAMS:
        assert families["miaohui:" + name].type == "histogram"
    for name in COUNTERS:
        assert families["miaohui:" + name].type == "counter"
    for name in GAUGES:
        assert families["miaohui:" + name].type == "gauge"
    samples = {}
    for family in families.values():
        for sample in family.samples:
            labels = {k: v for k, v in sample.labels.items() if k not in ("model_name", "le")}
            if sample.name.startswith("miaohui:"):
                assert sample.labels["model_name"] == server.worker.model_id
            if "le" in sample.labels:
                continue
            suffix = "".join(f"{{{k}={v}}}" for k, v in sorted(labels.items()))
            samples[sample.name + suffix] = sample.value
    return samples


def test_metrics_move_with_a_request(server):
    before = _scrape(server)
    messages = [{"role": "system", "content": "Metrics."}, {"role": "user", "content": "Count the tokens."}]
    client = server.client()
    reply = client.chat.completions.create(model="default", messages=messages, max_tokens=6, temperature=0)
    again = client.chat.completions.create(model="default", messages=messages, max_tokens=6, temperature=0)
    done = before.get("miaohui:e2e_request_latency_seconds_count", 0) + 2
    wait_until(lambda: _scrape(server)["miaohui:e2e_request_latency_seconds_count"] == done, "the requests' records")
    after = _scrape(server)

    def grew(name: str) -> float:
        return after[name] - before.get(name, 0.0)

    usages = (reply.usage, again.usage)
    assert grew("miaohui:prompt_tokens_total") == sum(u.prompt_tokens for u in usages)
    assert grew("miaohui:generation_tokens_total") == sum(u.completion_tokens for u in usages)
    assert grew("miaohui:prefix_cache_queries_total") == sum(u.prompt_tokens for u in usages)
    assert grew("miaohui:prefix_cache_hits_total") == again.usage.prompt_tokens_details.cached_tokens > 0
    assert grew("miaohui:time_to_first_token_seconds_count") == 2
    assert grew("miaohui:inter_token_latency_seconds_count") == sum(u.completion_tokens - 1 for u in usages)
    assert grew("miaohui:request_queue_time_seconds_count") == 2
    reasons = [reply.choices[0].finish_reason, again.choices[0].finish_reason]
    assert sum(grew(f"miaohui:request_success_total{{finished_reason={r}}}") for r in set(reasons)) == 2
    assert after["miaohui:num_requests_running"] == 0 and after["miaohui:num_requests_waiting"] == 0
    assert after["miaohui:kv_cache_bytes"] > 0
    assert 0 < after["miaohui:kv_cache_usage_perc"] <= 1
    # What the engine holds in memory (engine.core.models): engine serve's one model, its weights' bytes.
    assert after["miaohui:model_memory_bytes{kind=chat}"] == server.worker.loaded.facts.weights_bytes > 0


def test_the_form_of_an_int4_models_prompt_products_is_a_metric(tiny_model_dir, home, monkeypatch):
    """``miaohui:prefill_form_info{form}``: the form engine/executor/prefill_forms.py chose (fixed here by its env
    variable, so nothing hangs on timing); no series for a model without tiled weights (the fp32 ``server``)."""
    from engine.executor import prefill_forms
    from engine.executor.runners import make_runner
    from engine.inputs import LoadSpec
    from engine.models.loader import load_model
    from engine.serve.worker import Worker

    monkeypatch.setenv(prefill_forms.PREFILL_FORM_ENV, "dense")
    loaded = load_model(LoadSpec(model=str(tiny_model_dir), precision="int4", device="cpu"))
    worker = Worker(loaded)
    make_runner(loaded)  # a runner's prompt forms are the model's, made with it
    assert worker.metrics.prefill_form() == "dense"
    families = {f.name: f for f in text_string_to_metric_families(worker.metrics.render().decode("utf-8"))}
    (sample,) = families["miaohui:prefill_form_info"].samples
    assert sample.labels == {"model_name": worker.model_id, "form": "dense"} and sample.value == 1.0
    worker.close()
    fp32 = Worker(load_model(LoadSpec(model=str(tiny_model_dir), precision="fp32", device="cpu")))
    make_runner(fp32.loaded)
    assert fp32.metrics.prefill_form() is None and b"prefill_form_info{" not in fp32.metrics.render()
    fp32.close()
