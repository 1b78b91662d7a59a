"""Schema v4: a reply's tool round-trips (``messages.tool_calls``: name, arguments, result, ok, time, refused) kept
with it; a v3 file opens, is backed up and migrated with every row kept (no calls); the round-trips survive a
reopen, a fork and the damaged-file salvage, are exported (Markdown and JSON), and a damaged cell costs nothing."""

from __future__ import annotations

import json
import sqlite3

from app.history import export
from app.history.schema import SCHEMA_VERSION, create_or_migrate
from app.history.store import HistoryStore
from app.history.tool_record import ToolCallRecord, records_from_json

CALLS = (ToolCallRecord("add", '{"a": 2, "b": 40}', "42", True, 0.0123),
         ToolCallRecord("shout", '{"text": "hi"}', "the user refused to run this tool", False, 0.0, refused=True))


def _v3_file(path):
    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute("BEGIN")
    create_or_migrate(raw, 0)  # today's tables, then turned back into v3's by dropping v4's column
    raw.execute("ALTER TABLE messages DROP COLUMN tool_calls")
    raw.execute("ALTER TABLE messages DROP COLUMN documents")  # v8's (app.history.documents)
    raw.execute("ALTER TABLE conversations DROP COLUMN documents")  # v9's (app.history.conversation_docs)
    raw.execute("DROP TABLE versions")  # v5's (app.history.versions)
    raw.execute("ALTER TABLE conversations DROP COLUMN forked_from")  # v6's
    raw.execute("DROP INDEX messages_by_parent")  # v7's tree
    raw.execute("ALTER TABLE messages DROP COLUMN parent_id")
    raw.execute("ALTER TABLE messages DROP COLUMN shown")
    raw.execute("ALTER TABLE messages DROP COLUMN images")  # v11's (app.history.images)
    raw.execute("PRAGMA user_version = 3")
    raw.execute("INSERT INTO conversations VALUES (1, 'old chat', 1.0, 2.0, '', '{}')")
    raw.execute("INSERT INTO messages(id, conversation_id, role, text, created, finish_reason, reasoning) "
                "VALUES (1, 1, 'user', 'hi', 1.0, NULL, ''), (2, 1, 'assistant', 'hello', 2.0, 'eos', 'hm')")
    raw.execute("COMMIT")
    raw.close()


def test_a_v3_history_opens_migrated_backed_up_and_keeps_every_row(tmp_path):
    path = tmp_path / "history.sqlite3"
    _v3_file(path)
    with HistoryStore(path) as store:
        assert list(tmp_path.glob("history.v3-backup-*.sqlite3"))
        assert [(m.text, m.reasoning, m.tool_calls) for m in store.messages(1)] == [("hi", "", ()),
                                                                                   ("hello", "hm", ())]
        assert store._conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_round_trips_are_saved_reopened_forked_and_exported(tmp_path):
    path = tmp_path / "history.sqlite3"
    with HistoryStore(path) as store:
        cid = store.create_conversation()
        store.add_message(cid, "user", "Add 2 and 40")
        mid = store.add_message(cid, "assistant", "")
        store.update_message(mid, "It is 42.", "eos", tool_calls=CALLS)
        store.update_message(mid, "It is 42!", "eos")  # a later save without calls keeps them
        fork = store.fork_conversation(cid, mid)
        assert store.messages(fork)[-1].tool_calls == CALLS
    with HistoryStore(path) as store:
        assert store.messages(cid)[-1].tool_calls == CALLS
        markdown = export.to_markdown(store, cid)
        document = json.loads(export.to_json(store, cid))
    assert "add" in markdown and '{"a": 2, "b": 40}' in markdown and "→ 42" in markdown and "12.3 ms" in markdown
    assert "refused" in markdown
    calls = document["messages"][-1]["tool_calls"]
    assert calls[0] == {"name": "add", "arguments": {"a": 2, "b": 40}, "result": "42", "ok": True, "ms": 12.3,
                        "refused": False}
    assert calls[1]["refused"] and not calls[1]["ok"]
    assert "tool_calls" not in document["messages"][0]


def test_a_damaged_cell_reads_as_no_calls_and_is_reported_repaired():
    assert records_from_json("not json") == ((), True)
    assert records_from_json('[{"name": 3}]') == ((), True)
    assert records_from_json("[]") == ((), False)
    good, damaged = records_from_json(json.dumps([c.to_dict() for c in CALLS]))
    assert good == CALLS and not damaged
