"""The ASGI application: ``create_app(worker, ...)`` -> a FastAPI app serving the OpenAI API over ``worker``.

Routes: ``GET /v1/models`` (and ``/v1/models/{id}``), ``POST /v1/chat/completions``, ``POST /v1/completions``,
``POST /v1/embeddings`` (the engine's embedding model: ``engine.serve.embeddings``; 503 while none is installed);
a chat request naming collections in its ``miaohui`` field is grounded in them first (``engine.serve.documents``);
its ``image_url`` parts are read by ``engine.serve.images`` (a 400 for a text-only model, a bad image, or a web URL
while ``allow_downloads`` is off) and served by a ``engine.serve.vision_worker.VisionWorker``
(raw text continued with no chat template, so a base model is served too), both streaming as server-sent events
``data: {json}`` ending with ``data: [DONE]``, or one JSON body,
``GET /health`` and ``GET /metrics`` (Prometheus text). With ``api_key``, every ``/v1`` route wants
``Authorization: Bearer <key>`` (compared in constant time); ``/health`` and ``/metrics`` stay open, as in
vLLM. Errors are OpenAI-shaped JSON (``engine.serve.errors``): 400 bad requests, 401 key, 404 unknown model
or route, 413 body over ``max_body_bytes``, 429 with ``Retry-After`` when the queue is full, 500 a failed
generation, 503 shutting down.

The asyncio side never touches the model: it parses, queues a ``Job`` and relays the worker's events, which
arrive through ``loop.call_soon_threadsafe``. A request's status is decided when its generation starts
(a conversation longer than the context is a 400, not a broken stream). A client that goes away, while
queued or mid-stream, sets its job's cancel flag: the worker skips it or stops within one decode step.
No CORS headers unless ``cors_origins`` names the origins that may call from a browser.

Prefix-cache scope (issue 40): a request reuses only KV rows that requests of its own scope computed, so
``usage.prompt_tokens_details.cached_tokens`` (and the time to first token) tells a client nothing about another's
prompts. With ``api_key`` the scope is the key (whoever holds it is one principal); without one, it is the request's
``prompt_cache_key`` (OpenAI's field: a client's own random secret, so its reuse, and its saved caches, outlive a
connection) or else the connection (``engine.serve.connections`` gives each an unguessable id): a client that keeps
its connection open reuses its own turns, and another client's guess of its prompt finds nothing cached.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from engine.errors import ContextTooLongError, TemplateError
from engine.serve.documents import ground_request
from engine.serve.embeddings import Embeddings, parse_embeddings
from engine.serve.errors import ApiError, error_body
from engine.serve.images import refuse_images, resolve_images
from engine.serve.metrics import CONTENT_TYPE
from engine.serve.responses import Shaper, chat_logprobs, completion_logprobs, model_list, sse
from engine.serve.schemas import Parsed, parse_chat, parse_completion
from engine.serve.tools import CallStream, finish_calls
from engine.tools.calls import native_tools
from engine.serve.worker import Failed, Job, Piece, QueueFullError, Reply, Worker, WorkerClosedError

DEFAULT_MAX_BODY_BYTES = 4 << 20  # 4 MiB: a long conversation fits many times over
ALIASES = ("default",)
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
# /v1/completions continues the prompt raw (engine.serve.schemas.parse_completion); the header said "chat" while
# it went through the chat template, and stays so a client that checked it sees the change.
COMPLETION_MODE = {"X-Miaohui-Completion-Mode": "raw"}
# A chat refused for its template: the server's own way forward, after the engine's words.
RAW_HINT = " (this server continues text without a template at POST /v1/completions)"


def create_app(worker: Worker, *, api_key: str | None = None, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
               cors_origins: Sequence[str] = (), aliases: Sequence[str] = ALIASES,
               embeddings: Embeddings | None = None, allow_downloads: bool = False) -> FastAPI:
    """The server's ASGI app over a started ``worker``; ``embeddings`` serves ``/v1/embeddings`` (default: the
    data folder's embedding model, found on the first request); ``allow_downloads``: image URLs on the web are
    fetched (``engine.serve.images``)."""
    app = FastAPI(title="Miaohui", docs_url=None, redoc_url=None, openapi_url=None)
    created = int(time.time())
    names = {worker.model_id, *aliases}
    native = native_tools(worker.loaded.tokenizer)  # the tool mode, decided once (engine.serve.tools)
    key = api_key.encode("utf-8") if api_key else None

    def require_key(request: Request) -> None:
        if key is None:
            return
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode("utf-8"), key):
            raise ApiError(401, "invalid or missing API key: send the header Authorization: Bearer <key>",
                           code="invalid_api_key")

    key_scope = None if key is None else "key:" + hashlib.sha256(key).hexdigest()[:32]  # hashed once, not per request

    def cache_scope(request: Request, parsed: Parsed) -> str:
        if key_scope is not None:  # require_key has checked it is this key
            return key_scope
        if parsed.cache_key:  # the client's secret: hashed, so no scope name in memory or a file holds it
            return "client:" + hashlib.sha256(parsed.cache_key.encode("utf-8", "replace")).hexdigest()[:32]
        connection = request.scope.get("miaohui.connection")
        if isinstance(connection, str) and connection:
            return "conn:" + connection
        client = request.client  # another ASGI server: the peer, the best identity it offers
        return f"peer:{client.host}:{client.port}" if client is not None else "peer:?"

    def check_model(name: str | None) -> None:
        if name is not None and name not in names:
            raise ApiError(404, f"the model {name!r} does not exist: this server serves {worker.model_id!r}",
                           param="model", code="model_not_found")

    v1 = APIRouter(prefix="/v1", dependencies=[Depends(require_key)])

    @v1.get("/models")
    async def models() -> dict[str, Any]:
        return model_list(worker.model_id, created, worker.loaded.facts.context_length)

    @v1.get("/models/{name:path}")
    async def model(name: str) -> dict[str, Any]:
        check_model(name)
        return model_list(worker.model_id, created, worker.loaded.facts.context_length)["data"][0]

    @v1.post("/chat/completions")
    async def chat_completions(request: Request) -> Response:
        parsed = parse_chat(await read_body(request, max_body_bytes), native=native)
        check_model(parsed.model)
        images = None
        if parsed.images:
            refuse_images(parsed.images, worker.model_id, getattr(worker, "vision", None) is not None)
            images = await asyncio.to_thread(resolve_images, parsed.images, allow_downloads)
        extra = None
        if parsed.docs is not None:  # grounded in the named collections, off the event loop
            parsed, extra = await asyncio.to_thread(ground_request, parsed, worker.loaded.tokenizer,
                                                    worker.loaded.facts.context_length or 0)
        return await _respond(request, worker, parsed, Shaper("chat", worker.model_id),
                              parsed.tools.headers if parsed.tools else {}, cache_scope(request, parsed), extra,
                              images)

    @v1.post("/completions")
    async def completions(request: Request) -> Response:
        parsed = parse_completion(await read_body(request, max_body_bytes))
        check_model(parsed.model)
        return await _respond(request, worker, parsed, Shaper("completion", worker.model_id), COMPLETION_MODE,
                              cache_scope(request, parsed))

    embedder = embeddings or Embeddings()

    @v1.post("/embeddings")
    async def embeddings_route(request: Request) -> dict[str, Any]:
        return await embedder.respond(parse_embeddings(await read_body(request, max_body_bytes)))

    app.include_router(v1)

    @app.get("/health")
    async def health() -> Response:
        if not worker.alive:
            return JSONResponse({"status": "stopped"}, status_code=503)
        return JSONResponse({"status": "ok", "model": worker.model_id, "running": worker.running,
                             "waiting": worker.waiting, "served": worker.served})

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(worker.metrics.render(), media_type=CONTENT_TYPE)

    @app.exception_handler(ApiError)
    async def api_error(_request: Request, exc: ApiError) -> Response:
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request: Request, exc: StarletteHTTPException) -> Response:
        message = {404: "no such route", 405: "method not allowed on this route"}.get(exc.status_code, str(exc.detail))
        return JSONResponse(error_body(exc.status_code, message), status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def validation_error(_request: Request, exc: RequestValidationError) -> Response:
        return JSONResponse(error_body(400, str(exc.errors()[:1])), status_code=400)

    if cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=list(cors_origins), allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type"])
    return app


async def read_body(request: Request, cap: int) -> bytes:
    """The request body, refused with 413 once it is over ``cap`` bytes (declared or actually sent)."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.strip().isdigit():
            raise ApiError(400, "the Content-Length header is not a number")
        if int(declared) > cap:
            raise ApiError(413, f"the request body is {int(declared)} bytes; this server accepts at most {cap}",
                           code="request_too_large")
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > cap:
                raise ApiError(413, f"the request body is over {cap} bytes, the most this server accepts",
                               code="request_too_large")
            chunks.append(chunk)
    except ClientDisconnect:  # it left, or its body took too long (engine.serve.connections): nobody reads this
        raise ApiError(400, "the client left before sending the whole request body") from None
    return b"".join(chunks)


