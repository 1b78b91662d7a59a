"""Index files and folders into a collection: walk, read, cut, embed, store; only files whose content changed.

Owns: the walk (folders recursively, symlinked folders followed once, loops and hidden or tool folders skipped), the
content-hash check that skips unchanged files, removing from the collection the files gone from a re-indexed folder,
one progress line per file, and for a window's progress bar one ``FileProgress`` before and after each file
(``on_file``); a ``cancel`` event is looked at between files, so a cancelled run keeps every file indexed before it.
Each file is its own transaction, so a file that fails (too large, binary, no text
layer, vanished mid-walk) is one line and nothing else in the collection changes. Does not own reading (readers.py),
cutting (chunking.py), the schema (store.py) or the model (embed.py).
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Literal, Sequence

from engine.docs.chunking import ChunkConfig, chunk
from engine.docs.embed import Embedder
from engine.docs.readers import ReadLimits, is_supported, read_bytes, read_document
from engine.docs.store import DocumentStore
from engine.errors import DocumentError, printable

Progress = Callable[[str], None]
FileStatus = Literal["reading", "added", "updated", "unchanged", "failed"]
# Folders that hold tools' files, not the user's documents: walking node_modules or a venv would index thousands of
# files nobody asked about.
SKIPPED_FOLDERS = frozenset({"node_modules", "__pycache__", "venv", "site-packages", "dist", "build", "target"})
EMBED_BATCH = 256  # passages embedded per call when filling in missing vectors


@dataclass(frozen=True)
class IndexReport:
    added: int  # files new to the collection
    updated: int  # files whose content changed since they were indexed
    unchanged: int  # same hash: not read again
    failed: int  # a one-line error each, printed as it happened
    removed: int  # files gone from a re-indexed folder, taken out of the collection
    passages: int  # passages written by this run
    embedded: int  # passages given a vector by this run
    seconds: float
    cancelled: bool = False


@dataclass(frozen=True)
class FileProgress:
    """Where a run is: ``done`` of ``total`` files finished, and what happened to ``path`` (``reading``: it is being
    read now; ``failed``: ``error`` says why in one line)."""

    done: int
    total: int
    path: str
    status: FileStatus
    error: str = ""


def walk(inputs: Sequence[Path], progress: Progress) -> Iterator[Path]:
    """The files under ``inputs`` (a file given by name is yielded whatever its suffix, so it gets its own error
    line); inside folders only supported suffixes, hidden and tool folders skipped, each real folder visited once."""
    seen: set[tuple[int, int]] = set()
    for root in inputs:
        root = Path(root)
        if not root.is_dir():
            yield root
            continue
        for folder, dirs, files in os.walk(root, followlinks=True, onerror=lambda exc: progress(
                f"skipped {printable(exc.filename)}: {exc.strerror or type(exc).__name__}")):
            try:
                info = os.stat(folder)
            except OSError:
                dirs[:] = []
                continue
            if (info.st_dev, info.st_ino) in seen:  # a symlink loop, or a folder reached twice
                progress(f"skipped {printable(folder)}: already indexed through another path (a symlink loop?)")
                dirs[:] = []
                continue
            seen.add((info.st_dev, info.st_ino))
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIPPED_FOLDERS)
            for name in sorted(files):
                path = Path(folder) / name
                if not name.startswith(".") and is_supported(path):
                    yield path


def index_paths(store: DocumentStore, collection: str, inputs: Sequence[Path], *, embedder: Embedder | None = None,
                limits: ReadLimits = ReadLimits(), chunking: ChunkConfig = ChunkConfig(),
                progress: Progress = lambda line: None, cancel: threading.Event | None = None,
                on_file: Callable[[FileProgress], None] = lambda event: None) -> IndexReport:
    """Bring ``collection`` (created if missing) up to date with ``inputs``; ``cancel`` set stops it before the next
    file (the report says ``cancelled``; files gone from a folder are then not removed, nor vectors filled in)."""
    started = time.perf_counter()
    collection_id = store.collection_id(collection, create=True)
    store.add_sources(collection_id, [str(Path(p).absolute()) for p in inputs])  # what a re-index walks again
    counts = dict(added=0, updated=0, unchanged=0, failed=0, removed=0, passages=0, embedded=0)
    files = list(walk(inputs, progress))
    seen: set[str] = set()
    cancelled = False
    for number, path in enumerate(files, start=1):
        if cancel is not None and cancel.is_set():
            cancelled = True
            break
        key = str(path.absolute())
        seen.add(key)
        prefix = f"[{number}/{len(files)}] {printable(path)}"
        on_file(FileProgress(number - 1, len(files), key, "reading"))
        try:
            data = read_bytes(path, limits)
            sha256 = hashlib.sha256(data).hexdigest()
            before = store.file_hash(collection_id, key)
            if before == sha256:
                counts["unchanged"] += 1
                progress(f"{prefix}: unchanged")
                on_file(FileProgress(number, len(files), key, "unchanged"))
                continue
            document = read_document(path, limits, data)
            passages = chunk(document, chunking)
            vectors = embedder.embed([_embedded_text(p.heading, p.text) for p in passages]) \
                if embedder is not None and passages else None
            store.put_file(collection_id, key, sha256=sha256, size=document.size, kind=document.kind,
                           pages=len(document.pages), passages=passages, vectors=vectors,
                           model=embedder.name if vectors is not None else None)
        except DocumentError as exc:
            counts["failed"] += 1
            progress(f"{prefix}: skipped: {exc}")
            on_file(FileProgress(number, len(files), key, "failed", str(exc)))
            continue
        counts["updated" if before else "added"] += 1
        counts["passages"] += len(passages)
        counts["embedded"] += 0 if vectors is None else len(vectors)
        pages = f", {len(document.pages)} pages" if document.kind == "pdf" else ""
        progress(f"{prefix}: {'updated' if before else 'added'}, {len(passages)} passages{pages}")
        on_file(FileProgress(number, len(files), key, "updated" if before else "added"))
    if not cancelled:
        counts["removed"] = _forget_vanished(store, collection_id, inputs, seen, progress)
        if embedder is not None:
            counts["embedded"] += fill_vectors(store, collection_id, embedder, progress)
    return IndexReport(**counts, seconds=time.perf_counter() - started, cancelled=cancelled)


def fill_vectors(store: DocumentStore, collection_id: int, embedder: Embedder, progress: Progress) -> int:
    """Embed the passages of the collection that have no vector from ``embedder`` (indexed while no embedding model
    was installed); returns how many."""
    missing = store.passages_without_vectors(collection_id, embedder.name)
    for start in range(0, len(missing), EMBED_BATCH):
        batch = missing[start:start + EMBED_BATCH]
        progress(f"embedding passages indexed without a model: {start + len(batch)}/{len(missing)}")
        store.put_vectors([p.id for p in batch], embedder.embed([_embedded_text(p.heading, p.text) for p in batch]),
                          embedder.name)
    return len(missing)


def _embedded_text(heading: str, text: str) -> str:
    """What a passage's vector is made from: its heading path gives a short passage its topic."""
    return f"{heading}\n{text}" if heading else text


def _forget_vanished(store: DocumentStore, collection_id: int, inputs: Sequence[Path], seen: set[str],
                     progress: Progress) -> int:
    """Remove from the collection the files under a re-indexed folder that are no longer there."""
    folders = [str(Path(p).absolute()) + os.sep for p in inputs if Path(p).is_dir()]
    removed = 0
    for path in store.file_paths(collection_id):
        if path not in seen and any(path.startswith(folder) for folder in folders) and not Path(path).exists():
            store.forget_file(collection_id, path)
            progress(f"removed {printable(path)}: no longer on disk")
            removed += 1
    return removed
