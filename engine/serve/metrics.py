"""Prometheus metrics of the server, under vLLM's names with a ``miaohui:`` prefix so dashboards carry over.

Each ``ServerMetrics`` has its own ``CollectorRegistry`` (never the process-global one), so two servers in
one process (tests, the window) do not collide, and ``render()`` is the ``GET /metrics`` body. Every
series carries vLLM's ``model_name`` label. The names and what they mean:

- ``miaohui:time_to_first_token_seconds`` (histogram): arrival of the request -> its first token, queue wait
  included, as vLLM measures it; ``miaohui:inter_token_latency_seconds``: each gap between consecutive
  tokens; ``miaohui:e2e_request_latency_seconds``: arrival -> the last token; ``miaohui:request_queue_time_seconds``:
  arrival -> the worker takes it.
- ``miaohui:prompt_tokens_total`` / ``miaohui:generation_tokens_total`` (counters): prompt tokens of every
  request (reused ones included, as vLLM counts them) and generated tokens (end token included);
  ``miaohui:prefix_cache_queries_total`` / ``miaohui:prefix_cache_hits_total``: prompt tokens looked up in,
  and found in, a KV cache kept from an earlier request (the same two under vLLM v1's names too,
  ``vllm:prefix_cache_queries`` / ``vllm:prefix_cache_hits``, counted in tokens as vLLM counts them);
  ``miaohui:prefix_cache_shared_tokens_total``: of the hits, those copied from another conversation's cache (a
  shared system prompt, ``engine.serve.prefix``); ``miaohui:kv_store_loaded_tokens_total`` /
  ``miaohui:kv_store_discarded_total`` / ``miaohui:kv_store_bytes``: with ``--kv-store``, hits read from a saved
  cache, saved caches deleted as stale or damaged, and the folder's size; ``miaohui:request_success_total{finished_reason}``.
- ``miaohui:num_requests_running`` / ``miaohui:num_requests_waiting`` (gauges): requests being generated (at
  most ``--parallel`` of them) and the queue behind them; the same two under vLLM's own names too,
  ``vllm:num_requests_running`` / ``vllm:num_requests_waiting``, which vLLM's dashboards and autoscalers read.
- ``miaohui:parallel_slots`` (gauge): how many requests may be generated at once: ``--parallel``, or 1 when the
  model cannot be batched (its runner is not the fast path's) and requests are served one at a time.
- ``miaohui:kv_cache_bytes`` (gauge): measured bytes of the filled KV caches the server holds (every kept
  session); ``miaohui:kv_cache_usage_perc``: those bytes over the most the sessions can hold (each at the
  model's full context), 0..1 - vLLM's "fraction of the KV cache in use", also as ``vllm:kv_cache_usage_perc``.
- ``miaohui:kv_cache_blocks_used`` / ``miaohui:kv_cache_blocks_free`` (gauges): blocks of 16 positions held / still
  free in the shared-prefix pool (``engine.executor.kv_blocks``; held includes unreferenced blocks kept as a cache,
  evicted when room is needed), and ``vllm:cache_config_info`` with vLLM's ``block_size`` and ``num_gpu_blocks``
  labels (the pool's size in blocks; "gpu" is vLLM's word for the device that holds them).
- ``vllm:spec_decode_num_drafts`` / ``vllm:spec_decode_num_draft_tokens`` / ``vllm:spec_decode_num_accepted_tokens``
  (counters, exposed with ``_total``; ``miaohui:`` copies too), vLLM v1's names: decode steps that had a draft,
  tokens drafted, drafted tokens the model accepted, summed over each request's ``Metrics`` when it ends
  (``engine serve --speculative``; 0 without). Acceptance rate = accepted / draft tokens, as vLLM's dashboards
  compute it. vLLM's per-position counter is left out: a request's ``Metrics`` does not count by position.
- ``miaohui:prefill_form_info{model_name,form}`` (gauge, 1): the form an int4/int8 model's prompt products take on
  this machine, ``kernel`` or ``dense``, as measured (engine/executor/prefill_forms.py); no series before a prompt long
  enough chose one, or for a model without tiled weights. The two forms round differently, so two servers that chose
  differently may give different greedy replies to the same prompt.
- ``miaohui:model_memory_bytes{model_name,kind}`` (gauge): each model the engine holds in memory and its weights' bytes
  (``engine.core.models.ModelRecord``): the served model under ``engine serve``; in the window, its core's (the chat
  model, an embedder beside it).

Thread-safe (prometheus_client's own locks): the worker thread records, the HTTP side renders.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Iterable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

PREFIX = "miaohui:"
VLLM_PREFIX = "vllm:"
# vLLM's buckets; inter-token latency gains 1 ms and 5 ms steps (a small model decodes in a few ms a token).
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
               7.5, 10.0, 20.0, 40.0, 80.0)
REQUEST_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
                   240.0, 480.0, 960.0, 1920.0, 7680.0)
CONTENT_TYPE = CONTENT_TYPE_LATEST


class ServerMetrics:
    """The server's series for one model; ``kv_capacity_bytes`` is what 100% KV usage means."""

    def __init__(self, model_name: str, kv_capacity_bytes: int) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.kv_capacity_bytes = max(0, int(kv_capacity_bytes))
        label = ("model_name",)

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(PREFIX + name, doc, label, buckets=buckets, registry=self.registry).labels(model_name)

        def counter(name: str, doc: str) -> Counter:
            return Counter(PREFIX + name, doc, label, registry=self.registry).labels(model_name)

        def gauge(name: str, doc: str, prefix: str = PREFIX) -> Gauge:
            return Gauge(prefix + name, doc, label, registry=self.registry).labels(model_name)

        self.ttft = histogram("time_to_first_token_seconds", "Time to first token (queue included)", TTFT_BUCKETS)
        self.itl = histogram("inter_token_latency_seconds", "Time between consecutive tokens", ITL_BUCKETS)
        self.e2e = histogram("e2e_request_latency_seconds", "Arrival to last token", REQUEST_BUCKETS)
        self.queue_time = histogram("request_queue_time_seconds", "Time waiting in the queue", REQUEST_BUCKETS)
        self.prompt_tokens = counter("prompt_tokens_total", "Prompt tokens of all requests")
        self.generation_tokens = counter("generation_tokens_total", "Generated tokens of all requests")
        self.prefix_queries = counter("prefix_cache_queries_total", "Prompt tokens looked up in a kept KV cache")
        self.prefix_hits = counter("prefix_cache_hits_total", "Prompt tokens found in a kept KV cache")
        self._vllm_prefix = tuple(Counter(VLLM_PREFIX + name, doc, label, registry=self.registry).labels(model_name)
                                  for name, doc in (("prefix_cache_queries", "Prefix cache queries, in tokens"),
                                                    ("prefix_cache_hits", "Prefix cache hits, in tokens")))
        self.prefix_shared = counter("prefix_cache_shared_tokens_total",
                                     "Prompt tokens copied from another conversation's KV cache").inc
        self.store_loaded = counter("kv_store_loaded_tokens_total", "Prompt tokens read from a saved KV cache").inc
        self._store_discarded = counter("kv_store_discarded_total", "Saved KV caches deleted as stale or damaged")
        self.store_bytes = gauge("kv_store_bytes", "Bytes of the saved KV caches (--kv-store)").set
        self._success = Counter(PREFIX + "request_success_total", "Finished requests by finish reason",
                                ("model_name", "finished_reason"), registry=self.registry)
        self._model_name = model_name
        self.running = gauge("num_requests_running", "Requests being generated")
        self.waiting = gauge("num_requests_waiting", "Requests waiting in the queue")
        self._vllm_running = gauge("num_requests_running", "Requests being generated", VLLM_PREFIX)
        self._vllm_waiting = gauge("num_requests_waiting", "Requests waiting in the queue", VLLM_PREFIX)
        self.parallel = gauge("parallel_slots", "Requests that may be generated at once (1: one at a time)")
        self.parallel.set(1)
        self._running_now = 0
        self._lock = threading.Lock()
        self.kv_bytes = gauge("kv_cache_bytes", "Bytes of the filled KV caches held")
        self.kv_usage = gauge("kv_cache_usage_perc", "KV cache bytes held over the most the sessions can hold (0..1)")
        self._vllm_kv_usage = gauge("kv_cache_usage_perc", "KV cache usage (0..1)", VLLM_PREFIX)
        self._blocks_used = gauge("kv_cache_blocks_used", "Blocks held in the shared-prefix pool")
        self._blocks_free = gauge("kv_cache_blocks_free", "Blocks free in the shared-prefix pool")
        self._cache_config = Gauge(VLLM_PREFIX + "cache_config_info", "The KV block pool's configuration",
                                   ("model_name", "block_size", "num_gpu_blocks"), registry=self.registry)
        self._spec = tuple(tuple(Counter(prefix + "spec_decode_" + name, doc, label, registry=self.registry)
                                 .labels(model_name) for prefix in (VLLM_PREFIX, PREFIX)) for name, doc in (
            ("num_drafts", "Speculative decode steps that had a draft"),
            ("num_draft_tokens", "Tokens drafted for speculative decoding"),
            ("num_accepted_tokens", "Drafted tokens the model accepted")))
        # What the engine core holds in memory (engine.core.models.ModelRecord): read when /metrics is asked for.
        self._models = Gauge(PREFIX + "model_memory_bytes", "Bytes of each model the engine holds in memory",
                             ("model_name", "kind"), registry=self.registry)
        self.loaded_models: Callable[[], Iterable[Any]] = lambda: ()
        # The prompt products' form (engine.executor.prefill_forms.chosen): read when /metrics is asked for.
        self._prefill_form = Gauge(PREFIX + "prefill_form_info", "The form prompt products take here (kernel, dense)",
                                   ("model_name", "form"), registry=self.registry)
        self.prefill_form: Callable[[], str | None] = lambda: None

    # -- recording (worker thread) ------------------------------------------------------------
    def queued(self, waiting: int) -> None:
        self._set_waiting(waiting)

    def _set_waiting(self, waiting: int) -> None:
        self.waiting.set(waiting)
        self._vllm_waiting.set(waiting)

    def _set_running(self, delta: int) -> None:
        with self._lock:  # started/finished come from the threads of the requests in flight
            self._running_now = max(0, self._running_now + delta)
            self.running.set(self._running_now)
            self._vllm_running.set(self._running_now)

    def started(self, waiting: int, queue_s: float) -> None:
        self._set_waiting(waiting)
        self._set_running(+1)
        self.queue_time.observe(max(0.0, queue_s))

    def prompt(self, prompt_tokens: int, reused_tokens: int) -> None:
        self.prompt_tokens.inc(prompt_tokens)
        self.prefix_queries.inc(prompt_tokens)
        self.prefix_hits.inc(reused_tokens)
        self._vllm_prefix[0].inc(prompt_tokens)
        self._vllm_prefix[1].inc(reused_tokens)

    def store_discarded(self) -> None:
        self._store_discarded.inc()

    def token(self, gap_s: float | None, ttft_s: float | None) -> None:
        """One generated token: ``ttft_s`` for the first, ``gap_s`` for the others."""
        self.generation_tokens.inc()
        if ttft_s is not None:
            self.ttft.observe(max(0.0, ttft_s))
        if gap_s is not None:
            self.itl.observe(max(0.0, gap_s))

    def finished(self, reason: str, e2e_s: float | None) -> None:
        self._set_running(-1)
        self._success.labels(self._model_name, reason).inc()
        if e2e_s is not None:
            self.e2e.observe(max(0.0, e2e_s))

    def speculated(self, drafts: int, draft_tokens: int, accepted_tokens: int) -> None:
        """A request's speculation counts (``engine.events.Metrics``), added when it ends."""
        for counters, value in zip(self._spec, (drafts, draft_tokens, accepted_tokens)):
            for counter in counters:
                counter.inc(max(0, value))

    def kv(self, held_bytes: int) -> None:
        self.kv_bytes.set(held_bytes)
        usage = min(1.0, held_bytes / self.kv_capacity_bytes) if self.kv_capacity_bytes else 0.0
        self.kv_usage.set(usage)
        self._vllm_kv_usage.set(usage)

    def blocks(self, used: int, free: int, block_size: int = 16) -> None:
        """The shared-prefix pool's blocks (``engine.executor.kv_blocks``): held and free."""
        self._blocks_used.set(used)
        self._blocks_free.set(free)
        self._cache_config.labels(self._model_name, str(block_size), str(used + free)).set(1)

    # -- reading (HTTP side) ------------------------------------------------------------------
    def render(self) -> bytes:
        """The Prometheus text exposition of every series."""
        self._models.clear()  # a model unloaded since the last scrape has no series any more
        for record in self.loaded_models():
            self._models.labels(record.name, record.kind).set(record.bytes)
        self._prefill_form.clear()  # a recheck may have switched forms
        form = self.prefill_form()
        if form is not None:
            self._prefill_form.labels(self._model_name, form).set(1)
        return generate_latest(self.registry)
