"""Find the passages a question needs: keyword (FTS5 bm25) and dense (cosine) rankings fused by reciprocal rank.

Owns: the fusion and the result type. Does not own either ranking (store.py runs them) nor any prompt that quotes
the passages.

Why reciprocal rank fusion (Cormack et al., 2009): bm25 scores and cosines live on scales that cannot be added, and
RRF needs no tuning beyond its constant: a passage's score is Σ 1/(k + rank) over the rankings it appears in, so one
ranked first by both wins, and one found by only one ranking still competes. k = 60 is the paper's value.
Without an embedding model the dense ranking is skipped and ``Retrieval.mode`` says "keyword", with a note to show
once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

from engine.docs.embed import Embedder
from engine.docs.store import DocumentStore
from engine.errors import BadInputError

RRF_K = 60
CANDIDATES = 50  # passages taken from each ranking before fusion
KEYWORDS_ONLY_NOTE = ("no embedding model installed: searching by keywords only "
                      "(`python -m engine docs fetch-embedder` adds meaning-based search)")


@dataclass(frozen=True)
class Hit:
    """One retrieved passage."""

    path: str
    page: int | None  # the PDF page; None where the format has no pages
    heading: str
    text: str
    score: float  # the fused RRF score (higher is better); comparable within one search only
    collection: str

    def as_json(self) -> dict[str, object]:
        return {"path": self.path, "page": self.page, "heading": self.heading, "text": self.text,
                "score": round(self.score, 6), "collection": self.collection}


@dataclass(frozen=True)
class Retrieval:
    hits: tuple[Hit, ...]
    mode: str  # "hybrid" (keyword + dense) or "keyword"
    note: str | None  # a line to show the user once, or None
    seconds: float


def rrf(rankings: Sequence[Sequence[int]], k: int = RRF_K) -> list[tuple[int, float]]:
    """Reciprocal rank fusion of ranked id lists (best first): (id, Σ 1/(k + rank)), best first, ties by first
    appearance."""
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, start=1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda pair: -pair[1])


def search(store: DocumentStore, query: str, collections: Sequence[str], *, k: int = 5,
           embedder: Embedder | None = None) -> Retrieval:
    """The ``k`` passages of ``collections`` (all of them when empty) that best answer ``query``."""
    if not query.strip():
        raise BadInputError("the search query is empty")
    if k < 1:
        raise BadInputError(f"--k must be at least 1, not {k}")
    started = time.perf_counter()
    names = list(collections) or [info.name for info in store.collections()]
    ids = [store.collection_id(name) for name in names]
    keyword = [pid for pid, _ in store.keyword_search(query, ids, CANDIDATES)]
    rankings = [keyword]
    if embedder is not None:
        vector = embedder.embed([query])[0]  # (dim,)
        rankings.append([pid for pid, _ in store.dense_search(vector, embedder.name, ids, CANDIDATES)])
    fused = rrf(rankings)[:k]
    found = store.passages([pid for pid, _ in fused])
    hits = tuple(Hit(path=p.path, page=p.page, heading=p.heading, text=p.text, score=score, collection=p.collection)
                 for pid, score in fused if (p := found.get(pid)) is not None)
    return Retrieval(hits=hits, mode="hybrid" if embedder is not None else "keyword",
                     note=None if embedder is not None else KEYWORDS_ONLY_NOTE,
                     seconds=time.perf_counter() - started)
