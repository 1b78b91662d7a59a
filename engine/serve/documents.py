"""Chat requests answered from the user's collections (issue 43): the ``miaohui`` extra body field.

A client names collections with ``"miaohui": {"collections": ["notes"], "docs_mode": "auto"}`` (the ``openai``
client's ``extra_body``). The last user message is then grounded exactly as ``engine chat --collection`` grounds it
(``engine.docs.attach.retrieve_passages`` and ``engine.docs.grounding.ground``: the instruction, the numbered
retrieved passages, the question), measured against the model's context with its own tokenizer, and the response
carries what the model was given as ``miaohui`` (``sources``, ``docs_mode``, ``retrieval``, ``docs_tokens``): in the
JSON body, and in the final chunk of a stream.

Owns the field's validation (400 per bad part, 404 for a collection the data folder's store does not hold) and the
grounding of one request. Runs off the event loop (``asyncio.to_thread``): reading SQLite and embedding a question
take milliseconds to seconds. The tokenizer is only read (encode and the template), never changed, so sharing it
with the worker thread is safe. A collection is searched, never put whole: ``docs_mode`` "whole" is refused.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from engine import paths
from engine.docs.grounding import MODES, Budget, ground, grounded_message
from engine.errors import BadInputError, ContextTooLongError
from engine.events import Message
from engine.serve.errors import ApiError

PARAM = "miaohui"
UNLIMITED_REPLY_SHARE = 4  # no max_tokens: a quarter of the context is kept for the reply when sources are chosen


@dataclass(frozen=True)
class DocsRequest:
    """The collections a chat request names and how their passages are chosen."""

    collections: tuple[str, ...]
    mode: str  # "auto" or "retrieve" (collections are always retrieved)


def parse_docs(field: Any) -> DocsRequest | None:
    """The ``miaohui`` field, checked; None when absent or naming no collection."""
    if field is None:
        return None
    if not isinstance(field, dict):
        raise ApiError(400, "miaohui must be an object, e.g. {\"collections\": [\"notes\"]}", param=PARAM)
    unknown = sorted(set(field) - {"collections", "docs_mode"})
    if unknown:
        raise ApiError(400, f"miaohui does not take {', '.join(unknown)}: only collections and docs_mode",
                       param=PARAM)
    names = field.get("collections", [])
    if not isinstance(names, list) or not all(isinstance(name, str) and name.strip() for name in names):
        raise ApiError(400, "miaohui.collections must be a list of collection names", param=f"{PARAM}.collections")
    mode = field.get("docs_mode", "auto")
    if mode not in MODES:
        raise ApiError(400, f"miaohui.docs_mode must be one of {', '.join(MODES)}, not {mode!r}",
                       param=f"{PARAM}.docs_mode")
    if mode == "whole":
        raise ApiError(400, "a collection is searched, not put in whole: use docs_mode auto or retrieve",
                       param=f"{PARAM}.docs_mode")
    return DocsRequest(tuple(dict.fromkeys(names)), mode) if names else None


def check_collections(names: tuple[str, ...]) -> None:
    """404 naming the first collection the data folder's document store does not hold."""
    from engine.docs.store import DocumentStore

    path = paths.documents_path()
    held = set()
    if path.exists():
        with DocumentStore(path) as store:
            held = {info.name for info in store.collections()}
    for name in names:
        if name not in held:
            raise ApiError(404, f"no collection named {name!r} in this server's data folder: "
                                "`python -m engine docs list` shows them", param=f"{PARAM}.collections",
                           code="collection_not_found")


def ground_request(parsed: Any, tokenizer: Any, context_length: int) -> tuple[Any, dict[str, Any]]:
    """(``parsed`` with its last user message grounded in ``parsed.docs``'s collections, the response's ``miaohui``
    field). 400 when the last message is not the user's or no passage fits the context."""
    from engine.docs.attach import retrieve_passages, token_counter
    from engine.generate.context import render

    docs: DocsRequest = parsed.docs
    check_collections(docs.collections)
    messages = list(parsed.messages)
    if not messages or messages[-1].role != "user" or not messages[-1].content.strip():
        raise ApiError(400, "collections answer the last message: it must be the user's question", param="messages")
    question, history = messages[-1].content, messages[:-1]
    reply = parsed.config.max_new_tokens
    if reply >= context_length:  # no max_tokens: the reply may run to the context's end, keep it some room
        reply = context_length // UNLIMITED_REPLY_SHARE
    frame = render(tokenizer, history + [Message("user", grounded_message(question, []))])
    budget = Budget(context_tokens=context_length, conversation_tokens=len(frame), reply_tokens=reply)
    retrieval: list[str] = []

    def retrieve() -> list:
        sources, kind = retrieve_passages(question, (), docs.collections)
        retrieval.append(kind)
        return sources

    try:
        grounding = ground(question, [], retrieve, docs.mode, budget, token_counter(tokenizer))
    except (BadInputError, ContextTooLongError) as exc:
        code = "context_length_exceeded" if isinstance(exc, ContextTooLongError) else None
        raise ApiError(400, str(exc), param="messages", code=code) from None
    extra = {"sources": [source.as_json(n) for n, source in enumerate(grounding.sources, start=1)],
             "docs_mode": grounding.mode, "retrieval": retrieval[0] if retrieval else None,
             "docs_tokens": grounding.source_tokens}
    grounded = tuple(history) + (Message("user", grounding.message),)
    return dataclasses.replace(parsed, messages=grounded), extra
