"""Conversation history on disk: one SQLite file (``history.sqlite3`` in the data dir) that survives crashes.

Owns ``HistoryStore``: opening the file (under an advisory lock on its folder, ``app.history.lock``), its connection and
transactions, creating or migrating the schema after a backup copy, the read-only and in-memory
fall-backs, and every read and write of conversations, messages and their performance records. Plain
Python + sqlite3: no Qt, no torch. The pieces it uses live beside it: the tables and migrations in
``app.history.schema``, the row types and their defensive decoding in ``app.history.rows``, ``PerfRecord``
in ``app.history.perf``, the startup check, quarantine and salvage of a damaged file in
``app.history.recovery`` (its schema-agnostic helpers in ``app.history.repair``). It does not render,
export (``app.history.export``) or decide when to save (the window saves a streaming reply as it grows).

Durability rules, each a test in ``tests/app/history/test_faults.py`` or ``test_store.py`` (docs/FAULTS.md):
- WAL journal, one transaction per write: a process killed mid-write loses at most the write in flight.
- A file that fails ``PRAGMA integrity_check`` is copied aside (timestamped), the readable rows are
  salvaged into a fresh file, and ``notices`` says so. A malformed row is skipped or repaired, never fatal.
- An older schema is backed up (sqlite3 backup API) before it is migrated; a newer one is opened
  read-only and never written (every write raises ``ReadOnlyStoreError``).
- A file that cannot be opened for writing (permissions, a file where the folder should be) is shown
  read-only, or the session's chats are kept in memory; the app always starts.
- Several processes may open one file at once (two windows, or two instances started together on a new
  data folder): opening (inspect, quarantine, create or migrate) and closing (the final WAL checkpoint)
  run one process at a time under an advisory lock on the folder, and the schema version is read again
  inside the write transaction that creates or migrates it. ``delete_messages_from`` can be told which
  messages the caller knows and then refuses (``ConflictError``) to delete one another process added.
- Text round-trips exactly, NUL bytes included. Lone surrogates are not Unicode text and cannot be UTF-8
  encoded: they are stored as U+FFFD (a valid surrogate pair is joined into its character).
"""

from __future__ import annotations

import json
import logging
import re
import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Collection, Iterator, Sequence

from app.history.lock import FolderBusyError, folder_lock
from app.history.notices import HistoryNotice, NoticeKind, reason_for
from app.history.perf import PerfRecord
from app.history.recovery import damaged_row_notices, inspect, quarantine_and_salvage, read_only_uri
from app.history.repair import aside_name, decode_text
from app.history.rows import (CONVERSATION_COLUMNS, MESSAGE_COLUMNS, ConversationRow, MessageRow, conversation_from_row,
                              message_from_row)
from app.history.schema import FINISH_REASONS, ROLES, SCHEMA_VERSION, create_or_migrate
from app.history.tool_record import ToolCallRecord, records_to_json
from engine.paths import history_path

log = logging.getLogger(__name__)

DEFAULT_TITLE = "New chat"
MODEL_KEY = "model"  # in a conversation's settings: the model it replies with (``app.window.conversation_model``)
_TITLE_MAX = 48


class StoreError(Exception):
    """A history operation failed; ``str()`` is one line a user can read."""


class ReadOnlyStoreError(StoreError):
    """A write was attempted on a history opened read-only (written by a newer Miaohui)."""


class ConflictError(StoreError):
    """The conversation was changed by another process (another window) since the caller read it."""


