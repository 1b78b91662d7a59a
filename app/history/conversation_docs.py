"""What a conversation answers from (schema v10's ``conversations.documents``): the collections the user picked for it
and its documents mode, read defensively (a damaged cell reads as none).

Owns ``DocsChoice`` and the cell's JSON form ``{"collections": [name, …], "mode": "auto"|"whole"|"retrieve"}`` ('' for a
conversation that picked nothing: no collection and the mode "auto"), its one write (``save_choice``, through the
store's own transaction, as ``app.history.documents`` does) and its read (``load_choice``). Does not own which
collections exist (the documents store, ``engine.docs.store``) nor the composer's button (``app.window.docs_choice``).
A fork copies the cell (``HistoryStore.fork_conversation``), the salvage of a damaged file keeps it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from app.history.store import HistoryStore, NotFoundError, _clean_text

MODES = ("auto", "whole", "retrieve")  # engine.docs.grounding.MODES (the app imports none of its heavier module)


@dataclass(frozen=True)
class DocsChoice:
    """A conversation's collections (searched for every question) and documents mode (whole text, retrieved
    passages, or auto: whole when the attached files fit the context)."""

    collections: tuple[str, ...] = ()
    mode: str = "auto"

    @property
    def empty(self) -> bool:
        return not self.collections and self.mode == "auto"


def choice_to_json(choice: DocsChoice) -> str:
    """The cell: '' for the choice every conversation starts with."""
    if choice.empty:
        return ""
    return json.dumps({"collections": list(choice.collections), "mode": choice.mode}, ensure_ascii=False)


def choice_from_json(cell: Any) -> tuple[DocsChoice, bool]:
    """(the choice, damaged) from a stored cell; anything unreadable is the empty choice, ``damaged`` True."""
    if cell is None or cell == "":
        return DocsChoice(), False
    try:
        data = json.loads(cell)
    except (TypeError, ValueError):
        return DocsChoice(), True
    if not isinstance(data, dict):
        return DocsChoice(), True
    collections, mode = data.get("collections", []), data.get("mode", "auto")
    if not isinstance(collections, list) or not all(isinstance(name, str) and name for name in collections) \
            or mode not in MODES:
        return DocsChoice(), True
    return DocsChoice(tuple(dict.fromkeys(collections)), mode), False


def save_choice(store: HistoryStore, cid: int, choice: DocsChoice) -> None:
    """Keep conversation ``cid``'s choice; ``NotFoundError`` when it is gone."""
    with store._write() as c:
        cur = c.execute("UPDATE conversations SET documents = ? WHERE id = ?",
                        (_clean_text(choice_to_json(choice)), cid))
        if cur.rowcount == 0:
            raise NotFoundError(f"conversation {cid} not found")


def load_choice(store: HistoryStore, cid: int) -> DocsChoice:
    """Conversation ``cid``'s choice; the empty one when it has none, is damaged, or the file is older and read-only
    (its table has no such column: the store reads it as nothing)."""
    rows = store._read("SELECT documents FROM conversations WHERE id = ?", (cid,))
    return choice_from_json(rows[0][0])[0] if rows else DocsChoice()
