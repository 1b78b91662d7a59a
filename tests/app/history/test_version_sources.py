"""Schema v9: a reply version keeps its documents (``versions.documents``). Regenerate's ``keep`` sets a grounded reply
aside with its sources, ``show`` swaps them back with its text (and the other version's go aside with its own),
``restore`` brings them back, they survive closing and reopening the file, the JSON export lists each version's
sources, and a v8 file is migrated with its versions kept (no sources: none were kept then)."""

from __future__ import annotations

import json
import sqlite3

from app.history import export, versions
from app.history.documents import save_documents
from app.history.schema import SCHEMA_VERSION, create_or_migrate
from app.history.store import HistoryStore
from engine.docs.attach import DocumentsUsed
from engine.docs.grounding import Source

FIRST = DocumentsUsed(mode="whole", sources=(Source("/docs/notes.md", None, "The kettle boils in ninety seconds.",
                                                    None),), source_tokens=19, prepare_s=0.01, retrieval=None)
SECOND = DocumentsUsed(mode="retrieve", sources=(Source("/docs/report.pdf", 4, "Tea is at ten.", 0.0325),
                                                 Source("/docs/笔记.md", None, "水壶九十秒烧开。", 0.0161)),
                       source_tokens=33, prepare_s=0.2, retrieval="keyword")


def _grounded_turn(store: HistoryStore) -> tuple[int, int]:
    cid = store.create_conversation()
    question = store.add_message(cid, "user", "How fast is the kettle?")
    save_documents(store, question, attachments=("/docs/notes.md",))
    reply = store.add_message(cid, "assistant", "")
    store.update_message(reply, "Ninety seconds [1].", "eos")
    save_documents(store, reply, used=FIRST)
    return cid, reply


def _regenerate(store: HistoryStore, cid: int, reply: int, text: str, used: DocumentsUsed | None) -> int:
    """What the window does on Regenerate: keep the reply as a version, cut it, save the new one in a new row."""
    versions.keep(store, reply)
    store.delete_messages_from(cid, reply, known_ids=(reply,))
    new = store.add_message(cid, "assistant", "")
    store.update_message(new, text, "eos")
    if used is not None:
        save_documents(store, new, used=used)
    return new


def test_a_version_set_aside_keeps_its_sources_and_paging_swaps_them_with_its_text(tmp_path):
    path = tmp_path / "history.sqlite3"
    with HistoryStore(path) as store:
        cid, reply = _grounded_turn(store)
        new = _regenerate(store, cid, reply, "At ten [1].", SECOND)
        listed = versions.versions(store, new)
        assert [(v.position, v.text, v.shown, v.documents) for v in listed] == [
            (1, "Ninety seconds [1].", False, FIRST), (2, "At ten [1].", True, SECOND)]
        row = versions.show(store, new, 1)
        assert (row.text, row.documents) == ("Ninety seconds [1].", FIRST)
    with HistoryStore(path) as store:  # reopened: the choice and each version's sources kept
        shown = store.messages(cid)[-1]
        assert (shown.id, shown.text, shown.documents) == (new, "Ninety seconds [1].", FIRST)
        assert [(v.position, v.documents) for v in versions.versions(store, new)] == [(1, FIRST), (2, SECOND)]
        data = json.loads(export.to_json(store, cid))
        kept = data["messages"][-1]["versions"]
        assert [v.get("docs_mode") for v in kept] == ["whole", "retrieve"]
        assert kept[1]["sources"][1] == {"n": 2, "path": "/docs/笔记.md", "page": None, "text": "水壶九十秒烧开。",
                                         "score": 0.0161}
        assert versions.show(store, new, 2).documents == SECOND


def test_a_reply_given_no_sources_swaps_with_one_that_had_them_and_restore_brings_them_back(tmp_path):
    with HistoryStore(tmp_path / "history.sqlite3") as store:
        cid, reply = _grounded_turn(store)
        new = _regenerate(store, cid, reply, "I do not know.", None)
        assert versions.show(store, new, 1).documents == FIRST
        assert versions.show(store, new, 2).documents is None  # its own (none), not the other version's
        assert versions.show(store, new, 1).documents == FIRST
        # Regenerated again, the new reply failed before any text: the version it replaced comes back with its sources.
        place = versions.keep(store, new)
        store.delete_messages_from(cid, new, known_ids=(new,))
        restored = versions.restore(store, cid, place)
        assert restored is not None and store.messages(cid)[-1].id == restored
        assert (store.messages(cid)[-1].text, store.messages(cid)[-1].documents) == ("Ninety seconds [1].", FIRST)


def test_a_v8_history_is_migrated_and_its_versions_read_without_sources(tmp_path):
    path = tmp_path / "history.sqlite3"
    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute("BEGIN")
    create_or_migrate(raw, 0)  # today's tables, turned back into v8's by dropping v9's column
    raw.execute("ALTER TABLE versions DROP COLUMN documents")
    raw.execute("ALTER TABLE conversations DROP COLUMN documents")  # v10's (app.history.conversation_docs)
    raw.execute("ALTER TABLE messages DROP COLUMN images")  # v11's (app.history.images)
    raw.execute("PRAGMA user_version = 8")
    raw.execute("INSERT INTO conversations(id, title, created, updated) VALUES (1, 'old', 1.0, 2.0)")
    raw.execute("INSERT INTO messages(id, conversation_id, role, text, created, finish_reason, parent_id) "
                "VALUES (1, 1, 'user', 'hi', 1.0, NULL, NULL), (2, 1, 'assistant', 'hello', 2.0, 'eos', 1)")
    raw.execute("INSERT INTO versions(turn_id, position, text, created, finish_reason) "
                "VALUES (1, 1, 'hey', 1.5, 'eos')")
    raw.execute("COMMIT")
    raw.close()
    with HistoryStore(path) as store:
        assert store._conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert list(tmp_path.glob("history.v8-backup-*.sqlite3"))
        assert [(v.text, v.documents) for v in versions.versions(store, 2)] == [("hey", None), ("hello", None)]
        row = versions.show(store, 2, 1)
        assert (row.text, row.documents) == ("hey", None)