async def _watch_disconnect(request: Request, job: Job) -> None:
    """Set the job's cancel flag when the client goes away (ASGI ``http.disconnect``)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            job.cancel.set()
            return


async def _respond(request: Request, worker: Worker, parsed: Parsed, shaper: Shaper,
                   headers: dict[str, str], scope: str, extra: dict[str, Any] | None = None,
                   images: dict[int, tuple[Any, ...]] | None = None) -> Response:
    """Queue the job and answer: one JSON body, or a stream; ``extra``: the ``miaohui`` field (the sources a
    grounded request was given), in the body and in the stream's finishing chunk."""
    loop = asyncio.get_running_loop()
    events: asyncio.Queue[Any] = asyncio.Queue()

    def emit(event: Any) -> None:  # on the worker thread
        loop.call_soon_threadsafe(events.put_nowait, event)

    job = Job(parsed.messages, parsed.config, emit, stop=parsed.stop, id=shaper.id, text=parsed.text,
              constraint=parsed.constraint, template_kwargs=parsed.template_kwargs, tools=parsed.template_tools,
              scope=scope, images=images)
    try:
        worker.submit(job)
    except QueueFullError as exc:
        raise ApiError(429, f"the server is busy ({worker.max_queue} requests waiting): retry in "
                            f"{exc.retry_after} s", code="queue_full",
                       headers={"Retry-After": str(exc.retry_after)}) from None
    except WorkerClosedError:
        raise ApiError(503, "the server is shutting down") from None
    watcher = asyncio.create_task(_watch_disconnect(request, job))
    streaming = False
    try:
        first = await events.get()
        if isinstance(first, Failed):
            code = "context_length_exceeded" if isinstance(first.error, ContextTooLongError) else None
            hint = RAW_HINT if isinstance(first.error, TemplateError) else ""
            raise ApiError(400, str(first.error) + hint, param="messages" if parsed.text is None else "prompt",
                           code=code)
        if isinstance(first, Reply):
            _raise_unfinished(first)
        if parsed.stream:
            streaming = True
            return StreamingResponse(_stream(parsed, shaper, job, events, watcher, extra),
                                     media_type="text/event-stream",
                                     headers={**SSE_HEADERS, **headers})
        pieces: list[Piece] = []
        while not isinstance(event := await events.get(), Reply):
            if isinstance(event, Piece):
                pieces.append(event)
        if event.finish_reason not in ("stop", "length"):
            _raise_unfinished(event)
        echoed = parsed.text if parsed.echo else ""
        body = shaper.complete(echoed + event.text, event.finish_reason, event.metrics,
                               _logprobs(shaper, parsed, pieces), event.reasoning)
        if parsed.tools is not None:
            finish_calls(body, parsed.tools, event.text)
        if extra is not None:
            body["miaohui"] = extra
        return JSONResponse(body, headers=headers)
    finally:
        if not streaming:  # the stream's own generator does this when it ends
            job.cancel.set()
            watcher.cancel()


