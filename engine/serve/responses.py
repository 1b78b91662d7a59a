"""OpenAI response bodies, as plain dicts: chat completions and their stream chunks, legacy completions,
usage with cached prompt tokens, and logprobs from the engine's top-k capture.

Logprobs: the engine reports each token's probability in the distribution it was sampled from (after
temperature, top-k and top-p; the raw softmax when greedy) and the best candidates
(``engine.events.Token``); a logprob here is its natural log, -9999.0 for a candidate of probability 0
(as vLLM writes it: JSON has no -infinity). ``bytes`` are the UTF-8 bytes of the token's text as the
tokenizer decodes it alone. The end token gets no entry (it adds no text). Usage counts every generated
token, the end token included, as vLLM counts them; ``prompt_tokens_details.cached_tokens`` is the prompt
tokens reused from a KV cache kept from an earlier request: the same conversation's, another one's shared prefix
(a common system prompt), or one saved before a restart (``engine.serve.prefix``).
"""

from __future__ import annotations

import json
import math
import time
import uuid
from typing import Any

from engine.events import Metrics
from engine.serve.worker import Piece

MIN_LOGPROB = -9999.0


def logprob(prob: float | None) -> float:
    return math.log(prob) if prob and prob > 0 else MIN_LOGPROB


def _token_entry(text: str, prob: float | None) -> dict[str, Any]:
    return {"token": text, "logprob": logprob(prob), "bytes": list(text.encode("utf-8", "replace"))}


def chat_logprobs(pieces: list[Piece], top: int) -> dict[str, Any]:
    """``choices[].logprobs`` of a chat completion: one entry per token, each with ``top`` candidates."""
    content = []
    for piece in pieces:
        token = piece.token
        if token is None:
            continue
        entry = _token_entry(piece.token_text, token.prob)
        entry["top_logprobs"] = [_token_entry(c.text, c.prob) for c in token.top[:top]]
        content.append(entry)
    return {"content": content, "refusal": None}


def completion_logprobs(pieces: list[Piece], top: int, offset: int = 0) -> dict[str, Any]:
    """``choices[].logprobs`` of a legacy completion: parallel lists, ``top_logprobs`` as {token: logprob}."""
    tokens, token_logprobs, top_logprobs, offsets = [], [], [], []
    for piece in pieces:
        token = piece.token
        if token is None:
            continue
        tokens.append(piece.token_text)
        token_logprobs.append(logprob(token.prob))
        top_logprobs.append({c.text: logprob(c.prob) for c in token.top[:top]})
        offsets.append(offset)
        offset += len(piece.text)
    return {"tokens": tokens, "token_logprobs": token_logprobs, "top_logprobs": top_logprobs, "text_offset": offsets}


def usage(metrics: Metrics) -> dict[str, Any]:
    prompt, completion = metrics.prompt_tokens, metrics.generated_tokens
    body = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": metrics.reused_tokens}}
    if metrics.thinking_tokens:  # OpenAI's name for the tokens of a thought
        body["completion_tokens_details"] = {"reasoning_tokens": metrics.thinking_tokens}
    return body


def model_list(model_id: str, created: int, max_model_len: int | None = None) -> dict[str, Any]:
    """``/v1/models``; ``max_model_len`` is vLLM's field for the context a request may use (omitted: unknown)."""
    entry: dict[str, Any] = {"id": model_id, "object": "model", "created": created, "owned_by": "miaohui"}
    if max_model_len:
        entry["max_model_len"] = max_model_len
    return {"object": "list", "data": [entry]}


class Shaper:
    """Builds the bodies of one response: its id, creation time and model name are fixed at the start."""

    def __init__(self, kind: str, model_id: str) -> None:
        self.kind = kind  # "chat" | "completion"
        self.id = ("chatcmpl-" if kind == "chat" else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())
        self.model = model_id

    def _base(self, obj: str) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model,
                "system_fingerprint": None}

    # -- whole responses ----------------------------------------------------------------------
    def complete(self, text: str, finish_reason: str, metrics: Metrics, logprobs: dict[str, Any] | None,
                 reasoning: str = "") -> dict:
        if self.kind == "chat":
            body = self._base("chat.completion")
            message = {"role": "assistant", "content": text, "refusal": None}
            if reasoning:  # a reasoning model's thought, beside the answer as vLLM and DeepSeek's API give it
                message["reasoning_content"] = reasoning
            body["choices"] = [{"index": 0, "message": message, "logprobs": logprobs, "finish_reason": finish_reason}]
        else:
            body = self._base("text_completion")
            body["choices"] = [{"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish_reason}]
        body["usage"] = usage(metrics)
        return body

    # -- stream chunks ------------------------------------------------------------------------
    def chunk(self, text: str | None, *, role: bool = False, finish_reason: str | None = None,
              logprobs: dict[str, Any] | None = None, with_usage: bool = False,
              reasoning: str | None = None) -> dict[str, Any]:
        """One chunk with one choice; ``text=None`` sends an empty delta (the finishing chunk); ``reasoning``: the
        thought's text, as the delta's ``reasoning_content`` (vLLM's and DeepSeek's name)."""
        if self.kind == "chat":
            body = self._base("chat.completion.chunk")
            delta: dict[str, Any] = {}
            if role:
                delta["role"] = "assistant"
            if text is not None:
                delta["content"] = text
            if reasoning:
                delta["reasoning_content"] = reasoning
            choice = {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}
        else:
            body = self._base("text_completion")
            choice = {"index": 0, "text": text or "", "logprobs": logprobs, "finish_reason": finish_reason}
        body["choices"] = [choice]
        if with_usage:
            body["usage"] = None  # OpenAI: null on every chunk but the last when usage was asked for
        return body

    def usage_chunk(self, metrics: Metrics) -> dict[str, Any]:
        """The extra last chunk of ``stream_options.include_usage``: no choices, the usage."""
        body = self._base("chat.completion.chunk" if self.kind == "chat" else "text_completion")
        body["choices"] = []
        body["usage"] = usage(metrics)
        return body


def sse(data: dict[str, Any] | str) -> bytes:
    """One server-sent event: ``data: {json}`` and a blank line."""
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return f"data: {text}\n\n".encode("utf-8")

