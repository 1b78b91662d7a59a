"""Conversation history on disk: one SQLite file (``history.sqlite3`` in the data dir) that survives crashes.

Owns the schema (version in ``PRAGMA user_version``), its migrations (after a backup copy), the startup
integrity check with quarantine and salvage of a damaged file (schema-agnostic helpers live in
``app.history.repair``), and every read and write of
conversations, messages and their performance records. Plain Python + sqlite3: no Qt, no torch. It does
not render, export (``app.history.export``) or decide when to save (the window saves a streaming reply as it grows).

Durability rules, each a test in ``tests/app/test_store*.py``:
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
import os
import re
import shutil
import sqlite3
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Collection, Iterator

from app.history.repair import RepairedText, aside_name, as_number, as_text, decode_text, is_utf8, read_rows
from engine.fmt import format_bytes

SCHEMA_VERSION = 2
OPEN_LOCK_TIMEOUT_S = 30.0  # another process opening (a salvage of a big damaged file included) takes far less
DEFAULT_TITLE = "New chat"
ROLES = ("system", "user", "assistant")
FINISH_REASONS = ("eos", "length", "cancelled", "error")
_TITLE_MAX = 48

# v2 = v1 + conversations.settings, messages.finish_reason, the perf table (see _migrate_v1_to_v2).
# AUTOINCREMENT: a message id deleted by "regenerate" is never handed out again, so a stale id the
# window still holds can only miss, never hit a different message.
_SCHEMA_V2 = """
CREATE TABLE IF NOT EXISTS conversations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    title TEXT NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    system_prompt TEXT NOT NULL DEFAULT '',
    settings TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    role TEXT NOT NULL,
    text TEXT NOT NULL,
    created REAL NOT NULL,
    finish_reason TEXT
);
CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages(conversation_id, id);
CREATE TABLE IF NOT EXISTS perf (
    message_id INTEGER PRIMARY KEY REFERENCES messages(id) ON DELETE CASCADE,
    record TEXT NOT NULL
);
"""


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
    from engine.paths import history_path  # plain Python module; imported late to keep the store standalone

    return history_path()


@dataclass(frozen=True)
class PerfRecord:
    """How one assistant reply was produced; the keys are the engine's ``Metrics.to_dict()`` keys."""

    model: str
    ttft_s: float | None = None
    prefill_tok_s: float | None = None
    decode_tok_s: float | None = None
    prompt_tokens: int | None = None
    generated_tokens: int | None = None
    kv_cache_bytes: int | None = None
    weights_bytes: int | None = None
    peak_memory_bytes: int | None = None
    device: str | None = None
    precision: str | None = None

    @classmethod
    def from_metrics(cls, metrics_dict: dict, model: str) -> PerfRecord:
        """Keep the fields a footer and the CSV need; unknown keys and wrong types are dropped."""
        return cls.from_dict({**metrics_dict, "model": model})

    @classmethod
    def from_dict(cls, data: dict) -> PerfRecord:
        values: dict[str, Any] = {"model": str(data.get("model") or "")}
        for f in fields(cls):
            if f.name == "model":
                continue
            raw = data.get(f.name)
            if f.name in ("device", "precision"):
                values[f.name] = raw if isinstance(raw, str) else None
            else:
                num = as_number(raw)
                is_count = f.name.endswith(("_tokens", "_bytes"))
                values[f.name] = None if num is None else (int(num) if is_count else num)
        return cls(**values)

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)

    def footer(self) -> str:
        """One line under a reply, e.g. ``41.8 tok/s · TTFT 86 ms · 128 tokens · KV 2.9 MiB``."""
        parts = []
        if self.decode_tok_s is not None:
            parts.append(f"{self.decode_tok_s:.1f} tok/s")
        if self.ttft_s is not None:
            parts.append(f"TTFT {self.ttft_s * 1000:.0f} ms" if self.ttft_s < 10 else f"TTFT {self.ttft_s:.1f} s")
        if self.generated_tokens is not None:
            parts.append(f"{self.generated_tokens} token{'' if self.generated_tokens == 1 else 's'}")
        if self.kv_cache_bytes is not None:
            parts.append(f"KV {format_bytes(self.kv_cache_bytes)}")
        return " · ".join(parts)


