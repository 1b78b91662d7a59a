"""Schema v7: the conversation tree (``app.history.branches``) on real SQLite: an edit keeps the message it replaced
and everything after it (reply versions included) as another branch, paging switches the branch shown (what the store
reads, forks copy and Markdown exports), JSON carries the whole tree, a Regenerate deletes only its own subtree, the
damaged-file salvage keeps the tree, and a v6 file is backed up and migrated with its history as one branch."""

from __future__ import annotations

import json
import sqlite3

import pytest

from app.history import branches, versions
from app.history.export import to_json, to_markdown
from app.history.notices import HistoryNotice, NoticeKind
from app.history.recovery import quarantine_and_salvage
from app.history.schema import SCHEMA_VERSION, create_or_migrate
from app.history.store import ConflictError, HistoryStore, NotFoundError


def _texts(store: HistoryStore, cid: int) -> list[str]:
    return [m.text for m in store.messages(cid)]


def _edited_chat(store: HistoryStore) -> tuple[int, dict[str, int]]:
    """hi → hello; what is 2+2 → four (regenerated once: "4" kept as a version); then the question edited to 3+3."""
    cid = store.create_conversation()
    ids = {"hi": store.add_message(cid, "user", "hi"), "hello": store.add_message(cid, "assistant", "hello", "eos")}
    ids["q1"] = store.add_message(cid, "user", "what is 2+2")
    first = store.add_message(cid, "assistant", "4", "eos")
    versions.keep(store, first)
    store.delete_messages_from(cid, first, known_ids=(first,))
    ids["a1"] = store.add_message(cid, "assistant", "four", "eos")
    branches.set_aside(store, cid, ids["q1"], known_ids=(ids["q1"], ids["a1"]))
    ids["q2"] = store.add_message(cid, "user", "what is 3+3")
    ids["a2"] = store.add_message(cid, "assistant", "six", "eos")
    return cid, ids


def test_an_edit_keeps_the_old_branch_and_paging_shows_it_with_its_reply_versions(tmp_path):
    with HistoryStore(tmp_path / "history.sqlite3") as store:
        cid, ids = _edited_chat(store)
        assert _texts(store, cid) == ["hi", "hello", "what is 3+3", "six"]
        assert branches.branch_points(store, cid) == {ids["q2"]: branches.Branches(ids["q2"], 2, 2)}
        assert store.get_conversation(cid).message_count == 4

        assert branches.show(store, ids["q2"], 1) == ids["q1"]
        assert _texts(store, cid) == ["hi", "hello", "what is 2+2", "four"]
        assert branches.branch_points(store, cid) == {ids["q1"]: branches.Branches(ids["q1"], 1, 2)}
        assert [v.text for v in versions.versions(store, ids["a1"])] == ["4", "four"]  # its versions are intact
        # a message on the old branch follows it
        later = store.add_message(cid, "user", "and 5+5?")
        assert _texts(store, cid)[-2:] == ["four", "and 5+5?"]
        fork = store.fork_conversation(cid, later)
        assert _texts(store, fork) == ["hi", "hello", "what is 2+2", "four", "and 5+5?"]
        assert branches.branch_points(store, fork) == {}

        assert branches.show(store, ids["q1"], 2) == ids["q2"]
        assert _texts(store, cid) == ["hi", "hello", "what is 3+3", "six"]
    with HistoryStore(tmp_path / "history.sqlite3") as store:  # the choice is stored
        assert _texts(store, cid) == ["hi", "hello", "what is 3+3", "six"]
        with pytest.raises(NotFoundError):
            branches.show(store, ids["q2"], 3)


def test_editing_the_first_message_branches_at_the_root(tmp_path):
    with HistoryStore(tmp_path / "history.sqlite3") as store:
        cid = store.create_conversation()
        first = store.add_message(cid, "user", "hi")
        store.add_message(cid, "assistant", "hello", "eos")
        branches.set_aside(store, cid, first)
        second = store.add_message(cid, "user", "你好")
        assert _texts(store, cid) == ["你好"]
        assert branches.branch_points(store, cid) == {second: branches.Branches(second, 2, 2)}
        branches.show(store, second, 1)
        assert _texts(store, cid) == ["hi", "hello"]


def test_a_set_aside_refuses_when_another_window_added_a_message(tmp_path):
    with HistoryStore(tmp_path / "history.sqlite3") as store:
        cid = store.create_conversation()
        question = store.add_message(cid, "user", "hi")
        store.add_message(cid, "assistant", "hello", "eos")
        with pytest.raises(ConflictError):
            branches.set_aside(store, cid, question, known_ids=(question,))
        assert _texts(store, cid) == ["hi", "hello"] and branches.branch_points(store, cid) == {}


