"""Schema v10: what a conversation answers from (``conversations.documents``): its collections and documents mode. A v9
file opens, is backed up and migrated with every row kept (no collections); the choice survives a reopen, a fork and
the damaged-file salvage, and a damaged cell reads as none."""

from __future__ import annotations

import sqlite3

from app.history.conversation_docs import DocsChoice, choice_from_json, choice_to_json, load_choice, save_choice
from app.history.notices import HistoryNotice, NoticeKind
from app.history.recovery import quarantine_and_salvage
from app.history.schema import SCHEMA_VERSION, create_or_migrate
from app.history.store import HistoryStore, NotFoundError

CHOICE = DocsChoice(("notes", "笔记"), "retrieve")


def _v9_file(path):
    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute("BEGIN")
    create_or_migrate(raw, 0)  # today's tables, turned back into v9's by dropping v10's column
    raw.execute("ALTER TABLE conversations DROP COLUMN documents")
    raw.execute("ALTER TABLE messages DROP COLUMN images")  # v11's (app.history.images)
    raw.execute("PRAGMA user_version = 9")
    raw.execute("INSERT INTO conversations(id, title, created, updated, settings) VALUES (1, 'old chat', 1.0, 2.0, "
                "'{\"temperature\": 0.5}')")
    raw.execute("INSERT INTO messages(id, conversation_id, role, text, created, finish_reason, parent_id, documents) "
                "VALUES (1, 1, 'user', 'hi', 1.0, NULL, NULL, '{\"attachments\": [\"/a.txt\"]}'), "
                "(2, 1, 'assistant', 'hello', 2.0, 'eos', 1, '')")
    raw.execute("COMMIT")
    raw.close()


def test_a_v9_history_opens_migrated_backed_up_and_keeps_every_row(tmp_path):
    path = tmp_path / "history.sqlite3"
    _v9_file(path)
    with HistoryStore(path) as store:
        assert store._conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION >= 10
        assert any(n.kind is NoticeKind.UPGRADED for n in store.notices)
        assert [(m.text, m.attachments) for m in store.messages(1)] == [("hi", ("/a.txt",)), ("hello", ())]
        assert store.get_conversation(1).settings == {"temperature": 0.5}
        assert load_choice(store, 1) == DocsChoice()  # an older conversation picked nothing
        save_choice(store, 1, CHOICE)
    backup = sqlite3.connect(next(tmp_path.glob("history.v9-backup-*.sqlite3")))
    assert backup.execute("PRAGMA user_version").fetchone()[0] == 9  # the copy is the file as it was
    backup.close()
    with HistoryStore(path) as store:
        assert load_choice(store, 1) == CHOICE and not store.notices


def test_the_choice_survives_a_reopen_a_fork_and_the_salvage(tmp_path):
    path = tmp_path / "history.sqlite3"
    with HistoryStore(path) as store:
        cid = store.create_conversation()
        other = store.create_conversation()
        mid = store.add_message(cid, "user", "What is in my notes?")
        save_choice(store, cid, CHOICE)
        fork = store.fork_conversation(cid, mid)
        assert load_choice(store, fork) == CHOICE
        assert load_choice(store, other) == DocsChoice()
        save_choice(store, cid, DocsChoice())  # picked nothing again: the cell is empty
        assert store._conn.execute("SELECT documents FROM conversations WHERE id = ?", (cid,)).fetchone()[0] == ""
        save_choice(store, cid, CHOICE)
        try:
            save_choice(store, 999, CHOICE)
        except NotFoundError:
            pass
        else:
            raise AssertionError("a missing conversation must be said")
    notice = quarantine_and_salvage(path, HistoryNotice(NoticeKind.TABLES_MISSING), 5.0)
    assert notice.kind is NoticeKind.SALVAGED
    with HistoryStore(path) as store:
        assert load_choice(store, cid) == CHOICE and load_choice(store, fork) == CHOICE


def test_a_cell_round_trips_and_a_damaged_one_reads_as_none_flagged(tmp_path):
    assert choice_from_json(choice_to_json(CHOICE)) == (CHOICE, False)
    assert choice_to_json(DocsChoice()) == "" and choice_from_json("") == (DocsChoice(), False)
    assert choice_from_json("{broken") == (DocsChoice(), True)
    assert choice_from_json('{"collections": [3]}') == (DocsChoice(), True)
    assert choice_from_json('{"collections": ["a"], "mode": "everything"}') == (DocsChoice(), True)
    assert choice_from_json('{"mode": "whole"}') == (DocsChoice((), "whole"), False)
    path = tmp_path / "history.sqlite3"
    with HistoryStore(path) as store:
        cid = store.create_conversation()
    raw = sqlite3.connect(path)
    raw.execute("UPDATE conversations SET documents = '[1, 2]' WHERE id = ?", (cid,))
    raw.commit()
    raw.close()
    with HistoryStore(path) as store:
        assert load_choice(store, cid) == DocsChoice()  # the conversation still opens, with nothing picked