@dataclass(frozen=True)
class ConversationRow:
    id: int
    title: str
    created: float  # seconds since the epoch (time.time())
    updated: float
    system_prompt: str
    settings: dict = field(hash=False)
    message_count: int


@dataclass(frozen=True)
class MessageRow:
    id: int
    conversation_id: int
    role: str
    text: str
    created: float
    finish_reason: str | None  # None while streaming or for user/system messages
    perf: PerfRecord | None


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


_MESSAGE_COLUMNS = ("SELECT m.id, m.conversation_id, m.role, m.text, m.created, m.finish_reason, p.record "
                    "FROM messages m LEFT JOIN perf p ON p.message_id = m.id")
_CONVERSATION_COLUMNS = ("SELECT c.id, c.title, c.created, c.updated, c.system_prompt, c.settings, "
                         "(SELECT count(*) FROM messages m WHERE m.conversation_id = c.id) FROM conversations c")


class HistoryStore:
    """Conversations, messages and performance records in one SQLite file. Thread-safe (one lock).

    ``notices`` holds one-line messages for the user about what happened at open (quarantine,
    migration, read-only, repaired rows); ``read_only`` is True when the file must not be written.
    """

    def __init__(self, path: Path, *, clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path)
        self.notices: list[str] = []
        self.read_only = False
        self._read_only_reason = ""
        self._clock = clock
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # One process at a time: another one creating, salvaging or checkpointing the file at close
            # would otherwise look half-made to _inspect (a healthy file taken for a damaged one).
            with _folder_lock(self.path.parent):
                version, problem = self._inspect()
                if version is not None and version > SCHEMA_VERSION:
                    self._open_read_only(version, problem)
                elif problem is not None:
                    self._quarantine_and_salvage(problem)
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

    def _read_only_uri(self) -> str:
        wal = Path(str(self.path) + "-wal")
        # immutable=1: SQLite creates no -wal/-shm beside a file we must not touch. A non-empty -wal (its
        # writer was killed) still holds committed rows, and only mode=ro reads them.
        mode = "mode=ro" if wal.exists() and wal.stat().st_size > 0 else "immutable=1"
        return self.path.resolve().as_uri() + "?" + mode

    def _inspect(self) -> tuple[int | None, str | None]:
        """(user_version, problem) of the file as found, read-only; (None, None) when there is no file yet."""
        if not self.path.exists() or self.path.stat().st_size == 0:
            return None, None
        try:
            conn = sqlite3.connect(self._read_only_uri(), uri=True)
        except sqlite3.Error as exc:
            return None, str(exc)
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            result = [r[0] for r in conn.execute("PRAGMA integrity_check")]
        except sqlite3.Error as exc:
            return None, str(exc)
        finally:
            conn.close()
        if result != ["ok"]:
            return version, "; ".join(result[:3])
        if version == 0 and tables - {"sqlite_sequence"}:
            return None, "not a Miaohui history file (no schema version)"
        if 0 < version <= SCHEMA_VERSION and not {"conversations", "messages"} <= tables:
            return None, "tables are missing"
        return version, None

    def _open_read_only(self, version: int, problem: str | None) -> None:
        self.read_only = True
        self._read_only_reason = (f"history was written by a newer Miaohui (schema v{version}); "
                                  "it is read-only here and will not be changed")
        self._conn = self._connect(self._read_only_uri())
        note = f"Opened {self.path.name} read-only: it was written by a newer Miaohui (schema v{version})"
        note += "; new chats will not be saved." if problem is None else f" and looks damaged ({problem})."
        self.notices.append(note)

    def _fall_back(self, exc: BaseException) -> None:
        """The file cannot be opened for writing (permissions, a locked or missing folder, a full disk).

        The app must still start: show the history read-only if it can be read, else keep this session's
        chats in memory. Either way the user is told, and the file is left as it is.
        """
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        reason = (str(exc).splitlines() or [type(exc).__name__])[0]
        try:
            self._conn = self._connect(self._read_only_uri())
            self._conn.execute("SELECT count(*) FROM conversations").fetchone()
            self.read_only = True
            self._read_only_reason = f"history cannot be written ({reason})"
            self.notices.append(f"History at {self.path} cannot be written ({reason}); it is shown read-only "
                                "and new chats will not be saved.")
        except (sqlite3.Error, OSError, ValueError):
            if self._conn is not None:
                self._conn.close()
            self._conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
            self._conn.text_factory = decode_text
            self._conn.execute("PRAGMA foreign_keys=ON")
            self._upgrade(0)
            self.notices.append(f"History at {self.path} cannot be opened ({reason}); this session's chats "
                                "are kept in memory only.")

    def _upgrade(self, found: int) -> None:
        """Create or migrate the schema; ``found`` is the version ``_inspect`` read before the file was open."""
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
                raise StoreError(f"history was just upgraded by a newer Miaohui (schema v{version})")
            if version == 0:
                for statement in _SCHEMA_V2.split(";"):
                    if statement.strip():
                        c.execute(statement)
            else:
                for step in range(version, SCHEMA_VERSION):
                    _MIGRATIONS[step](c)
            c.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        if backup is not None and version < SCHEMA_VERSION:
            self.notices.append(f"History upgraded from schema v{version} to v{SCHEMA_VERSION}; "
                                f"a backup of the old file is at {backup}.")

    def _quarantine_and_salvage(self, problem: str) -> None:
        quarantine = aside_name(self.path, "corrupt")
        for suffix in ("", "-wal", "-shm"):
            src = Path(str(self.path) + suffix)
            if src.exists():
                shutil.copy2(src, str(quarantine) + suffix)
        tables = read_rows(self.path, ("conversations", "messages", "perf"))
        fresh = self.path.with_name(self.path.name + ".salvage-tmp")
        counts = _write_salvage(fresh, tables, self._clock())
        # The old -wal must go before the new file takes the name, or SQLite would replay it into it.
        for suffix in ("-wal", "-shm"):
            Path(str(self.path) + suffix).unlink(missing_ok=True)
        os.replace(fresh, self.path)
        self.notices.append(f"History file was damaged ({problem}); a copy is kept at {quarantine}. "
                            f"Recovered {counts[0]} conversations and {counts[1]} messages.")

    def _report_damaged_rows(self) -> None:
        """One notice for rows that cannot be shown or are repaired for display; the file is left as it is."""
        skipped, repaired = [], []
        with self._lock:
            suspects = self._suspect_message_ids()
            where = "" if suspects is None else f" WHERE m.id IN ({','.join(map(str, suspects))})"
            for row in self._read(_MESSAGE_COLUMNS + where + " ORDER BY m.id", ()) if suspects != [] else []:
                message, damaged = _message_from_row(row)
                if message is None:
                    skipped.append(str(row[0]))
                elif damaged:
                    repaired.append(str(row[0]))
            for row in self._read(_CONVERSATION_COLUMNS, ()):
                conversation, damaged = _conversation_from_row(row)
                if conversation is None or damaged:
                    repaired.append(f"conversation {row[0]}")
        if skipped:
            self.notices.append(f"{len(skipped)} damaged messages cannot be shown (ids {', '.join(skipped[:10])}).")
        if repaired:
            self.notices.append(f"{len(repaired)} damaged rows were repaired for display "
                                f"({', '.join(repaired[:10])}).")

    def _suspect_message_ids(self) -> list[int] | None:
        """Ids of messages that may be malformed, found in SQL (None: check them all, JSON1 is missing).

        Building every MessageRow at startup took 1.8 s for 20,000 messages; this pass takes a fraction
        of that and leaves the full check to the few rows it flags.
        """
        types_ok = ("typeof(m.conversation_id) = 'integer' AND typeof(m.text) = 'text' "
                    "AND typeof(m.created) IN ('real', 'integer') AND m.role IN {roles} "
                    "AND (m.finish_reason IS NULL OR m.finish_reason IN {reasons}) AND (p.record IS NULL OR "
                    "CASE WHEN json_valid(p.record) THEN json_type(p.record) = 'object' ELSE 0 END)"
                    ).format(roles=ROLES, reasons=FINISH_REASONS)
        try:
            cur = self._live().execute(f"SELECT m.id, {types_ok}, CAST(m.text AS BLOB) FROM messages m "
                                       "LEFT JOIN perf p ON p.message_id = m.id")
            suspects = []
            for mid, ok, raw in cur:
                if not ok or not is_utf8(raw):
                    suspects.append(mid)
            return suspects
        except sqlite3.Error:
            return None

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
                note = f"Some history from the newer version cannot be read here ({exc})."
                if note not in self.notices:
                    self.notices.append(note)
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

    def list_conversations(self, query: str = "") -> list[ConversationRow]:
        """Newest updated first; ``query`` matches titles and message text (substring, ASCII case-insensitive)."""
        query = _clean_text(query.strip())
        if not query:
            rows = self._read(_CONVERSATION_COLUMNS + " ORDER BY c.updated DESC, c.id DESC", ())
        else:
            # LIKE, not FTS5: correct for Chinese (no tokenizer needed) and fast enough for a person's history.
            # LIKE ignores ASCII case but stops at a NUL byte; instr() (exact case) sees past it.
            pattern = "%" + re.sub(r"([\\%_])", r"\\\1", query) + "%"
            match = "({0} LIKE ?1 ESCAPE '\\' OR instr({0}, ?2) > 0)"
            rows = self._read(_CONVERSATION_COLUMNS + f" WHERE {match.format('c.title')} OR EXISTS "
                              "(SELECT 1 FROM messages m WHERE m.conversation_id = c.id "
                              f"AND {match.format('m.text')}) ORDER BY c.updated DESC, c.id DESC", (pattern, query))
        return [conv for conv, _ in map(_conversation_from_row, rows) if conv is not None]

    def get_conversation(self, cid: int) -> ConversationRow:
        rows = self._read(_CONVERSATION_COLUMNS + " WHERE c.id = ?", (cid,))
        conversation = _conversation_from_row(rows[0])[0] if rows else None
        if conversation is None:
            raise NotFoundError(f"conversation {cid} not found")
        return conversation

    def rename_conversation(self, cid: int, title: str) -> None:
        with self._write() as c:
            if c.execute("UPDATE conversations SET title = ? WHERE id = ?", (_clean_text(title), cid)).rowcount == 0:
                raise NotFoundError(f"conversation {cid} not found")

    def update_conversation_settings(self, cid: int, system_prompt: str, settings: dict) -> None:
        with self._write() as c:
            cur = c.execute("UPDATE conversations SET system_prompt = ?, settings = ? WHERE id = ?",
                            (_clean_text(system_prompt), json.dumps(settings, ensure_ascii=False), cid))
            if cur.rowcount == 0:
                raise NotFoundError(f"conversation {cid} not found")

    def delete_conversation(self, cid: int) -> None:
        """Delete a conversation; its messages and their perf records go with it (ON DELETE CASCADE)."""
        with self._write() as c:
            c.execute("DELETE FROM conversations WHERE id = ?", (cid,))

    # ----------------------------------------------------------------- messages
    def messages(self, cid: int) -> list[MessageRow]:
        rows = self._read(_MESSAGE_COLUMNS + " WHERE m.conversation_id = ? ORDER BY m.id", (cid,))
        return [msg for msg, _ in map(_message_from_row, rows) if msg is not None]

    def add_message(self, cid: int, role: str, text: str, finish_reason: str | None = None,
                    perf: PerfRecord | None = None) -> int:
        """Append a message in one transaction; the first user message titles a still-default conversation."""
        _check(role, finish_reason)
        text = _clean_text(text)
        now = self._now()
        with self._write() as c:
            row = c.execute("SELECT title FROM conversations WHERE id = ?", (cid,)).fetchone()
            if row is None:
                raise NotFoundError(f"conversation {cid} not found")
            cur = c.execute("INSERT INTO messages(conversation_id, role, text, created, finish_reason) "
                            "VALUES (?, ?, ?, ?, ?)", (cid, role, text, now, finish_reason))
            mid = int(cur.lastrowid)
            if perf is not None:
                c.execute("INSERT INTO perf(message_id, record) VALUES (?, ?)", (mid, perf.to_json()))
            title = auto_title(text) if role == "user" and row[0] == DEFAULT_TITLE else ""
            c.execute("UPDATE conversations SET updated = ?, title = coalesce(nullif(?, ''), title) WHERE id = ?",
                      (now, title, cid))
            return mid

    def update_message(self, mid: int, text: str, finish_reason: str | None = None,
                       perf: PerfRecord | None = None) -> None:
        """Replace a message's text and finish reason (streaming saves, final save); perf None keeps the old one."""
        _check(None, finish_reason)
        with self._write() as c:
            row = c.execute("SELECT conversation_id FROM messages WHERE id = ?", (mid,)).fetchone()
            if row is None:
                raise NotFoundError(f"message {mid} not found")
            c.execute("UPDATE messages SET text = ?, finish_reason = ? WHERE id = ?",
                      (_clean_text(text), finish_reason, mid))
            if perf is not None:
                c.execute("INSERT OR REPLACE INTO perf(message_id, record) VALUES (?, ?)", (mid, perf.to_json()))
            c.execute("UPDATE conversations SET updated = ? WHERE id = ?", (self._now(), row[0]))

    def delete_messages_from(self, cid: int, mid: int, known_ids: Collection[int] | None = None) -> None:
        """Delete message ``mid`` and every later message of ``cid`` (edit and resend, regenerate).

        ``known_ids``: the messages from ``mid`` on that the caller has shown. When the conversation holds
        a later one the caller has not seen (another window added it), nothing is deleted and
        ``ConflictError`` is raised: cutting there would throw away that window's newer messages.
        """
        with self._write() as c:
            if c.execute("SELECT 1 FROM messages WHERE id = ? AND conversation_id = ?", (mid, cid)).fetchone() is None:
                raise NotFoundError(f"message {mid} not found in conversation {cid}")
            if known_ids is not None:
                known = set(known_ids)
                unseen = [row[0] for row in c.execute("SELECT id FROM messages WHERE conversation_id = ? AND id >= ?",
                                                      (cid, mid)) if row[0] not in known]
                if unseen:
                    raise ConflictError("this chat was changed in another window since it was opened; "
                                        "nothing was deleted")
            c.execute("DELETE FROM messages WHERE conversation_id = ? AND id >= ?", (cid, mid))
            c.execute("UPDATE conversations SET updated = ? WHERE id = ?", (self._now(), cid))

    def all_perf_records(self) -> list[tuple[ConversationRow, MessageRow]]:
        """Every message that has a performance record, oldest first, with its conversation."""
        conversations = {conv.id: conv for conv in self.list_conversations()}
        rows = self._read(_MESSAGE_COLUMNS + " WHERE p.record IS NOT NULL ORDER BY m.id", ())
        out = []
        for message, _ in map(_message_from_row, rows):
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
                with _folder_lock(self.path.parent):
                    self._conn.close()
            except StoreError:  # the lock stayed busy: close anyway, a committed row is never lost by it
                self._conn.close()
            self._conn = None

    def __enter__(self) -> HistoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextmanager
