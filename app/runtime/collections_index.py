"""The window's collections (issue 43): listing the documents store, indexing into it in the background, removing.

``CollectionsIndexer`` runs each index (Add folder…, Add files…, Re-index) and each removal as a task on the engine
thread (``Bridge.submit_task`` with ``needs_model=False``: no chat model is needed). Why there and not on a thread of
its own: indexing embeds with the embedding model, a model like the chat one, and the project's rule is that one
engine thread owns loaded models (torch's threads are not shared between two busy threads, and the store is written
by one writer). The cost: a reply asked for while a folder is indexed waits for it; Cancel stops between files and
keeps what was indexed (``engine.docs.index``), so the wait is the user's to cut.

Progress: the index calls back on the engine thread; this module hands each ``FileProgress`` to the GUI thread as a
queued signal, at most ~20 a second (a 10,000-file folder would otherwise queue 20,000 of them), every failure and the
last file always. Per-file failures (a binary file, an encrypted PDF, a vanished file, a symlink loop) arrive as one
line each (``noted``); the others go on. Listing reads the store read-only on the GUI thread (SQLite's WAL lets it
read while the engine thread writes). Owns no widget (``app.widgets.collections_window`` shows it).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Sequence

from PySide6.QtCore import QCoreApplication, QObject, Signal, Slot

from app.runtime.bridge import Bridge
from engine import paths
from engine.docs.index import FileProgress, IndexReport
from engine.docs.store import CollectionInfo, DocumentStore
from engine.docs.embed import installed_embedders
from engine.errors import DataDirError, EngineError

PROGRESS_INTERVAL_S = 0.05  # the progress bar's redraws: ~20 a second is smooth and costs the engine thread nothing


class CollectionsIndexer(QObject):
    """One index or removal at a time, on the engine thread.

    Signals:
        started(str): an index of this collection began.
        progressed(object): a ``FileProgress`` (files done of total, the current file).
        noted(str): one line for the log: a file that could not be indexed, a folder skipped, a note.
        finished(object): an index ended: its ``IndexReport`` (``cancelled`` when Cancel stopped it), or None when it
            failed as a whole (then ``noted`` said why first).
        removed(str): this collection was removed from the store (a failed removal is ``noted``'s one line).
        collections_changed(): the collections in the store changed (indexed, removed): list them again.
        busy_changed(bool): a run began or ended.
    """

    started = Signal(str)
    progressed = Signal(object)
    noted = Signal(str)
    finished = Signal(object)
    removed = Signal(str)
    collections_changed = Signal()
    busy_changed = Signal(bool)

    def __init__(self, bridge: Bridge, store_path: Path | None = None, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._bridge = bridge
        self.store_path = store_path or paths.documents_path()
        self._task: int | None = None  # the running task's id
        self._removing = ""  # the collection the running task removes ('' for an index)
        self._cancel = threading.Event()
        bridge.task_finished.connect(self.on_bridge_task_finished)
        bridge.task_failed.connect(self.on_bridge_task_failed)
        bridge.closing.connect(self.cancel)  # the window closes: stop between two files, keep what was indexed

    # -- reading ----------------------------------------------------------------------------------------
    def collections(self) -> list[CollectionInfo]:
        """The collections in the store (none when it does not exist yet); a store that cannot be read is one line
        through ``noted`` and no collections."""
        if not self.store_path.is_file():
            return []
        try:
            with DocumentStore(self.store_path, read_only=True) as store:
                return store.collections()
        except DataDirError as exc:
            self.noted.emit(str(exc))
            return []

    def names(self) -> list[str]:
        return [info.name for info in self.collections()]

    def is_busy(self) -> bool:
        return self._task is not None

    # -- runs ---------------------------------------------------------------------------------------------
    def index(self, name: str, inputs: Sequence[str]) -> bool:
        """Index ``inputs`` (folders and files) into collection ``name`` (made if new); False when a run is going on
        or there is nothing to do."""
        name = name.strip()
        if self.is_busy() or not name or not inputs:
            return False
        store_path, cancel, emit = self.store_path, self._cancel, _Throttle(self)
        embedder_of_core = self._bridge.embedder
        cancel.clear()

        def run(_loaded: object, _job_cancel: object) -> IndexReport:  # on the engine thread
            from engine.docs.index import index_paths

            embedder = embedder_of_core()  # the engine core's, kept beside the chat model (engine.core.models)
            with DocumentStore(store_path) as store:
                return index_paths(store, name, [Path(p) for p in inputs], embedder=embedder, cancel=cancel,
                                   progress=emit.line, on_file=emit.file)

        self._start(run)
        self.started.emit(name)
        if not any(embedder.in_use for embedder in installed_embedders()):  # said once per run, here
            self.noted.emit(QCoreApplication.translate(
                "CollectionsIndexer", "No embedding model is installed: indexed for keyword search only."))
        return True

    def reindex(self, name: str) -> bool:
        """Walk collection ``name``'s folders and files again: only changed files are read again."""
        if self.is_busy():
            return False
        try:  # not read-only: a store from before collections remembered their sources gets the table here
            with DocumentStore(self.store_path) as store:
                sources = store.sources(name)
        except EngineError as exc:  # the store unreadable, the collection removed meanwhile: its one line
            self.noted.emit(str(exc))
            return False
        return self.index(name, sources)

    def remove(self, name: str) -> bool:
        """Remove collection ``name`` from the store (its files on disk are not touched)."""
        if self.is_busy():
            return False
        store_path = self.store_path

        def run(_loaded: object, _job_cancel: object) -> None:
            with DocumentStore(store_path) as store:
                store.remove_collection(name)

        self._start(run)
        self._removing = name
        return True

    @Slot()
    def cancel(self) -> None:
        """Stop the index before its next file; what was indexed stays."""
        self._cancel.set()

    def _start(self, run: object) -> None:
        self._task = self._bridge.submit_task(run, needs_model=False)  # type: ignore[arg-type]
        self.busy_changed.emit(True)

    def _end(self, report: IndexReport | None, removed: bool) -> None:
        name, self._task, self._removing = self._removing, None, ""
        self.busy_changed.emit(False)
        if not name:
            self.finished.emit(report)
        elif removed:
            self.removed.emit(name)
        self.collections_changed.emit()

    @Slot(int, object)
    def on_bridge_task_finished(self, task_id: int, result: object) -> None:
        if task_id == self._task:
            self._end(result if isinstance(result, IndexReport) else None, removed=True)

    @Slot(int, str)
    def on_bridge_task_failed(self, task_id: int, error: str) -> None:
        if task_id == self._task:
            self.noted.emit(error)
            self._end(None, removed=False)


class _Throttle:
    """Hands the index's callbacks (engine thread) to the indexer's signals (queued to the GUI thread), rate-limited."""

    def __init__(self, indexer: CollectionsIndexer) -> None:
        self._indexer = indexer
        self._last = 0.0

    def file(self, event: FileProgress) -> None:
        if event.status == "failed":
            self._indexer.noted.emit(event.error)  # the reader's one line names the file
        now = time.monotonic()
        if event.status == "failed" or event.done == event.total or now - self._last >= PROGRESS_INTERVAL_S:
            self._last = now
            self._indexer.progressed.emit(event)

    def line(self, line: str) -> None:
        # Per-file lines ("[n/N] path: added…") are the progress bar's; a failed file comes through ``file``. What is
        # left is said once: a folder skipped (a symlink loop, no permission), a file gone from a re-indexed folder.
        if not line.startswith("["):
            self._indexer.noted.emit(line)
