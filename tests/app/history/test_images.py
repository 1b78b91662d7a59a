"""Schema v11: a user message's images (``messages.images``, ``app.history.images``): content addresses in the images
folder, read back as paths. A v10 file opens backed up and migrated with its rows (no images); the images survive a
reopen and a fork; a damaged cell or an address that is not one reads as none, flagged."""

from __future__ import annotations

import sqlite3

from app.history.images import save_images
from app.history.images_cell import images_from_json, images_to_json, is_image_file
from app.history.notices import HistoryNotice, NoticeKind
from app.history.schema import SCHEMA_VERSION, create_or_migrate
from app.history.store import HistoryStore
from engine.vision import image_store

PNG = b"\x89PNG\r\n\x1a\n-not-really-decoded-here"


def _v10_file(path):
    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute("BEGIN")
    create_or_migrate(raw, 0)  # today's tables, turned back into v10's by dropping v11's column
    raw.execute("ALTER TABLE messages DROP COLUMN images")
    raw.execute("PRAGMA user_version = 10")
    raw.execute("INSERT INTO conversations(id, title, created, updated) VALUES (1, 'old chat', 1.0, 2.0)")
    raw.execute("INSERT INTO messages(id, conversation_id, role, text, created) VALUES (1, 1, 'user', 'hi', 1.0)")
    raw.execute("COMMIT")
    raw.close()


def test_a_v10_history_opens_backed_up_and_migrated_with_no_images(tmp_path, home):
    path = tmp_path / "history.sqlite3"
    _v10_file(path)
    with HistoryStore(path) as store:
        assert store._conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 11
        assert any(n.kind is NoticeKind.UPGRADED for n in store.notices)
        assert [(m.text, m.images) for m in store.messages(1)] == [("hi", ())]
    assert list(tmp_path.glob("history.v10-backup-*.sqlite3"))


def test_images_survive_a_reopen_and_a_fork(tmp_path, home):
    kept = str(image_store.put(PNG, "png"))
    path = tmp_path / "history.sqlite3"
    with HistoryStore(path) as store:
        cid = store.create_conversation()
        mid = store.add_message(cid, "user", "What is this?")
        save_images(store, mid, [kept])
        fork = store.fork_conversation(cid, mid)
        assert store.messages(fork)[0].images == (kept,)
    with HistoryStore(path) as store:
        assert store.messages(cid)[0].images == (kept,)
        stored = store._conn.execute("SELECT images FROM messages WHERE id = ?", (mid,)).fetchone()[0]
    assert str(tmp_path) not in stored and image_store.address(PNG) in stored  # an address, never a path


def test_a_damaged_cell_reads_as_none_flagged():
    assert images_from_json("") == ((), False)
    assert images_from_json("{not json") == ((), True)
    assert images_from_json('["../../etc/passwd.png"]') == ((), True)  # never a path outside the folder
    assert images_to_json([]) == ""


def test_image_files_are_told_from_documents_by_name():
    assert is_image_file("/x/Shot.PNG") and is_image_file("a.jpeg") and not is_image_file("notes.md")


def test_the_salvage_of_a_damaged_file_keeps_a_message_s_images(tmp_path, home):
    from app.history.recovery import quarantine_and_salvage

    kept = str(image_store.put(PNG, "png"))
    path = tmp_path / "history.sqlite3"
    with HistoryStore(path) as store:
        cid = store.create_conversation()
        save_images(store, store.add_message(cid, "user", "What is this?"), [kept])
    quarantine_and_salvage(path, HistoryNotice(NoticeKind.TABLES_MISSING), 5.0)
    with HistoryStore(path) as store:
        assert store.messages(cid)[0].images == (kept,)
