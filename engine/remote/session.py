"""One conversation with a model on an OpenAI-compatible server: ``RemoteSession.generate(messages, config, cancel)``
streams the same events as a local ``ChatSession`` (``engine.events``), so the window, the CLI and the history
take a remote reply as they take a local one. Its ``images`` go with their user messages as OpenAI ``image_url``
parts (``engine.remote.images``), as ``engine.vision.turn.VisionChat.generate`` takes them locally.

What is measured, and where (docs/SCALE-OUT.md, "What the panel shows"):

- On this client, from the stream: the submit time is taken when ``generate`` is called; TTFT is submit -> the
  first chunk that carries reply text (or the end of the reply); the per-token latencies (``itl_s``) are the gaps
  between chunks, split per token when the server sends logprobs (then each token of a chunk is its own
  ``Token``, and those gaps are 0); decode tok/s is (tokens - 1) / (last token's arrival - first token's arrival).
  Every figure thus includes the network and the server's HTTP path, which is what a user of that server gets.
- From the server's ``usage`` (asked for with ``stream_options.include_usage``): prompt and generated token
  counts (the end token included, as vLLM counts), and, when it reports ``prompt_tokens_details.cached_tokens``,
  the prompt tokens its prefix cache reused. A server that sends no usage leaves the prompt count unknown and the
  generated count is the number of tokens received (chunks, or logprob entries when there are some).
- Never known here, so listed in ``Metrics.unknown`` (``to_dict`` gives them as null; the panel shows "—"): the
  prefill time and rate, the KV cache bytes (measured or by formula), the weights and peak memory — a server's
  KV usage comes from its ``/metrics`` instead (``engine.remote.server_metrics``). ``Started`` carries no prompt
  count (known only at the end) and a ``context_max`` of what ``/v1/models`` said (0: not said).

Finish reasons: the server's ``stop`` is ``eos``, ``length`` is ``length``; a cancel closes the stream (the
connection's socket is shut down, which wakes a read blocked while the server is still prefilling, and tells
the server to stop) and is ``cancelled``; every failure — refused, timeout, TLS, 401, 429, an error event, a stream
cut before the server said it finished, a chunk that is not UTF-8, not JSON or too large
(``engine.remote.client``) — is ``Finished(reason="error", error=<one line>)`` with the text received so far kept.
The server is not trusted to stop: past the ``max_tokens`` asked for and ``TOKEN_MARGIN`` the stream is closed and
the reply is a ``length`` finish. ``generate`` never raises once it has returned its iterator.
"""

from __future__ import annotations

import math
import queue
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Sequence

from engine.events import Event, Finished, Message, Metrics, Started, Stats, Token, TopCandidate
from engine.inputs import SamplingConfig
from engine.remote.client import RemoteModel, describe, malformed
from engine.remote.images import with_images
from engine.remote.spec import MalformedAnswerError

STATS_EVERY = 8  # as engine.generate.session: a live snapshot every 8 tokens
NO_TOKEN_ID = -1  # the API sends text, not ids: every Token's token_id is this
FINISH_REASONS = {"stop": "eos", "length": "length"}
# Never measured through the API: their 0 in Metrics means "not known" (Metrics.unknown).
UNKNOWN_ALWAYS = ("prefill_s", "prefill_tok_s", "kv_cache_bytes", "kv_cache_bytes_allocated",
                  "kv_cache_bytes_formula", "kv_cache_bytes_formula_no_gqa", "weights_bytes", "peak_memory_bytes")
CANCEL_POLL_S = 0.05  # while no chunk comes, the cancel flag is looked at this often
# The server is not trusted to end its stream: past the max_tokens asked for (and a margin for a server that
# counts differently), the reply is cut there, as a length finish; past this many chunks for each token asked
# for (role, usage and empty chunks, a finish that never comes), it is an error.
TOKEN_MARGIN = 16
CHUNKS_PER_TOKEN = 4


@dataclass
class _Reply:
    """What one request received so far (mutable, private to the loop)."""

    t_submit: float
    token_times: list[float] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)  # a reasoning model's thought, as the server split it
    thought_times: list[float] = field(default_factory=list)  # arrival of each thought piece
    answer_t: float | None = None  # arrival of the first answer piece
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None


def _reasoning_of(delta: Any) -> str:
    """The thought a streamed delta carries: ``reasoning_content`` (vLLM, DeepSeek, Miaohui) or ``reasoning``
    (later vLLM releases, OpenRouter); "" when none. ``MalformedAnswerError`` when it is not text."""
    if delta is None:
        return ""
    for name in ("reasoning_content", "reasoning"):
        value = getattr(delta, name, None)
        if value is None and isinstance(getattr(delta, "model_extra", None), dict):
            value = delta.model_extra.get(name)
        if value:
            if not isinstance(value, str):
                raise MalformedAnswerError(f"a chunk's {name} is not text")
            return value
    return ""


