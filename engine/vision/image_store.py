"""Images kept content-addressed in the data folder: ``images/<first two hex digits>/<sha256>.<format>`` (issue 44).

An image attached twice, pasted into two conversations or kept by a fork and a reply version is one file, named by
the SHA-256 of its bytes as the user gave them; the history stores that address, never a copy of the pixels. A file is
written whole or not at all (``engine.paths.replace_file``), and one already there is not written again, so the
store needs no locking between the window and a second process. Owns addressing and writing; not reading or
converting (image_input.py), nor deciding when an image is no longer referenced (the history owns its rows).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from engine import paths
from engine.errors import ImageError
from engine.vision.image_input import FORMATS

_SHA256 = re.compile(r"[0-9a-f]{64}")


def address(data: bytes) -> str:
    """The content address of ``data``: its SHA-256 in hex."""
    return hashlib.sha256(data).hexdigest()


def path_for(sha256: str, fmt: str, root: Path | None = None) -> Path:
    """Where the image ``sha256`` in format ``fmt`` is (or would be) kept; ``ImageError`` for a malformed address
    (an address read back from a damaged history must never name a path outside the folder)."""
    if not _SHA256.fullmatch(sha256) or fmt not in FORMATS.values():
        raise ImageError(f"not an image address: {sha256[:70]!r}.{fmt[:10]!r}")
    return (root or paths.images_dir()) / sha256[:2] / f"{sha256}.{fmt}"


def put(data: bytes, fmt: str, root: Path | None = None) -> Path:
    """Keep ``data`` (an image file's bytes, already read by image_input.read_image, which gave ``fmt``); returns
    its path. Writing the same bytes again costs only the hash."""
    path = path_for(address(data), fmt, root)
    if path.is_file() and path.stat().st_size == len(data):
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    return paths.replace_file(path, lambda handle: handle.write(data))


def get(sha256: str, fmt: str, root: Path | None = None) -> bytes:
    """The bytes kept at ``sha256``; ``ImageError`` when they are missing or no longer match their address."""
    path = path_for(sha256, fmt, root)
    try:
        data = path.read_bytes()
    except OSError:
        raise ImageError(f"image {sha256[:12]}… is missing from {path.parent.parent}") from None
    if address(data) != sha256:
        raise ImageError(f"image {sha256[:12]}… was changed on disk since it was attached")
    return data