def _folder_lock(folder: Path, timeout_s: float | None = None) -> Iterator[None]:
    """Hold an exclusive advisory lock on ``folder`` (``flock`` on the directory itself, so no lock file
    appears beside a history that must stay untouched). Raises ``StoreError`` after ``timeout_s``.

    Where there is no ``flock`` (Windows) or the folder cannot be opened, it holds nothing: the version
    re-check inside the write transaction still keeps concurrent schema creation safe there.
    """
    try:
        import fcntl
    except ImportError:  # Windows
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
                    raise StoreError(f"history is busy: another Miaohui has been opening {folder} for too long")
                time.sleep(0.02)
            except OSError:  # a filesystem without flock (some network mounts): go on unlocked
                break
        yield  # flock is released when fd closes
    finally:
        os.close(fd)


def _check(role: str | None, finish_reason: str | None) -> None:
    if role is not None and role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, not {role!r}")
    if finish_reason is not None and finish_reason not in FINISH_REASONS:
        raise ValueError(f"finish_reason must be None or one of {FINISH_REASONS}, not {finish_reason!r}")


def _migrate_v1_to_v2(c: sqlite3.Connection) -> None:
    """v1 had no per-conversation settings, no finish reasons and no performance records."""
    c.execute("ALTER TABLE conversations ADD COLUMN settings TEXT NOT NULL DEFAULT '{}'")
    c.execute("ALTER TABLE messages ADD COLUMN finish_reason TEXT")
    c.execute("CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages(conversation_id, id)")
    c.execute("CREATE TABLE perf (message_id INTEGER PRIMARY KEY REFERENCES messages(id) ON DELETE CASCADE, "
              "record TEXT NOT NULL)")


