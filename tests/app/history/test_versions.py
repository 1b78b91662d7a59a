"""Schema v5: reply versions (``app.history.versions``) on real SQLite: a regenerated reply kept as a version of its
turn with its own figures, paging swaps the shown one (the choice is stored, the message keeps its id), an edit that
cuts the turn takes its versions, a failed regenerate restores the reply; a v3 file is backed up and migrated."""

from __future__ import annotations

import sqlite3

import pytest

from app.history import versions
from app.history.export import to_json, to_markdown
from app.history.perf import PerfRecord
from app.history.schema import SCHEMA_VERSION, _SCHEMA_V2
from app.history.store import HistoryStore, NotFoundError


def _chat_with_three_versions(store: HistoryStore) -> tuple[int, int, int]:
    """A chat whose one reply was regenerated twice, as the window does it: keep, cut, new row."""
    cid = store.create_conversation()
    question = store.add_message(cid, "user", "Say hi")
    mid = store.add_message(cid, "assistant", "hi one", "eos", PerfRecord(model="m", decode_tok_s=10.0,
                                                                         generated_tokens=3))
    store.update_message(mid, "hi one", "eos", reasoning="thought one")
    for n, (text, speed) in enumerate((("hi two 二", 20.0), ("hi three", 30.0)), start=2):
        assert versions.keep(store, mid) == n - 1
        store.delete_messages_from(cid, mid, known_ids=(mid,))
        mid = store.add_message(cid, "assistant", "")
        store.update_message(mid, text, "length", PerfRecord(model="m", decode_tok_s=speed, generated_tokens=n + 2))
    return cid, question, mid


def test_regenerating_twice_keeps_three_versions_each_with_its_own_figures(tmp_path):
    with HistoryStore(tmp_path / "history.sqlite3") as store:
        cid, question, mid = _chat_with_three_versions(store)
        assert versions.turns(store, cid) == {mid: versions.TurnVersions(mid, question, 3, 3)}
        kept = versions.versions(store, mid)
        assert [(v.position, v.text, v.reasoning, v.finish_reason, v.perf.decode_tok_s, v.shown) for v in kept] == [
            (1, "hi one", "thought one", "eos", 10.0, False), (2, "hi two 二", "", "length", 20.0, False),
            (3, "hi three", "", "length", 30.0, True)]
        assert [m.text for m in store.messages(cid)] == ["Say hi", "hi three"]  # the conversation of record


def test_paging_swaps_the_shown_version_in_one_row_and_the_choice_survives_reopening(tmp_path):
    path = tmp_path / "history.sqlite3"
    with HistoryStore(path) as store:
        cid, question, mid = _chat_with_three_versions(store)
        row = versions.show(store, mid, 1)
        assert (row.id, row.text, row.reasoning, row.finish_reason, row.perf.decode_tok_s) == (
            mid, "hi one", "thought one", "eos", 10.0)
        assert versions.turns(store, cid)[mid].shown == 1
    with HistoryStore(path) as store:  # reopened: the choice, every version and its figures are kept
        assert [m.text for m in store.messages(cid)] == ["Say hi", "hi one"]
        assert [(v.text, v.perf.generated_tokens, v.shown) for v in versions.versions(store, mid)] == [
            ("hi one", 3, True), ("hi two 二", 4, False), ("hi three", 5, False)]
        versions.show(store, mid, 3)
        assert store.messages(cid)[-1].perf.decode_tok_s == 30.0
        versions.show(store, mid, 3)  # the one shown already: nothing changes
        assert versions.turns(store, cid)[mid] == versions.TurnVersions(mid, question, 3, 3)
        with pytest.raises(NotFoundError):
            versions.show(store, mid, 7)


def test_regenerating_a_paged_back_reply_adds_the_new_one_last(tmp_path):
    with HistoryStore(tmp_path / "history.sqlite3") as store:
        cid, question, mid = _chat_with_three_versions(store)
        versions.show(store, mid, 1)
        assert versions.keep(store, mid) == 1  # the shown one keeps its place
        store.delete_messages_from(cid, mid)
        new = store.add_message(cid, "assistant", "hi four", "eos")
        assert versions.turns(store, cid) == {new: versions.TurnVersions(new, question, 4, 4)}
        assert [v.text for v in versions.versions(store, new)] == ["hi one", "hi two 二", "hi three", "hi four"]


