"""ChatGPT export import (``app.history.import_chatgpt``) on a realistic ``conversations.json`` written here: the main
thread from ``current_node``, a regenerated reply's branches as versions, an edited question's old branch left out,
system/tool/hidden nodes skipped, images as one line, 中文 text, missing fields; bad JSON is one line and writes
nothing; everything lands in real SQLite in one transaction."""

from __future__ import annotations

import json

import pytest

from app.history import versions
from app.history.import_chatgpt import (IMAGE_PLACEHOLDER, IMPORT_KEY, ChatGptImportError, parse, read_export,
                                        write)
from app.history.store import HistoryStore


def _node(nid, parent, children, role=None, parts=None, t=None, **message):
    node = {"id": nid, "parent": parent, "children": children, "message": None}
    if role is not None:
        node["message"] = {"id": nid, "author": {"role": role, "name": None, "metadata": {}}, "create_time": t,
                           "update_time": None, "content": {"content_type": message.pop("content_type", "text"),
                                                            "parts": parts},
                           "status": "finished_successfully", "end_turn": True, "weight": 1.0,
                           "metadata": message.pop("metadata", {}), "recipient": message.pop("recipient", "all")}
    return node


def export_sample() -> list[dict]:
    """Two conversations and two entries that hold none, shaped as ChatGPT's data export writes them."""
    image = {"content_type": "image_asset_pointer", "asset_pointer": "file-service://file-abc", "width": 512,
             "height": 512, "size_bytes": 40_000}
    first = {
        "title": "Paris trip 巴黎", "create_time": 1_700_000_000.5, "update_time": 1_700_000_900.0,
        "default_model_slug": "gpt-4o", "current_node": "a3", "conversation_id": "c-1", "id": "c-1",
        "mapping": {
            "root": _node("root", None, ["sys"]),
            "sys": _node("sys", "root", ["u1"], "system", [""],
                         metadata={"is_visually_hidden_from_conversation": True}),
            "u1": _node("u1", "sys", ["a1"], "user", ["What should I see in Paris? 请用中文。", image], 1_700_000_010.0,
                        content_type="multimodal_text"),
            "a1": _node("a1", "u1", ["u2-old", "u2"], "assistant", ["埃菲尔铁塔和卢浮宫。"], 1_700_000_020.0,
                        metadata={"model_slug": "gpt-4o"}),
            "u2-old": _node("u2-old", "a1", ["a-old"], "user", ["How tall is it"], 1_700_000_030.0),
            "a-old": _node("a-old", "u2-old", [], "assistant", ["330 m"], 1_700_000_031.0),
            "u2": _node("u2", "a1", ["a2-first", "tool-call", "a2-third"], "user", ["How tall is the tower?"],
                        1_700_000_040.0),
            "a2-first": _node("a2-first", "u2", [], "assistant", ["About 300 m."], 1_700_000_041.0),
            "tool-call": _node("tool-call", "u2", ["tool"], "assistant", ["search('eiffel height')"],
                               1_700_000_042.0, content_type="code", recipient="browser"),
            "tool": _node("tool", "tool-call", ["a2"], "tool", ["Eiffel Tower: 330 m"], 1_700_000_043.0),
            "a2": _node("a2", "tool", ["u3"], "assistant", ["It is 330 m tall."], 1_700_000_044.0),
            "a2-third": _node("a2-third", "u2", [], "assistant", ["Roughly 330 metres."], 1_700_000_045.0),
            "u3": _node("u3", "a2", ["a3"], "user", ["Thanks!"], None),
            "a3": _node("a3", "u3", [], "assistant", ["You're welcome 😊"], 1_700_000_060.0),
        },
    }
    second = {  # missing title, times and current_node: the last children lead the way
        "mapping": {
            "r": {"id": "r", "message": None, "children": ["x"]},
            "x": _node("x", "r", ["y"], "user", ["hi"]),
            "y": _node("y", "x", [], "assistant", ["hello"]),
        },
    }
    return [first, {"title": "empty", "mapping": {}}, second, "not a conversation"]


