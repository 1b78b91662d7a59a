"""The ``/metrics`` reader: vLLM's (V1 and the older names), llama.cpp's and Miaohui's own exposition text; None
for what a server does not report; a live ``engine serve`` read over HTTP; a server with no ``/metrics``.

The texts under ``exposition/`` are written from the documented metric names and the Prometheus text format
(vLLM's "Production Metrics" page: ``vllm:kv_cache_usage_perc``, the older ``vllm:gpu_cache_usage_perc`` and
``vllm:time_per_output_token_seconds``, ``engine``/``model_name`` labels; llama.cpp's server README for
``llama-server --metrics``, whose recent releases no longer report ``llamacpp:kv_cache_usage_ratio``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.events import Message
from engine.inputs import SamplingConfig
from engine.remote import RemoteSession, RemoteSpec, connect, parse_metrics, read_server_metrics
from engine.remote.server_metrics import Histogram, ServerFigures
from tests.helpers.openai_wire import NAN_METRICS, WireServer

TEXTS = Path(__file__).parent / "exposition"
VLLM_MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def read(name: str, model: str | None = None) -> ServerFigures:
    return parse_metrics((TEXTS / name).read_text(encoding="utf-8"), model)


def test_vllm_v1_kv_usage_is_the_mean_of_its_engines_and_histograms_add_up():
    figures = read("vllm_v1.txt", VLLM_MODEL)
    assert figures.kv_cache_usage == pytest.approx(0.375) and figures.kv_cache_metric == "vllm:kv_cache_usage_perc"
    assert figures.ttft == Histogram("vllm:time_to_first_token_seconds", 10.0, pytest.approx(1.0))
    assert figures.ttft.mean == pytest.approx(0.1)
    assert figures.itl is not None and figures.itl.mean == pytest.approx(0.01)
    assert figures.requests_running == 4.0 and figures.requests_waiting == 2.0 and figures.source == "vllm"


def test_another_models_series_are_not_read():
    figures = read("vllm_v1.txt", "some/other-model")
    assert figures.kv_cache_usage is None and figures.ttft is None and figures.requests_running is None


def test_older_vllm_names():
    figures = read("vllm_v0.txt", "Qwen/Qwen2.5-7B-Instruct")
    assert figures.kv_cache_usage == pytest.approx(0.0421) and figures.kv_cache_metric == "vllm:gpu_cache_usage_perc"
    assert figures.ttft is not None and figures.ttft.mean == pytest.approx(0.08)
    assert figures.itl is not None and figures.itl.name == "vllm:time_per_output_token_seconds"
    assert figures.itl.mean == pytest.approx(0.02)


def test_llama_server_reports_kv_usage_but_no_ttft_histogram():
    figures = read("llamacpp.txt", "any-model")  # llama.cpp's series have no model_name label: read whatever
    assert figures.kv_cache_usage == pytest.approx(0.125) and figures.source == "llamacpp"
    assert figures.ttft is None and figures.itl is None
    assert figures.requests_running == 1.0 and figures.requests_waiting == 0.0


def test_what_a_server_does_not_report_is_none():
    figures = read("llamacpp_recent.txt")
    assert figures.kv_cache_usage is None and figures.kv_cache_metric is None and figures.ttft is None
    assert figures.source == "" and figures.requests_running == 0.0
    assert parse_metrics("") == ServerFigures()


def test_since_gives_the_requests_between_two_readings():
    before = ServerFigures(ttft=Histogram("vllm:time_to_first_token_seconds", 10.0, 1.0))
    after = ServerFigures(kv_cache_usage=0.5, ttft=Histogram("vllm:time_to_first_token_seconds", 12.0, 1.5))
    since = after.since(before)
    assert since.ttft == Histogram("vllm:time_to_first_token_seconds", 2.0, 0.5) and since.ttft.mean == 0.25
    assert since.kv_cache_usage == 0.5
    restarted = ServerFigures(ttft=Histogram("vllm:time_to_first_token_seconds", 1.0, 0.2))
    assert restarted.since(before).ttft == restarted.ttft  # counters that went back: a restart, read as they are
    assert after.since(None) == after


def test_a_live_engine_serve_reports_its_kv_usage_and_ttft(server, spec):
    remote = connect(spec)
    before = read_server_metrics(spec, remote.model_id)
    list(RemoteSession(remote).generate([Message("user", "Hi")], SamplingConfig(temperature=0.0, max_new_tokens=4)))
    after = read_server_metrics(spec, remote.model_id)
    assert before is not None and after is not None and after.source == "miaohui"
    assert after.kv_cache_metric == "miaohui:kv_cache_usage_perc" and 0.0 < after.kv_cache_usage <= 1.0
    since = after.since(before)
    assert since.ttft is not None and since.ttft.count == 1 and 0 < since.ttft.mean < 60


def test_a_server_without_metrics_reads_as_none():
    with WireServer() as wire:
        assert read_server_metrics(RemoteSpec(wire.url, "m")) is None  # 404, as Ollama and LM Studio answer
    assert read_server_metrics(RemoteSpec(wire.url, "m"), timeout_s=1.0) is None  # and a server that is gone


def test_nan_and_infinite_figures_are_unknown():
    # Issue 31 (defect 6): the Prometheus text format allows NaN and ±Inf anywhere; the panel crashed on them.
    figures = parse_metrics(NAN_METRICS)
    assert figures == ServerFigures()  # every figure unknown, none a NaN or an infinity
    with WireServer("nan-metrics") as wire:
        assert read_server_metrics(RemoteSpec(wire.url, "m")) == ServerFigures()
    mixed = NAN_METRICS.replace("miaohui:kv_cache_usage_perc NaN", 'miaohui:kv_cache_usage_perc{engine="0"} 0.5\n'
                                                                  'miaohui:kv_cache_usage_perc{engine="1"} NaN')
    assert parse_metrics(mixed).kv_cache_usage is None  # one NaN series: the mean is not known either
    negative = "miaohui:time_to_first_token_seconds_count -3\nmiaohui:time_to_first_token_seconds_sum 1\n"
    assert parse_metrics("# TYPE miaohui:time_to_first_token_seconds histogram\n" + negative).ttft is None
