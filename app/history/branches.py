"""Conversation branches: an edited message keeps the one it replaced, and what followed it, as another branch.

A conversation is a tree (schema v7, ``app.history.schema``): each message follows its ``parent_id`` (NULL: a first
message). An edit does not delete: ``set_aside`` takes the edited message and the messages after it off the branch
shown (``messages.shown`` = 0, rows, reply versions and performance records untouched), so the next ``add_message``
follows the edited message's parent, a sibling of it: version 2 of that message, whose own later messages start empty.
Siblings are a message's versions, oldest first; ``show`` switches the branch below them, in one transaction. The
branch shown is the path from a first message to one leaf, and the store reads it in id order
(``HistoryStore.messages``): it is what the window shows, what the next reply answers (and the KV cache reuse
compares), what Markdown exports and forks copy. A sibling shown again continues to its newest leaf (the latest
message written below it): a choice made deeper inside a branch that was set aside is not remembered.

Owns those rules and their SQL, writing through the store's transaction as ``app.history.versions`` does (reply
versions: the replies a Regenerate replaced, a different thing kept beside its one reply row). No Qt, no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Collection

from app.history.store import ConflictError, HistoryStore, NotFoundError


@dataclass(frozen=True)
class Branches:
    """A message of the branch shown that has siblings (an edit): which of them it is, and how many there are."""

    message_id: int  # the shown sibling
    shown: int  # its 1-based place among its siblings, oldest first
    count: int


@dataclass(frozen=True)
class TreeMessage:
    """One message of the whole tree as stored (the JSON export's ``tree``)."""

    id: int
    parent_id: int | None
    role: str
    text: str
    created: float
    finish_reason: str | None
    shown: bool


def set_aside(store: HistoryStore, cid: int, mid: int, known_ids: Collection[int] | None = None) -> None:
    """Take message ``mid`` and the shown messages after it off the branch shown, kept (an edit is about to send).

    ``known_ids``: the messages from ``mid`` on that the caller shows; one it has not seen (another window added it)
    raises ``ConflictError`` and nothing changes, as ``HistoryStore.delete_messages_from``."""
    with store._write() as c:  # noqa: SLF001 - the history package's one transaction
        if c.execute("SELECT 1 FROM messages WHERE id = ? AND conversation_id = ? AND shown = 1",
                     (mid, cid)).fetchone() is None:
            raise NotFoundError(f"message {mid} not found in conversation {cid}")
        # The shown branch is one path whose ids grow: its messages from mid on are exactly those with id >= mid.
        later = [row[0] for row in c.execute("SELECT id FROM messages WHERE conversation_id = ? AND shown = 1 "
                                             "AND id >= ?", (cid, mid))]
        if known_ids is not None and set(later) - set(known_ids):
            raise ConflictError("this chat was changed in another window since it was opened; nothing was changed")
        c.execute("UPDATE messages SET shown = 0 WHERE conversation_id = ? AND shown = 1 AND id >= ?", (cid, mid))
        c.execute("UPDATE conversations SET updated = ? WHERE id = ?", (store._now(), cid))  # noqa: SLF001


def branch_points(store: HistoryStore, cid: int) -> dict[int, Branches]:
    """The messages of ``cid``'s branch shown that have siblings, by message id."""
    rows = store._read(  # noqa: SLF001
        "SELECT m.id, (SELECT count(*) FROM messages s WHERE s.conversation_id = m.conversation_id "
        "AND s.parent_id IS m.parent_id AND s.id < m.id), (SELECT count(*) FROM messages s WHERE s.conversation_id = "
        "m.conversation_id AND s.parent_id IS m.parent_id) FROM messages m WHERE m.conversation_id = ? AND m.shown = 1",
        (cid,))
    return {int(mid): Branches(int(mid), int(before) + 1, int(count)) for mid, before, count in rows if count > 1}


def show(store: HistoryStore, mid: int, place: int) -> int:
    """Show sibling ``place`` (1-based, oldest first) of message ``mid`` and its branch to its newest leaf, in one
    transaction; the id of the message now shown there. ``NotFoundError`` when there is no such sibling."""
    with store._write() as c:  # noqa: SLF001
        row = c.execute("SELECT conversation_id, parent_id FROM messages WHERE id = ?", (mid,)).fetchone()
        if row is None:
            raise NotFoundError(f"message {mid} not found")
        cid, parent = row
        siblings = [(r[0], r[1]) for r in c.execute("SELECT id, shown FROM messages WHERE conversation_id = ? AND "
                                                    "parent_id IS ? ORDER BY id", (cid, parent))]
        if not 1 <= place <= len(siblings):
            raise NotFoundError(f"message {mid} has no version {place}")
        wanted = siblings[place - 1][0]
        shown = next((sid for sid, on in siblings if on), None)
        if shown == wanted:
            return wanted
        if shown is not None:  # the path from the shown sibling on: the shown messages from its id on
            c.execute("UPDATE messages SET shown = 0 WHERE conversation_id = ? AND shown = 1 AND id >= ?", (cid, shown))
        leaf = c.execute("WITH RECURSIVE below(id) AS (SELECT ? UNION ALL SELECT m.id FROM messages m JOIN below "
                         "ON m.parent_id = below.id) SELECT max(id) FROM below", (wanted,)).fetchone()[0]
        c.execute("WITH RECURSIVE up(id, parent) AS (SELECT id, parent_id FROM messages WHERE id = ? UNION ALL "
                  "SELECT m.id, m.parent_id FROM messages m JOIN up ON m.id = up.parent WHERE up.id != ?) "
                  "UPDATE messages SET shown = 1 WHERE id IN (SELECT id FROM up)", (leaf, wanted))
        c.execute("UPDATE conversations SET updated = ? WHERE id = ?", (store._now(), cid))  # noqa: SLF001
        return int(wanted)


def tree(store: HistoryStore, cid: int) -> list[TreeMessage]:
    """Every message of ``cid``, every branch, in id order (a parent before its children)."""
    rows = store._read("SELECT id, parent_id, role, text, created, finish_reason, shown FROM messages "  # noqa: SLF001
                       "WHERE conversation_id = ? ORDER BY id", (cid,))
    return [TreeMessage(int(mid), parent if isinstance(parent, int) else None, str(role),
                        text if isinstance(text, str) else "", float(created) if isinstance(created, (int, float))
                        else 0.0, finish, bool(shown)) for mid, parent, role, text, created, finish, shown in rows]
