"""The history file as found at startup: checked without touching it, set aside and salvaged when damaged.

Owns the read-only look at the file before it is opened for writing (``inspect``: schema version, tables,
``PRAGMA integrity_check``), the URI that reads a file without creating -wal/-shm beside it, the quarantine
copy of a damaged file with the fresh file built from its readable rows, and the startup notice about
malformed rows the store will skip or repair for display. The schema-agnostic parts (lenient decoding,
the row walk, names for copies set aside) are ``app.history.repair``'s. It decides neither when to run nor
what to do with a newer or unwritable file: ``app.history.store.HistoryStore`` calls it under the folder
lock and owns the connection and the read-only and in-memory fall-backs.
"""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
from pathlib import Path
from typing import Any, Callable

from app.history.notices import HistoryNotice, NoticeKind
from app.history.repair import aside_name, as_number, as_text, is_utf8, read_rows
from app.history.rows import CONVERSATION_COLUMNS, MESSAGE_COLUMNS, conversation_from_row, message_from_row
from app.history.schema import FINISH_REASONS, ROLES, SCHEMA_VERSION, create_or_migrate

log = logging.getLogger(__name__)


def read_only_uri(path: Path) -> str:
    """A URI that reads ``path`` without writing anything beside it (for ``sqlite3.connect(uri, uri=True)``)."""
    wal = Path(str(path) + "-wal")
    # immutable=1: SQLite creates no -wal/-shm beside a file we must not touch. A non-empty -wal (its
    # writer was killed) still holds committed rows, and only mode=ro reads them.
    mode = "mode=ro" if wal.exists() and wal.stat().st_size > 0 else "immutable=1"
    return path.resolve().as_uri() + "?" + mode


def inspect(path: Path) -> tuple[int | None, HistoryNotice | None]:
    """(user_version, problem) of the file as found, read-only; (None, None) when there is no file yet.
    What SQLite said of a damaged file is logged; the problem names its kind."""
    if not path.exists() or path.stat().st_size == 0:
        return None, None
    try:
        conn = sqlite3.connect(read_only_uri(path), uri=True)
    except sqlite3.Error as exc:
        log.warning("history file %s cannot be read: %s", path, exc)
        return None, HistoryNotice(NoticeKind.NOT_A_DATABASE)
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        result = [r[0] for r in conn.execute("PRAGMA integrity_check")]
    except sqlite3.Error as exc:
        log.warning("history file %s cannot be read: %s", path, exc)
        return None, HistoryNotice(NoticeKind.NOT_A_DATABASE)
    finally:
        conn.close()
    if result != ["ok"]:
        log.warning("history file %s fails the integrity check: %s", path, "; ".join(result[:3]))
        return version, HistoryNotice(NoticeKind.INTEGRITY)
    if version == 0 and tables - {"sqlite_sequence"}:
        return None, HistoryNotice(NoticeKind.FOREIGN)
    if 0 < version <= SCHEMA_VERSION and not {"conversations", "messages"} <= tables:
        return None, HistoryNotice(NoticeKind.TABLES_MISSING)
    return version, None


