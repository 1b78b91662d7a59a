"""What a server says about itself on ``GET /metrics`` (Prometheus text), read with ``prometheus_client.parser``.

``parse_metrics(text)`` -> ``ServerFigures``; ``read_server_metrics(spec)`` fetches and parses, and returns None when
the server has no ``/metrics`` (Ollama, LM Studio, a ``llama-server`` started without ``--metrics``). A figure the
server does not report is None, never a guess, and so is one it reports as no number a panel can show (NaN, ±Inf,
a negative count: the Prometheus text format allows them all). The names read, first found wins:

- KV-cache usage, a fraction 0..1 (vLLM's "perc" is a fraction too): ``vllm:kv_cache_usage_perc`` (vLLM V1),
  ``vllm:gpu_cache_usage_perc`` (older vLLM), ``llamacpp:kv_cache_usage_ratio`` (``llama-server --metrics``;
  dropped by recent releases), ``miaohui:kv_cache_usage_perc`` (``python -m engine serve``). Several series (vLLM's
  data-parallel engines) are averaged.
- The server's own time to first token and inter-token latency histograms: ``vllm:`` / ``miaohui:``
  ``time_to_first_token_seconds`` and ``inter_token_latency_seconds`` (older vLLM: ``time_per_output_token_seconds``,
  the same gaps). Their count and sum over every series; ``ServerFigures.since(before)`` gives those of the
  requests served between two readings — with one client, exactly this client's last reply, as the server timed it.
- Requests running and waiting: ``vllm:`` / ``miaohui:`` ``num_requests_running``/``num_requests_waiting``,
  ``llamacpp:requests_processing``/``requests_deferred``.

With a ``model_name`` label on a series (vLLM, Miaohui), only the served model's series are read.
"""

from __future__ import annotations

import math
import urllib.error
import urllib.request
from dataclasses import dataclass, replace
from typing import Any, Iterable

from engine.remote.spec import RemoteSpec

# miaohui: first: `engine serve` also exports vLLM's name for vLLM's dashboards, and the panel's "(source)" should
# still say whose server it is; vLLM and llama-server export no miaohui: series.
KV_USAGE = ("miaohui:kv_cache_usage_perc", "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc",
            "llamacpp:kv_cache_usage_ratio")
TTFT = ("vllm:time_to_first_token_seconds", "miaohui:time_to_first_token_seconds")
ITL = ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds", "miaohui:inter_token_latency_seconds")
RUNNING = ("vllm:num_requests_running", "miaohui:num_requests_running", "llamacpp:requests_processing")
WAITING = ("vllm:num_requests_waiting", "miaohui:num_requests_waiting", "llamacpp:requests_deferred")
READ_TIMEOUT_S = 3.0  # a reading for the panel: a server too slow to answer it is "not reported" this time
MAX_BYTES = 8 << 20  # vLLM's exposition is a few hundred KiB with every bucket; more is not a metrics page


@dataclass(frozen=True)
class Histogram:
    """A Prometheus histogram's totals: how many observations and their sum (seconds)."""

    name: str
    count: float
    sum: float

    @property
    def mean(self) -> float | None:
        return self.sum / self.count if self.count > 0 else None

    def minus(self, before: Histogram | None) -> Histogram:
        if before is None or before.name != self.name or before.count > self.count:
            return self  # a restarted server: its counters started over
        return Histogram(self.name, self.count - before.count, self.sum - before.sum)


@dataclass(frozen=True)
class ServerFigures:
    """One reading of a server's ``/metrics``; each figure None when the server does not report it."""

    kv_cache_usage: float | None = None  # 0..1
    kv_cache_metric: str | None = None  # the series it came from
    ttft: Histogram | None = None
    itl: Histogram | None = None
    requests_running: float | None = None
    requests_waiting: float | None = None

    @property
    def source(self) -> str:
        """Whose names the server uses (``vllm``, ``llamacpp``, ``miaohui``), "" when none of the read ones."""
        for name in (self.kv_cache_metric, self.ttft and self.ttft.name, self.itl and self.itl.name):
            if name:
                return name.split(":", 1)[0]
        return ""

    def since(self, before: ServerFigures | None) -> ServerFigures:
        """This reading with its histograms reduced to the requests served since ``before``."""
        return replace(self, ttft=self.ttft.minus(before.ttft if before else None) if self.ttft else None,
                       itl=self.itl.minus(before.itl if before else None) if self.itl else None)


def _series(families: dict[str, Any], names: Iterable[str], model: str | None) -> tuple[str, list[Any]] | None:
    for name in names:
        family = families.get(name)
        if family is None:
            continue
        samples = [s for s in family.samples
                   if model is None or "model_name" not in s.labels or s.labels["model_name"] == model]
        if samples:
            return name, samples
    return None


def _gauge(families: dict[str, Any], names: Iterable[str], model: str | None,
           mean: bool = False) -> tuple[float | None, str | None]:
    found = _series(families, names, model)
    if found is None:
        return None, None
    name, samples = found
    values = [float(s.value) for s in samples if s.name == name]
    if not values or not all(math.isfinite(value) for value in values):
        return None, None  # a NaN or an infinity among them: the figure is not known, whatever the others say
    return (sum(values) / len(values) if mean else sum(values)), name


def _histogram(families: dict[str, Any], names: Iterable[str], model: str | None) -> Histogram | None:
    found = _series(families, names, model)
    if found is None:
        return None
    name, samples = found
    count = sum(float(s.value) for s in samples if s.name == name + "_count")
    total = sum(float(s.value) for s in samples if s.name == name + "_sum")
    if not (math.isfinite(count) and math.isfinite(total)) or count < 0:
        return None  # not a histogram's totals: unknown
    return Histogram(name, count, total)


def parse_metrics(text: str, model: str | None = None) -> ServerFigures:
    """Read a Prometheus text exposition; ``model``: keep only series whose ``model_name`` label is it.

    ``ValueError`` when the text is not Prometheus text at all."""
    from prometheus_client.parser import text_string_to_metric_families

    families: dict[str, Any] = {}
    for family in text_string_to_metric_families(text):
        families[family.name] = family
    usage, usage_name = _gauge(families, KV_USAGE, model, mean=True)
    if usage is not None:
        usage = min(1.0, max(0.0, usage))
    running, _ = _gauge(families, RUNNING, model)
    waiting, _ = _gauge(families, WAITING, model)
    return ServerFigures(kv_cache_usage=usage, kv_cache_metric=usage_name, ttft=_histogram(families, TTFT, model),
                         itl=_histogram(families, ITL, model), requests_running=running, requests_waiting=waiting)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is not followed: it would carry the API key to wherever it points."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def read_server_metrics(spec: RemoteSpec, model: str | None = None,
                        timeout_s: float = READ_TIMEOUT_S) -> ServerFigures | None:
    """Fetch and read ``spec``'s ``/metrics``; None when it has none or cannot be read now (never raises for that)."""
    request = urllib.request.Request(spec.root + "/metrics", headers={"Accept": "text/plain"})
    if spec.api_key:
        request.add_header("Authorization", f"Bearer {spec.api_key}")
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(request, timeout=timeout_s) as response:
            body = response.read(MAX_BYTES + 1)
        if len(body) > MAX_BYTES:
            return None
        return parse_metrics(body.decode("utf-8", "replace"), model)
    except (OSError, ValueError, urllib.error.URLError):
        return None  # no /metrics (404, 501), refused, timed out, not Prometheus text: "not reported"