def test_a_regenerate_that_did_not_start_drops_the_kept_copy(tmp_path):
    with HistoryStore(tmp_path / "history.sqlite3") as store:
        cid, _question, mid = _chat_with_three_versions(store)
        place = versions.keep(store, mid)
        versions.drop(store, mid, place)
        assert versions.turns(store, cid)[mid].count == 3


def test_a_failed_regenerate_restores_the_reply_it_replaced(tmp_path):
    with HistoryStore(tmp_path / "history.sqlite3") as store:
        cid, question, mid = _chat_with_three_versions(store)
        versions.show(store, mid, 2)
        place = versions.keep(store, mid)
        store.delete_messages_from(cid, mid)  # the new reply failed before any text and was removed
        assert versions.turns(store, cid) == {}
        restored = versions.restore(store, cid, place)
        assert [m.text for m in store.messages(cid)] == ["Say hi", "hi two 二"]
        assert versions.turns(store, cid) == {restored: versions.TurnVersions(restored, question, 2, 3)}
        assert versions.restore(store, cid, place) is None  # the chat ends in a reply: nothing to restore


def test_editing_the_question_deletes_its_versions(tmp_path):
    with HistoryStore(tmp_path / "history.sqlite3") as store:
        cid, question, _mid = _chat_with_three_versions(store)
        store.delete_messages_from(cid, question)
        assert store._conn.execute("SELECT count(*) FROM versions").fetchone()[0] == 0


def test_exports_hold_the_chosen_version_and_json_all_of_them(tmp_path):
    import json

    with HistoryStore(tmp_path / "history.sqlite3") as store:
        cid, _question, mid = _chat_with_three_versions(store)
        versions.show(store, mid, 2)
        markdown = to_markdown(store, cid)
        assert "hi two 二" in markdown and "hi one" not in markdown and "version 2 of 3" in markdown
        reply = json.loads(to_json(store, cid))["messages"][-1]
        assert reply["text"] == "hi two 二"
        assert [(v["position"], v["text"], v["shown"], v["perf"]["decode_tok_s"]) for v in reply["versions"]] == [
            (1, "hi one", False, 10.0), (2, "hi two 二", True, 20.0), (3, "hi three", False, 30.0)]
        assert "versions" not in json.loads(to_json(store, cid))["messages"][0]


def test_a_v3_history_is_backed_up_and_migrated_with_every_row(tmp_path):
    path = tmp_path / "history.sqlite3"
    raw = sqlite3.connect(path)
    raw.executescript(_SCHEMA_V2)
    raw.execute("ALTER TABLE messages ADD COLUMN reasoning TEXT NOT NULL DEFAULT ''")
    raw.execute("INSERT INTO conversations VALUES (1, 'old chat', 1.0, 2.0, '', '{}')")
    raw.executemany("INSERT INTO messages VALUES (?, 1, ?, ?, ?, ?, ?)",
                    [(1, "user", "hi", 1.0, None, ""), (2, "assistant", "hello 你好", 2.0, "eos", "hm")])
    raw.execute("PRAGMA user_version = 3")
    raw.commit()
    raw.close()
    with HistoryStore(path) as store:
        backups = list(tmp_path.glob("history.v3-backup-*.sqlite3"))
        assert len(backups) == 1
        assert sqlite3.connect(backups[0]).execute("PRAGMA user_version").fetchone()[0] == 3
        assert store._conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION >= 5
        assert [(m.role, m.text, m.reasoning) for m in store.messages(1)] == [("user", "hi", ""),
                                                                              ("assistant", "hello 你好", "hm")]
        assert versions.keep(store, 2) == 1  # the new table works; the reply is still shown, as version 2
        assert versions.turns(store, 1) == {2: versions.TurnVersions(2, 1, 2, 2)}