def test_the_main_thread_is_imported_with_versions_placeholders_and_timestamps():
    report = parse(json.dumps(export_sample(), ensure_ascii=False))
    assert report.skipped == 2
    paris, untitled = report.conversations
    assert (paris.title, paris.created, paris.updated, paris.model) == ("Paris trip 巴黎", 1_700_000_000.5,
                                                                        1_700_000_900.0, "gpt-4o")
    assert [(m.role, m.text) for m in paris.messages] == [
        ("user", f"What should I see in Paris? 请用中文。\n{IMAGE_PLACEHOLDER}"),
        ("assistant", "埃菲尔铁塔和卢浮宫。"),
        ("user", "How tall is the tower?"),  # the edit on the path; the old question's branch is not imported
        ("assistant", "It is 330 m tall."),  # the tool call and its result skipped
        ("user", "Thanks!"), ("assistant", "You're welcome 😊")]
    assert [m.created for m in paris.messages] == [1_700_000_010.0, 1_700_000_020.0, 1_700_000_040.0,
                                                   1_700_000_044.0, None, 1_700_000_060.0]
    regenerated = paris.messages[3]
    assert [v.text for v in regenerated.versions] == ["About 300 m.", "It is 330 m tall.", "Roughly 330 metres."]
    assert regenerated.shown == 1 and all(not m.versions for i, m in enumerate(paris.messages) if i != 3)
    assert (untitled.title, untitled.created, untitled.model) == ("ChatGPT chat", None, "")
    assert [(m.role, m.text) for m in untitled.messages] == [("user", "hi"), ("assistant", "hello")]


def test_an_import_lands_in_the_history_with_its_versions_and_marks(tmp_path):
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps(export_sample(), ensure_ascii=False), encoding="utf-8")
    seen = []
    report = read_export(path, seen.append)
    assert seen == sorted(seen) and seen[-1] == pytest.approx(1.0, abs=0.01) and len(seen) == 4
    with HistoryStore(tmp_path / "history.sqlite3") as store:
        paris, untitled = write(store, report, now=1_800_000_000.0)
        row = store.get_conversation(paris)
        assert (row.title, row.created, row.updated) == ("Paris trip 巴黎", 1_700_000_000.5, 1_700_000_900.0)
        assert row.settings == {IMPORT_KEY: {"source": "ChatGPT", "model": "gpt-4o"}} and "model" not in row.settings
        messages = store.messages(paris)
        assert [m.text for m in messages][-1] == "You're welcome 😊" and messages[4].created == 1_700_000_044.0
        assert {m.perf.model for m in messages if m.role == "assistant"} == {"ChatGPT import (gpt-4o)"}
        assert messages[3].perf.decode_tok_s is None  # no figures: nothing was measured here
        reply = messages[3].id
        assert versions.turns(store, paris) == {reply: versions.TurnVersions(reply, messages[2].id, 2, 3)}
        assert [v.text for v in versions.versions(store, reply)] == ["About 300 m.", "It is 330 m tall.",
                                                                     "Roughly 330 metres."]
        assert store.get_conversation(untitled).created == 1_800_000_000.0  # no time anywhere: the import's
        assert store.list_conversations("巴黎")[0].id == paris


@pytest.mark.parametrize("text, says", [
    ('[{"title": "a", "mapping": {}} {"title": "b"}]', "line 1, column 32"),
    ('[{"title": "a",\n "mapping": {"x": }}]', "line 2, column 19"),
    ('{"conversations": []}', "holds a list of conversations"),
    ("", "this file is empty"),
    ('[] []', "extra data after the list"),
])
def test_a_file_that_is_not_an_export_is_one_line_and_writes_nothing(tmp_path, text, says):
    path = tmp_path / "conversations.json"
    path.write_text(text, encoding="utf-8")
    with HistoryStore(tmp_path / "history.sqlite3") as store:
        with pytest.raises(ChatGptImportError) as raised:
            write(store, read_export(path), now=0.0)
        assert says in str(raised.value) and "\n" not in str(raised.value)
        assert store.list_conversations() == []


def test_bytes_that_are_not_utf8_are_one_line(tmp_path):
    path = tmp_path / "conversations.json"
    path.write_bytes(b'[{"title": "\xff"}]')
    with pytest.raises(ChatGptImportError, match="not UTF-8"):
        read_export(path)


