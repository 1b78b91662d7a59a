"""What each documents choice would cost, before the message is sent: ``forecast_documents``.

For a conversation whose last user message has files attached (and/or collections chosen), counts with the model's
tokenizer and chat template, without running the model, the prompt each choice would give: the whole text
("whole") and the retrieved passages that fit ("retrieve", from a real search), the tokens each adds, how many of
the prompt's tokens the KV cache already holds (a follow-up on a document put whole finds its prefix cached), and
which one the policy takes (``engine.docs.grounding.choose_mode``, the same as the send's ``ground``), with the
reason when the whole text does not fit. The window shows these beside a TTFT forecast while the user types
(``app.window.docs_forecast``); ``engine chat --doc --json`` prints them as ``docs_forecast``.

Owns ``DocsForecast``/``ChoiceFigures`` and ``AttachedIndex``: the attached files read and indexed once for the
forecasts made while typing (a file changed on disk is read again), since each pause in typing asks again and
indexing with embeddings takes seconds where a search takes milliseconds. Does not own the policy or the prompt's
wording (``engine.docs.grounding``), the send's grounding (``engine.docs.attach.ground_conversation``), the rates
or the times (the window's), nor the thread: it runs where the model lives, one call at a time.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal, Sequence

from engine import paths
from engine.docs.grounding import Budget, Source, choose_mode, document_sources, ground, grounded_message, \
    hit_sources
from engine.errors import BadInputError, ContextTooLongError
from engine.events import Message
from engine.generate.measure import PromptMeasure, shared_prefix

RETRIEVED_PER_SEARCH = 6  # as engine.docs.attach: passages asked of each search, kept best first while they fit
_ATTACHED = "attached"


@dataclass(frozen=True)
class ChoiceFigures:
    """One choice's prompt, counted."""

    mode: Literal["whole", "retrieve"]
    source_tokens: int  # tokens the sources add to the message (separators included)
    passages: int  # sources put in: pages (or files) of whole text, or passages retrieved
    prompt_tokens: int  # the rendered prompt with them: system, history, instruction, sources, question
    cached_tokens: int  # of those, the prefix the KV cache already holds (never the last: it is computed)
    fits: bool  # within the room the context leaves beside the conversation and the reply
    seconds: float  # reading the files (whole) or searching (retrieve) for this forecast

    @property
    def new_tokens(self) -> int:
        """Prompt tokens prefill must compute: what the TTFT forecast divides by the prefill rate."""
        return self.prompt_tokens - self.cached_tokens

    def as_json(self) -> dict[str, object]:
        return {"source_tokens": self.source_tokens, "passages": self.passages, "prompt_tokens": self.prompt_tokens,
                "cached_tokens": self.cached_tokens, "prefill_tokens": self.new_tokens, "fits": self.fits,
                "seconds": round(self.seconds, 4)}


@dataclass(frozen=True)
class DocsForecast:
    """Both choices and the one sending will take."""

    requested: str  # auto, whole or retrieve
    chosen: Literal["whole", "retrieve"]  # what the send's policy takes (forced "whole" that does not fit: refused)
    whole: ChoiceFigures | None  # None: nothing to put whole (only collections)
    retrieve: ChoiceFigures | None  # None: no passage fits (``reason`` says so)
    room: int  # tokens the sources may add
    retrieval: str | None  # "hybrid" or "keyword"
    reason: str | None  # why the whole text is not used (or cannot be), or why no passage fits; None when all fit

    def as_json(self) -> dict[str, object]:
        return {"requested": self.requested, "chosen": self.chosen, "room": self.room, "retrieval": self.retrieval,
                "reason": self.reason,
                "whole_tokens": None if self.whole is None else self.whole.source_tokens,
                "retrieve_tokens": None if self.retrieve is None else self.retrieve.source_tokens,
                "whole": None if self.whole is None else self.whole.as_json(),
                "retrieve": None if self.retrieve is None else self.retrieve.as_json()}


@dataclass(frozen=True)
class MeasureWithDocuments:
    """What the window's meter gets back for a message with documents: the plain message measured as before
    (``engine.generate.measure``) and both choices, or the one line saying why they could not be counted."""

    prompt: PromptMeasure  # the message without its documents: its own tokens
    documents: DocsForecast | None
    error: str | None = None  # e.g. an attached file that cannot be read