def test_regenerating_on_one_branch_deletes_only_its_own_reply(tmp_path):
    with HistoryStore(tmp_path / "history.sqlite3") as store:
        cid, ids = _edited_chat(store)
        branches.show(store, ids["q2"], 1)
        # ids["q2"] and ids["a2"] are later than ids["a1"]: an "id >= a1" cut would take the other branch with it
        store.delete_messages_from(cid, ids["a1"], known_ids=(ids["a1"],))
        assert _texts(store, cid) == ["hi", "hello", "what is 2+2"]
        branches.show(store, ids["q1"], 2)
        assert _texts(store, cid) == ["hi", "hello", "what is 3+3", "six"]


def test_exports_write_the_branch_shown_and_json_carries_the_whole_tree(tmp_path):
    with HistoryStore(tmp_path / "history.sqlite3") as store:
        cid, ids = _edited_chat(store)
        markdown = to_markdown(store, cid)
        document = json.loads(to_json(store, cid))
    assert "what is 3+3" in markdown and "six" in markdown and "what is 2+2" not in markdown
    assert "*version 2 of 2*" in markdown and "4 messages" in markdown
    assert [m["text"] for m in document["messages"]] == ["hi", "hello", "what is 3+3", "six"]
    assert document["messages"][2]["branch"] == {"shown": 2, "count": 2}
    tree = {m["id"]: m for m in document["tree"]}
    assert [m["text"] for m in document["tree"]] == ["hi", "hello", "what is 2+2", "four", "what is 3+3", "six"]
    assert tree[ids["q1"]]["parent_id"] == tree[ids["q2"]]["parent_id"] == ids["hello"]
    assert tree[ids["a1"]]["parent_id"] == ids["q1"] and tree[ids["hi"]]["parent_id"] is None
    assert [m["shown"] for m in document["tree"]] == [True, True, False, False, True, True]


def test_the_salvage_of_a_damaged_file_keeps_the_tree(tmp_path):
    path = tmp_path / "history.sqlite3"
    with HistoryStore(path) as store:
        cid, ids = _edited_chat(store)
    quarantine_and_salvage(path, HistoryNotice(NoticeKind.INTEGRITY), 5.0)
    with HistoryStore(path) as store:
        assert _texts(store, cid) == ["hi", "hello", "what is 3+3", "six"]
        branches.show(store, ids["q2"], 1)
        assert _texts(store, cid) == ["hi", "hello", "what is 2+2", "four"]


def test_a_v6_history_is_backed_up_and_migrated_with_its_history_as_one_branch(tmp_path):
    path = tmp_path / "history.sqlite3"
    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute("BEGIN")
    create_or_migrate(raw, 0)  # today's tables, turned back into v6's by dropping v7's columns
    raw.execute("DROP INDEX messages_by_parent")
    raw.execute("ALTER TABLE messages DROP COLUMN parent_id")
    raw.execute("ALTER TABLE messages DROP COLUMN documents")  # v8's (app.history.documents)
    raw.execute("ALTER TABLE conversations DROP COLUMN documents")  # v10's (app.history.conversation_docs)
    raw.execute("ALTER TABLE messages DROP COLUMN shown")
    raw.execute("ALTER TABLE versions DROP COLUMN documents")  # v9's (app.history.versions)
    raw.execute("ALTER TABLE messages DROP COLUMN images")  # v11's (app.history.images)
    raw.execute("PRAGMA user_version = 6")
    raw.execute("INSERT INTO conversations(id, title, created, updated) VALUES (1, 'a', 1.0, 1.0), (2, 'b', 1.0, 1.0)")
    raw.executemany("INSERT INTO messages(id, conversation_id, role, text, created) VALUES (?, ?, ?, ?, 1.0)",
                    [(1, 1, "user", "hi"), (2, 2, "user", "yo"), (3, 1, "assistant", "hello"),
                     (4, 2, "assistant", "hey"), (5, 1, "user", "bye")])
    raw.execute("COMMIT")
    raw.close()
    with HistoryStore(path) as store:
        backups = list(tmp_path.glob("history.v6-backup-*.sqlite3"))
        assert len(backups) == 1
        assert sqlite3.connect(backups[0]).execute("PRAGMA user_version").fetchone()[0] == 6
        assert store._conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert _texts(store, 1) == ["hi", "hello", "bye"] and _texts(store, 2) == ["yo", "hey"]
        assert [(t.id, t.parent_id, t.shown) for t in branches.tree(store, 1)] == [(1, None, True), (3, 1, True),
                                                                                  (5, 3, True)]
        branches.set_aside(store, 1, 5)  # the migrated file branches like a new one
        store.add_message(1, "user", "goodbye")
        assert _texts(store, 1) == ["hi", "hello", "goodbye"] and len(branches.branch_points(store, 1)) == 1
