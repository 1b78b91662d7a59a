"""HistoryStore on real SQLite files: CRUD, auto-title, search, cascade, streaming saves, edit/regenerate."""

from __future__ import annotations

import itertools
import sqlite3
import time

import pytest

from app.history.perf import PerfRecord
from app.history.schema import SCHEMA_VERSION
from app.history.store import (DEFAULT_TITLE, MODEL_KEY, ConflictError, HistoryStore, NotFoundError, auto_title,
                               default_path)
from tests.app.history.test_perf import METRICS


@pytest.fixture
def store(tmp_path):
    ticks = itertools.count(1_700_000_000)  # a clock that always moves: "newest first" is then exact
    s = HistoryStore(tmp_path / "history.sqlite3", clock=lambda: float(next(ticks)))
    yield s
    s.close()


def test_new_file_is_wal_with_foreign_keys_and_current_schema(tmp_path):
    path = tmp_path / "history.sqlite3"
    with HistoryStore(path) as s:
        assert s.notices == [] and not s.read_only
        assert s._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert s._conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    raw.close()


def test_default_path_is_in_the_data_dir(home):
    assert default_path() == home / "history.sqlite3"


def test_conversation_crud(store):
    cid = store.create_conversation("Trip", "Be brief.", {"temperature": 0.2, "model": "SmolLM2"})
    row = store.get_conversation(cid)
    assert (row.title, row.system_prompt, row.settings, row.message_count) == (
        "Trip", "Be brief.", {"temperature": 0.2, "model": "SmolLM2"}, 0)
    store.rename_conversation(cid, "Trip to 杭州")
    store.update_conversation_settings(cid, "Be kind.", {"temperature": 0.7})
    row = store.get_conversation(cid)
    assert (row.title, row.system_prompt, row.settings) == ("Trip to 杭州", "Be kind.",  # the model stays
                                                            {"temperature": 0.7, "model": "SmolLM2"})
    store.delete_conversation(cid)
    assert store.list_conversations() == []
    with pytest.raises(NotFoundError):
        store.get_conversation(cid)
    with pytest.raises(NotFoundError):
        store.rename_conversation(cid, "x")
    with pytest.raises(NotFoundError):
        store.add_message(cid, "user", "hi")


def test_list_is_newest_updated_first(store):
    a, b, c = (store.create_conversation(t) for t in "abc")
    assert [r.id for r in store.list_conversations()] == [c, b, a]
    store.add_message(a, "user", "bump")
    assert [r.id for r in store.list_conversations()] == [a, c, b]
    assert store.get_conversation(a).message_count == 1


def test_messages_round_trip_with_their_perf_records(store):
    cid = store.create_conversation()
    store.add_message(cid, "system", "You are terse.")
    u = store.add_message(cid, "user", "Hi")
    perf = PerfRecord.from_metrics(METRICS, "SmolLM2-135M-Instruct")
    a = store.add_message(cid, "assistant", "Hello!", "eos", perf)
    msgs = store.messages(cid)
    assert [(m.id, m.role, m.text, m.finish_reason) for m in msgs][1:] == [
        (u, "user", "Hi", None), (a, "assistant", "Hello!", "eos")]
    assert msgs[2].perf == perf and msgs[1].perf is None
    with pytest.raises(ValueError):
        store.add_message(cid, "robot", "x")
    with pytest.raises(ValueError):
        store.add_message(cid, "assistant", "x", "exploded")


def test_perf_records_come_back_after_reopening(tmp_path):
    path = tmp_path / "history.sqlite3"
    with HistoryStore(path) as s:
        cid = s.create_conversation()
        s.add_message(cid, "user", "Hi")
        s.add_message(cid, "assistant", "Hello", "eos", PerfRecord.from_metrics(METRICS, "m"))
    with HistoryStore(path) as s:
        (conv, msg), = s.all_perf_records()
        assert conv.id == cid and msg.perf.footer().startswith("41.8 tok/s")


def test_text_round_trips_exactly(store):
    cid = store.create_conversation()
    samples = ["nul\x00inside\x00", "中文、日本語、한국어、العربية、עברית 🙂👍🏽", "tabs\tand\r\nCRLF",
               "x" * 1_000_000, "", "   "]
    ids = [store.add_message(cid, "user", text) for text in samples]
    assert [m.text for m in store.messages(cid)] == samples
    assert [m.id for m in store.messages(cid)] == ids


def test_lone_surrogates_are_stored_as_replacement_characters(store):
    cid = store.create_conversation()
    store.add_message(cid, "user", "bad \ud800 half")
    assert store.messages(cid)[0].text == "bad \ufffd half"