def _raise_unfinished(reply: Reply) -> None:
    if reply.finish_reason == "error":
        raise ApiError(500, reply.error or "generation failed")
    raise ApiError(503, "the request was cancelled before it finished (the client left or the server is stopping)")


def _logprobs(shaper: Shaper, parsed: Parsed, pieces: list[Piece], offset: int = 0) -> dict[str, Any] | None:
    if parsed.logprobs is None:
        return None
    if shaper.kind == "chat":
        return chat_logprobs(pieces, parsed.logprobs)
    return completion_logprobs(pieces, parsed.logprobs, offset)


async def _stream(parsed: Parsed, shaper: Shaper, job: Job, events: asyncio.Queue[Any],
                  watcher: asyncio.Task[None], extra: dict[str, Any] | None = None) -> AsyncIterator[bytes]:
    """The SSE body: a role chunk (chat), content chunks, the finishing chunk, usage if asked, ``[DONE]``.

    Pieces that arrived while the last chunk was being written go out together in one chunk.
    """
    usage = parsed.include_usage
    offset = 0
    calls = CallStream(parsed.tools) if parsed.tools is not None else None  # held back while it may be tool calls
    try:
        if shaper.kind == "chat":
            yield sse(shaper.chunk("", role=True, with_usage=usage))
        elif parsed.echo and parsed.text:
            yield sse(shaper.chunk(parsed.text, with_usage=usage))
        pending: Any = None
        while True:
            event, pending = pending or await events.get(), None
            if isinstance(event, Reply):
                break
            if not isinstance(event, Piece):
                continue
            pieces = [event]
            while not events.empty():
                more = events.get_nowait()
                if not isinstance(more, Piece):
                    pending = more
                    break
                pieces.append(more)
            text = "".join(p.text for p in pieces)
            if calls is not None:
                text = calls.push(text)
            logprobs = _logprobs(shaper, parsed, pieces, offset)
            offset += len(text)
            thought = "".join(p.reasoning for p in pieces)
            if text or logprobs is not None or thought:
                yield sse(shaper.chunk(text if text or not thought else None, logprobs=logprobs, with_usage=usage,
                                       reasoning=thought))
        if event.finish_reason == "error":
            yield sse(error_body(500, event.error or "generation failed"))
        elif event.finish_reason == "cancelled":
            return  # the client left, or the server is stopping: no finish to report
        else:
            reason = event.finish_reason
            if calls is not None:
                held, reason = calls.finish(shaper, event.text, reason, usage)
                for chunk in held:
                    yield sse(chunk)
            final = shaper.chunk(None, finish_reason=reason, with_usage=usage)
            yield sse({**final, "miaohui": extra} if extra is not None else final)
            if usage:
                yield sse(shaper.usage_chunk(event.metrics))
        yield sse("[DONE]")
    finally:
        job.cancel.set()
        watcher.cancel()
