"""Schema v3: a reasoning model's thought kept beside its answer (``messages.reasoning``); a v2 file opens,
is backed up and migrated with every row kept (its replies have no thought); the salvage of a damaged file and a
fork keep the thought."""

from __future__ import annotations

import sqlite3

from app.history.perf import PerfRecord
from app.history.schema import SCHEMA_VERSION, _SCHEMA_V2
from app.history.store import HistoryStore


def _v2_file(path):
    raw = sqlite3.connect(path)
    raw.executescript(_SCHEMA_V2)
    raw.execute("INSERT INTO conversations VALUES (1, 'old chat', 1.0, 2.0, '', '{}')")
    raw.executemany("INSERT INTO messages VALUES (?, 1, ?, ?, ?, ?)",
                    [(1, "user", "hi", 1.0, None), (2, "assistant", "hello 你好", 2.0, "eos")])
    raw.execute("PRAGMA user_version = 2")
    raw.commit()
    raw.close()


def test_a_v2_history_opens_migrated_and_keeps_every_row(tmp_path):
    path = tmp_path / "history.sqlite3"
    _v2_file(path)
    with HistoryStore(path) as store:
        assert list(tmp_path.glob("history.v2-backup-*.sqlite3"))
        assert [(m.role, m.text, m.finish_reason, m.reasoning) for m in store.messages(1)] == [
            ("user", "hi", None, ""), ("assistant", "hello 你好", "eos", "")]
        assert store._conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_a_thought_is_saved_read_back_and_forked(tmp_path):
    with HistoryStore(tmp_path / "history.sqlite3") as store:
        cid = store.create_conversation()
        store.add_message(cid, "user", "Capital of France?")
        mid = store.add_message(cid, "assistant", "")
        store.update_message(mid, "Paris", "eos", PerfRecord(model="m", thinking_tokens=5, thinking_s=0.5,
                                                             ttft_thought_s=0.1, ttft_answer_s=0.7),
                             reasoning="先想一想：France…")
        store.update_message(mid, "Paris.", "eos")  # a later save without a thought keeps it
        reply = store.messages(cid)[-1]
        assert (reply.text, reply.reasoning) == ("Paris.", "先想一想：France…")
        assert (reply.perf.thinking_tokens, reply.perf.thinking_s, reply.perf.ttft_answer_s) == (5, 0.5, 0.7)
        fork = store.fork_conversation(cid, mid)
        assert store.messages(fork)[-1].reasoning == "先想一想：France…"
