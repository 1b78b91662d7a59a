"""Files attached to one message: measuring each for the window's chip, and grounding the message in them.

Owns: ``AttachedFile`` (what a chip shows once its file is read: pages and tokens), ``measure_attached`` (read one
file, count its whole text with the model's tokenizer), ``retrieve_passages`` (the best passages of attached files,
indexed in a temporary store, and of named collections: ``engine chat --doc`` uses it too), and
``ground_conversation``: the conversation whose last user message is replaced by the one grounded in its attached
files and the conversation's collections
(``engine.docs.grounding``'s instruction, numbered sources and policy), with ``DocumentsUsed``, what the reply
shows under it (its sources, whole or retrieved, the tokens they add, the time it took).

Does not own the policy or the prompt's wording (``engine.docs.grounding``), reading (``engine.docs.readers``) nor
the thread it runs on: the window calls it on its engine thread (``app.runtime.worker``), where the model lives.
Imports nothing heavy at module level (retrieval's store, index and embedder are imported when retrieval runs),
so the window may name these dataclasses.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal, Sequence

from engine import paths
from engine.docs.grounding import Budget, Source, document_sources, ground, grounded_message, hit_sources, \
    sources_block
from engine.docs.readers import read_document
from engine.errors import BadInputError
from engine.events import Message

RETRIEVED_PER_SEARCH = 6  # passages asked of each search; the budget keeps those that fit, best first
ATTACHED = "attached"  # the temporary store's one collection


@dataclass(frozen=True)
class AttachedFile:
    """One attached file, read: what its chip shows."""

    path: str
    pages: int  # PDF pages; 1 for formats without pages
    tokens: int  # its whole text as sources, counted with the model's tokenizer (what putting it whole costs)


@dataclass(frozen=True)
class DocumentsUsed:
    """What the grounded reply was given: shown under the reply and in its footer."""

    mode: Literal["whole", "retrieve"]
    sources: tuple[Source, ...]  # numbered from 1
    source_tokens: int  # tokens the sources added to the prompt
    prepare_s: float  # reading, counting and (when retrieved) searching, before the prompt was built
    retrieval: str | None  # "hybrid" or "keyword" when passages were retrieved, else None


def token_counter(tokenizer: Any) -> Callable[[str], int]:
    return lambda text: len(tokenizer.encode(text, add_special_tokens=False))


def measure_attached(path: str, count: Callable[[str], int]) -> AttachedFile:
    """Read ``path`` and count its text as the sources block would carry it; ``DocumentError`` (one line) when it
    cannot be read."""
    document = read_document(Path(path))
    sources = document_sources(document)
    return AttachedFile(path=path, pages=len(document.pages), tokens=count(sources_block(sources, "en")))


def retrieve_passages(question: str, docs: Sequence[Path], collections: Sequence[str],
                      note: Callable[[str], None] = lambda line: None) -> tuple[list[Source], str]:
    """The best passages of ``docs`` (indexed in a temporary store, removed after) and of ``collections``, best
    first, and the ranking used ("hybrid" with an embedding model, else "keyword", said once through ``note``)."""
    from engine.docs.embed import embedder_for_search
    from engine.docs.index import index_paths
    from engine.docs.retrieve import search
    from engine.docs.store import DocumentStore

    embedder = embedder_for_search()
    found = []
    if docs:
        with tempfile.TemporaryDirectory(prefix="miaohui-attached-") as folder, \
                DocumentStore(Path(folder) / "attached.sqlite3") as store:
            index_paths(store, ATTACHED, list(docs), embedder=embedder)
            found.append(search(store, question, [ATTACHED], k=RETRIEVED_PER_SEARCH, embedder=embedder))
    if collections:
        with DocumentStore(paths.documents_path()) as store:
            found.append(search(store, question, list(collections), k=RETRIEVED_PER_SEARCH, embedder=embedder))
    if embedder is None and found and found[0].note:
        note(found[0].note)
    # Both searches' scores are RRF sums over the same two rankings' ranks, so they compare.
    hits = sorted((hit for result in found for hit in result.hits), key=lambda hit: -hit.score)
    return hit_sources(hits), "hybrid" if embedder is not None else "keyword"


def ground_conversation(tokenizer: Any, context_length: int, messages: Sequence[Message], docs: Sequence[str],
                        mode: str, max_new_tokens: int, collections: Sequence[str] = (),
                        index: Any = None) -> tuple[list[Message], DocumentsUsed]:
    """``messages`` with its last (user) message grounded in ``docs`` and the stored ``collections``, decided by
    ``mode`` against the room the rendered conversation and the reply leave in ``context_length``; ``DocumentError``
    for a file that cannot be read, ``ContextTooLongError`` when nothing fits, ``CollectionNotFoundError`` for a
    collection removed since it was picked. ``index``: an ``engine.docs.forecast.AttachedIndex`` that the forecast
    made while the user typed: the files it read and indexed are used as they are (the same text, the same passages:
    a file changed since is read again), not read and indexed a second time.

    A conversation's mode is chosen once for all its turns (the window keeps it), so a turn with collections and no
    attached file is retrieved even when the mode says "whole": a collection is searched, never put in whole, and
    "whole" means the attached files."""
    from engine.generate.context import render

    if not messages or messages[-1].role != "user":
        raise BadInputError("documents are attached to a user message")
    if not docs and collections and mode == "whole":
        mode = "retrieve"
    started = time.perf_counter()
    question, history = messages[-1].content, list(messages[:-1])
    whole = (index.whole(docs) if index is not None
             else [source for path in docs for source in document_sources(read_document(Path(path)))])
    frame = render(tokenizer, history + [Message("user", grounded_message(question, []))])
    budget = Budget(context_tokens=context_length, conversation_tokens=len(frame), reply_tokens=max_new_tokens)
    retrieval: list[str] = []

    def retrieve() -> list[Source]:
        sources, kind = (index.search(question, docs, collections) if index is not None
                         else retrieve_passages(question, [Path(path) for path in docs], collections))
        retrieval.append(kind)
        return sources

    grounding = ground(question, whole, retrieve, mode, budget, token_counter(tokenizer))
    used = DocumentsUsed(mode=grounding.mode, sources=grounding.sources, source_tokens=grounding.source_tokens,
                         prepare_s=time.perf_counter() - started, retrieval=retrieval[0] if retrieval else None)
    return history + [Message("user", grounding.message)], used
