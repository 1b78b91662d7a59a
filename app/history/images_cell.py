"""A message's images in the history (schema v11's ``messages.images``, issue 44): the cell's form.

The cell is '' or a JSON list of content addresses, ``"<sha256>.<format>"`` (``engine.vision.image_store``): the
pixels live once in the images folder beside the history, so a fork or a reply version that keeps the message keeps
the same files, and moving the data folder moves them with it (no absolute path is stored). In memory a message's
images are those files' paths. Owns the cell's form and telling an image file from a document by its name; not the
cell's write (``app.history.images``), the image files (``app.window.attachments`` puts them in the store) nor the
schema.
"""

from __future__ import annotations

import json
from pathlib import PurePath
from typing import Any, Sequence

from engine.errors import ImageError
from engine.vision import image_store

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp")


def is_image_file(path: str) -> bool:
    """Whether ``path`` names an image (what the composer keeps as a picture, not a document to read)."""
    return PurePath(path).suffix.lower() in IMAGE_SUFFIXES


def images_to_json(images: Sequence[str]) -> str:
    """The cell for a message's image files (store paths): '' for none."""
    return json.dumps([PurePath(path).name for path in images]) if images else ""


def images_from_json(cell: Any) -> tuple[tuple[str, ...], bool]:
    """(image file paths, damaged) from a stored cell; an address that is not one is left out, ``damaged`` True."""
    if cell is None or cell == "":
        return (), False
    try:
        names = json.loads(cell)
    except (TypeError, ValueError):
        return (), True
    if not isinstance(names, list):
        return (), True
    found: list[str] = []
    damaged = False
    for name in names:
        sha, _, fmt = str(name).partition(".")
        try:
            found.append(str(image_store.path_for(sha, fmt)))
        except ImageError:
            damaged = True
    return tuple(found), damaged