def test_auto_title_from_first_user_message_only_while_default(store):
    cid = store.create_conversation()
    assert store.get_conversation(cid).title == DEFAULT_TITLE
    store.add_message(cid, "system", "system prompt is not a title")
    assert store.get_conversation(cid).title == DEFAULT_TITLE
    store.add_message(cid, "user", "\n  How   does the KV cache\twork?\nSecond line")
    assert store.get_conversation(cid).title == "How does the KV cache work?"
    store.add_message(cid, "user", "A later question")
    assert store.get_conversation(cid).title == "How does the KV cache work?"
    renamed = store.create_conversation()
    store.rename_conversation(renamed, "Mine")
    store.add_message(renamed, "user", "not a title")
    assert store.get_conversation(renamed).title == "Mine"
    long = auto_title("为什么" * 40)
    assert len(long) == 48 and long.endswith("…")


def test_search_titles_and_text_including_chinese_and_wildcards(store):
    a = store.create_conversation("KV cache notes")
    b = store.create_conversation("杭州旅行")
    c = store.create_conversation("Percentages")
    store.add_message(a, "user", "What is prefill?")
    store.add_message(b, "assistant", "西湖很美，适合散步。")
    store.add_message(c, "user", "50% off_today")
    store.add_message(c, "assistant", "before a NUL\x00after it")
    ids = lambda q: {r.id for r in store.list_conversations(q)}  # noqa: E731
    assert ids("kv CACHE") == {a}
    assert ids("prefill") == {a}
    assert ids("西湖") == {b} and ids("杭州") == {b}
    assert ids("%") == {c} and ids("_") == {c} and ids("0% o") == {c}
    assert ids("after it") == {c}
    assert ids("\\") == set() and ids("nothing like this") == set()
    assert ids("  ") == {a, b, c}


def test_delete_conversation_cascades_to_messages_and_perf(store):
    cid = store.create_conversation()
    keep = store.create_conversation()
    store.add_message(keep, "user", "stays")
    store.add_message(cid, "user", "q")
    store.add_message(cid, "assistant", "a", "eos", PerfRecord(model="m", decode_tok_s=10.0))
    store.delete_conversation(cid)
    conn = store._conn
    assert conn.execute("SELECT count(*) FROM messages WHERE conversation_id = ?", (cid,)).fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM perf").fetchone()[0] == 0
    assert [m.text for m in store.messages(keep)] == ["stays"]


def test_streaming_updates_then_final_save(store):
    cid = store.create_conversation()
    store.add_message(cid, "user", "count")
    mid = store.add_message(cid, "assistant", "")
    for partial in ("1", "1 2", "1 2 3"):
        store.update_message(mid, partial)
        assert store.messages(cid)[-1].text == partial and store.messages(cid)[-1].finish_reason is None
    store.update_message(mid, "1 2 3 4", "cancelled", PerfRecord(model="m", generated_tokens=4))
    last = store.messages(cid)[-1]
    assert (last.text, last.finish_reason, last.perf.generated_tokens) == ("1 2 3 4", "cancelled", 4)
    store.update_message(mid, "1 2 3 4 5", "length")  # "continue": perf left as it was
    assert store.messages(cid)[-1].perf.generated_tokens == 4
    with pytest.raises(NotFoundError):
        store.update_message(10_000, "x")


def test_delete_messages_from_cuts_the_tail_and_ids_are_not_reused(store):
    cid = store.create_conversation()
    other = store.create_conversation()
    ids = [store.add_message(cid, role, f"m{i}") for i, role in enumerate(["user", "assistant"] * 3)]
    foreign = store.add_message(other, "user", "other conversation")
    store.delete_messages_from(cid, ids[2])  # edit the second user message: it and everything after go
    assert [m.id for m in store.messages(cid)] == ids[:2]
    assert [m.id for m in store.messages(other)] == [foreign]
    new = store.add_message(cid, "user", "edited")
    assert new > max(ids + [foreign])
    with pytest.raises(NotFoundError):
        store.delete_messages_from(cid, foreign)


