"""Saving a message's images (schema v11's ``messages.images``; the cell's form is ``app.history.images_cell``).

Owns ``save_images``, the cell's one write, through the store's own transaction as ``app.history.documents`` does; the
window calls it once a user message with images is saved (``app.window.documents_keeping``).
"""

from __future__ import annotations

from typing import Sequence

from app.history.images_cell import images_to_json
from app.history.store import HistoryStore, NotFoundError


def save_images(store: HistoryStore, mid: int, images: Sequence[str]) -> None:
    """Keep message ``mid``'s images (store paths); ``NotFoundError`` when the message is gone."""
    with store._write() as c:
        if c.execute("UPDATE messages SET images = ? WHERE id = ?", (images_to_json(images), mid)).rowcount == 0:
            raise NotFoundError(f"message {mid} not found")
