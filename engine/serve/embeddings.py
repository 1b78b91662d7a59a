"""OpenAI's ``POST /v1/embeddings`` over the engine's embedding model (``engine.docs.embed``).

Owns: parsing the request (``input`` a string or a list of strings, ``model``, ``encoding_format`` float or base64,
``dimensions``), finding the embedding model once (``Embeddings``) and shaping the response
(``{"object": "list", "data": [{"object": "embedding", "index", "embedding"}], "model", "usage"}``). Does not own
the model (``engine.docs.embed``), the routes or the key check (``engine.serve.app``).

Why base64: the official Python client asks for it unless told otherwise (fewer bytes than JSON floats) and decodes
it itself, so both formats are served: base64 is the float32 little-endian bytes of each vector. Token-id inputs
(lists of ints) are refused: the ids would be another tokenizer's. The embedding model is looked up on the first
request, not at start (the chat model is what a server is started for); while none is installed the request is a
503 that says how to install one, and a later request looks again, so ``engine docs fetch-embedder`` needs no restart.
The forward runs on a thread of its own (``asyncio.to_thread``), never on the event loop; the embedder's lock keeps
one forward at a time.
"""

from __future__ import annotations

import asyncio
import base64
import json
import threading
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from engine.docs.embed import DEFAULT_EMBEDDER_NAME, Embedder
from engine.errors import EngineError
from engine.serve.errors import ApiError

MAX_INPUTS = 2048  # OpenAI's limit on one request's inputs
MAX_INPUT_CHARS = 100_000  # one input; the model reads its first 256 tokens anyway (EmbedConfig.max_tokens)
NO_EMBEDDER = ("no embedding model is installed on this server: run `python -m engine docs fetch-embedder` "
               "(a later request finds it, no restart needed)")


@dataclass(frozen=True)
class EmbeddingsRequest:
    texts: tuple[str, ...]
    model: str
    base64: bool  # encoding_format "base64" (the openai client's default) rather than "float"
    dimensions: int | None


def parse_embeddings(body: bytes) -> EmbeddingsRequest:
    """The request, or ``ApiError(400)`` naming the field that is wrong."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise ApiError(400, "the body is not valid JSON") from None
    if not isinstance(data, dict):
        raise ApiError(400, "the body must be a JSON object")
    model = data.get("model")
    if not isinstance(model, str) or not model:
        raise ApiError(400, "model is required: the embedding model's name", param="model")
    raw = data.get("input")
    texts = [raw] if isinstance(raw, str) else raw
    if not isinstance(texts, list) or not texts:
        raise ApiError(400, "input must be a string or a non-empty list of strings", param="input")
    if len(texts) > MAX_INPUTS:
        raise ApiError(400, f"input has {len(texts)} items; at most {MAX_INPUTS}", param="input")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise ApiError(400, f"input[{i}] is not a string (token ids are not accepted: send the text)",
                           param="input")
        if not text.strip():
            raise ApiError(400, f"input[{i}] is empty", param="input")
        if len(text) > MAX_INPUT_CHARS:
            raise ApiError(400, f"input[{i}] is {len(text)} characters; at most {MAX_INPUT_CHARS}", param="input")
    encoding = data.get("encoding_format", "float")
    if encoding not in ("float", "base64"):
        raise ApiError(400, "encoding_format must be 'float' or 'base64'", param="encoding_format")
    dimensions = data.get("dimensions")
    if dimensions is not None and (isinstance(dimensions, bool) or not isinstance(dimensions, int)):
        raise ApiError(400, "dimensions must be an integer", param="dimensions")
    return EmbeddingsRequest(tuple(texts), model, encoding == "base64", dimensions)


class Embeddings:
    """The embedding model behind the route, found on first use by ``find`` (None: not installed)."""

    def __init__(self, find: Callable[[], Embedder | None] | None = None) -> None:
        self._find = find or _default_embedder
        self._embedder: Embedder | None = None
        self._lock = threading.Lock()  # two first requests load one model

    def _get(self) -> Embedder:
        with self._lock:
            if self._embedder is None:
                try:
                    self._embedder = self._find()
                except EngineError as exc:  # a damaged model folder: the server stays up, the route says why
                    raise ApiError(503, str(exc), code="embedding_model_unusable") from None
            if self._embedder is None:
                raise ApiError(503, NO_EMBEDDER, code="embedding_model_not_installed")
            return self._embedder

    async def respond(self, request: EmbeddingsRequest) -> dict[str, Any]:
        embedder = await asyncio.to_thread(self._get)
        if request.model not in (embedder.name, DEFAULT_EMBEDDER_NAME, "default"):
            raise ApiError(404, f"the embedding model {request.model!r} does not exist: this server embeds with "
                                f"{embedder.name!r}", param="model", code="model_not_found")
        if request.dimensions is not None and request.dimensions != embedder.dim:
            raise ApiError(400, f"dimensions must be {embedder.dim} for {embedder.name!r} (it cannot shorten its "
                                "vectors)", param="dimensions")
        vectors, tokens = await asyncio.to_thread(_run, embedder, request.texts)
        return {"object": "list", "model": embedder.name,
                "data": [{"object": "embedding", "index": i, "embedding": _encode(row, request.base64)}
                         for i, row in enumerate(vectors)],
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}


def _run(embedder: Embedder, texts: tuple[str, ...]) -> tuple[np.ndarray, int]:
    return embedder.embed(texts), embedder.count_tokens(texts)  # (n, dim) float32


def _encode(row: np.ndarray, as_base64: bool) -> list[float] | str:
    if as_base64:
        return base64.b64encode(row.astype("<f4").tobytes()).decode("ascii")
    return [float(x) for x in row]


def _default_embedder() -> Embedder | None:
    from engine.docs.embed import default_embedder  # transformers' model classes: only on the first request

    return default_embedder()