def request_body(model: str, messages: Sequence[Message], config: SamplingConfig,
                 images: Mapping[int, Sequence[Any]] | None = None) -> dict[str, Any]:
    """The ``/v1/chat/completions`` arguments for ``config``. ``top_k`` and ``repetition_penalty`` are not in
    OpenAI's API; they are sent as vLLM's extra fields (llama-server reads ``top_k`` too; others ignore them),
    and only when they change something. ``images`` (message index -> pictures) go as ``image_url`` parts
    (``engine.remote.images``)."""
    sent = [{"role": m.role, "content": m.content} for m in messages]
    body: dict[str, Any] = {
        "model": model, "messages": with_images(sent, images) if images else sent, "stream": True,
        "stream_options": {"include_usage": True}, "max_tokens": config.max_new_tokens,
        "temperature": config.temperature, "top_p": config.top_p,
    }
    if config.seed is not None:
        body["seed"] = config.seed
    if config.top_logprobs:
        body["logprobs"] = True
        body["top_logprobs"] = config.top_logprobs
    extra: dict[str, Any] = {}
    if config.top_k and not config.greedy:
        extra["top_k"] = config.top_k
    if config.repetition_penalty != 1.0:
        extra["repetition_penalty"] = config.repetition_penalty
    if extra:
        body["extra_body"] = extra
    return body


def _prob(logprob: Any) -> float | None:
    """A logprob as a probability; the -9999 that stands for "probability 0" (JSON has no -infinity) is 0."""
    if not isinstance(logprob, (int, float)) or isinstance(logprob, bool):
        return None
    if not math.isfinite(logprob):
        return None
    return 0.0 if logprob <= -9999.0 else math.exp(min(logprob, 0.0))  # a positive logprob is no probability


def _tokens_of(choice: Any, text: str) -> list[tuple[str, float | None, tuple[TopCandidate, ...]]]:
    """The tokens a chunk carries: one per logprob entry when their texts make up the chunk's text, else the
    chunk as one piece."""
    content = getattr(getattr(choice, "logprobs", None), "content", None) or []
    if content and "".join(str(entry.token) for entry in content) == text:
        return [(str(entry.token), _prob(entry.logprob),
                 tuple(TopCandidate(NO_TOKEN_ID, str(top.token), _prob(top.logprob) or 0.0)
                       for top in (entry.top_logprobs or [])))
                for entry in content]
    return [(text, None, ())] if text else []


_END = object()  # the reader's last item: the stream ended (the server's [DONE], or its end of body)


class _Reader(threading.Thread):
    """Sends the request and reads its stream on a daemon thread, putting ``(arrival time, chunk)`` in ``items``,
    then ``(t, exception)`` or ``(t, _END)``. ``stop()`` ends it early: the connection's socket is shut down, which
    wakes a blocked read at once and tells the server the client left (it then stops generating)."""

    def __init__(self, remote: RemoteModel, body: dict[str, Any], clock: Callable[[], float]) -> None:
        super().__init__(name="miaohui-remote-stream", daemon=True)
        self.items: queue.SimpleQueue[tuple[float, Any]] = queue.SimpleQueue()
        self._remote, self._body, self._clock = remote, body, clock
        self._lock = threading.Lock()
        self._stream: Any = None
        self._stopped = False
        self._ended = False

    def run(self) -> None:
        try:
            stream = self._remote.client().chat.completions.create(**self._body)
            with self._lock:
                self._stream = stream
                stopped = self._stopped
            if stopped:
                _shut(stream)
                return
            for chunk in stream:
                self.items.put((self._clock(), chunk))
            end: Any = _END
        except Exception as exc:  # noqa: BLE001 (handed to the consumer, which makes it one line)
            end = malformed(exc, self._remote.spec.host) or exc  # bytes not UTF-8, not JSON: typed
        with self._lock:
            self._ended = True  # the stream is closed by now: its connection may serve the next request
        self.items.put((self._clock(), end))

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            stream = None if self._ended else self._stream
        if stream is not None:
            _shut(stream)


def _shut(stream: Any) -> None:
    """Shut down the socket of a stream that has not ended, then close the response (the connection is not reused)."""
    try:
        network = stream.response.extensions.get("network_stream")
        sock = network.get_extra_info("socket") if network is not None else None
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)
    except Exception:  # noqa: BLE001 (already closed, or a transport without a socket: closing is enough)
        pass
    try:
        stream.close()
    except Exception:  # noqa: BLE001
        pass


