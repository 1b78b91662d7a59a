"""A message's documents as history keeps them (schema v8's ``messages.documents``): a user message's attached files
and a reply's sources, one JSON object per cell, read defensively (a damaged cell reads as none, flagged repaired).

Owns the cell's JSON form (the write is ``app.history.documents``'s ``save_documents``). A user message's cell is
``{"attachments": [path, …]}``: absolute paths, so a Regenerate after reopening grounds the question in the same files
again. A reply's is ``{"mode", "retrieval", "source_tokens", "prepare_s", "sources": [{"n", "path", "page", "text",
"score"}]}``: the sources' text is kept whole, so the conversation the engine sees on a later turn holds the very
grounded message the first reply answered (``app.window.turn_notes``), whatever happened to the files since.
Does not own grounding (``engine.docs``) nor how the window shows them (``app.widgets.sources_view``).
"""

from __future__ import annotations

import json
import math
from typing import Any, Sequence

from engine.docs.attach import DocumentsUsed
from engine.docs.grounding import Source

_MODES = ("whole", "retrieve")


def documents_to_json(attachments: Sequence[str] = (), used: DocumentsUsed | None = None) -> str:
    """The cell for a message: '' when it has neither attached files nor sources."""
    cell: dict[str, Any] = {}
    if attachments:
        cell["attachments"] = list(attachments)
    if used is not None:
        cell.update(mode=used.mode, retrieval=used.retrieval, source_tokens=used.source_tokens,
                    prepare_s=used.prepare_s,
                    sources=[source.as_json(n) for n, source in enumerate(used.sources, start=1)])
    return json.dumps(cell, ensure_ascii=False) if cell else ""


def documents_from_json(cell: Any) -> tuple[tuple[str, ...], DocumentsUsed | None, bool]:
    """(attachments, sources used, damaged) from a stored cell; anything unreadable is none, ``damaged`` True."""
    if cell is None or cell == "":
        return (), None, False
    try:
        data = json.loads(cell)
    except (TypeError, ValueError):
        return (), None, True
    if not isinstance(data, dict):
        return (), None, True
    attachments = data.get("attachments", [])
    if not isinstance(attachments, list) or not all(isinstance(path, str) for path in attachments):
        return (), None, True
    if "mode" not in data:
        return tuple(attachments), None, False
    used = _used(data)
    return tuple(attachments), used, used is None


def _used(data: dict) -> DocumentsUsed | None:
    mode, retrieval, tokens, prepare = data.get("mode"), data.get("retrieval"), data.get("source_tokens"), \
        data.get("prepare_s")
    items = data.get("sources")
    if mode not in _MODES or not (retrieval is None or isinstance(retrieval, str)) or not _count(tokens) \
            or not isinstance(items, list) or isinstance(prepare, bool) or not isinstance(prepare, (int, float)):
        return None
    sources = [_source(item) for item in items]
    if any(source is None for source in sources):
        return None
    return DocumentsUsed(mode=mode, sources=tuple(sources), source_tokens=tokens, prepare_s=float(prepare),
                         retrieval=retrieval)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _source(item: Any) -> Source | None:
    if not isinstance(item, dict):
        return None
    path, page, text, score = item.get("path"), item.get("page"), item.get("text"), item.get("score")
    if not isinstance(path, str) or not isinstance(text, str) or not (page is None or _count(page)):
        return None
    if score is not None and (isinstance(score, bool) or not isinstance(score, (int, float))
                              or not math.isfinite(score)):
        return None
    return Source(path=path, page=page, text=text, score=None if score is None else float(score))
