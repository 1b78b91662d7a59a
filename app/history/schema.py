"""The history file's schema: its tables, its version (``PRAGMA user_version``) and the steps from older versions.

Owns the tables of the current version (v11), the migration step from each older version, and the values a
message's ``role`` and ``finish_reason`` may take. It only runs statements on a connection it is given,
inside the caller's transaction: it opens no file, takes no lock and makes no backup (``app.history.store``
backs an old file up before migrating it), and knows nothing of damaged files (``app.history.recovery``).
"""

from __future__ import annotations

import sqlite3
from typing import Callable

SCHEMA_VERSION = 11
ROLES = ("system", "user", "assistant")
FINISH_REASONS = ("eos", "length", "cancelled", "error")

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


def create_or_migrate(c: sqlite3.Connection, version: int) -> None:
    """Bring a file at schema ``version`` (0: empty) to ``SCHEMA_VERSION`` in the caller's transaction."""
    if version == 0:  # a new file: v2's tables, then the steps after v2
        for statement in _SCHEMA_V2.split(";"):
            if statement.strip():
                c.execute(statement)
        version = 2
    for step in range(version, SCHEMA_VERSION):
        _MIGRATIONS[step](c)
    c.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def _migrate_v1_to_v2(c: sqlite3.Connection) -> None:
    """v1 had no per-conversation settings, no finish reasons and no performance records."""
    c.execute("ALTER TABLE conversations ADD COLUMN settings TEXT NOT NULL DEFAULT '{}'")
    c.execute("ALTER TABLE messages ADD COLUMN finish_reason TEXT")
    c.execute("CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages(conversation_id, id)")
    c.execute("CREATE TABLE perf (message_id INTEGER PRIMARY KEY REFERENCES messages(id) ON DELETE CASCADE, "
              "record TEXT NOT NULL)")


def _migrate_v2_to_v3(c: sqlite3.Connection) -> None:
    """v3 keeps a reasoning model's thought beside its answer (``messages.reasoning``, '' for every other reply)."""
    c.execute("ALTER TABLE messages ADD COLUMN reasoning TEXT NOT NULL DEFAULT ''")


def _migrate_v3_to_v4(c: sqlite3.Connection) -> None:
    """v4 keeps a reply's tool round-trips with it (``messages.tool_calls``: a JSON list, ``app.history.tool_record``;
    '[]' for every reply that called none)."""
    c.execute("ALTER TABLE messages ADD COLUMN tool_calls TEXT NOT NULL DEFAULT '[]'")


def _migrate_v4_to_v5(c: sqlite3.Connection) -> None:
    """v5 keeps the replies a Regenerate replaced as versions of their turn (``app.history.versions``): each at its
    place, with its own text, thought, tool round-trips, finish reason, time and performance record; the turn's shown
    version stays the reply's own row. A turn is the message the reply answers: deleting it deletes its versions."""
    c.execute("CREATE TABLE versions (turn_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE, "
              "position INTEGER NOT NULL, text TEXT NOT NULL, reasoning TEXT NOT NULL DEFAULT '', created REAL NOT NULL, "
              "finish_reason TEXT, record TEXT, tool_calls TEXT NOT NULL DEFAULT '[]', PRIMARY KEY (turn_id, position))")


def _migrate_v5_to_v6(c: sqlite3.Connection) -> None:
    """v6 remembers which conversation a fork was copied from (``conversations.forked_from``; NULL: not a fork), so
    the list can mark a fork and name its source. No foreign key: a deleted source leaves the fork a fork, and
    AUTOINCREMENT never hands its id to another conversation."""
    c.execute("ALTER TABLE conversations ADD COLUMN forked_from INTEGER")


def _migrate_v6_to_v7(c: sqlite3.Connection) -> None:
    """v7 makes a conversation a tree (``app.history.branches``): ``messages.parent_id`` is the message it follows
    (NULL: the first), so an edited message is a sibling of the one it replaced, each with its own later messages;
    ``messages.shown`` (1/0) marks the branch shown, the path from the first message to one leaf, which reads in id
    order because a child is always written after its parent. An older file's linear history becomes that one branch:
    each message's parent is the one before it. No foreign key on ``parent_id``: a branch is deleted by walking it
    (``delete_messages_from``), never by a cascade, whose depth SQLite limits to 1000 levels."""
    c.execute("ALTER TABLE messages ADD COLUMN parent_id INTEGER")
    c.execute("ALTER TABLE messages ADD COLUMN shown INTEGER NOT NULL DEFAULT 1")
    c.execute("UPDATE messages SET parent_id = (SELECT max(p.id) FROM messages p "
              "WHERE p.conversation_id = messages.conversation_id AND p.id < messages.id)")
    c.execute("CREATE INDEX messages_by_parent ON messages(parent_id)")


def _migrate_v7_to_v8(c: sqlite3.Connection) -> None:
    """v8 keeps a message's documents with it (``messages.documents``, ``app.history.documents``): a user message's
    attached files, a reply's sources (number, file, page, passage text), whole or retrieved and the tokens they
    added, as one JSON object; '' for every message without documents. A column of its own, not the text or the perf
    record: the text stays the user's words (search, titles, exports), the perf record is replaced by every save of
    a reply, and an older Miaohui reading a v8 file never sees it."""
    c.execute("ALTER TABLE messages ADD COLUMN documents TEXT NOT NULL DEFAULT ''")


def _migrate_v8_to_v9(c: sqlite3.Connection) -> None:
    """v9 keeps a reply version's documents with it (``versions.documents``, the same cell as ``messages.documents``):
    a Regenerate sets a grounded reply aside with its sources, and paging back to it shows them again. '' for every
    version kept before (their sources were not kept: they read as none)."""
    c.execute("ALTER TABLE versions ADD COLUMN documents TEXT NOT NULL DEFAULT ''")


def _migrate_v9_to_v10(c: sqlite3.Connection) -> None:
    """v10 keeps what a conversation answers from (``conversations.documents``, ``app.history.conversation_docs``): the
    collections the user picked for it and its documents mode (auto, whole, retrieve), one JSON object; '' for a
    conversation that picked none (every conversation of an older file). A column of its own, not the settings
    object: the settings are the defaults a new conversation starts from, collections belong to one conversation."""
    c.execute("ALTER TABLE conversations ADD COLUMN documents TEXT NOT NULL DEFAULT ''")


def _migrate_v10_to_v11(c: sqlite3.Connection) -> None:
    """v11 keeps a user message's images (``messages.images``, ``app.history.images``): a JSON list of content
    addresses in the images folder beside the history; '' for every message without images (all of an older file).
    A column of its own, not the documents cell: an older Miaohui must not regenerate a reply to an image it cannot
    see as if the question had none (a v11 file is newer than it reads)."""
    c.execute("ALTER TABLE messages ADD COLUMN images TEXT NOT NULL DEFAULT ''")


# schema version -> the step that brings it to the next version
_MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {1: _migrate_v1_to_v2, 2: _migrate_v2_to_v3,
                                                                3: _migrate_v3_to_v4, 4: _migrate_v4_to_v5,
                                                                5: _migrate_v5_to_v6, 6: _migrate_v6_to_v7,
                                                                7: _migrate_v7_to_v8, 8: _migrate_v8_to_v9,
                                                                9: _migrate_v9_to_v10,
                                                                10: _migrate_v10_to_v11}