class RemoteSession:
    """A conversation's replies from ``remote`` (a ``RemoteModel`` from ``engine.remote.client.connect``).

    Stateless between replies: the server keeps (or not) its own prefix cache, and each request carries the whole
    conversation. ``clock`` is replaceable for tests. One thread at a time calls ``generate``; ``cancel`` is the
    only thing another thread touches.
    """

    def __init__(self, remote: RemoteModel, *, clock: Callable[[], float] = time.perf_counter) -> None:
        self.remote = remote
        self._clock = clock

    def generate(self, messages: Sequence[Message], config: SamplingConfig | None = None,
                 cancel: threading.Event | None = None,
                 images: Mapping[int, Sequence[Any]] | None = None) -> Iterator[Event]:
        """Stream a reply to ``messages`` (events as ``ChatSession.generate``'s). Iterate it right away: the
        submit time (for TTFT) is taken now. ``images``: message index -> ``ImageInput``s, sent with those user
        messages (``BadInputError`` at once for images on another role's message)."""
        t_submit = self._clock()
        body = request_body(self.remote.model_id, list(messages), config or SamplingConfig(), images)
        return self._stream(body, config or SamplingConfig(), cancel or threading.Event(), t_submit)

    # -- the loop ------------------------------------------------------------------------------------------
    def _stream(self, body: dict[str, Any], config: SamplingConfig, cancel: threading.Event,
                t_submit: float) -> Iterator[Event]:
        reply = _Reply(t_submit)
        yield Started(0, 0, 0, self.remote.facts.context_length, t_submit)
        if cancel.is_set():
            yield self._finished("cancelled", reply)
            return
        # The HTTP exchange runs on its own thread, which stamps each chunk as it arrives; this generator waits
        # for its chunks and looks at ``cancel`` in between, so a cancel is seen at once even while the request
        # waits in the server's queue or its prefill (no byte comes then), and the stream is shut down.
        reader = _Reader(self.remote, body, self._clock)
        reader.start()
        index = chunks = 0
        max_tokens = config.max_new_tokens + TOKEN_MARGIN
        max_chunks = CHUNKS_PER_TOKEN * max_tokens
        host = self.remote.spec.host
        try:
            while True:
                try:
                    item = reader.items.get(timeout=CANCEL_POLL_S)
                except queue.Empty:
                    item = None
                if cancel.is_set():
                    yield self._finished("cancelled", reply)
                    return
                if item is None:
                    continue
                t, chunk = item
                if chunk is _END:
                    break
                if isinstance(chunk, BaseException):
                    yield self._finished("error", reply, describe(chunk, self.remote.spec))
                    return
                chunks += 1
                try:
                    tokens = self._take(reply, t, chunk, max_tokens - index)
                except Exception as exc:  # noqa: BLE001 (a chunk of any shape ends the reply as one line)
                    error = exc if isinstance(exc, MalformedAnswerError) else MalformedAnswerError(
                        f"{host} sent a chunk this client cannot read ({type(exc).__name__})")
                    yield self._finished("error", reply, str(error))
                    return
                for token in tokens:
                    if len(token) == 4:  # a piece of the thought (the server's reasoning_content)
                        yield Token(index, NO_TOKEN_ID, "", t, None, (), part="reasoning", reasoning=token[0])
                    else:
                        yield Token(index, NO_TOKEN_ID, token[0], t, token[1], token[2])
                    index += 1
                    if index % STATS_EVERY == 0:
                        yield Stats(self._metrics(reply, live=True))
                if index >= max_tokens and reply.finish_reason is None:
                    yield self._finished("length", reply)  # more than asked for: the server would not stop
                    return
                if chunks >= max_chunks:
                    yield self._finished("error", reply, f"{host} sent {chunks} chunks for a reply of at most "
                                                         f"{config.max_new_tokens} tokens without ending its stream")
                    return
        finally:
            reader.stop()  # a stream that did not end (cancel, abandoned) is shut down
        if reply.finish_reason is None:
            received = len(reply.token_times)
            yield self._finished("error", reply, f"{self.remote.spec.host} ended the stream before the reply finished "
                                                 f"({received} token{'s' if received != 1 else ''} received)")
        else:
            yield self._finished(FINISH_REASONS.get(reply.finish_reason, "eos"), reply)

    def _take(self, reply: _Reply, t: float, chunk: Any,
              room: int) -> list[tuple[str, float | None, tuple[TopCandidate, ...]]]:
        """Record one chunk (usage, finish reason, arrival times); return the tokens it carries, at most ``room``.
        ``MalformedAnswerError`` for a chunk whose text is not text."""
        usage = getattr(chunk, "usage", None)
        if usage is not None:
            self._read_usage(reply, usage)
        tokens: list[tuple[str, float | None, tuple[TopCandidate, ...]]] = []
        for choice in getattr(chunk, "choices", None) or []:
            if getattr(choice, "index", 0) != 0:
                continue  # n > 1 is never asked for; a server that sends more choices is read for its first
            delta = getattr(choice, "delta", None)
            content = (getattr(delta, "content", None) or "") if delta is not None else ""
            if not isinstance(content, str):
                raise MalformedAnswerError(f"{self.remote.spec.host} sent a chunk whose content is not text")
            finish = getattr(choice, "finish_reason", None)
            thought = _reasoning_of(delta)
            if thought and room - len(tokens) > 0:
                # vLLM's reasoning parsers, DeepSeek's API and Miaohui's server send the thought apart from the
                # answer; each delta counts as one token (the server's usage count corrects the total at the end).
                reply.token_times.append(t)
                reply.thought_times.append(t)
                reply.reasoning.append(thought)
                tokens.append((thought, None, (), "reasoning"))  # type: ignore[arg-type]
            pieces = _tokens_of(choice, content)[:max(0, room - len(tokens))]
            if pieces and reply.answer_t is None:
                reply.answer_t = t
            if not pieces and finish == "stop":
                reply.token_times.append(t)  # the end token: its arrival is the finishing chunk (local counts it too)
            for piece in pieces:
                reply.token_times.append(t)
                reply.text.append(piece[0])
            tokens += pieces
            if finish is not None:
                reply.finish_reason = str(finish)
        return tokens

    @staticmethod
    def _read_usage(reply: _Reply, usage: Any) -> None:
        def count(value: Any) -> int | None:
            return int(value) if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None

        reply.prompt_tokens = count(getattr(usage, "prompt_tokens", None))
        reply.completion_tokens = count(getattr(usage, "completion_tokens", None))
        details = getattr(usage, "prompt_tokens_details", None)
        reply.cached_tokens = count(getattr(details, "cached_tokens", None)) if details is not None else None

    # -- metrics -------------------------------------------------------------------------------------------
    def _finished(self, reason: str, reply: _Reply, error: str | None = None) -> Finished:
        return Finished(reason, "".join(reply.text), self._metrics(reply, live=False), error,  # type: ignore[arg-type]
                        reasoning="".join(reply.reasoning))

    def _metrics(self, reply: _Reply, live: bool) -> Metrics:
        times = reply.token_times
        received = len(times)
        # The server's count is authoritative (a chunk may carry several tokens); while streaming it is not known yet.
        n = reply.completion_tokens if reply.completion_tokens is not None and not live else received
        unknown = list(UNKNOWN_ALWAYS)
        prompt = reply.prompt_tokens
        if prompt is None:
            unknown += ["prompt_tokens", "context_tokens", "prefill_tokens", "reused_tokens"]
        elif reply.cached_tokens is None:
            unknown += ["prefill_tokens", "reused_tokens"]
        context_max = self.remote.facts.context_length
        if not context_max:
            unknown.append("context_max")
        ttft = times[0] - reply.t_submit if times else None
        e2e = times[-1] - reply.t_submit if times else None
        span = times[-1] - times[0] if received > 1 else 0.0
        cached = reply.cached_tokens or 0
        return Metrics(
            prompt_tokens=prompt or 0,
            prefill_tokens=(prompt - cached) if prompt is not None else 0,
            reused_tokens=cached,
            generated_tokens=n,
            ttft_s=ttft,
            decode_tok_s=(n - 1) / span if span > 0 and n > 1 else None,
            itl_s=tuple(b - a for a, b in zip(times, times[1:])),
            tpot_s=(e2e - ttft) / (n - 1) if n > 1 and e2e is not None and ttft is not None else None,
            e2e_s=e2e,
            context_tokens=(prompt or 0) + n,
            context_max=context_max,
            device=self.remote.facts.device,
            precision=self.remote.facts.precision,
            unknown=tuple(unknown),
            ttft_thought_s=reply.thought_times[0] - reply.t_submit if reply.thought_times else None,
            ttft_answer_s=reply.answer_t - reply.t_submit if reply.answer_t is not None else None,
            thinking_tokens=len(reply.thought_times),
            thinking_s=(reply.thought_times[-1] - reply.thought_times[0]) if reply.thought_times else None,
        )
