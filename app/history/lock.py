"""One process at a time on a history folder: ``folder_lock``, an advisory ``flock`` on the folder itself.

Owns the lock and its timeout (``FolderBusyError``); it knows nothing of SQLite. ``app.history.store`` holds it
while it opens a file (inspect, quarantine, create or migrate) and while it closes one (the final WAL checkpoint).
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

try:
    import fcntl
except ImportError:  # Windows: no flock, so folder_lock holds nothing
    fcntl = None  # type: ignore[assignment]

OPEN_LOCK_TIMEOUT_S = 30.0  # another process opening (a salvage of a big damaged file included) takes far less


class FolderBusyError(TimeoutError):
    """Another process held the folder's lock past the timeout."""


@contextmanager
def folder_lock(folder: Path, timeout_s: float | None = None) -> Iterator[None]:
    """Hold an exclusive advisory lock on ``folder`` (``flock`` on the directory itself, so no lock file
    appears beside a history that must stay untouched). Raises ``FolderBusyError`` after ``timeout_s``.

    Where there is no ``flock`` (Windows) or the folder cannot be opened, it holds nothing: the version
    re-check inside the write transaction still keeps concurrent schema creation safe there.
    """
    if fcntl is None:  # Windows
        yield
        return
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        yield
        return
    try:
        deadline = time.monotonic() + (OPEN_LOCK_TIMEOUT_S if timeout_s is None else timeout_s)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise FolderBusyError(f"history is busy: another Miaohui has been opening {folder} for too long")
                time.sleep(0.02)
            except OSError:  # a filesystem without flock (some network mounts): go on unlocked
                break
        yield  # flock is released when fd closes
    finally:
        os.close(fd)
