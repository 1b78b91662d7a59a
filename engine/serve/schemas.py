"""Request bodies of the OpenAI API (pydantic) and their translation into engine inputs.

``parse_chat(body)`` and ``parse_completion(body)`` take the raw request bytes and return a ``Parsed``:
the conversation as ``engine.events.Message`` objects, a validated ``engine.inputs.SamplingConfig`` and
the serving options (stop strings, logprobs, stream). Everything wrong with a request is an
``ApiError(400)`` here, before the request is queued: malformed JSON, wrong types (strict: ``"0.5"`` is
not a number), ``n > 1``, an empty or malformed conversation (``engine.generate.context.check_messages``),
sampling values the engine refuses (``SamplingConfig`` raises ``BadInputError``), and features this
server does not have (legacy ``functions``, logit bias, penalties other than 0). ``tools``, ``tool_choice`` and
``response_format`` are ``engine.serve.tools``': a ``Parsed`` carries their plan and the reply's constraint. A user
message's ``image_url`` parts are kept as ``ImageRef``s, unread (``engine.serve.images`` reads them, off the loop).

Defaults are OpenAI's, not the window's: temperature 1, top_p 1, no top-k. ``top_k`` and
``repetition_penalty`` are accepted as extra fields, as vLLM accepts them. Unknown fields are ignored.
A completion's ``prompt`` is raw text, continued with no chat template: see ``parse_completion``.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from engine.errors import BadInputError
from engine.constrain import ConstraintError, ConstraintSpec, check_spec
from engine.events import Message, ToolCall
from engine.generate.context import check_messages
from engine.generate.reasoning import check_template_kwargs
from engine.inputs import MAX_TOP_LOGPROBS, SamplingConfig
from engine.serve.documents import DocsRequest, parse_docs
from engine.serve.errors import ApiError
from engine.serve.images import ImageRef, image_url_of
from engine.serve.stops import check_stops
from engine.serve.tools import ToolPlan, parse_tools, response_constraint, rewrite_messages

TO_CONTEXT_END = 1 << 30  # no max_tokens: the reply may run to the end of the context (the worker caps it there)
COMPLETION_DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions (chat's default is "to the context's end")
ROLE_ALIASES = {"developer": "system"}  # OpenAI's newer name for the system prompt
# SamplingConfig's field names in its messages -> the request's field names.
ENGINE_TO_API = {"max_new_tokens": "max_tokens", "top_logprobs": "top_logprobs"}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)


class StreamOptions(_Strict):
    include_usage: bool | None = None


class ChatMessage(_Strict):
    role: str
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None  # an assistant's calls, fed back (engine.serve.tools)
    tool_call_id: str | None = None  # a tool result's call
    reasoning_content: str | None = None  # an assistant's thought, fed back (given to templates that read it)


class _Common(_Strict):
    """Fields both endpoints share."""

    model: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    n: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    user: str | None = None
    # OpenAI's field: on a server without an API key, the client's own secret scope for the prefix cache
    # (engine.serve.app.cache_scope), so its reuse outlives a connection without another client seeing it.
    prompt_cache_key: str | None = None
    top_k: int | None = None  # vLLM's extra
    repetition_penalty: float | None = None  # vLLM's extra


class ChatCompletionRequest(_Common):
    messages: list[ChatMessage]
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    tools: list[Any] | None = None
    functions: list[Any] | None = None
    tool_choice: Any = None
    function_call: Any = None
    response_format: dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    chat_template_kwargs: dict[str, Any] | None = None  # vLLM's: template variables, e.g. enable_thinking
    miaohui: Any = None  # this server's own: collections to answer from (``engine.serve.documents``)


class CompletionRequest(_Common):
    prompt: str | list[str] | list[int] | list[list[int]]
    max_tokens: int | None = COMPLETION_DEFAULT_MAX_TOKENS
    logprobs: int | None = None
    echo: bool | None = False
    suffix: str | None = None
    best_of: int | None = None


@dataclass(frozen=True)
class Parsed:
    """A validated request, in the engine's terms."""

    model: str | None
    messages: tuple[Message, ...]
    config: SamplingConfig  # max_new_tokens: the request's max_tokens, or TO_CONTEXT_END
    stop: tuple[str, ...]
    logprobs: int | None  # candidates to report per token; None: no logprobs at all
    stream: bool
    include_usage: bool
    text: str | None = None  # a completion's prompt, continued raw (``messages`` is then empty)
    echo: bool = False  # a completion's ``echo``: the prompt goes out before the continuation
    constraint: ConstraintSpec | None = None  # what the reply must follow (response_format, forced tool calls)
    tools: ToolPlan | None = None  # the tools the reply may call
    template_kwargs: dict[str, Any] | None = None  # chat_template_kwargs, checked (engine.generate.reasoning)
    template_tools: tuple[dict[str, Any], ...] | None = None  # the template's ``tools`` (native tool mode)
    cache_key: str | None = None  # ``prompt_cache_key``: the client's prefix-cache scope on a key-less server
    docs: DocsRequest | None = None  # ``miaohui.collections``: the last user message is grounded in them
    images: tuple[ImageRef, ...] = ()  # a chat's image_url parts, unread (``engine.serve.images``)


