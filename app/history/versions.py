"""Reply versions: the earlier replies a Regenerate replaced, kept as versions of their turn and paged through.

A turn is the reply to one message (``turn_id``: the message the reply follows, its ``parent_id``). Its shown version is
the reply's own row in ``messages`` (with its ``perf`` record and its ``documents``, the sources it was given): what
the next prompt, the exports, search and forks read, exactly as before versions existed. The turn's other versions
wait in the ``versions`` table (schema v5, ``app.history.schema``), each at its place (1-based) with its own text,
thought, tool round-trips, finish reason, time, performance record and sources (schema v9: a grounded reply set aside
keeps them, and shown again it is followed by its own sources). The shown version's place is the one the table lacks.
Showing another version swaps the two in one transaction: the choice is stored (it is what the row holds), the reply
keeps its message id, and a deleted turn message (an edit cut the chat there) takes its versions with it
(``ON DELETE CASCADE``).

Owns those rules and their SQL. It writes through the store's own transaction and reads through its reads (the
store's private ``_write``/``_read``, as the history package's other helpers do) so a version is saved with the same
durability as a message; it owns no file, no Qt and no torch. Regenerate's order is the window's
(``app.window.versions``): ``keep`` the reply as a version, let the controller cut it and stream the new one into a
new row, ``drop`` the kept one again when the regenerate did not start.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass

from app.history.documents_cell import documents_from_json
from app.history.perf import PerfRecord
from app.history.rows import MessageRow
from app.history.store import HistoryStore, NotFoundError, _clean_text
from engine.docs.attach import DocumentsUsed

_VERSION_COLUMNS = "position, text, reasoning, created, finish_reason, record, tool_calls, documents"
# The shown reply (its row, perf record and sources) copied into the versions table: (turn id, place, message id).
_COPY_SHOWN = ("INSERT INTO versions(turn_id, position, text, reasoning, created, finish_reason, record, tool_calls, "
               "documents) SELECT ?, ?, m.text, m.reasoning, m.created, m.finish_reason, p.record, m.tool_calls, "
               "m.documents FROM messages m LEFT JOIN perf p ON p.message_id = m.id WHERE m.id = ?")


@dataclass(frozen=True)
class Version:
    """One version of a turn's reply as stored (the shown one included when listed by ``versions``)."""

    position: int  # 1-based place among the turn's versions
    text: str
    reasoning: str
    created: float
    finish_reason: str | None
    perf: PerfRecord | None
    tool_calls: str = "[]"  # schema v4's JSON cell, carried as stored (``app.history.tool_record`` reads it)
    shown: bool = False
    documents: DocumentsUsed | None = None  # the sources this version was given (schema v9; None: none kept)


@dataclass(frozen=True)
class TurnVersions:
    """A turn with more than one version: its shown reply, which place that reply holds, and how many there are."""

    message_id: int  # the shown reply's row
    turn_id: int
    shown: int
    count: int


def _perf(record: object) -> PerfRecord | None:
    try:
        data = json.loads(record) if isinstance(record, str) else None
    except ValueError:
        return None
    return PerfRecord.from_dict(data) if isinstance(data, dict) else None


def _version(row: tuple, shown: bool = False) -> Version:
    position, text, reasoning, created, finish, record, calls, cell = row
    return Version(int(position), text if isinstance(text, str) else "",
                   reasoning if isinstance(reasoning, str) else "",
                   float(created) if isinstance(created, (int, float)) else 0.0, finish, _perf(record),
                   calls if isinstance(calls, str) else "[]", shown, documents_from_json(cell)[1])


def _shown_place(positions: set[int]) -> int:
    """The place of the shown version: the first one the stored versions leave free."""
    place = 1
    while place in positions:
        place += 1
    return place


def _turn_of(c: sqlite3.Connection, mid: int) -> tuple[int, int]:
    """(conversation id, turn id) of reply ``mid``: the message it follows; ``NotFoundError`` when none."""
    row = c.execute("SELECT conversation_id, role, parent_id FROM messages WHERE id = ?", (mid,)).fetchone()
    if row is None or row[1] != "assistant":
        raise NotFoundError(f"reply {mid} not found")
    if row[2] is None:
        raise NotFoundError(f"reply {mid} answers no message")
    return int(row[0]), int(row[2])


def keep(store: HistoryStore, mid: int) -> int:
    """Keep reply ``mid`` as it is stored as a version of its turn (before a Regenerate replaces it); its place."""
    with store._write() as c:  # noqa: SLF001 - the history package's one transaction
        _cid, turn = _turn_of(c, mid)
        positions = {row[0] for row in c.execute("SELECT position FROM versions WHERE turn_id = ?", (turn,))}
        place = _shown_place(positions)
        c.execute(_COPY_SHOWN, (turn, place, mid))
        return place


def drop(store: HistoryStore, mid: int, place: int) -> None:
    """Undo ``keep``: the version at ``place`` of reply ``mid``'s turn goes (the Regenerate did not start)."""
    with store._write() as c:  # noqa: SLF001
        _cid, turn = _turn_of(c, mid)
        c.execute("DELETE FROM versions WHERE turn_id = ? AND position = ?", (turn, place))