class AttachedIndex:
    """The attached files' whole text and a temporary index of them, kept between forecasts; one thread uses it.

    A file is read again when its size or modification time changed; the index is rebuilt when the set of files
    (or one of them) changed. The embedding model is loaded once (None: keyword search, as ``retrieve_passages``).
    The engine core keeps one (``engine.core.core``), its embedder on the core's model shelf: the send's
    ``ground_conversation`` uses what the forecast made.
    """

    def __init__(self, load_embedder: Callable[[], Any] | None = None) -> None:
        # Who keeps the embedding model: the engine core's model shelf (asked each time: it may have unloaded it
        # for its budget), else this index, once.
        self._load_embedder = load_embedder
        self._folder: tempfile.TemporaryDirectory[str] | None = None
        self._read: dict[tuple[str, int, int], list[Source]] = {}
        self._indexed: tuple[tuple[str, int, int], ...] | None = None
        self._generation = 0
        self._embedder: Any = None
        self._embedder_loaded = False

    @staticmethod
    def _key(path: str) -> tuple[str, int, int]:
        try:
            stat = Path(path).stat()
        except OSError:
            return path, -1, -1  # read_document says why in one line
        return path, stat.st_mtime_ns, stat.st_size

    def whole(self, docs: Sequence[str]) -> list[Source]:
        """The files' sources as put whole (one per PDF page); ``DocumentError`` for a file that cannot be read."""
        from engine.docs.readers import read_document

        sources: list[Source] = []
        keys = [self._key(path) for path in docs]
        for key in keys:
            if key not in self._read:
                self._read[key] = document_sources(read_document(Path(key[0])))
            sources += self._read[key]
        self._read = {key: self._read[key] for key in keys}  # only the files attached now stay in memory
        return sources

    def embedder(self) -> Any:
        if self._load_embedder is not None:
            return self._load_embedder()
        if not self._embedder_loaded:
            from engine.docs.embed import embedder_for_search

            self._embedder, self._embedder_loaded = embedder_for_search(), True
        return self._embedder

    def search(self, question: str, docs: Sequence[str], collections: Sequence[str]) -> tuple[list[Source], str]:
        """The best passages of ``docs`` and ``collections``, best first (as ``retrieve_passages``), and the ranking."""
        from engine.docs.index import index_paths
        from engine.docs.retrieve import search
        from engine.docs.store import DocumentStore

        embedder = self.embedder()
        found = []
        if docs:
            keys = tuple(self._key(path) for path in docs)
            if self._folder is None:
                self._folder = tempfile.TemporaryDirectory(prefix="miaohui-forecast-")
            if keys != self._indexed:  # other files (or changed ones): a fresh store, the old one removed
                for stale in Path(self._folder.name).glob("attached-*.sqlite3*"):
                    stale.unlink(missing_ok=True)
                self._generation += 1
            store_path = Path(self._folder.name) / f"attached-{self._generation}.sqlite3"
            with DocumentStore(store_path) as store:
                if keys != self._indexed:
                    index_paths(store, _ATTACHED, [Path(path) for path in docs], embedder=embedder)
                    self._indexed = keys
                found.append(search(store, question, [_ATTACHED], k=RETRIEVED_PER_SEARCH, embedder=embedder))
        if collections:
            with DocumentStore(paths.documents_path()) as store:
                found.append(search(store, question, list(collections), k=RETRIEVED_PER_SEARCH, embedder=embedder))
        # Both searches' scores are RRF sums over the same two rankings' ranks, so they compare.
        hits = sorted((hit for result in found for hit in result.hits), key=lambda hit: -hit.score)
        return hit_sources(hits), "hybrid" if embedder is not None else "keyword"

    def close(self) -> None:
        if self._folder is not None:
            self._folder.cleanup()
        self._folder, self._indexed = None, None


def forecast_documents(tokenizer: Any, context_length: int, messages: Sequence[Message], docs: Sequence[str],
                       requested: str, max_new_tokens: int, collections: Sequence[str] = (),
                       cached_ids: Sequence[int] = (), index: AttachedIndex | None = None) -> DocsForecast:
    """Both choices for ``messages`` (the last: the user's question) grounded in ``docs`` and ``collections``,
    counted as ``ground_conversation`` would build them, against ``cached_ids`` (what the conversation's KV cache
    holds). ``DocumentError`` for a file that cannot be read; ``BadInputError`` for an empty question or for "whole"
    with only collections."""
    from engine.generate.context import render

    if not messages or messages[-1].role != "user":
        raise BadInputError("documents are attached to a user message")
    if not docs and not collections:
        raise BadInputError("no documents to forecast: attach a file or choose a collection")
    if not docs and requested == "whole":  # a conversation's mode holds for all its turns: a turn with only
        requested = "retrieve"  # collections is searched (a collection is never put whole), as its send is
    index = index or AttachedIndex()
    question, history = messages[-1].content, list(messages[:-1])
    count = lambda text: len(tokenizer.encode(text, add_special_tokens=False))  # noqa: E731
    started = time.perf_counter()
    whole = index.whole(docs)
    read_s = time.perf_counter() - started
    frame = render(tokenizer, history + [Message("user", grounded_message(question, []))])
    budget = Budget(context_tokens=context_length, conversation_tokens=len(frame), reply_tokens=max_new_tokens)

    def figures(mode: Literal["whole", "retrieve"], sources: Sequence[Source], source_tokens: int, fits: bool,
                seconds: float) -> ChoiceFigures:
        ids = render(tokenizer, history + [Message("user", grounded_message(question, sources))])
        cached = max(0, min(shared_prefix(cached_ids, ids), len(ids) - 1))
        return ChoiceFigures(mode, source_tokens, len(sources), len(ids), cached, fits, seconds)

    retrieval: list[str] = []
    searched: list[float] = []

    def retrieve() -> list[Source]:
        began = time.perf_counter()
        sources, kind = index.search(question, docs, collections)
        searched.append(time.perf_counter() - began)
        retrieval.append(kind)
        return sources

    reason = None
    try:  # the send's own policy and fitting, forced to retrieve: its passages and, on the way, the whole text's cost
        grounding = ground(question, whole, retrieve, "retrieve", budget, count)
        retrieved = figures("retrieve", grounding.sources, grounding.source_tokens, True, sum(searched))
        whole_tokens, room = grounding.whole_tokens, grounding.room
    except ContextTooLongError as exc:  # not even one passage fits
        retrieved, reason = None, str(exc)
        whole_tokens = ground(question, whole, list, "retrieve", budget, count).whole_tokens if whole else None
        room = budget.room
    whole_figures = None
    if whole and whole_tokens is not None:
        whole_figures = figures("whole", whole, whole_tokens, whole_tokens <= room, read_s)
        if whole_tokens > room:
            reason = (f"the documents are {whole_tokens} tokens but {room} fit beside the conversation and the reply "
                      f"(context {context_length})")
    chosen = choose_mode(requested, whole_tokens, room)
    return DocsForecast(requested=requested, chosen=chosen, whole=whole_figures, retrieve=retrieved, room=room,
                        retrieval=retrieval[0] if retrieval else None, reason=reason)