def _load(body: bytes, model: type[_Strict]) -> Any:
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ApiError(400, f"the request body is not valid JSON: {exc}") from None
    except RecursionError:
        raise ApiError(400, "the request body is nested too deeply") from None
    if not isinstance(data, dict):
        raise ApiError(400, "the request body must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "body"
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        param = str(first["loc"][0]) if first["loc"] else None
        raise ApiError(400, f"{where}: {first['msg']}{more}", param=param) from None


MIN_CACHE_KEY_CHARS = 16


def _unsupported(request: _Common) -> None:
    """Refuse what the engine cannot do rather than silently ignore it."""
    if request.n not in (None, 1):
        raise ApiError(400, "n must be 1: this server generates one choice per request", param="n")
    for name in ("presence_penalty", "frequency_penalty"):
        if getattr(request, name) not in (None, 0, 0.0):
            raise ApiError(400, f"{name} is not supported (use repetition_penalty)", param=name)
    if request.logit_bias:
        raise ApiError(400, "logit_bias is not supported", param="logit_bias")
    key = request.prompt_cache_key
    if key is not None and not MIN_CACHE_KEY_CHARS <= len(key) <= 256:
        # a short key could be guessed by another client, who would then share (and probe) this one's cache
        raise ApiError(400, f"prompt_cache_key must be {MIN_CACHE_KEY_CHARS} to 256 characters (a random secret: it "
                            "scopes this client's prefix cache)", param="prompt_cache_key")


def _stops(stop: str | list[str] | None) -> tuple[str, ...]:
    try:
        return check_stops([stop] if isinstance(stop, str) else list(stop or []))
    except BadInputError as exc:
        raise ApiError(400, str(exc), param="stop") from None


def _config(request: _Common, max_tokens: int | None, top_logprobs: int) -> SamplingConfig:
    try:
        return SamplingConfig(
            temperature=1.0 if request.temperature is None else request.temperature,
            top_p=1.0 if request.top_p is None else request.top_p,
            top_k=request.top_k or 0,
            repetition_penalty=1.0 if request.repetition_penalty is None else request.repetition_penalty,
            max_new_tokens=TO_CONTEXT_END if max_tokens is None else max_tokens,
            seed=request.seed,
            top_logprobs=top_logprobs,
        )
    except BadInputError as exc:
        field = str(exc).split(" ", 1)[0]
        raise ApiError(400, str(exc).replace(field, ENGINE_TO_API.get(field, field), 1),
                       param=ENGINE_TO_API.get(field, field)) from None


def _calls(message: ChatMessage) -> tuple[ToolCall, ...]:
    """An assistant's ``tool_calls``, structured (native tool mode; ``rewrite_messages`` checked their names)."""
    calls = []
    for call in message.tool_calls or [] if message.role == "assistant" else []:
        arguments = call["function"].get("arguments", "{}")
        calls.append(ToolCall(str(call.get("id") or ""), call["function"]["name"],
                              arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)))
    return tuple(calls)


def _messages(raw: list[ChatMessage]) -> tuple[tuple[Message, ...], tuple[ImageRef, ...]]:
    """The conversation, and the ``image_url`` parts of its user messages (``engine.serve.images`` reads them)."""
    messages, images = [], []
    for i, message in enumerate(raw):
        role = ROLE_ALIASES.get(message.role, message.role)
        content = message.content
        if isinstance(content, list):
            texts = []
            for part in content:
                if part.get("type") == "image_url" and role == "user":
                    images.append(ImageRef(i, image_url_of(part, f"messages.{i}.content")))
                    continue
                if part.get("type") != "text" or not isinstance(part.get("text"), str):
                    raise ApiError(400, f"messages.{i}.content: only text parts and (in a user message) image_url "
                                        "parts are supported", param="messages")
                texts.append(part["text"])
            content = "\n".join(texts)
        calls = _calls(message)
        if content is None and calls:
            content = ""
        if content is None:
            raise ApiError(400, f"messages.{i}: a message needs text content (tool calls are not supported)",
                           param="messages")
        messages.append(Message(role, content, message.reasoning_content or "", calls,
                                message.tool_call_id or "" if role == "tool" else ""))
    try:
        return tuple(check_messages(messages)), tuple(images)
    except BadInputError as exc:
        raise ApiError(400, str(exc), param="messages") from None