def turns(store: HistoryStore, cid: int) -> dict[int, TurnVersions]:
    """Conversation ``cid``'s turns with more than one version, by their shown reply's message id.

    A turn whose reply is gone (the regenerated reply failed before any text and was removed) is left out; its
    versions stay until ``restore`` brings one back."""
    rows = store._read(  # noqa: SLF001
        "SELECT v.turn_id, group_concat(v.position), (SELECT min(m.id) FROM messages m WHERE m.conversation_id = ? "
        "AND m.parent_id = v.turn_id AND m.shown = 1) FROM versions v JOIN messages t ON t.id = v.turn_id "
        "WHERE t.conversation_id = ? GROUP BY v.turn_id", (cid, cid))
    roles = {row[0]: row[1] for row in store._read(  # noqa: SLF001
        "SELECT id, role FROM messages WHERE conversation_id = ?", (cid,))}
    found = {}
    for turn, places, reply in rows:
        if reply is None or roles.get(reply) != "assistant":
            continue
        positions = {int(p) for p in str(places).split(",") if p.strip().isdigit()}
        found[int(reply)] = TurnVersions(int(reply), int(turn), _shown_place(positions), len(positions) + 1)
    return found


def versions(store: HistoryStore, mid: int) -> list[Version]:
    """Every version of reply ``mid``'s turn in place order, the shown one (``shown``) included; [] when it has one."""
    rows = store._read("SELECT parent_id FROM messages WHERE id = ?", (mid,))  # noqa: SLF001
    turn = rows[0][0] if rows else None
    if turn is None:
        return []
    stored = [_version(row) for row in store._read(  # noqa: SLF001
        f"SELECT {_VERSION_COLUMNS} FROM versions WHERE turn_id = ? ORDER BY position", (turn,))]
    if not stored:
        return []
    current = store._read("SELECT m.text, m.reasoning, m.created, m.finish_reason, p.record, "  # noqa: SLF001
                          "m.tool_calls, m.documents FROM messages m LEFT JOIN perf p ON p.message_id = m.id "
                          "WHERE m.id = ?", (mid,))
    if not current:
        return []
    shown = _version((_shown_place({v.position for v in stored}), *current[0]), shown=True)
    return sorted([*stored, shown], key=lambda v: v.position)


def show(store: HistoryStore, mid: int, place: int) -> MessageRow:
    """Show version ``place`` of reply ``mid``'s turn: it and the shown one swap (one transaction); the row as now."""
    with store._write() as c:  # noqa: SLF001
        cid, turn = _turn_of(c, mid)
        wanted = c.execute(f"SELECT {_VERSION_COLUMNS} FROM versions WHERE turn_id = ? AND position = ?",
                           (turn, place)).fetchone()
        if wanted is not None:
            positions = {row[0] for row in c.execute("SELECT position FROM versions WHERE turn_id = ?", (turn,))}
            current = _shown_place(positions)
            c.execute(_COPY_SHOWN, (turn, current, mid))
            c.execute("DELETE FROM versions WHERE turn_id = ? AND position = ?", (turn, place))
            _pos, text, reasoning, created, finish, record, calls, cell = wanted
            c.execute("UPDATE messages SET text = ?, reasoning = ?, created = ?, finish_reason = ?, tool_calls = ?, "
                      "documents = ? WHERE id = ?", (text, reasoning, created, finish, calls, cell, mid))
            c.execute("DELETE FROM perf WHERE message_id = ?", (mid,))
            if record is not None:
                c.execute("INSERT INTO perf(message_id, record) VALUES (?, ?)", (mid, record))
        elif place != _shown_place({row[0] for row in c.execute("SELECT position FROM versions WHERE turn_id = ?",
                                                                  (turn,))}):
            raise NotFoundError(f"reply {mid} has no version {place}")
    return next(m for m in store.messages(cid) if m.id == mid)


def restore(store: HistoryStore, cid: int, place: int) -> int | None:
    """The last turn of ``cid`` lost its reply (a regenerated reply failed before any text and was removed): its
    version at ``place`` (the one the Regenerate replaced) is the reply again, appended in one transaction; its message
    id, or None when the chat ends in a reply or that version is gone."""
    with store._write() as c:  # noqa: SLF001
        last = c.execute("SELECT id, role FROM messages WHERE conversation_id = ? AND shown = 1 ORDER BY id DESC "
                         "LIMIT 1", (cid,)).fetchone()
        if last is None or last[1] == "assistant":
            return None
        wanted = c.execute(f"SELECT {_VERSION_COLUMNS} FROM versions WHERE turn_id = ? AND position = ?",
                           (last[0], place)).fetchone()
        if wanted is None:
            return None
        _place, text, reasoning, created, finish, record, calls, cell = wanted
        mid = int(c.execute("INSERT INTO messages(conversation_id, role, text, created, finish_reason, reasoning, "
                            "tool_calls, parent_id, documents) VALUES (?, 'assistant', ?, ?, ?, ?, ?, ?, ?)",
                            (cid, _clean_text(text), created, finish, reasoning, calls, last[0], cell)).lastrowid)
        if record is not None:
            c.execute("INSERT INTO perf(message_id, record) VALUES (?, ?)", (mid, record))
        c.execute("DELETE FROM versions WHERE turn_id = ? AND position = ?", (last[0], place))
        c.execute("UPDATE conversations SET updated = ? WHERE id = ?", (store._now(), cid))  # noqa: SLF001
        return mid
