"""Text → the terms the FTS5 index holds, and a question → an FTS5 MATCH expression; Chinese segmented into words.

Owns the one segmentation rule that indexing and searching must share. Does not own the index (store.py).

Why segment before FTS5: its unicode61 tokenizer splits on spaces and punctuation, so a Chinese sentence, which has
neither between words, would be one token and a query word inside it would never match. rjieba (jieba-rs) cuts it
into words; ``cut_for_search`` also emits the shorter words inside long ones (北京大学 → 北京, 大学, 北京大学), so a
query for 大学 matches. English passes through as words and FTS5's porter stemmer matches "indexing" to "indexed".
The trigram tokenizer would match Chinese without a segmenter, but not one- or two-character words, the most common.
"""

from __future__ import annotations

import re

import rjieba

_WORD = re.compile(r"\w", re.UNICODE)  # a term with no letter or digit (punctuation, spaces) is dropped
MAX_QUERY_TERMS = 64  # a pasted page as a query: the first 64 distinct terms carry it; FTS5 slows past hundreds


def terms(text: str) -> list[str]:
    """``text``'s search terms in order, lower-cased."""
    return [term for term in (piece.strip().lower() for piece in rjieba.cut_for_search(text))
            if term and _WORD.search(term)]


def index_text(text: str) -> str:
    """What the FTS5 column holds for ``text``: its terms separated by spaces."""
    return " ".join(terms(text))


def match_expression(query: str) -> str | None:
    """An FTS5 MATCH expression that ranks passages holding any of ``query``'s terms (bm25 weighs the rare ones);
    None when the query has no term."""
    unique: list[str] = []
    for term in terms(query):
        if term not in unique:
            unique.append(term)
    if not unique:
        return None
    # Each term is a quoted string, so FTS5 reads none of the user's text as an operator (AND, NEAR, column:).
    return " OR ".join('"' + term.replace('"', '""') + '"' for term in unique[:MAX_QUERY_TERMS])