def _stream_usage(request: _Common) -> bool:
    return bool(request.stream and request.stream_options and request.stream_options.include_usage)


def parse_chat(body: bytes, native: bool = False) -> Parsed:
    """A ``POST /v1/chat/completions`` body, validated; ``native``: the model's template supports tools
    (``engine.tools.calls.native_tools``), so tool turns and ``tools`` go to it as they are."""
    request: ChatCompletionRequest = _load(body, ChatCompletionRequest)
    _unsupported(request)
    if request.functions or request.function_call:
        raise ApiError(400, "functions and function_call are not supported: use tools", param="functions")
    plan = parse_tools(request.tools, request.tool_choice, request.parallel_tool_calls)
    if plan is not None and native:
        plan = dataclasses.replace(plan, native=True)
    constraint = response_constraint(request.response_format)
    if constraint is not None and plan is not None:
        raise ApiError(400, "response_format and tools cannot be used together here: send one", param="response_format")
    if plan is not None and (constraint := plan.constraint()) is not None:
        try:
            check_spec(constraint)
        except ConstraintError as exc:
            raise ApiError(400, f"these tools cannot be forced: {exc}", param="tools") from None
    top = request.top_logprobs
    if top is not None and not request.logprobs and top > 0:
        raise ApiError(400, "top_logprobs needs logprobs: true", param="top_logprobs")
    if top is not None and not 0 <= top <= MAX_TOP_LOGPROBS:
        raise ApiError(400, f"top_logprobs must be between 0 and {MAX_TOP_LOGPROBS} (got {top})",
                       param="top_logprobs")
    logprobs = (top or 0) if request.logprobs else None
    max_tokens = request.max_completion_tokens if request.max_completion_tokens is not None else request.max_tokens
    # The chosen token's probability is computed alongside the candidates: ask the engine for at least one.
    config = _config(request, max_tokens, 0 if logprobs is None else max(1, logprobs))
    try:
        template_kwargs = check_template_kwargs(request.chat_template_kwargs)
    except BadInputError as exc:
        raise ApiError(400, str(exc), param="chat_template_kwargs") from None
    messages, images = _messages(rewrite_messages(request.messages, None if native else plan, native))
    return Parsed(request.model, messages, config, _stops(request.stop), logprobs, bool(request.stream),
                  _stream_usage(request), constraint=constraint, tools=plan, template_kwargs=template_kwargs,
                  template_tools=plan.template_tools() if plan is not None and native else None,
                  cache_key=request.prompt_cache_key, docs=parse_docs(request.miaohui), images=images)


def parse_completion(body: bytes) -> Parsed:
    """A ``POST /v1/completions`` body, validated: a raw text completion (no chat template, so any model).

    ``prompt`` is one string (or a list of exactly one); token-id prompts and several prompts are refused, as
    are ``suffix`` (no fill-in-the-middle) and ``best_of`` > 1. ``echo`` sends the prompt back before the
    continuation; with ``logprobs`` it is refused, since the prompt's own tokens are never scored (OpenAI would
    give them logprobs too). An empty prompt is the engine's ``BadInputError``, a 400 when the job starts.
    """
    request: CompletionRequest = _load(body, CompletionRequest)
    _unsupported(request)
    prompt = request.prompt
    if isinstance(prompt, list):
        if len(prompt) != 1 or not isinstance(prompt[0], str):
            raise ApiError(400, "prompt must be one string: several prompts in one request and token ids are not "
                                "supported", param="prompt")
        prompt = prompt[0]
    if request.suffix:
        raise ApiError(400, "suffix is not supported: this server continues the prompt, it does not fill in text "
                            "before a suffix", param="suffix")
    if request.best_of not in (None, 1):
        raise ApiError(400, "best_of must be 1", param="best_of")
    logprobs = request.logprobs
    if logprobs is not None and not 0 <= logprobs <= MAX_TOP_LOGPROBS:
        raise ApiError(400, f"logprobs must be between 0 and {MAX_TOP_LOGPROBS} (got {logprobs})", param="logprobs")
    if logprobs is not None and request.echo:
        raise ApiError(400, "logprobs with echo is not supported: the prompt's own tokens are not scored",
                       param="logprobs")
    config = _config(request, request.max_tokens, 0 if logprobs is None else max(1, logprobs))
    return Parsed(request.model, (), config, _stops(request.stop), logprobs, bool(request.stream),
                  _stream_usage(request), text=prompt, echo=bool(request.echo), cache_key=request.prompt_cache_key)
