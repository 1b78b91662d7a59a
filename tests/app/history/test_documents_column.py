"""Schema v8: a message's documents (``messages.documents``): a user message's attached files and a reply's numbered
sources (file, page, passage, whole or retrieved, tokens). A v7 file opens, is backed up and migrated with every row
kept (no documents); the documents survive a reopen, a fork and the damaged-file salvage, are exported (Markdown: the
sources under the reply; JSON: fields), and a damaged cell costs nothing but itself."""

from __future__ import annotations

import json
import sqlite3

from app.history import export
from app.history.documents import save_documents
from app.history.documents_cell import documents_from_json, documents_to_json
from app.history.notices import HistoryNotice, NoticeKind
from app.history.recovery import quarantine_and_salvage
from app.history.schema import SCHEMA_VERSION, create_or_migrate
from app.history.store import HistoryStore
from engine.docs.attach import DocumentsUsed
from engine.docs.grounding import Source

USED = DocumentsUsed(mode="retrieve", sources=(
    Source("/docs/report.pdf", 3, "Revenue grew 12% in 2023.", 0.0325),
    Source("/docs/笔记.md", None, "会议在周三举行。", 0.0161)), source_tokens=41, prepare_s=0.125, retrieval="hybrid")
FILES = ("/docs/report.pdf", "/docs/笔记.md")


def _v7_file(path):
    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute("BEGIN")
    create_or_migrate(raw, 0)  # today's tables, turned back into v7's by dropping v8's, v9's and v10's columns
    raw.execute("ALTER TABLE messages DROP COLUMN documents")
    raw.execute("ALTER TABLE versions DROP COLUMN documents")  # v9's (app.history.versions)
    raw.execute("ALTER TABLE conversations DROP COLUMN documents")  # v10's (app.history.conversation_docs)
    raw.execute("ALTER TABLE messages DROP COLUMN images")  # v11's (app.history.images)
    raw.execute("PRAGMA user_version = 7")
    raw.execute("INSERT INTO conversations(id, title, created, updated) VALUES (1, 'old chat', 1.0, 2.0)")
    raw.execute("INSERT INTO messages(id, conversation_id, role, text, created, finish_reason, parent_id) "
                "VALUES (1, 1, 'user', 'hi', 1.0, NULL, NULL), (2, 1, 'assistant', 'hello', 2.0, 'eos', 1)")
    raw.execute("COMMIT")
    raw.close()


def _grounded_chat(store: HistoryStore) -> tuple[int, int, int]:
    cid = store.create_conversation()
    question = store.add_message(cid, "user", "How did revenue change?")
    save_documents(store, question, attachments=FILES)
    reply = store.add_message(cid, "assistant", "")
    store.update_message(reply, "It grew 12% [1].", "eos")
    save_documents(store, reply, used=USED)
    store.update_message(reply, "It grew 12% [1]!", "eos")  # a later save of the reply keeps its sources
    return cid, question, reply


def test_a_v7_history_opens_migrated_backed_up_and_keeps_every_row(tmp_path):
    path = tmp_path / "history.sqlite3"
    _v7_file(path)
    with HistoryStore(path) as store:
        assert list(tmp_path.glob("history.v7-backup-*.sqlite3"))
        assert [(m.text, m.attachments, m.documents) for m in store.messages(1)] == [("hi", (), None),
                                                                                    ("hello", (), None)]
        assert store._conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert any(n.kind is NoticeKind.UPGRADED for n in store.notices)
    backup = sqlite3.connect(next(tmp_path.glob("history.v7-backup-*.sqlite3")))
    assert backup.execute("PRAGMA user_version").fetchone()[0] == 7  # the copy is the file as it was
    backup.close()


def test_documents_are_saved_reopened_forked_and_salvaged(tmp_path):
    path = tmp_path / "history.sqlite3"
    with HistoryStore(path) as store:
        cid, question, reply = _grounded_chat(store)
        fork = store.fork_conversation(cid, reply)
        assert [(m.attachments, m.documents) for m in store.messages(fork)] == [(FILES, None), ((), USED)]
    with HistoryStore(path) as store:
        user, answer = store.messages(cid)
        assert user.attachments == FILES and user.documents is None
        assert answer.documents == USED and answer.text == "It grew 12% [1]!"
        assert not store.notices
    notice = quarantine_and_salvage(path, HistoryNotice(NoticeKind.TABLES_MISSING), 5.0)
    assert notice.kind is NoticeKind.SALVAGED
    with HistoryStore(path) as store:
        assert [(m.attachments, m.documents) for m in store.messages(cid)] == [(FILES, None), ((), USED)]


def test_markdown_lists_the_sources_under_the_reply_and_json_carries_them_as_fields(tmp_path):
    with HistoryStore(tmp_path / "history.sqlite3") as store:
        cid, _, _ = _grounded_chat(store)
        markdown = export.to_markdown(store, cid)
        document = json.loads(export.to_json(store, cid))
    reply_at = markdown.index("It grew 12% [1]!")
    assert markdown.index("*Attached: report.pdf, 笔记.md*") < reply_at
    sources = markdown[reply_at:]
    assert "**Sources** (retrieved passages, 41 tokens):" in sources
    assert "1. [1] report.pdf, page 3\n  > Revenue grew 12% in 2023." in sources
    assert "2. [2] 笔记.md\n  > 会议在周三举行。" in sources
    user, reply = document["messages"]
    assert user["attachments"] == list(FILES) and "sources" not in user
    assert reply["sources"] == [
        {"n": 1, "path": "/docs/report.pdf", "page": 3, "text": "Revenue grew 12% in 2023.", "score": 0.0325},
        {"n": 2, "path": "/docs/笔记.md", "page": None, "text": "会议在周三举行。", "score": 0.0161}]
    assert (reply["docs_mode"], reply["retrieval"], reply["docs_tokens"]) == ("retrieve", "hybrid", 41)
    assert "attachments" not in reply


def test_a_cell_round_trips_and_a_damaged_one_reads_as_none_flagged():
    assert documents_from_json(documents_to_json(FILES, USED)) == (FILES, USED, False)
    assert documents_to_json() == "" and documents_from_json("") == ((), None, False)
    assert documents_from_json("not json") == ((), None, True)
    assert documents_from_json('{"attachments": [3]}') == ((), None, True)
    assert documents_from_json('{"mode": "whole", "sources": [{"path": 1}], "source_tokens": 3, '
                               '"prepare_s": 0.1}') == ((), None, True)
    assert documents_from_json('{"attachments": ["/a.txt"]}') == (("/a.txt",), None, False)


def test_a_damaged_cell_is_reported_and_its_message_still_shown(tmp_path):
    path = tmp_path / "history.sqlite3"
    with HistoryStore(path) as store:
        cid = store.create_conversation()
        mid = store.add_message(cid, "user", "still here")
    raw = sqlite3.connect(path)
    raw.execute("UPDATE messages SET documents = '{broken' WHERE id = ?", (mid,))
    raw.commit()
    raw.close()
    with HistoryStore(path) as store:
        assert [(m.text, m.attachments) for m in store.messages(cid)] == [("still here", ())]
        assert any(n.kind is NoticeKind.MESSAGES_REPAIRED for n in store.notices)