def test_fork_copies_the_history_up_to_a_message_with_its_settings_and_leaves_the_original(store):
    cid = store.create_conversation("Trip to 杭州", "Be brief.", {"temperature": 0.7, "seed": 3})
    perf = PerfRecord.from_metrics(METRICS, "m")
    ids = [store.add_message(cid, "user", "q1"), store.add_message(cid, "assistant", "a1\x00", "eos", perf),
           store.add_message(cid, "user", "q2"), store.add_message(cid, "assistant", "a2", "length")]
    before = [(m.id, m.role, m.text, m.finish_reason, m.perf) for m in store.messages(cid)]
    fork = store.fork_conversation(cid, ids[1])
    row = store.get_conversation(fork)
    assert (row.title, row.system_prompt, row.settings, row.message_count) == (
        "Trip to 杭州 (fork)", "Be brief.", {"temperature": 0.7, "seed": 3}, 2)
    copied = store.messages(fork)
    assert [(m.role, m.text, m.finish_reason) for m in copied] == [("user", "q1", None), ("assistant", "a1\x00", "eos")]
    assert not set(m.id for m in copied) & set(ids) and all(m.perf is None for m in copied)  # perf stays with a1
    assert [(m.id, m.role, m.text, m.finish_reason, m.perf) for m in store.messages(cid)] == before
    assert store.list_conversations()[0].id == fork  # the newest: it opens at the top of the list
    at_user = store.fork_conversation(cid, ids[2], title="分支")
    assert store.get_conversation(at_user).title == "分支" and [m.text for m in store.messages(at_user)][-1] == "q2"
    store.add_message(fork, "user", "another way")  # the fork goes on alone
    assert len(store.messages(cid)) == 4 and store.get_conversation(fork).title == "Trip to 杭州 (fork)"
    with pytest.raises(NotFoundError):
        store.fork_conversation(fork, ids[3])  # a message of another conversation
    with pytest.raises(NotFoundError):
        store.fork_conversation(10_000, ids[0])


def test_delete_from_refuses_to_drop_messages_another_store_added(tmp_path):
    """One conversation open in two windows (two processes, two stores on one file): a regenerate in the
    first used to delete the second's newer messages with its own stale reply."""
    path = tmp_path / "history.sqlite3"
    with HistoryStore(path) as first, HistoryStore(path) as second:
        cid = first.create_conversation()
        question, reply = first.add_message(cid, "user", "q1"), first.add_message(cid, "assistant", "a1")
        later = [second.add_message(cid, "user", "q2"), second.add_message(cid, "assistant", "a2")]
        with pytest.raises(ConflictError) as refused:  # the first window regenerates a1, knowing only a1
            first.delete_messages_from(cid, reply, known_ids=[reply])
        assert "another window" in str(refused.value) and "\n" not in str(refused.value)
        assert [m.id for m in second.messages(cid)] == [question, reply, *later]  # nothing deleted
        second.delete_messages_from(cid, later[1], known_ids=[later[1]])  # it knows everything from a2 on
        assert [m.id for m in first.messages(cid)] == [question, reply, later[0]]
        first.delete_messages_from(cid, later[0], known_ids=[later[0], 10_000])  # known ids already gone are fine
        assert [m.id for m in second.messages(cid)] == [question, reply]


def test_open_a_thousand_message_conversation(tmp_path, capsys):
    """Measured and reported (issue 5); no timing assertion: CI machines vary."""
    path = tmp_path / "history.sqlite3"
    with HistoryStore(path) as s:
        cid = s.create_conversation()
        perf = PerfRecord.from_metrics(METRICS, "m")
        for i in range(500):
            s.add_message(cid, "user", f"message {2 * i} " + "词" * 300)
            s.add_message(cid, "assistant", f"message {2 * i + 1} " + "词" * 300, "eos", perf)
    with HistoryStore(path) as s:
        start = time.perf_counter()
        messages = s.messages(cid)
        elapsed = time.perf_counter() - start
    assert len(messages) == 1000 and messages[-1].perf is not None and messages[0].text.startswith("message 0 ")
    with capsys.disabled():
        print(f"\n[measure] store.messages() of a 1,000-message conversation: {elapsed * 1000:.1f} ms")


def test_the_model_recorded_with_a_conversation_survives_its_settings_and_a_fork(store):
    cid = store.create_conversation(system_prompt="be brief", settings={"temperature": 0.2})
    store.add_message(cid, "user", "hi")
    model = {"model": "/models/a", "name": "a", "precision": "int4", "device": "cpu", "base_url": ""}
    store.set_conversation_model(cid, model)
    assert store.get_conversation(cid).settings == {"temperature": 0.2, MODEL_KEY: model}
    store.update_conversation_settings(cid, "be verbose", {"temperature": 0.7})  # the settings dialog's save
    assert store.get_conversation(cid).settings == {"temperature": 0.7, MODEL_KEY: model}
    later = {**model, "model": "/models/b", "name": "b"}
    store.set_conversation_model(cid, later)  # the latest one wins
    fork = store.fork_conversation(cid, store.messages(cid)[0].id)
    assert store.get_conversation(fork).settings[MODEL_KEY] == later
    with pytest.raises(NotFoundError):
        store.set_conversation_model(999, model)