class NotFoundError(StoreError, KeyError):
    """The conversation or message does not exist (deleted meanwhile, or never existed)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else "not found"


def default_path() -> Path:
    """``history.sqlite3`` in the data dir (``MIAOHUI_HOME`` or the platform's user data dir)."""
    return history_path()


def _clean_text(text: str) -> str:
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        # A valid pair (text from a UTF-16 source) is joined into its character, as engine.generate.context does
        # for the prompt, so history keeps what the model saw; only lone halves become U+FFFD.
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def auto_title(text: str) -> str:
    """The first line of a user message, whitespace collapsed, cut to a list-friendly length."""
    line = next((ln for ln in text.splitlines() if ln.strip()), "")
    line = " ".join(line.replace("\x00", " ").split())
    return line if len(line) <= _TITLE_MAX else line[: _TITLE_MAX - 1].rstrip() + "…"


class HistoryStore:
    """Conversations, messages and performance records in one SQLite file. Thread-safe (one lock).

    ``notices`` holds one-line messages for the user (``HistoryNotice``: English, with the kind and values the
    window words them by in its language) about what happened at open (quarantine,
    migration, read-only, repaired rows); ``read_only`` is True when the file must not be written.
    """

    def __init__(self, path: Path, *, clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path)
        self.notices: list[HistoryNotice] = []
        self.read_only = False
        self._read_only_reason = ""
        self._clock = clock
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # One process at a time: another one creating, salvaging or checkpointing the file at close
            # would otherwise look half-made to inspect (a healthy file taken for a damaged one).
            with folder_lock(self.path.parent):
                version, problem = inspect(self.path)
                if version is not None and version > SCHEMA_VERSION:
                    self._open_read_only(version, problem)
                elif problem is not None:
                    self.notices.append(quarantine_and_salvage(self.path, problem, self._clock()))
                    self._conn = self._connect()
                else:
                    self._conn = self._connect()
                    self._upgrade(version or 0)
        except (sqlite3.Error, OSError, StoreError) as exc:
            self._fall_back(exc)
        self._report_damaged_rows()

    # ----------------------------------------------------------------- opening
    def _connect(self, uri: str | None = None) -> sqlite3.Connection:
        # isolation_level=None: we issue BEGIN/COMMIT ourselves so one write is exactly one transaction.
        conn = sqlite3.connect(uri or str(self.path), uri=uri is not None, isolation_level=None,
                               check_same_thread=False, timeout=10.0)
        conn.text_factory = decode_text
        if uri is None:
            conn.execute("PRAGMA journal_mode=WAL")
            # NORMAL in WAL mode: a killed process never loses a committed transaction; only an OS crash
            # or power cut can roll back the last few, and it saves an fsync per streamed save.
            conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA foreign_keys=ON")
        return conn

    def _open_read_only(self, version: int, problem: HistoryNotice | None) -> None:
        self.read_only = True
        self._read_only_reason = (f"history was written by a newer Miaohui (schema v{version}); "
                                  "it is read-only here and will not be changed")
        self._conn = self._connect(read_only_uri(self.path))
        self.notices.append(HistoryNotice(NoticeKind.NEWER_READ_ONLY, file=self.path.name, version=version)
                            if problem is None else HistoryNotice(NoticeKind.NEWER_DAMAGED, file=self.path.name,
                                                                  version=version, problem=problem))

    def _fall_back(self, exc: BaseException) -> None:
        """The file cannot be opened for writing (permissions, a locked or missing folder, a full disk).

        The app must still start: show the history read-only if it can be read, else keep this session's
        chats in memory. Either way the user is told, and the file is left as it is.
        """
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        reason = reason_for(exc, FolderBusyError, ReadOnlyStoreError)
        try:
            self._conn = self._connect(read_only_uri(self.path))
            self._conn.execute("SELECT count(*) FROM conversations").fetchone()
            self.read_only = True
            self._read_only_reason = f"history cannot be written ({reason})"
            self.notices.append(HistoryNotice(NoticeKind.UNWRITABLE, path=self.path, reason=reason))
        except (sqlite3.Error, OSError, ValueError):
            if self._conn is not None:
                self._conn.close()
            self._conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
            self._conn.text_factory = decode_text
            self._conn.execute("PRAGMA foreign_keys=ON")
            self._upgrade(0)
            self.notices.append(HistoryNotice(NoticeKind.IN_MEMORY, path=self.path, reason=reason))

    def _upgrade(self, found: int) -> None:
        """Create or migrate the schema; ``found`` is the version ``recovery.inspect`` read before the file was open."""
        if found == SCHEMA_VERSION:
            return
        backup = None
        if found > 0:
            backup = aside_name(self.path, f"v{found}-backup")
            target = sqlite3.connect(backup)
            try:
                self._conn.backup(target)  # consistent copy, WAL content included
            finally:
                target.close()
        with self._write() as c:  # all steps in one transaction: a crash leaves the old version intact
            # Read again under the write lock: another process (where the folder lock is unavailable) may
            # have created or migrated the file since ``found`` was read; doing it twice would fail.
            version = c.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise ReadOnlyStoreError(f"history was just upgraded by a newer Miaohui (schema v{version})")
            create_or_migrate(c, version)
        if backup is not None and version < SCHEMA_VERSION:
            self.notices.append(HistoryNotice(NoticeKind.UPGRADED, old=version, new=SCHEMA_VERSION, backup=backup))

    def _report_damaged_rows(self) -> None:
        """One notice for rows that cannot be shown or are repaired for display; the file is left as it is."""
        with self._lock:
            notices = damaged_row_notices(self._live(), self._read)
        self.notices.extend(notices)

    # ----------------------------------------------------------------- plumbing
    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        if self.read_only:
            raise ReadOnlyStoreError(self._read_only_reason)
        with self._lock:
            conn = self._live()
            try:
                conn.execute("BEGIN IMMEDIATE")
                yield conn
            except BaseException as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise StoreError(f"could not save history: {exc}") from exc
                raise
            else:
                try:
                    conn.execute("COMMIT")
                except sqlite3.Error as exc:
                    raise StoreError(f"could not save history: {exc}") from exc

    def _live(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError("history is closed")
        return self._conn

    def _read(self, sql: str, params: tuple) -> list[tuple]:
        with self._lock:
            try:
                return self._live().execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                if not self.read_only:
                    raise StoreError(f"could not read history: {exc}") from exc
                # A newer schema may have moved things; show what we can instead of failing the app.
                log.warning("history from a newer version: %s", exc)
                if not any(n.kind is NoticeKind.NEWER_UNREADABLE for n in self.notices):
                    self.notices.append(HistoryNotice(NoticeKind.NEWER_UNREADABLE))
                return []

    def _now(self) -> float:
        return float(self._clock())

    # ----------------------------------------------------------------- conversations
    def create_conversation(self, title: str = DEFAULT_TITLE, system_prompt: str = "",
                            settings: dict | None = None) -> int:
        now = self._now()
        with self._write() as c:
            cur = c.execute("INSERT INTO conversations(title, created, updated, system_prompt, settings) "
                            "VALUES (?, ?, ?, ?, ?)",
                            (_clean_text(title), now, now, _clean_text(system_prompt),
                             json.dumps(settings or {}, ensure_ascii=False)))
            return int(cur.lastrowid)

    def fork_conversation(self, cid: int, mid: int, title: str | None = None) -> int:
        """A new conversation (one transaction) with ``cid``'s system prompt, settings, collections and the branch shown
        up to and including ``mid``, titled ``title`` ("<title> (fork)"), ``cid`` kept as its source; perf records stay
        with their replies, images with their messages."""
        now = self._now()
        with self._write() as c:
            row = c.execute("SELECT title, system_prompt, settings, documents FROM conversations WHERE id = ?", (cid,)).fetchone()
            if row is None or c.execute("SELECT 1 FROM messages WHERE id = ? AND conversation_id = ?",
                                        (mid, cid)).fetchone() is None:
                raise NotFoundError(f"message {mid} not found in conversation {cid}")
            name = _clean_text(title if title is not None else f"{row[0]} (fork)")
            new = int(c.execute("INSERT INTO conversations(title, created, updated, system_prompt, settings, documents, "
                                "forked_from) VALUES (?, ?, ?, ?, ?, ?, ?)", (name, now, now, *row[1:], cid)).lastrowid)
            c.execute("INSERT INTO messages(conversation_id, role, text, created, finish_reason, reasoning, "
                      "tool_calls, documents, images) SELECT ?, role, text, created, finish_reason, reasoning, tool_calls, "
                      "documents, images FROM messages WHERE conversation_id = ? AND id <= ? AND shown = 1 ORDER BY id",
                      (new, cid, mid))
            # The copy is one branch: each message follows the one copied before it.
            c.execute("UPDATE messages SET parent_id = (SELECT max(p.id) FROM messages p WHERE p.conversation_id = ? "
                      "AND p.id < messages.id) WHERE conversation_id = ?", (new, new))
            return new

    def list_conversations(self, query: str = "") -> list[ConversationRow]:
        """Newest updated first; ``query`` matches titles and message text (substring, ASCII case-insensitive)."""
        query = _clean_text(query.strip())
        if not query:
            rows = self._read(CONVERSATION_COLUMNS + " ORDER BY c.updated DESC, c.id DESC", ())
        else:
            # LIKE, not FTS5: correct for Chinese (no tokenizer needed) and fast enough for a person's history.
            # LIKE ignores ASCII case but stops at a NUL byte; instr() (exact case) sees past it.
            pattern = "%" + re.sub(r"([\\%_])", r"\\\1", query) + "%"
            match = "({0} LIKE ?1 ESCAPE '\\' OR instr({0}, ?2) > 0)"
            rows = self._read(CONVERSATION_COLUMNS + f" WHERE {match.format('c.title')} OR EXISTS "
                              "(SELECT 1 FROM messages m WHERE m.conversation_id = c.id "
                              f"AND {match.format('m.text')}) ORDER BY c.updated DESC, c.id DESC", (pattern, query))
        return [conv for conv, _ in map(conversation_from_row, rows) if conv is not None]

    def get_conversation(self, cid: int) -> ConversationRow:
        rows = self._read(CONVERSATION_COLUMNS + " WHERE c.id = ?", (cid,))
        conversation = conversation_from_row(rows[0])[0] if rows else None
        if conversation is None:
            raise NotFoundError(f"conversation {cid} not found")
        return conversation

    def rename_conversation(self, cid: int, title: str) -> None:
        with self._write() as c:
            if c.execute("UPDATE conversations SET title = ? WHERE id = ?", (_clean_text(title), cid)).rowcount == 0:
                raise NotFoundError(f"conversation {cid} not found")

    def update_conversation_settings(self, cid: int, system_prompt: str, settings: dict) -> None:
        """Replace a conversation's system prompt and reply settings; the model recorded with it stays."""
        with self._write() as c:
            kept = {key: value for key, value in self._settings_of(c, cid).items() if key == MODEL_KEY}
            c.execute("UPDATE conversations SET system_prompt = ?, settings = ? WHERE id = ?",
                      (_clean_text(system_prompt), json.dumps({**settings, **kept}, ensure_ascii=False), cid))

    def set_conversation_model(self, cid: int, model: dict) -> None:
        """Record the model conversation ``cid`` replies with (its settings' ``MODEL_KEY``; the latest one wins)."""
        with self._write() as c:
            settings = {**self._settings_of(c, cid), MODEL_KEY: model}
            c.execute("UPDATE conversations SET settings = ? WHERE id = ?", (json.dumps(settings, ensure_ascii=False),
                                                                           cid))

    @staticmethod
    def _settings_of(c: sqlite3.Connection, cid: int) -> dict:
        """Conversation ``cid``'s settings as stored ({} when unreadable); ``NotFoundError`` when it is gone."""
        row = c.execute("SELECT settings FROM conversations WHERE id = ?", (cid,)).fetchone()
        if row is None:
            raise NotFoundError(f"conversation {cid} not found")
        try:
            settings = json.loads(row[0])
        except (TypeError, ValueError):
            settings = None
        return settings if isinstance(settings, dict) else {}

    def delete_conversation(self, cid: int) -> None:
        """Delete a conversation; its messages and their perf records go with it (ON DELETE CASCADE)."""
        with self._write() as c:
            c.execute("DELETE FROM conversations WHERE id = ?", (cid,))

    # ----------------------------------------------------------------- messages
    def messages(self, cid: int) -> list[MessageRow]:
        """The branch shown (``app.history.branches``: the path from the first message to one leaf), in order."""
        rows = self._read(MESSAGE_COLUMNS + " WHERE m.conversation_id = ? AND m.shown = 1 ORDER BY m.id", (cid,))
        return [msg for msg, _ in map(message_from_row, rows) if msg is not None]

    def add_message(self, cid: int, role: str, text: str, finish_reason: str | None = None,
                    perf: PerfRecord | None = None) -> int:
        """Append a message to the branch shown (its parent: that branch's last message) in one transaction; the
        first user message titles a still-default conversation."""
        _check(role, finish_reason)
        text = _clean_text(text)
        now = self._now()
        with self._write() as c:
            row = c.execute("SELECT title FROM conversations WHERE id = ?", (cid,)).fetchone()
            if row is None:
                raise NotFoundError(f"conversation {cid} not found")
            cur = c.execute("INSERT INTO messages(conversation_id, role, text, created, finish_reason, parent_id) "
                            "VALUES (?, ?, ?, ?, ?, (SELECT max(id) FROM messages WHERE conversation_id = ? "
                            "AND shown = 1))", (cid, role, text, now, finish_reason, cid))
            mid = int(cur.lastrowid)
            if perf is not None:
                c.execute("INSERT INTO perf(message_id, record) VALUES (?, ?)", (mid, perf.to_json()))
            title = auto_title(text) if role == "user" and row[0] == DEFAULT_TITLE else ""
            c.execute("UPDATE conversations SET updated = ?, title = coalesce(nullif(?, ''), title) WHERE id = ?",
                      (now, title, cid))
            return mid

    def update_message(self, mid: int, text: str, finish_reason: str | None = None,
                       perf: PerfRecord | None = None, reasoning: str | None = None,
                       tool_calls: Sequence[ToolCallRecord] | None = None) -> None:
        """Replace a message's text and finish reason (streaming saves, final save); perf None keeps the old one,
        and so do reasoning None (a thought, given: a reasoning model's reply) and tool_calls None."""
        _check(None, finish_reason)
        with self._write() as c:
            row = c.execute("SELECT conversation_id FROM messages WHERE id = ?", (mid,)).fetchone()
            if row is None:
                raise NotFoundError(f"message {mid} not found")
            c.execute("UPDATE messages SET text = ?, finish_reason = ? WHERE id = ?",
                      (_clean_text(text), finish_reason, mid))
            if perf is not None:
                c.execute("INSERT OR REPLACE INTO perf(message_id, record) VALUES (?, ?)", (mid, perf.to_json()))
            if reasoning is not None:
                c.execute("UPDATE messages SET reasoning = ? WHERE id = ?", (_clean_text(reasoning), mid))
            if tool_calls is not None:
                c.execute("UPDATE messages SET tool_calls = ? WHERE id = ?", (_clean_text(records_to_json(tool_calls)),
                                                                             mid))
            c.execute("UPDATE conversations SET updated = ? WHERE id = ?", (self._now(), row[0]))

    def delete_messages_from(self, cid: int, mid: int, known_ids: Collection[int] | None = None) -> None:
        """Delete message ``mid`` and every message that follows it, in every branch below it (Regenerate, a reply
        that failed before any text); an edit keeps the old branch instead (``app.history.branches.set_aside``).

        ``known_ids``: the messages from ``mid`` on that the caller has shown. When the branch shown holds
        a later one the caller has not seen (another window added it), nothing is deleted and
        ``ConflictError`` is raised: cutting there would throw away that window's newer messages.
        """
        with self._write() as c:
            if c.execute("SELECT 1 FROM messages WHERE id = ? AND conversation_id = ?", (mid, cid)).fetchone() is None:
                raise NotFoundError(f"message {mid} not found in conversation {cid}")
            if known_ids is not None:
                known = set(known_ids)
                unseen = [row[0] for row in c.execute("SELECT id FROM messages WHERE conversation_id = ? AND id >= ? "
                                                      "AND shown = 1", (cid, mid)) if row[0] not in known]
                if unseen:
                    raise ConflictError("this chat was changed in another window since it was opened; "
                                        "nothing was deleted")
            # The subtree, not "id >= mid": a later id may be another branch's (an edit above mid made after it).
            c.execute("WITH RECURSIVE below(id) AS (SELECT ? UNION ALL SELECT m.id FROM messages m JOIN below "
                      "ON m.parent_id = below.id) DELETE FROM messages WHERE id IN below", (mid,))
            c.execute("UPDATE conversations SET updated = ? WHERE id = ?", (self._now(), cid))

    def all_perf_records(self) -> list[tuple[ConversationRow, MessageRow]]:
        """Every message that has a performance record, oldest first, with its conversation."""
        conversations = {conv.id: conv for conv in self.list_conversations()}
        rows = self._read(MESSAGE_COLUMNS + " WHERE p.record IS NOT NULL ORDER BY m.id", ())
        out = []
        for message, _ in map(message_from_row, rows):
            if message is not None and message.perf is not None and message.conversation_id in conversations:
                out.append((conversations[message.conversation_id], message))
        return out

    def close(self) -> None:
        with self._lock:
            if self._conn is None:
                return
            try:
                # The last connection's close checkpoints the WAL into the file and deletes it: not while
                # another process is inspecting the file to open it.
                with folder_lock(self.path.parent):
                    self._conn.close()
            except FolderBusyError:  # the lock stayed busy: close anyway, a committed row is never lost by it
                self._conn.close()
            self._conn = None

    def __enter__(self) -> HistoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _check(role: str | None, finish_reason: str | None) -> None:
    if role is not None and role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, not {role!r}")
    if finish_reason is not None and finish_reason not in FINISH_REASONS:
        raise ValueError(f"finish_reason must be None or one of {FINISH_REASONS}, not {finish_reason!r}")