# schema version -> the step that brings it to the next version
_MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {1: _migrate_v1_to_v2}


# --------------------------------------------------------------------- defensive row readers
def _message_from_row(row: tuple) -> tuple[MessageRow | None, bool]:
    """(message, repaired): None when the row cannot be shown (no id, no text, unknown role)."""
    mid, cid, role, raw_text, created, finish, record = row
    text, damaged = as_text(raw_text)
    if not isinstance(mid, int) or not isinstance(cid, int) or role not in ROLES or text is None:
        return None, True
    when = as_number(created)
    damaged |= when is None
    if finish is not None and finish not in FINISH_REASONS:
        finish, damaged = None, True
    perf = None
    if record is not None:
        try:
            data = json.loads(record)
            perf = PerfRecord.from_dict(data) if isinstance(data, dict) else None
        except (TypeError, ValueError):
            perf = None
        damaged |= perf is None or isinstance(record, RepairedText)
    return MessageRow(mid, cid, role, text, when or 0.0, finish, perf), damaged


def _conversation_from_row(row: tuple) -> tuple[ConversationRow | None, bool]:
    cid, raw_title, created, updated, raw_prompt, raw_settings, count = row
    if not isinstance(cid, int):
        return None, True
    title, bad_title = as_text(raw_title)
    prompt, bad_prompt = as_text(raw_prompt) if raw_prompt is not None else ("", False)
    try:
        settings = json.loads(raw_settings) if raw_settings is not None else {}
    except (TypeError, ValueError):
        settings = None
    created_n, updated_n = as_number(created), as_number(updated)
    damaged = (bad_title or bad_prompt or not isinstance(settings, dict) or created_n is None
               or updated_n is None)
    return ConversationRow(cid, title or f"Chat {cid}", created_n or 0.0, updated_n or created_n or 0.0,
                           prompt or "", settings if isinstance(settings, dict) else {}, int(count)), damaged


