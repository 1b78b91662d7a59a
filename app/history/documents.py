"""Saving a message's documents (schema v8's ``messages.documents``: the cell's form is ``app.history.documents_cell``).

Owns ``save_documents``, the cell's one write: through the store's own transaction, as ``app.history.versions`` does,
so the files and sources are as durable as the message they belong to. The window calls it once a user message with
attached files is saved and once a grounded reply ends (``app.window.documents_keeping``).
"""

from __future__ import annotations

from typing import Sequence

from app.history.documents_cell import documents_to_json
from app.history.store import HistoryStore, NotFoundError, _clean_text
from engine.docs.attach import DocumentsUsed


def save_documents(store: HistoryStore, mid: int, attachments: Sequence[str] = (),
                   used: DocumentsUsed | None = None) -> None:
    """Keep message ``mid``'s attached files (a user message) or sources (a reply); ``NotFoundError`` when gone."""
    with store._write() as c:
        cur = c.execute("UPDATE messages SET documents = ? WHERE id = ?",
                        (_clean_text(documents_to_json(attachments, used)), mid))
        if cur.rowcount == 0:
            raise NotFoundError(f"message {mid} not found")