def quarantine_and_salvage(path: Path, problem: HistoryNotice, now: float) -> HistoryNotice:
    """Copy the damaged file aside, replace it by a fresh one holding its readable rows; returns the notice."""
    quarantine = aside_name(path, "corrupt")
    for suffix in ("", "-wal", "-shm"):
        src = Path(str(path) + suffix)
        if src.exists():
            shutil.copy2(src, str(quarantine) + suffix)
    tables = read_rows(path, ("conversations", "messages", "perf"))
    fresh = path.with_name(path.name + ".salvage-tmp")
    counts = _write_salvage(fresh, tables, now)
    # The old -wal must go before the new file takes the name, or SQLite would replay it into it.
    for suffix in ("-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    os.replace(fresh, path)
    return HistoryNotice(NoticeKind.SALVAGED, problem=problem, copy=quarantine, conversations=counts[0],
                         messages=counts[1])


def _write_salvage(fresh: Path, tables: dict[str, dict[int, dict[str, Any]]], now: float) -> tuple[int, int]:
    """Build a fresh current-schema file from salvaged rows; returns (conversations, messages) kept."""
    fresh.unlink(missing_ok=True)
    conn = sqlite3.connect(str(fresh), isolation_level=None)
    try:
        conn.execute("BEGIN")
        create_or_migrate(conn, 0)
        conversations = set()
        for cid, row in tables["conversations"].items():
            title, _ = as_text(row.get("title"))
            prompt, _ = as_text(row.get("system_prompt"))
            settings = row.get("settings") if isinstance(row.get("settings"), str) else "{}"
            created = as_number(row.get("created")) or now
            source = row.get("forked_from") if isinstance(row.get("forked_from"), int) else None  # v6's column
            picked, _ = as_text(row.get("documents"))  # v9's collections; a damaged cell reads as none when opened
            conn.execute("INSERT INTO conversations(id, title, created, updated, system_prompt, settings, forked_from, "
                         "documents) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                         (cid, title or f"Recovered chat {cid}", created, as_number(row.get("updated")) or created,
                          prompt or "", settings, source, picked or ""))
            conversations.add(cid)
        messages = set()
        for mid, row in tables["messages"].items():
            cid, role = row.get("conversation_id"), row.get("role")
            text, _ = as_text(row.get("text"))
            if not isinstance(cid, int) or role not in ROLES or text is None:
                continue
            if cid not in conversations:  # its conversation row was lost: keep the messages under a stand-in
                conn.execute("INSERT INTO conversations(id, title, created, updated) VALUES (?, ?, ?, ?)",
                             (cid, f"Recovered chat {cid}", now, now))
                conversations.add(cid)
            finish = row.get("finish_reason") if row.get("finish_reason") in FINISH_REASONS else None
            reasoning, _ = as_text(row.get("reasoning"))  # v3's column; an older file has none
            calls, _ = as_text(row.get("tool_calls"))  # v4's; a cell that is not a list of calls reads as none
            # v7's tree; -1 (no id is negative): relinked below, as a file older than v7 or a damaged cell needs
            parent = row.get("parent_id") if isinstance(row.get("parent_id"), int) or (
                "parent_id" in row and row.get("parent_id") is None) else -1
            shown = 0 if row.get("shown") == 0 else 1  # an older file, or a damaged cell: on the branch shown
            documents, _ = as_text(row.get("documents"))  # v8's; a cell that is not a record reads as none
            images, _ = as_text(row.get("images"))  # v11's; a cell that is not a list of addresses reads as none
            conn.execute("INSERT INTO messages(id, conversation_id, role, text, created, finish_reason, reasoning, "
                         "tool_calls, parent_id, shown, documents, images) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                         (mid, cid, role, text, as_number(row.get("created")) or now, finish, reasoning or "",
                          calls or "[]", parent, shown, documents or "", images or ""))
            messages.add(mid)
        # A message whose parent was not salvaged (or of a file older than v7) follows the shown message before it,
        # so every message stays on a path from a first one; a parent is always older than its child. NULL stays:
        # a first message (an edited first message has siblings with no parent either).
        conn.execute("UPDATE messages SET parent_id = (SELECT max(p.id) FROM messages p WHERE p.conversation_id = "
                     "messages.conversation_id AND p.id < messages.id AND p.shown = 1) WHERE parent_id IS NOT NULL "
                     "AND parent_id NOT IN (SELECT p.id FROM messages p WHERE p.conversation_id = "
                     "messages.conversation_id AND p.id < messages.id)")
        for _, row in tables["perf"].items():
            if row.get("message_id") in messages and isinstance(row.get("record"), str):
                conn.execute("INSERT INTO perf VALUES (?, ?)", (row["message_id"], row["record"]))
        conn.execute("COMMIT")
    finally:
        conn.close()
    return len(conversations), len(messages)


def damaged_row_notices(conn: sqlite3.Connection, read: Callable[[str, tuple], list[tuple]]) -> list[HistoryNotice]:
    """Notices for rows that cannot be shown or are repaired for display; the file is left as it is.

    ``read`` runs a query the way the store does (``HistoryStore._read``); ``conn`` is its open connection,
    used for the quick SQL pass that finds the suspect messages.
    """
    skipped, repaired, conversations = [], [], []
    suspects = _suspect_message_ids(conn)
    where = "" if suspects is None else f" WHERE m.id IN ({','.join(map(str, suspects))})"
    for row in read(MESSAGE_COLUMNS + where + " ORDER BY m.id", ()) if suspects != [] else []:
        message, damaged = message_from_row(row)
        if message is None:
            skipped.append(str(row[0]))
        elif damaged:
            repaired.append(str(row[0]))
    for row in read(CONVERSATION_COLUMNS, ()):
        conversation, damaged = conversation_from_row(row)
        if conversation is None or damaged:
            conversations.append(str(row[0]))
    found = ((NoticeKind.MESSAGES_SKIPPED, skipped), (NoticeKind.MESSAGES_REPAIRED, repaired),
             (NoticeKind.CONVERSATIONS_REPAIRED, conversations))
    return [HistoryNotice(kind, count=len(ids), ids=", ".join(ids[:10])) for kind, ids in found if ids]


def _suspect_message_ids(conn: sqlite3.Connection) -> list[int] | None:
    """Ids of messages that may be malformed, found in SQL (None: check them all, JSON1 is missing).

    Building every MessageRow at startup took 1.8 s for 20,000 messages; this pass takes a fraction
    of that and leaves the full check to the few rows it flags.
    """
    types_ok = ("typeof(m.conversation_id) = 'integer' AND typeof(m.text) = 'text' "
                "AND typeof(m.created) IN ('real', 'integer') AND m.role IN {roles} "
                "AND (m.finish_reason IS NULL OR m.finish_reason IN {reasons}) AND (p.record IS NULL OR "
                "CASE WHEN json_valid(p.record) THEN json_type(p.record) = 'object' ELSE 0 END) "
                "AND (m.documents = '' OR CASE WHEN json_valid(m.documents) "  # v8's cell: '' or a JSON object
                "THEN json_type(m.documents) = 'object' ELSE 0 END)"
                ).format(roles=ROLES, reasons=FINISH_REASONS)
    try:
        cur = conn.execute(f"SELECT m.id, {types_ok}, CAST(m.text AS BLOB) FROM messages m "
                           "LEFT JOIN perf p ON p.message_id = m.id")
        suspects = []
        for mid, ok, raw in cur:
            if not ok or not is_utf8(raw):
                suspects.append(mid)
        return suspects
    except sqlite3.Error:
        return None