# --------------------------------------------------------------------- salvage of a damaged file
def _write_salvage(fresh: Path, tables: dict[str, dict[int, dict[str, Any]]], now: float) -> tuple[int, int]:
    """Build a fresh v2 file from salvaged rows; returns (conversations, messages) kept."""
    fresh.unlink(missing_ok=True)
    conn = sqlite3.connect(str(fresh), isolation_level=None)
    try:
        conn.execute("BEGIN")
        for statement in _SCHEMA_V2.split(";"):
            if statement.strip():
                conn.execute(statement)
        conversations = set()
        for cid, row in tables["conversations"].items():
            title, _ = as_text(row.get("title"))
            prompt, _ = as_text(row.get("system_prompt"))
            settings = row.get("settings") if isinstance(row.get("settings"), str) else "{}"
            created = as_number(row.get("created")) or now
            conn.execute("INSERT INTO conversations VALUES (?, ?, ?, ?, ?, ?)",
                         (cid, title or f"Recovered chat {cid}", created, as_number(row.get("updated")) or created,
                          prompt or "", settings))
            conversations.add(cid)
        messages = set()
        for mid, row in tables["messages"].items():
            cid, role = row.get("conversation_id"), row.get("role")
            text, _ = as_text(row.get("text"))
            if not isinstance(cid, int) or role not in ROLES or text is None:
                continue
            if cid not in conversations:  # its conversation row was lost: keep the messages under a stand-in
                conn.execute("INSERT INTO conversations VALUES (?, ?, ?, ?, '', '{}')",
                             (cid, f"Recovered chat {cid}", now, now))
                conversations.add(cid)
            finish = row.get("finish_reason") if row.get("finish_reason") in FINISH_REASONS else None
            conn.execute("INSERT INTO messages VALUES (?, ?, ?, ?, ?, ?)",
                         (mid, cid, role, text, as_number(row.get("created")) or now, finish))
            messages.add(mid)
        for _, row in tables["perf"].items():
            if row.get("message_id") in messages and isinstance(row.get("record"), str):
                conn.execute("INSERT INTO perf VALUES (?, ?)", (row["message_id"], row["record"]))
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    finally:
        conn.close()
    return len(conversations), len(messages)
