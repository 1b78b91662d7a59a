"""What the history tells the user, as a kind and its values: ``HistoryNotice`` and ``NoticeKind``.

A notice is its English line (it is a ``str``: logs, tests and the CLI read it as it is) that also carries its
kind and the values written into it, so the window says it in the interface's language by its kind
(``app.ui.engine_texts.history_text``), never by reading the English. A value that is itself worded (why a file
is damaged, why it cannot be written) is a notice too; what SQLite or the OS said in English goes to the log.
Owns the wording and ``reason_for`` (an exception as one of the reasons); plain Python, no Qt, no SQL.
"""

from __future__ import annotations

import enum
import errno
import logging
import sqlite3
from typing import Any

log = logging.getLogger(__name__)


class NoticeKind(enum.Enum):
    """Each kind's value is its English wording, its values as ``{name}`` fields (``app.ui.engine_texts`` lists the
    same texts for translation; a test keeps the two equal)."""

    SALVAGED = ("History file was damaged ({problem}); a copy is kept at {copy}. Recovered {conversations} "
                "conversations and {messages} messages.")
    NEWER_READ_ONLY = ("Opened {file} read-only: it was written by a newer Miaohui (schema v{version}); new chats "
                       "will not be saved.")
    NEWER_DAMAGED = ("Opened {file} read-only: it was written by a newer Miaohui (schema v{version}) and looks "
                     "damaged ({problem}).")
    UNWRITABLE = ("History at {path} cannot be written ({reason}); it is shown read-only and new chats will not be "
                  "saved.")
    IN_MEMORY = "History at {path} cannot be opened ({reason}); this session's chats are kept in memory only."
    UPGRADED = "History upgraded from schema v{old} to v{new}; a backup of the old file is at {backup}."
    NEWER_UNREADABLE = "Some history from the newer version cannot be read here."
    MESSAGES_SKIPPED = "{count} damaged messages cannot be shown (ids {ids})."
    MESSAGES_REPAIRED = "{count} damaged messages were repaired for display (ids {ids})."
    CONVERSATIONS_REPAIRED = "{count} damaged conversations were repaired for display (ids {ids})."
    # Why a file is damaged ({problem} above)
    NOT_A_DATABASE = "it cannot be read as a database"
    INTEGRITY = "it fails SQLite's integrity check"
    FOREIGN = "not a Miaohui history file"
    TABLES_MISSING = "tables are missing"
    # Why a file cannot be written or opened ({reason} above)
    NO_PERMISSION = "no permission"
    BUSY = "another Miaohui has been opening it for too long"
    NOT_A_FOLDER = "a file stands where its folder should be"
    DISK_FULL = "the disk is full"
    NEWER_MEANWHILE = "a newer Miaohui upgraded it meanwhile"
    OTHER = "{detail}"  # an error none of the above covers, as Python or SQLite worded it


class HistoryNotice(str):
    """One line for the user in English (``str(notice)``), with its ``kind`` and ``values`` (text, numbers, paths,
    or notices)."""

    kind: NoticeKind
    values: dict[str, Any]

    def __new__(cls, kind: NoticeKind, **values: Any) -> HistoryNotice:
        notice = super().__new__(cls, kind.value.format(**values))
        notice.kind, notice.values = kind, dict(values)
        return notice


# SQLite's result codes that name a reason (sqlite3.Error.sqlite_errorcode, its primary code in the low byte)
_SQLITE_REASONS = {sqlite3.SQLITE_PERM: NoticeKind.NO_PERMISSION, sqlite3.SQLITE_READONLY: NoticeKind.NO_PERMISSION,
                   sqlite3.SQLITE_CANTOPEN: NoticeKind.NO_PERMISSION, sqlite3.SQLITE_FULL: NoticeKind.DISK_FULL,
                   sqlite3.SQLITE_BUSY: NoticeKind.BUSY, sqlite3.SQLITE_LOCKED: NoticeKind.BUSY}
_OS_REASONS = {errno.EACCES: NoticeKind.NO_PERMISSION, errno.EPERM: NoticeKind.NO_PERMISSION,
               errno.EROFS: NoticeKind.NO_PERMISSION, errno.ENOSPC: NoticeKind.DISK_FULL,
               errno.ENOTDIR: NoticeKind.NOT_A_FOLDER, errno.EEXIST: NoticeKind.NOT_A_FOLDER}


def reason_for(exc: BaseException, busy: type[BaseException], newer: type[BaseException] | None = None) -> HistoryNotice:
    """Why the history cannot be written or opened, from ``exc`` (``busy``: the folder lock's timeout; ``newer``:
    a newer Miaohui upgraded the file meanwhile); the exception's own words are logged."""
    log.warning("history: %s", exc)
    if isinstance(exc, busy):
        return HistoryNotice(NoticeKind.BUSY)
    if newer is not None and isinstance(exc, newer):
        return HistoryNotice(NoticeKind.NEWER_MEANWHILE)
    if isinstance(exc, sqlite3.Error) and (getattr(exc, "sqlite_errorcode", 0) & 0xFF) in _SQLITE_REASONS:
        return HistoryNotice(_SQLITE_REASONS[exc.sqlite_errorcode & 0xFF])
    if isinstance(exc, OSError) and exc.errno in _OS_REASONS:
        return HistoryNotice(_OS_REASONS[exc.errno])
    return HistoryNotice(NoticeKind.OTHER, detail=(str(exc).splitlines() or [type(exc).__name__])[0])