def test_a_failure_while_writing_leaves_no_conversation_behind(tmp_path):
    report = parse(json.dumps(export_sample(), ensure_ascii=False))
    with HistoryStore(tmp_path / "history.sqlite3") as store:
        store._conn.execute("CREATE TRIGGER refuse BEFORE INSERT ON messages WHEN NEW.text = 'hello' "
                            "BEGIN SELECT RAISE(ABORT, 'disk full'); END")
        with pytest.raises(Exception, match="disk full"):
            write(store, report, now=0.0)
        assert store.list_conversations() == []


# -- hostile exports (issue 40, item 7): read without hanging or crashing, one line per skipped conversation ----------
def _hostile_export() -> str:
    good = export_sample()[0]
    cycle = {"title": "cycle", "mapping": {  # no current_node, and the last children lead back up: a -> b -> a
        "r": _node("r", None, ["a"]), "a": _node("a", "r", ["b"], "user", ["hi"]),
        "b": _node("b", "a", ["a"], "assistant", ["hello"])}}
    unhashable = {"title": "unhashable", "current_node": ["x"], "mapping": {
        "x": _node("x", {"p": 1}, [["y"], {"z": 1}], "user", ["hi"])}}
    huge = {"title": "huge", "create_time": 10 ** 400, "update_time": 1e308,
            "mapping": {"x": _node("x", None, [], "user", ["hi"], 10 ** 400)}}
    surrogate = {"title": "surrogate \ud800", "default_model_slug": "gpt-\ud800",
                 "mapping": {"x": _node("x", None, [], "assistant", ["hi \udfff"], metadata={"model_slug": "\ud800"})}}
    entries = [dict(good, title="future", update_time=1e17, create_time=1e308), cycle, unhashable, huge, surrogate]
    text = json.dumps(entries)  # ASCII: the lone surrogates are \u escapes, as a hostile file would hold them
    deep = '{"title": "deep", "mapping": ' + "[" * 100_000 + "]" * 100_000 + "}"
    return text[:-1] + ", " + deep + ', {"title": "after deep", "mapping": {"q": ' \
        + json.dumps(_node("q", None, [], "user", ["still here"])) + "}}]"


def _parse_within(text: str, seconds: float = 30.0):
    import threading

    done: list = []
    worker = threading.Thread(target=lambda: done.append(parse(text)), daemon=True)
    worker.start()
    worker.join(seconds)
    assert done, "the import did not finish (a cycle it did not detect?)"
    return done[0]


def test_a_hostile_export_imports_every_conversation_it_can_and_says_why_for_the_rest(tmp_path):
    report = _parse_within(_hostile_export())
    titles = [c.title for c in report.conversations]
    assert titles == ["future", "cycle", "unhashable", "huge", "surrogate \ufffd", "after deep"]
    assert report.skipped == 1 and len(report.problems) == 1
    assert "deep" in report.problems[0] and "\n" not in report.problems[0]
    assert [m.text for m in report.conversations[1].messages] == ["hi", "hello"]
    for conv in report.conversations:  # times past any calendar are dropped, not kept to crash a list later
        assert all(t is None or 0 <= t < 1e10 for t in [conv.created, conv.updated, *(m.created for m in conv.messages)])
    with HistoryStore(tmp_path / "history.sqlite3") as store:
        ids = write(store, report, now=1_800_000_000.0)
        assert len(ids) == 6
        rows = {row.id: row for row in store.list_conversations("")}
        assert all(0 <= rows[cid].updated < 1e10 and 0 <= rows[cid].created < 1e10 for cid in ids)
        surrogate = store.get_conversation(ids[4])
        assert surrogate.title == "surrogate \ufffd" and surrogate.settings[IMPORT_KEY]["model"] == "gpt-\ufffd"
        assert store.messages(ids[4])[0].text == "hi \ufffd"


def test_entries_without_a_conversation_are_each_said_in_one_line():
    report = parse(json.dumps(export_sample(), ensure_ascii=False))
    assert report.skipped == len(report.problems) == 2
    assert all(line and "\n" not in line for line in report.problems)
